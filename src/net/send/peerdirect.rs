//! `--use-peerdirect`: transmit heaps straight from GPU memory (output items) through a
//! raw-packet ibverbs queue pair, as katgpucbf does with spead2 and PeerDirect.
//!
//! Here the decision, testable without the hardware: [`decide`] picks the transmit path a
//! host supports from a [`Probe`] (RDMA device, GPU, dmabuf export on the GPU and
//! `ibv_reg_dmabuf_mr` in libibverbs, or the nvidia-peermem module); anything missing gives
//! [`TransmitPath::PinnedHostStaging`] with the reason. [`items_plan`] turns that and the
//! engine's set-up into the places to try in order (GPU items, host items, staging), and
//! [`log_outcome`] is the one line the engine logs about where its items went.
//! [`output_items_for_peerdirect`] sizes the output ring for the longer life of an item
//! that waits for the NIC. The sender itself (GPU memory registration, work-request chains,
//! completion tracking) is `net::send::verbs` (feature `ibverbs`).

use std::ffi::c_int;

/// How the engine transmits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransmitPath {
    /// NIC reads the payload from GPU memory registered this way.
    PeerDirect(GpuMrKind),
    /// Output items are copied to pinned host memory and sent from there.
    PinnedHostStaging {
        /// Why PeerDirect is not possible here (logged by the engine).
        reason: String,
    },
}

/// How GPU memory is registered with the NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuMrKind {
    /// dmabuf export of the CUDA allocation (`ibv_reg_dmabuf_mr`, kernel ≥ 5.12).
    Dmabuf,
    /// nvidia-peermem kernel module: `ibv_reg_mr` on the device pointer.
    PeerMem,
}

/// What the host offers (filled by [`probe`], or by hand in tests).
#[derive(Debug, Clone)]
pub struct Probe {
    /// The binary has the `ibverbs` feature.
    pub ibverbs_built: bool,
    /// RDMA devices, or why there are none.
    pub rdma: Result<Vec<String>, NoRdma>,
    /// A CUDA GPU is present.
    pub gpu: bool,
    /// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED` on device 0.
    pub gpu_dmabuf: bool,
    /// libibverbs exports `ibv_reg_dmabuf_mr`.
    pub verbs_dmabuf: bool,
    /// `/sys/module/nvidia_peermem` exists.
    pub peermem: bool,
    /// The engine's pipelines can hand batches to the verbs transmit sink
    /// ([`crate::net::send::verbs::PeerDirectSender`], feature `ibverbs`) in GPU memory:
    /// [`probe`] leaves it false, [`items_plan`] (fgpu's outputs) sets it.
    pub verbs_sink: bool,
}

/// Why the host offers no RDMA device to send through.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NoRdma {
    /// The binary has no verbs support at all.
    #[error("built without ibverbs")]
    NotBuilt,
    /// Loading libibverbs or listing its devices failed (the message says which).
    #[error(transparent)]
    Verbs(std::sync::Arc<std::io::Error>),
}

/// The transmit path for `--use-peerdirect` on a host described by `p`.
pub fn decide(p: &Probe) -> TransmitPath {
    let fallback = |reason: &str| TransmitPath::PinnedHostStaging {
        reason: reason.to_string(),
    };
    if !p.ibverbs_built {
        return fallback("this binary was built without the ibverbs feature");
    }
    if let Err(e) = &p.rdma {
        return fallback(&e.to_string());
    }
    if !p.gpu {
        return fallback("no GPU present");
    }
    let kind = if p.gpu_dmabuf && p.verbs_dmabuf {
        GpuMrKind::Dmabuf
    } else if p.peermem {
        GpuMrKind::PeerMem
    } else {
        return fallback(
            "GPU memory cannot be registered with the NIC (no dmabuf export and no nvidia-peermem module)",
        );
    };
    if !p.verbs_sink {
        return fallback("this engine does not write its batches into GPU-memory output items");
    }
    TransmitPath::PeerDirect(kind)
}

