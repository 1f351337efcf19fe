//! Raw counters of a speculative run; rates are derived from them, never stored instead of them.

use serde::Serialize;
pub use sharpdraft_report::records::CycleRecord;

/// One request.
#[derive(Debug, Clone, Serialize)]
pub struct SpecReport {
    pub prompt_ids: Vec<i64>,
    /// Generated ids (prompt excluded).
    pub ids: Vec<i64>,
    pub cycles: Vec<CycleRecord>,
    pub prefill_seconds: f64,
    pub total_seconds: f64,
    /// Seconds inside target forward passes (prefill excluded).
    pub target_forward_seconds: f64,
    /// Seconds inside drafter forward passes.
    pub drafter_forward_seconds: f64,
    pub target_cache_bytes: usize,
    pub drafter_cache_bytes: usize,
    /// The drafter's own weights (what query scaling adds nothing to and adaptation trains).
    pub drafter_weight_bytes: usize,
    /// Online adaptation's updates, time and memory; `None` for a drafter that does not adapt.
    pub adaptation: Option<sharpdraft_draft::AdaptationReport>,
    /// Peak resident memory of the process (VmHWM), bytes; 0 where not available.
    pub peak_rss_bytes: u64,
}

/// Bytes a speculative run held, for comparing methods at equal footing (query scaling adds none;
/// adaptation adds its adapters, optimizer state, gradients and buffer).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MemoryReport {
    pub drafter_weight_bytes: usize,
    pub drafter_cache_bytes: usize,
    pub target_cache_bytes: usize,
    /// Adapters + optimizer state + gradients + buffer of online adaptation (0 without it).
    pub adaptation_bytes: usize,
    /// Peak resident memory of the whole process so far (VmHWM), bytes; 0 where not available.
    pub peak_rss_bytes: u64,
}

impl SpecReport {
    pub fn memory(&self) -> MemoryReport {
        MemoryReport {
            drafter_weight_bytes: self.drafter_weight_bytes,
            drafter_cache_bytes: self.drafter_cache_bytes,
            target_cache_bytes: self.target_cache_bytes,
            adaptation_bytes: self.adaptation.as_ref().map_or(0, |a| {
                a.adapter_bytes + a.optimizer_bytes + a.gradient_bytes + a.buffer_bytes
            }),
            peak_rss_bytes: self.peak_rss_bytes,
        }
    }

    /// Tokens emitted per target verification pass, bonus included (vLLM's acceptance length).
    pub fn tau(&self) -> f64 {
        let emitted: usize = self.cycles.iter().map(|c| c.accepted + c.bonus).sum();
        emitted as f64 / self.cycles.len().max(1) as f64
    }

    pub fn tokens_per_second(&self) -> f64 {
        self.ids.len() as f64 / self.total_seconds.max(1e-9)
    }

    /// Share of decoding time (prefill excluded) spent outside model forward passes: the engine's own cost.
    pub fn engine_overhead(&self) -> f64 {
        let decoding = self.total_seconds - self.prefill_seconds;
        ((decoding - self.target_forward_seconds - self.drafter_forward_seconds)
            / decoding.max(1e-9))
        .max(0.0)
    }
}

/// A `Vm...:` field of /proc/self/status in bytes (Linux); 0 elsewhere.
fn process_status_bytes(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Peak resident set size (VmHWM); 0 where not available.
pub fn peak_rss_bytes() -> u64 {
    process_status_bytes("VmHWM:")
}

/// Resident set size now (VmRSS); 0 where not available.
pub fn resident_bytes() -> u64 {
    process_status_bytes("VmRSS:")
}

/// Lowers the process's peak resident memory (VmHWM) to its current resident size, so the next
/// [`peak_rss_bytes`] is the peak of what ran since (Linux: `5` written to /proc/self/clear_refs).
/// False where that is not available; the peak then covers the whole process.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}
