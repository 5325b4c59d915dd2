//! The send work requests of PeerDirect output items: per packet two scatter entries, the
//! headers (host memory) and the payload (GPU memory), chained, only the item's last packet
//! signalled ([`PacketWrs`]); and the bookkeeping that frees an item only when the
//! completion of its last packet arrives ([`SendTracker`]).

use std::collections::VecDeque;
use std::ffi::c_void;
use std::ops::Range;

use ibverbs_sys::{post_send, IbvSendWr, IbvSge, IBV_SEND_IP_CSUM, IBV_SEND_SIGNALED, IBV_WR_SEND};

/// Where an item's packets lie: headers in host memory, payloads in GPU memory.
#[derive(Debug, Clone, Copy)]
pub struct ItemLayout {
    /// Host address of packet 0's headers (Ethernet + IPv4 + UDP + SPEAD), `header_stride`
    /// apart, and the host memory region's lkey.
    pub header_addr: u64,
    /// Bytes from one packet's headers to the next's.
    pub header_stride: u32,
    /// Header bytes per packet.
    pub header_len: u32,
    /// lkey of the host memory region holding the headers.
    pub header_lkey: u32,
    /// Device address of the item's payload and the GPU memory region's lkey.
    pub payload_addr: u64,
    /// Payload bytes of the item.
    pub payload_len: u64,
    /// lkey of the GPU memory region holding the payload.
    pub payload_lkey: u32,
    /// Payload bytes per packet (the last packet may be shorter).
    pub packet_payload: u32,
}

/// The chained send work requests of one output item.
pub struct PacketWrs {
    sges: Vec<[IbvSge; 2]>,
    wrs: Vec<IbvSendWr>,
}

/// wr_id of packet `k` of output item `item`.
pub fn wr_id(item: u32, k: u32) -> u64 {
    ((item as u64) << 32) | k as u64
}

impl PacketWrs {
    /// Builds the work requests for `item`; `None` if the layout is inconsistent (zero
    /// packet size, or more packets than header slots would address).
    pub fn new(item: u32, l: &ItemLayout) -> Option<Self> {
        if l.packet_payload == 0 || l.payload_len == 0 || l.header_stride < l.header_len {
            return None;
        }
        let n = l.payload_len.div_ceil(l.packet_payload as u64);
        let n = u32::try_from(n).ok()?;
        let mut sges = Vec::with_capacity(n as usize);
        for k in 0..n {
            let off = k as u64 * l.packet_payload as u64;
            let len = (l.payload_len - off).min(l.packet_payload as u64) as u32;
            sges.push([
                IbvSge {
                    addr: l.header_addr + k as u64 * l.header_stride as u64,
                    length: l.header_len,
                    lkey: l.header_lkey,
                },
                IbvSge {
                    addr: l.payload_addr + off,
                    length: len,
                    lkey: l.payload_lkey,
                },
            ]);
        }
        Self::from_sges(item, sges)
    }

    /// Work requests for explicit packets: per packet its header and payload entries, in
    /// sending order; only the last is signalled. `None` if there are none (or too many
    /// for a u32 index).
    pub fn from_sges(item: u32, sges: Vec<[IbvSge; 2]>) -> Option<Self> {
        let n = u32::try_from(sges.len()).ok().filter(|&n| n > 0)?;
        let mut w = PacketWrs {
            sges,
            wrs: Vec::with_capacity(n as usize),
        };
        for k in 0..n {
            let last = k + 1 == n;
            w.wrs.push(IbvSendWr {
                wr_id: wr_id(item, k),
                next: std::ptr::null_mut(),
                sg_list: std::ptr::null_mut(),
                num_sge: 2,
                opcode: IBV_WR_SEND,
                send_flags: IBV_SEND_IP_CSUM | if last { IBV_SEND_SIGNALED } else { 0 },
                imm_data: 0,
                rest: [0; 11],
            });
        }
        w.link();
        Some(w)
    }

    fn link(&mut self) {
        for k in 0..self.wrs.len() {
            self.wrs[k].sg_list = self.sges[k].as_mut_ptr();
            self.wrs[k].next = if k + 1 < self.wrs.len() {
                &mut self.wrs[k + 1]
            } else {
                std::ptr::null_mut()
            };
        }
    }

    /// Packets (work requests) in the chain.
    pub fn len(&self) -> usize {
        self.wrs.len()
    }

