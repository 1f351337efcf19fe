//! Columnar results written as parquet (loss curves, probe statistics, ablations): named typed columns of
//! equal length, written atomically and read back.

use crate::error::{ReportError, Result};
use parquet::basic::{ConvertedType, Repetition, Type as PhysicalType};
use parquet::data_type::{ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::SerializedFileWriter;
use parquet::record::Field;
use parquet::schema::types::Type;
use std::path::Path;
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq)]
pub enum Column {
    I64(Vec<i64>),
    F64(Vec<f64>),
    Str(Vec<String>),
}

impl Column {
    pub fn len(&self) -> usize {
        match self {
            Column::I64(v) => v.len(),
            Column::F64(v) => v.len(),
            Column::Str(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A table built row by row: each call appends one value to the column of that name (made on first use,
/// in call order), so a writer lists a row's values once, in the order its columns appear.
#[derive(Default)]
pub struct Rows {
    columns: Vec<(String, Column)>,
}

impl Rows {
    fn column(&mut self, name: &str, empty: Column) -> &mut Column {
        if let Some(i) = self.columns.iter().position(|(n, _)| n == name) {
            return &mut self.columns[i].1;
        }
        self.columns.push((name.to_string(), empty));
        &mut self.columns.last_mut().expect("just pushed").1
    }

    pub fn s(&mut self, name: &str, v: impl Into<String>) {
        if let Column::Str(c) = self.column(name, Column::Str(Vec::new())) {
            c.push(v.into());
        }
    }

    pub fn i(&mut self, name: &str, v: i64) {
        if let Column::I64(c) = self.column(name, Column::I64(Vec::new())) {
            c.push(v);
        }
    }

    /// An unsigned count as INT64, saturating (counts of this size never occur; no value wraps).
    pub fn u(&mut self, name: &str, v: u64) {
        self.i(name, i64::try_from(v).unwrap_or(i64::MAX));
    }

    pub fn f(&mut self, name: &str, v: f64) {
        if let Column::F64(c) = self.column(name, Column::F64(Vec::new())) {
            c.push(v);
        }
    }

    pub fn table(self) -> Table {
        Table {
            columns: self.columns,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Table {
    pub columns: Vec<(String, Column)>,
}

impl Table {
    pub fn with(mut self, name: &str, column: Column) -> Self {
        self.columns.push((name.to_string(), column));
        self
    }

    pub fn rows(&self) -> usize {
        self.columns.first().map_or(0, |(_, c)| c.len())
    }

    pub fn column(&self, name: &str) -> Result<&Column> {
        self.columns
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c)
            .ok_or_else(|| ReportError::Invalid(format!("no column {name:?}")))
    }

    pub fn f64s(&self, name: &str) -> Result<&[f64]> {
        match self.column(name)? {
            Column::F64(v) => Ok(v),
            _ => Err(ReportError::Invalid(format!("column {name:?} is not f64"))),
        }
    }

    pub fn i64s(&self, name: &str) -> Result<&[i64]> {
        match self.column(name)? {
            Column::I64(v) => Ok(v),
            _ => Err(ReportError::Invalid(format!("column {name:?} is not i64"))),
        }
    }

    pub fn strs(&self, name: &str) -> Result<&[String]> {
        match self.column(name)? {
            Column::Str(v) => Ok(v),
            _ => Err(ReportError::Invalid(format!(
                "column {name:?} is not a string column"
            ))),
        }
    }

    /// Column `name` as f64, or `fallback` in every row when the table has no such column (a table
    /// written before the column existed).
    pub fn f64s_or(&self, name: &str, fallback: f64) -> Result<Vec<f64>> {
        match self.column(name) {
            Ok(_) => Ok(self.f64s(name)?.to_vec()),
            Err(_) => Ok(vec![fallback; self.rows()]),
        }
    }

    /// Writes one row group to `path` through a temporary file and a rename.
    pub fn write_parquet(&self, path: &Path) -> Result<()> {
        let rows = self.rows();
        if let Some((name, column)) = self.columns.iter().find(|(_, c)| c.len() != rows) {
            return Err(ReportError::Invalid(format!(
                "column {name:?} has {} rows, the first column {rows}",
                column.len()
            )));
        }
        let tmp = path.with_extension("parquet.tmp");
        let file = std::fs::File::create(&tmp)
            .map_err(|e| ReportError::failed(format_args!("creating {}", tmp.display()), e))?;
        self.write_row_group(file)
            .map_err(|e| ReportError::failed(format_args!("writing {}", tmp.display()), e))?;
        std::fs::rename(&tmp, path)
            .map_err(|e| ReportError::failed(format_args!("writing {}", path.display()), e))
    }

    /// The schema (every column REQUIRED; strings UTF-8) and one row group of every column, to `file`.
    fn write_row_group(&self, file: std::fs::File) -> parquet::errors::Result<()> {
        let fields = self
            .columns
            .iter()
            .map(|(name, column)| {
                let builder = match column {
                    Column::I64(_) => Type::primitive_type_builder(name, PhysicalType::INT64),
                    Column::F64(_) => Type::primitive_type_builder(name, PhysicalType::DOUBLE),
                    Column::Str(_) => Type::primitive_type_builder(name, PhysicalType::BYTE_ARRAY)
                        .with_converted_type(ConvertedType::UTF8),
                };
                Ok(Arc::new(
                    builder.with_repetition(Repetition::REQUIRED).build()?,
                ))
            })
            .collect::<parquet::errors::Result<Vec<_>>>()?;
        let schema = Arc::new(
            Type::group_type_builder("schema")
                .with_fields(fields)
                .build()?,
        );
        let mut writer =
            SerializedFileWriter::new(file, schema, Arc::new(WriterProperties::builder().build()))?;
        let mut group = writer.next_row_group()?;
        for (_, column) in &self.columns {
            let mut out = group.next_column()?.ok_or_else(|| {
                parquet::errors::ParquetError::General("schema and columns disagree".into())
            })?;
            match column {
                Column::I64(v) => {
                    out.typed::<Int64Type>().write_batch(v, None, None)?;
                }
                Column::F64(v) => {
                    out.typed::<DoubleType>().write_batch(v, None, None)?;
                }
                Column::Str(v) => {
                    let bytes: Vec<ByteArray> =
                        v.iter().map(|s| ByteArray::from(s.as_str())).collect();
                    out.typed::<ByteArrayType>()
                        .write_batch(&bytes, None, None)?;
                }
            }
            out.close()?;
        }
        group.close()?;
        writer.close()?;
        Ok(())
    }

    /// Reads a file written by [`Self::write_parquet`] (INT64, DOUBLE and UTF-8 columns).
    pub fn read_parquet(path: &Path) -> Result<Self> {
        let file = std::fs::File::open(path)
            .map_err(|e| ReportError::failed(format_args!("opening {}", path.display()), e))?;
        let reader = SerializedFileReader::new(file).map_err(|e| {
            ReportError::failed(format_args!("{}: not a parquet file", path.display()), e)
        })?;
        let unreadable = |e: parquet::errors::ParquetError| {
            ReportError::failed(format_args!("reading {}", path.display()), e)
        };
        let schema = reader.metadata().file_metadata().schema_descr_ptr();
        let mut columns: Vec<(String, Column)> = schema
            .columns()
            .iter()
            .map(|c| {
                let column = match c.physical_type() {
                    PhysicalType::INT64 => Column::I64(Vec::new()),
                    PhysicalType::DOUBLE => Column::F64(Vec::new()),
                    PhysicalType::BYTE_ARRAY => Column::Str(Vec::new()),
                    other => {
                        return Err(ReportError::Invalid(format!(
                            "{}: column {} has unsupported type {other}",
                            path.display(),
                            c.name()
                        )))
                    }
                };
                Ok((c.name().to_string(), column))
            })
            .collect::<Result<_>>()?;
        for row in reader.get_row_iter(None).map_err(unreadable)? {
            let row = row.map_err(unreadable)?;
            for ((name, field), (_, column)) in row.get_column_iter().zip(&mut columns) {
                match (field, column) {
                    (Field::Long(v), Column::I64(out)) => out.push(*v),
                    (Field::Double(v), Column::F64(out)) => out.push(*v),
                    (Field::Str(v), Column::Str(out)) => out.push(v.clone()),
                    (other, _) => {
                        return Err(ReportError::Invalid(format!(
                            "{}: column {name} holds {other:?}",
                            path.display()
                        )))
                    }
                }
            }
        }
        Ok(Self { columns })
    }
}
