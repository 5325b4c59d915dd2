//! What the checks drive the array with: katcp requests as the telescope's controller
//! sends them (`?signals`, `?gain`, `?gain-all`, `?delays`, `?capture-start`,
//! `?beam-weights`, `?beam-delays`, `?beam-quant-gains`), the engines'
//! `steady-state-timestamp` after each (the first ADC timestamp that reflects the change),
//! and the data received from that timestamp on.

use std::time::{Duration, Instant};

use num_complex::Complex64;

use super::katcp::Client;
use super::launch::{Io, StreamShape, BCP, BEAMS, WIDEBAND};
use super::recv::{i32s, Stream};
use super::QualifyArgs;
use crate::spead::icd::{baseline_index, n_baselines, MISSING};

/// Timeout of one katcp request (the controller's longest is 10 s; the CPU engines of a
/// loaded host answer later).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// The array under test, as the checks see it.
pub struct Harness<'a> {
    array: &'a Io,
    /// One dsim per antenna.
    dsims: Vec<Client>,
    fgpu: Vec<Client>,
    xb: Vec<Client>,
    /// Antennas.
    pub n: usize,
    /// ADC sample rate.
    pub fs: f64,
    /// ADC sample width.
    pub bits: u32,
    /// Data used from this ADC timestamp on (every request so far reflected).
    pub steady: u64,
    /// Seed of the random values.
    pub seed: u64,
    /// How long to wait for data.
    pub data_timeout: Duration,
    int_time: f64,
    /// Dumps skipped for MISSING markers so far.
    pub incomplete_dumps: u64,
    /// Noise seeds handed out so far.
    noise_seeds: u64,
}

/// True if a dump's visibilities (re, im pairs) hold a MISSING marker (an antenna's data
/// lost for part of the accumulation).
fn has_missing(raw: &[i32]) -> bool {
    raw.chunks_exact(2).any(|p| p == MISSING)
}

/// One dump of a correlator stream.
pub struct Dump {
    /// Accumulation start (ADC samples).
    pub timestamp: u64,
    raw: Vec<i32>,
    n: usize,
    channels: usize,
}

impl Dump {
    /// Visibility of input `i` (2·antenna + pol) with input `j` in channel `k`:
    /// Σ x_i · conj(x_j) (the product is stored for i's antenna ≤ j's; the other order is
    /// its conjugate).
    pub fn vis(&self, k: usize, i: usize, j: usize) -> Complex64 {
        let (a1, p1, a2, p2) = (i / 2, i % 2, j / 2, j % 2);
        let (conj, a1, p1, a2, p2) = if a1 <= a2 {
            (false, a1, p1, a2, p2)
        } else {
            (true, a2, p2, a1, p1)
        };
        let nbl = n_baselines(self.n);
        let idx = ((k * nbl + baseline_index(a1, a2)) * 4 + p1 + 2 * p2) * 2;
        let v = Complex64::new(self.raw[idx] as f64, self.raw[idx + 1] as f64);
        if conj {
            v.conj()
        } else {
            v
        }
    }

    /// Auto-correlation power of input `i` in channel `k`.
    pub fn auto(&self, k: usize, i: usize) -> f64 {
        self.vis(k, i, i).re
    }

    /// Channels.
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// The raw (re, im) values of one channel: baselines × 4 products × 2.
    pub fn channel_raw(&self, k: usize) -> &[i32] {
        let per = n_baselines(self.n) * 8;
        &self.raw[k * per..(k + 1) * per]
    }
}

/// Heaps of one beam: (timestamp, int8 (channel, spectrum, re/im)).
pub struct BeamData {
    /// Channels.
    pub channels: usize,
    /// Spectra per heap.
    pub spectra: usize,
    /// The heaps.
    pub heaps: Vec<(u64, Vec<i8>)>,
}

impl BeamData {
    /// Mean power per channel over every heap.
    pub fn power(&self) -> Vec<f64> {
        let mut p = vec![0.0; self.channels];
        for (_, h) in &self.heaps {
            for (k, pk) in p.iter_mut().enumerate() {
                let ch = &h[k * self.spectra * 2..(k + 1) * self.spectra * 2];
                *pk += ch.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>();
            }
        }
        let count = (self.heaps.len() * self.spectra).max(1) as f64;
        p.iter_mut().for_each(|v| *v /= count);
        p
    }
}

