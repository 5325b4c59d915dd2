//! The array's plan for a rate: the engines' buffer and chunk sizes ([`Sizes`]) and where
//! their threads run ([`CorePlan`]). Both are pure functions of the options (and of the
//! cores this process may use), so that a run's choices can be tested and are printed.
//!
//! At the scaled default rate the engines keep today's small sizes and run unpinned; at
//! real rates (≥ [`REAL_RATE`]) they take the sizes that hold one MeerKAT L-band antenna on
//! the H100 host (`tools/rt_run.sh`), and every receive and send thread gets a core of its
//! own when the host has enough.

use clap::ValueEnum;
use serde_json::json;

use crate::net::affinity::CoreList;

/// ADC rate (Hz) from which the array uses real-rate sizes and pins its engines.
pub const REAL_RATE: f64 = 100e6;

/// 256 MiB: the socket receive buffer of a real-rate engine (one per port). About 120 ms of
/// one L-band pol (2.2 GB/s): with 64 MiB (30 ms) a 2-antenna run on the 2-GPU H100 host
/// lost 364 heaps once in 5 minutes (a receive thread stalled past its buffer, with
/// nothing else on its core); with 256 MiB 2 and 3 antennas ran 5 minutes with no loss.
const REAL_RECV_BUFFER: usize = 256 << 20;

/// The engines' sizes at one ADC rate and channel count.
#[derive(Debug, Clone, PartialEq)]
pub struct Sizes {
    /// At or above [`REAL_RATE`].
    pub real_rate: bool,
    /// Complex values per F-engine batch (per pol).
    pub jones_per_batch: usize,
    /// fgpu `--recv-chunk-samples`.
    pub recv_chunk_samples: u64,
    /// xbgpu `--heaps-per-fengine-per-chunk`.
    pub heaps_per_fengine_per_chunk: usize,
    /// UDP ports per digitiser pol (the dsim deals a pol's heaps round-robin over them).
    pub ports_per_pol: usize,
    /// Extra fgpu receive options (none: the engine's defaults).
    pub fgpu_recv: Vec<String>,
    /// Extra xbgpu receive options (none: the engine's defaults).
    pub xbgpu_recv: Vec<String>,
}

impl Sizes {
    /// The sizes for `adc_rate` and `channels` (a power of two, 64..=32768). Below
    /// [`REAL_RATE`]: 2^18 (at least 32 spectra) values per batch, two batches per receive
    /// chunk, 4 heaps per F-engine per X chunk, one port per pol, engine defaults otherwise.
    /// From it: `tools/rt_run.sh`'s sizes (2^20 values per batch, 2^25-sample receive
    /// chunks, 32 heaps per F-engine per X chunk, one port per pol, 64 MiB socket buffers,
    /// 8 open receive chunks and preallocated chunk buffers). One port (one receive
    /// thread) per pol: on the H100 host each took 55 % of a core at 1712 MS/s.
    pub fn for_rate(adc_rate: f64, channels: usize) -> Sizes {
        let s = |v: &str| v.to_string();
        if adc_rate < REAL_RATE {
            let jones = (1usize << 18).max(channels * 32);
            // A batch is jones / channels spectra of 2 × channels samples.
            return Sizes {
                real_rate: false,
                jones_per_batch: jones,
                recv_chunk_samples: 2 * (2 * jones) as u64,
                heaps_per_fengine_per_chunk: 4,
                ports_per_pol: 1,
                fgpu_recv: Vec::new(),
                xbgpu_recv: Vec::new(),
            };
        }
        let jones = (1usize << 20).max(channels * 32);
        let heaps = 32;
        let buffer = REAL_RECV_BUFFER.to_string();
        Sizes {
            real_rate: true,
            jones_per_batch: jones,
            recv_chunk_samples: (1u64 << 25).max(2 * (2 * jones) as u64),
            heaps_per_fengine_per_chunk: heaps,
            ports_per_pol: 1,
            fgpu_recv: vec![
                s("--recv-buffer"),
                buffer.clone(),
                s("--recv-chunks"),
                s("8"),
                s("--recv-prealloc"),
                s("18"),
            ],
            xbgpu_recv: {
                let k = xb_window_chunks(adc_rate, heaps, jones);
                vec![
                    s("--recv-buffer"),
                    buffer,
                    s("--recv-chunks"),
                    k.to_string(),
                    s("--recv-prealloc"),
                    (k + 8).to_string(),
                ]
            },
        }
    }
}

