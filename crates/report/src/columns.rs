//! Rows of a struct as the columns of a [`Table`], through serde: the struct declares its columns once,
//! in order, and nothing writes a column by name. Each field is a column named after it; a field that
//! is itself a struct (an [`Interval`](crate::intervals::Interval)) spreads over one column per field
//! of its own, the first named after the field holding it and the others `<holder>_<field>`, so
//! `tau: Interval { estimate, lo, hi }` is the columns `tau`, `tau_lo`, `tau_hi`. Integers are INT64
//! columns (unsigned ones saturate, as [`Rows::u`]), floats DOUBLE, strings and unit enum variants
//! UTF-8; anything else (a sequence, `None`) is refused, naming the column. A row may
//! `#[serde(flatten)]` a struct of shared columns (a request's key): its fields are the row's columns
//! in their place. [`rows_of`] reads a table back into its rows.

use crate::error::{ReportError, Result};
use crate::table::Column;
use crate::table::{Rows, Table};
use serde::de::value::{F64Deserializer, I64Deserializer, StrDeserializer};
use serde::de::{DeserializeOwned, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::ser::{Impossible, Serialize, SerializeMap, SerializeStruct, Serializer};

impl serde::ser::Error for ReportError {
    fn custom<T: std::fmt::Display>(message: T) -> Self {
        ReportError::Invalid(message.to_string())
    }
}

/// The table of `rows`, one row each, its columns in the order the struct declares its fields.
pub fn table_of<T: Serialize>(rows: &[T]) -> Result<Table> {
    let mut columns = Rows::default();
    for row in rows {
        row.serialize(Value {
            columns: &mut columns,
            name: String::new(),
        })?;
    }
    Ok(columns.table())
}

/// One value bound for the column `name` (empty at the top, where only a struct belongs).
struct Value<'r> {
    columns: &'r mut Rows,
    name: String,
}

impl Value<'_> {
    fn scalar(self, push: impl FnOnce(&mut Rows, &str)) -> Result<()> {
        if self.name.is_empty() {
            return Err(ReportError::Invalid(
                "a table row must be a struct of named fields".into(),
            ));
        }
        push(self.columns, &self.name);
        Ok(())
    }

    fn refused(self, what: &str) -> ReportError {
        ReportError::Invalid(format!("column {:?}: {what} is not a column", self.name))
    }
}

/// The fields of a struct: its columns, named under `holder` (empty at the top); `key`, a map's key
/// waiting for its value.
struct Fields<'r> {
    columns: &'r mut Rows,
    holder: String,
    first: bool,
    key: Option<String>,
}

impl SerializeMap for Fields<'_> {
    type Ok = ();
    type Error = ReportError;

    /// A key names a column: it is read as a one-row string column of its own.
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<()> {
        let mut scratch = Rows::default();
        key.serialize(Value {
            columns: &mut scratch,
            name: "key".into(),
        })?;
        match scratch.table().columns.pop() {
            Some((_, Column::Str(mut names))) => self.key = names.pop(),
            _ => {
                return Err(ReportError::Invalid(
                    "a table row's map key must be a column name (a string)".into(),
                ))
            }
        }
        Ok(())
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        let name = self.key.take().ok_or_else(|| {
            ReportError::Invalid("a table row's map gave a value before its key".into())
        })?;
        value.serialize(Value {
            columns: self.columns,
            name,
        })
    }

    fn end(self) -> Result<()> {
        Ok(())
    }
}

impl SerializeStruct for Fields<'_> {
    type Ok = ();
    type Error = ReportError;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        field: &'static str,
        value: &T,
    ) -> Result<()> {
        let name = if self.holder.is_empty() {
            field.to_string()
        } else if self.first {
            self.holder.clone()
        } else {
            format!("{}_{field}", self.holder)
        };
        self.first = false;
        value.serialize(Value {
            columns: self.columns,
            name,
        })
    }

    fn end(self) -> Result<()> {
        Ok(())
    }
}

impl<'r> Serializer for Value<'r> {
    type Ok = ();
    type Error = ReportError;
    type SerializeSeq = Impossible<(), ReportError>;
    type SerializeTuple = Impossible<(), ReportError>;
    type SerializeTupleStruct = Impossible<(), ReportError>;
    type SerializeTupleVariant = Impossible<(), ReportError>;
    type SerializeMap = Fields<'r>;
    type SerializeStruct = Fields<'r>;
    type SerializeStructVariant = Impossible<(), ReportError>;

