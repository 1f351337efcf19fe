//! What else the machine was doing while a unit ran: the load average, the CPU time other processes
//! took (the whole machine's busy time from `/proc/stat` less this process's own), time stolen by the
//! hypervisor, and time the cgroup was throttled. Paired timing keeps a load that comes and goes from
//! favouring one arm, but it still slows every arm and adds noise; the report flags units measured under
//! load so a reader can weigh them. Linux only: elsewhere every figure reads as unknown (NaN).

use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Clock ticks per second of `/proc/stat` and `/proc/self/stat` (USER_HZ, 100 on every Linux ABI).
const TICKS_PER_SECOND: f64 = 100.0;

/// Other processes' share of the cores above which a unit counts as measured under load.
pub const LOADED_OTHER_SHARE: f64 = 0.10;
/// Stolen or throttled share of the time above which a unit counts as measured under load.
pub const LOADED_LOST_SHARE: f64 = 0.05;

/// Counters read at one moment.
#[derive(Debug, Clone)]
pub struct Sample {
    at: Instant,
    load_average: f64,
    /// Busy seconds of all cores (user, nice, system, irq, softirq), stolen seconds.
    busy_seconds: f64,
    steal_seconds: f64,
    own_cpu_seconds: f64,
    throttled_seconds: f64,
}

/// The machine's state over one unit, as the unit record keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineState {
    pub cores: usize,
    pub wall_seconds: f64,
    /// One-minute load average when the unit started and when it ended.
    pub load_average_start: f64,
    pub load_average_end: f64,
    /// CPU seconds this process used (all its threads).
    pub own_cpu_seconds: f64,
    /// CPU seconds other processes used, over all cores.
    pub other_cpu_seconds: f64,
    /// CPU seconds the hypervisor gave to other guests (steal), over all cores.
    pub steal_seconds: f64,
    /// Seconds the cgroup's quota held this process's cgroup back (cpu.stat).
    pub throttled_seconds: f64,
}

impl Sample {
    pub fn now() -> Self {
        let (busy_seconds, steal_seconds) = machine_cpu_seconds().unwrap_or((f64::NAN, f64::NAN));
        Self {
            at: Instant::now(),
            load_average: load_average().unwrap_or(f64::NAN),
            busy_seconds,
            steal_seconds,
            own_cpu_seconds: own_cpu_seconds().unwrap_or(f64::NAN),
            throttled_seconds: throttled_seconds().unwrap_or(0.0),
        }
    }

    /// The state between this sample and `later`.
    pub fn until(&self, later: &Sample) -> MachineState {
        let own = later.own_cpu_seconds - self.own_cpu_seconds;
        let busy = later.busy_seconds - self.busy_seconds;
        MachineState {
            cores: cores(),
            wall_seconds: later.at.duration_since(self.at).as_secs_f64(),
            load_average_start: self.load_average,
            load_average_end: later.load_average,
            own_cpu_seconds: own,
            // Tick counters are read at slightly different moments: a small negative is zero.
            other_cpu_seconds: (busy - own).max(0.0),
            steal_seconds: (later.steal_seconds - self.steal_seconds).max(0.0),
            throttled_seconds: (later.throttled_seconds - self.throttled_seconds).max(0.0),
        }
    }
}

impl MachineState {
    /// The share of all cores' time that other processes used (0..1; NaN when unknown).
    pub fn other_share(&self) -> f64 {
        self.other_cpu_seconds / (self.wall_seconds * self.cores as f64).max(1e-9)
    }

    /// The share of the time lost to stealing or throttling (0..1; NaN when unknown).
    pub fn lost_share(&self) -> f64 {
        let stolen = self.steal_seconds / (self.wall_seconds * self.cores as f64).max(1e-9);
        let throttled = self.throttled_seconds / self.wall_seconds.max(1e-9);
        stolen.max(throttled)
    }

    /// Whether the unit ran while other work took a noticeable share of the machine.
    pub fn loaded(&self) -> bool {
        self.other_share() > LOADED_OTHER_SHARE || self.lost_share() > LOADED_LOST_SHARE
    }

