//! Drafters for speculative decoding on SharpDraft's model layer. Each kind lives in its own folder
//! (its training objective in `train.rs`) and implements [`Drafter`]; the decoder crate drives them and
//! verifies their proposals.

pub mod adamw;
pub mod adaptation;
mod causal_drafting;
pub mod checkpoint_kind;
pub mod dflash;
pub mod draft_vocabulary;
pub mod drafter;
pub mod drafter_kind;
pub mod drafter_stats;
pub mod eagle3;
pub mod option_value;
pub mod pard;
pub mod proposal;
mod random_init;
pub mod retrieval;
pub mod training;
pub mod vanilla;

pub use dflash::DFlashDrafter;
pub use drafter::{DraftContext, DraftError, Drafter, Feedback};
pub use drafter_kind::DrafterKind;
pub use drafter_stats::{AdaptationReport, DrafterStats};
pub use eagle3::{Eagle3Drafter, TreeShape};
pub use pard::PardDrafter;
pub use proposal::Proposal;
pub use vanilla::VanillaDrafter;
