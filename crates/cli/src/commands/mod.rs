//! One file per command of the `sharpdraft` tree (`bench_*` for `sharpdraft bench`'s subcommands), with
//! the flag groups commands share (`common_flags`: device, dtype and scaling modes; `prompt_set`),
//! the benchmarks' flag bounds (`bounds`) and the paired rounds of one-off speed-ups (`paired_rounds`).

pub mod bench;
pub mod bench_attention_stats;
pub mod bench_continuations;
pub mod bench_draft_time;
pub mod bench_load;
pub mod bench_rows;
pub mod bench_scaling;
pub mod bench_speculative;
pub mod bounds;
pub mod common_flags;
pub mod derive;
pub mod experiment;
pub mod generate;
pub mod models;
pub mod paired_rounds;
pub mod prompt_set;
pub mod tau;