/// Probes this host (loads libibverbs and the CUDA driver only if present).
pub fn probe() -> Probe {
    let gpu = crate::gpu::gpu_available();
    let gpu_dmabuf = gpu && gpu_supports_dmabuf();
    #[cfg(feature = "ibverbs")]
    let (rdma, verbs_dmabuf) = match crate::net::verbs::Verbs::load() {
        Ok(v) => (
            crate::net::verbs::device_names(&v).map_err(|e| NoRdma::Verbs(e.into())),
            // SAFETY: only looks the symbol up.
            unsafe { v.optional::<ibverbs_sys::RegDmabufMr>("ibv_reg_dmabuf_mr") }.is_some(),
        ),
        Err(e) => (Err(NoRdma::Verbs(e.into())), false),
    };
    #[cfg(not(feature = "ibverbs"))]
    let (rdma, verbs_dmabuf) = (Err(NoRdma::NotBuilt), false);
    Probe {
        ibverbs_built: cfg!(feature = "ibverbs"),
        rdma,
        gpu,
        gpu_dmabuf,
        verbs_dmabuf,
        peermem: std::path::Path::new("/sys/module/nvidia_peermem").exists(),
        verbs_sink: false,
    }
}

fn gpu_supports_dmabuf() -> bool {
    use cudarc::driver::sys;
    let Ok(ctx) = std::panic::catch_unwind(|| cudarc::driver::CudaContext::new(0)) else {
        return false;
    };
    let Ok(ctx) = ctx else { return false };
    let mut v: c_int = 0;
    // SAFETY: a plain attribute query on a device that the context was created for.
    let r = unsafe {
        sys::cuDeviceGetAttribute(
            &mut v,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED,
            ctx.cu_device(),
        )
    };
    r == sys::CUresult::CUDA_SUCCESS && v != 0
}

/// Where an engine's output items live, the ways it can send them, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemPlace {
    /// Items in one GPU allocation registered with the NIC this way; the batch is copied
    /// device to device into its item and the NIC reads it from there.
    Device(GpuMrKind),
    /// Items in registered host memory (`--send-ibv`'s path); the batch is downloaded into
    /// its item and the NIC reads it from there.
    Host,
    /// Batches staged through host buffers for the send threads and the sink, as without
    /// either option.
    Staged,
}

/// What an engine's transmit set-up is asked for and has.
#[derive(Debug, Clone)]
pub struct SendSetup {
    /// `--use-peerdirect`.
    pub use_peerdirect: bool,
    /// `--send-ibv`.
    pub send_ibv: bool,
    /// `--send-pcap` (packets to a file).
    pub send_pcap: bool,
    /// `--send-interface` addresses.
    pub interfaces: usize,
    /// None where every output's compute can leave its batches in GPU memory, else why not
    /// (the CPU backend).
    pub compute_off_gpu: Option<String>,
}

/// The places to try in order (the last always [`ItemPlace::Staged`]) and, with
/// `--use-peerdirect`, why device items are not among them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemsPlan {
    /// Tried in order until one opens.
    pub tries: Vec<ItemPlace>,
    /// Why GPU-memory items are not tried (`--use-peerdirect` only).
    pub no_device: Option<String>,
}

/// The engine's transmit plan for `s`; `probe` (called only where the answer matters)
/// describes the host.
pub fn items_plan(s: &SendSetup, probe: impl FnOnce() -> Probe) -> ItemsPlan {
    // Host items need one interface with an RDMA NIC and packets that go to the network.
    let one_nic = !s.send_pcap && s.interfaces == 1;
    if !s.use_peerdirect {
        let mut tries = Vec::new();
        if s.send_ibv && !s.send_pcap {
            tries.push(ItemPlace::Host);
        }
        tries.push(ItemPlace::Staged);
        return ItemsPlan {
            tries,
            no_device: None,
        };
    }
    let reason = if s.send_pcap {
        Some("--send-pcap writes the packets to a file".to_string())
    } else if s.interfaces != 1 {
        Some("several --send-interface: output items are sent from one interface only".into())
    } else {
        s.compute_off_gpu.clone()
    };
    let (device, rdma, reason) = match reason {
        Some(r) => (None, one_nic, Some(r)),
        None => {
            let p = probe();
            let rdma = p.rdma.is_ok();
            match decide(&Probe {
                verbs_sink: true,
                ..p
            }) {
                TransmitPath::PeerDirect(kind) => (Some(kind), true, None),
                TransmitPath::PinnedHostStaging { reason } => (None, rdma, Some(reason)),
            }
        }
    };
    let mut tries: Vec<ItemPlace> = device.map(ItemPlace::Device).into_iter().collect();
    if rdma && one_nic {
        tries.push(ItemPlace::Host);
    }
    tries.push(ItemPlace::Staged);
    ItemsPlan {
        tries,
        no_device: reason,
    }
}

