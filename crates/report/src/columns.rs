//! Rows of a struct as the columns of a [`Table`], through serde: the struct declares its columns once,
//! in order, and nothing writes a column by name. Each field is a column named after it; a field that
//! is itself a struct (an [`Interval`](crate::intervals::Interval)) spreads over one column per field
//! of its own, the first named after the field holding it and the others `<holder>_<field>`, so
//! `tau: Interval { estimate, lo, hi }` is the columns `tau`, `tau_lo`, `tau_hi`. Integers are INT64
//! columns (unsigned ones saturate, as [`Rows::u`]), floats DOUBLE, strings and unit enum variants
//! UTF-8; anything else (a sequence, a map, `None`) is refused, naming the column.

use crate::error::{ReportError, Result};
use crate::table::{Rows, Table};
use serde::ser::{Impossible, Serialize, SerializeStruct, Serializer};

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

/// The fields of a struct: its columns, named under `holder` (empty at the top).
struct Fields<'r> {
    columns: &'r mut Rows,
    holder: String,
    first: bool,
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
    type SerializeMap = Impossible<(), ReportError>;
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
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap> {
        Err(self.refused("a map"))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct> {
        Ok(Fields {
            columns: self.columns,
            holder: self.name,
            first: true,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intervals::Interval;
    use crate::table::Column;
    use serde::Serialize;

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
}
