//! Send pacing: a rate limiter that keeps senders at or below a byte rate.

use std::time::{Duration, Instant};

/// Rate limiter: keeps the average send rate at or below `bytes_per_second`, measured from
/// the first packet: a send that is due later waits (sleeping while more than 200 µs ahead,
/// then spinning), one that is due now or late goes out at once.
pub struct Pacer {
    bytes_per_second: f64,
    start: Option<Instant>,
    sent: f64,
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
        let start = *self.start.get_or_insert_with(Instant::now);
        if self.bytes_per_second <= 0.0 || !self.bytes_per_second.is_finite() {
            return;
        }
        let due = Duration::from_secs_f64(self.sent / self.bytes_per_second);
        self.sent += bytes as f64;
        let now = start.elapsed();
        if due > now {
            let ahead = due - now;
            if ahead > Duration::from_micros(200) {
                std::thread::sleep(ahead - Duration::from_micros(100));
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
