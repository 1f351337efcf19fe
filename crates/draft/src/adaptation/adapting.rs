//! A drafter that learns from verification as it drafts: any [`Drafter`] with its training objective.

use super::{
    AdaptMode, AdaptOptions, Adaptable, LearnFrom, LoraAdapters, LoraForm, OnlineObjective,
    UpdateUnit, VerifiedBuffer,
};
use crate::adamw::AdamW;
use crate::drafter::{DraftContext, DraftError, Drafter, Feedback, Result};
use crate::drafter_stats::{AdaptationReport, DrafterStats};
use crate::proposal::Proposal;
use sharpdraft_model::cpu::few_rows;
use sharpdraft_model::{KeySelection, Sampler, Tap, Transformer};
use std::time::Instant;
use tch::{Device, Kind, Tensor};

enum Learner {
    Full(AdamW),
    Lora(LoraAdapters),
}

pub struct AdaptingDrafter<'t> {
    /// The drafter, whose own weights its objective trains (one copy: every update is what the next
    /// proposal drafts with).
    inner: Box<dyn Adaptable + 't>,
    target: &'t Transformer,
    /// Which objective, with what settings, an update builds over `inner`.
    objective: OnlineObjective,
    config: AdaptOptions,
    learner: Learner,
    buffer: VerifiedBuffer,
    device: Device,
    /// Per row of the last proposal (0 = root, i + 1 = node i): whether it has children.
    has_children: Vec<bool>,
    /// The largest proposal seen: a segment needs two rows more to train on.
    max_proposal: usize,
    cycles_in_request: usize,
    requests_started: usize,
    report: AdaptationReport,
}

impl<'t> AdaptingDrafter<'t> {
    /// Wraps `inner`, which `objective` (its method's) trains in place over `target`'s features. The
    /// drafter must hold its trained weights in f32.
    pub fn new(
        inner: Box<dyn Adaptable + 't>,
        target: &'t Transformer,
        objective: OnlineObjective,
        config: AdaptOptions,
    ) -> Result<Self> {
        let invalid = |reason: String| DraftError::InvalidOption {
            option: "adapt".into(),
            value: format!("{:?}", config.mode),
            reason,
        };
        config.validate().map_err(invalid)?;
        let trained = inner.objective(objective, target, config.seed)?;
        let parameters = trained.parameters();
        if let Some((name, weight)) = parameters.iter().find(|(_, w)| w.kind() != Kind::Float) {
            return Err(invalid(format!(
                "the drafter holds {name} as {:?}; training needs f32 (adapt a drafter loaded in f32)",
                weight.kind()
            )));
        }
        let device = parameters.first().map_or(Device::Cpu, |(_, w)| w.device());
        drop(trained);
        let learner = match config.mode {
            AdaptMode::Full => Learner::Full(AdamW::new(parameters, config.lr, 0.0)),
            AdaptMode::Lora => {
                let mut adapters = LoraAdapters::new(
                    parameters,
                    &config.lora_on,
                    config.rank,
                    config.lora_scale(),
                    config.lr,
                    config.seed,
                )?;
                if config.lora_form == LoraForm::Unmerged {
                    adapters.unmerge(&inner.linears())?;
                }
                Learner::Lora(adapters)
            }
        };
        let report = AdaptationReport {
            mode: match config.mode {
                AdaptMode::Full => "full".into(),
                AdaptMode::Lora => match config.lora_form {
                    LoraForm::Merged => "lora".into(),
                    LoraForm::Unmerged => "lora_unmerged".into(),
                },
            },
            ..Default::default()
        };
        Ok(Self {
            buffer: VerifiedBuffer::new(config.buffer, config.top_k),
            inner,
            target,
            objective,
            config,
            learner,
            device,
            has_children: Vec::new(),
            max_proposal: 0,
            cycles_in_request: 0,
            requests_started: 0,
            report,
        })
    }

    /// The rows held for the next update.
    pub fn buffer(&self) -> &VerifiedBuffer {
        &self.buffer
    }

    /// The objective's loss on the buffer as it is now, with the randomness (anchors, dropped tokens)
    /// of optimizer step `step`; `None` while nothing is learnable.
    pub fn buffer_loss(&self, step: usize) -> Result<Option<f64>> {
        let _guard = tch::no_grad_guard();
        Ok(self.loss(step)?.map(|l| l.double_value(&[])))
    }

    /// Mean objective loss over the buffer's windows, with the objective's randomness drawn for `step`.
    fn loss(&self, step: usize) -> Result<Option<Tensor>> {
        if self.config.learn_from == LearnFrom::Rejected && self.buffer.wrong_rows() == 0 {
            return Ok(None);
        }
        let windows = self.buffer.windows(
            self.max_proposal.max(1) + 2,
            self.config.learn_from,
            self.config.loss,
            self.device,
        );
        let objective = self
            .inner
            .objective(self.objective, self.target, self.config.seed)?;
        let mut total: Option<Tensor> = None;
        for window in &windows {
            let loss = objective.loss(window, step)?;
            total = Some(match total {
                Some(t) => t + loss,
                None => loss,
            });
        }
        Ok(total.map(|t| t / windows.len() as f64))
    }

    /// `steps` optimizer steps on the buffer.
    pub fn update(&mut self) -> Result<()> {
        let started = Instant::now();
        let steps = self.config.steps;
        let first_step = self.report.updates * steps;
        // Backward passes want all of libtorch's threads, also inside a decoding loop that holds it
        // to one between few-row passes.
        let learned = few_rows::with_libtorch_threads(|| {
            tch::with_grad(|| -> Result<bool> {
                for step in 0..steps {
                    let Some(loss) = self.loss(first_step + step)? else {
                        return Ok(false);
                    };
                    if step == 0 {
                        self.report.losses.push(loss.double_value(&[]));
                    }
                    match &mut self.learner {
                        Learner::Full(optimizer) => {
                            optimizer.backward_step(&loss, self.config.clip)
                        }
                        Learner::Lora(adapters) => adapters.step(&loss, self.config.clip)?,
                    }
                }
                Ok(true)
            })
        })?;
        if learned {
            self.report.updates += 1;
            self.report.update_seconds += started.elapsed().as_secs_f64();
        }
        Ok(())
    }

