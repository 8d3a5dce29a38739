//! The "latency vs diffusion steps" chart, drawn with plotters on any `DrawingBackend`.
//!
//! No wasm dependency here: the browser draws it on a `CanvasBackend`, the tests on an `SVGBackend`.
//! The numbers come ready-made in a [`LatencyChart`] (built from `schema::derive` in `crate::view`);
//! this module only places them.

use std::ops::Range;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, ReversibleRanged, ValueFormatter};
use plotters::prelude::*;
use serde::Serialize;

/// The x axis: values are log2(K), ticks sit at whole powers of two and read as K.
#[derive(Debug, Clone)]
pub struct Log2Steps(pub Range<f64>);

impl Ranged for Log2Steps {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = self.0.end - self.0.start;
        let t = if span > 0.0 { (value - self.0.start) / span } else { 0.5 };
        limit.0 + (t * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        let (lo, hi) = (self.0.start.ceil() as i32, self.0.end.floor() as i32);
        let all: Vec<f64> = (lo..=hi).map(f64::from).collect();
        let max = hint.max_num_points().max(1);
        let stride = all.len().div_ceil(max).max(1);
        all.into_iter().step_by(stride).collect()
    }

    fn range(&self) -> Range<f64> {
        self.0.clone()
    }
}

impl ReversibleRanged for Log2Steps {
    fn unmap(&self, input: i32, limit: (i32, i32)) -> Option<f64> {
        if limit.0 == limit.1 {
            return None;
        }
        let t = f64::from(input - limit.0) / f64::from(limit.1 - limit.0);
        Some(self.0.start + t * (self.0.end - self.0.start))
    }
}

impl ValueFormatter<f64> for Log2Steps {
    fn format(value: &f64) -> String {
        format!("{}", 2f64.powf(*value).round())
    }
}

/// Okabe-Ito colour-blind-safe palette, without its black and yellow (too light on white).
pub const OKABE_ITO: [RGBColor; 6] = [
    RGBColor(0x00, 0x72, 0xB2), // blue
    RGBColor(0xE6, 0x9F, 0x00), // orange
    RGBColor(0x00, 0x9E, 0x73), // bluish green
    RGBColor(0xCC, 0x79, 0xA7), // reddish purple
    RGBColor(0x56, 0xB4, 0xE9), // sky blue
    RGBColor(0xD5, 0x5E, 0x00), // vermillion
];

/// Colour of the autoregressive reference line (Okabe-Ito black).
pub const AR_COLOUR: RGBColor = RGBColor(0x00, 0x00, 0x00);

/// One measured point of a diffusion line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepPoint {
    /// Diffusion steps K.
    pub steps: u32,
    /// Median end-to-end latency over the repetitions, in milliseconds.
    pub median_ms: f64,
    /// Fastest repetition (lower end of the spread bar), in milliseconds.
    pub min_ms: f64,
    /// Slowest repetition (upper end of the spread bar), in milliseconds.
    pub max_ms: f64,
}

/// One diffusion-model line (e.g. LLaDA at one sampler/block length).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiffusionLine {
    /// Legend text.
    pub label: String,
    /// Points, sorted by `steps`.
    pub points: Vec<StepPoint>,
}

/// The autoregressive model's latency at the same shape: a horizontal reference line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArReference {
    /// Legend text.
    pub label: String,
    /// Median end-to-end latency, in milliseconds.
    pub median_ms: f64,
}

/// Everything the chart draws for one (batch size, sequence length) group.
/// Serialized as the canvas' `data-series` attribute, so tests can compare it with the bundle.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LatencyChart {
    /// Batch size B.
    pub batch_size: u32,
    /// Sequence length N (prompt + output tokens).
    pub seq_len: u32,
    /// Diffusion lines.
    pub lines: Vec<DiffusionLine>,
    /// Autoregressive reference, if the bundle measured one at this shape.
    pub ar: Option<ArReference>,
}

impl LatencyChart {
    /// Selector text for this group, e.g. `B=1, N=256`.
    pub fn group_label(&self) -> String {
        format!("B={}, N={}", self.batch_size, self.seq_len)
    }

    /// Number of markers the chart draws (one per diffusion point).
    pub fn point_count(&self) -> usize {
        self.lines.iter().map(|l| l.points.len()).sum()
    }