/// Seconds of F-engine output an XB-engine's receive window spans at a real rate: a heap
/// may come this late relative to the newest one and still be placed. The F-engines'
/// output lags differ: on the 2-GPU H100 host, 4 antennas at 856 MS/s ran with lags of
/// 0.73-0.85 s (±0.05 s), and a window of 2 chunks (0.16 s there) rejected 17 % of the
/// heaps as too old.
pub const XB_WINDOW_SECONDS: f64 = 0.25;

/// XB-engine receive chunks (`--recv-chunks`) that span [`XB_WINDOW_SECONDS`] with chunks
/// of `heaps` heaps per F-engine, each `jones / channels` spectra of `2 × channels` ADC
/// samples at `adc_rate`: at least 2 (the engines' default), at most 16.
pub fn xb_window_chunks(adc_rate: f64, heaps: usize, jones: usize) -> usize {
    let chunk_seconds = (heaps * 2 * jones) as f64 / adc_rate;
    ((XB_WINDOW_SECONDS / chunk_seconds).ceil() as usize).clamp(2, 16)
}

/// The options that give an XB-engine its share of the band and its chunk shape (the
/// array, `gpucbf qualify` and `gpucbf deploy` start XB-engines with them): `channels` in
/// all, `per_x` of them from `offset` (`None`: the option left out, the one-engine
/// default 0), spectra `step` ADC samples apart, `jones` per batch, `heaps` per F-engine
/// per chunk.
pub fn xbgpu_shape_args(
    channels: usize,
    per_x: usize,
    offset: Option<usize>,
    step: u64,
    jones: usize,
    heaps: usize,
) -> Vec<String> {
    let mut a = vec![
        "--channels".to_string(),
        channels.to_string(),
        "--channels-per-substream".to_string(),
        per_x.to_string(),
    ];
    if let Some(o) = offset {
        a.extend(["--channel-offset-value".to_string(), o.to_string()]);
    }
    a.extend([
        "--samples-between-spectra".to_string(),
        step.to_string(),
        "--jones-per-batch".to_string(),
        jones.to_string(),
        "--heaps-per-fengine-per-chunk".to_string(),
        heaps.to_string(),
    ]);
    a
}

/// The options that make an F-engine antenna `feng_id` of `antennas` with one wideband
/// output `wideband` of `channels` channels sent to `dst`, `jones` per batch, receiving
/// chunks of `recv_chunk` samples (the array and `gpucbf deploy` start F-engines with them).
pub fn fgpu_wideband_args(
    feng_id: usize,
    antennas: usize,
    channels: usize,
    dst: &str,
    jones: usize,
    recv_chunk: u64,
) -> Vec<String> {
    vec![
        "--feng-id".to_string(),
        feng_id.to_string(),
        "--array-size".to_string(),
        antennas.to_string(),
        "--wideband".to_string(),
        format!("name=wideband,channels={channels},dst={dst},jones_per_batch={jones}"),
        "--recv-chunk-samples".to_string(),
        recv_chunk.to_string(),
    ]
}

/// `--pin`: whether the array places its engines' threads on cores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Pin {
    /// At real rates, one core per receive and send thread when the host has enough.
    #[default]
    Auto,
    /// Every engine unpinned.
    None,
}

/// `--dsims`: how many digitiser simulator processes feed the array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Dsims {
    /// One per antenna at real rates (as a telescope has one digitiser per antenna), else one.
    #[default]
    Auto,
    /// One dsim sending every antenna's streams (one send thread per stream).
    One,
    /// One dsim per antenna.
    PerAntenna,
}

impl Dsims {
    /// The number of dsim processes for `antennas` at `sizes`' rate.
    pub fn count(self, antennas: usize, sizes: &Sizes) -> usize {
        match self {
            Dsims::Auto if sizes.real_rate => antennas,
            Dsims::Auto | Dsims::One => 1,
            Dsims::PerAntenna => antennas,
        }
    }
}

