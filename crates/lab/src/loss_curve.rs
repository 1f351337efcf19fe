//! A training run's loss curve: `loss.parquet` (step, loss, seconds) and `loss.png` (the loss and its
//! moving average against the step), rewritten at every checkpoint.

use crate::error::Result;
use sharpdraft_draft::training::TrainState;
use sharpdraft_report::charts::{line_chart, Chart, Series};
use sharpdraft_report::table::{Column, Table};
use std::path::Path;

/// Window of the moving average drawn over the noisy per-step loss.
const SMOOTHING: usize = 50;

pub fn write(state: &TrainState, dir: &Path, title: &str) -> Result<()> {
    let steps: Vec<i64> = (1..=state.losses.len() as i64).collect();
    let mut seconds = state.seconds.clone();
    seconds.resize(state.losses.len(), f64::NAN);
    Table::default()
        .with("step", Column::I64(steps.clone()))
        .with("loss", Column::F64(state.losses.clone()))
        .with("seconds", Column::F64(seconds))
        .write_parquet(&dir.join("loss.parquet"))?;
    let raw: Vec<(f64, f64)> = steps
        .iter()
        .zip(&state.losses)
        .map(|(&s, &l)| (s as f64, l))
        .collect();
    let smoothed: Vec<(f64, f64)> = (0..raw.len())
        .map(|i| {
            let from = (i + 1).saturating_sub(SMOOTHING);
            let window = &state.losses[from..=i];
            (raw[i].0, window.iter().sum::<f64>() / window.len() as f64)
        })
        .collect();
    let chart = Chart {
        title,
        x_label: "step",
        y_label: "loss",
        log_x: false,
        reference_y: None,
    };
    let series = [
        Series {
            name: "loss".into(),
            points: raw,
            intervals: Vec::new(),
            colour: None,
        },
        Series {
            name: format!("mean of {SMOOTHING} steps"),
            points: smoothed,
            intervals: Vec::new(),
            colour: None,
        },
    ];
    line_chart(&dir.join("loss.png"), &chart, &series).map_err(Into::into)
}
