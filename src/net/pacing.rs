//! Send pacing: a rate limiter that keeps senders at or below a byte rate.

use std::time::{Duration, Instant};

/// Rate limiter: keeps the average send rate at or below `bytes_per_second`, measured from
/// the first packet. A sender may run up to [`LEAD`] ahead of its schedule without waiting;
/// once it is further ahead it sleeps until its schedule catches up (the thread's timer
/// slack is set to 1 µs on first use, so a sleep ends close to when it was asked to). It
/// never spins: a paced thread uses the CPU it sends with and sleeps in between, one sleep
/// per [`LEAD`] of data at most. A sleep that overshoots makes the next sends due at once,
/// so the average rate holds. The burst a receiver sees is at most [`LEAD`] of data
/// (spead2's default burst is 64 KiB; at 2.14 GB/s, one digitiser pol, LEAD is 214 kB).
pub struct Pacer {
    bytes_per_second: f64,
    start: Option<Instant>,
    sent: f64,
}

/// How far ahead of its schedule a sender may run before it sleeps.
///
/// A spinning pacer (the earlier design: spin for waits under 30 µs) cost a digitiser
/// simulator's send thread about a fifth of a core at 2.14 GB/s, spinning between batches
/// of 32 packets; sleeping once per LEAD costs a few µs of syscall per 100 µs.
pub const LEAD: Duration = Duration::from_micros(100);

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

    fn paced(&self) -> bool {
        self.bytes_per_second > 0.0 && self.bytes_per_second.is_finite()
    }

    /// Accounts for `bytes` about to be sent, sleeping while the sender is more than
    /// [`LEAD`] ahead of its schedule.
    pub fn wait(&mut self, bytes: usize) {
        let start = match self.start {
            Some(s) => s,
            None => {
                tight_timer_slack();
                *self.start.insert(Instant::now())
            }
        };
        if let Some(d) = self.sleep_for(bytes, start.elapsed()) {
            std::thread::sleep(d);
        }
    }

    /// Accounts for `bytes` about to be sent at `now` (time since the first send): how long
    /// to sleep first, if at all. The bytes are due when the bytes before them have taken
    /// their time at the rate; a sender further than [`LEAD`] ahead of that sleeps until
    /// it is due.
    fn sleep_for(&mut self, bytes: usize, now: Duration) -> Option<Duration> {
        if !self.paced() {
            return None;
        }
        let due = Duration::from_secs_f64(self.sent / self.bytes_per_second);
        self.sent += bytes as f64;
        let ahead = due.checked_sub(now)?;
        (ahead > LEAD).then_some(ahead)
    }

    /// Seconds behind schedule (positive: sending slower than the rate).
    pub fn lag_seconds(&self) -> f64 {
        match self.start {
            Some(s) if self.paced() => {
                s.elapsed().as_secs_f64() - self.sent / self.bytes_per_second
            }
            _ => 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sender that takes no time to send: the clock moves only by the pacer's sleeps.
    fn run_instant(p: &mut Pacer, batches: usize, bytes: usize) -> (Duration, usize) {
        let mut now = Duration::ZERO;
        let mut sleeps = 0;
        for _ in 0..batches {
            if let Some(d) = p.sleep_for(bytes, now) {
                assert!(d > LEAD, "a sleep of {d:?} is within the lead");
                now += d;
                sleeps += 1;
            }
            // Never further ahead than LEAD plus this batch once the batch is out.
            let due = Duration::from_secs_f64(p.sent / p.bytes_per_second);
            let batch = Duration::from_secs_f64(bytes as f64 / p.bytes_per_second);
            assert!(due.saturating_sub(now) <= LEAD + batch + batch);
        }
        (now, sleeps)
    }

    #[test]
    fn an_instant_sender_is_held_to_the_rate_with_one_sleep_per_lead() {
        // 1 GB/s, batches of 10 kB (10 µs each): 10 000 batches take 100 ms.
        let mut p = Pacer::new(1e9);
        let (t, sleeps) = run_instant(&mut p, 10_000, 10_000);
        let want = Duration::from_millis(100);
        // The last batch goes at most LEAD before its due time.
        assert!(t + LEAD + Duration::from_micros(10) >= want, "{t:?}");
        assert!(t <= want, "{t:?}");
        // One sleep per ~LEAD of data, not one per batch.
        let per_lead = (want.as_secs_f64() / LEAD.as_secs_f64()) as usize;
        assert!(
            sleeps <= per_lead + 1 && sleeps >= per_lead / 2,
            "{sleeps} sleeps"
        );
    }

    #[test]
    fn a_late_sender_never_sleeps_and_unpaced_never_waits() {
        let mut p = Pacer::new(1e6);
        // 1 kB each at 1 MB/s: due every 1 ms; the sender comes every 2 ms.
        for i in 0..100u64 {
            assert_eq!(p.sleep_for(1000, Duration::from_millis(2 * i)), None);
        }
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let mut p = Pacer::new(rate);
            assert_eq!(p.sleep_for(1 << 30, Duration::ZERO), None);
            assert_eq!(p.sleep_for(1 << 30, Duration::ZERO), None);
            assert_eq!(p.lag_seconds(), 0.0);
        }
    }

    #[test]
    fn a_sender_back_from_a_stall_catches_up_at_once() {
        // After a 5 ms stall at 1 MB/s, the next 5 kB are already due: no sleeps until
        // the sender is ahead again.
        let mut p = Pacer::new(1e6);
        assert_eq!(p.sleep_for(1000, Duration::ZERO), None);
        let mut now = Duration::from_millis(5);
        let mut free = 0;
        while p.sleep_for(1000, now).is_none() {
            free += 1;
            now += Duration::from_micros(1);
        }
        assert!(
            (5..=6).contains(&free),
            "{free} sends before the first sleep"
        );
    }
}
