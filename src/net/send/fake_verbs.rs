//! A fake verbs provider for the transmit tests (no hardware): a context whose `post_send`
//! records every posted chain (per work request its id, scatter entries and flags) with the
//! QP it went to, and whose `poll_cq` hands out the completions a test queued for that CQ.
//! Tests run in parallel, so each uses its own fake object (its address tells the records
//! apart).
//!
//! [`Fake::nic`] makes a fake that behaves as a NIC that reads late: posted chains wait, and
//! each `poll_cq` sends the oldest one, reading its bytes from the scatter entries only
//! then (so a sender that rewrote memory still in flight shows as wrong bytes), records the
//! frames and completes its signalled requests. Its scatter entries must be host memory;
//! [`Fake::nic_reading`] makes one that reads them through a given function instead (a test
//! with payloads in GPU memory copies them device to host there).

use std::ffi::{c_int, c_void};
use std::sync::Mutex;

use ibverbs_sys::{IbvSendWr, IbvSge, IbvWc, CTX_OPS_POLL_CQ, CTX_OPS_POST_SEND};

/// One posted request: (wr_id, scatter entries, send flags).
pub type Request = (u64, Vec<IbvSge>, u32);

/// Posted chains with the QP they were posted on.
static POSTED: Mutex<Vec<(usize, Vec<Request>)>> = Mutex::new(Vec::new());
/// Completions the fake CQs return next, with their CQ.
static COMPLETIONS: Mutex<Vec<(usize, IbvWc)>> = Mutex::new(Vec::new());
/// Per QP: the next post fails with this code after taking this many requests.
static FAIL: Mutex<Vec<(usize, c_int, usize)>> = Mutex::new(Vec::new());
/// Late-reading NICs: per QP, the chains posted and not yet sent, and the frames sent.
static NICS: Mutex<Vec<(usize, Nic)>> = Mutex::new(Vec::new());

/// How a late-reading NIC reads one scatter entry's bytes.
pub type SgeReader = Box<dyn Fn(&IbvSge) -> Vec<u8> + Send>;

#[derive(Default)]
struct Nic {
    pending: std::collections::VecDeque<Vec<Request>>,
    frames: Vec<Vec<u8>>,
    /// The scatter entries each frame was read from.
    sges: Vec<Vec<IbvSge>>,
    /// None: scatter entries are host memory.
    reader: Option<SgeReader>,
}

/// Sends the oldest pending chain of the NIC `key`, if any: reads its frames now and
/// queues the completions of its signalled requests.
fn nic_progress(key: usize) {
    let mut nics = NICS.lock().unwrap();
    let Some((_, nic)) = nics.iter_mut().find(|(k, _)| *k == key) else {
        return;
    };
    let Some(chain) = nic.pending.pop_front() else {
        return;
    };
    let mut done = Vec::new();
    for (id, sges, flags) in chain {
        let mut frame = Vec::new();
        for g in &sges {
            match &nic.reader {
                Some(read) => frame.extend_from_slice(&read(g)),
                // SAFETY: a NIC fake without a reader is only used with host-memory scatter
                // entries that the sender keeps allocated until their completion, which is
                // queued below.
                None => frame.extend_from_slice(unsafe {
                    std::slice::from_raw_parts(g.addr as *const u8, g.length as usize)
                }),
            }
        }
        nic.frames.push(frame);
        nic.sges.push(sges);
        if flags & ibverbs_sys::IBV_SEND_SIGNALED != 0 {
            done.push((
                key,
                IbvWc {
                    wr_id: id,
                    ..Default::default()
                },
            ));
        }
    }
    COMPLETIONS.lock().unwrap().extend(done);
}

unsafe extern "C" fn fake_post_send(
    qp: *mut c_void,
    mut wr: *mut IbvSendWr,
    bad: *mut *mut IbvSendWr,
) -> c_int {
    let fail = {
        let mut f = FAIL.lock().unwrap();
        f.iter()
            .position(|x| x.0 == qp as usize)
            .map(|i| f.remove(i))
    };
    let mut chain = Vec::new();
    while !wr.is_null() {
        if let Some((_, rc, at)) = fail {
            if chain.len() == at {
                *bad = wr;
                POSTED.lock().unwrap().push((qp as usize, chain));
                return rc;
            }
        }
        let w = &*wr;
        let sges = (0..w.num_sge as usize).map(|k| *w.sg_list.add(k)).collect();
        chain.push((w.wr_id, sges, w.send_flags));
        wr = w.next;
    }
    let mut nics = NICS.lock().unwrap();
    match nics.iter_mut().find(|(k, _)| *k == qp as usize) {
        Some((_, nic)) => nic.pending.push_back(chain),
        None => POSTED.lock().unwrap().push((qp as usize, chain)),
    }
    0
}

