//! `gpucbf bench xbgpu-corr`: every correlator kernel (mma.sync, wgmma and its warp-specialised
//! and sparse forms) per antenna count, their limit probes, and the int8 GEMM through cuBLASLt
//! on the same GPU as the bound.

use std::ffi::c_void;

use cudarc::cublaslt::{result as lt, sys as ltsys};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};

use serde::Serialize;

use super::{gerr, random_input, time_gpu};
use crate::compute::xengine::{CorrVariant, GpuX, WgmmaVariant, XError, XShape};
use crate::gpu::GpuError;

/// One correlator line: a kernel at one array size, timed over a launch.
#[derive(Debug, Clone, Serialize)]
pub struct CorrLine {
    /// What the line measures beyond the kernel (`probe no wgmma`, `long launch`, `4-bit
    /// input`: the text before it); none for the kernels' own lines.
    pub what: Option<String>,
    /// Antennas.
    pub n_ants: usize,
    /// Channels (16384 / antennas).
    pub channels: usize,
    /// Samples per launch.
    pub samples_per_launch: usize,
    /// Input sample width.
    pub sample_bits: u32,
    /// The kernel and its variant, as printed.
    pub kernel: String,
    /// Milliseconds per launch.
    pub ms_per_launch: f64,
    /// Tera-operations per second (8 real operations per complex multiply-add over the
    /// a1 ≤ a2 triangle, 4 pol products).
    pub tops: f64,
    /// Milliseconds of one dump, the copy to the host included.
    pub dump_ms: f64,
}

/// The cuBLASLt int8 GEMM: the correlator's bound on the same GPU.
#[derive(Debug, Clone, Serialize)]
pub struct GemmLine {
    /// m = n = k.
    pub mnk: usize,
    /// Milliseconds per GEMM.
    pub ms: f64,
    /// Tera-operations per second (2 m n k per GEMM).
    pub tops: f64,
}

/// Each kernel's TOPS at one antenna count, and as a fraction of the GEMM.
#[derive(Debug, Clone, Serialize)]
pub struct CorrAnts {
    /// Antennas.
    pub n_ants: usize,
    /// mma.sync kernel.
    pub mma_sync_tops: f64,
    /// wgmma kernel (Hopper only).
    pub wgmma_tops: Option<f64>,
    /// Warp-specialised wgmma kernel (Hopper only).
    pub wgmma_ws_tops: Option<f64>,
    /// Sparse-operand wgmma kernel (Hopper only).
    pub wgmma_sp_tops: Option<f64>,
    /// mma.sync / GEMM.
    pub mma_sync_of_gemm: Option<f64>,
    /// wgmma / GEMM.
    pub wgmma_of_gemm: Option<f64>,
    /// wgmma-ws / GEMM.
    pub wgmma_ws_of_gemm: Option<f64>,
    /// wgmma-sp / GEMM.
    pub wgmma_sp_of_gemm: Option<f64>,
}

/// Report of `gpucbf bench xbgpu-corr`.
#[derive(Debug, Clone, Serialize)]
pub struct CorrReport {
    /// Whether the wgmma kernels ran (compute capability 9.x).
    pub wgmma: bool,
    /// Every correlator line, in the order printed.
    pub lines: Vec<CorrLine>,
    /// The bound: the cuBLASLt int8 GEMM, if it ran.
    pub gemm: Option<GemmLine>,
    /// Why the GEMM did not run.
    pub gemm_error: Option<String>,
    /// The kernels per antenna count.
    pub by_ants: Vec<CorrAnts>,
    /// The best correlator TOPS over kernels and antenna counts.
    pub best_tops: f64,
    /// `best_tops` / GEMM TOPS.
    pub best_of_gemm: Option<f64>,
}

/// A correlator kernel to time: mma.sync with its variant, or wgmma (Hopper).
#[derive(Clone, Copy, Debug)]
pub(super) enum Kern {
    Mma(CorrVariant),
    Wgmma(WgmmaVariant),
}

