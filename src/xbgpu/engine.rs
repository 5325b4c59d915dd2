//! The XB-engine: F-engine heaps → chunks (batches × antennas) → correlation accumulated
//! over `heap_accumulation_threshold` batches → X heaps (ICD §4.3), and beams per batch
//! (§4.4). Compute goes through the [`Correlator`] and [`Beamformer`] backends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::Serialize;
use tracing::info;

use crate::chunk::placement::FengPlacement;
use crate::chunk::Chunk;
use crate::net::heapsend::HeapSender;
use crate::net::source::PacketSource;
use crate::spead::{ids, Descriptor};

/// The MISSING marker for visibilities of absent antennas (re, im).
pub const MISSING: (i32, i32) = (i32::MIN, 1);

/// Number of baselines (a1 ≤ a2) for `n` antennas.
pub fn n_baselines(n: usize) -> usize {
    n * (n + 1) / 2
}

/// Index of baseline (a1, a2), a1 ≤ a2.
pub fn baseline_index(a1: usize, a2: usize) -> usize {
    a2 * (a2 + 1) / 2 + a1
}

/// Correlation backend: accumulates batches, then dumps.
pub trait Correlator: Send {
    /// Adds one batch: (antenna, channel, spectrum, pol, re/im) int8.
    fn accumulate(&mut self, batch: &[i8]) -> Result<(), String>;
    /// Writes the accumulation as (channel, baseline, product, re/im) int32, saturated to
    /// ±(2^31−1), with MISSING on every baseline touching an absent antenna; resets the
    /// accumulator. Returns the number of saturated visibilities.
    fn dump(&mut self, present: &[bool], out: &mut [i32]) -> Result<u64, String>;
}

/// Beamformer backend: all beams of one batch.
pub trait Beamformer: Send {
    /// Forms every beam from one batch (absent antennas already zeroed). `out[b]` receives
    /// beam b as (channel, spectrum, re/im) int8. Returns saturated values per beam.
    fn beamform(
        &mut self,
        batch_ts: u64,
        batch: &[i8],
        present: &[bool],
        out: &mut [Vec<i8>],
    ) -> Result<Vec<u64>, String>;
}

/// Counters of one corrprod output (katgpucbf's `xbgpu_output_x_*`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct XStats {
    pub name: String,
    pub heaps: u64,
    pub bytes: u64,
    pub visibilities: u64,
    pub clipped_visibilities: u64,
    pub skipped_accs: u64,
    pub incomplete_accs: u64,
    pub unsent_accs: u64,
    pub first_timestamp: Option<u64>,
}

/// One correlation output.
pub struct XPipeline {
    pub name: String,
    corr: Box<dyn Correlator>,
    sender: HeapSender,
    threshold: u64,
    batch_step: u64,
    channel_offset: u64,
    acc: Option<u64>,
    batches_seen: u64,
    present: Vec<bool>,
    out: Vec<i32>,
    bytes: Vec<u8>,
    pub enabled: Arc<AtomicBool>,
    pub stats: XStats,
}

