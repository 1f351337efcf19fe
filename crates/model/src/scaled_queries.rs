//! What query scaling needs of the model it scales, drafting or training: the shape a schedule must
//! have, the training length n0 its checkpoint records, and where the scaling goes. Set once when the
//! model is set up (a drafter before it drafts, an objective before it trains, a probed model before it
//! is probed); decoding never asks for it again.

use crate::query_scaling::QueryScaling;
use crate::transformer::Transformer;
use crate::CausalLm;

pub trait ScaledQueries {
    /// `(layers, query heads per layer)` of the attention the model runs: the shape a per-layer or
    /// per-head schedule must have.
    fn query_layout(&self) -> (usize, usize);

    /// The training length n0 the checkpoint records, if any (the default n0 of a scaling).
    fn training_length(&self) -> Option<i64>;

    /// Scales the queries of every later pass.
    fn set_query_scaling(&mut self, scaling: QueryScaling);
}

impl ScaledQueries for Transformer {
    fn query_layout(&self) -> (usize, usize) {
        (self.config.num_layers, self.config.num_heads as usize)
    }

    fn training_length(&self) -> Option<i64> {
        self.config.raw.training_length
    }

    fn set_query_scaling(&mut self, scaling: QueryScaling) {
        Transformer::set_query_scaling(self, scaling);
    }
}

/// [`ScaledQueries`] for a type scaled through one of its fields: `scaled_through!(Type, field)` (a
/// vanilla drafter through its small LM, an objective through the drafter it trains).
#[macro_export]
macro_rules! scaled_through {
    ($type:ty, $field:ident) => {
        impl $crate::ScaledQueries for $type {
            fn query_layout(&self) -> (usize, usize) {
                $crate::ScaledQueries::query_layout(&self.$field)
            }

            fn training_length(&self) -> Option<i64> {
                $crate::ScaledQueries::training_length(&self.$field)
            }

            fn set_query_scaling(&mut self, scaling: $crate::QueryScaling) {
                $crate::ScaledQueries::set_query_scaling(&mut self.$field, scaling)
            }
        }
    };
}

// A causal LM (the target probed, a vanilla or PARD drafter) is scaled through its transformer.
scaled_through!(CausalLm, net);