    fn serialize_bool(self, v: bool) -> Result<()> {
        self.scalar(|c, n| c.i(n, i64::from(v)))
    }
    fn serialize_i8(self, v: i8) -> Result<()> {
        self.serialize_i64(v.into())
    }
    fn serialize_i16(self, v: i16) -> Result<()> {
        self.serialize_i64(v.into())
    }
    fn serialize_i32(self, v: i32) -> Result<()> {
        self.serialize_i64(v.into())
    }
    fn serialize_i64(self, v: i64) -> Result<()> {
        self.scalar(|c, n| c.i(n, v))
    }
    fn serialize_u8(self, v: u8) -> Result<()> {
        self.serialize_u64(v.into())
    }
    fn serialize_u16(self, v: u16) -> Result<()> {
        self.serialize_u64(v.into())
    }
    fn serialize_u32(self, v: u32) -> Result<()> {
        self.serialize_u64(v.into())
    }
    fn serialize_u64(self, v: u64) -> Result<()> {
        self.scalar(|c, n| c.u(n, v))
    }
    fn serialize_f32(self, v: f32) -> Result<()> {
        self.serialize_f64(v.into())
    }
    fn serialize_f64(self, v: f64) -> Result<()> {
        self.scalar(|c, n| c.f(n, v))
    }
    fn serialize_char(self, v: char) -> Result<()> {
        self.scalar(|c, n| c.s(n, v.to_string()))
    }
    fn serialize_str(self, v: &str) -> Result<()> {
        self.scalar(|c, n| c.s(n, v))
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<()> {
        Err(self.refused("a byte string"))
    }
    fn serialize_none(self) -> Result<()> {
        Err(self.refused("a missing value (None)"))
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<()> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<()> {
        Err(self.refused("()"))
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<()> {
        Err(self.refused("a unit struct"))
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<()> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<()> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<()> {
        Err(self.refused("an enum variant with a value"))
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq> {
        Err(self.refused("a sequence"))
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple> {
        Err(self.refused("a tuple"))
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct> {
        Err(self.refused("a tuple struct"))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant> {
        Err(self.refused("an enum variant with values"))
    }
    /// A row with a flattened struct comes as a map of its column names to its values.
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap> {
        if !self.name.is_empty() {
            return Err(self.refused("a map"));
        }
        Ok(Fields {
            columns: self.columns,
            holder: String::new(),
            first: true,
            key: None,
        })
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct> {
        Ok(Fields {
            columns: self.columns,
            holder: self.name,
            first: true,
            key: None,
        })
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant> {
        Err(self.refused("an enum variant with fields"))
    }
}

/// The rows of `table` as `T`s, the inverse of [`table_of`] for flat rows: each row is read as a map
/// of its column names to its values, so a field is the column of its name (a flattened struct's
/// fields too), a column the struct does not name is left alone, and a field with no column takes its
/// `#[serde(default)]` (a table written before the column existed). Errors name the row and the cause.
pub fn rows_of<T: DeserializeOwned>(table: &Table) -> Result<Vec<T>> {
    (0..table.rows())
        .map(|row| {
            T::deserialize(RowDeserializer {
                table,
                row,
                next: 0,
            })
            .map_err(|e| ReportError::Invalid(format!("row {row}: {e}")))
        })
        .collect()
}

impl serde::de::Error for ReportError {
    fn custom<T: std::fmt::Display>(message: T) -> Self {
        ReportError::Invalid(message.to_string())
    }
}

/// Row `row` of `table` as a map from column names to values; `next` is the column read next.
struct RowDeserializer<'t> {
    table: &'t Table,
    row: usize,
    next: usize,
}

impl<'de> Deserializer<'de> for RowDeserializer<'_> {
    type Error = ReportError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_map(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
        unit unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier
        ignored_any
    }
}

impl<'de> MapAccess<'de> for RowDeserializer<'_> {
    type Error = ReportError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        match self.table.columns.get(self.next) {
            Some((name, _)) => seed.deserialize(StrDeserializer::new(name)).map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value> {
        let (name, column) = &self.table.columns[self.next];
        self.next += 1;
        let value = match column {
            Column::I64(v) => seed.deserialize(I64Deserializer::new(v[self.row])),
            Column::F64(v) => seed.deserialize(F64Deserializer::new(v[self.row])),
            Column::Str(v) => seed.deserialize(StrDeserializer::new(&v[self.row])),
        };
        value.map_err(|e: ReportError| ReportError::Invalid(format!("column {name:?}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intervals::Interval;
    use serde::{Deserialize, Serialize};

    #[derive(Serialize)]
    struct Cell {
        method: String,
        requests: usize,
        n0: i64,
        tau: Interval,
        p: f64,
    }

    fn cell(method: &str, estimate: f64) -> Cell {
        Cell {
            method: method.into(),
            requests: 3,
            n0: -1,
            tau: Interval {
                estimate,
                lo: estimate - 0.5,
                hi: estimate + 0.5,
            },
            p: 0.25,
        }
    }

    #[test]
    fn a_struct_is_a_row_and_an_interval_field_three_columns_named_after_it() {
        let table = table_of(&[cell("fixed", 2.0), cell("off", 1.0)]).unwrap();
        let names: Vec<&str> = table.columns.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["method", "requests", "n0", "tau", "tau_lo", "tau_hi", "p"]
        );
        assert_eq!(
            table.column("method").unwrap(),
            &Column::Str(vec!["fixed".into(), "off".into()])
        );
        assert_eq!(table.i64s("requests").unwrap(), [3, 3]);
        assert_eq!(table.i64s("n0").unwrap(), [-1, -1]);
        assert_eq!(table.f64s("tau").unwrap(), [2.0, 1.0]);
        assert_eq!(table.f64s("tau_lo").unwrap(), [1.5, 0.5]);
        assert_eq!(table.f64s("tau_hi").unwrap(), [2.5, 1.5]);
    }

    #[test]
    fn a_value_that_is_no_column_is_refused_naming_its_field() {
        #[derive(Serialize)]
        struct Ragged {
            ids: Vec<i64>,
        }
        let error = table_of(&[Ragged { ids: vec![1] }]).unwrap_err();
        assert!(error.to_string().contains("\"ids\""), "{error}");
        #[derive(Serialize)]
        struct Maybe {
            slope: Option<f64>,
        }
        let error = table_of(&[Maybe { slope: None }]).unwrap_err();
        assert!(error.to_string().contains("\"slope\""), "{error}");
        assert!(table_of(&[1.0_f64]).is_err(), "a bare number is no row");
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Key {
        method: String,
        prompt: u64,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Setting {
        LongPrompt,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Request {
        target: String,
        #[serde(flatten)]
        key: Key,
        setting: Setting,
        tokens: usize,
        seconds: f64,
        #[serde(default = "unknown")]
        version: String,
    }

    fn unknown() -> String {
        "unknown".into()
    }

    #[test]
    fn a_flattened_key_is_columns_in_its_place_and_rows_read_back_as_they_were_written() {
        let rows = vec![Request {
            target: "t".into(),
            key: Key {
                method: "fixed".into(),
                prompt: 7,
            },
            setting: Setting::LongPrompt,
            tokens: 3,
            seconds: 0.5,
            version: "1".into(),
        }];
        let table = table_of(&rows).unwrap();
        let names: Vec<&str> = table.columns.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["target", "method", "prompt", "setting", "tokens", "seconds", "version"]
        );
        assert_eq!(table.strs("setting").unwrap(), ["long_prompt"]);
        assert_eq!(rows_of::<Request>(&table).unwrap(), rows);
    }

    #[test]
    fn a_column_a_table_lacks_takes_its_default_and_a_wrong_one_is_named() {
        let mut table = table_of(&[Request {
            target: "t".into(),
            key: Key {
                method: "off".into(),
                prompt: 0,
            },
            setting: Setting::LongPrompt,
            tokens: 1,
            seconds: 1.0,
            version: "2".into(),
        }])
        .unwrap();
        table.columns.retain(|(name, _)| name != "version");
        assert_eq!(rows_of::<Request>(&table).unwrap()[0].version, "unknown");
        for (name, column) in &mut table.columns {
            if name == "setting" {
                *column = Column::Str(vec!["sideways".into()]);
            }
        }
        let error = rows_of::<Request>(&table).unwrap_err().to_string();
        assert!(
            error.contains("row 0") && error.contains("sideways"),
            "{error}"
        );
    }
}
