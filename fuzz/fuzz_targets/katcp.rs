//! The katcp line reader, message parser and request handling (the standard requests:
//! `?help`, `?watchdog`, `?version-list`, `?sensor-list`/`?sensor-value` with `/regex/`
//! filters, `?sensor-sampling`, `?client-list`, `?log-level`; and the engines' own: fgpu's
//! `?gain`, `?gain-all`, `?delays`; xbgpu's `?capture-*`, `?beam-*`), through
//! `control::respond` as the server dispatches them: any byte stream gives lines within the
//! reader's limit, messages that re-encode to themselves, and for every request exactly
//! one reply, last, named as the request with its message id, `ok`, `fail` or `invalid`,
//! after informs of the same name and id; a request that does not succeed changes no
//! sensor.
#![no_main]

use std::sync::{Arc, Mutex};

use gpucbf::compute::xengine::{Beam, BeamSet};
use gpucbf::control::katcp::LineReader;
use gpucbf::control::{respond, Device, Kind, Message, SensorSet};
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
    FgpuDevice::new(
        vec![out("wb", 8), out("nb", 4)],
        1712e6,
        1e9,
        1.0,
        7,
        1 << 20,
    )
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
        // ?log-level with an argument sets the process's level: keep it as it is.
        if m.name == "log-level" && !m.args.is_empty() {
            continue;
        }
        for d in &devices {
            let before = snapshot(d.as_ref());
            let out = respond(d.as_ref(), &m);
            let (reply, informs) = out.split_last().expect("every request gets a reply");
            assert_eq!(reply.kind, Kind::Reply);
            assert_eq!((&reply.name, reply.mid), (&m.name, m.mid));
            let status = reply.args.first().map(|a| a.as_slice());
            assert!(
                matches!(status, Some(b"ok" | b"fail" | b"invalid")),
                "?{} replied {:?}",
                m.name,
                status
            );
            for i in informs {
                // ?sensor-sampling reports the sensors' readings as #sensor-status.
                if m.name == "sensor-sampling" && i.name == "sensor-status" {
                    continue;
                }
                assert_eq!((i.kind, &i.name, i.mid), (Kind::Inform, &m.name, m.mid));
            }
            if status != Some(b"ok") {
                assert_eq!(
                    before,
                    snapshot(d.as_ref()),
                    "?{} did not succeed but changed sensors",
                    m.name
                );
            }
        }
    }
});