/// The dsims' names: `dsim` alone, else `dsim0`, `dsim1`… (dsim k feeds antennas
/// k·A/N..(k+1)·A/N).
pub fn dsim_names(dsims: usize) -> Vec<String> {
    numbered("dsim", dsims)
}

/// Where one engine's threads run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// The dsim: one send thread per core (one per stream), the main thread on `main`.
    Dsim {
        /// Send threads' cores.
        send: Vec<usize>,
        /// The main thread's core (one of `send`).
        main: usize,
    },
    /// An F-engine: receive threads (one per port) and send threads.
    Fgpu {
        /// Receive threads' cores.
        recv: Vec<usize>,
        /// Send threads' cores.
        send: Vec<usize>,
    },
    /// An XB-engine: its receive threads.
    Xbgpu {
        /// Receive threads' cores.
        recv: Vec<usize>,
    },
}

/// One engine's name and cores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineCores {
    /// `dsim`, `fgpu0`, `xbgpu` / `xbgpu0`.
    pub name: String,
    /// Its threads' cores.
    pub place: Placement,
}

impl EngineCores {
    /// The engine's options for its cores.
    pub fn args(&self) -> Vec<String> {
        let list = |v: &[usize]| CoreList(v.to_vec()).to_string();
        let s = |v: &str| v.to_string();
        match &self.place {
            Placement::Dsim { send, main } => vec![
                s("--affinity"),
                list(send),
                s("--main-affinity"),
                main.to_string(),
            ],
            Placement::Fgpu { recv, send } => vec![
                s("--recv-affinity"),
                list(recv),
                s("--send-affinity"),
                list(send),
            ],
            Placement::Xbgpu { recv } => vec![s("--recv-affinity"), list(recv)],
        }
    }

    /// Every core its threads are pinned to (the dsim's main thread shares a send core).
    pub fn cores(&self) -> Vec<usize> {
        match &self.place {
            Placement::Dsim { send, .. } => send.clone(),
            Placement::Fgpu { recv, send } => recv.iter().chain(send).copied().collect(),
            Placement::Xbgpu { recv } => recv.clone(),
        }
    }

    /// One line of the plan: `fgpu0: recv 2-3, send 4-5`.
    pub fn describe(&self) -> String {
        let list = |v: &[usize]| CoreList(v.to_vec()).to_string();
        let what = match &self.place {
            Placement::Dsim { send, main } => format!("send {}, main {main}", list(send)),
            Placement::Fgpu { recv, send } => {
                format!("recv {}, send {}", list(recv), list(send))
            }
            Placement::Xbgpu { recv } => format!("recv {}", list(recv)),
        };
        format!("{}: {what}", self.name)
    }
}

/// The cores of `available` (in its order) that none of `engines`' threads is pinned to.
pub fn spare_cores<'a>(
    available: &[usize],
    engines: impl IntoIterator<Item = &'a EngineCores>,
) -> Vec<usize> {
    let pinned: Vec<usize> = engines.into_iter().flat_map(EngineCores::cores).collect();
    available
        .iter()
        .copied()
        .filter(|c| !pinned.contains(c))
        .collect()
}

/// The array's core plan: every engine's cores, or why the engines run unpinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorePlan {
    /// The cores this process may use.
    pub available: Vec<usize>,
    /// Threads the plan places (receive and send threads of every engine).
    pub threads: usize,
    /// Each engine's cores, in start order (dsim, F-engines, XB-engines); empty: unpinned.
    pub engines: Vec<EngineCores>,
    /// Why the engines run unpinned (`None` when pinned).
    pub unpinned: Option<String>,
}

/// Bytes per second one XB-engine receive thread is given: on the H100 host one thread
/// held 1.7 GB/s of F-engine heaps at about 30 % of its core, and lost heaps at 3.4 GB/s
/// (75-85 %, with seconds at 100 %).
pub const XB_RECV_BYTES_PER_THREAD: f64 = 2e9;

