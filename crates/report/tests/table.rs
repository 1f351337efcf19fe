//! Parquet tables round-trip their typed columns and refuse ragged ones.
use sharpdraft_report::table::{Column, Table};

#[test]
fn a_table_round_trips_through_parquet() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.parquet");
    let table = Table::default()
        .with("layer", Column::I64(vec![0, 0, 1]))
        .with("mass", Column::F64(vec![0.5, 0.25, f64::NAN]))
        .with(
            "estimator",
            Column::Str(vec!["i".into(), "ii".into(), "iii".into()]),
        );
    table.write_parquet(&path).unwrap();
    let back = Table::read_parquet(&path).unwrap();
    assert_eq!(back.i64s("layer").unwrap(), &[0, 0, 1]);
    assert_eq!(back.f64s("mass").unwrap()[..2], [0.5, 0.25]);
    assert!(back.f64s("mass").unwrap()[2].is_nan());
    assert_eq!(
        back.column("estimator").unwrap(),
        &Column::Str(vec!["i".into(), "ii".into(), "iii".into()])
    );
    assert!(
        !dir.path().join("t.parquet.tmp").exists(),
        "written through a temporary file"
    );
}

#[test]
fn ragged_columns_and_missing_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let ragged = Table::default()
        .with("a", Column::I64(vec![1, 2]))
        .with("b", Column::F64(vec![1.0]));
    let err = format!(
        "{:#}",
        ragged
            .write_parquet(&dir.path().join("r.parquet"))
            .unwrap_err()
    );
    assert!(
        err.contains("column \"b\" has 1 rows, the first column 2"),
        "{err}"
    );
    let err = format!(
        "{:#}",
        Table::read_parquet(&dir.path().join("absent.parquet")).unwrap_err()
    );
    assert!(err.contains("absent.parquet"), "{err}");
}