    fn steps_range(&self) -> Option<(u32, u32)> {
        let mut it = self.lines.iter().flat_map(|l| l.points.iter().map(|p| p.steps));
        let first = it.next()?;
        Some(it.fold((first, first), |(lo, hi), k| (lo.min(k), hi.max(k))))
    }

    fn max_ms(&self) -> f64 {
        let pts = self.lines.iter().flat_map(|l| l.points.iter().map(|p| p.max_ms.max(p.median_ms)));
        pts.chain(self.ar.iter().map(|a| a.median_ms)).fold(0.0, f64::max)
    }
}

/// A marker as drawn: its data and its centre in backend pixels (device pixels on a canvas).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Marker {
    /// Index into [`LatencyChart::lines`].
    pub line: usize,
    /// Diffusion steps K.
    pub steps: u32,
    /// Median end-to-end latency, ms.
    pub median_ms: f64,
    /// Fastest repetition, ms.
    pub min_ms: f64,
    /// Slowest repetition, ms.
    pub max_ms: f64,
    /// Centre, backend x pixel.
    pub x: i32,
    /// Centre, backend y pixel.
    pub y: i32,
}

/// What [`draw_latency_vs_steps`] drew, for hit-testing (tooltips) and tests.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Drawn {
    /// One per diffusion point, in line order then K order.
    pub markers: Vec<Marker>,
}

impl Drawn {
    /// The marker nearest to backend pixel `(x, y)`, if one is within `radius` pixels.
    pub fn nearest(&self, x: i32, y: i32, radius: i32) -> Option<&Marker> {
        let d2 = |m: &Marker| i64::from(m.x - x).pow(2) + i64::from(m.y - y).pow(2);
        self.markers.iter().filter(|m| d2(m) <= i64::from(radius).pow(2)).min_by_key(|m| d2(m))
    }
}

/// Tooltip text of a marker of `chart`.
pub fn tooltip_text(chart: &LatencyChart, m: &Marker) -> String {
    let label = chart.lines.get(m.line).map_or("", |l| l.label.as_str());
    let mut s =
        format!("{label}\nK = {}: median {:.1} ms (min {:.1}, max {:.1})", m.steps, m.median_ms, m.min_ms, m.max_ms);
    if let Some(ar) = &chart.ar {
        s.push_str(&format!("\n{}: {:.1} ms", ar.label, ar.median_ms));
    }
    s
}

/// Sizes of text and marks; the browser scales them by devicePixelRatio.
#[derive(Debug, Clone, Copy)]
pub struct ChartStyle {
    /// Multiplies every font size, line width and marker size.
    pub scale: f64,
}

impl Default for ChartStyle {
    fn default() -> Self {
        Self { scale: 1.0 }
    }
}

/// What can go wrong while drawing.
#[derive(Debug)]
pub enum ChartError {
    /// The group has no diffusion points at all.
    NoPoints,
    /// A point has steps = 0 or a latency that is not finite / negative.
    BadPoint(String),
    /// The backend failed.
    Backend(String),
}

impl std::fmt::Display for ChartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoPoints => write!(f, "nothing to plot: no successful diffusion cells at this shape"),
            Self::BadPoint(p) => write!(f, "cannot plot point {p}"),
            Self::Backend(e) => write!(f, "drawing failed: {e}"),
        }
    }
}

impl std::error::Error for ChartError {}

fn backend_err<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> ChartError {
    ChartError::Backend(e.to_string())
}