impl<'a> Harness<'a> {
    /// Connects to every engine's katcp server.
    pub fn connect(array: &'a Io, args: &QualifyArgs) -> anyhow::Result<Harness<'a>> {
        let t = Duration::from_secs(60);
        let dsims = array
            .dsim_katcp
            .iter()
            .map(|a| Client::connect(*a, t))
            .collect::<std::io::Result<Vec<_>>>()?;
        let fgpu = array
            .fgpu_katcp
            .iter()
            .map(|a| Client::connect(*a, t))
            .collect::<std::io::Result<Vec<_>>>()?;
        let xb = array
            .xb_katcp
            .iter()
            .map(|a| Client::connect(*a, t))
            .collect::<std::io::Result<Vec<_>>>()?;
        let acc = array.shapes[0].acc_step() as f64 / args.adc_sample_rate;
        Ok(Harness {
            array,
            dsims,
            fgpu,
            xb,
            n: args.antennas,
            fs: args.adc_sample_rate,
            bits: 10,
            steady: 0,
            seed: args.seed,
            data_timeout: Duration::from_secs_f64(30.0 + 6.0 * acc),
            int_time: args.int_time,
            incomplete_dumps: 0,
            noise_seeds: 0,
        })
    }

    /// The requested integration time (s).
    pub fn int_time(&self) -> f64 {
        self.int_time
    }

    /// Shape of correlator stream `s` (0: wideband, 1: narrowband).
    pub fn shape(&self, s: usize) -> &StreamShape {
        &self.array.shapes[s]
    }

    /// Number of correlator streams.
    pub fn streams(&self) -> usize {
        self.array.shapes.len()
    }

    /// Sync time (UNIX s).
    pub fn sync_time(&self) -> f64 {
        self.array.sync_time
    }

    fn raise(&mut self, t: u64) {
        self.steady = self.steady.max(t);
    }

    /// `?sensor-value steady-state-timestamp` of `c`.
    fn steady_of(c: &mut Client) -> anyhow::Result<u64> {
        c.sensor("steady-state-timestamp", REQUEST_TIMEOUT)?
            .parse()
            .map_err(|e| anyhow::anyhow!("steady-state-timestamp: {e}"))
    }

    /// `?signals spec` on every antenna's dsim (each gets the spec's assignments and its
    /// antenna's two outputs, or the one output meant for every input): data from the last
    /// first timestamp on, past the longest PFB window, reflect it.
    pub fn signals(&mut self, spec: &str) -> anyhow::Result<u64> {
        let specs = split_signals(spec, self.dsims.len())?;
        let mut t = 0;
        for (dsim, spec) in self.dsims.iter_mut().zip(&specs) {
            let r = dsim.request("signals", &[spec.as_str()], REQUEST_TIMEOUT)?;
            let first: u64 = r
                .args
                .first()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| anyhow::anyhow!("?signals replied {:?}", r.args))?;
            t = t.max(first);
        }
        // 16 taps of the widest window (narrowband: the DDC filter too).
        let window = self
            .array
            .shapes
            .iter()
            .map(|s| 32 * s.spectrum_step)
            .max()
            .unwrap_or(0);
        self.raise(t + window);
        Ok(t)
    }

    /// White noise of standard deviation `std` (full scale 1), the same on every input
    /// (seeded, so that every antenna's dsim draws the same samples).
    pub fn noise(&mut self, std: f64) -> String {
        self.noise_seeds += 1;
        let seed =
            crate::engines::dsim::signal::mix64(self.seed ^ (0x9015E << 20) ^ self.noise_seeds);
        format!("wgn({std}, {})", seed >> 12)
    }

    /// The same signal expression on every input.
    pub fn signal_all(&mut self, expr: &str) -> anyhow::Result<u64> {
        self.signals(&format!("{expr};"))
    }

    /// One expression per input (2 per antenna).
    pub fn signal_each(&mut self, exprs: &[String]) -> anyhow::Result<u64> {
        let spec: String = exprs.iter().map(|e| format!("{e};")).collect();
        self.signals(&spec)
    }

    /// Full-scale amplitude of the digitiser (ADC units).
    pub fn adc_full_scale(&self) -> f64 {
        f64::from((1u32 << (self.bits - 1)) - 1)
    }