/// Receive threads for each of `x_engines` XB-engines taking `antennas` F-engines' output
/// at `adc_rate` (8-bit complex: one byte per real input sample and pol), one per
/// [`XB_RECV_BYTES_PER_THREAD`], at most 4.
pub fn xb_recv_threads(antennas: usize, adc_rate: f64, x_engines: usize) -> usize {
    let bytes = antennas as f64 * adc_rate * 2.0 / x_engines.max(1) as f64;
    ((bytes / XB_RECV_BYTES_PER_THREAD).ceil() as usize).clamp(1, 4)
}

/// The XB-engines' names: `xbgpu` alone, else `xbgpu0`, `xbgpu1`…
pub fn xbgpu_names(x_engines: usize) -> Vec<String> {
    numbered("xbgpu", x_engines)
}

/// `kind` alone for one engine, else `kind0`, `kind1`…
fn numbered(kind: &str, n: usize) -> Vec<String> {
    if n == 1 {
        return vec![kind.to_string()];
    }
    (0..n).map(|k| format!("{kind}{k}")).collect()
}

impl CorePlan {
    /// The plan for `antennas` F-engines (fed by `dsims` dsims, each the same number of
    /// antennas) and `x_engines` XB-engines at `sizes`' rate on the cores `available` (in
    /// the order given, each once): with [`Pin::Auto`] at a real rate and enough cores,
    /// each thread its own core in the order dsims (2 send threads per antenna, the main
    /// thread sharing the last),
    /// F-engines (2 × ports per pol receive threads, 2 send threads), XB-engines
    /// (`xb_recv` receive threads each, sharing the engine's port: [`xb_recv_threads`]);
    /// otherwise no engine pinned, with the reason.
    pub fn new(
        pin: Pin,
        available: &[usize],
        antennas: usize,
        dsims: usize,
        (x_engines, xb_recv): (usize, usize),
        sizes: &Sizes,
    ) -> CorePlan {
        let fgpu_recv = 2 * sizes.ports_per_pol;
        let per_antenna = 2 + fgpu_recv + 2;
        let xb_recv = xb_recv.max(1);
        let threads = antennas * per_antenna + x_engines * xb_recv;
        let mut plan = CorePlan {
            available: available.to_vec(),
            threads,
            engines: Vec::new(),
            unpinned: None,
        };
        let cores = CoreList(available.to_vec());
        plan.unpinned = if pin == Pin::None {
            Some("--pin none".to_string())
        } else if !sizes.real_rate {
            Some(format!(
                "below {REAL_RATE:e} S/s the engines keep up unpinned"
            ))
        } else if available.len() < threads {
            Some(format!(
                "{threads} threads to pin ({per_antenna} per antenna, {xb_recv} per X-engine) but only {} cores available ({cores})",
                available.len()
            ))
        } else {
            None
        };
        if plan.unpinned.is_some() {
            return plan;
        }
        // Antenna by antenna, a block of neighbouring cores: its dsim (one per antenna),
        // its F-engine's receive and send threads, then its share of the XB-engines (the
        // layout of `tools/rt_run.sh`, which held two L-band antennas where grouping the
        // cores by kind lost data on the same host). One dsim for all comes first.
        let mut next = available.iter().copied();
        let mut take = |k: usize| next.by_ref().take(k).collect::<Vec<_>>();
        let dsim = |name: String, send: Vec<usize>| EngineCores {
            name,
            place: Placement::Dsim {
                main: send[send.len() - 1],
                send,
            },
        };
        let (mut d, mut f, mut x) = (Vec::new(), Vec::new(), Vec::new());
        let names = dsim_names(dsims);
        if dsims == 1 {
            d.push(dsim(names[0].clone(), take(2 * antennas)));
        }
        let x_names = xbgpu_names(x_engines);
        for a in 0..antennas {
            if dsims > 1 {
                d.push(dsim(names[a].clone(), take(2)));
            }
            let recv = take(fgpu_recv);
            let send = take(2);
            f.push(EngineCores {
                name: format!("fgpu{a}"),
                place: Placement::Fgpu { recv, send },
            });
            for name in &x_names[a * x_engines / antennas..(a + 1) * x_engines / antennas] {
                x.push(EngineCores {
                    name: name.clone(),
                    place: Placement::Xbgpu {
                        recv: take(xb_recv),
                    },
                });
            }
        }
        plan.engines = d.into_iter().chain(f).chain(x).collect();
        plan
    }

