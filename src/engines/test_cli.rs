//! What the engines' tests share: the command-line wrappers they parse engine options with,
//! scratch paths unique to this process, the backends to run, a captured log, the payloads
//! of a pcap capture and a UDP socket drained while an engine sends to it.

use std::net::{SocketAddrV4, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;

/// `gpucbf fgpu`'s options.
#[derive(Parser)]
pub(crate) struct F {
    #[command(flatten)]
    pub(crate) a: super::fgpu::FgpuArgs,
}

/// `gpucbf xbgpu`'s options.
#[derive(Parser)]
pub(crate) struct X {
    #[command(flatten)]
    pub(crate) a: super::xbgpu::XbgpuArgs,
}

/// `gpucbf dsim`'s options.
#[derive(Parser)]
pub(crate) struct D {
    #[command(flatten)]
    pub(crate) a: super::dsim::DsimArgs,
}

/// A scratch path `name` of the test group `group`, unique to this process.
pub(crate) fn tmp(group: &str, name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("gpucbf-{group}-{}-{name}", std::process::id()))
}

/// Writes 256 heaps per pol of dsim's digitiser streams (a tone and noise, dither seed 1,
/// to 127.0.0.1:7148 and :7149) to the pcap file `path`.
pub(crate) fn dsim_capture(path: &Path) {
    let d = D::try_parse_from([
        "dsim",
        "--adc-sample-rate",
        "1712e6",
        "--heaps",
        "256",
        "--dither-seed",
        "1",
        "--signals",
        "cw(0.2, 300e6) + wgn(0.05, 1);",
        "--pcap",
        &path.to_string_lossy(),
        "127.0.0.1:7148",
        "127.0.0.1:7149",
    ])
    .unwrap()
    .a;
    super::dsim::run(&d.validate().unwrap()).unwrap();
}

/// The backends to run here: the CPU one, and the GPU one where there is a GPU.
pub(crate) fn backends() -> Vec<&'static str> {
    let mut b = vec!["cpu"];
    if crate::gpu::gpu_available() {
        b.push("gpu");
    }
    b
}

/// How many lines of `log` mention `--use-peerdirect`.
pub(crate) fn peerdirect_lines(log: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("--use-peerdirect"))
        .count()
}

pub(crate) use crate::telemetry::logged;

/// The destinations and UDP payloads of a capture, in order.
pub(crate) fn pcap_payloads(path: &Path) -> Vec<(SocketAddrV4, Vec<u8>)> {
    let mut src = crate::net::recv::pcap::PcapSource::open(path).unwrap();
    let mut out = Vec::new();
    while let Some(d) = src.next_payload(|dst, p| (dst, p.to_vec())).unwrap() {
        out.push(d);
    }
    out
}

/// A UDP socket on 127.0.0.1 (64 MiB buffer) that a thread keeps drained while an engine
/// sends to it; [`UdpCapture::drain`] takes what came.
pub(crate) struct UdpCapture {
    /// Its address, `127.0.0.1:PORT`.
    pub(crate) dst: String,
    got: Arc<Mutex<Vec<Vec<u8>>>>,
    stop: Arc<AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl UdpCapture {
    /// Binds the socket and starts its reader.
    pub(crate) fn new() -> Self {
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        sock.set_recv_buffer_size(64 << 20).unwrap();
        sock.bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
        let sock: UdpSocket = sock.into();
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let dst = sock.local_addr().unwrap().to_string();
        let got = Arc::new(Mutex::new(Vec::<Vec<u8>>::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (got, stop) = (got.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut b = vec![0u8; 65536];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(n) = sock.recv(&mut b) {
                        got.lock().unwrap().push(b[..n].to_vec());
                    }
                }
            })
        };
        UdpCapture {
            dst,
            got,
            stop,
            reader: Some(reader),
        }
    }

    /// The datagrams received so far, once nothing has come for 300 ms.
    pub(crate) fn drain(&self) -> Vec<Vec<u8>> {
        let mut n = usize::MAX;
        while n != self.got.lock().unwrap().len() {
            n = self.got.lock().unwrap().len();
            std::thread::sleep(Duration::from_millis(300));
        }
        std::mem::take(&mut *self.got.lock().unwrap())
    }
}

impl Drop for UdpCapture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            r.join().ok();
        }
    }
}
