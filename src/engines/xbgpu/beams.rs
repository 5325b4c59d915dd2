//! The beams of one XB-engine ([`BPipeline`]): every beam of a batch formed through a
//! [`Beamformer`] (a chunk of batches at once where it can), one heap per beam per batch
//! (ICD §4.4), all beams sharing one heap counter sequence. The beams are staged through
//! host memory, or (`--use-peerdirect`, [`BPipeline::with_direct`]) formed on the device
//! into an item per batch and sent from there, the captured beams' heaps only.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::Serialize;

use super::backend::{Beamformer, PipelineError};
use crate::engines::common::send_worker::{HeapPart, OutBuf, QueuedSender, SendWorker};
use crate::net::send::heap::HeapSender;
use crate::spead::{ids, Descriptor};

/// Counters of the beams (katgpucbf's `xbgpu_output_b_*`), per beam.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BStats {
    /// Beam (stream) name.
    pub name: String,
    /// Heaps sent.
    pub heaps: u64,
    /// Payload bytes sent.
    pub bytes: u64,
    /// Beam values that saturated.
    pub clipped_samples: u64,
    /// Heaps not sent: no antenna present.
    pub skipped_heaps: u64,
    /// Timestamp of the latest heap sent (the output-lag gauge follows it).
    pub last_timestamp: Option<u64>,
    /// Beam values that saturated, sent or not (the `beng-clip-cnt` sensor).
    #[serde(skip)]
    pub clipped_formed: u64,
}

/// Where the beam heaps are sent from.
enum BeamTx {
    /// The thread that forms them (a pcap file keeps the order of every output's packets).
    Inline(HeapSender),
    /// A send thread of their own (live outputs: pacing and the socket calls, about half
    /// a core per GB/s on loopback, stay off the thread that feeds the GPU).
    Queued {
        /// The beams' queue.
        q: QueuedSender,
        /// Its thread (kept for as long as the queue).
        _worker: SendWorker,
    },
}

/// All beams of one engine, sharing one heap counter sequence.
pub struct BPipeline {
    bf: Box<dyn Beamformer>,
    tx: BeamTx,
    channel_offset: u64,
    /// The staged sender's next heap counter and step when it came (descriptors sent).
    heap_cnt: (u64, u64),
    beam_bytes: usize,
    outs: Vec<Vec<i8>>,
    /// Beams formed ahead by [`BPipeline::prepare`]: timestamps, outputs (`[batch][beam]`),
    /// saturation per batch, and the next one to send.
    pre_ts: Vec<u64>,
    pre_outs: Vec<Vec<i8>>,
    pre_clipped: Vec<Vec<u64>>,
    pre_next: usize,
    /// `--use-peerdirect`: the beams formed on the device into registered items and sent
    /// from there (with the items of the batches formed ahead); None: staged.
    #[cfg(feature = "ibverbs")]
    direct: Option<Box<super::direct::BDirect>>,
    #[cfg(feature = "ibverbs")]
    pre_items: Vec<u32>,
    /// Sending on or off, per beam (`?capture-start` / `?capture-stop`).
    pub enabled: Vec<Arc<super::corrprod::CaptureGate>>,
    /// Counters per beam.
    pub stats: Vec<BStats>,
    /// ADC timestamp just past the input chunk most recently taken for beamforming: beam
    /// parameters set before it is read apply from it on (`steady-state-timestamp`).
    pub steady: Arc<AtomicU64>,
}

impl BPipeline {
    /// The beams `names` (`beam_bytes` per heap) formed by `bf` for the channels from
    /// `channel_offset`, sent through `sender` (one destination per beam); sending from the
    /// start when `enabled`.
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
            heap_cnt: (sender.next_cnt(), sender.cnt_step()),
            tx: BeamTx::Inline(sender),
            channel_offset,
            beam_bytes,
            outs: vec![vec![0; beam_bytes]; names.len()],
            pre_ts: Vec::new(),
            pre_outs: Vec::new(),
            pre_clipped: Vec::new(),
            pre_next: 0,
            #[cfg(feature = "ibverbs")]
            direct: None,
            #[cfg(feature = "ibverbs")]
            pre_items: Vec::new(),
            enabled: names
                .iter()
                .map(|_| Arc::new(super::corrprod::CaptureGate::new(enabled)))
                .collect(),
            stats: names
                .iter()
                .map(|n| BStats {
                    name: n.clone(),
                    ..Default::default()
                })
                .collect(),
            steady: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Sends the beam heaps from a thread of their own (pinned to `core` if given) when the
    /// sender's sink is live; a file sink keeps them on the forming thread.
    pub fn with_send_thread(mut self, core: Option<usize>) -> std::io::Result<Self> {
        if let BeamTx::Inline(s) = self.tx {
            self.tx = if s.is_offline() {
                BeamTx::Inline(s)
            } else {
                let (worker, mut q) = SendWorker::spawn(vec![s], core)?;
                let q = q
                    .pop()
                    .ok_or_else(|| std::io::Error::other("no beam sender"))?;
                BeamTx::Queued { q, _worker: worker }
            };
        }
        Ok(self)
    }

