//! A fake verbs provider for the transmit tests: a context whose `post_send` records every
//! posted chain (per work request its id, scatter entries and flags) with the QP it went to,
//! and whose `poll_cq` hands out the completions a test queued for that CQ. Tests run in
//! parallel, so each uses its own fake object (its address tells the records apart).

use std::ffi::{c_int, c_void};
use std::sync::Mutex;

use ibverbs_sys::{IbvSendWr, IbvSge, IbvWc, CTX_OPS_POLL_CQ, CTX_OPS_POST_SEND};

/// One posted request: (wr_id, scatter entries, send flags).
pub(crate) type Request = (u64, Vec<IbvSge>, u32);

/// Posted chains with the QP they were posted on.
static POSTED: Mutex<Vec<(usize, Vec<Request>)>> = Mutex::new(Vec::new());
/// Completions the fake CQs return next, with their CQ.
static COMPLETIONS: Mutex<Vec<(usize, IbvWc)>> = Mutex::new(Vec::new());
/// Per QP: the next post fails with this code after taking this many requests.
static FAIL: Mutex<Vec<(usize, c_int, usize)>> = Mutex::new(Vec::new());

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
    POSTED.lock().unwrap().push((qp as usize, chain));
    0
}

unsafe extern "C" fn fake_poll_cq(cq: *mut c_void, n: c_int, wc: *mut IbvWc) -> c_int {
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
pub(crate) struct Fake {
    _ctx: Box<FakeCtx>,
    obj: Box<[usize; 4]>,
}

impl Fake {
    /// A fresh fake provider.
    pub(crate) fn new() -> Self {
        let mut ctx = Box::new(FakeCtx([0; 328]));
        let c = ctx.0.as_mut_ptr();
        // SAFETY: both offsets lie inside the 328-byte block and are 8-aligned.
        unsafe {
            *(c.add(CTX_OPS_POST_SEND) as *mut usize) = fake_post_send as *const () as usize;
            *(c.add(CTX_OPS_POLL_CQ) as *mut usize) = fake_poll_cq as *const () as usize;
        }
        let obj = Box::new([c as usize, 0, 0, 0]);
        Fake { _ctx: ctx, obj }
    }

    /// The QP (and CQ) pointer to hand to a sender.
    pub(crate) fn ptr(&mut self) -> *mut c_void {
        self.obj.as_mut_ptr() as *mut c_void
    }

    fn key(&self) -> usize {
        self.obj.as_ptr() as usize
    }

    /// Queues a completion for this fake's CQ.
    pub(crate) fn complete(&self, w: IbvWc) {
        COMPLETIONS.lock().unwrap().push((self.key(), w));
    }

    /// The chains posted on this fake's QP so far (taken out of the record).
    pub(crate) fn take_posted(&self) -> Vec<Vec<Request>> {
        let mut p = POSTED.lock().unwrap();
        let (mine, rest): (Vec<_>, Vec<_>) = p.drain(..).partition(|(q, _)| *q == self.key());
        *p = rest;
        mine.into_iter().map(|(_, c)| c).collect()
    }

    /// Makes the next post on this QP fail with `rc` after taking `at` requests.
    pub(crate) fn fail_next_post(&self, rc: c_int, at: usize) {
        FAIL.lock().unwrap().push((self.key(), rc, at));
    }
}
