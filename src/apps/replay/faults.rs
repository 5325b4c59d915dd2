//! The fault injector of `gpucbf replay` (sans-IO): packets in, in capture order, with their
//! real time; packets out, with the time to send them, after seeded faults. Each packet gets
//! at most one of drop, truncate, corrupt or duplicate (one draw against the cumulative
//! probabilities, so that every engine counter follows from the log); reordering and delay
//! bursts then act on what is sent. Every fault is logged with the packet's index and, when
//! it parses as SPEAD, its heap ([`Injected`]).

use std::collections::BTreeSet;
use std::net::SocketAddrV4;

use rand::{RngExt, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Serialize;

use crate::spead::{ids, PacketView};

/// What to inject.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultConfig {
    /// Probability that a packet is not sent.
    pub drop: f64,
    /// Probability that a packet is sent twice (the copy right after it).
    pub duplicate: f64,
    /// Probability that a packet is cut to a shorter length (at least one byte less).
    pub truncate: f64,
    /// Probability that one bit of a packet's SPEAD payload (the heap data after the item
    /// pointers; anywhere in a packet that is not SPEAD) is flipped.
    pub corrupt: f64,
    /// Packets are sent in a random order within a sliding window of this many (0 or 1:
    /// capture order).
    pub reorder: usize,
    /// A stall of this many milliseconds, then the held packets at once (0: none).
    pub delay_burst_ms: f64,
    /// One delay burst in each span of this many packets, at a random packet of it.
    pub delay_burst_interval: u64,
    /// Seed of every random choice.
    pub seed: u64,
}

impl FaultConfig {
    /// Checks the probabilities: each in [0, 1], and (one fault per packet) at most 1 in sum.
    pub fn validate(&self) -> Result<(), String> {
        let ps = [
            ("--drop", self.drop),
            ("--duplicate", self.duplicate),
            ("--truncate", self.truncate),
            ("--corrupt", self.corrupt),
        ];
        for (k, p) in ps {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("{k} {p}: a probability, 0 to 1"));
            }
        }
        let sum: f64 = ps.iter().map(|(_, p)| p).sum();
        if sum > 1.0 + 1e-12 {
            return Err(format!(
                "--drop, --duplicate, --truncate and --corrupt add up to {sum}: each packet \
                 gets at most one of them, so their sum is at most 1"
            ));
        }
        if !(self.delay_burst_ms.is_finite() && self.delay_burst_ms >= 0.0) {
            return Err(format!(
                "--delay-burst {}: milliseconds, 0 or more",
                self.delay_burst_ms
            ));
        }
        if self.delay_burst_ms > 0.0 && self.delay_burst_interval == 0 {
            return Err("--delay-burst-interval must be at least 1".into());
        }
        Ok(())
    }
}

/// One packet a fault acted on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hit {
    /// Index of the packet in the capture's UDP datagrams (0-based).
    pub packet: u64,
    /// Its destination in the capture.
    pub dst: String,
    /// Its heap counter, when it parses as SPEAD.
    pub heap_cnt: Option<u64>,
    /// Its heap's timestamp item (ADC samples), when present.
    pub timestamp: Option<u64>,
    /// The digitiser id (digitiser heaps) or F-engine id (F-engine heaps), when present.
    pub stream: Option<u64>,
    /// Truncate: the length it was cut to (from `bytes`); corrupt: the byte flipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<u64>,
    /// Truncate: the packet's length; corrupt: the bit (0-7) flipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// One kind of fault: how many packets and heaps it touched, and which.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FaultLog {
    /// Packets affected.
    pub count: u64,
    /// Distinct heaps (destination, heap counter) among them.
    pub heaps: u64,
    /// The packets, in capture order.
    pub packets: Vec<Hit>,
}

impl FaultLog {
    fn add(&mut self, h: Hit) {
        self.count += 1;
        self.packets.push(h);
    }

    fn finish(&mut self) {
        self.packets.sort_by_key(|h| h.packet);
        let heaps: BTreeSet<(&str, u64)> = self
            .packets
            .iter()
            .filter_map(|h| h.heap_cnt.map(|c| (h.dst.as_str(), c)))
            .collect();
        self.heaps = heaps.len() as u64;
    }
}

