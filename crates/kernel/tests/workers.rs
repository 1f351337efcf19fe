//! The few-row kernel's spinning workers run every part exactly once, report a part that panics, wake
//! from parking, and step aside while another thread holds them: `run` then runs nothing, and
//! `run_anywhere` runs every part on the caller's thread.

use sharpdraft_kernel::workers::{self, Part};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// Runs `test` on its own thread and fails if it has not finished within a minute: a lost wake-up or
/// a blocking lock hangs instead of failing.
fn within_a_minute(test: impl FnOnce() + Send + 'static) {
    let (done, finished) = mpsc::channel();
    let runner = std::thread::spawn(move || {
        test();
        let _ = done.send(());
    });
    match finished.recv_timeout(Duration::from_secs(60)) {
        Ok(()) => runner.join().unwrap(),
        // The test panicked: its thread's panic is the failure to report.
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(runner.join().unwrap_err())
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("hung for a minute"),
    }
}

fn counting_parts(counts: &Arc<Vec<AtomicUsize>>) -> Vec<Part> {
    (0..counts.len())
        .map(|i| {
            let counts = Arc::clone(counts);
            Box::new(move || {
                counts[i].fetch_add(1, Ordering::SeqCst);
            }) as Part
        })
        .collect()
}

/// Runs `parts`, retrying while a test on another thread holds the workers.
fn run_when_free(make: impl Fn() -> Vec<Part>) -> bool {
    loop {
        if let Some(complete) = workers::run(make()) {
            return complete;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn every_part_runs_exactly_once_before_the_call_returns() {
    within_a_minute(|| {
        for parts in [1, 2, 3] {
            for _ in 0..200 {
                let counts = Arc::new((0..parts).map(|_| AtomicUsize::new(0)).collect::<Vec<_>>());
                assert!(run_when_free(|| counting_parts(&counts)));
                let ran: Vec<usize> = counts.iter().map(|c| c.load(Ordering::SeqCst)).collect();
                // A retry after `None` ran nothing, so each part ran once in the call that returned.
                assert_eq!(ran, vec![1; parts], "{parts} parts");
            }
        }
    });
}

#[test]
fn a_worker_that_parked_wakes_for_the_next_part() {
    within_a_minute(|| {
        let counts = Arc::new((0..2).map(|_| AtomicUsize::new(0)).collect::<Vec<_>>());
        assert!(run_when_free(|| counting_parts(&counts)));
        // Longer than a worker spins before it parks.
        std::thread::sleep(Duration::from_millis(50));
        assert!(run_when_free(|| counting_parts(&counts)));
        assert_eq!(counts[1].load(Ordering::SeqCst), 2);
    });
}

#[test]
fn a_part_that_panics_on_a_worker_or_the_caller_is_reported_and_the_workers_go_on() {
    within_a_minute(|| {
        let panicking = || {
            vec![
                Box::new(|| {}) as Part,
                Box::new(|| panic!("a part that fails on purpose")) as Part,
            ]
        };
        assert!(!run_when_free(panicking));
        // The caller's own part (the first) may fail too; the worker's part still runs.
        let ran = Arc::new(AtomicBool::new(false));
        let own_part_panicking = || {
            let ran = Arc::clone(&ran);
            vec![
                Box::new(|| panic!("the caller's own part fails on purpose")) as Part,
                Box::new(move || ran.store(true, Ordering::SeqCst)) as Part,
            ]
        };
        assert!(!run_when_free(own_part_panicking));
        assert!(ran.load(Ordering::SeqCst));
        let counts = Arc::new((0..2).map(|_| AtomicUsize::new(0)).collect::<Vec<_>>());
        assert!(run_when_free(|| counting_parts(&counts)));
        assert_eq!(counts[1].load(Ordering::SeqCst), 1);
    });
}

#[test]
fn a_second_caller_gets_none_or_runs_its_parts_itself_while_the_workers_are_held() {
    within_a_minute(|| {
        let holding = Arc::new(AtomicBool::new(false));
        let tried = Arc::new(AtomicBool::new(false));
        let holder = {
            let (holding, tried) = (Arc::clone(&holding), Arc::clone(&tried));
            std::thread::spawn(move || {
                run_when_free(|| {
                    let (holding, tried) = (Arc::clone(&holding), Arc::clone(&tried));
                    // The caller's own part holds the workers until the other thread has tried.
                    vec![Box::new(move || {
                        holding.store(true, Ordering::SeqCst);
                        while !tried.load(Ordering::SeqCst) {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }) as Part]
                })
            })
        };
        while !holding.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let ran = Arc::new(AtomicBool::new(false));
        let part = {
            let ran = Arc::clone(&ran);
            Box::new(move || ran.store(true, Ordering::SeqCst)) as Part
        };
        assert_eq!(workers::run(vec![part]), None);
        assert!(!ran.load(Ordering::SeqCst), "a refused call runs nothing");
        // Anywhere: every part on this thread, the one that panics reported.
        let counts = Arc::new((0..3).map(|_| AtomicUsize::new(0)).collect::<Vec<_>>());
        let ran_on = Arc::new(std::sync::Mutex::new(None));
        let mut parts = counting_parts(&counts);
        let record = Arc::clone(&ran_on);
        parts.push(Box::new(move || {
            *record.lock().unwrap() = Some(std::thread::current().id());
            panic!("a part that fails on purpose");
        }));
        assert!(!workers::run_anywhere(parts));
        let ran: Vec<usize> = counts.iter().map(|c| c.load(Ordering::SeqCst)).collect();
        assert_eq!(ran, vec![1; 3]);
        assert_eq!(*ran_on.lock().unwrap(), Some(std::thread::current().id()));
        tried.store(true, Ordering::SeqCst);
        assert!(holder.join().unwrap());
    });
}
