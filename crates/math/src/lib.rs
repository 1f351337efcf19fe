//! Numerical core of SharpDraft (no libtorch): the top-k attention mass model of
//! derivations/top-k-mass-scaling.md, its exact correction, closed-form fixed slopes and calibration from
//! attention statistics.
//!
//! Map from derivations/top-k-mass-scaling.md to modules:
//! * §1 top-k mass, identity (I1), Lemma 1 -> [`mass`]
//! * §2 Model A, Theorem 1, heterogeneous advantages -> [`model_a`]
//! * §3 Model B -> [`model_b`]
//! * §4 fixed slopes, Theorem 2 -> [`slopes`]
//! * §5 calibration estimators -> [`calibrate`]
//! * §6 deployable schedule -> [`schedule`]

pub mod calibrate;
pub mod error;
pub mod mass;
pub mod model_a;
pub mod model_b;
pub mod roots;
pub mod schedule;
pub mod slopes;

pub use calibrate::{
    calibrate, BinStats, Calibration, CalibrationOptions, Estimator, HeadStats, MassReference,
    RowLogits, TargetDilution,
};
pub use error::{MathError, Result};
pub use mass::{top_k_mass, TopKMass};
pub use model_a::{CorrectionReach, ModelA, PlantedKeys};
pub use model_b::ModelB;
pub use schedule::{
    llama4_scale, logn_scale, scale_at, yarn_scale, Beta, DataFingerprint, ExactScales,
    ScaleSchedule, LLAMA4_ATTN_SCALE, LLAMA4_FLOOR_SCALE,
};
pub use slopes::{DeployedSlopes, SlopesInC};