/// Everything injected (`--injected FILE`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Injected {
    /// The seed.
    pub seed: u64,
    /// UDP datagrams read from the capture.
    pub packets_in: u64,
    /// Datagrams sent (duplicates included, drops not).
    pub packets_out: u64,
    /// Packets not sent.
    pub drop: FaultLog,
    /// Packets sent twice (counted once each).
    pub duplicate: FaultLog,
    /// Packets cut short.
    pub truncate: FaultLog,
    /// Packets with one payload bit flipped.
    pub corrupt: FaultLog,
    /// Packets sent before an earlier one of the capture (they overtook it).
    pub reorder: FaultLog,
    /// Packets before which the sender stalled (`--delay-burst`).
    pub delay_burst: FaultLog,
}

/// A packet to send: its capture index, destination, bytes and send time (seconds from
/// the capture's first packet, before the rate is applied).
#[derive(Debug, Clone, PartialEq)]
pub struct OutPacket {
    /// Index in the capture.
    pub index: u64,
    /// Destination in the capture.
    pub dst: SocketAddrV4,
    /// The bytes to send.
    pub payload: Vec<u8>,
    /// When to send it.
    pub time: f64,
}

/// The injector: [`Injector::push`] each packet in capture order, then
/// [`Injector::finish`].
pub struct Injector {
    cfg: FaultConfig,
    rng: Xoshiro256PlusPlus,
    /// Packets waiting in the reorder window, in capture order.
    window: Vec<OutPacket>,
    /// Time of the latest packet sent (send times never go back).
    last_time: f64,
    /// A delay burst holds packets until this time.
    hold_until: f64,
    /// The packet of the current burst interval that stalls.
    burst_at: Option<u64>,
    log: Injected,
}

/// The heap fields a [`Hit`] records.
fn hit(index: u64, dst: SocketAddrV4, payload: &[u8]) -> Hit {
    let p = PacketView::parse(payload).ok();
    let imm = |id| p.as_ref().and_then(|p| p.immediate(id));
    Hit {
        packet: index,
        dst: dst.to_string(),
        heap_cnt: p.as_ref().map(|p| p.heap_cnt),
        timestamp: imm(ids::TIMESTAMP),
        stream: imm(ids::DIGITISER_ID).or_else(|| imm(ids::FENG_ID)),
        at: None,
        bytes: None,
    }
}

impl Injector {
    /// An injector for `cfg` (validated by the caller).
    pub fn new(cfg: FaultConfig) -> Self {
        Injector {
            rng: Xoshiro256PlusPlus::seed_from_u64(cfg.seed),
            log: Injected {
                seed: cfg.seed,
                ..Injected::default()
            },
            cfg,
            window: Vec::new(),
            last_time: f64::NEG_INFINITY,
            hold_until: f64::NEG_INFINITY,
            burst_at: None,
        }
    }

    /// Takes packet `index` (capture order) at real time `time` (seconds); appends what is
    /// ready to send to `out`.
    pub fn push(
        &mut self,
        index: u64,
        time: f64,
        dst: SocketAddrV4,
        mut payload: Vec<u8>,
        out: &mut Vec<OutPacket>,
    ) {
        self.log.packets_in += 1;
        let c = &self.cfg;
        let u: f64 = self.rng.random();
        let (d, t, k, p) = (c.drop, c.truncate, c.corrupt, c.duplicate);
        let mut copies = 1;
        if u < d {
            self.log.drop.add(hit(index, dst, &payload));
            copies = 0;
        } else if u < d + t && !payload.is_empty() {
            let mut h = hit(index, dst, &payload);
            let len = self.rng.random_range(0..payload.len());
            h.at = Some(len as u64);
            h.bytes = Some(payload.len() as u64);
            payload.truncate(len);
            self.log.truncate.add(h);
        } else if u < d + t + k && !payload.is_empty() {
            let mut h = hit(index, dst, &payload);
            let start = PacketView::parse(&payload)
                .ok()
                .filter(|v| !v.payload.is_empty())
                .map_or(0, |v| payload.len() - v.payload.len());
            let byte = self.rng.random_range(start..payload.len());
            let bit = self.rng.random_range(0..8u32);
            payload[byte] ^= 1 << bit;
            h.at = Some(byte as u64);
            h.bytes = Some(bit as u64);
            self.log.corrupt.add(h);
        } else if u < d + t + k + p {
            self.log.duplicate.add(hit(index, dst, &payload));
            copies = 2;
        }
        let pkt = OutPacket {
            index,
            dst,
            payload,
            time,
        };
        if copies == 2 {
            self.window.push(pkt.clone());
        }
        if copies > 0 {
            self.window.push(pkt);
        }
        while self.window.len() > self.cfg.reorder.max(1) {
            self.emit(out);
        }
    }

