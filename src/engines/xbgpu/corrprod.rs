//! One correlation-products output ([`XPipeline`]): batches accumulated through a
//! [`Correlator`] over `heap_accumulation_threshold` batches, then one X heap per dump
//! (ICD §4.3), with MISSING on baselines of absent antennas.

use crate::spead::icd::n_baselines;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use serde::Serialize;

use super::backend::{BackendError, Correlator, PipelineError};
use crate::net::send::heap::HeapSender;
use crate::spead::{ids, Descriptor};

/// Counters of one corrprod output (katgpucbf's `xbgpu_output_x_*`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct XStats {
    /// Stream name.
    pub name: String,
    /// Heaps sent.
    pub heaps: u64,
    /// Payload bytes sent.
    pub bytes: u64,
    /// Visibilities sent.
    pub visibilities: u64,
    /// Visibilities that saturated.
    pub clipped_visibilities: u64,
    /// Accumulations not sent: no antenna present.
    pub skipped_accs: u64,
    /// Accumulations sent with MISSING markers (an antenna absent).
    pub incomplete_accs: u64,
    /// Accumulations not sent: output stopped (`?capture-stop`).
    pub unsent_accs: u64,
    /// Timestamp of the first heap sent.
    pub first_timestamp: Option<u64>,
    /// Timestamp of the latest heap sent (the output-lag gauge follows it).
    pub last_timestamp: Option<u64>,
    /// The latest accumulation flushed, sent or not (the sensors follow it).
    #[serde(skip)]
    pub last_acc: Option<AccSummary>,
}

/// One flushed accumulation, as the corrprod sensors report it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccSummary {
    /// Flushed accumulations so far (this one included).
    pub seq: u64,
    /// ADC timestamp of its start.
    pub start: u64,
    /// ADC timestamp just past its end.
    pub end: u64,
    /// Every antenna was present in every batch.
    pub synchronised: bool,
    /// Some antenna was present (an accumulation without any is skipped).
    pub processed: bool,
}

/// One correlation output.
pub struct XPipeline {
    /// Stream name.
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
    /// Sending on (`?capture-start`, from a timestamp) or off (`?capture-stop`).
    pub enabled: Arc<CaptureGate>,
    /// Counters.
    pub stats: XStats,
    /// Test only: baselines whose data are swapped in every dump (on the host: the dumps
    /// then take the staged path).
    pub debug_permute: Option<(usize, usize)>,
    /// `--use-peerdirect`: dumps written on the device into registered GPU-memory items and
    /// sent from there; None: staged through host memory and `sender`.
    #[cfg(feature = "ibverbs")]
    direct: Option<Box<super::direct::XDirect>>,
}

/// An output's capture switch (`?capture-start STREAM [TIMESTAMP]`, `?capture-stop`): data
/// go out while it is on, from the timestamp given (0: at once); stopping resets the
/// timestamp to 0, as katgpucbf's.
#[derive(Debug, Default)]
pub struct CaptureGate {
    on: AtomicBool,
    from: AtomicU64,
}

impl CaptureGate {
    /// A gate, on (from timestamp 0) or off.
    pub fn new(on: bool) -> Self {
        CaptureGate {
            on: AtomicBool::new(on),
            from: AtomicU64::new(0),
        }
    }

    /// On, for data from `ts` on.
    pub fn start(&self, ts: u64) {
        self.from.store(ts, Ordering::Relaxed);
        self.on.store(true, Ordering::Release);
    }

    /// Off (and the start timestamp back to 0).
    pub fn stop(&self) {
        self.on.store(false, Ordering::Release);
        self.from.store(0, Ordering::Relaxed);
    }

    /// Whether it is on.
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    /// Whether data stamped `ts` go out.
    pub fn sends(&self, ts: u64) -> bool {
        self.is_on() && ts >= self.from.load(Ordering::Relaxed)
    }
}