    /// The cores no thread is pinned to (in the order available), where the engines' other
    /// threads (main, GPU driving, metrics, katcp) belong: on the H100 host they roamed
    /// onto pinned cores and stalled a receive thread. When the pinned threads take every
    /// core: the cores of the threads that can share theirs ([`CorePlan::sharing`]), never
    /// a receive thread's. Empty when unpinned.
    pub fn spare(&self) -> Vec<usize> {
        if self.unpinned.is_some() {
            return Vec::new();
        }
        let free = spare_cores(&self.available, &self.engines);
        if free.is_empty() {
            self.sharing()
        } else {
            free
        }
    }

    /// The cores of the pinned threads that tolerate company: the F-engines' send threads,
    /// fed from a queue of batches. A receive thread that waits lets its socket overflow,
    /// so its core is never shared; nor is a dsim's, which stands in for a digitiser and
    /// should not depend on the engines' load. Session 12 on the 16-core H100: with the
    /// other threads on the XB-engines' receive cores, 2 antennas lost 671k datagrams in
    /// the kernel. Session 13, 2 L-band antennas there: with them on the dsim and F send
    /// cores (300 s) and on the F send cores alone (200 s), nothing was lost after the
    /// warm-up.
    pub fn sharing(&self) -> Vec<usize> {
        let mut out: Vec<usize> = self
            .engines
            .iter()
            .flat_map(|e| match &e.place {
                Placement::Fgpu { send, .. } => send.clone(),
                Placement::Dsim { .. } | Placement::Xbgpu { .. } => Vec::new(),
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The options of engine `name` for its cores (none when unpinned).
    pub fn args(&self, name: &str) -> Vec<String> {
        self.engines
            .iter()
            .find(|e| e.name == name)
            .map(EngineCores::args)
            .unwrap_or_default()
    }

    /// The plan as the log prints it: a heading line, then one line per engine.
    pub fn lines(&self) -> Vec<String> {
        let cores = CoreList(self.available.clone());
        match &self.unpinned {
            Some(why) => vec![format!("core plan: engines unpinned: {why}")],
            None => std::iter::once(format!(
                "core plan: {} threads pinned, one per core, on {} of the {} cores available ({cores})",
                self.threads,
                self.threads,
                self.available.len()
            ))
            .chain(self.engines.iter().map(|e| format!("core plan: {}", e.describe())))
            .chain(std::iter::once(
                if spare_cores(&self.available, &self.engines).is_empty() {
                    format!(
                        "core plan: none spare: other threads (main, GPU, metrics) share the F-engine send cores {}",
                        CoreList(self.sharing())
                    )
                } else {
                    format!(
                        "core plan: other threads (main, GPU, metrics) on {}",
                        CoreList(self.spare())
                    )
                },
            ))
            .collect(),
        }
    }

    /// The plan as the summary shows it (`core_plan`).
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "pinned": self.unpinned.is_none(),
            "unpinned_because": self.unpinned,
            "available": CoreList(self.available.clone()).to_string(),
            "threads": self.threads,
            "spare": CoreList(self.spare()).to_string(),
            "engines": self.engines.iter().map(|e| json!({
                "name": e.name,
                "cores": e.describe().split_once(": ").map_or("", |(_, c)| c),
                "args": e.args().join(" "),
            })).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scaled default keeps today's sizes exactly (the golden run's outputs); from
    /// 100 MS/s the sizes are `tools/rt_run.sh`'s.
    #[test]
    fn sizes_follow_the_rate() {
        let scaled = Sizes::for_rate(1712e6 / 512.0, 1024);
        assert_eq!(
            scaled,
            Sizes {
                real_rate: false,
                jones_per_batch: 1 << 18,
                recv_chunk_samples: 1 << 20,
                heaps_per_fengine_per_chunk: 4,
                ports_per_pol: 1,
                fgpu_recv: vec![],
                xbgpu_recv: vec![],
            }
        );
        // 32 spectra per batch at least.
        assert_eq!(Sizes::for_rate(3e6, 32768).jones_per_batch, 1 << 20);
        assert_eq!(Sizes::for_rate(3e6, 32768).recv_chunk_samples, 1 << 22);
        assert!(!Sizes::for_rate(99.9e6, 4096).real_rate);
        let l = Sizes::for_rate(1712e6, 4096);
        assert!(l.real_rate);
        assert_eq!(l.jones_per_batch, 1 << 20);
        assert_eq!(l.recv_chunk_samples, 1 << 25);
        assert_eq!(l.heaps_per_fengine_per_chunk, 32);
        assert_eq!(l.ports_per_pol, 1);
        assert_eq!(
            l.fgpu_recv.join(" "),
            "--recv-buffer 268435456 --recv-chunks 8 --recv-prealloc 18"
        );
        // 39 ms XB chunks at 1712e6: 7 of them span the 0.25 s window; 4 at 856e6,
        // the engines' default 2 at 428e6 (0.16 s chunks) and below.
        assert_eq!(
            l.xbgpu_recv.join(" "),
            "--recv-buffer 268435456 --recv-chunks 7 --recv-prealloc 15"
        );
        assert_eq!(xb_window_chunks(856e6, 32, 1 << 20), 4);
        assert_eq!(xb_window_chunks(428e6, 32, 1 << 20), 2);
        assert_eq!(xb_window_chunks(1e12, 32, 1 << 20), 16);
        assert_eq!(Sizes::for_rate(100e6, 32768).jones_per_batch, 1 << 20);
        // Whole batches (2 × jones samples) per receive chunk at every channel count.
        for c in [64, 1024, 4096, 32768] {
            for fs in [3e6, 1712e6] {
                let s = Sizes::for_rate(fs, c);
                assert_eq!(s.recv_chunk_samples % (2 * s.jones_per_batch as u64), 0);
                assert_eq!(s.jones_per_batch % (32 * c), 0);
            }
        }
    }

    /// Enough cores at a real rate: every thread its own core, in the order dsim, F-engines,
    /// XB-engines, with the options the engines take.
    #[test]
    fn enough_cores_give_every_thread_its_own_core() {
        let l = Sizes::for_rate(1712e6, 4096);
        let all: Vec<usize> = (0..16).collect();
        let p = CorePlan::new(Pin::Auto, &all, 1, 1, (2, 1), &l);
        assert_eq!(p.unpinned, None);
        assert_eq!(p.threads, 8);
        let names: Vec<_> = p.engines.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["dsim", "fgpu0", "xbgpu0", "xbgpu1"]);
        assert_eq!(p.args("dsim").join(" "), "--affinity 0-1 --main-affinity 1");
        assert_eq!(
            p.args("fgpu0").join(" "),
            "--recv-affinity 2-3 --send-affinity 4-5"
        );
        assert_eq!(p.args("xbgpu0").join(" "), "--recv-affinity 6");
        assert_eq!(p.args("xbgpu1").join(" "), "--recv-affinity 7");
        assert!(p.args("fgpu1").is_empty());
        // Disjoint, from the available cores only, for several shapes and core sets.
        let odd: Vec<usize> = (0..64).filter(|c| c % 2 == 1).collect();
        for (avail, n, nx, nd) in [
            (&all, 1, 1, 1),
            (&all, 1, 4, 1),
            (&odd, 3, 2, 1),
            (&odd, 3, 2, 3),
            (&odd, 2, 8, 2),
        ] {
            let p = CorePlan::new(Pin::Auto, avail, n, nd, (nx, 1), &l);
            assert_eq!(p.unpinned, None, "{n} antennas, {nx} X-engines");
            let used: Vec<usize> = p.engines.iter().flat_map(EngineCores::cores).collect();
            assert_eq!(used.len(), n * 6 + nx);
            let mut dedup = used.clone();
            dedup.sort_unstable();
            dedup.dedup();
            assert_eq!(dedup.len(), used.len(), "a core used twice: {used:?}");
            assert!(used.iter().all(|c| avail.contains(c)));
            for d in &p.engines[..nd] {
                let Placement::Dsim { send, main } = &d.place else {
                    panic!("the dsims come first");
                };
                assert_eq!(send.len(), 2 * n / nd);
                assert!(send.contains(main));
            }
            // The same inputs give the same plan.
            assert_eq!(p, CorePlan::new(Pin::Auto, avail, n, nd, (nx, 1), &l));
        }
        // One X-engine keeps the name `xbgpu`.
        let p = CorePlan::new(Pin::Auto, &all, 1, 1, (1, 1), &l);
        assert_eq!(p.engines[2].name, "xbgpu");
        assert_eq!(p.args("xbgpu").join(" "), "--recv-affinity 6");
        // Two L-band antennas, a dsim each, and four X-engines fill the 16-core host.
        let p = CorePlan::new(Pin::Auto, &all, 2, 2, (4, 1), &l);
        assert_eq!((p.unpinned.as_deref(), p.threads), (None, 16));
        let names: Vec<_> = p.engines.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names[..4], ["dsim0", "dsim1", "fgpu0", "fgpu1"]);
        assert_eq!(
            p.args("dsim0").join(" "),
            "--affinity 0-1 --main-affinity 1"
        );
        // Antenna by antenna: dsim, F-engine, then its two XB-engines.
        assert_eq!(
            p.args("dsim1").join(" "),
            "--affinity 8-9 --main-affinity 9"
        );
        assert_eq!(
            p.args("fgpu1").join(" "),
            "--recv-affinity 10-11 --send-affinity 12-13"
        );
        assert_eq!(p.args("xbgpu1").join(" "), "--recv-affinity 7");
        assert_eq!(p.args("xbgpu3").join(" "), "--recv-affinity 15");
        // Every core pinned: the other threads share the F send cores, never a receive or
        // dsim core, and the plan says so.
        let mut sharing: Vec<usize> = ["fgpu0", "fgpu1"]
            .iter()
            .flat_map(
                |n| match &p.engines.iter().find(|e| e.name == *n).unwrap().place {
                    Placement::Dsim { send, .. } | Placement::Fgpu { send, .. } => send.clone(),
                    Placement::Xbgpu { .. } => unreachable!(),
                },
            )
            .collect();
        sharing.sort_unstable();
        assert_eq!(sharing, [4, 5, 12, 13]);
        assert_eq!(p.spare(), sharing);
        let last = p.lines().last().unwrap().clone();
        assert!(
            last.contains("none spare") && last.ends_with("4-5,12-13"),
            "{last}"
        );
    }

