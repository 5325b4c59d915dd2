//! Send pacing: a rate limiter that keeps senders at or below a byte rate.

use std::time::{Duration, Instant};

/// Rate limiter: keeps the average send rate at or below `bytes_per_second`, measured from
/// the first packet: a send that is due later waits, one that is due now or late goes out
/// at once. Waits of more than [`SPIN`] sleep (the thread's timer slack is set to 1 µs on
/// first use, so a sleep ends close to when it was asked to), shorter ones spin: a paced
/// thread uses the CPU it sends with, not a whole core. A sleep that overshoots makes the
/// next sends due at once, so the average rate holds.
pub struct Pacer {
    bytes_per_second: f64,
    start: Option<Instant>,
    sent: f64,
}

/// Waits up to this long spin; longer ones sleep.
pub const SPIN: Duration = Duration::from_micros(30);

/// Sets the calling thread's timer slack to 1 µs (Linux; the default 50 µs would make
/// short sleeps late).
fn tight_timer_slack() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and touches only this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong);
    }
}

impl Pacer {
    /// A pacer for `bytes_per_second` (zero, negative or not finite: no pacing).
    pub fn new(bytes_per_second: f64) -> Self {
        Pacer {
            bytes_per_second,
            start: None,
            sent: 0.0,
        }
    }

    /// Accounts for `bytes` about to be sent, sleeping until they are due.
    pub fn wait(&mut self, bytes: usize) {
        let start = match self.start {
            Some(s) => s,
            None => {
                tight_timer_slack();
                *self.start.insert(Instant::now())
            }
        };
        if self.bytes_per_second <= 0.0 || !self.bytes_per_second.is_finite() {
            return;
        }
        let due = Duration::from_secs_f64(self.sent / self.bytes_per_second);
        self.sent += bytes as f64;
        let now = start.elapsed();
        if due > now {
            let ahead = due - now;
            if ahead > SPIN {
                std::thread::sleep(ahead - SPIN / 2);
            }
            while start.elapsed() < due {
                std::hint::spin_loop();
            }
        }
    }

    /// Seconds behind schedule (positive: sending slower than the rate).
    pub fn lag_seconds(&self) -> f64 {
        match self.start {
            Some(s) if self.bytes_per_second > 0.0 => {
                s.elapsed().as_secs_f64() - self.sent / self.bytes_per_second
            }
            _ => 0.0,
        }
    }
}
