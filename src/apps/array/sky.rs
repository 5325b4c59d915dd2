//! The demo sky: point sources as correlated noise, delayed per antenna by their geometric
//! delay (rounded to whole samples, as dsim's `delay` allows), a tone for the spectrum,
//! and independent receiver noise per stream.

use serde_json::json;

const C_LIGHT: f64 = 299_792_458.0;

/// Antenna positions (ENU metres): `n` antennas spread evenly through the shipped
/// MeerKAT-like layout (its outer stations when `n` ≤ 16, for resolution at the demo's
/// low frequencies).
pub fn layout(n: usize) -> Vec<[f64; 3]> {
    let mut all = crate::apps::image::default_layout();
    // Prefer the outer stations: at the demo's low frequencies only km baselines resolve.
    if n <= 16 && all.len() >= 64 {
        all.drain(..48);
    }
    if n <= 1 || all.len() <= 1 {
        return all.into_iter().take(n).collect();
    }
    (0..n)
        .map(|k| all[(k * (all.len() - 1) / (n - 1)).min(all.len() - 1)])
        .collect()
}

/// A point source: direction cosines relative to the zenith phase centre and flux
/// (relative noise power).
#[derive(Debug, Clone, Copy)]
pub struct Source {
    /// Direction cosine towards east.
    pub l: f64,
    /// Direction cosine towards north.
    pub m: f64,
    /// Flux (noise power relative to a unit source).
    pub flux: f64,
}

/// The simulated sky: point sources of noise, a tone, and receiver noise per stream.
#[derive(Debug, Clone)]
pub struct SkyModel {
    /// The point sources.
    pub sources: Vec<Source>,
    /// Tone frequency (Hz, baseband) and amplitude (full scale).
    pub tone: (f64, f64),
    /// Receiver noise per stream (full scale).
    pub noise: f64,
    /// Noise standard deviation of a unit-flux source (full scale).
    pub unit: f64,
}

impl SkyModel {
    /// Two sources (one at the phase centre) and a tone at a quarter of the band.
    pub fn demo(adc_rate: f64, channels: usize) -> Self {
        let k = channels / 4;
        SkyModel {
            sources: vec![
                Source {
                    l: 0.0,
                    m: 0.0,
                    flux: 1.0,
                },
                Source {
                    l: 0.12,
                    m: 0.08,
                    flux: 0.6,
                },
            ],
            tone: (k as f64 * adc_rate / (2 * channels) as f64, 0.01),
            noise: 0.05,
            unit: 0.05,
        }
    }

    /// Whole-sample geometric delay of source `s` at antenna position `p`: a plane wave
    /// from unit direction ŝ (east = l, north = m, up = n) reaches `p` after −p·ŝ/c.
    pub fn delay_samples(s: &Source, p: &[f64; 3], adc_rate: f64) -> i64 {
        let n = (1.0 - s.l * s.l - s.m * s.m).max(0.0).sqrt();
        let tau = -(p[0] * s.l + p[1] * s.m + p[2] * n) / C_LIGHT;
        (tau * adc_rate).round() as i64
    }

    /// The dsim program: both polarisations of every antenna, in antenna order.
    pub fn dsim_signals(&self, positions: &[[f64; 3]], adc_rate: f64) -> String {
        self.dsim_signals_for(positions, adc_rate, 0..positions.len())
    }

    /// The signals of the antennas `antennas` (two lines each) for a dsim that feeds only
    /// them: the sources are the same seeded noise in every dsim (the generator is keyed by
    /// the sample's timestamp), so separate dsims still see one sky.
    pub fn dsim_signals_for(
        &self,
        positions: &[[f64; 3]],
        adc_rate: f64,
        antennas: std::ops::Range<usize>,
    ) -> String {
        let mut s = String::new();
        for (i, src) in self.sources.iter().enumerate() {
            s += &format!(
                "src{i} = wgn({}, {});\n",
                self.unit * src.flux.sqrt(),
                4242 + i
            );
        }
        s += &format!("tone = cw({}, {});\n", self.tone.1, self.tone.0);
        for p in &positions[antennas] {
            let sky: Vec<String> = self
                .sources
                .iter()
                .enumerate()
                .map(|(i, src)| format!("delay(src{i}, {})", Self::delay_samples(src, p, adc_rate)))
                .collect();
            let line = format!("{} + tone + wgn({});\n", sky.join(" + "), self.noise);
            s += &line;
            s += &line;
        }
        s
    }

    /// F-engine gain putting the channel noise at about 8 levels rms.
    pub fn fgpu_gain(&self, _channels: usize) -> f64 {
        let var: f64 = self.noise * self.noise
            + self
                .sources
                .iter()
                .map(|s| self.unit * self.unit * s.flux)
                .sum::<f64>();
        8.0 / (var.sqrt() * 511.0)
    }

    /// The model as the array's summary shows it.
    pub fn describe(&self) -> serde_json::Value {
        json!({
            "sources": self.sources.iter().map(|s| json!({"l": s.l, "m": s.m, "flux": s.flux})).collect::<Vec<_>>(),
            "tone_hz": self.tone.0,
            "tone_amplitude": self.tone.1,
            "receiver_noise": self.noise,
            "phase_centre": "zenith",
            "frequencies": "baseband channel frequencies are used as sky frequencies",
        })
    }
}
