//! Threads that wait, spinning, for the parts of a product ([`crate::products`]).
//!
//! A product of a few rows is 15 us to 2 ms of work. Handing part of it to a thread that sleeps costs
//! more than the smaller ones on these machines: starting a thread for each part (`std::thread::scope`) took about
//! 50 us, and waking a rayon worker 70-90 us (a 1.6 MB bf16 product: 28 us on one thread, 97-122 us
//! split over two). So while a pass runs, each worker spins on its own slot, and only parks once it has
//! had nothing to do for [`SPIN`]. The pass's own thread takes the first part; libtorch runs single
//! threaded meanwhile (sharpdraft-model's `cpu/few_rows.rs`), so a spinning worker takes no core that libtorch would use.
//!
//! One caller at a time: the workers sit behind a lock that [`run`] only tries. While another thread
//! holds it (or a part calls [`run`] again), `run` returns `None` and the caller does all the parts
//! itself; so each slot has one poster at a time.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, TryLockError};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long an idle worker spins before it parks: longer than the gaps between the products of a pass
/// (norms, attention: tens to hundreds of microseconds) and between a drafter's steps, short enough
/// that libtorch's own threads, which run next when a pass of another size follows (an EAGLE head's
/// step after a verification), find the core free again within a millisecond.
const SPIN: Duration = Duration::from_millis(1);

/// A part of a product: a function and its argument, run on a worker.
pub type Part = Box<dyn FnOnce() + Send>;

/// One worker's mailbox. The caller holding the workers' lock is its only poster.
struct Slot {
    /// Parts posted so far (written by the caller).
    posted: AtomicU64,
    /// Parts finished so far (written by the worker).
    done: AtomicU64,
    /// Whether the worker is parked or about to park.
    parked: AtomicBool,
    /// Whether a part panicked (its output is then incomplete).
    failed: AtomicBool,
    /// The posted part: written by the caller only while `done == posted`, taken by the worker only
    /// after it sees `posted` move.
    part: UnsafeCell<Option<Part>>,
}

// SAFETY: `part` is handed over through the `posted` / `done` counters (release / acquire), and only
// the caller holding the workers' lock posts, so the caller and the worker never touch it at the same
// time.
unsafe impl Sync for Slot {}

struct Worker {
    slot: Arc<Slot>,
    thread: Thread,
}

/// The workers, behind the lock that makes one caller at a time.
fn workers() -> &'static Mutex<Vec<Worker>> {
    static WORKERS: OnceLock<Mutex<Vec<Worker>>> = OnceLock::new();
    WORKERS.get_or_init(|| Mutex::new(Vec::new()))
}

/// A new worker, or `None` where the system will not start another thread.
fn start_worker(index: usize) -> Option<Worker> {
    let slot = Arc::new(Slot {
        posted: AtomicU64::new(0),
        done: AtomicU64::new(0),
        parked: AtomicBool::new(false),
        failed: AtomicBool::new(false),
        part: UnsafeCell::new(None),
    });
    let theirs = Arc::clone(&slot);
    let handle = std::thread::Builder::new()
        .name(format!("few-rows-{index}"))
        .spawn(move || serve(&theirs))
        .ok()?;
    Some(Worker {
        slot,
        thread: handle.thread().clone(),
    })
}

/// Runs `part`; `false` when it panicked. The panic's payload is forgotten, not dropped: a payload
/// whose drop panics again would otherwise escape here and leave the caller waiting for ever.
fn finished(part: Part) -> bool {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(part)) {
        Ok(()) => true,
        Err(payload) => {
            std::mem::forget(payload);
            false
        }
    }
}

