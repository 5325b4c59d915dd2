//! The CPU line of `gpucbf bench fgpu`: throughput of the CPU F-engine backend.

use crate::compute::fengine::{Block, CpuBackend, FBackend, FConfig, FError, PolBlock, Samples};
use crate::spead::bitpack;
use num_complex::Complex32;
use serde::Serialize;
use std::time::Instant;

/// The CPU line: one configuration on the CPU backend.
#[derive(Debug, Clone, Serialize)]
pub struct CpuLine {
    /// `wideband` or `narrowband`.
    pub kind: &'static str,
    /// Channels.
    pub channels: usize,
    /// PFB taps.
    pub taps: usize,
    /// Spectra per block.
    pub spectra: usize,
    /// Blocks timed.
    pub iters: usize,
    /// Input sample width.
    pub bits: u32,
    /// Threads of the rayon pool.
    pub threads: usize,
    /// ADC gigasamples per second per pol, wall clock.
    pub gsps_per_pol: f64,
    /// The same per second of process CPU time (user + system, all threads).
    pub gsps_per_pol_per_cpu_second: f64,
}

/// Process CPU time (user + system) in seconds, all threads.
fn cpu_seconds() -> f64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a complete rusage into the pointer it is given.
    let ru = unsafe {
        if libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) != 0 {
            return f64::NAN;
        }
        ru.assume_init()
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Channelises `iters` blocks of `spectra` spectra (2 pols, packed `bits`-bit noise-like
/// input) with `cfg` on the CPU backend and prints and returns the wall-clock throughput
/// in ADC GS/s per polarisation (input samples consumed per second per pol, the unit of
/// dsp.md §13). Also printed: GS/s per pol per core from the process CPU time, which is
/// robust against other load on a shared machine.
pub fn bench_cpu(cfg: FConfig, spectra: usize, bits: u32, iters: usize) -> Result<CpuLine, FError> {
    let mut be = CpuBackend::new(cfg.clone())?;
    let need = cfg.input_samples_needed(spectra);
    let raw: Vec<i16> = (0..need)
        .map(|i| {
            let v = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58; // 0..63
            v as i16 - 32
        })
        .collect();
    let mut packed = vec![0u8; bitpack::packed_len(need, bits) + 1];
    bitpack::pack(&raw, bits, &mut packed);
    let fine = vec![0.1; spectra];
    let phase = vec![0.2; spectra];
    let gains = vec![Complex32::new(0.01, 0.0); cfg.channels];
    let spectra_out = spectra.div_ceil(cfg.spectra_per_heap) * cfg.spectra_per_heap;
    let mut out = vec![0u8; cfg.output_len(spectra_out)];
    let pol = PolBlock {
        samples: Samples::Packed {
            data: &packed,
            bits,
            len: need,
        },
        timestamp: 0,
        offset: 0,
        fine_delay: &fine,
        phase: &phase,
        gains: &gains,
    };
    let block = Block {
        spectra,
        first_spectrum: 0,
        out_first: 0,
        pols: [pol, pol],
    };
    be.process(&block, &mut out)?; // warm-up (plans, buffers)
    let t = Instant::now();
    let cpu0 = cpu_seconds();
    for _ in 0..iters.max(1) {
        be.process(&block, &mut out)?;
    }
    let dt = t.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    let samples = (spectra * cfg.samples_between_spectra() * iters.max(1)) as f64;
    let gsps = samples / dt / 1e9;
    let cores = rayon::current_num_threads();
    let kind = if cfg.narrowband.is_some() {
        "narrowband"
    } else {
        "wideband"
    };
    println!(
        "fgpu cpu {kind}: {} channels, {} taps, {spectra} spectra × {iters}, {bits}-bit in, \
         {cores} threads: {gsps:.4} GS/s per pol wall; {:.4} GS/s per pol per CPU-second",
        cfg.channels,
        cfg.taps,
        samples / cpu / 1e9
    );
    Ok(CpuLine {
        kind,
        channels: cfg.channels,
        taps: cfg.taps,
        spectra,
        iters,
        bits,
        threads: cores,
        gsps_per_pol: gsps,
        gsps_per_pol_per_cpu_second: samples / cpu / 1e9,
    })
}

#[cfg(test)]
mod tests {
    use crate::bench::fgpu::cpu::*;
    use crate::compute::fengine::{Narrowband, NarrowbandMode};

    /// A small block: the line's figures are positive and its configuration is the one asked
    /// for.
    #[test]
    fn cpu_line_reports_what_it_ran() {
        let l = bench_cpu(FConfig::wideband(256, 32), 32, 10, 2).unwrap();
        assert_eq!(
            (l.kind, l.channels, l.taps, l.spectra, l.iters, l.bits),
            ("wideband", 256, 16, 32, 2, 10)
        );
        assert!(l.gsps_per_pol > 0.0 && l.gsps_per_pol.is_finite(), "{l:?}");
        assert!(l.gsps_per_pol_per_cpu_second > 0.0, "{l:?}");
        assert_eq!(l.threads, rayon::current_num_threads());
    }

    /// Not a unit test: prints CPU throughput for the report. Run with
    /// `cargo test --release --lib bench::fgpu::cpu -- --ignored --nocapture` (for representative
    /// numbers add `--config 'profile.dev.package.gpucbf.opt-level=3'` and the same for
    /// `overflow-checks=false`, `debug-assertions=false`; `RAYON_NUM_THREADS` picks cores).
    #[test]
    #[ignore]
    fn print_cpu_throughput() {
        for (channels, sph, spectra) in [(1024, 1024, 1024), (4096, 256, 256), (32768, 32, 64)] {
            let cfg = FConfig::wideband(channels, sph);
            bench_cpu(cfg, spectra, 10, 5).unwrap();
        }
        let cfg = FConfig {
            narrowband: Some(Narrowband {
                decimation: 8,
                centre_frequency: 1_284_000_000.0 - 856_000_000.0,
                adc_rate: 1_712_000_000.0,
                ddc_taps: None,
                weight_pass: 0.005,
                mode: NarrowbandMode::Discard,
            }),
            ..FConfig::wideband(32768, 32)
        };
        bench_cpu(cfg, 32, 10, 2).unwrap();
    }
}
