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
    /// The state over `self` and then `later`: times and CPU seconds add; the load average starts
    /// with `self` and ends with `later`.
    pub fn then(&self, later: &MachineState) -> MachineState {
        MachineState {
            cores: self.cores.max(later.cores),
            wall_seconds: self.wall_seconds + later.wall_seconds,
            load_average_start: self.load_average_start,
            load_average_end: later.load_average_end,
            own_cpu_seconds: self.own_cpu_seconds + later.own_cpu_seconds,
            other_cpu_seconds: self.other_cpu_seconds + later.other_cpu_seconds,
            steal_seconds: self.steal_seconds + later.steal_seconds,
            throttled_seconds: self.throttled_seconds + later.throttled_seconds,
        }
    }

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

/// What [`measure_quietly`] kept: the value of the least loaded attempt, other processes' share of the
/// cores while it ran, and how many attempts were made.
#[derive(Debug)]
pub struct Quiet<T> {
    pub value: T,
    pub other_share: f64,
    pub attempts: usize,
}

/// How long a measurement may wait for the machine to go quiet: at most `max_wait` each time, and in
/// all no more than what is left of a budget shared by the measurements of one unit. `what` names the
/// measurement in the lines that say the run is waiting.
pub struct Waiting<'a> {
    pub retries: usize,
    pub max_wait: Duration,
    /// What is left of the unit's budget; every wait takes what it used from it.
    pub budget_left: &'a std::cell::Cell<Duration>,
    pub what: &'a str,
}

/// Runs `attempt` and watches the machine meanwhile: when other processes took more than
/// [`LOADED_OTHER_SHARE`] of the cores, says so, waits for the machine to be quiet (at most
/// `waiting.max_wait`, and no longer than the unit's budget has left) and runs it again, up to
/// `waiting.retries` times, keeping the least loaded attempt. For timing work that gives the same
/// result every time (greedy or seeded decoding): only the time differs between attempts. A machine
/// that never goes quiet costs at most the budget; what ran under load is kept and flagged.
pub fn measure_quietly<T, E>(
    waiting: &Waiting<'_>,
    mut attempt: impl FnMut() -> Result<T, E>,
) -> Result<Quiet<T>, E> {
    let retries = waiting.retries;
    let mut best: Option<Quiet<T>> = None;
    for made in 1..=retries + 1 {
        let before = Sample::now();
        let value = attempt()?;
        let other_share = before.until(&Sample::now()).other_share();
        let loaded = other_share > LOADED_OTHER_SHARE;
        match &mut best {
            Some(b) if !(other_share < b.other_share) => b.attempts = made,
            _ => {
                best = Some(Quiet {
                    value,
                    other_share,
                    attempts: made,
                })
            }
        }
        if !loaded || made > retries || !wait_for_quiet_within(waiting, other_share, made) {
            break;
        }
    }
    Ok(best.expect("at least one attempt"))
}

/// Says that `waiting.what` ran under load and waits for quiet within the budget; true when the
/// machine went quiet (the caller measures again).
fn wait_for_quiet_within(waiting: &Waiting<'_>, other_share: f64, made: usize) -> bool {
    let left = waiting.budget_left.get();
    let limit = waiting.max_wait.min(left);
    let share = 100.0 * other_share;
    if limit.is_zero() {
        eprintln!(
            "machine busy: other processes took {share:.0}% of the cores during {} (attempt {made}); this unit's wait budget is spent, so the attempt is kept under load (flagged in the report)",
            waiting.what
        );
        return false;
    }
    eprintln!(
        "machine busy: other processes took {share:.0}% of the cores during {} (attempt {made} of {}); waiting up to {:.0} s for quiet ({:.0} s of this unit's wait budget left)",
        waiting.what,
        waiting.retries + 1,
        limit.as_secs_f64(),
        left.as_secs_f64()
    );
    let started = Instant::now();
    let quiet = wait_for_quiet(limit);
    let waited = started.elapsed();
    waiting.budget_left.set(left.saturating_sub(waited));
    if quiet {
        eprintln!(
            "quiet after {:.0} s: measuring {} again",
            waited.as_secs_f64(),
            waiting.what
        );
    } else {
        eprintln!(
            "still busy after {:.0} s: keeping the least loaded attempt of {} (flagged in the report)",
            waited.as_secs_f64(),
            waiting.what
        );
    }
    quiet
}

