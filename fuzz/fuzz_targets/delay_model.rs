//! The delay-model and gain values of katcp `?delays` / `?gain` (`d,dr:p,pr`, `re+imj`):
//! any text gives a value or an error, never a panic; an accepted model is finite and
//! evaluates (coarse/fine delay and phase) at any timestamp.
#![no_main]

use gpucbf::engines::fgpu::control::{parse_complex, parse_delay};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 9 {
        return;
    }
    let t = u64::from_le_bytes(data[..8].try_into().unwrap());
    let Ok(s) = std::str::from_utf8(&data[8..]) else {
        return;
    };
    if let Ok(c) = parse_complex(s) {
        assert!(c.re.is_finite() && c.im.is_finite());
    }
    for rate in [1712e6, 1.0] {
        if let Ok(m) = parse_delay(s, t >> 16, rate) {
            let (_, fine, phase) = m.at(t, 1 + (t & 7));
            assert!(phase.is_finite(), "{m:?} at {t}: phase {phase}");
            let _ = fine;
            let _ = m.segments(t >> 8, 4, 64, 1, true);
        }
    }
});
