use std::sync::Arc;

use super::*;
use crate::mem::{Backing, ChunkMem, MemPolicy};

fn full() -> Probe {
    Probe {
        gpu_backend: true,
        cpu_reads: None,
        gpu: true,
        vulkan: Ok(()),
        device: Ok("NVIDIA H100".into()),
        memory: Some(MemoryType {
            index: 3,
            coherent: true,
            heap_bytes: 128 << 30,
        }),
        need_bytes: 1 << 30,
    }
}

/// One piece taken away from a full probe.
type Change = fn(&mut Probe);

fn reason(p: &Probe) -> String {
    match decide(p) {
        ChunkPlace::PinnedHost { reason } => reason,
        ChunkPlace::GpuMapped => panic!("expected a fallback for {p:?}"),
    }
}

/// Every missing piece gives pinned host chunks with its own reason; all present gives
/// GPU-mapped chunks.
#[test]
fn decision_covers_every_missing_piece() {
    assert_eq!(decide(&full()), ChunkPlace::GpuMapped);
    let cases: Vec<(Change, &str)> = vec![
        (
            |p| p.gpu_backend = false,
            "the CPU backend reads the chunks on the CPU",
        ),
        (
            |p| p.cpu_reads = Some("decoded on the CPU".into()),
            "decoded on the CPU",
        ),
        (|p| p.gpu = false, "no GPU present"),
        (
            |p| p.vulkan = Err("libvulkan.so.1 cannot be loaded (x)".into()),
            "no Vulkan: libvulkan.so.1 cannot be loaded (x)",
        ),
        (
            |p| p.device = Err("no deviceUUID match".into()),
            "no deviceUUID match",
        ),
        (
            |p| p.memory = None,
            "the GPU has no DEVICE_LOCAL | HOST_VISIBLE memory type",
        ),
        (
            |p| p.memory.as_mut().unwrap().coherent = false,
            "memory type 3 is not HOST_COHERENT (each chunk would need a flush)",
        ),
        (
            |p| p.memory.as_mut().unwrap().heap_bytes = 256 << 20,
            "the GPU's host-visible heap holds 256.0 MiB, the chunks need at least 1.0 GiB",
        ),
    ];
    for (change, want) in cases {
        let mut p = full();
        change(&mut p);
        assert_eq!(reason(&p), want);
    }
    // The first missing piece is the one named.
    let mut p = full();
    p.gpu = false;
    p.gpu_backend = false;
    p.vulkan = Err("x".into());
    assert_eq!(reason(&p), "no GPU present");
    // A heap exactly as large as needed will do.
    let mut p = full();
    p.memory.as_mut().unwrap().heap_bytes = p.need_bytes;
    assert_eq!(decide(&p), ChunkPlace::GpuMapped);
}

/// DEVICE_LOCAL | HOST_VISIBLE types only; coherent first, then the largest heap; a type
/// naming a heap that does not exist is skipped.
#[test]
fn memory_type_prefers_coherent_then_the_largest_heap() {
    const DL: u32 = 1;
    const HV: u32 = 2;
    const HC: u32 = 4;
    let heaps = [256 << 20, 80 << 30, 64 << 30];
    assert_eq!(pick_memory_type(&[(DL, 1), (HV | HC, 0)], &heaps), None);
    assert_eq!(pick_memory_type(&[], &heaps), None);
    let m = pick_memory_type(&[(DL, 1), (DL | HV, 1), (DL | HV | HC, 0)], &heaps).unwrap();
    assert_eq!(
        m,
        MemoryType {
            index: 2,
            coherent: true,
            heap_bytes: 256 << 20
        }
    );
    let m = pick_memory_type(
        &[(DL | HV | HC, 0), (DL | HV | HC, 1), (DL | HV, 2)],
        &heaps,
    )
    .unwrap();
    assert_eq!((m.index, m.coherent, m.heap_bytes), (1, true, 80 << 30));
    let m = pick_memory_type(&[(DL | HV, 2), (DL | HV | HC, 9)], &heaps).unwrap();
    assert_eq!((m.index, m.coherent), (0, false));
}

/// Not asked: no decision. The CPU backend on a GPU host: pinned host chunks without
/// touching Vulkan. With no GPU here: the probe says so, whatever the backend.
#[test]
fn plan_falls_back_without_the_gpu_backend_or_a_gpu() {
    assert_eq!(plan(false, true, None, 1), None);
    let cpu = plan(true, false, None, 1);
    if crate::gpu::gpu_available() {
        assert_eq!(
            cpu,
            Some(ChunkPlace::PinnedHost {
                reason: "the CPU backend reads the chunks on the CPU".into()
            })
        );
    } else {
        for gpu_backend in [false, true] {
            assert_eq!(
                plan(true, gpu_backend, None, 1),
                Some(ChunkPlace::PinnedHost {
                    reason: "no GPU present".into()
                })
            );
        }
    }
    // Host memory is never taken for GPU-mapped memory.
    let v = vec![1u8; 64];
    assert_eq!(device_address(&v), None);
    let mut out = vec![9u8];
    read_chunk_bytes(&mut out, &v[..3]);
    assert_eq!(out, [9, 1, 1, 1]);
}