    /// `?gain STREAM POL values…` on F-engine `a`.
    pub fn gain(
        &mut self,
        out: &str,
        a: usize,
        pol: usize,
        values: &[String],
    ) -> anyhow::Result<()> {
        let mut args = vec![out.to_string(), pol.to_string()];
        args.extend(values.iter().cloned());
        self.fgpu[a].request("gain", &args, REQUEST_TIMEOUT)?;
        let t = Self::steady_of(&mut self.fgpu[a])?;
        self.raise(t);
        Ok(())
    }

    /// `?gain-all STREAM values…` on every F-engine.
    pub fn gain_all(&mut self, out: &str, values: &[String]) -> anyhow::Result<()> {
        let mut args = vec![out.to_string()];
        args.extend(values.iter().cloned());
        for a in 0..self.n {
            self.fgpu[a].request("gain-all", &args, REQUEST_TIMEOUT)?;
            let t = Self::steady_of(&mut self.fgpu[a])?;
            self.raise(t);
        }
        Ok(())
    }

    /// `?gain-all STREAM g` on every F-engine with a real gain.
    pub fn gain_all_real(&mut self, out: &str, g: f64) -> anyhow::Result<()> {
        self.gain_all(out, &[format!("{g}")])
    }

    /// `?delays STREAM START set0 set1` on F-engine `a` (sets `delay,rate:phase,rate`).
    pub fn delays(
        &mut self,
        out: &str,
        a: usize,
        start: f64,
        sets: [&str; 2],
    ) -> anyhow::Result<Duration> {
        let t0 = Instant::now();
        self.fgpu[a].request(
            "delays",
            &[out, &format!("{start:.9}"), sets[0], sets[1]],
            REQUEST_TIMEOUT,
        )?;
        let took = t0.elapsed();
        let t = Self::steady_of(&mut self.fgpu[a])?;
        self.raise(t);
        Ok(took)
    }

    /// A sensor of F-engine `a`.
    pub fn fgpu_sensor(&mut self, a: usize, name: &str) -> anyhow::Result<String> {
        Ok(self.fgpu[a].sensor(name, REQUEST_TIMEOUT)?)
    }

    /// `?capture-start STREAM TIMESTAMP` on XB-engine `k`.
    pub fn capture_start(&mut self, k: usize, stream: &str, ts: u64) -> anyhow::Result<()> {
        self.xb[k].request("capture-start", &[stream, &ts.to_string()], REQUEST_TIMEOUT)?;
        Ok(())
    }

    /// `?capture-stop STREAM` on XB-engine `k`.
    pub fn capture_stop(&mut self, k: usize, stream: &str) -> anyhow::Result<()> {
        self.xb[k].request("capture-stop", &[stream], REQUEST_TIMEOUT)?;
        Ok(())
    }

    fn beam_request(&mut self, name: &str, args: &[String]) -> anyhow::Result<()> {
        self.xb[0].request(name, args, REQUEST_TIMEOUT)?;
        // The XB-engine folds beam parameters into the next input chunk it takes. Where
        // it has no steady-state-timestamp sensor: every chunk starting after the chunk
        // holding the present moment (by the wall clock, which paces the dsim) is taken
        // after this request.
        let t = match Self::steady_of(&mut self.xb[0]) {
            Ok(t) => t,
            Err(_) => {
                let sh = self.shape(0);
                let chunk = sh.chunk_batches * sh.spectra_per_heap * sh.spectrum_step;
                let now = ((super::launch::unix_now()? - self.sync_time()) * self.fs).max(0.0);
                ((now as u64).div_ceil(chunk) + 1) * chunk
            }
        };
        self.raise(t);
        Ok(())
    }

    /// `?beam-weights BEAM w…`.
    pub fn beam_weights(&mut self, b: usize, w: &[f64]) -> anyhow::Result<()> {
        let mut a = vec![BEAMS[b].0.to_string()];
        a.extend(w.iter().map(|v| format!("{v}")));
        self.beam_request("beam-weights", &a)
    }

    /// `?beam-delays BEAM delay:phase…`.
    pub fn beam_delays(&mut self, b: usize, dp: &[(f64, f64)]) -> anyhow::Result<()> {
        let mut a = vec![BEAMS[b].0.to_string()];
        a.extend(dp.iter().map(|(d, p)| format!("{d}:{p}")));
        self.beam_request("beam-delays", &a)
    }

    /// `?beam-quant-gains BEAM g`.
    pub fn beam_quant_gain(&mut self, b: usize, g: f64) -> anyhow::Result<()> {
        self.beam_request(
            "beam-quant-gains",
            &[BEAMS[b].0.to_string(), format!("{g}")],
        )
    }