    /// What adaptation cost and did so far, its memory read from the live learner and buffer.
    fn report(&self) -> AdaptationReport {
        let mut report = self.report.clone();
        let bytes = |t: &Tensor| t.numel() * t.kind().elt_size_in_bytes();
        match &self.learner {
            Learner::Full(optimizer) => {
                report.trained_elements =
                    optimizer.parameters().iter().map(|(_, p)| p.numel()).sum();
                report.optimizer_bytes = optimizer.state_bytes();
                if report.updates > 0 {
                    report.gradient_bytes =
                        optimizer.parameters().iter().map(|(_, p)| bytes(p)).sum();
                }
            }
            Learner::Lora(adapters) => {
                report.trained_elements = adapters.elements();
                report.adapter_bytes = adapters.adapter_bytes();
                report.optimizer_bytes = adapters.optimizer_bytes();
                if report.updates > 0 {
                    report.gradient_bytes = adapters.gradient_bytes();
                }
            }
        }
        report.buffer_bytes = self.buffer.peak_bytes();
        report
    }
}

impl Drafter for AdaptingDrafter<'_> {
    fn linears(&self) -> Vec<&sharpdraft_model::layers::Linear> {
        self.inner.linears()
    }

    fn kind(&self) -> crate::DrafterKind {
        self.inner.kind()
    }

    fn target_taps(&self) -> Vec<Tap> {
        self.inner.target_taps()
    }

    /// A new request: OSD's update when `every` requests have finished, then the buffer's new segment.
    fn prefill(&mut self, ctx: &DraftContext<'_>, target_hidden: Option<&Tensor>) -> Result<()> {
        match self.config.unit {
            UpdateUnit::Requests => {
                if self.requests_started > 0
                    && self.requests_started.is_multiple_of(self.config.every)
                {
                    self.update()?;
                    self.buffer.clear();
                }
            }
            UpdateUnit::Cycles => self.buffer.clear(),
        }
        self.requests_started += 1;
        self.cycles_in_request = 0;
        self.inner.prefill(ctx, target_hidden)
    }

    fn propose(&mut self, ctx: &DraftContext<'_>, sampler: &mut Sampler) -> Result<Proposal> {
        let proposal = self.inner.propose(ctx, sampler)?;
        self.has_children = vec![false; proposal.len() + 1];
        for parent in &proposal.parents {
            self.has_children[parent.map_or(0, |p| p + 1)] = true;
        }
        self.max_proposal = self.max_proposal.max(proposal.len());
        Ok(proposal)
    }

    fn catch_up(&mut self, ctx: &DraftContext<'_>, target_hidden: Option<&Tensor>) -> Result<()> {
        self.inner.catch_up(ctx, target_hidden)
    }

    /// Keeps the cycle's verified rows (the root and the accepted drafts, whose next tokens the target
    /// scored), then updates every `every` cycles.
    fn observe(&mut self, ctx: &DraftContext<'_>, feedback: &Feedback<'_>) -> Result<()> {
        self.inner.observe(ctx, feedback)?;
        let accepted = feedback.accepted.len();
        let n = ctx.committed.len();
        let rows = feedback.verified_logits.size()[0] as usize;
        if n < accepted + 2 || feedback.accepted.iter().any(|&node| node + 1 >= rows) {
            return Err(DraftError::Protocol(format!(
                "feedback of accepted nodes {:?} with {rows} target rows after {n} committed tokens",
                feedback.accepted
            )));
        }
        // After the cycle: [.., root, accepted.., bonus]; the verified rows are root..last accepted,
        // rows 0 and node + 1 of the verification pass.
        let tokens = &ctx.committed[n - accepted - 2..n - 1];
        let kept: Vec<i64> = std::iter::once(0)
            .chain(feedback.accepted.iter().map(|&node| node as i64 + 1))
            .collect();
        let logits = feedback.verified_logits.index_select(
            0,
            &Tensor::from_slice(&kept).to_device(feedback.verified_logits.device()),
        );
        let last_row = feedback.accepted.last().map_or(0, |&node| node + 1);
        let wrong_at_end = *self.has_children.get(last_row).ok_or_else(|| {
            DraftError::Protocol(format!("observe of row {last_row} without its proposal"))
        })?;
        let wrong: Vec<bool> = (0..=accepted)
            .map(|i| i == accepted && wrong_at_end)
            .collect();
        self.buffer.push(
            self.cycles_in_request == 0,
            tokens,
            &logits,
            feedback.target_hidden,
            &wrong,
        );
        self.cycles_in_request += 1;
        if self.config.unit == UpdateUnit::Cycles
            && self.cycles_in_request.is_multiple_of(self.config.every)
        {
            self.update()?;
        }
        Ok(())
    }

    fn set_key_selection(&mut self, selection: Option<KeySelection>) -> Result<()> {
        self.inner.set_key_selection(selection)
    }

    fn wants_target_attention(&self) -> bool {
        self.inner.wants_target_attention()
    }

    fn stats(&self) -> DrafterStats {
        DrafterStats {
            adaptation: Some(self.report()),
            ..self.inner.stats()
        }
    }

    fn variables(&self) -> Vec<(String, Tensor)> {
        self.inner.variables()
    }
}
