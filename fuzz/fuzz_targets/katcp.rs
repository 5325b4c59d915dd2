//! The katcp line reader, message parser and the engines' request handlers (fgpu's
//! `?gain`, `?gain-all`, `?delays`; xbgpu's `?capture-*`, `?beam-*`): any byte stream
//! gives lines within the reader's limit, messages that re-encode to themselves, and
//! requests that succeed or fail without a panic; a failed request changes no sensor.
#![no_main]

use std::sync::{Arc, Mutex};

use gpucbf::compute::xengine::{Beam, BeamSet};
use gpucbf::control::katcp::LineReader;
use gpucbf::control::{Device, Kind, Message, SensorSet};
use gpucbf::engines::fgpu::control::OutputControl;
use gpucbf::engines::fgpu::device::{FgpuDevice, OutputHandle};
use gpucbf::engines::xbgpu::corrprod::CaptureGate;
use gpucbf::engines::xbgpu::device::XbDevice;
use libfuzzer_sys::fuzz_target;

fn fgpu() -> FgpuDevice {
    let out = |name: &str, channels: usize| OutputHandle {
        name: name.into(),
        channels,
        batch_step: 8192,
        spectrum_step: 64,
        control: Arc::new(Mutex::new(OutputControl::new(channels, 1.0))),
    };
    FgpuDevice::new(vec![out("wb", 8), out("nb", 4)], 1712e6, 1e9, 1.0, 7, 1 << 20)
}

fn xbgpu() -> XbDevice {
    let n = 3;
    let beam = |pol| Beam {
        pol,
        quant_gain: 1.0,
        weights: vec![1.0; n],
        delays: vec![0.0; n],
        phases: vec![0.0; n],
    };
    XbDevice {
        sensors: SensorSet::default(),
        outputs: ["bl", "b0", "b1"]
            .iter()
            .map(|s| (s.to_string(), Arc::new(CaptureGate::new(false))))
            .collect(),
        beams: vec!["b0".into(), "b1".into()],
        set: Arc::new(Mutex::new(BeamSet {
            beams: vec![beam(0), beam(1)],
            channel_offset: 16,
            n_channels_total: 64,
            bandwidth: 856e6,
            dither: true,
            seed: 1,
        })),
        n_ants: n,
        steady: Default::default(),
    }
}

/// The sensors a request may change: not the clock's (`time.*`, read every 10 s by a
/// thread of their own) nor `device-status`, which follows them.
fn snapshot(d: &dyn Device) -> Vec<(String, String)> {
    let mut v: Vec<_> = d
        .sensors()
        .all()
        .into_iter()
        .filter(|s| !s.name.starts_with("time.") && s.name != "device-status")
        .map(|s| (s.name, s.value))
        .collect();
    v.sort();
    v
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, data)) = data.split_first() else {
        return;
    };
    let limit = 16 + 32 * (mode & 15) as usize;
    let mut reader = LineReader::new(limit);
    let mut lines = Vec::new();
    for piece in data.chunks(1 + (mode >> 4) as usize * 9) {
        if reader.feed(piece, &mut lines).is_err() {
            // The server disconnects such a client; a new connection starts afresh.
            reader = LineReader::new(limit);
        }
        assert!(reader.pending() <= limit && reader.capacity() <= limit);
    }
    let devices: [Box<dyn Device>; 2] = [Box::new(fgpu()), Box::new(xbgpu())];
    for line in lines {
        assert!(line.len() <= limit);
        let Ok(m) = Message::parse(&line) else {
            continue;
        };
        let enc = m.encode();
        let back = Message::parse(&enc[..enc.len() - 1]).expect("an encoded message parses");
        assert_eq!(back, m);
        if m.kind != Kind::Request {
            continue;
        }
        let args: Vec<String> = m
            .args
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        for d in &devices {
            if !d.requests().iter().any(|(n, _)| *n == m.name) {
                continue;
            }
            let before = snapshot(d.as_ref());
            if d.request(&m.name, &args).is_err() {
                assert_eq!(
                    before,
                    snapshot(d.as_ref()),
                    "?{} failed but changed sensors",
                    m.name
                );
            }
        }
    }
});