/// Watches the machine in half-second windows until other processes take at most
/// [`LOADED_OTHER_SHARE`] of the cores over one of them, or `max_wait` has passed; true when it went
/// quiet.
fn wait_for_quiet(max_wait: Duration) -> bool {
    let started = Instant::now();
    loop {
        if !(observe(Duration::from_millis(500)).other_share() > LOADED_OTHER_SHARE) {
            return true;
        }
        if started.elapsed() >= max_wait {
            return false;
        }
    }
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

    /// The tests that load the machine or measure this process's share of it run one at a time.
    static MACHINE: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn this_process_spinning_counts_as_its_own_time_not_others() {
        let _alone = MACHINE.lock().unwrap_or_else(|e| e.into_inner());
        let start = Sample::now();
        let begun = Instant::now();
        let mut x = 0u64;
        while begun.elapsed() < Duration::from_millis(300) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let state = start.until(&Sample::now());
        if state.own_cpu_seconds.is_nan() {
            sharpdraft_testing::skip("no /proc on this system");
            return;
        }
        assert!(
            state.own_cpu_seconds > 0.15,
            "300 ms of spinning: {state:?}"
        );
    }

    /// Busy processes on every core until dropped.
    struct Neighbours(Vec<std::process::Child>);
    impl Drop for Neighbours {
        fn drop(&mut self) {
            for child in &mut self.0 {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
    fn busy_neighbours() -> Neighbours {
        Neighbours(
            (0..cores())
                .map(|_| {
                    std::process::Command::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .spawn()
                        .unwrap()
                })
                .collect(),
        )
    }

    #[test]
    fn work_done_beside_busy_processes_is_done_again_once_they_stop() {
        let _alone = MACHINE.lock().unwrap_or_else(|e| e.into_inner());
        if Sample::now().own_cpu_seconds.is_nan() {
            sharpdraft_testing::skip("no /proc on this system");
            return;
        }
        if observe(Duration::from_millis(500)).other_share() > LOADED_OTHER_SHARE {
            sharpdraft_testing::skip_for_this_machine(
                "other processes keep this machine busy, so it never goes quiet",
            );
            return;
        }
        let neighbours = std::sync::Mutex::new(Some(busy_neighbours()));
        std::thread::sleep(Duration::from_millis(200));
        let mut runs = 0;
        let budget = std::cell::Cell::new(Duration::from_secs(60));
        let waiting = |retries| Waiting {
            retries,
            max_wait: Duration::from_secs(30),
            budget_left: &budget,
            what: "a test's work",
        };
        let kept = measure_quietly(&waiting(3), || {
            runs += 1;
            std::thread::sleep(Duration::from_millis(400));
            // The neighbours leave after the first attempt; the wait for quiet then ends.
            neighbours.lock().unwrap().take();
            Ok::<usize, ()>(runs)
        })
        .unwrap();
        assert_eq!((kept.value, kept.attempts), (2, 2), "{kept:?}");
        assert!(kept.other_share <= LOADED_OTHER_SHARE, "{kept:?}");

        let _neighbours = busy_neighbours();
        std::thread::sleep(Duration::from_millis(200));
        let kept = measure_quietly(&waiting(0), || {
            std::thread::sleep(Duration::from_millis(400));
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(kept.attempts, 1, "no retries: the loaded attempt is kept");
        assert!(kept.other_share > LOADED_OTHER_SHARE, "{kept:?}");
    }

    #[test]
    fn a_machine_that_never_goes_quiet_costs_a_unit_at_most_its_wait_budget() {
        let _alone = MACHINE.lock().unwrap_or_else(|e| e.into_inner());
        if Sample::now().own_cpu_seconds.is_nan() {
            sharpdraft_testing::skip("no /proc on this system");
            return;
        }
        let _neighbours = busy_neighbours();
        std::thread::sleep(Duration::from_millis(200));
        let budget = std::cell::Cell::new(Duration::from_millis(1500));
        let waiting = Waiting {
            retries: 5,
            max_wait: Duration::from_secs(120),
            budget_left: &budget,
            what: "a test's work",
        };
        let started = Instant::now();
        let measure = || {
            measure_quietly(&waiting, || {
                std::thread::sleep(Duration::from_millis(300));
                Ok::<(), ()>(())
            })
            .unwrap()
        };
        let first = measure();
        // The second measurement of the unit finds the budget spent and keeps its attempt at once.
        let second = measure();
        let took = started.elapsed();
        assert_eq!(budget.get(), Duration::ZERO);
        assert_eq!((first.attempts, second.attempts), (1, 1));
        assert!(
            took < Duration::from_secs(8),
            "took {took:?} with a 1.5 s budget"
        );
    }

    #[test]
    fn machine_states_of_two_pieces_add_their_seconds() {
        let piece = |wall: f64, load: f64| MachineState {
            cores: 2,
            wall_seconds: wall,
            load_average_start: load,
            load_average_end: load + 0.5,
            own_cpu_seconds: wall,
            other_cpu_seconds: 1.0,
            steal_seconds: 0.25,
            throttled_seconds: 0.0,
        };
        let both = piece(10.0, 1.0).then(&piece(30.0, 2.0));
        assert_eq!(both.wall_seconds, 40.0);
        assert_eq!(both.own_cpu_seconds, 40.0);
        assert_eq!(both.other_cpu_seconds, 2.0);
        assert_eq!(both.steal_seconds, 0.5);
        assert_eq!((both.load_average_start, both.load_average_end), (1.0, 2.5));
    }
}
