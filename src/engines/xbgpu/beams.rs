//! The beams of one XB-engine ([`BPipeline`]): every beam of a batch formed through a
//! [`Beamformer`] (a chunk of batches at once where it can), one heap per beam per batch
//! (ICD §4.4), all beams sharing one heap counter sequence.

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
    outs: Vec<Vec<i8>>,
    /// Beams formed ahead by [`BPipeline::prepare`]: timestamps, outputs (`[batch][beam]`),
    /// saturation per batch, and the next one to send.
    pre_ts: Vec<u64>,
    pre_outs: Vec<Vec<i8>>,
    pre_clipped: Vec<Vec<u64>>,
    pre_next: usize,
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
            tx: BeamTx::Inline(sender),
            channel_offset,
            outs: vec![vec![0; beam_bytes]; names.len()],
            pre_ts: Vec::new(),
            pre_outs: Vec::new(),
            pre_clipped: Vec::new(),
            pre_next: 0,
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
            .beamform_chunk(ts, data, present, &mut self.pre_outs)?;
        self.pre_ts.extend_from_slice(ts);
        Ok(())
    }

    /// Forms (or takes from [`BPipeline::prepare`]) and sends the beams of the batch at
    /// `ts`; a batch without any antenna present is counted as skipped.
    pub fn batch(&mut self, ts: u64, data: &[i8], present: &[bool]) -> Result<(), PipelineError> {
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
            self.bf.beamform(ts, data, present, &mut self.outs)?
        };
        for (s, c) in self.stats.iter_mut().zip(&clipped) {
            s.clipped_formed += c;
        }
        let items = [
            (ids::TIMESTAMP, ts),
            (ids::FREQUENCY, self.channel_offset),
            (ids::BEAM_ANTS, n_present),
        ];
        let sending: Vec<usize> = (0..self.outs.len())
            .filter(|&b| self.enabled[b].sends(ts))
            .collect();
        match &mut self.tx {
            BeamTx::Inline(sender) => {
                for &b in &sending {
                    sender.send_heap(b, &items, ids::BF_RAW, bytemuck_i8(&self.outs[b]))?;
                }
            }
            BeamTx::Queued { q, .. } if !sending.is_empty() => {
                // one job: the sending beams back to back in one buffer
                let len: usize = sending.iter().map(|&b| self.outs[b].len()).sum();
                let mut buf = q.buffer(len);
                let mut heaps = Vec::with_capacity(sending.len());
                let mut at = 0;
                for &b in &sending {
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
        for &b in &sending {
            let s = &mut self.stats[b];
            s.heaps += 1;
            s.bytes += self.outs[b].len() as u64;
            s.clipped_samples += clipped.get(b).copied().unwrap_or(0);
            s.last_timestamp = Some(ts);
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