/// One correlator measurement, its line printed after `prefix` (which says what it is, if
/// anything beyond the kernel).
pub(super) fn bench_correlator(
    prefix: &str,
    n_ants: usize,
    samples: usize,
    kern: Kern,
    bits: u32,
) -> Result<CorrLine, XError> {
    print!("{prefix}");
    let spectra = 256;
    let n_channels = (16384 / n_ants).max(1);
    let shape = XShape::new(n_ants, n_channels, spectra)?.with_sample_bits(bits)?;
    let n_batches = samples / spectra;
    let mut g = GpuX::new(shape)?;
    let label = match kern {
        Kern::Mma(v) => {
            g.set_correlator_variant(v)?;
            format!(
                "mma.sync {}{}",
                if v.direct { "direct" } else { "ready" },
                v.stages
            )
        }
        Kern::Wgmma(v) if v.sparse => {
            g.set_wgmma_variant(v)?;
            format!(
                "wgmma-sp cwg={} raw={}{}",
                v.ready_bufs,
                v.raw_bufs,
                if v.probe > 0 { " PROBE" } else { "" }
            )
        }
        Kern::Wgmma(v) if v.ws => {
            g.set_wgmma_variant(v)?;
            format!(
                "wgmma-ws{} bufs={} raw={}{}",
                if v.cluster { "-cl2" } else { "" },
                v.ready_bufs,
                v.raw_bufs,
                if v.probe > 0 { " PROBE" } else { "" }
            )
        }
        Kern::Wgmma(v) => {
            g.set_wgmma_variant(v)?;
            format!(
                "wgmma ST={} bufs={} raw={} pref={}{}{}",
                v.stage_times,
                v.ready_bufs,
                v.raw_bufs,
                v.reg_stages,
                if v.swizzle { " swz" } else { "" },
                if v.probe > 0 { " PROBE" } else { "" }
            )
        }
    };
    let host = random_input(n_batches * shape.batch_bytes());
    let input = g.stream().clone_htod(&host).map_err(gerr)?;
    let stream = g.stream().clone();
    let t = time_gpu(&stream, 5, || g.accumulate_device(&input, n_batches))?;
    let cmacs = (shape.n_baselines() * 4 * n_channels * samples) as f64;
    let tops = 8.0 * cmacs / t / 1e12;
    let mut out = vec![0i32; shape.output_len()];
    let present = vec![true; n_ants];
    let t0 = std::time::Instant::now();
    crate::compute::xengine::XBackend::dump(&mut g, &present, &mut out)?;
    let dump_s = t0.elapsed().as_secs_f64();
    println!(
        "correlator n_ants={n_ants:5} channels={n_channels:4} samples/launch={samples} {label:22}: {:8.3} ms/launch, {tops:7.1} TOPS (dump incl. D2H {:.1} ms)",
        t * 1e3,
        dump_s * 1e3
    );
    let what = prefix.trim_end_matches(": ").trim_end();
    Ok(CorrLine {
        what: (!what.is_empty()).then(|| what.to_string()),
        n_ants,
        channels: n_channels,
        samples_per_launch: samples,
        sample_bits: bits,
        kernel: label,
        ms_per_launch: t * 1e3,
        tops,
        dump_ms: dump_s * 1e3,
    })
}

