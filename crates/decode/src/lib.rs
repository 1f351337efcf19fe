//! The speculative decoding engine: lossless verification as pure functions ([`verify`]) and one
//! driver loop for every drafter ([`driver`]), with raw per-cycle records ([`records`]); and the
//! drafter factory every decoding command and run uses: a drafter specification, from YAML or flags,
//! built into a drafter for a target ([`drafter_spec`]), with its query scaling ([`scaling`]); and the
//! goodput gate, which picks each cycle's depth from measured cost, a plain target step included
//! ([`gate`]).

pub mod drafter_spec;
pub mod driver;
pub mod gate;
pub mod records;
pub mod scaling;
pub mod verify;

pub use driver::{
    speculative_generate, speculative_generate_from, DecodeError, Session, SpecOptions,
};
pub use records::{peak_rss_bytes, reset_peak_rss, CycleRecord, MemoryReport, SpecReport};
pub use verify::{verify_greedy, verify_stochastic, Verdict};