    /// One line for a log: load average, other processes' share, stolen and throttled share.
    pub fn describe(&self) -> String {
        format!(
            "load average {:.2} -> {:.2} on {} cores; other processes {:.0}% of the cores, stolen or throttled {:.0}%",
            self.load_average_start,
            self.load_average_end,
            self.cores,
            100.0 * self.other_share(),
            100.0 * self.lost_share()
        )
    }
}

/// Watches the machine for `window` and returns what other processes did meanwhile: `run` calls it
/// before the grid, to warn that timings will carry someone else's work.
pub fn observe(window: Duration) -> MachineState {
    let start = Sample::now();
    std::thread::sleep(window);
    start.until(&Sample::now())
}

pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// (busy, stolen) seconds summed over every core since boot, from the first line of `/proc/stat`.
fn machine_cpu_seconds() -> Option<(f64, f64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    parse_proc_stat(&text)
}

/// `cpu  user nice system idle iowait irq softirq steal ...` in ticks.
fn parse_proc_stat(text: &str) -> Option<(f64, f64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse::<f64>().ok())
        .collect::<Option<_>>()?;
    let at = |i: usize| ticks.get(i).copied().unwrap_or(0.0);
    let busy = at(0) + at(1) + at(2) + at(5) + at(6);
    Some((busy / TICKS_PER_SECOND, at(7) / TICKS_PER_SECOND))
}

/// User and system seconds of this process (every thread), from `/proc/self/stat`.
fn own_cpu_seconds() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    parse_self_stat(&text)
}

/// Fields after the command name (which may hold spaces and parentheses): state is field 3, utime 14,
/// stime 15.
fn parse_self_stat(text: &str) -> Option<f64> {
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / TICKS_PER_SECOND)
}

/// Seconds this process's cgroup was throttled since it started: cgroup v2 `throttled_usec`, or v1
/// `throttled_time` (nanoseconds).
fn throttled_seconds() -> Option<f64> {
    for (path, key, per_second) in [
        ("/sys/fs/cgroup/cpu.stat", "throttled_usec", 1e6),
        ("/sys/fs/cgroup/cpu/cpu.stat", "throttled_time", 1e9),
        ("/sys/fs/cgroup/cpu,cpuacct/cpu.stat", "throttled_time", 1e9),
    ] {
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        let value = text
            .lines()
            .filter_map(|l| l.split_once(' '))
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.trim().parse::<f64>().ok());
        if let Some(v) = value {
            return Some(v / per_second);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_busy_time_leaves_out_idle_and_iowait_and_steal_is_its_own() {
        let text = "cpu  100 20 30 5000 70 4 6 50 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        let (busy, steal) = parse_proc_stat(text).unwrap();
        assert!((busy - 1.6).abs() < 1e-12, "{busy}");
        assert!((steal - 0.5).abs() < 1e-12, "{steal}");
    }

    #[test]
    fn a_command_name_with_spaces_and_parentheses_does_not_shift_the_cpu_fields() {
        let text = "42 (odd name) (x)) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0";
        assert_eq!(parse_self_stat(text), Some(3.0));
    }

    #[test]
    fn a_unit_counts_as_loaded_when_others_take_a_tenth_of_the_cores() {
        let state = |other: f64, steal: f64| MachineState {
            cores: 2,
            wall_seconds: 10.0,
            load_average_start: 0.0,
            load_average_end: 0.0,
            own_cpu_seconds: 20.0,
            other_cpu_seconds: other,
            steal_seconds: steal,
            throttled_seconds: 0.0,
        };
        assert!(!state(1.0, 0.0).loaded());
        assert!(state(3.0, 0.0).loaded());
        assert!(state(0.0, 2.0).loaded());
    }

    #[test]
    fn this_process_spinning_counts_as_its_own_time_not_others() {
        let start = Sample::now();
        let begun = Instant::now();
        let mut x = 0u64;
        while begun.elapsed() < Duration::from_millis(300) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let state = start.until(&Sample::now());
        if state.own_cpu_seconds.is_nan() {
            eprintln!("skipped: no /proc on this system");
            return;
        }
        assert!(
            state.own_cpu_seconds > 0.15,
            "300 ms of spinning: {state:?}"
        );
    }
}