    /// True if the chain has no work request (never, once built).
    pub fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }

    /// The work requests, in sending order.
    pub fn wrs(&self) -> &[IbvSendWr] {
        &self.wrs
    }

    /// The header and payload entries of packet `k`.
    pub fn sges(&self, k: usize) -> &[IbvSge; 2] {
        &self.sges[k]
    }

    /// Chains the packets of `runs` (ranges of packet indices, in sending order, not
    /// overlapping; empty or out-of-range ones are skipped) into one chain, only its last
    /// packet signalled, and returns the index of its first packet and the wr_id of its
    /// last; None if no run has a packet. Packets outside the runs are left as they are
    /// (and not posted).
    pub fn link_runs(
        &mut self,
        runs: impl IntoIterator<Item = Range<usize>>,
    ) -> Option<(usize, u64)> {
        let n = self.wrs.len();
        let (mut first, mut prev) = (None, None::<usize>);
        for r in runs.into_iter().filter(|r| r.start < r.end && r.end <= n) {
            if let Some(p) = prev {
                let next: *mut IbvSendWr = &mut self.wrs[r.start];
                self.wrs[p].next = next;
                self.wrs[p].send_flags = IBV_SEND_IP_CSUM;
            }
            for k in r.start..r.end - 1 {
                let next: *mut IbvSendWr = &mut self.wrs[k + 1];
                self.wrs[k].next = next;
                self.wrs[k].send_flags = IBV_SEND_IP_CSUM;
            }
            first.get_or_insert(r.start);
            prev = Some(r.end - 1);
        }
        let last = &mut self.wrs[prev?];
        last.next = std::ptr::null_mut();
        last.send_flags = IBV_SEND_IP_CSUM | IBV_SEND_SIGNALED;
        Some((first?, last.wr_id))
    }

    /// Posts the whole chain on `qp`.
    ///
    /// # Safety
    /// `qp` must be a live raw-packet QP in RTS whose send queue has room for
    /// [`Self::len`] requests; the registered memory must outlive the sends.
    pub unsafe fn post(&mut self, qp: *mut c_void) -> std::io::Result<()> {
        // A subset posted before may have cut the chain: whole again.
        self.link_runs(std::iter::once(0..self.wrs.len()));
        self.post_from(qp, 0)
    }

    /// Posts the chain that starts at packet `first` as linked now ([`Self::link_runs`]);
    /// an index past the end posts nothing.
    ///
    /// # Safety
    /// As [`Self::post`], the queue having room for every request of the chain.
    pub unsafe fn post_from(&mut self, qp: *mut c_void, first: usize) -> std::io::Result<()> {
        let Some(head) = self.wrs.get_mut(first) else {
            return Ok(());
        };
        let mut bad = std::ptr::null_mut();
        let rc = post_send(qp, head, &mut bad);
        if rc != 0 {
            return Err(std::io::Error::other(format!(
                "ibv_post_send failed: {}",
                std::io::Error::from_raw_os_error(rc)
            )));
        }
        Ok(())
    }
}

/// Output items in flight on the NIC, released when their last packet completes.
#[derive(Debug, Default)]
pub struct SendTracker {
    /// (item, wr_id of its signalled last packet), in posting order.
    in_flight: VecDeque<(u32, u64)>,
    /// Completions that matched no item in flight (counted, never a panic).
    pub stray_completions: u64,
}

impl SendTracker {
    /// Item `item` was posted as `wrs`: in flight until its last packet completes.
    pub fn posted(&mut self, item: u32, wrs: &PacketWrs) {
        if let Some(last) = wrs.wrs().last() {
            self.posted_last(item, last.wr_id);
        }
    }

    /// Item `item` was posted as a chain whose signalled last packet is `last_wr_id` (a
    /// subset of its packets: [`PacketWrs::link_runs`]).
    pub fn posted_last(&mut self, item: u32, last_wr_id: u64) {
        self.in_flight.push_back((item, last_wr_id));
    }

    /// A send completion for `wr_id` arrived: returns the items now free, oldest first
    /// (the send queue completes in order, so every earlier item is done too).
    pub fn completed(&mut self, wr_id: u64, free: &mut Vec<u32>) {
        let Some(pos) = self.in_flight.iter().position(|&(_, w)| w == wr_id) else {
            self.stray_completions += 1;
            return;
        };
        free.extend(self.in_flight.drain(..=pos).map(|(item, _)| item));
    }