    /// Sends what the reorder window holds; returns the log.
    pub fn finish(mut self, out: &mut Vec<OutPacket>) -> Injected {
        while !self.window.is_empty() {
            self.emit(out);
        }
        for l in [
            &mut self.log.drop,
            &mut self.log.duplicate,
            &mut self.log.truncate,
            &mut self.log.corrupt,
            &mut self.log.reorder,
            &mut self.log.delay_burst,
        ] {
            l.finish();
        }
        self.log
    }

    /// Sends one packet of the window: a random one when reordering, else the oldest.
    fn emit(&mut self, out: &mut Vec<OutPacket>) {
        let i = if self.cfg.reorder > 1 {
            self.rng.random_range(0..self.window.len())
        } else {
            0
        };
        let mut pkt = self.window.remove(i);
        // It overtook the packets before it in the window (a duplicate's copy is not an
        // earlier packet).
        if self.window[..i].iter().any(|q| q.index < pkt.index) {
            self.log.reorder.add(hit(pkt.index, pkt.dst, &pkt.payload));
        }
        self.delay_burst(&pkt);
        pkt.time = pkt.time.max(self.last_time).max(self.hold_until);
        self.last_time = pkt.time;
        self.log.packets_out += 1;
        out.push(pkt);
    }

    /// Starts a stall before `pkt` if it is the burst packet of its interval.
    fn delay_burst(&mut self, pkt: &OutPacket) {
        let n = self.cfg.delay_burst_interval;
        if self.cfg.delay_burst_ms <= 0.0 || n == 0 {
            return;
        }
        let k = self.log.packets_out;
        if k.is_multiple_of(n) {
            self.burst_at = Some(k + self.rng.random_range(0..n));
        }
        if self.burst_at == Some(k) {
            self.log
                .delay_burst
                .add(hit(pkt.index, pkt.dst, &pkt.payload));
            self.hold_until = pkt.time.max(self.last_time) + self.cfg.delay_burst_ms * 1e-3;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spead::HeapBuilder;

    fn dst() -> SocketAddrV4 {
        "127.0.0.1:7148".parse().unwrap()
    }

    /// One single-packet heap per index: timestamp 4096·i, digitiser id i % 2.
    fn packet(i: u64) -> Vec<u8> {
        let data = vec![i as u8; 64];
        let h = HeapBuilder::new(i + 1)
            .immediate(ids::TIMESTAMP, 4096 * i)
            .immediate(ids::DIGITISER_ID, i % 2)
            .addressed(ids::ADC_SAMPLES, &data);
        h.packets(9000, true).unwrap().remove(0).to_bytes()
    }

    fn run(cfg: FaultConfig, n: u64) -> (Vec<OutPacket>, Injected) {
        let mut inj = Injector::new(cfg);
        let mut out = Vec::new();
        for i in 0..n {
            inj.push(i, i as f64 * 1e-3, dst(), packet(i), &mut out);
        }
        let log = inj.finish(&mut out);
        (out, log)
    }

    #[test]
    fn no_faults_sends_the_capture_as_it_is() {
        let (out, log) = run(FaultConfig::default(), 50);
        assert_eq!(out.len(), 50);
        for (i, p) in out.iter().enumerate() {
            assert_eq!((p.index, &p.payload), (i as u64, &packet(i as u64)));
            assert_eq!(p.time, i as f64 * 1e-3);
        }
        assert_eq!((log.packets_in, log.packets_out), (50, 50));
        assert_eq!(
            log.drop.count + log.reorder.count + log.delay_burst.count,
            0
        );
    }

    /// Every packet is accounted for by the log: sent once, twice (duplicate), cut
    /// (truncate), flipped (corrupt) or not at all (drop); the same seed gives the same run.
    #[test]
    fn the_log_accounts_for_every_packet_sent() {
        let cfg = FaultConfig {
            drop: 0.1,
            duplicate: 0.1,
            truncate: 0.1,
            corrupt: 0.1,
            reorder: 8,
            seed: 42,
            ..FaultConfig::default()
        };
        let n = 2000;
        let (out, log) = run(cfg.clone(), n);
        assert_eq!(run(cfg.clone(), n), (out.clone(), log.clone()));
        let other = run(FaultConfig { seed: 43, ..cfg }, n).1;
        assert_ne!(other.drop.packets, log.drop.packets);
        let idx = |l: &FaultLog| l.packets.iter().map(|h| h.packet).collect::<BTreeSet<_>>();
        let (dr, du, tr, co) = (
            idx(&log.drop),
            idx(&log.duplicate),
            idx(&log.truncate),
            idx(&log.corrupt),
        );
        for l in [&log.drop, &log.duplicate, &log.truncate, &log.corrupt] {
            // About 10 % each, and one fault per packet.
            assert!((100..300).contains(&l.count), "{}", l.count);
            assert_eq!(l.heaps, l.count);
        }
        assert_eq!(dr.len() + du.len() + tr.len() + co.len(), {
            let mut all = dr.clone();
            all.extend(&du);
            all.extend(&tr);
            all.extend(&co);
            all.len()
        });
        assert_eq!(log.packets_out, n - log.drop.count + log.duplicate.count);
        assert_eq!(out.len() as u64, log.packets_out);
        let mut times = 0.0f64;
        let mut per_index = std::collections::BTreeMap::<u64, u32>::new();
        for p in &out {
            assert!(p.time >= times, "send times never go back");
            times = p.time;
            *per_index.entry(p.index).or_default() += 1;
            let orig = packet(p.index);
            if tr.contains(&p.index) {
                let h = log.truncate.packets.iter().find(|h| h.packet == p.index);
                assert_eq!(p.payload.len() as u64, h.unwrap().at.unwrap());
                assert!(orig.starts_with(&p.payload) && p.payload.len() < orig.len());
            } else if co.contains(&p.index) {
                let diff: Vec<usize> = (0..orig.len())
                    .filter(|&b| orig[b] != p.payload[b])
                    .collect();
                assert_eq!(diff.len(), 1);
                assert!(
                    diff[0] >= orig.len() - 64,
                    "only the heap payload is flipped"
                );
                assert_eq!((orig[diff[0]] ^ p.payload[diff[0]]).count_ones(), 1);
            } else {
                assert_eq!(p.payload, orig);
            }
        }
        for i in 0..n {
            let want = if dr.contains(&i) {
                0
            } else if du.contains(&i) {
                2
            } else {
                1
            };
            assert_eq!(per_index.get(&i).copied().unwrap_or(0), want, "packet {i}");
        }
        // Reordered: exactly the packets sent before an earlier packet still to come.
        let mut reordered = BTreeSet::new();
        for (k, p) in out.iter().enumerate() {
            if out[k + 1..].iter().any(|q| q.index < p.index) {
                reordered.insert(p.index);
            }
        }
        assert_eq!(idx(&log.reorder), reordered);
        assert!(log.reorder.count > 100);
        let hit = &log.drop.packets[0];
        assert_eq!(hit.timestamp, Some(4096 * hit.packet));
        assert_eq!(hit.stream, Some(hit.packet % 2));
        assert_eq!(hit.heap_cnt, Some(hit.packet + 1));
    }

    #[test]
    fn a_delay_burst_holds_packets_then_sends_them_at_once() {
        let cfg = FaultConfig {
            delay_burst_ms: 5.0,
            delay_burst_interval: 100,
            seed: 7,
            ..FaultConfig::default()
        };
        let (out, log) = run(cfg, 300);
        assert_eq!(log.delay_burst.count, 3);
        for h in &log.delay_burst.packets {
            let k = h.packet as usize;
            let t0 = k as f64 * 1e-3;
            // The packets of the next 5 ms leave together, 5 ms after the stall began.
            for p in &out[k..(k + 5).min(300)] {
                assert!((p.time - (t0 + 5e-3)).abs() < 1e-12, "{p:?}");
            }
            if k + 6 < 300 {
                assert_eq!(out[k + 6].time, (k + 6) as f64 * 1e-3);
            }
        }
    }

    #[test]
    fn probabilities_are_checked() {
        let bad = |c: FaultConfig| c.validate().unwrap_err();
        assert!(bad(FaultConfig {
            drop: 1.5,
            ..Default::default()
        })
        .contains("--drop"));
        assert!(bad(FaultConfig {
            drop: 0.6,
            truncate: 0.6,
            ..Default::default()
        })
        .contains("sum"));
        assert!(bad(FaultConfig {
            corrupt: f64::NAN,
            ..Default::default()
        })
        .contains("--corrupt"));
        assert!(bad(FaultConfig {
            delay_burst_ms: -1.0,
            ..Default::default()
        })
        .contains("--delay-burst"));
        FaultConfig {
            drop: 0.5,
            duplicate: 0.5,
            ..Default::default()
        }
        .validate()
        .unwrap();
    }
}