/// Plain int8 GEMM m=n=k through cuBLASLt (A transposed, the layout cuBLASLt's int8 path wants).
fn bench_gemm(stream: &std::sync::Arc<CudaStream>, mnk: usize) -> Result<GemmLine, XError> {
    // SAFETY: probing only dlopens the library.
    if !unsafe { ltsys::is_culib_present() } {
        return Err(XError::Gpu(GpuError::Unsupported(
            "cuBLASLt (libcublasLt.so) not found".into(),
        )));
    }
    let (m, n, k) = (mnk, mnk, mnk);
    let a = stream.clone_htod(&random_input(m * k)).map_err(gerr)?;
    let b = stream.clone_htod(&random_input(k * n)).map_err(gerr)?;
    let mut c: CudaSlice<i32> = stream.alloc_zeros(m * n).map_err(gerr)?;
    let ws_size = 32usize << 20;
    let mut ws: CudaSlice<u8> = stream.alloc_zeros(ws_size).map_err(gerr)?;
    let handle = lt::create_handle().map_err(gerr)?;
    let desc = lt::create_matmul_desc(
        ltsys::cublasComputeType_t::CUBLAS_COMPUTE_32I,
        ltsys::cudaDataType_t::CUDA_R_32I,
    )
    .map_err(gerr)?;
    let trans: i32 = 1;
    // SAFETY: attribute buffers are valid for the given sizes; layouts describe the buffers above.
    unsafe {
        lt::set_matmul_desc_attribute(
            desc,
            ltsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
            &trans as *const i32 as *const c_void,
            4,
        )
        .map_err(gerr)?;
    }
    let la = lt::create_matrix_layout(
        ltsys::cudaDataType_t::CUDA_R_8I,
        k as u64,
        m as u64,
        k as i64,
    )
    .map_err(gerr)?;
    let lb = lt::create_matrix_layout(
        ltsys::cudaDataType_t::CUDA_R_8I,
        k as u64,
        n as u64,
        k as i64,
    )
    .map_err(gerr)?;
    let lc = lt::create_matrix_layout(
        ltsys::cudaDataType_t::CUDA_R_32I,
        m as u64,
        n as u64,
        m as i64,
    )
    .map_err(gerr)?;
    let pref = lt::create_matmul_pref().map_err(gerr)?;
    // SAFETY: as above.
    let heur = unsafe {
        lt::set_matmul_pref_attribute(
            pref,
            ltsys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
            &ws_size as *const usize as *const c_void,
            std::mem::size_of::<usize>(),
        )
        .map_err(gerr)?;
        lt::get_matmul_algo_heuristic(handle, desc, la, lb, lc, lc, pref).map_err(gerr)?
    };
    let alpha: i32 = 1;
    let beta: i32 = 0;
    let cu_stream = stream.cu_stream() as ltsys::cudaStream_t;
    let t = time_gpu(stream, 10, || {
        let (pa, _ra) = a.device_ptr(stream);
        let (pb, _rb) = b.device_ptr(stream);
        let (pc, _rc) = c.device_ptr_mut(stream);
        let (pw, _rw) = ws.device_ptr_mut(stream);
        // SAFETY: pointers come from live allocations of the sizes the layouts describe.
        unsafe {
            lt::matmul(
                handle,
                desc,
                &alpha as *const i32 as *const c_void,
                &beta as *const i32 as *const c_void,
                pa as *const c_void,
                la,
                pb as *const c_void,
                lb,
                pc as *const c_void,
                lc,
                pc as *mut c_void,
                lc,
                &heur.algo,
                pw as *mut c_void,
                ws_size,
                cu_stream,
            )
            .map_err(gerr)
        }
    })?;
    let tops = 2.0 * (m * n * k) as f64 / t / 1e12;
    println!(
        "cuBLASLt int8 GEMM m=n=k={mnk} (s8 in, s32 out): {:8.3} ms, {tops:7.1} TOPS",
        t * 1e3
    );
    Ok(GemmLine {
        mnk,
        ms: t * 1e3,
        tops,
    })
}

/// The correlator part of [`super::bench_gpu`] (`gpucbf bench xbgpu-corr`): every kernel per
/// antenna count, the limit probes, the cuBLASLt GEMM and the ratios.
pub fn bench_gpu_corr(ants: &[usize], samples_per_launch: usize) -> Result<CorrReport, XError> {
    Ok(bench_corr(ants, samples_per_launch)?.0)
}