    /// Items posted and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ibverbs_sys::CTX_OPS_POST_SEND;
    use std::ffi::c_int;

    fn layout() -> ItemLayout {
        ItemLayout {
            header_addr: 0x1000,
            header_stride: 128,
            header_len: 42 + 72,
            header_lkey: 7,
            payload_addr: 0x7f00_0000_0000,
            payload_len: 3 * 8192 + 100,
            payload_lkey: 9,
            packet_payload: 8192,
        }
    }

    #[test]
    fn work_requests_split_the_item_into_packets() {
        let w = PacketWrs::new(5, &layout()).unwrap();
        assert_eq!(w.len(), 4);
        for (k, wr) in w.wrs().iter().enumerate() {
            assert_eq!(wr.wr_id, (5u64 << 32) | k as u64);
            assert_eq!((wr.num_sge, wr.opcode), (2, IBV_WR_SEND));
            assert_eq!(wr.send_flags & IBV_SEND_SIGNALED != 0, k == 3);
            assert_ne!(wr.send_flags & IBV_SEND_IP_CSUM, 0);
            assert_eq!(wr.sg_list as *const IbvSge, w.sges(k).as_ptr());
            let next = if k < 3 {
                &w.wrs()[k + 1] as *const IbvSendWr
            } else {
                std::ptr::null()
            };
            assert_eq!(wr.next as *const IbvSendWr, next);
            let [h, p] = *w.sges(k);
            assert_eq!(
                h,
                IbvSge {
                    addr: 0x1000 + 128 * k as u64,
                    length: 114,
                    lkey: 7
                }
            );
            assert_eq!(p.addr, 0x7f00_0000_0000 + 8192 * k as u64);
            assert_eq!(p.length, if k == 3 { 100 } else { 8192 });
            assert_eq!(p.lkey, 9);
        }
        let mut bad = layout();
        bad.packet_payload = 0;
        assert!(PacketWrs::new(0, &bad).is_none());
        let mut bad = layout();
        bad.header_stride = 64;
        assert!(PacketWrs::new(0, &bad).is_none());
    }

    static POSTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    unsafe extern "C" fn fake_post_send(
        _qp: *mut c_void,
        mut wr: *mut IbvSendWr,
        _bad: *mut *mut IbvSendWr,
    ) -> c_int {
        while !wr.is_null() {
            POSTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            wr = (*wr).next;
        }
        0
    }

    #[test]
    fn post_send_goes_through_the_context_ops() {
        #[repr(C, align(8))]
        struct Ctx([u8; 328]);
        let mut ctx = Box::new(Ctx([0; 328]));
        let c = ctx.0.as_mut_ptr();
        let mut w = PacketWrs::new(1, &layout()).unwrap();
        // SAFETY: offsets inside the fake context; the "qp" starts with the context pointer.
        unsafe {
            let mut qp: [usize; 4] = [c as usize, 0, 0, 0];
            let q = qp.as_mut_ptr() as *mut c_void;
            // No provider function: EOPNOTSUPP, no call through NULL.
            assert!(w.post(q).is_err());
            *(c.add(CTX_OPS_POST_SEND) as *mut usize) = fake_post_send as *const () as usize;
            w.post(q).unwrap();
        }
        assert_eq!(POSTED.load(std::sync::atomic::Ordering::Relaxed), 4);
    }

    #[test]
    fn items_are_freed_only_when_their_last_packet_completes() {
        let l = layout();
        let a = PacketWrs::new(0, &l).unwrap();
        let b = PacketWrs::new(1, &l).unwrap();
        let c = PacketWrs::new(2, &l).unwrap();
        let mut t = SendTracker::default();
        t.posted(0, &a);
        t.posted(1, &b);
        t.posted(2, &c);
        let mut free = Vec::new();
        // A completion for an unsignalled packet is not expected: counted, nothing freed.
        t.completed(wr_id(1, 0), &mut free);
        assert!(free.is_empty());
        assert_eq!(t.stray_completions, 1);
        // Item 1's last packet completes: items 0 and 1 are done (in-order completion).
        t.completed(wr_id(1, 3), &mut free);
        assert_eq!(free, [0, 1]);
        assert_eq!(t.in_flight(), 1);
        t.completed(wr_id(2, 3), &mut free);
        assert_eq!(free, [0, 1, 2]);
        assert_eq!(t.in_flight(), 0);
    }
}