    /// The spare cores are the available ones no thread is pinned to, in the order given;
    /// none when the engines run unpinned.
    #[test]
    fn spare_cores_are_the_unpinned_rest() {
        let l = Sizes::for_rate(1712e6, 4096);
        let odd: Vec<usize> = (0..32).filter(|c| c % 2 == 1).collect();
        let p = CorePlan::new(Pin::Auto, &odd, 1, 1, (2, 1), &l);
        let used: Vec<usize> = p.engines.iter().flat_map(EngineCores::cores).collect();
        assert_eq!(used, [1, 3, 5, 7, 9, 11, 13, 15]);
        assert_eq!(p.spare(), [17, 19, 21, 23, 25, 27, 29, 31]);
        let p = CorePlan::new(Pin::None, &odd, 1, 1, (2, 1), &l);
        assert!(p.spare().is_empty());
        assert_eq!(p.to_json()["spare"], json!(""));
    }

    /// Too few cores, `--pin none` or the scaled rate: no engine pinned, and the reason.
    #[test]
    fn too_few_cores_or_no_pinning_pin_nothing() {
        let l = Sizes::for_rate(1712e6, 4096);
        let all: Vec<usize> = (0..16).collect();
        // 3 antennas and 2 X-engines need 20 cores.
        let p = CorePlan::new(Pin::Auto, &all, 3, 1, (2, 1), &l);
        assert!(p.engines.is_empty());
        assert_eq!(p.threads, 20);
        let why = p.unpinned.clone().unwrap();
        assert!(
            why.contains("20 threads") && why.contains("only 16 cores"),
            "{why}"
        );
        assert!(p.args("dsim").is_empty());
        assert_eq!(p.lines().len(), 1);
        assert_eq!(p.to_json()["pinned"], json!(false));
        // The 2-core machine.
        let p = CorePlan::new(Pin::Auto, &[0, 1], 1, 1, (1, 1), &l);
        assert!(p.engines.is_empty() && p.unpinned.is_some());
        let p = CorePlan::new(Pin::None, &all, 1, 1, (1, 1), &l);
        assert_eq!(p.unpinned.as_deref(), Some("--pin none"));
        assert!(p.engines.is_empty());
        let scaled = Sizes::for_rate(1712e6 / 512.0, 1024);
        let p = CorePlan::new(
            Pin::Auto,
            &(0..128).collect::<Vec<_>>(),
            2,
            1,
            (1, 1),
            &scaled,
        );
        assert!(p.engines.is_empty());
        assert!(p.unpinned.unwrap().contains("unpinned"));
    }

