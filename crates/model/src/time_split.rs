//! Where a pass's time goes. The passes mark their steps (the embedding, the fusion of target features,
//! each layer, and inside them the linear maps, attention and cache writes; the LM head, sampling);
//! while [`record`] runs on this thread, every mark adds its exclusive time (a step nested in another
//! is taken out of the outer one) and the weight bytes it reads itself (a step whose weights are read
//! by the linear maps nested in it declares none: [`crate::layers::Linear::forward`] marks each map's),
//! so a drafting cycle splits into parts that sum to the time marked, each beside the time its weights
//! take to read. When nothing records, a mark costs one thread-local read.
//!
//! CPU passes run synchronously, so the clock sees their work. On CUDA, [`record`] synchronises the
//! device at each mark, which serialises the stream: a split there shows where time goes, not how fast
//! an unmarked run is.

use serde::Serialize;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Instant;
use tch::Device;

/// A step of a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Step {
    /// Token embedding lookups.
    Embedding,
    /// Target features projected into the drafter: EAGLE-3's and DFlash's norms and reshapes around
    /// the products (their `fc` and DFlash's context key and value projections are linear maps).
    Features,
    /// One layer's norms, rotary embeddings, activations and reshapes: what is left of it once its
    /// linear maps, attention and cache writes are taken out.
    Layer(usize),
    /// The products of linear maps (a layer's projections and MLP, a drafter's `fc`), wherever they
    /// run: the weight bytes a pass reads are theirs.
    LinearMaps,
    /// Attention over the cache: scores, mask and the weighted sum of the values (and the softmax
    /// where it does not take the step below).
    Attention,
    /// The softmax between attention's two products in a few-row pass on the kernel (nested in
    /// [`Step::Attention`], which is timed without it).
    AttentionSoftmax,
    /// Writing keys and values into a cache.
    CacheWrite,
    /// The LM head: hidden states to logits over the vocabulary.
    LmHead,
    /// Turning logits into tokens: argmax, softmax, top-k/top-p, a draw.
    Sampling,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Embedding => write!(f, "embedding"),
            Step::Features => write!(f, "features"),
            Step::Layer(i) => write!(f, "layer {i}"),
            Step::LinearMaps => write!(f, "linear maps"),
            Step::Attention => write!(f, "attention"),
            Step::AttentionSoftmax => write!(f, "attention's softmax"),
            Step::CacheWrite => write!(f, "cache writes"),
            Step::LmHead => write!(f, "LM head"),
            Step::Sampling => write!(f, "sampling"),
        }
    }
}

/// What one step cost over a recording.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct StepCost {
    /// Exclusive wall-clock seconds.
    pub seconds: f64,
    /// Times the step ran.
    pub calls: usize,
    /// Weight bytes the step read itself, summed over its calls (0 for steps without weights of their
    /// own, such as a layer, whose weights its linear maps read).
    pub weight_bytes: usize,
}

/// The steps marked during a recording, by step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TimeSplit {
    pub steps: BTreeMap<Step, StepCost>,
}

impl TimeSplit {
    /// Seconds over every marked step.
    pub fn marked_seconds(&self) -> f64 {
        self.steps.values().map(|c| c.seconds).sum()
    }

    /// Adds `other`'s costs to this split's.
    pub fn add(&mut self, other: &TimeSplit) {
        for (step, cost) in &other.steps {
            let mine = self.steps.entry(*step).or_default();
            mine.seconds += cost.seconds;
            mine.calls += cost.calls;
            mine.weight_bytes += cost.weight_bytes;
        }
    }
}

struct Recording {
    split: TimeSplit,
    /// The innermost running step and when its current stretch started.
    running: Option<(Step, Instant)>,
    /// Synchronised before each clock read (a CUDA device).
    sync: Option<usize>,
}

thread_local! {
    static RECORDING: RefCell<Option<Recording>> = const { RefCell::new(None) };
}

fn now(sync: Option<usize>) -> Instant {
    if let Some(index) = sync {
        tch::Cuda::synchronize(index as i64);
    }
    Instant::now()
}

/// Runs `work` as `step`, which reads `weight_bytes()` bytes of weights (evaluated only while recording).
pub fn mark<T>(step: Step, weight_bytes: impl FnOnce() -> usize, work: impl FnOnce() -> T) -> T {
    let entered = RECORDING.with(|r| {
        let mut r = r.borrow_mut();
        let recording = r.as_mut()?;
        let at = now(recording.sync);
        // The outer step's stretch ends here; it resumes when this one ends.
        let outer = recording.running.take();
        if let Some((outer_step, since)) = outer {
            recording.split.steps.entry(outer_step).or_default().seconds +=
                (at - since).as_secs_f64();
        }
        let cost = recording.split.steps.entry(step).or_default();
        cost.calls += 1;
        cost.weight_bytes += weight_bytes();
        recording.running = Some((step, at));
        Some(outer.map(|(s, _)| s))
    });
    let out = work();
    if let Some(outer) = entered {
        RECORDING.with(|r| {
            if let Some(recording) = r.borrow_mut().as_mut() {
                let at = now(recording.sync);
                if let Some((inner, since)) = recording.running.take() {
                    recording.split.steps.entry(inner).or_default().seconds +=
                        (at - since).as_secs_f64();
                }
                recording.running = outer.map(|s| (s, at));
            }
        });
    }
    out
}

/// Runs `work` while recording the steps it marks on this thread, on `device` (synchronised at each mark
/// when it is a CUDA device). Recordings do not nest: an inner one records nothing for the outer.
pub fn record<T>(device: Device, work: impl FnOnce() -> T) -> (T, TimeSplit) {
    let sync = match device {
        Device::Cuda(index) => Some(index),
        _ => None,
    };
    let outer = RECORDING.with(|r| {
        r.borrow_mut().replace(Recording {
            split: TimeSplit::default(),
            running: None,
            sync,
        })
    });
    let out = work();
    let split = RECORDING.with(|r| {
        let mut r = r.borrow_mut();
        let mine = r.take().map(|rec| rec.split).unwrap_or_default();
        *r = outer;
        mine
    });
    (out, split)
}

/// Weight bytes of `tensors` (what a step reads once per call).
pub fn bytes_of<'a>(tensors: impl IntoIterator<Item = &'a tch::Tensor>) -> usize {
    tensors
        .into_iter()
        .map(|t| t.numel() * t.kind().elt_size_in_bytes())
        .sum()
}
