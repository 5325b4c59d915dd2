//! Prometheus metrics: a registry per engine (namespace `dsim`, `fgpu`, `xbgpu`), counters
//! with katgpucbf's names (exposed with `_total`), and a small HTTP endpoint at `/metrics`
//! ([`http`]).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Label set: (name, value) pairs.
pub type Labels = Vec<(String, String)>;
/// Counters of one metric name, one per label set (e.g. per output stream).
pub type CounterFamily = Family<Labels, Counter>;

/// An engine's metrics registry.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
    namespace: String,
}

impl Metrics {
    /// A registry whose metric names start with `namespace_`.
    pub fn new(namespace: &str) -> Self {
        Metrics {
            registry: Arc::new(Mutex::new(Registry::with_prefix(namespace))),
            namespace: namespace.to_string(),
        }
    }

    /// Registers a counter (exposed as `namespace_name_total`).
    pub fn counter(&self, name: &str, help: &str) -> Counter {
        let c = Counter::default();
        if let Ok(mut r) = self.registry.lock() {
            r.register(name, help, c.clone());
        }
        c
    }

    /// Registers a labelled counter family.
    pub fn counter_family(&self, name: &str, help: &str) -> CounterFamily {
        let f = CounterFamily::default();
        if let Ok(mut r) = self.registry.lock() {
            r.register(name, help, f.clone());
        }
        f
    }

    /// Registers an integer gauge.
    pub fn gauge(&self, name: &str, help: &str) -> Gauge {
        let g = Gauge::default();
        if let Ok(mut r) = self.registry.lock() {
            r.register(name, help, g.clone());
        }
        g
    }

    /// Registers a floating-point gauge.
    pub fn gauge_f64(&self, name: &str, help: &str) -> Gauge<f64, std::sync::atomic::AtomicU64> {
        let g = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        if let Ok(mut r) = self.registry.lock() {
            r.register(name, help, g.clone());
        }
        g
    }

    /// Registers any metric (a custom one such as the engines' output-lag gauge,
    /// `crate::engines::common::lag`).
    pub fn register(
        &self,
        name: &str,
        help: &str,
        metric: impl prometheus_client::registry::Metric,
    ) {
        if let Ok(mut r) = self.registry.lock() {
            r.register(name, help, metric);
        }
    }

    /// The exposition text, with `NAMESPACE_output_unreachable_packets_total`
    /// ([`super::faults`]) and the standard `process_*` families ([`super::process`])
    /// before the end marker.
    pub fn render(&self) -> String {
        let mut s = String::new();
        if let Ok(r) = self.registry.lock() {
            let _ = encode(&mut s, &r);
        }
        let mut text = super::faults::render(&self.namespace);
        if let Some(p) = super::process::read() {
            text.push_str(&super::process::render(&p));
        }
        match s.rfind("# EOF") {
            Some(i) => s.insert_str(i, &text),
            None => s.push_str(&text),
        }
        s
    }

    /// Serves `GET /metrics` on `addr` from background threads (one per connection, see
    /// [`http`]); returns the bound address.
    pub fn serve(&self, addr: SocketAddr) -> std::io::Result<SocketAddr> {
        let me = self.clone();
        http::serve(addr, http::Limits::default(), move || me.render())
    }
}

/// A [`Labels`] from `(name, value)` string pairs.
pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub mod http;

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn names_and_http() {
        let m = Metrics::new("fgpu");
        let c = m.counter("input_heaps", "heaps received");
        let f = m.counter_family("output_skipped_heaps", "skipped");
        c.inc_by(5);
        f.get_or_create(&labels(&[("stream", "wb")])).inc_by(2);
        let text = m.render();
        assert!(text.contains("fgpu_input_heaps_total 5"), "{text}");
        assert!(
            text.contains("fgpu_output_skipped_heaps_total{stream=\"wb\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE fgpu_output_unreachable_packets counter\nfgpu_output_unreachable_packets_total "),
            "{text}"
        );
        // The process families, unprefixed, before the end marker.
        let cpu = text
            .find("\nprocess_cpu_seconds_total ")
            .expect("process metrics");
        assert!(cpu < text.find("# EOF").unwrap_or(usize::MAX), "{text}");
        let addr = m.serve("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut body = String::new();
        std::io::Read::read_to_string(&mut s, &mut body).unwrap();
        assert!(body.starts_with("HTTP/1.1 200 OK"));
        assert!(body.contains("fgpu_input_heaps_total 5"));
    }
}
