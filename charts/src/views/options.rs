//! What the reader picks: the views, the filters and the options (axes, units, metric, the device's peaks, small
//! multiples).

use metrics::derive::MemoryMetric;
use schema::grid::Precision;
use schema::{Bundle, Cell};

use super::series::sampler_name;

/// The views, in tab order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewKind {
    /// The answer first: the verdict per (N, B) and series at parity, a sentence, the Pareto frontier.
    Answer,
    /// Latency vs diffusion steps, AR as a reference line.
    Latency,
    /// Pareto frontier of latency and quality.
    Pareto,
    /// S_parity, speedup and verdict per batch size.
    Parity,
    /// Quality vs diffusion steps, AR as a reference line, S_parity marked.
    QualitySteps,
    /// Tokens/s (or bytes/s) per batch size.
    Throughput,
    /// Peak memory, N x B, one heatmap per model.
    Memory,
    /// TTFT and ITL of the AR model.
    ArTiming,
    /// Time per diffusion step.
    StepTime,
    /// Achieved FLOP rate against arithmetic intensity, with the device's roofline when its peaks are given.
    Roofline,
    /// Provenance and the table of all cells.
    Details,
}

impl ViewKind {
    /// All views in tab order.
    pub const ALL: [ViewKind; 11] = [
        ViewKind::Answer,
        ViewKind::Latency,
        ViewKind::Pareto,
        ViewKind::Parity,
        ViewKind::QualitySteps,
        ViewKind::Throughput,
        ViewKind::Memory,
        ViewKind::ArTiming,
        ViewKind::StepTime,
        ViewKind::Roofline,
        ViewKind::Details,
    ];

    /// URL slug and test id.
    pub fn slug(self) -> &'static str {
        match self {
            ViewKind::Answer => "answer",
            ViewKind::Latency => "latency",
            ViewKind::Pareto => "pareto",
            ViewKind::Parity => "parity",
            ViewKind::QualitySteps => "quality",
            ViewKind::Throughput => "throughput",
            ViewKind::Memory => "memory",
            ViewKind::ArTiming => "ttft-itl",
            ViewKind::StepTime => "step-time",
            ViewKind::Roofline => "roofline",
            ViewKind::Details => "details",
        }
    }

    /// Tab text.
    pub fn title(self) -> &'static str {
        match self {
            ViewKind::Answer => "Answer",
            ViewKind::Latency => "Latency vs steps",
            ViewKind::Pareto => "Pareto frontier",
            ViewKind::Parity => "S_parity",
            ViewKind::QualitySteps => "Quality vs steps",
            ViewKind::Throughput => "Throughput",
            ViewKind::Memory => "Memory",
            ViewKind::ArTiming => "TTFT / ITL (AR)",
            ViewKind::StepTime => "Time per step (diffusion)",
            ViewKind::Roofline => "Roofline",
            ViewKind::Details => "Run details",
        }
    }

    /// The view of a slug.
    pub fn from_slug(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.slug() == s)
    }

    /// True when the view is a chart on the canvas.
    pub fn is_chart(self) -> bool {
        !matches!(self, ViewKind::Parity | ViewKind::Details)
    }
}

/// What the filters keep. `None` keeps everything. The K filter applies to diffusion cells only, so the AR
/// model stays as the reference.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Filters {
    /// Model id.
    pub model: Option<String>,
    /// Sampler (serde name, e.g. `llada_low_confidence`).
    pub sampler: Option<String>,
    /// Diffusion steps K.
    pub steps: Option<u32>,
    /// Batch size B.
    pub batch: Option<u32>,
    /// Sequence length N.
    pub seq: Option<u32>,
    /// Precision (`bf16`, `f32`, ...).
    pub precision: Option<String>,
}

pub(super) fn precision_of(b: &Bundle, c: &Cell) -> Option<Precision> {
    b.model(&c.key.model).map(|m| m.dtype)
}

impl Filters {
    /// True when the filters keep `c` of `b`.
    pub fn keeps(&self, b: &Bundle, c: &Cell) -> bool {
        let k = &c.key;
        self.model.as_ref().is_none_or(|m| *m == k.model)
            && self.sampler.as_deref().is_none_or(|s| s == sampler_name(k.sampler))
            && self.steps.is_none_or(|s| k.steps.is_none_or(|ks| ks == s))
            && self.batch.is_none_or(|v| v == k.batch_size)
            && self.seq.is_none_or(|v| v == k.seq_len)
            && self.precision.as_deref().is_none_or(|p| precision_of(b, c).is_some_and(|d| d.to_string() == p))
    }
}

/// Chart options.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Logarithmic x axis (numeric axes only).
    pub log_x: bool,
    /// Logarithmic y axis.
    pub log_y: bool,
    /// Memory heatmap: allocated or reserved (CPU bundles always show RSS).
    pub memory: MemoryMetric,
    /// Throughput in bytes/s instead of tokens/s.
    pub bytes: bool,
    /// Throughput as lines over the batch size (its scaling with B, one line per series) instead of bars per B.
    pub throughput_lines: bool,
    /// Quality metric name; `None`: the first the bundles have.
    pub metric: Option<String>,
    /// Roofline: the device's peak memory bandwidth in TB/s (10^12 bytes/s), entered by the user; it overrides
    /// the copy bandwidth the run measured (bundles of format 1.4 and later).
    pub peak_bw_tbs: Option<f64>,
    /// Roofline: the device's peak FLOP rate in TFLOP/s, entered by the user; it overrides the measured matmul
    /// rate.
    pub peak_tflops: Option<f64>,
    /// Pareto view: the x axis.
    pub pareto_x: ParetoX,
    /// Small multiples: the latency, Pareto, quality and throughput views show every shape the filters keep at
    /// once, a small chart per (N, B) (per N for throughput) with shared axes.
    pub multiples: bool,
    /// Energy instead of time wherever latency is an axis (latency vs steps, the Pareto frontier over latency):
    /// joules per generated token (`metrics::energy`). Ignored when no loaded bundle measured energy (format 1.7),
    /// so that a missing energy is never drawn as 0.
    pub energy: bool,
}

/// The x axis of the Pareto view: latency (this device), or the hardware-independent cost of a sampler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ParetoX {
    /// Median L_e2e.
    #[default]
    Latency,
    /// Forward passes per run.
    Forwards,
    /// Tokens per forward pass and sequence.
    TokensPerForward,
}

impl ParetoX {
    /// The URL value.
    pub fn slug(self) -> &'static str {
        match self {
            ParetoX::Latency => "latency",
            ParetoX::Forwards => "forwards",
            ParetoX::TokensPerForward => "tpf",
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Self {
            log_x: false,
            log_y: false,
            memory: MemoryMetric::Allocated,
            bytes: false,
            throughput_lines: false,
            metric: None,
            peak_bw_tbs: None,
            peak_tflops: None,
            pareto_x: ParetoX::Latency,
            multiples: false,
            energy: false,
        }
    }
}