/// On a GPU with Vulkan: a chunk in GPU memory mapped for the CPU, written by the CPU as
/// the receive path writes (streaming stores, then a fence), reads back byte-identical on
/// the GPU by a device-to-host copy, through a device-to-device copy, and through
/// [`read_chunk_bytes`]; dropping it removes it from the table. Skips without a GPU;
/// without Vulkan it skips too unless `GPUCBF_REQUIRE_VKGDR=1`.
#[test]
fn gpu_mapped_chunk_reads_back_on_the_gpu() {
    use cudarc::driver::sys;
    let Some((ctx, policy)) = gpu_mapped_policy("gpu_mapped_chunk_reads_back_on_the_gpu") else {
        return;
    };
    let len = 3 * (2 << 20) + 4321;
    let mut m = ChunkMem::alloc(len, &policy).unwrap();
    assert_eq!(m.backing(), Backing::GpuMapped, "{m:?}");
    let dev = m.device_ptr().expect("a device address");
    let pattern: Vec<u8> = (0..len).map(|i| (i * 131 + 7) as u8).collect();
    let base = m.as_mut_ptr();
    for (k, part) in pattern.chunks(5000).enumerate() {
        // SAFETY: each part goes to its own offset inside the chunk's len bytes.
        unsafe { crate::mem::copy_stream(base.add(k * 5000), part) };
    }
    crate::mem::stream_fence();
    ctx.bind_to_thread().unwrap();
    let mut back = vec![0u8; len];
    // SAFETY: `dev` is len bytes of device memory; `back` has room for them.
    let r = unsafe { sys::cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), dev, len) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    assert!(back == pattern, "the GPU reads what the CPU wrote");
    // A slice inside the chunk maps to the same offset on the device.
    assert_eq!(device_address(&m[100..200]), Some(dev + 100));
    let stream = ctx.default_stream();
    let mut d = stream.alloc_zeros::<u8>(len - 1000).unwrap();
    assert!(copy_mapped_to_device(&stream, &m[1000..], &mut d).unwrap());
    let got = stream.clone_dtoh(&d).unwrap();
    assert!(got[..] == pattern[1000..], "device-to-device copy");
    let mut joined = vec![];
    read_chunk_bytes(&mut joined, &m[len - 7000..]);
    assert!(joined[..] == pattern[len - 7000..], "read back by DMA");
    let host = m.as_ptr() as usize;
    drop(m);
    let regions = REGIONS.read().unwrap();
    assert!(
        regions.iter().all(|g| g.host != host),
        "unregistered on drop"
    );
}

/// A chunk written by the CPU at once after its allocation keeps what was written: the
/// zeroing of fresh GPU-mapped memory is finished before `alloc` returns. (cuMemsetD8 on
/// device memory returns before the GPU has done it; a receive thread's first packets
/// were then zeroed over, and an X-engine's first dump differed from the pinned path's.)
/// The zeroing ends last at the tail, so the tail is written first and read back.
#[test]
fn gpu_mapped_chunk_written_at_once_keeps_its_bytes() {
    let Some((_ctx, policy)) =
        gpu_mapped_policy("gpu_mapped_chunk_written_at_once_keeps_its_bytes")
    else {
        return;
    };
    let len = 1 << 30;
    let tail = 1 << 16;
    let pattern: Vec<u8> = (0..tail).map(|i| (i * 29 + 1) as u8).collect();
    for round in 0..4 {
        let mut m = ChunkMem::alloc(len, &policy).unwrap();
        assert_eq!(m.backing(), Backing::GpuMapped, "{m:?}");
        // SAFETY: the last `tail` bytes of the chunk's len bytes.
        unsafe { crate::mem::copy_stream(m.as_mut_ptr().add(len - tail), &pattern) };
        crate::mem::stream_fence();
        let mut back = vec![];
        read_chunk_bytes(&mut back, &m[len - tail..]);
        let kept = back.iter().zip(&pattern).filter(|(a, b)| a == b).count();
        assert_eq!(kept, tail, "round {round}: {kept} of {tail} bytes kept");
    }
}

/// The CUDA context of GPU 0 and a chunk policy with Vulkan open on it, for the GPU test
/// `name`; None (the test skips, saying why) without a GPU, or without Vulkan unless
/// `GPUCBF_REQUIRE_VKGDR=1`, which makes that a failure.
fn gpu_mapped_policy(name: &str) -> Option<(Arc<cudarc::driver::CudaContext>, MemPolicy)> {
    if !crate::gpu::gpu_test_guard(&format!("mem::vkgdr::{name}")) {
        return None;
    }
    let ctx = cudarc::driver::CudaContext::new(0).unwrap();
    let v = match Vkgdr::open(&ctx) {
        Ok(v) => Arc::new(v),
        Err(e) if std::env::var("GPUCBF_REQUIRE_VKGDR").as_deref() != Ok("1") => {
            eprintln!("SKIPPED {name}: {e}");
            return None;
        }
        Err(e) => panic!("GPUCBF_REQUIRE_VKGDR=1 but: {e}"),
    };
    eprintln!("vkgdr: {} memory type {:?}", v.name, v.memory);
    let policy = MemPolicy {
        vkgdr: Some(v),
        ..Default::default()
    };
    Some((ctx, policy))
}