    /// Sends the beams from `direct`'s device items (the beamformer writes each batch's
    /// beams there on the device) instead of staging them through host memory; the staged
    /// sender keeps the descriptors it sent. Refused (`direct` given back) where the
    /// beamformer cannot write device memory or the items are not one batch of these beams.
    #[cfg(feature = "ibverbs")]
    pub fn with_direct(
        &mut self,
        direct: Box<super::direct::BDirect>,
    ) -> Result<(), Box<super::direct::BDirect>> {
        if !self.bf.forms_to_device()
            || direct.n_beams() != self.outs.len()
            || direct.beam_bytes() != self.beam_bytes
        {
            return Err(direct);
        }
        self.direct = Some(direct);
        Ok(())
    }

    /// True if the beamformer can write the beams into device memory.
    pub fn forms_to_device(&self) -> bool {
        self.bf.forms_to_device()
    }

    /// The device items' sender, where the beams go out from GPU memory.
    #[cfg(feature = "ibverbs")]
    pub fn direct(&self) -> Option<&super::direct::BDirect> {
        self.direct.as_deref()
    }

    /// [`Self::direct`], mutable.
    #[cfg(feature = "ibverbs")]
    pub fn direct_mut(&mut self) -> Option<&mut super::direct::BDirect> {
        self.direct.as_deref_mut()
    }

    /// The heap counter the first data heap gets and the counters' step (the staged
    /// sender has already sent the descriptors).
    pub fn heap_cnt(&self) -> (u64, u64) {
        self.heap_cnt
    }

    /// The heaps' `frequency` item: the engine's first channel.
    pub fn channel_offset(&self) -> u64 {
        self.channel_offset
    }

    /// Bytes of one beam's heap.
    pub fn beam_bytes(&self) -> usize {
        self.beam_bytes
    }

    /// Whether the beams are sent from a thread of their own.
    pub fn sends_from_own_thread(&self) -> bool {
        matches!(self.tx, BeamTx::Queued { .. })
    }

    /// Notes that the input chunk ending at `end` is taken for beamforming: a beam request
    /// that reads [`BPipeline::steady`] after this and still sees the previous value changed
    /// the parameters before this chunk's beams read them (sequentially consistent, against
    /// the beam set's lock).
    pub fn taken(&self, end: u64) {
        self.steady.fetch_max(end, Ordering::SeqCst);
    }

    /// Forms the beams of several batches (timestamps `ts`, back to back in `data`, `present`
    /// `[batch][antenna]`, each with an antenna present) in one beamformer call; the following
    /// [`BPipeline::batch`] calls for these timestamps, in order, send them.
    pub fn prepare(
        &mut self,
        ts: &[u64],
        data: &[i8],
        present: &[bool],
    ) -> Result<(), PipelineError> {
        self.release_prepared();
        self.pre_ts.clear();
        self.pre_clipped.clear();
        self.pre_next = 0;
        if ts.is_empty() {
            return Ok(());
        }
        #[cfg(feature = "ibverbs")]
        if self.direct.is_some() {
            return self.prepare_direct(ts, data, present);
        }
        let nb = self.outs.len();
        self.pre_outs.resize_with(ts.len() * nb, Vec::new);
        self.pre_outs.truncate(ts.len() * nb);
        let beam_bytes = self.beam_bytes;
        self.pre_outs
            .iter_mut()
            .for_each(|o| o.resize(beam_bytes, 0));
        self.pre_clipped = self
            .bf
            .beamform_chunk(ts, data, present, &mut self.pre_outs)?;
        self.pre_ts.extend_from_slice(ts);
        Ok(())
    }