    /// The state every check starts from (upstream's harness): dsim `0;`, default gains
    /// (and `gain` on every input below), zero delays from the sync time, beam quant gain
    /// 1, delays 0:0, weights 1, capture on for every stream.
    pub fn reset(&mut self) -> anyhow::Result<()> {
        self.signal_all("0")?;
        let sync = self.sync_time();
        for s in 0..self.streams() {
            let out = self.shape(s).output.clone();
            self.gain_all(&out, &["default".to_string()])?;
            for a in 0..self.n {
                self.delays(&out, a, sync, ["0,0:0,0", "0,0:0,0"])?;
            }
        }
        let ones = vec![1.0; self.n];
        let zeros = vec![(0.0, 0.0); self.n];
        for b in 0..BEAMS.len() {
            self.beam_quant_gain(b, 1.0)?;
            self.beam_delays(b, &zeros)?;
            self.beam_weights(b, &ones)?;
        }
        for s in 0..self.streams() {
            let name = self.shape(s).corrprod.clone();
            self.capture_start(s, &name, 0)?;
        }
        for (b, _) in BEAMS {
            self.capture_start(0, b, 0)?;
        }
        Ok(())
    }

    /// The corrprod receiver of stream `s`.
    pub fn corrprod_stream(&self, s: usize) -> &Stream {
        &self.array.corrprods[s].stream
    }

    /// `count` dumps of stream `s` stamped at or after every request so far.
    pub fn dumps(&mut self, s: usize, count: usize) -> anyhow::Result<Vec<Dump>> {
        let from = self.steady;
        self.dumps_from(s, from, count)
    }

    /// `count` complete dumps of stream `s` stamped at or after `from`. A dump with
    /// MISSING markers (an antenna's data lost for part of it) is skipped and counted in
    /// [`Harness::incomplete_dumps`]; ten in a row are an error (the engines do not keep up).
    pub fn dumps_from(&mut self, s: usize, from: u64, count: usize) -> anyhow::Result<Vec<Dump>> {
        let channels = self.shape(s).channels;
        let len = channels * n_baselines(self.n) * 8;
        let mut out = Vec::new();
        let mut from = from;
        let mut skipped = 0;
        while out.len() < count {
            let got = self.array.corrprods[s]
                .stream
                .wait(from, count - out.len(), self.data_timeout)
                .map_err(|e| anyhow::anyhow!("{}: {e}", self.shape(s).corrprod))?;
            for (timestamp, b) in got {
                from = timestamp + 1;
                let raw = i32s(&b);
                if raw.len() != len {
                    anyhow::bail!(
                        "a dump at {timestamp} has {} values, expected {len}",
                        raw.len()
                    );
                }
                if has_missing(&raw) {
                    self.incomplete_dumps += 1;
                    skipped += 1;
                    tracing::warn!(timestamp, "dump with MISSING markers skipped");
                    if skipped >= 10 {
                        anyhow::bail!(
                            "{skipped} dumps in a row had MISSING markers (an antenna's data \
                             lost): the engines do not keep up at this rate"
                        );
                    }
                    continue;
                }
                out.push(Dump {
                    timestamp,
                    raw,
                    n: self.n,
                    channels,
                });
            }
        }
        Ok(out)
    }

    /// Waits (at most `limit`) until every correlator stream has sent a dump without
    /// MISSING markers; returns the seconds it took and how many dumps before had them.
    pub fn settle(&mut self, limit: Duration) -> anyhow::Result<(f64, u64)> {
        let t0 = Instant::now();
        let mut incomplete = 0;
        for s in 0..self.streams() {
            let mut from = 0;
            loop {
                let left = limit.saturating_sub(t0.elapsed());
                let got = self.array.corrprods[s]
                    .stream
                    .wait(from, 1, left)
                    .map_err(|e| {
                        anyhow::anyhow!(
                            "{}: no whole dump in {limit:?} ({incomplete} with MISSING \
                             markers): {e}",
                            self.shape(s).corrprod
                        )
                    })?;
                let (timestamp, b) = &got[0];
                from = timestamp + 1;
                if !has_missing(&i32s(b)) {
                    break;
                }
                incomplete += 1;
            }
        }
        Ok((t0.elapsed().as_secs_f64(), incomplete))
    }