/// [`bench_gpu_corr`], also returning the stream of a probe engine for further benchmarks.
pub(super) fn bench_corr(
    ants: &[usize],
    samples_per_launch: usize,
) -> Result<(CorrReport, std::sync::Arc<CudaStream>), XError> {
    if !crate::gpu::gpu_available() {
        return Err(XError::Gpu(GpuError::NoDevice));
    }
    let samples = samples_per_launch.div_ceil(256).max(1) * 256;
    let wgmma = GpuX::new(XShape::new(1, 1, 16)?)?.wgmma_supported();
    let ws = WgmmaVariant::warp_specialized(2, 4);
    let wsc = WgmmaVariant::warp_specialized_cluster(2, 4);
    let sp = WgmmaVariant::sparse(4, 5);
    let mut lines = Vec::new();
    let mut line = |prefix: &str, n: usize, samples: usize, kern: Kern| -> Result<f64, XError> {
        let l = bench_correlator(prefix, n, samples, kern, 8)?;
        let tops = l.tops;
        lines.push(l);
        Ok(tops)
    };
    // per antenna count: (mma.sync, wgmma, wgmma-ws, wgmma-sp) TOPS
    let mut tops = Vec::new();
    for &n in ants {
        let m = line("", n, samples, Kern::Mma(CorrVariant::default()))?;
        let (w, x, c) = if wgmma {
            (
                line("", n, samples, Kern::Wgmma(WgmmaVariant::default()))?,
                line("", n, samples, Kern::Wgmma(ws))?,
                line("", n, samples, Kern::Wgmma(sp))?,
            )
        } else {
            (0.0, 0.0, 0.0)
        };
        tops.push((n, m, w, x, c));
    }
    if wgmma {
        let wv = |stage_times, ready_bufs, raw_bufs, reg_stages, probe| WgmmaVariant {
            stage_times,
            ready_bufs,
            raw_bufs,
            reg_stages,
            swizzle: false,
            probe,
            ws: false,
            cluster: false,
            sparse: false,
        };
        // Limit probes (wrong results, timing only): without the wgmma the loads and the
        // operand rearrangement alone (register loads, and a 4-stage cp.async ring); without
        // the global loads the wgmma, the rearrangement and the barriers alone. Warp-specialised
        // kernel: without wgmma (bulk copies + transform), without bulk copies (transform +
        // wgmma), bulk copies alone (the L2 -> SM rate of this access pattern, as TOPS).
        for (v, what) in [
            (wv(64, 3, 0, 1, 1), "no wgmma"),
            (wv(64, 3, 0, 1, 2), "no loads"),
            (WgmmaVariant { probe: 1, ..ws }, "ws no wgmma"),
            (WgmmaVariant { probe: 2, ..ws }, "ws no copies"),
            (WgmmaVariant { probe: 3, ..ws }, "ws copies only"),
            (WgmmaVariant { probe: 1, ..sp }, "sp no wgmma"),
            (WgmmaVariant { probe: 2, ..sp }, "sp no copies"),
        ] {
            line(&format!("probe {what:17}: "), 576, samples, Kern::Wgmma(v))?;
        }
        // tuning alternatives (ring slots), the 2-CTA cluster form of ws
        for (cwg, nr) in [(4, 3), (4, 4), (2, 3)] {
            line("", 576, samples, Kern::Wgmma(WgmmaVariant::sparse(cwg, nr)))?;
        }
        line("", 576, samples, Kern::Wgmma(wsc))?;
        for v in [ws, sp] {
            line("long launch: ", 576, 65536, Kern::Wgmma(v))?;
        }
    } else {
        println!("wgmma correlator: not compute capability 9.x, not measured");
    }
    // Limit probes (wrong results, timing only): what the direct kernel costs without its
    // conj_perm ALU work, without MMAs, and with MMAs alone.
    let n = 576;
    for (probe, what) in [(1, "no conj_perm"), (2, "no MMA"), (3, "MMA only")] {
        line(
            &format!("probe {what:17}: "),
            n,
            samples,
            Kern::Mma(CorrVariant {
                probe,
                ..CorrVariant::default()
            }),
        )?;
    }
    let probe = GpuX::new(XShape::new(1, 1, 16)?)?;
    let stream = probe.stream().clone();
    let best = tops
        .iter()
        .map(|t| t.1.max(t.2).max(t.3).max(t.4))
        .fold(0f64, f64::max);
    let (gemm, gemm_error) = match bench_gemm(&stream, 8192) {
        Ok(g) => {
            let gemm = g.tops;
            for (n, m, w, x, c) in &tops {
                print!(
                    "n_ants={n:5}: mma.sync {m:7.1} TOPS = {:.2} of cuBLASLt",
                    m / gemm
                );
                if wgmma {
                    print!(
                        ", wgmma {w:7.1} = {:.2}, wgmma-ws {x:7.1} = {:.2}, wgmma-sp {c:7.1} = {:.2} of cuBLASLt ({:.2}x mma.sync)",
                        w / gemm,
                        x / gemm,
                        c / gemm,
                        x.max(*c) / m
                    );
                }
                println!();
            }
            println!(
                "best correlator / cuBLASLt int8 GEMM = {best:.1} / {gemm:.1} = {:.2}",
                best / gemm
            );
            (Some(g), None)
        }
        Err(e) => {
            println!("cuBLASLt int8 GEMM unavailable: {e}");
            (None, Some(e.to_string()))
        }
    };
    let of_gemm = |t: f64| gemm.as_ref().map(|g| t / g.tops);
    let by_ants = tops
        .iter()
        .map(|&(n_ants, m, w, x, c)| {
            let hopper = |t: f64| wgmma.then_some(t);
            CorrAnts {
                n_ants,
                mma_sync_tops: m,
                wgmma_tops: hopper(w),
                wgmma_ws_tops: hopper(x),
                wgmma_sp_tops: hopper(c),
                mma_sync_of_gemm: of_gemm(m),
                wgmma_of_gemm: hopper(w).and_then(of_gemm),
                wgmma_ws_of_gemm: hopper(x).and_then(of_gemm),
                wgmma_sp_of_gemm: hopper(c).and_then(of_gemm),
            }
        })
        .collect();
    let report = CorrReport {
        wgmma,
        lines,
        best_of_gemm: of_gemm(best),
        gemm,
        gemm_error,
        by_ants,
        best_tops: best,
    };
    Ok((report, stream))
}
