//! The speculative decoding engine: lossless verification as pure functions ([`verify`]) and one
//! driver loop for every drafter ([`driver`]), with raw per-cycle records ([`records`]).

pub mod driver;
pub mod records;
pub mod verify;

pub use driver::{speculative_generate, speculative_generate_from, DecodeError, Session, SpecOptions};
pub use records::{peak_rss_bytes, reset_peak_rss, CycleRecord, MemoryReport, SpecReport};
pub use verify::{verify_greedy, verify_stochastic, Verdict};