    /// XB-engines get a receive thread per 2 GB/s of input (at most 4), each its own core,
    /// listed in the engine's `--recv-affinity`.
    #[test]
    fn busy_xb_engines_get_several_receive_threads() {
        // One L-band antenna over 2 X-engines: 1.7 GB/s each.
        assert_eq!(xb_recv_threads(1, 1712e6, 2), 1);
        // 4 antennas at half rate over 2 X-engines: 3.4 GB/s each (lost heaps with one).
        assert_eq!(xb_recv_threads(4, 856e6, 2), 2);
        assert_eq!(xb_recv_threads(4, 1712e6, 4), 2);
        assert_eq!(xb_recv_threads(64, 1712e6, 1), 4);
        assert_eq!(xb_recv_threads(2, 1712e6 / 512.0, 0), 1);
        let l = Sizes::for_rate(856e6, 4096);
        let all: Vec<usize> = (0..32).collect();
        let p = CorePlan::new(Pin::Auto, &all, 4, 4, (2, 2), &l);
        assert_eq!(p.threads, 4 * 6 + 2 * 2);
        assert!(p.unpinned.is_none());
        assert_eq!(p.args("xbgpu0").join(" "), "--recv-affinity 12-13");
        assert_eq!(p.args("xbgpu1").join(" "), "--recv-affinity 26-27");
        let few = CorePlan::new(Pin::Auto, &all[..27], 4, 4, (2, 2), &l);
        assert!(few.unpinned.unwrap().contains("2 per X-engine"));
    }

