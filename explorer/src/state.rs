//! The page's state in its address: the bundles, the view, the filters and the options, to and from the query
//! string (a deep link restores them; a bad one never breaks the page).

use std::fmt::Write as _;

use charts::views::{Filters, Options, ParetoX, ViewKind};
use metrics::derive::MemoryMetric;

/// The query keys the page reads (every key [`PageState::to_query`] writes).
pub const KEYS: [&str; 20] = [
    "bundle",
    "compare",
    "view",
    "model",
    "sampler",
    "K",
    "B",
    "N",
    "precision",
    "logx",
    "logy",
    "mem",
    "unit",
    "tp",
    "metric",
    "peak_bw",
    "peak_flops",
    "px",
    "multiples",
    "energy",
];

/// Everything the URL holds: bundle(s), view, filters, options, selected cell.
#[derive(Debug, Clone, PartialEq)]
pub struct PageState {
    /// Main bundle file (in `bundles/`).
    pub bundle: Option<String>,
    /// Compared bundle file.
    pub compare: Option<String>,
    /// The view.
    pub view: ViewKind,
    /// Filters.
    pub filters: Filters,
    /// Options.
    pub options: Options,
}

impl Default for PageState {
    fn default() -> Self {
        Self {
            bundle: None,
            compare: None,
            view: ViewKind::Answer,
            filters: Filters::default(),
            options: Options::default(),
        }
    }
}

fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

impl PageState {
    /// The query string (`?bundle=...&view=...`) of this state; defaults are left out.
    pub fn to_query(&self) -> String {
        let mut q: Vec<(&str, String)> = Vec::new();
        let f = &self.filters;
        let o = &self.options;
        q.extend(self.bundle.clone().map(|v| ("bundle", v)));
        q.extend(self.compare.clone().map(|v| ("compare", v)));
        if self.view != ViewKind::Answer {
            q.push(("view", self.view.slug().into()));
        }
        q.extend(f.model.clone().map(|v| ("model", v)));
        q.extend(f.sampler.clone().map(|v| ("sampler", v)));
        q.extend(f.steps.map(|v| ("K", v.to_string())));
        q.extend(f.batch.map(|v| ("B", v.to_string())));
        q.extend(f.seq.map(|v| ("N", v.to_string())));
        q.extend(f.precision.clone().map(|v| ("precision", v)));
        if o.log_x {
            q.push(("logx", "1".into()));
        }
        if o.log_y {
            q.push(("logy", "1".into()));
        }
        if o.memory == MemoryMetric::Reserved {
            q.push(("mem", "reserved".into()));
        }
        if o.bytes {
            q.push(("unit", "bytes".into()));
        }
        if o.throughput_lines {
            q.push(("tp", "lines".into()));
        }
        q.extend(o.metric.clone().map(|v| ("metric", v)));
        q.extend(o.peak_bw_tbs.map(|v| ("peak_bw", v.to_string())));
        q.extend(o.peak_tflops.map(|v| ("peak_flops", v.to_string())));
        if o.pareto_x != ParetoX::Latency {
            q.push(("px", o.pareto_x.slug().into()));
        }
        if o.multiples {
            q.push(("multiples", "1".into()));
        }
        if o.energy {
            q.push(("energy", "1".into()));
        }
        let parts: Vec<String> = q.iter().map(|(k, v)| format!("{k}={}", enc(v))).collect();
        if parts.is_empty() { String::new() } else { format!("?{}", parts.join("&")) }
    }

    /// The state of decoded query pairs; unknown keys and bad values are ignored (a link never breaks).
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut s = Self::default();
        for (k, v) in pairs {
            let v = v.to_string();
            let num = || v.parse::<u32>().ok();
            match k {
                "bundle" if !v.is_empty() => s.bundle = Some(v),
                "compare" if !v.is_empty() => s.compare = Some(v),
                "view" => s.view = ViewKind::from_slug(&v).unwrap_or(s.view),
                "model" => s.filters.model = Some(v),
                "sampler" => s.filters.sampler = Some(v),
                "K" => s.filters.steps = num(),
                "B" => s.filters.batch = num(),
                "N" => s.filters.seq = num(),
                "precision" => s.filters.precision = Some(v),
                "logx" => s.options.log_x = v == "1",
                "logy" => s.options.log_y = v == "1",
                "multiples" => s.options.multiples = v == "1",
                "energy" => s.options.energy = v == "1",
                "mem" if v == "reserved" => s.options.memory = MemoryMetric::Reserved,
                "unit" => s.options.bytes = v == "bytes",
                "tp" => s.options.throughput_lines = v == "lines",
                "metric" if !v.is_empty() => s.options.metric = Some(v),
                "peak_bw" => s.options.peak_bw_tbs = parse_peak(&v),
                "peak_flops" => s.options.peak_tflops = parse_peak(&v),
                "px" => {
                    s.options.pareto_x = [ParetoX::Forwards, ParetoX::TokensPerForward]
                        .into_iter()
                        .find(|x| x.slug() == v)
                        .unwrap_or_default()
                }
                _ => {}
            }
        }
        s
    }
}

/// A peak entered by the user (or read from the URL): a finite number > 0, else none.
pub fn parse_peak(v: &str) -> Option<f64> {
    // Read as a JSON number (the parser is in the wasm already; `str::parse::<f64>` would add its own, with
    // its tables: about 5 KB). HTML number inputs also write ".5".
    let v = v.trim();
    let v = if v.starts_with('.') { format!("0{v}") } else { v.to_string() };
    serde_json::from_str::<f64>(&v).ok().filter(|x| x.is_finite() && *x > 0.0)
}
