//! The dsim signal language (`--signals`, katcp `?signals`): any text parses to stream
//! signals or a `SignalError`, never a panic; a parsed program maps onto 1 or 2 streams
//! or says why not, and its samples evaluate (at the start and near the period's end).
#![no_main]

use gpucbf::engines::dsim::signal::{parse, per_stream, Timebase};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let mut seed = 0u64;
    let mut entropy = || {
        seed += 1;
        seed
    };
    let Ok(outs) = parse(src, &mut entropy) else {
        return;
    };
    for n in [1, 2] {
        let _ = per_stream(outs.clone(), n);
    }
    let tb = Timebase {
        adc_rate: 1712e6,
        period: 1 << 20,
    };
    let mut buf = [0.0f64; 64];
    for o in &outs {
        o.signal.eval_add(&tb, 0, &mut buf);
        o.signal.eval_add(&tb, (1 << 20) - 32, &mut buf);
    }
});