impl XPipeline {
    /// The output `name`: dumps every `threshold` batches (`batch_step` ADC samples apart)
    /// of `n_ants` antennas × `cps` channels from `channel_offset`, through `corr`, to
    /// `sender`; sending from the start when `enabled`.
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
            enabled: Arc::new(CaptureGate::new(enabled)),
            stats: XStats {
                name: name.into(),
                ..Default::default()
            },
            debug_permute: None,
            #[cfg(feature = "ibverbs")]
            direct: None,
        }
    }

    /// Sends the dumps from `direct`'s device items (the correlator writes each dump there
    /// on the device) instead of staging them through host memory; the staged sender keeps
    /// the descriptors it sent. Refused (`direct` given back) where the correlator cannot
    /// dump to device memory or the items are not one dump each.
    #[cfg(feature = "ibverbs")]
    pub fn with_direct(
        &mut self,
        direct: Box<super::direct::XDirect>,
    ) -> Result<(), Box<super::direct::XDirect>> {
        if !self.corr.dumps_to_device() || direct.item_bytes() != self.bytes.len() {
            return Err(direct);
        }
        self.direct = Some(direct);
        Ok(())
    }

    /// The heap counter the next data heap gets and the counters' step (the staged sender
    /// has already sent the descriptors).
    pub fn heap_cnt(&self) -> (u64, u64) {
        (self.sender.next_cnt(), self.sender.cnt_step())
    }

    /// The heaps' `frequency` item: the engine's first channel.
    pub fn channel_offset(&self) -> u64 {
        self.channel_offset
    }

    /// Bytes of one dump (the heap's payload).
    pub fn dump_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// The device items' sender, where dumps go out from GPU memory.
    #[cfg(feature = "ibverbs")]
    pub fn direct(&self) -> Option<&super::direct::XDirect> {
        self.direct.as_deref()
    }

    /// [`Self::direct`], mutable.
    #[cfg(feature = "ibverbs")]
    pub fn direct_mut(&mut self) -> Option<&mut super::direct::XDirect> {
        self.direct.as_deref_mut()
    }

    /// ADC samples per dump.
    pub fn acc_step(&self) -> u64 {
        self.threshold * self.batch_step
    }

    /// Batches from the one at `ts` to the end of its accumulation (1 for the last batch of
    /// an accumulation).
    pub fn batches_left(&self, ts: u64) -> u64 {
        let step = self.acc_step().max(1);
        (step - ts % step).div_ceil(self.batch_step.max(1))
    }

    /// Adds one batch (absent antennas zeroed in `data`).
    pub fn batch(&mut self, ts: u64, data: &[i8], present: &[bool]) -> Result<(), PipelineError> {
        self.batches(ts, data, present)
    }

    /// Adds consecutive batches, the first at `ts`, held back to back in `data` (absent
    /// antennas zeroed) with presence `present` (`[batch][antenna]`): the batches of one
    /// accumulation with an antenna present, one after another, go to the correlator in one
    /// call; a new accumulation dumps the one before.
    pub fn batches(&mut self, ts: u64, data: &[i8], present: &[bool]) -> Result<(), PipelineError> {
        let na = self.present.len();
        let n = present.len() / na.max(1);
        if n == 0 || present.len() != n * na || !data.len().is_multiple_of(n) {
            return Err(BackendError::ChunkShape {
                batches: n,
                bytes: data.len(),
                flags: present.len(),
                outputs: 0,
            }
            .into());
        }
        let bb = data.len() / n;
        // batches [run.0, run.1) not yet handed to the correlator
        let mut run: Option<(usize, usize)> = None;
        for k in 0..n {
            let acc = (ts + k as u64 * self.batch_step) / self.acc_step().max(1);
            if self.acc != Some(acc) {
                self.accumulate(&mut run, data, bb)?;
                if self.acc.is_some() {
                    self.dump()?;
                }
                self.acc = Some(acc);
                self.batches_seen = 0;
                self.present.iter_mut().for_each(|p| *p = true);
            }
            self.batches_seen += 1;
            let p = &present[k * na..(k + 1) * na];
            for (a, &q) in self.present.iter_mut().zip(p) {
                *a &= q;
            }
            if p.iter().any(|&q| q) {
                run = Some((run.map_or(k, |r| r.0), k + 1));
            } else {
                self.accumulate(&mut run, data, bb)?;
            }
        }
        self.accumulate(&mut run, data, bb)
    }

    /// Hands the batches of `run` (of `bb` bytes each in `data`) to the correlator.
    fn accumulate(
        &mut self,
        run: &mut Option<(usize, usize)>,
        data: &[i8],
        bb: usize,
    ) -> Result<(), PipelineError> {
        if let Some((a, b)) = run.take() {
            self.corr.accumulate(&data[a * bb..b * bb])?;
        }
        Ok(())
    }

    /// Waits until the correlator no longer reads host memory it was handed (before that
    /// memory is reused).
    pub fn fence_input(&mut self) -> Result<(), PipelineError> {
        Ok(self.corr.fence_input()?)
    }

    /// Ends the accumulation in progress: dumps it if it saw every batch (end of input).
    pub fn finish(&mut self) -> Result<(), PipelineError> {
        if self.acc.is_some() && self.batches_seen >= self.threshold {
            self.dump()?;
        }
        self.acc = None;
        #[cfg(feature = "ibverbs")]
        if let Some(d) = self.direct.as_mut() {
            d.flush()?;
        }
        self.sender.flush()?;
        Ok(())
    }

    /// The accumulation's dump: into a device item where dumps go out from GPU memory
    /// (`Some(item)`, the item acquired here), else into `out`. Returns the saturated
    /// count.
    fn dump_acc(&mut self) -> Result<(u64, Option<u32>), PipelineError> {
        #[cfg(feature = "ibverbs")]
        if let (Some(d), None) = (self.direct.as_mut(), self.debug_permute) {
            let (item, addr, len) = d.acquire()?;
            // SAFETY: the item is acquired (free of the NIC, written only here) and lies in
            // the sender's device memory, which lives as long as the sender.
            return match unsafe { self.corr.dump_to_device(&self.present, addr, len) } {
                Ok(c) => Ok((c, Some(item))),
                Err(e) => {
                    d.release(item);
                    Err(e.into())
                }
            };
        }
        Ok((self.corr.dump(&self.present, &mut self.out)?, None))
    }

    /// Gives back a dumped item that is not sent.
    fn unsent(&mut self, item: Option<u32>) {
        #[cfg(feature = "ibverbs")]
        if let (Some(item), Some(d)) = (item, self.direct.as_mut()) {
            d.release(item);
        }
        #[cfg(not(feature = "ibverbs"))]
        let _ = item;
    }

    fn dump(&mut self) -> Result<(), PipelineError> {
        let Some(acc) = self.acc else { return Ok(()) };
        if self.batches_seen < self.threshold {
            self.present.iter_mut().for_each(|p| *p = false);
        }
        let (clipped, item) = self.dump_acc()?;
        self.acc = None;
        let start = acc * self.acc_step();
        self.stats.last_acc = Some(AccSummary {
            seq: self.stats.last_acc.map_or(1, |a| a.seq + 1),
            start,
            end: start + self.acc_step(),
            synchronised: self.present.iter().all(|&p| p),
            processed: self.present.iter().any(|&p| p),
        });
        if !self.present.iter().any(|&p| p) {
            self.unsent(item);
            self.stats.skipped_accs += 1;
            return Ok(());
        }
        // An accumulation goes out iff capture is on and it starts at or after the capture
        // timestamp.
        if !self.enabled.sends(acc * self.acc_step()) {
            self.unsent(item);
            self.stats.unsent_accs += 1;
            return Ok(());
        }
        if self.present.iter().any(|&p| !p) {
            self.stats.incomplete_accs += 1;
        }
        let ts = acc * self.acc_step();
        #[cfg(feature = "ibverbs")]
        if let (Some(item), Some(d)) = (item, self.direct.as_mut()) {
            d.send(item, ts)?;
        } else {
            self.send_staged(ts)?;
        }
        #[cfg(not(feature = "ibverbs"))]
        {
            let _ = item;
            self.send_staged(ts)?;
        }
        self.stats.heaps += 1;
        self.stats.bytes += self.bytes.len() as u64;
        self.stats.visibilities += (self.out.len() / 2) as u64;
        self.stats.clipped_visibilities += clipped;
        self.stats.first_timestamp.get_or_insert(ts);
        self.stats.last_timestamp = Some(ts);
        Ok(())
    }

    /// Sends the dump in `out` through the staged sender (the debug permutation applied).
    fn send_staged(&mut self, ts: u64) -> Result<(), PipelineError> {
        if let Some((a, b)) = self.debug_permute {
            // Per channel: n_baselines × 4 products × (re, im).
            let per_bl = 8;
            let per_chan = n_baselines(self.present.len()) * per_bl;
            for chan in self.out.chunks_exact_mut(per_chan) {
                for k in 0..per_bl {
                    chan.swap(a * per_bl + k, b * per_bl + k);
                }
            }
        }
        for (b, v) in self.bytes.chunks_exact_mut(4).zip(&self.out) {
            b.copy_from_slice(&v.to_le_bytes());
        }
        self.sender.send_heap(
            0,
            &[(ids::TIMESTAMP, ts), (ids::FREQUENCY, self.channel_offset)],
            ids::XENG_RAW,
            &self.bytes,
        )?;
        Ok(())
    }
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
