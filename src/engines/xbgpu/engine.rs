//! The XB-engine: F-engine heaps → chunks (batches × antennas) → correlation accumulated
//! over `heap_accumulation_threshold` batches → X heaps (ICD §4.3), and beams per batch
//! (§4.4). Compute goes through the [`Correlator`] and [`Beamformer`] backends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::Serialize;
use tracing::info;

use crate::chunk::placement::FengPlacement;
use crate::chunk::Chunk;
use crate::net::recv::PacketSource;
use crate::net::send::heap::HeapSender;
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

/// Beamformer backend: all beams of one batch, or of several batches at once.
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

    /// Forms every beam of `ts.len()` batches (timestamps `ts`) held back to back in `data`,
    /// `present` being `[batch][antenna]`: `out[k · beams + b]` receives beam b of batch k.
    /// Returns saturated values per beam, per batch. The default calls
    /// [`Beamformer::beamform`] per batch.
    fn beamform_chunk(
        &mut self,
        ts: &[u64],
        data: &[i8],
        present: &[bool],
        out: &mut [Vec<i8>],
    ) -> Result<Vec<Vec<u64>>, String> {
        let n = ts.len();
        if n == 0
            || !data.len().is_multiple_of(n)
            || !present.len().is_multiple_of(n)
            || !out.len().is_multiple_of(n)
        {
            return Err(format!(
                "beamformer chunk: {n} batches, {} bytes, {} presence flags, {} outputs",
                data.len(),
                present.len(),
                out.len()
            ));
        }
        let (bb, na, nb) = (data.len() / n, present.len() / n, out.len() / n);
        out.chunks_mut(nb)
            .enumerate()
            .map(|(k, o)| {
                self.beamform(
                    ts[k],
                    &data[k * bb..(k + 1) * bb],
                    &present[k * na..(k + 1) * na],
                    o,
                )
            })
            .collect()
    }
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
    /// Beams formed ahead by [`BPipeline::prepare`]: timestamps, outputs (`[batch][beam]`),
    /// saturation per batch, and the next one to send.
    pre_ts: Vec<u64>,
    pre_outs: Vec<Vec<i8>>,
    pre_clipped: Vec<Vec<u64>>,
    pre_next: usize,
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
            pre_ts: Vec::new(),
            pre_outs: Vec::new(),
            pre_clipped: Vec::new(),
            pre_next: 0,
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

    /// Forms the beams of several batches (timestamps `ts`, back to back in `data`, `present`
    /// `[batch][antenna]`, each with an antenna present) in one beamformer call; the following
    /// [`BPipeline::batch`] calls for these timestamps, in order, send them.
    pub fn prepare(&mut self, ts: &[u64], data: &[i8], present: &[bool]) -> anyhow::Result<()> {
        self.pre_ts.clear();
        self.pre_clipped.clear();
        self.pre_next = 0;
        if ts.is_empty() {
            return Ok(());
        }
        let nb = self.outs.len();
        let beam_bytes = self.outs.first().map_or(0, Vec::len);
        self.pre_outs.resize_with(ts.len() * nb, Vec::new);
        self.pre_outs.truncate(ts.len() * nb);
        self.pre_outs
            .iter_mut()
            .for_each(|o| o.resize(beam_bytes, 0));
        self.pre_clipped = self
            .bf
            .beamform_chunk(ts, data, present, &mut self.pre_outs)
            .map_err(anyhow::Error::msg)?;
        self.pre_ts.extend_from_slice(ts);
        Ok(())
    }

    pub fn batch(&mut self, ts: u64, data: &[i8], present: &[bool]) -> anyhow::Result<()> {
        let n_present = present.iter().filter(|&&p| p).count() as u64;
        if n_present == 0 {
            self.stats.iter_mut().for_each(|s| s.skipped_heaps += 1);
            return Ok(());
        }
        let k = self.pre_next;
        let clipped = if self.pre_ts.get(k) == Some(&ts) {
            // formed ahead by `prepare`: take its outputs
            self.pre_next += 1;
            let nb = self.outs.len();
            for (o, p) in self
                .outs
                .iter_mut()
                .zip(&mut self.pre_outs[k * nb..(k + 1) * nb])
            {
                std::mem::swap(o, p);
            }
            std::mem::take(&mut self.pre_clipped[k])
        } else {
            self.bf
                .beamform(ts, data, present, &mut self.outs)
                .map_err(anyhow::Error::msg)?
        };
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
    let receiver = crate::engines::common::recv::spawn_receiver_monitored(
        src,
        placement.clone(),
        tx,
        back_rx,
        monitor,
    );
    let n = placement.n_ants;
    let slot = crate::chunk::Placement::slot_bytes(&placement);
    let bpc = placement.batches_per_chunk;
    let batch_bytes = n * slot;
    // The chunk's batches with an antenna present, back to back (absent antennas zeroed),
    // their presence and timestamps: the beams of a chunk are formed in one call.
    let mut cdata = vec![0i8; bpc * batch_bytes];
    let mut cpresent: Vec<bool> = Vec::with_capacity(bpc * n);
    let mut cts: Vec<u64> = Vec::with_capacity(bpc);
    let mut row: Vec<Option<usize>> = vec![None; bpc];
    let zeros = vec![0i8; batch_bytes];
    let absent = vec![false; n];
    // Batches are fed inside the received span only: none before the first heap, and
    // batches with nothing received after the latest heap wait here until a later heap
    // arrives (at the end of the input they are dropped, not counted as skipped).
    let mut started = false;
    let mut pending_empty: Vec<u64> = Vec::new();
    for chunk in rx.iter() {
        let batch_ts = |b: usize| {
            (chunk.chunk_id * placement.batches_per_chunk as u64 + b as u64)
                * placement.batch_step()
        };
        let received = |b: usize| (0..n).any(|a| chunk.received[b * n + a] != 0);
        cpresent.clear();
        cts.clear();
        for (b, r) in row.iter_mut().enumerate() {
            *r = None;
            if !received(b) || !(0..n).any(|a| chunk.present(b * n + a)) {
                continue;
            }
            let j = cts.len();
            *r = Some(j);
            cts.push(batch_ts(b));
            for a in 0..n {
                let s = b * n + a;
                let present = chunk.present(s);
                cpresent.push(present);
                let dst = &mut cdata[j * batch_bytes + a * slot..j * batch_bytes + (a + 1) * slot];
                if present {
                    dst.iter_mut()
                        .zip(chunk.slot(s))
                        .for_each(|(d, &x)| *d = x as i8);
                } else {
                    dst.iter_mut().for_each(|d| *d = 0);
                }
            }
        }
        if let Some(bp) = beams.as_mut() {
            let m = cts.len();
            bp.prepare(&cts, &cdata[..m * batch_bytes], &cpresent)?;
        }
        for (b, r) in row.iter().enumerate() {
            let ts = batch_ts(b);
            if !received(b) {
                if started {
                    pending_empty.push(ts);
                }
                continue;
            }
            started = true;
            for t in pending_empty.drain(..) {
                for x in xs.iter_mut() {
                    x.batch(t, &zeros, &absent)?;
                }
                if let Some(bp) = beams.as_mut() {
                    bp.batch(t, &zeros, &absent)?;
                }
            }
            // a received batch without any antenna present reads as zeros
            let (data, present) = match *r {
                Some(j) => (
                    &cdata[j * batch_bytes..(j + 1) * batch_bytes],
                    &cpresent[j * n..(j + 1) * n],
                ),
                None => (&zeros[..], &absent[..]),
            };
            for x in xs.iter_mut() {
                x.batch(ts, data, present)?;
            }
            if let Some(bp) = beams.as_mut() {
                bp.batch(ts, data, present)?;
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