    /// Forms the beams of batches `ts` (as [`Self::prepare`]) into device items, one per
    /// batch, for as many batches as there are items (the rest are formed one by one).
    #[cfg(feature = "ibverbs")]
    fn prepare_direct(
        &mut self,
        ts: &[u64],
        data: &[i8],
        present: &[bool],
    ) -> Result<(), PipelineError> {
        let Some(d) = self.direct.as_mut() else {
            return Ok(());
        };
        let all = ts.len();
        if !data.len().is_multiple_of(all) || !present.len().is_multiple_of(all) {
            return Err(super::backend::BackendError::ChunkShape {
                batches: all,
                bytes: data.len(),
                flags: present.len(),
                outputs: 0,
            }
            .into());
        }
        let n = all.min(d.sender().n_items());
        let (bb, na) = (data.len() / all, present.len() / all);
        let mut dsts = Vec::with_capacity(n * self.outs.len());
        for _ in 0..n {
            match d.acquire(&mut dsts) {
                Ok(item) => self.pre_items.push(item),
                Err(e) => {
                    self.release_prepared();
                    return Err(e.into());
                }
            }
        }
        // SAFETY: the items are acquired (free of the NIC, written only here) and lie in
        // the sender's device memory, which lives as long as the sender.
        let formed = unsafe {
            self.bf.beamform_chunk_to_device(
                &ts[..n],
                &data[..n * bb],
                &present[..n * na],
                &dsts,
                self.beam_bytes,
            )
        };
        match formed {
            Ok(c) => {
                self.pre_clipped = c;
                self.pre_ts.extend_from_slice(&ts[..n]);
                Ok(())
            }
            Err(e) => {
                self.release_prepared();
                Err(e.into())
            }
        }
    }

    /// Gives back the items of batches formed ahead and not sent.
    fn release_prepared(&mut self) {
        #[cfg(feature = "ibverbs")]
        if let Some(d) = self.direct.as_mut() {
            for &item in self.pre_items.get(self.pre_next..).unwrap_or_default() {
                d.release(item);
            }
            self.pre_items.clear();
        }
    }

    /// Forms (or takes from [`BPipeline::prepare`]) and sends the beams of the batch at
    /// `ts`; a batch without any antenna present is counted as skipped.
    pub fn batch(&mut self, ts: u64, data: &[i8], present: &[bool]) -> Result<(), PipelineError> {
        let n_present = present.iter().filter(|&&p| p).count() as u64;
        if n_present == 0 {
            // Formed ahead all the same (`prepare` was handed it): passed over, its item
            // given back, so that the next batch takes the next one formed.
            if self.pre_ts.get(self.pre_next) == Some(&ts) {
                #[cfg(feature = "ibverbs")]
                if let (Some(&item), Some(d)) =
                    (self.pre_items.get(self.pre_next), self.direct.as_mut())
                {
                    d.release(item);
                }
                self.pre_next += 1;
            }
            self.stats.iter_mut().for_each(|s| s.skipped_heaps += 1);
            return Ok(());
        }
        let (clipped, item) = self.form(ts, data, present)?;
        for (s, c) in self.stats.iter_mut().zip(&clipped) {
            s.clipped_formed += c;
        }
        let sending: Vec<usize> = (0..self.outs.len())
            .filter(|&b| self.enabled[b].sends(ts))
            .collect();
        #[cfg(feature = "ibverbs")]
        if let (Some(item), Some(d)) = (item, self.direct.as_mut()) {
            d.send(item, ts, n_present, &sending)?;
        } else {
            self.send_staged(ts, n_present, &sending)?;
        }
        #[cfg(not(feature = "ibverbs"))]
        {
            let _ = item;
            self.send_staged(ts, n_present, &sending)?;
        }
        for &b in &sending {
            let s = &mut self.stats[b];
            s.heaps += 1;
            s.bytes += self.beam_bytes as u64;
            s.clipped_samples += clipped.get(b).copied().unwrap_or(0);
            s.last_timestamp = Some(ts);
        }
        Ok(())
    }