impl XPipeline {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: &str,
        corr: Box<dyn Correlator>,
        sender: HeapSender,
        threshold: u64,
        batch_step: u64,
        channel_offset: u64,
        n_ants: usize,
        cps: usize,
        enabled: bool,
    ) -> Self {
        let n = cps * n_baselines(n_ants) * 4 * 2;
        XPipeline {
            name: name.into(),
            corr,
            sender,
            threshold,
            batch_step,
            channel_offset,
            acc: None,
            batches_seen: 0,
            present: vec![true; n_ants],
            out: vec![0; n],
            bytes: vec![0; n * 4],
            enabled: Arc::new(AtomicBool::new(enabled)),
            stats: XStats {
                name: name.into(),
                ..Default::default()
            },
        }
    }

    /// ADC samples per dump.
    pub fn acc_step(&self) -> u64 {
        self.threshold * self.batch_step
    }

    /// Adds one batch (absent antennas zeroed in `data`).
    pub fn batch(&mut self, ts: u64, data: &[i8], present: &[bool]) -> anyhow::Result<()> {
        let acc = ts / self.acc_step();
        if self.acc != Some(acc) {
            if self.acc.is_some() {
                self.dump()?;
            }
            self.acc = Some(acc);
            self.batches_seen = 0;
            self.present.iter_mut().for_each(|p| *p = true);
        }
        self.batches_seen += 1;
        for (p, &q) in self.present.iter_mut().zip(present) {
            *p &= q;
        }
        if present.iter().any(|&p| p) {
            self.corr.accumulate(data).map_err(anyhow::Error::msg)?;
        }
        Ok(())
    }

    /// Ends the accumulation in progress: dumps it if it saw every batch (end of input).
    pub fn finish(&mut self) -> anyhow::Result<()> {
        if self.acc.is_some() && self.batches_seen >= self.threshold {
            self.dump()?;
        }
        self.acc = None;
        self.sender.flush()?;
        Ok(())
    }

    fn dump(&mut self) -> anyhow::Result<()> {
        let Some(acc) = self.acc else { return Ok(()) };
        if self.batches_seen < self.threshold {
            self.present.iter_mut().for_each(|p| *p = false);
        }
        let clipped = self
            .corr
            .dump(&self.present, &mut self.out)
            .map_err(anyhow::Error::msg)?;
        self.acc = None;
        if !self.present.iter().any(|&p| p) {
            self.stats.skipped_accs += 1;
            return Ok(());
        }
        if !self.enabled.load(Ordering::Relaxed) {
            self.stats.unsent_accs += 1;
            return Ok(());
        }
        if self.present.iter().any(|&p| !p) {
            self.stats.incomplete_accs += 1;
        }
        for (b, v) in self.bytes.chunks_exact_mut(4).zip(&self.out) {
            b.copy_from_slice(&v.to_le_bytes());
        }
        let ts = acc * self.acc_step();
        self.sender.send_heap(
            0,
            &[(ids::TIMESTAMP, ts), (ids::FREQUENCY, self.channel_offset)],
            ids::XENG_RAW,
            &self.bytes,
        )?;
        self.stats.heaps += 1;
        self.stats.bytes += self.bytes.len() as u64;
        self.stats.visibilities += (self.out.len() / 2) as u64;
        self.stats.clipped_visibilities += clipped;
        self.stats.first_timestamp.get_or_insert(ts);
        Ok(())
    }
}

/// Counters of the beams (katgpucbf's `xbgpu_output_b_*`), per beam.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BStats {
    pub name: String,
    pub heaps: u64,
    pub bytes: u64,
    pub clipped_samples: u64,
    pub skipped_heaps: u64,
}

/// All beams of one engine, sharing one heap counter sequence.
pub struct BPipeline {
    bf: Box<dyn Beamformer>,
    sender: HeapSender,
    channel_offset: u64,
    outs: Vec<Vec<i8>>,
    pub enabled: Vec<Arc<AtomicBool>>,
    pub stats: Vec<BStats>,
}

impl BPipeline {
    pub fn new(
        names: &[String],
        bf: Box<dyn Beamformer>,
        sender: HeapSender,
        channel_offset: u64,
        beam_bytes: usize,
        enabled: bool,
    ) -> Self {
        BPipeline {
            bf,
            sender,
            channel_offset,
            outs: vec![vec![0; beam_bytes]; names.len()],
            enabled: names
                .iter()
                .map(|_| Arc::new(AtomicBool::new(enabled)))
                .collect(),
            stats: names
                .iter()
                .map(|n| BStats {
                    name: n.clone(),
                    ..Default::default()
                })
                .collect(),
        }
    }

    pub fn batch(&mut self, ts: u64, data: &[i8], present: &[bool]) -> anyhow::Result<()> {
        let n_present = present.iter().filter(|&&p| p).count() as u64;
        if n_present == 0 {
            self.stats.iter_mut().for_each(|s| s.skipped_heaps += 1);
            return Ok(());
        }
        let clipped = self
            .bf
            .beamform(ts, data, present, &mut self.outs)
            .map_err(anyhow::Error::msg)?;
        for (b, out) in self.outs.iter().enumerate() {
            if !self.enabled[b].load(Ordering::Relaxed) {
                continue;
            }
            let bytes: &[u8] = bytemuck_i8(out);
            let items = [
                (ids::TIMESTAMP, ts),
                (ids::FREQUENCY, self.channel_offset),
                (ids::BEAM_ANTS, n_present),
            ];
            self.sender.send_heap(b, &items, ids::BF_RAW, bytes)?;
            let s = &mut self.stats[b];
            s.heaps += 1;
            s.bytes += bytes.len() as u64;
            s.clipped_samples += clipped.get(b).copied().unwrap_or(0);
        }
        Ok(())
    }

    pub fn finish(&mut self) -> std::io::Result<()> {
        self.sender.flush()
    }
}

fn bytemuck_i8(v: &[i8]) -> &[u8] {
    // SAFETY: i8 and u8 have the same size and alignment; every bit pattern is valid.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, v.len()) }
}