    /// The printed plan: a heading, then one line per engine with its cores.
    #[test]
    fn plan_lines_name_every_engine_and_its_cores() {
        let l = Sizes::for_rate(1712e6, 4096);
        let p = CorePlan::new(Pin::Auto, &(0..16).collect::<Vec<_>>(), 1, 1, (2, 1), &l);
        assert_eq!(
            p.lines(),
            [
                "core plan: 8 threads pinned, one per core, on 8 of the 16 cores available (0-15)",
                "core plan: dsim: send 0-1, main 1",
                "core plan: fgpu0: recv 2-3, send 4-5",
                "core plan: xbgpu0: recv 6",
                "core plan: xbgpu1: recv 7",
                "core plan: other threads (main, GPU, metrics) on 8-15",
            ]
        );
        let j = p.to_json();
        assert_eq!(j["pinned"], json!(true));
        assert_eq!(j["spare"], json!("8-15"));
        assert_eq!(j["engines"][1]["cores"], json!("recv 2-3, send 4-5"));
        assert_eq!(
            j["engines"][1]["args"],
            json!("--recv-affinity 2-3 --send-affinity 4-5")
        );
    }

    /// One dsim per antenna at real rates (auto), one at the scaled rate; either on request.
    #[test]
    fn dsims_follow_the_rate_unless_asked() {
        let l = Sizes::for_rate(1712e6, 4096);
        let scaled = Sizes::for_rate(1712e6 / 512.0, 1024);
        assert_eq!(Dsims::Auto.count(3, &l), 3);
        assert_eq!(Dsims::Auto.count(3, &scaled), 1);
        assert_eq!(Dsims::One.count(3, &l), 1);
        assert_eq!(Dsims::PerAntenna.count(3, &scaled), 3);
        assert_eq!(dsim_names(1), ["dsim"]);
        assert_eq!(dsim_names(2), ["dsim0", "dsim1"]);
    }
}
