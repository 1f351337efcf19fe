//! The attention-statistics probe (derivations/top-k-mass-scaling.md §5): runs a drafter (or the target) over long real
//! contexts and records, per layer, query head and length bin, the visible-key count n, the top-k mass
//! `M_k`, background moments, the attention-weighted top-vs-background gap, entropy, log-sum-exp and the
//! sink share, plus `M_k` on a grid of query scales for the exact estimator. Streaming: a few query rows
//! at a time, never an n x n matrix.

pub mod attention_stats_kernel;
pub mod calibrate;
pub mod calibration_input;
pub mod error;
pub mod length_bins;
pub mod recorder;
pub mod row_statistics;
pub mod run;
pub mod subjects;

pub use attention_stats_kernel::AttentionStatsKernel;
pub use calibration_input::head_stats;
pub use error::ProbeError;
pub use length_bins::LengthBins;
pub use recorder::{BinRecord, CurveRecord, ProbeRecorder, ProbeSettings, RowFilter};
pub use subjects::{probe_sequence, Subject};
