//! A precise wait for the simulated targets: one thread that sleeps until the earliest
//! deadline it holds and then wakes the waiting tasks.
//!
//! `tokio::time::sleep` fires on a millisecond tick after rounding its deadline up, so a
//! 10 ms sleep lasts about 10.5-11 ms, and a run at that latency would measure the timer
//! rather than the relay. A sleep on tokio's blocking pool is precise on an idle machine,
//! but each wait then takes two thread hand-offs (to a pool thread and back), and on a
//! busy 2-core machine those added about half a millisecond. Here a wait costs one
//! hand-off, as a reply from a real target does: the deadline passes on this thread (the
//! OS timer, tens of microseconds late), and the task is woken as by a socket turning
//! readable.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// A wait: its deadline and the task to wake.
type Wait = (Instant, oneshot::Sender<()>);

fn timer() -> &'static mpsc::Sender<Wait> {
    static TIMER: OnceLock<mpsc::Sender<Wait>> = OnceLock::new();
    TIMER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Wait>();
        std::thread::Builder::new()
            .name("bench-timer".into())
            .spawn(move || run(rx))
            .expect("the benchmark's timer thread starts");
        tx
    })
}

/// The timer thread: takes new waits, sleeping at most until the earliest deadline, and
/// wakes every wait whose deadline passed. Ends when every sender is gone.
fn run(rx: mpsc::Receiver<Wait>) {
    // By deadline, then by arrival (two waits may share a deadline).
    let mut waits: BTreeMap<(Instant, u64), oneshot::Sender<()>> = BTreeMap::new();
    let mut arrivals = 0u64;
    loop {
        let now = Instant::now();
        while waits
            .first_key_value()
            .is_some_and(|((at, _), _)| *at <= now)
        {
            if let Some((_, tx)) = waits.pop_first() {
                // The waiter may be gone (its task was dropped): nothing to wake.
                let _ = tx.send(());
            }
        }
        let next = match waits.first_key_value() {
            Some(((at, _), _)) => rx.recv_timeout(at.saturating_duration_since(now)),
            None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        };
        match next {
            Ok((at, tx)) => {
                arrivals += 1;
                waits.insert((at, arrivals), tx);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Waits until `latency` from now has passed.
pub async fn sleep(latency: Duration) {
    let (tx, rx) = oneshot::channel();
    if timer().send((Instant::now() + latency, tx)).is_ok() {
        // An error (the timer thread is gone) only ends the wait early.
        let _ = rx.await;
    }
}