/// Draws latency (ms, linear) against diffusion steps K (log2 axis) into `root`.
pub fn draw_latency_vs_steps<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    chart: &LatencyChart,
    style: ChartStyle,
) -> Result<Drawn, ChartError> {
    let (k_lo, k_hi) = chart.steps_range().ok_or(ChartError::NoPoints)?;
    for p in chart.lines.iter().flat_map(|l| &l.points) {
        let ok = p.steps > 0 && [p.median_ms, p.min_ms, p.max_ms].iter().all(|v| v.is_finite() && *v >= 0.0);
        if !ok {
            return Err(ChartError::BadPoint(format!("{p:?}")));
        }
    }
    let s = |v: f64| (v * style.scale).round().max(1.0);
    let si = |v: f64| s(v) as u32;
    let x_of = |k: u32| f64::from(k).log2();
    let (x_lo, x_hi) = (x_of(k_lo).floor() - 0.5, x_of(k_hi).ceil() + 0.5);
    let y_hi = (chart.max_ms() * 1.12).max(1.0);

    root.fill(&WHITE).map_err(backend_err)?;
    let font = |size: f64| ("sans-serif", s(size)).into_font();
    let title = format!("Latency vs diffusion steps ({})", chart.group_label());
    let mut cc = ChartBuilder::on(root)
        .caption(title, font(20.0))
        .margin(si(12.0))
        .x_label_area_size(si(48.0))
        .y_label_area_size(si(72.0))
        .build_cartesian_2d(Log2Steps(x_lo..x_hi), 0.0..y_hi)
        .map_err(backend_err)?;

    cc.configure_mesh()
        .x_desc("diffusion steps K (log2 scale)")
        .y_desc("median end-to-end latency (ms)")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style(font(13.0))
        .axis_desc_style(font(14.0))
        .light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(225, 225, 225))
        .draw()
        .map_err(backend_err)?;

    let width = si(2.0);
    if let Some(ar) = &chart.ar {
        let st = AR_COLOUR.stroke_width(width);
        cc.draw_series(DashedLineSeries::new([(x_lo, ar.median_ms), (x_hi, ar.median_ms)], s(8.0), s(5.0), st))
            .map_err(backend_err)?
            .label(ar.label.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], st));
    }
    for (i, line) in chart.lines.iter().enumerate() {
        let colour = OKABE_ITO[i % OKABE_ITO.len()];
        let st = colour.stroke_width(width);
        let pts: Vec<(f64, f64)> = line.points.iter().map(|p| (x_of(p.steps), p.median_ms)).collect();
        cc.draw_series(LineSeries::new(pts.clone(), st))
            .map_err(backend_err)?
            .label(line.label.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], st));
        // Spread over repetitions (min..max), then the median markers on top.
        // (Drawn as paths, not plotters' ErrorBar, which adds a circle of its own at the median.)
        let thin = colour.stroke_width(si(1.0));
        let cap = s(5.0) as i32;
        cc.draw_series(line.points.iter().map(|p| {
            let x = x_of(p.steps);
            EmptyElement::at((x, p.min_ms)) + PathElement::new([(-cap, 0), (cap, 0)], thin)
        }))
        .map_err(backend_err)?;
        cc.draw_series(line.points.iter().map(|p| {
            let x = x_of(p.steps);
            EmptyElement::at((x, p.max_ms)) + PathElement::new([(-cap, 0), (cap, 0)], thin)
        }))
        .map_err(backend_err)?;
        cc.draw_series(
            line.points.iter().map(|p| PathElement::new([(x_of(p.steps), p.min_ms), (x_of(p.steps), p.max_ms)], thin)),
        )
        .map_err(backend_err)?;
        cc.draw_series(pts.iter().map(|&(x, y)| Circle::new((x, y), si(4.0), colour.filled()))).map_err(backend_err)?;
    }
    cc.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(font(13.0))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .draw()
        .map_err(backend_err)?;
    root.present().map_err(backend_err)?;
    let markers = chart
        .lines
        .iter()
        .enumerate()
        .flat_map(|(line, l)| l.points.iter().map(move |p| (line, p)))
        .map(|(line, p)| {
            let (x, y) = cc.backend_coord(&(x_of(p.steps), p.median_ms));
            Marker { line, steps: p.steps, median_ms: p.median_ms, min_ms: p.min_ms, max_ms: p.max_ms, x, y }
        })
        .collect();
    Ok(Drawn { markers })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ar: bool) -> LatencyChart {
        let pt =
            |steps, median_ms: f64| StepPoint { steps, median_ms, min_ms: median_ms * 0.9, max_ms: median_ms * 1.1 };
        LatencyChart {
            batch_size: 1,
            seq_len: 256,
            lines: vec![DiffusionLine {
                label: "LLaDA-8B (low-confidence)".into(),
                points: vec![pt(8, 410.0), pt(16, 800.0), pt(32, 1590.0), pt(64, 3170.0)],
            }],
            ar: ar.then(|| ArReference { label: "Meta-Llama-3-8B (AR)".into(), median_ms: 2900.0 }),
        }
    }

    /// True if the SVG has a `<text>` element whose whole content is `t`.
    fn has_text(svg: &str, t: &str) -> bool {
        svg.contains(&format!(">\n{t}\n</text>"))
    }

    fn svg(chart: &LatencyChart) -> Result<String, ChartError> {
        svg_and_drawn(chart).map(|(s, _)| s)
    }

    fn svg_and_drawn(chart: &LatencyChart) -> Result<(String, Drawn), ChartError> {
        let mut out = String::new();
        let drawn = {
            let root = SVGBackend::with_string(&mut out, (900, 520)).into_drawing_area();
            draw_latency_vs_steps(&root, chart, ChartStyle::default())?
        };
        Ok((out, drawn))
    }

    #[test]
    fn markers_are_where_the_circles_are_and_hit_test() {
        let chart = sample(true);
        let (out, drawn) = svg_and_drawn(&chart).unwrap();
        assert_eq!(drawn.markers.len(), chart.point_count());
        for m in &drawn.markers {
            assert!(out.contains(&format!(r#"<circle cx="{}" cy="{}""#, m.x, m.y)), "no circle at {m:?}");
        }
        // Larger K further right; larger latency higher up (smaller y).
        let xs: Vec<i32> = drawn.markers.iter().map(|m| m.x).collect();
        let ys: Vec<i32> = drawn.markers.iter().map(|m| m.y).collect();
        assert!(xs.windows(2).all(|w| w[0] < w[1]) && ys.windows(2).all(|w| w[0] > w[1]), "{xs:?} {ys:?}");
        let second = &drawn.markers[1];
        assert_eq!(drawn.nearest(second.x + 3, second.y - 2, 8), Some(second));
        assert_eq!(drawn.nearest(second.x + 30, second.y, 8), None);
        let tip = tooltip_text(&chart, second);
        assert!(tip.contains("K = 16: median 800.0 ms (min 720.0, max 880.0)"), "{tip}");
        assert!(tip.contains("Meta-Llama-3-8B (AR): 2900.0 ms"), "{tip}");
    }

    #[test]
    fn one_marker_per_point_and_labelled_axes() {
        let chart = sample(true);
        let out = svg(&chart).unwrap();
        assert_eq!(out.matches("<circle").count(), chart.point_count(), "{out}");
        for text in ["median end-to-end latency (ms)", "diffusion steps K", "LLaDA-8B (low-confidence)", "B=1, N=256"] {
            assert!(out.contains(text), "missing {text:?}");
        }
        for k in ["8", "16", "32", "64"] {
            assert!(has_text(&out, k), "missing x tick {k}");
        }
    }

    #[test]
    fn ar_reference_line_is_drawn_only_when_measured() {
        let with = svg(&sample(true)).unwrap();
        let without = svg(&sample(false)).unwrap();
        assert!(with.contains("Meta-Llama-3-8B (AR)"));
        assert!(with.contains(r##"stroke="#000000""##), "no black AR line");
        assert!(!without.contains("Meta-Llama-3-8B (AR)"));
        // The dashed line is many short segments in the AR colour.
        let ar_segments = |s: &str| s.matches(r##"stroke="#000000""##).count();
        assert!(ar_segments(&with) > ar_segments(&without) + 10);
        assert!(with.contains(r##"#0072B2"##), "LLaDA line not in Okabe-Ito blue");
    }

    #[test]
    fn empty_and_bad_data_are_errors_not_panics() {
        let mut c = sample(true);
        c.lines[0].points.clear();
        assert!(matches!(svg(&c), Err(ChartError::NoPoints)));
        let mut c = sample(true);
        c.lines[0].points[1].median_ms = f64::NAN;
        assert!(matches!(svg(&c), Err(ChartError::BadPoint(_))));
        let mut c = sample(true);
        c.lines[0].points[0].steps = 0;
        assert!(matches!(svg(&c), Err(ChartError::BadPoint(_))));
    }

    #[test]
    fn single_step_value_still_has_an_axis() {
        let mut c = sample(false);
        c.lines[0].points.truncate(1);
        let out = svg(&c).unwrap();
        assert_eq!(out.matches("<circle").count(), 1);
        assert!(has_text(&out, "8"));
    }
}