/// The one line an engine logs for `--use-peerdirect` once its outputs are set up: `got`,
/// where they went, and `why`, the reasons each better place was not taken (with GPU
/// items: what still is not sent from them).
pub fn log_outcome(engine: &str, got: ItemPlace, why: &[String]) {
    let why = why.join("; ");
    match got {
        ItemPlace::Device(kind) if why.is_empty() => tracing::info!(
            ?kind,
            "{engine} --use-peerdirect: output items in GPU memory registered with the NIC; heaps sent from there"
        ),
        ItemPlace::Device(kind) => tracing::info!(
            ?kind,
            "{engine} --use-peerdirect: output items in GPU memory registered with the NIC; heaps sent from there ({why})"
        ),
        ItemPlace::Host => tracing::warn!(
            "{engine} --use-peerdirect: {why}; falling back to output items in registered host memory (sent by the NIC from there)"
        ),
        ItemPlace::Staged => tracing::warn!(
            "{engine} --use-peerdirect: {why}; falling back to staging output batches through host memory for the send threads"
        ),
    }
}

/// Output items an engine needs with PeerDirect: an item stays busy until the NIC has sent
/// all its packets, so besides the `base` items of the pipeline, enough to cover a full
/// send queue (`send_queue_depth` work requests of `packets_per_item` each), plus one.
pub fn output_items_for_peerdirect(
    base: usize,
    send_queue_depth: usize,
    packets_per_item: usize,
) -> usize {
    base + send_queue_depth.div_ceil(packets_per_item.max(1)) + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> Probe {
        Probe {
            ibverbs_built: true,
            rdma: Ok(vec!["mlx5_0".into()]),
            gpu: true,
            gpu_dmabuf: true,
            verbs_dmabuf: true,
            peermem: false,
            verbs_sink: true,
        }
    }

    fn reason(p: &Probe) -> String {
        match decide(p) {
            TransmitPath::PinnedHostStaging { reason } => reason,
            other => panic!("expected a fallback, got {other:?}"),
        }
    }

    #[test]
    fn decision_covers_every_missing_piece() {
        assert_eq!(decide(&full()), TransmitPath::PeerDirect(GpuMrKind::Dmabuf));
        let mut p = full();
        p.verbs_dmabuf = false;
        p.peermem = true;
        assert_eq!(decide(&p), TransmitPath::PeerDirect(GpuMrKind::PeerMem));
        p.peermem = false;
        assert!(reason(&p).contains("cannot be registered"));
        let mut p = full();
        p.rdma = Err(NoRdma::Verbs(
            std::io::Error::new(std::io::ErrorKind::NotFound, "no RDMA device found").into(),
        ));
        assert_eq!(reason(&p), "no RDMA device found");
        let mut p = full();
        p.gpu = false;
        assert_eq!(reason(&p), "no GPU present");
        let mut p = full();
        p.ibverbs_built = false;
        assert!(reason(&p).contains("without the ibverbs feature"));
        let mut p = full();
        p.verbs_sink = false;
        assert!(reason(&p).contains("does not write its batches into GPU-memory"));
    }

    fn setup() -> SendSetup {
        SendSetup {
            use_peerdirect: true,
            send_ibv: false,
            send_pcap: false,
            interfaces: 1,
            compute_off_gpu: None,
        }
    }

    /// `--use-peerdirect` tries GPU items, then host items, then staging, each only where
    /// the set-up allows, and says why GPU items are out; without it only `--send-ibv`'s host
    /// items come before staging; the host is probed only where it decides anything.
    #[test]
    fn items_plan_orders_the_fallbacks() {
        use ItemPlace::*;
        let never = || -> Probe { panic!("probed although the set-up decides") };
        let plan = items_plan(&setup(), full);
        assert_eq!(plan.tries, vec![Device(GpuMrKind::Dmabuf), Host, Staged]);
        assert_eq!(plan.no_device, None);
        // No RDMA device: neither GPU nor host items.
        let plan = items_plan(&setup(), || Probe {
            rdma: Err(NoRdma::NotBuilt),
            ..full()
        });
        assert_eq!(plan.tries, vec![Staged]);
        assert_eq!(plan.no_device.as_deref(), Some("built without ibverbs"));
        // A NIC but no way to register GPU memory, or no GPU: host items.
        let plan = items_plan(&setup(), || Probe {
            gpu_dmabuf: false,
            ..full()
        });
        assert_eq!(plan.tries, vec![Host, Staged]);
        assert!(plan.no_device.unwrap().contains("cannot be registered"));
        // The CPU backend: host items, without probing.
        let mut s = setup();
        s.compute_off_gpu = Some("the CPU backend".into());
        let plan = items_plan(&s, never);
        assert_eq!(plan.tries, vec![Host, Staged]);
        assert_eq!(plan.no_device.as_deref(), Some("the CPU backend"));
        // A pcap file or several interfaces: staging only.
        let mut s = setup();
        s.send_pcap = true;
        s.send_ibv = true;
        let plan = items_plan(&s, never);
        assert_eq!(plan.tries, vec![Staged]);
        assert!(plan.no_device.unwrap().contains("--send-pcap"));
        let mut s = setup();
        s.interfaces = 2;
        let plan = items_plan(&s, never);
        assert_eq!(plan.tries, vec![Staged]);
        assert!(plan.no_device.unwrap().contains("several --send-interface"));
        // Without --use-peerdirect: --send-ibv's host items, or staging; never probed.
        let mut s = setup();
        s.use_peerdirect = false;
        assert_eq!(items_plan(&s, never).tries, vec![Staged]);
        s.send_ibv = true;
        assert_eq!(items_plan(&s, never).tries, vec![Host, Staged]);
        assert_eq!(items_plan(&s, never).no_device, None);
        s.send_pcap = true;
        assert_eq!(items_plan(&s, never).tries, vec![Staged]);
    }

    #[test]
    fn this_host_falls_back_with_a_reason() {
        let p = probe();
        eprintln!("peerdirect probe: {p:?}");
        // `probe` leaves the engine's part to `items_plan`: decide alone always stages.
        assert!(matches!(decide(&p), TransmitPath::PinnedHostStaging { .. }));
        let here = items_plan(&setup(), probe);
        eprintln!("peerdirect plan: {here:?}");
        assert_eq!(here.tries.last(), Some(&ItemPlace::Staged));
        if p.rdma.is_err() {
            assert_eq!(here.tries, vec![ItemPlace::Staged], "no NIC");
        }
        if p.rdma.is_err() || !p.gpu {
            assert!(
                !matches!(here.tries[0], ItemPlace::Device(_)),
                "no NIC or no GPU"
            );
            assert!(here.no_device.is_some());
        }
    }

    #[test]
    fn items_cover_the_longer_life() {
        assert_eq!(output_items_for_peerdirect(4, 4096, 512), 4 + 8 + 1);
        assert_eq!(output_items_for_peerdirect(2, 1000, 3), 2 + 334 + 1);
        assert_eq!(output_items_for_peerdirect(2, 10, 0), 2 + 10 + 1);
    }

    #[cfg(feature = "ibverbs")]
    #[test]
    fn gpu_registration_fails_cleanly_without_hardware() {
        // Without a library or device there is nothing to register against: the probe says
        // so, and the fallback names the reason.
        let p = probe();
        if p.rdma.is_ok() && p.gpu {
            eprintln!("SKIP: this host has RDMA and a GPU");
            return;
        }
        let r = reason(&Probe {
            verbs_sink: true,
            ..p
        });
        assert!(
            r.contains("RDMA") || r.contains("could not load") || r.contains("GPU"),
            "{r}"
        );
    }
}
