//! The chunk-placement driver shared by `dig_place` and `feng_place`.

use gpucbf::chunk::{Chunk, ChunkAssembler, Placement, Reject, WindowPolicy};

/// Feeds every record of `data` through a chunk window placed by `placement` and checks
/// what a receive thread relies on: every packet is placed or rejected with a counted
/// reason; chunks come out in increasing order (unless the window moved), each of the
/// placement's shape, and their memory is reused.
pub fn run<P: Placement>(placement: P, policy: WindowPolicy, data: &[u8]) {
    let (slots, slot_bytes) = (placement.n_slots(), placement.slot_bytes());
    let mut win = ChunkAssembler::with_policy(placement, policy);
    let mut out = Vec::new();
    let mut last: Option<(u64, u64)> = None;
    // `before`: the window's moves before the push (or flush) that emitted `out`; a chunk
    // may come before the last one emitted only if the window moved since that push began.
    let mut check = |out: &mut Vec<Chunk>, win: &mut ChunkAssembler<P>, before: u64| {
        for c in out.drain(..) {
            assert_eq!(c.n_slots(), slots);
            assert!(c.n_present() <= slots);
            assert!(
                c.received.iter().any(|&r| r > 0),
                "an empty chunk was emitted"
            );
            for s in 0..slots {
                assert_eq!(c.slot(s).len(), slot_bytes);
            }
            let moves = win.stats.window_moves;
            if let Some((l, m)) = last {
                assert!(
                    c.chunk_id > l || moves > m,
                    "chunk {} after {l}",
                    c.chunk_id
                );
            }
            last = Some((c.chunk_id, before));
            win.recycle(c);
        }
    };
    let mut pushed = 0u64;
    for pkt in crate::records(data) {
        pushed += 1;
        let before = win.stats.window_moves;
        if let Err(r) = win.push(pkt, &mut out) {
            assert!(Reject::ALL.contains(&r));
        }
        check(&mut out, &mut win, before);
    }
    let before = win.stats.window_moves;
    win.flush(&mut out);
    check(&mut out, &mut win, before);
    let st = &win.stats;
    assert_eq!(st.packets + st.rejects.iter().sum::<u64>(), pushed);
}