/// A worker's life: wait for a part (spinning, then parked), run it, say it is done.
fn serve(slot: &Slot) {
    // Parts taken so far: the next one is posted when `posted` moves past it.
    let mut seen = 0u64;
    loop {
        let mut idle_since = Instant::now();
        let mut spins = 0u32;
        while slot.posted.load(Ordering::Acquire) == seen {
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) && idle_since.elapsed() > SPIN {
                // Say we park, then look again: a caller that posts after this sees `parked` and
                // unparks us (both sides use SeqCst, so one of them sees the other's write).
                slot.parked.store(true, Ordering::SeqCst);
                if slot.posted.load(Ordering::SeqCst) == seen {
                    std::thread::park();
                }
                slot.parked.store(false, Ordering::SeqCst);
                idle_since = Instant::now();
            }
        }
        seen += 1;
        // SAFETY: the caller wrote the part before moving `posted` (release, seen above by acquire)
        // and does not touch it again until `done` moves.
        let part = unsafe { (*slot.part.get()).take() };
        if let Some(part) = part {
            if !finished(part) {
                slot.failed.store(true, Ordering::Relaxed);
            }
        }
        slot.done.store(seen, Ordering::Release);
    }
}

/// Runs `parts[1..]` on workers and `parts[0]` on this thread, and returns once all have finished:
/// `Some(true)` when every part ran to its end, `Some(false)` when a part panicked, `None` (nothing
/// run) when another thread holds the workers or no worker thread could start.
///
/// The parts may borrow from the caller's stack only through raw pointers that outlive this call:
/// they are `'static` boxes, and this call waits for every one before it returns.
pub fn run(parts: Vec<Part>) -> Option<bool> {
    try_run(parts).ok()
}

/// [`run`], or every part on this thread when the workers are not to be had (another thread's pass
/// holds them, or no worker thread could start): what a product, a weighted sum or a split attention
/// does with its parts. `false` when a part panicked (every part has still been run).
pub fn run_anywhere(parts: Vec<Part>) -> bool {
    match try_run(parts) {
        Ok(complete) => complete,
        Err(parts) => parts
            .into_iter()
            .map(finished)
            .fold(true, |all, ran| all & ran),
    }
}

/// [`run_anywhere`] of `count` parts that are one function of the part's index.
pub fn run_each<F>(count: usize, part: F) -> bool
where
    F: Fn(usize) + Clone + Send + 'static,
{
    let parts = (0..count)
        .map(|index| {
            let part = part.clone();
            Box::new(move || part(index)) as Part
        })
        .collect();
    run_anywhere(parts)
}

/// [`run`], handing the parts back, none of them run, when the workers are not to be had.
fn try_run(mut parts: Vec<Part>) -> Result<bool, Vec<Part>> {
    let mut workers = match workers().try_lock() {
        Ok(workers) => workers,
        // A caller panicked while holding the lock (outside any part, which are caught): the
        // workers and their counters are still consistent.
        Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(TryLockError::WouldBlock) => return Err(parts),
    };
    let extra = parts.len().saturating_sub(1);
    while workers.len() < extra {
        let index = workers.len();
        match start_worker(index) {
            Some(worker) => workers.push(worker),
            None => return Err(parts),
        }
    }
    let own = if parts.is_empty() {
        None
    } else {
        Some(parts.remove(0))
    };
    let mut waiting = Vec::with_capacity(extra);
    for (worker, part) in workers.iter().zip(parts) {
        let slot = &worker.slot;
        let posted = slot.posted.load(Ordering::Relaxed);
        // SAFETY: the previous part of this slot is done (every call waits for its parts), so the
        // worker does not read `part` until `posted` moves below.
        unsafe { *slot.part.get() = Some(part) };
        slot.posted.store(posted + 1, Ordering::SeqCst);
        if slot.parked.load(Ordering::SeqCst) {
            worker.thread.unpark();
        }
        waiting.push((slot, posted + 1));
    }
    let mut complete = true;
    if let Some(own) = own {
        complete &= finished(own);
    }
    for (slot, posted) in waiting {
        let mut spins = 0u32;
        while slot.done.load(Ordering::Acquire) < posted {
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            // A worker that the system has descheduled (more threads than cores) gets the core.
            if spins.is_multiple_of(1 << 16) {
                std::thread::yield_now();
            }
        }
        complete &= !slot.failed.swap(false, Ordering::Relaxed);
    }
    Ok(complete)
}
