//! The chunk-placement driver shared by `dig_place` and `feng_place`.

use std::cell::RefCell;

use gpucbf::chunk::{Chunk, ChunkAssembler, Placement, Reject, WindowPolicy};

thread_local! {
    /// Chunks of earlier inputs, reused as the engine reuses its ring: mapping (and
    /// prefaulting) fresh chunk memory for every input would make the system calls, not
    /// the placement, the work.
    static POOL: RefCell<Vec<Chunk>> = const { RefCell::new(Vec::new()) };
}

/// Checks chunks the window emitted: each of the placement's shape, holding something,
/// in increasing order unless the window moved. `last`: the previous chunk's id and the
/// window's moves before the push that emitted it; `before`: the moves before this one.
fn check(
    out: &mut Vec<Chunk>,
    shape: (usize, usize),
    moves: u64,
    before: u64,
    last: &mut Option<(u64, u64)>,
) -> Vec<Chunk> {
    let (slots, slot_bytes) = shape;
    for c in out.iter() {
        assert_eq!(c.n_slots(), slots);
        assert!(c.n_present() <= slots);
        assert!(
            c.received.iter().any(|&r| r > 0),
            "an empty chunk was emitted"
        );
        for s in 0..slots {
            assert_eq!(c.slot(s).len(), slot_bytes);
            assert!(c.received[s] as usize <= slot_bytes);
        }
        if let Some((l, m)) = *last {
            assert!(
                c.chunk_id > l || moves > m,
                "chunk {} after {l}",
                c.chunk_id
            );
        }
        *last = Some((c.chunk_id, before));
    }
    std::mem::take(out)
}

/// Feeds every record of `data` through a chunk window placed by `placement` and checks
/// what a receive thread relies on: every packet is placed or rejected with a counted
/// reason; chunks come out in increasing order (unless the window moved), each of the
/// placement's shape, and their memory is reused.
pub fn run<P: Placement>(placement: P, policy: WindowPolicy, data: &[u8]) {
    let shape = (placement.n_slots(), placement.slot_bytes());
    let mut win = ChunkAssembler::with_policy(placement, policy);
    POOL.with_borrow_mut(|pool| {
        for c in pool.drain(..) {
            win.recycle(c);
        }
    });
    let mut out = Vec::new();
    let mut last = None;
    let mut pushed = 0u64;
    for pkt in crate::records(data) {
        pushed += 1;
        let before = win.stats.window_moves;
        if let Err(r) = win.push(pkt, &mut out) {
            assert!(Reject::ALL.contains(&r));
        }
        for c in check(&mut out, shape, win.stats.window_moves, before, &mut last) {
            win.recycle(c);
        }
    }
    let before = win.stats.window_moves;
    win.flush(&mut out);
    let done = check(&mut out, shape, win.stats.window_moves, before, &mut last);
    let st = &win.stats;
    assert_eq!(st.packets + st.rejects.iter().sum::<u64>(), pushed);
    POOL.with_borrow_mut(|pool| pool.extend(done));
}