/// Descriptors of the X output.
pub fn x_descriptors(cps: usize, n_ants: usize) -> Vec<Descriptor> {
    let u48 = [('u', 48)];
    vec![
        Descriptor::with_format(
            ids::TIMESTAMP,
            "timestamp",
            "Timestamp of the start of the accumulation, in ADC samples.",
            &[],
            &u48,
        ),
        Descriptor::with_format(
            ids::FREQUENCY,
            "frequency",
            "Identifies the first channel in the band of frequencies in the SPEAD heap.",
            &[],
            &u48,
        ),
        Descriptor::with_dtype(
            ids::XENG_RAW,
            "xeng_raw",
            "Integrated baseline correlation products.",
            &[cps as u64, (n_baselines(n_ants) * 4) as u64, 2],
            "<i4",
        ),
    ]
}

/// What a run did.
#[derive(Debug, Clone, Serialize)]
pub struct XbgpuSummary {
    pub input_heaps: u64,
    pub input_missing_heaps: u64,
    pub input_incomplete_heaps: u64,
    pub recv_rejected: std::collections::BTreeMap<String, u64>,
    pub corrprods: Vec<XStats>,
    pub beams: Vec<BStats>,
}

/// Drives the engine until the input ends or a stop is requested; `monitor` receives the
/// receive thread's counters as they move.
pub fn run_pipelines(
    src: Box<dyn PacketSource>,
    placement: FengPlacement,
    mut xs: Vec<XPipeline>,
    mut beams: Option<BPipeline>,
    hook: &mut dyn FnMut(&[XPipeline], Option<&BPipeline>),
    monitor: crate::chunk::RecvMonitor,
) -> anyhow::Result<XbgpuSummary> {
    let (tx, rx) = crossbeam_channel::bounded::<Chunk>(4);
    let (back_tx, back_rx) = crossbeam_channel::bounded::<Chunk>(8);
    let receiver =
        crate::chunk::spawn_receiver_monitored(src, placement.clone(), tx, back_rx, monitor);
    let n = placement.n_ants;
    let slot = crate::chunk::Placement::slot_bytes(&placement);
    let mut batch = vec![0i8; n * slot];
    let mut present = vec![false; n];
    let absent = vec![false; n];
    // Batches are fed inside the received span only: none before the first heap, and
    // batches with nothing received after the latest heap wait here until a later heap
    // arrives (at the end of the input they are dropped, not counted as skipped).
    let mut started = false;
    let mut pending_empty: Vec<u64> = Vec::new();
    for chunk in rx.iter() {
        for b in 0..placement.batches_per_chunk {
            let ts = (chunk.chunk_id * placement.batches_per_chunk as u64 + b as u64)
                * placement.batch_step();
            if (0..n).all(|a| chunk.received[b * n + a] == 0) {
                if started {
                    pending_empty.push(ts);
                }
                continue;
            }
            started = true;
            for t in pending_empty.drain(..) {
                for x in xs.iter_mut() {
                    x.batch(t, &batch, &absent)?;
                }
                if let Some(bp) = beams.as_mut() {
                    bp.batch(t, &batch, &absent)?;
                }
            }
            for a in 0..n {
                let s = b * n + a;
                present[a] = chunk.present(s);
                let dst = &mut batch[a * slot..(a + 1) * slot];
                if present[a] {
                    dst.iter_mut()
                        .zip(chunk.slot(s))
                        .for_each(|(d, &x)| *d = x as i8);
                } else {
                    dst.iter_mut().for_each(|d| *d = 0);
                }
            }
            for x in xs.iter_mut() {
                x.batch(ts, &batch, &present)?;
            }
            if let Some(bp) = beams.as_mut() {
                bp.batch(ts, &batch, &present)?;
            }
        }
        let _ = back_tx.try_send(chunk);
        hook(&xs, beams.as_ref());
    }
    let recv = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("receive thread panicked"))??;
    for x in xs.iter_mut() {
        x.finish()?;
    }
    if let Some(bp) = beams.as_mut() {
        bp.finish()?;
    }
    let mut rejected = std::collections::BTreeMap::new();
    for r in crate::chunk::Reject::ALL {
        let k = recv.rejected(r);
        if k > 0 {
            rejected.insert(r.name().to_string(), k);
        }
    }
    let summary = XbgpuSummary {
        input_heaps: recv.heaps,
        input_missing_heaps: recv.missing_heaps,
        input_incomplete_heaps: recv.incomplete_heaps,
        recv_rejected: rejected,
        corrprods: xs.iter().map(|x| x.stats.clone()).collect(),
        beams: beams.map(|b| b.stats.clone()).unwrap_or_default(),
    };
    info!(?summary, "xbgpu finished");
    Ok(summary)
}