    /// One dump of the wideband stream after every request so far.
    pub fn dump(&mut self) -> anyhow::Result<Dump> {
        Ok(self.dumps(0, 1)?.remove(0))
    }

    /// Empties `stream` of what its output formed before a `?capture-stop` and still had
    /// on its way: waits until nothing has come for two input chunks or two dumps of
    /// stream 0 (the engine sends in bursts of those), and at most 30 s.
    pub fn drain(&self, stream: &Stream) -> anyhow::Result<()> {
        let sh = self.shape(0);
        let chunk = (sh.chunk_batches * sh.spectra_per_heap * sh.spectrum_step) as f64 / self.fs;
        let quiet = 2.0 * chunk.max(self.int_time()) + 0.3;
        stream.drain(Duration::from_secs_f64(quiet), Duration::from_secs(30))
    }

    /// The beam receiver of beam `b`.
    pub fn beam_stream(&self, b: usize) -> &Stream {
        &self.array.beams[b].stream
    }

    /// `count` heaps of beam `b` stamped at or after `from`.
    pub fn beam_from(&mut self, b: usize, from: u64, count: usize) -> anyhow::Result<BeamData> {
        let channels = self.shape(0).channels;
        let spectra = self.array.beam_spectra_per_heap;
        let got = self.array.beams[b]
            .stream
            .wait(from, count, self.data_timeout)
            .map_err(|e| anyhow::anyhow!("{}: {e}", BEAMS[b].0))?;
        let mut heaps = Vec::new();
        for (t, raw) in got {
            if raw.len() != channels * spectra * 2 {
                anyhow::bail!(
                    "{} heap at {t} has {} bytes, expected {}",
                    BEAMS[b].0,
                    raw.len(),
                    channels * spectra * 2
                );
            }
            heaps.push((t, raw.into_iter().map(|v| v as i8).collect()));
        }
        Ok(BeamData {
            channels,
            spectra,
            heaps,
        })
    }

    /// `count` heaps of beam `b` after every request so far.
    pub fn beam(&mut self, b: usize, count: usize) -> anyhow::Result<BeamData> {
        let from = self.steady;
        self.beam_from(b, from, count)
    }

    /// Heaps of beam `b` per dump's worth of data (at least 4).
    pub fn beam_heaps_per_dump(&self) -> usize {
        (self.shape(0).dump_batches as usize).max(4)
    }

    /// The wideband output name and corrprod stream (for the checks' messages).
    pub fn names() -> (&'static str, &'static str) {
        (WIDEBAND, BCP)
    }
}

/// Splits a dsim program over `dsims` dsims of two inputs each: every dsim gets the
/// program's assignments, then either its two outputs (a program of `2 · dsims` outputs) or
/// the program's one output (meant for every input).
pub fn split_signals(spec: &str, dsims: usize) -> anyhow::Result<Vec<String>> {
    let mut assigns = String::new();
    let mut outputs = Vec::new();
    for stmt in spec.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let is_assign = stmt.split_once('=').is_some_and(|(lhs, _)| {
            let lhs = lhs.trim();
            !lhs.is_empty() && lhs.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        if is_assign {
            assigns += &format!("{stmt}; ");
        } else {
            outputs.push(stmt);
        }
    }
    match outputs.len() {
        1 => Ok(vec![format!("{assigns}{};", outputs[0]); dsims]),
        k if k == 2 * dsims => Ok((0..dsims)
            .map(|d| format!("{assigns}{}; {};", outputs[2 * d], outputs[2 * d + 1]))
            .collect()),
        k => anyhow::bail!(
            "a program for {dsims} dsims needs 1 or {} outputs, not {k}",
            2 * dsims
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::split_signals;

    #[test]
    fn programs_split_over_per_antenna_dsims() {
        let one = split_signals("n = wgn(0.1, 21); n;", 3).unwrap();
        assert_eq!(one, vec!["n = wgn(0.1, 21); n;".to_string(); 3]);
        let each = split_signals("n = wgn(0.1, 21); n; delay(n, -3); cw(0.2, 5e6); 0;", 2).unwrap();
        assert_eq!(
            each,
            vec![
                "n = wgn(0.1, 21); n; delay(n, -3);".to_string(),
                "n = wgn(0.1, 21); cw(0.2, 5e6); 0;".to_string()
            ]
        );
        let err = split_signals("0; 0; 0;", 2).unwrap_err().to_string();
        assert!(err.contains("1 or 4 outputs, not 3"), "{err}");
    }
}