    /// The beams of the batch at `ts`, taken from [`Self::prepare`] or formed now: into a
    /// device item where the beams go out from GPU memory (`Some(item)`, the item acquired
    /// here or by `prepare`), else into `outs`. Returns the saturated counts per beam.
    fn form(
        &mut self,
        ts: u64,
        data: &[i8],
        present: &[bool],
    ) -> Result<(Vec<u64>, Option<u32>), PipelineError> {
        let k = self.pre_next;
        if self.pre_ts.get(k) == Some(&ts) {
            // formed ahead by `prepare`: take its outputs
            self.pre_next += 1;
            let clipped = self
                .pre_clipped
                .get_mut(k)
                .map(std::mem::take)
                .unwrap_or_default();
            #[cfg(feature = "ibverbs")]
            if let Some(&item) = self.pre_items.get(k) {
                return Ok((clipped, Some(item)));
            }
            let nb = self.outs.len();
            for (o, p) in self
                .outs
                .iter_mut()
                .zip(&mut self.pre_outs[k * nb..(k + 1) * nb])
            {
                std::mem::swap(o, p);
            }
            return Ok((clipped, None));
        }
        #[cfg(feature = "ibverbs")]
        if let Some(d) = self.direct.as_mut() {
            let mut dsts = Vec::with_capacity(self.outs.len());
            let item = d.acquire(&mut dsts)?;
            // SAFETY: as in `prepare_direct`.
            let formed = unsafe {
                self.bf
                    .beamform_chunk_to_device(&[ts], data, present, &dsts, self.beam_bytes)
            };
            return match formed {
                Ok(mut c) => Ok((c.pop().unwrap_or_default(), Some(item))),
                Err(e) => {
                    d.release(item);
                    Err(e.into())
                }
            };
        }
        Ok((self.bf.beamform(ts, data, present, &mut self.outs)?, None))
    }

    /// Sends the beams `sending` of the batch at `ts`, formed into `outs`, through the
    /// staged sender.
    fn send_staged(
        &mut self,
        ts: u64,
        n_present: u64,
        sending: &[usize],
    ) -> Result<(), PipelineError> {
        let items = [
            (ids::TIMESTAMP, ts),
            (ids::FREQUENCY, self.channel_offset),
            (ids::BEAM_ANTS, n_present),
        ];
        match &mut self.tx {
            BeamTx::Inline(sender) => {
                for &b in sending {
                    sender.send_heap(b, &items, ids::BF_RAW, bytemuck_i8(&self.outs[b]))?;
                }
            }
            BeamTx::Queued { q, .. } if !sending.is_empty() => {
                // one job: the sending beams back to back in one buffer
                let len: usize = sending.iter().map(|&b| self.outs[b].len()).sum();
                let mut buf = q.buffer(len);
                let mut heaps = Vec::with_capacity(sending.len());
                let mut at = 0;
                for &b in sending {
                    let bytes = bytemuck_i8(&self.outs[b]);
                    buf[at..at + bytes.len()].copy_from_slice(bytes);
                    heaps.push(HeapPart {
                        dst: b,
                        items: items.to_vec(),
                        payload: at..at + bytes.len(),
                    });
                    at += bytes.len();
                }
                q.send(ids::BF_RAW, heaps, OutBuf::Owned(buf))?;
            }
            BeamTx::Queued { .. } => {}
        }
        Ok(())
    }

    /// Waits until the beamformer no longer reads host memory it was handed (before that
    /// memory is reused).
    pub fn fence_input(&mut self) -> Result<(), PipelineError> {
        Ok(self.bf.fence_input()?)
    }

    /// Flushes the sender (after the send thread has sent everything queued).
    pub fn finish(&mut self) -> std::io::Result<()> {
        self.release_prepared();
        #[cfg(feature = "ibverbs")]
        if let Some(d) = self.direct.as_mut() {
            d.flush()?;
        }
        match &mut self.tx {
            BeamTx::Inline(s) => s.flush(),
            BeamTx::Queued { q, .. } => q.flush(),
        }
    }
}

fn bytemuck_i8(v: &[i8]) -> &[u8] {
    // SAFETY: i8 and u8 have the same size and alignment; every bit pattern is valid.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, v.len()) }
}

/// Descriptors of the beam output.
pub fn beam_descriptors(cps: usize, sph: usize) -> Vec<Descriptor> {
    let u48 = [('u', 48)];
    vec![
        Descriptor::with_format(
            ids::TIMESTAMP,
            "timestamp",
            "Timestamp of the first spectrum, in ADC samples.",
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
        Descriptor::with_format(
            ids::BEAM_ANTS,
            "beam_ants",
            "Number of antennas present in the sum.",
            &[],
            &u48,
        ),
        Descriptor::with_dtype(
            ids::BF_RAW,
            "bf_raw",
            "Beamformer output for the frequency range.",
            &[cps as u64, sph as u64, 2],
            "|i1",
        ),
    ]
}