unsafe extern "C" fn fake_poll_cq(cq: *mut c_void, n: c_int, wc: *mut IbvWc) -> c_int {
    nic_progress(cq as usize);
    let mut q = COMPLETIONS.lock().unwrap();
    let mut k = 0;
    q.retain(|&(c, w)| {
        if c == cq as usize && k < n as usize {
            *wc.add(k) = w;
            k += 1;
            false
        } else {
            true
        }
    });
    k as c_int
}

#[repr(C, align(8))]
struct FakeCtx([u8; 328]);

/// A fake context and the object standing for a QP and its CQ (its first word points at
/// the context, as in libibverbs' objects).
pub struct Fake {
    _ctx: Box<FakeCtx>,
    obj: Box<[usize; 4]>,
}

impl Fake {
    /// A fresh fake provider.
    pub fn new() -> Self {
        let mut ctx = Box::new(FakeCtx([0; 328]));
        let c = ctx.0.as_mut_ptr();
        // SAFETY: both offsets lie inside the 328-byte block and are 8-aligned.
        unsafe {
            *(c.add(CTX_OPS_POST_SEND) as *mut usize) = fake_post_send as *const () as usize;
            *(c.add(CTX_OPS_POLL_CQ) as *mut usize) = fake_poll_cq as *const () as usize;
        }
        let obj = Box::new([c as usize, 0, 0, 0]);
        let f = Fake { _ctx: ctx, obj };
        forget(f.key());
        f
    }

    /// A fake that sends what is posted as a NIC that reads late (see the module doc).
    pub fn nic() -> Self {
        let f = Self::new();
        NICS.lock().unwrap().push((f.key(), Nic::default()));
        f
    }

    /// A [`Fake::nic`] that reads each scatter entry's bytes with `read` when it sends.
    pub fn nic_reading(read: SgeReader) -> Self {
        let f = Self::new();
        let nic = Nic {
            reader: Some(read),
            ..Nic::default()
        };
        NICS.lock().unwrap().push((f.key(), nic));
        f
    }

    /// The frames a [`Fake::nic`] has sent so far, in order (taken out of the record).
    pub fn frames(&self) -> Vec<Vec<u8>> {
        self.sent().into_iter().map(|(f, _)| f).collect()
    }

    /// [`Self::frames`], each with the scatter entries it was read from.
    pub fn sent(&self) -> Vec<(Vec<u8>, Vec<IbvSge>)> {
        let mut nics = NICS.lock().unwrap();
        nics.iter_mut()
            .find(|(k, _)| *k == self.key())
            .map(|(_, n)| {
                let f = std::mem::take(&mut n.frames);
                f.into_iter().zip(std::mem::take(&mut n.sges)).collect()
            })
            .unwrap_or_default()
    }

    /// Chains a [`Fake::nic`] holds, posted and not yet sent.
    pub fn pending(&self) -> usize {
        NICS.lock()
            .unwrap()
            .iter()
            .find(|(k, _)| *k == self.key())
            .map_or(0, |(_, n)| n.pending.len())
    }

    /// The QP (and CQ) pointer to hand to a sender.
    pub fn ptr(&mut self) -> *mut c_void {
        self.obj.as_mut_ptr() as *mut c_void
    }

    fn key(&self) -> usize {
        self.obj.as_ptr() as usize
    }

    /// Queues a completion for this fake's CQ.
    pub fn complete(&self, w: IbvWc) {
        COMPLETIONS.lock().unwrap().push((self.key(), w));
    }

    /// The chains posted on this fake's QP so far (taken out of the record).
    pub fn take_posted(&self) -> Vec<Vec<Request>> {
        let mut p = POSTED.lock().unwrap();
        let (mine, rest): (Vec<_>, Vec<_>) = p.drain(..).partition(|(q, _)| *q == self.key());
        *p = rest;
        mine.into_iter().map(|(_, c)| c).collect()
    }

    /// Makes the next post on this QP fail with `rc` after taking `at` requests.
    pub fn fail_next_post(&self, rc: c_int, at: usize) {
        FAIL.lock().unwrap().push((self.key(), rc, at));
    }
}

impl Default for Fake {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        forget(self.key());
    }
}

/// Drops every record of the fake `key`: a later fake can get the same address (the
/// allocator reuses it), and must not inherit chains, completions or failures (seen: a
/// test that ran after another in the same process found that one's posted chains).
fn forget(key: usize) {
    NICS.lock().unwrap().retain(|(k, _)| *k != key);
    POSTED.lock().unwrap().retain(|(k, _)| *k != key);
    COMPLETIONS.lock().unwrap().retain(|(k, _)| *k != key);
    FAIL.lock().unwrap().retain(|(k, _, _)| *k != key);
}
