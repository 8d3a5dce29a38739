//! Every chart of the explorer, drawn with plotters on any `DrawingBackend` from a [`Figure`].
//!
//! A [`Figure`] is plain data: axes, series of marks (points, lines, bars with error bars), reference
//! lines, or heatmap panels. The numbers in it come ready-made from `metrics::derive` (through
//! `crate::views`); this module only places them, and reports where each mark landed ([`Drawn`]) for
//! tooltips, clicks and tests. No wasm dependency: the browser draws on a canvas, the tests into SVG.

use std::ops::Range;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ReversibleRanged, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::Serialize;

/// Okabe-Ito colour-blind-safe palette, without its black and yellow (too light on white).
pub const OKABE_ITO: [RGBColor; 6] = [
    RGBColor(0x00, 0x72, 0xB2), // blue
    RGBColor(0xE6, 0x9F, 0x00), // orange
    RGBColor(0x00, 0x9E, 0x73), // bluish green
    RGBColor(0xCC, 0x79, 0xA7), // reddish purple
    RGBColor(0x56, 0xB4, 0xE9), // sky blue
    RGBColor(0xD5, 0x5E, 0x00), // vermillion
];

/// An x/y panel's margin and the width of its y labels' area, CSS pixels (what the legend's room is reckoned from).
const PANEL_MARGIN: f64 = 12.0;
const Y_LABEL_AREA: f64 = 78.0;
/// The legend box's distance from the plot's edges, CSS pixels.
const LEGEND_MARGIN: f64 = 10.0;

/// Colour index of the autoregressive model (Okabe-Ito black).
pub const AR: usize = usize::MAX;
/// Colour index of the Pareto frontier (grey).
pub const FRONTIER: usize = usize::MAX - 1;

/// The colour of a series' colour index.
pub fn colour(i: usize) -> RGBColor {
    match i {
        AR => RGBColor(0, 0, 0),
        FRONTIER => RGBColor(0x99, 0x99, 0x99),
        // Past the palette, its colours again darker (60%, then 36% from the thirteenth series on), so that a
        // seventh series is not the first one's colour (from the nineteenth on, colours repeat).
        i => {
            let RGBColor(r, g, b) = OKABE_ITO[i % OKABE_ITO.len()];
            let f = [1.0, 0.6, 0.36][(i / OKABE_ITO.len()).min(2)];
            let d = |c: u8| (f64::from(c) * f).round() as u8;
            RGBColor(d(r), d(g), d(b))
        }
    }
}

/// An axis: linear, logarithmic, or categorical (`categories` non-empty: values 0..n are their indices).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Axis {
    /// Title, with the unit.
    pub label: String,
    /// Logarithmic scale (non-positive values are not drawn).
    pub log: bool,
    /// Ticks at powers of two (diffusion steps), on a log axis.
    pub pow2: bool,
    /// Category names, for a categorical axis.
    pub categories: Vec<String>,
}

impl Axis {
    /// A linear or log axis.
    pub fn numeric(label: impl Into<String>, log: bool) -> Self {
        Self { label: label.into(), log, ..Self::default() }
    }

    /// A categorical axis.
    pub fn categorical(label: impl Into<String>, categories: Vec<String>) -> Self {
        Self { label: label.into(), categories, ..Self::default() }
    }
}

/// Which cell of which loaded bundle a mark shows (bundle 0 is the main one, 1 the compared one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CellId {
    /// 0: main bundle, 1: compared bundle.
    pub bundle: usize,
    /// Index into the bundle's cells.
    pub cell: usize,
}

/// One mark: a point, a line vertex or a bar, with an optional spread (error bar).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mark {
    /// x value (a category index on a categorical axis, plus the bar's offset).
    pub x: f64,
    /// y value.
    pub y: f64,
    /// Lower end of the spread (min over repetitions).
    pub lo: Option<f64>,
    /// Upper end of the spread (max over repetitions).
    pub hi: Option<f64>,
    /// Tooltip text: exact values and the cell's key.
    pub tip: String,
    /// The cell it shows.
    pub cell: Option<CellId>,
    /// A short text drawn beside the point (e.g. `K=64` on a diffusion point whose x is not K).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Style {
    /// Markers only.
    Points,
    /// Markers joined by a line, in the given order.
    Line,
    /// Bars of `width` x units centred on x, from the axis floor.
    Bars {
        /// Width in x units.
        width: f64,
    },
    /// A thick grey band through the marks (the Pareto frontier); not hoverable.
    Frontier,
}

/// A series of marks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// Colour index ([`colour`]).
    pub colour: usize,
    /// How it is drawn.
    pub style: Style,
    /// The compared bundle's series: dashed lines, triangle markers, hatched-looking lighter bars.
    pub alt: bool,
    /// The marks.
    pub marks: Vec<Mark>,
    /// The facet it is drawn in (small multiples, [`Grid`]); 0 in a single chart.
    #[serde(skip_serializing_if = "is_zero")]
    pub facet: usize,
}

fn is_zero(v: &usize) -> bool {
    *v == 0
}

/// Small multiples: the facets of an x/y figure, drawn as a grid of small charts sharing both axes' ranges, their
/// series and reference lines placed by their `facet`, one legend beside them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Grid {
    /// Each facet's title (e.g. `N = 512, B = 4`), row by row.
    pub titles: Vec<String>,
    /// Facets per row.
    pub cols: usize,
}

/// A horizontal reference line (the AR model's value) or a vertical marker (S_parity).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RefLine {
    /// Legend text.
    pub label: String,
    /// The value, on the y axis (horizontal) or the x axis (vertical).
    pub value: f64,
    /// Vertical line at x = value.
    pub vertical: bool,
    /// Colour index.
    pub colour: usize,
    /// Dashed for the compared bundle.
    pub alt: bool,
    /// The facet it is drawn in (small multiples); 0 in a single chart.
    #[serde(skip_serializing_if = "is_zero")]
    pub facet: usize,
}

/// One cell of a heatmap.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeatCell {
    /// Row (y category index).
    pub row: usize,
    /// Column (x category index).
    pub col: usize,
    /// The value that sets the colour; `None`: not measured (grey).
    pub value: Option<f64>,
    /// Text written in the cell (e.g. `12.3 GB`, `OOM`).
    pub text: String,
    /// Ran out of memory: drawn dark with `OOM`.
    pub oom: bool,
    /// Tooltip text.
    pub tip: String,
    /// The first cell merged here.
    pub cell: Option<CellId>,
}

/// One heatmap panel (e.g. one model).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Panel {
    /// Panel title.
    pub title: String,
    /// Its cells.
    pub cells: Vec<HeatCell>,
}

/// What a figure plots.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Plot {
    /// Points, lines and bars on x/y axes.
    Xy {
        /// x axis.
        x: Axis,
        /// y axis.
        y: Axis,
        /// Series, drawn in order.
        series: Vec<Series>,
        /// Reference lines.
        refs: Vec<RefLine>,
        /// Small multiples; `None`: one chart.
        #[serde(skip_serializing_if = "Option::is_none")]
        grid: Option<Grid>,
    },
    /// Heatmap panels sharing categorical axes and one colour scale.
    Heat {
        /// Columns.
        x: Axis,
        /// Rows.
        y: Axis,
        /// Panels, side by side.
        panels: Vec<Panel>,
        /// Unit of the cells' values (the colour bar's label).
        unit: String,
        /// A diverging scale of log2 ratios centred on this value (red below, blue above, white at it), symmetric
        /// about it, its bar labelled with the ratios; `None`: the sequential scale from the smallest to the
        /// largest value.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        center: Option<f64>,
    },
    /// Two figures on one canvas (the answer's verdict and the Pareto frontier): side by side on a canvas at least
    /// [`PAIR_SIDE_BY_SIDE`] pixels wide (at scale 1), else the first above the second. The second's hits number
    /// their series after the first's.
    Pair {
        /// Left, or top.
        first: Box<Figure>,
        /// Right, or bottom.
        second: Box<Figure>,
    },
}

/// The narrowest canvas (CSS pixels) that draws a [`Plot::Pair`] side by side.
pub const PAIR_SIDE_BY_SIDE: u32 = 900;

/// A chart: a title and what it plots. Serialized on the canvas (`data-figure`) so tests read the numbers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figure {
    /// Caption.
    pub title: String,
    /// Content.
    pub plot: Plot,
}

impl Figure {
    /// Says in every title drawn (both halves of a pair) that the numbers come from synthetic weights: an exported
    /// chart carries it with it.
    pub fn label_synthetic(&mut self) {
        self.title.push_str(" [SYNTHETIC weights]");
        if let Plot::Pair { first, second } = &mut self.plot {
            first.label_synthetic();
            second.label_synthetic();
        }
    }

    /// Number of hoverable marks (points, bars, heat cells).
    pub fn mark_count(&self) -> usize {
        match &self.plot {
            Plot::Xy { series, .. } => {
                series.iter().filter(|s| s.style != Style::Frontier).map(|s| s.marks.len()).sum()
            }
            Plot::Heat { panels, .. } => panels.iter().map(|p| p.cells.len()).sum(),
            Plot::Pair { first, second } => first.mark_count() + second.mark_count(),
        }
    }

    /// The number of series (heat map panels) hits are numbered by.
    fn series_count(&self) -> usize {
        match &self.plot {
            Plot::Xy { series, .. } => series.len(),
            Plot::Heat { panels, .. } => panels.len(),
            Plot::Pair { first, second } => first.series_count() + second.series_count(),
        }
    }

    /// The height of the figure drawn `width` wide: 56% of it, or for small multiples a row of facets (each as
    /// tall as 70% of its width) per row under the title.
    pub fn height(&self, width: u32) -> u32 {
        let single = width * 56 / 100;
        match &self.plot {
            Plot::Xy { grid: Some(g), .. } => {
                let cols = g.cols.clamp(1, g.titles.len().max(1));
                let rows = g.titles.len().div_ceil(cols) as u32;
                let facet_w = (width - width / 5) / cols as u32;
                (40 + rows * facet_w * 70 / 100).max(single)
            }
            Plot::Pair { first, second } if width < PAIR_SIDE_BY_SIDE => first.height(width) + second.height(width),
            _ => single,
        }
    }

    /// Tooltip and cell of a hit.
    pub fn hit_info(&self, h: &Hit) -> Option<(&str, Option<CellId>)> {
        match &self.plot {
            Plot::Xy { series, .. } => series.get(h.series)?.marks.get(h.mark).map(|m| (m.tip.as_str(), m.cell)),
            Plot::Heat { panels, .. } => panels.get(h.series)?.cells.get(h.mark).map(|c| (c.tip.as_str(), c.cell)),
            Plot::Pair { first, second } => match h.series.checked_sub(first.series_count()) {
                None => first.hit_info(h),
                Some(series) => second.hit_info(&Hit { series, ..*h }),
            },
        }
    }
}

/// Where a mark landed, in backend pixels (device pixels on a canvas).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Hit {
    /// Series (or heatmap panel) index.
    pub series: usize,
    /// Mark (or heat cell) index.
    pub mark: usize,
    /// Centre x.
    pub x: i32,
    /// Centre y.
    pub y: i32,
    /// Hit box, left.
    pub x0: i32,
    /// Hit box, top.
    pub y0: i32,
    /// Hit box, right.
    pub x1: i32,
    /// Hit box, bottom.
    pub y1: i32,
}

/// What [`draw`] drew, for hit-testing and tests.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Drawn {
    /// One per hoverable mark.
    pub hits: Vec<Hit>,
}

impl Drawn {
    /// The mark under backend pixel `(x, y)`: inside its box, or the nearest centre within `radius`.
    pub fn at(&self, x: i32, y: i32, radius: i32) -> Option<&Hit> {
        let d2 = |h: &Hit| i64::from(h.x - x).pow(2) + i64::from(h.y - y).pow(2);
        let inside = |h: &&Hit| h.x0 <= x && x <= h.x1 && h.y0 <= y && y <= h.y1;
        let near = |h: &&Hit| d2(h) <= i64::from(radius).pow(2);
        self.hits
            .iter()
            .filter(near)
            .min_by_key(|h| d2(h))
            .or_else(|| self.hits.iter().filter(inside).min_by_key(|h| d2(h)))
    }
}

/// Sizes of text and marks; the browser scales them by devicePixelRatio.
#[derive(Debug, Clone, Copy)]
pub struct ChartStyle {
    /// Multiplies every font size, line width and marker size.
    pub scale: f64,
    /// Multiplies the backend's estimate of a text's width where the drawing makes room for it (legend boxes,
    /// titles): 1 where the backend measures the text (a canvas); more for SVG, whose backend guesses widths
    /// about a quarter narrower than a sans-serif font draws them.
    pub text_width: f64,
}

impl Default for ChartStyle {
    fn default() -> Self {
        Self { scale: 1.0, text_width: 1.0 }
    }
}

/// The width and height `text` takes in `area` in `font` (one line), as [`ChartStyle::text_width`] corrects the
/// backend's estimate. (In a browser the estimate is a measured element, which wraps a text wider than the window:
/// its lines are counted back into the width.)
fn text_width<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    font: &TextStyle<'_>,
    style: ChartStyle,
) -> Result<(f64, u32), ChartError> {
    let (w, h) = area.estimate_text_size(text, font).map_err(backend_err)?;
    let line = font.font.get_size() * 1.2;
    let lines = (f64::from(h) / line).round().max(1.0);
    Ok((f64::from(w) * lines * style.text_width, (f64::from(h) / lines).round() as u32))
}

/// What can go wrong while drawing.
#[derive(Debug)]
pub enum ChartError {
    /// Nothing to draw; the message says why (shown in the page).
    Empty(String),
    /// The backend failed.
    Backend(String),
}

impl std::fmt::Display for ChartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Empty(why) => write!(f, "nothing to plot: {why}"),
            Self::Backend(e) => write!(f, "drawing failed: {e}"),
        }
    }
}

impl std::error::Error for ChartError {}

fn backend_err<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> ChartError {
    ChartError::Backend(e.to_string())
}

/// A numeric range in drawing space (log10 of the value on a log axis) with explicit ticks.
#[derive(Debug, Clone)]
struct Scaled {
    range: Range<f64>,
    ticks: Vec<f64>,
}

impl Ranged for Scaled {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = self.range.end - self.range.start;
        let t = if span > 0.0 { (value - self.range.start) / span } else { 0.5 };
        limit.0 + (t * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        let max = hint.max_num_points().max(1);
        let stride = self.ticks.len().div_ceil(max).max(1);
        self.ticks.iter().copied().step_by(stride).collect()
    }

    fn range(&self) -> Range<f64> {
        self.range.clone()
    }
}

impl ReversibleRanged for Scaled {
    fn unmap(&self, input: i32, limit: (i32, i32)) -> Option<f64> {
        if limit.0 == limit.1 {
            return None;
        }
        let t = f64::from(input - limit.0) / f64::from(limit.1 - limit.0);
        Some(self.range.start + t * (self.range.end - self.range.start))
    }
}

impl ValueFormatter<f64> for Scaled {
    fn format(value: &f64) -> String {
        fmt_num(*value)
    }
}

/// A number as an axis label: no trailing zeros, exponent form for very large or small values.
pub fn fmt_num(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let a = v.abs();
    if !(1e-3..1e6).contains(&a) {
        return format!("{v:.0e}");
    }
    let s = if a >= 100.0 { format!("{v:.0}") } else { format!("{v:.3}") };
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s }
}

/// A value in drawing space: log10 on a log axis; `None` when it cannot be drawn there.
fn to_space(axis: &Axis, v: f64) -> Option<f64> {
    if !v.is_finite() {
        return None;
    }
    if axis.log { (v > 0.0).then(|| v.log10()) } else { Some(v) }
}

/// "Nice" linear ticks (1, 2, 5 x 10^k steps) covering `lo..hi`.
fn nice_ticks(lo: f64, hi: f64, want: usize) -> Vec<f64> {
    let span = (hi - lo).max(f64::MIN_POSITIVE);
    let raw = span / want.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

/// Drawing-space range and ticks of an axis over drawing-space values `vals`.
fn scaled(axis: &Axis, vals: &[f64], from_zero: bool) -> Scaled {
    if !axis.categories.is_empty() {
        let n = axis.categories.len();
        return Scaled { range: -0.5..n as f64 - 0.5, ticks: (0..n).map(|i| i as f64).collect() };
    }
    let (mut lo, mut hi) = vals.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(*v), b.max(*v)));
    if !lo.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    if from_zero && !axis.log {
        lo = lo.min(0.0);
    }
    let pad = if hi > lo {
        (hi - lo) * 0.08
    } else if axis.log {
        0.5
    } else {
        hi.abs().max(1.0) * 0.1
    };
    let (lo, hi) = (if from_zero && !axis.log && lo >= 0.0 { 0.0 } else { lo - pad }, hi + pad);
    let ticks = if axis.log {
        let (a, b) = (lo.ceil() as i32, hi.floor() as i32);
        let mut t: Vec<f64> = Vec::new();
        if axis.pow2 {
            let (p, q) = ((lo / 2f64.log10()).ceil() as i32, (hi / 2f64.log10()).floor() as i32);
            t.extend((p..=q).map(|e| f64::from(e) * 2f64.log10()));
        } else if b - a >= 2 {
            t.extend((a..=b).map(f64::from));
        } else {
            for d in (a - 1)..=b {
                for m in [1.0f64, 2.0, 5.0] {
                    let v = f64::from(d) + m.log10();
                    if v >= lo && v <= hi {
                        t.push(v);
                    }
                }
            }
        }
        t
    } else {
        nice_ticks(lo, hi, 8)
    };
    Scaled { range: lo..hi, ticks }
}

/// Label of drawing-space tick `v` on `axis`.
fn tick_label(axis: &Axis, v: f64) -> String {
    if !axis.categories.is_empty() {
        let i = v.round();
        return if i >= 0.0 { axis.categories.get(i as usize).cloned().unwrap_or_default() } else { String::new() };
    }
    if axis.log {
        let x = 10f64.powf(v);
        // Snap float noise (10^log10(64) = 63.99999...).
        let r = x.round();
        return fmt_num(if (x - r).abs() < 1e-6 * x.max(1.0) { r } else { x });
    }
    fmt_num(v)
}

/// Draws `fig` into `root`.
pub fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    fig: &Figure,
    style: ChartStyle,
) -> Result<Drawn, ChartError> {
    root.fill(&WHITE).map_err(backend_err)?;
    let drawn = draw_plot(root, fig, style)?;
    root.present().map_err(backend_err)?;
    Ok(drawn)
}

fn draw_plot<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    fig: &Figure,
    style: ChartStyle,
) -> Result<Drawn, ChartError> {
    Ok(match &fig.plot {
        Plot::Xy { x, y, series, refs, grid } => draw_xy(root, &fig.title, (x, y), series, refs, grid.as_ref(), style)?,
        Plot::Heat { x, y, panels, unit, center } => draw_heat(root, &fig.title, x, y, panels, (unit, *center), style)?,
        Plot::Pair { first, second } => {
            let (w, h) = root.dim_in_pixel();
            let css_w = (f64::from(w) / style.scale) as u32;
            let (a, b) = match css_w >= PAIR_SIDE_BY_SIDE {
                true => root.split_horizontally(w * 11 / 20),
                false => root.split_vertically(h * first.height(css_w) / fig.height(css_w).max(1)),
            };
            let mut drawn = draw_plot(&a, first, style)?;
            let offset = first.series_count();
            let more = draw_plot(&b, second, style)?;
            drawn.hits.extend(more.hits.into_iter().map(|h| Hit { series: h.series + offset, ..h }));
            drawn
        }
    })
}

/// What every chart of an x/y figure shares: its axes, their ranges (over every facet's marks), its series and
/// reference lines, the style.
struct Xy<'a> {
    axes: (&'a Axis, &'a Axis),
    ranges: (Scaled, Scaled),
    series: &'a [Series],
    refs: &'a [RefLine],
    style: ChartStyle,
}

fn draw_xy<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    (xa, ya): (&Axis, &Axis),
    series: &[Series],
    refs: &[RefLine],
    grid: Option<&Grid>,
    style: ChartStyle,
) -> Result<Drawn, ChartError> {
    let marks = || series.iter().flat_map(|s| s.marks.iter());
    if marks().next().is_none() {
        return Err(ChartError::Empty(
            "no successful cell this view draws matches the filters (out-of-memory and failed cells are in the Run \
             details table)"
                .into(),
        ));
    }
    let s = |v: f64| (v * style.scale).round().max(1.0);
    let has_bars = series.iter().any(|x| matches!(x.style, Style::Bars { .. }));
    let xs: Vec<f64> = marks()
        .filter_map(|m| to_space(xa, m.x))
        .chain(refs.iter().filter(|r| r.vertical).filter_map(|r| to_space(xa, r.value)))
        .collect();
    let ys: Vec<f64> = marks()
        .flat_map(|m| [Some(m.y), m.lo, m.hi])
        .flatten()
        .chain(refs.iter().filter(|r| !r.vertical).map(|r| r.value))
        .filter_map(|v| to_space(ya, v))
        .collect();
    if xs.is_empty() || ys.is_empty() {
        return Err(ChartError::Empty("no value can be drawn on a log axis (all are zero or negative)".into()));
    }
    let (x_range, mut y_range) = (scaled(xa, &xs, false), scaled(ya, &ys, has_bars));
    let font = |size: f64| (FontFamily::SansSerif, s(size)).into_font();
    let (mut legend, mut hits) = (Vec::new(), Vec::new());
    let Some(g) = grid else {
        // The legend goes in the upper corner with fewer marks under it; where marks would still fall under it, the
        // y axis reaches higher until they are below it.
        let (x, y) = (&x_range.range, &y_range.range);
        let (mid_x, mid_y) = ((x.start + x.end) / 2.0, (y.start + y.end) / 2.0);
        let pt = |m: &Mark| Some((to_space(xa, m.x)?, to_space(ya, m.y)?));
        let upper = |left: bool| marks().filter_map(pt).filter(|p| p.1 > mid_y && (p.0 < mid_x) == left).count();
        let right = upper(true) > upper(false);
        let labels: Vec<&str> =
            refs.iter().map(|r| r.label.as_str()).chain(series.iter().map(|x| x.label.as_str())).collect();
        let (box_w, box_h) = legend_size(root, &labels, &font(12.0), style)?;
        // The plotting area, as xy_panel lays it out (margins, y labels; title and x labels about 110 px), in
        // pixels.
        let (w, h) = root.dim_in_pixel();
        let (plot_w, plot_h) = (f64::from(w) - s(Y_LABEL_AREA + 2.0 * PANEL_MARGIN), f64::from(h) - s(110.0));
        let m = s(LEGEND_MARGIN);
        let (fx0, fx1) = match right {
            true => (1.0 - (m + f64::from(box_w)) / plot_w, 1.0 - m / plot_w),
            false => (m / plot_w, (m + f64::from(box_w)) / plot_w),
        };
        let f = (m + f64::from(box_h)) / plot_h;
        let frac = |v: f64| (v - x.start) / (x.end - x.start);
        // The highest value of a mark (its error bar's top, a bar's whole width) inside the legend's columns.
        let under = series.iter().flat_map(|se| {
            let half = match se.style {
                Style::Bars { width } => width / 2.0,
                _ => 0.0,
            };
            se.marks.iter().filter_map(move |m| {
                let (a, b) = (to_space(xa, m.x - half)?, to_space(xa, m.x + half)?);
                let top = to_space(ya, m.hi.unwrap_or(m.y).max(m.y))?;
                (frac(b) >= fx0 && frac(a) <= fx1).then_some(top)
            })
        });
        let top = under.fold(f64::NEG_INFINITY, f64::max);
        if (0.0..0.6).contains(&f) && top > y.end - f * (y.end - y.start) {
            let base = y.start;
            let more: Vec<f64> =
                ys.iter().copied().chain([base + (top - base) / (1.0 - f) + 0.02 * (top - base)]).collect();
            y_range = scaled(ya, &more, has_bars);
        }
        let xy = Xy { axes: (xa, ya), ranges: (x_range, y_range), series, refs, style };
        let cc = xy_panel(root, title, &xy, 0, None, &mut legend, &mut hits)?;
        draw_legend(&cc.plotting_area().strip_coord_spec(), &legend, right, &font(12.0), style)?;
        return Ok(Drawn { hits });
    };
    let xy = Xy { axes: (xa, ya), ranges: (x_range, y_range), series, refs, style };
    // Small multiples: the facets in rows under the title, one legend (each label once) in a strip on the right.
    let root = root.titled(title, title_font(root, title, 18.0, style)).map_err(backend_err)?;
    let text = TextStyle::from(font(12.0));
    let mut legend_w = 0;
    for label in refs.iter().map(|r| &r.label).chain(series.iter().map(|s| &s.label)) {
        legend_w = legend_w.max(text_width(&root, label, &text, style)?.0 as u32);
    }
    let w = root.dim_in_pixel().0;
    let (charts, side) = root.split_horizontally(w - (legend_w + s(56.0) as u32).clamp(w / 5, w / 2));
    let cols = g.cols.clamp(1, g.titles.len().max(1));
    let rows = g.titles.len().div_ceil(cols);
    let areas = charts.split_evenly((rows, cols));
    for (k, (t, area)) in g.titles.iter().zip(&areas).enumerate() {
        xy_panel(area, t, &xy, k, Some((k / cols + 1 == rows, k % cols == 0)), &mut legend, &mut hits)?;
    }
    let mut once: Vec<(&str, Key)> = Vec::new();
    for row in legend {
        if !once.iter().any(|r| r.0 == row.0) {
            once.push(row);
        }
    }
    draw_legend(&side, &once, false, &font(12.0), style)?;
    Ok(Drawn { hits })
}

/// One chart of an x/y figure: its axes and mesh, then the reference lines and series of facet `facet` with
/// their error bars, point labels and markers; their legend rows and hits are appended. `small`: a facet of small
/// multiples, with (x, y) axis titles only where given (the bottom row, the left column). Returns the chart.
fn xy_panel<'a, 'b, DB: DrawingBackend>(
    area: &'b DrawingArea<DB, Shift>,
    caption: &str,
    xy: &Xy<'a>,
    facet: usize,
    small: Option<(bool, bool)>,
    legend: &mut Vec<(&'a str, Key)>,
    hits: &mut Vec<Hit>,
) -> Result<ChartContext<'b, DB, Cartesian2d<Scaled, Scaled>>, ChartError> {
    let ((xa, ya), (xr, yr)) = (xy.axes, xy.ranges.clone());
    let s = |v: f64| (v * xy.style.scale).round().max(1.0);
    let si = |v: f64| s(v) as u32;
    let (x_lo, x_hi, y_floor) = (xr.range.start, xr.range.end, yr.range.start);
    let font = |size: f64| (FontFamily::SansSerif, s(size)).into_font();
    let mut cc = ChartBuilder::on(area)
        .caption(caption, title_font(area, caption, if small.is_some() { 14.0 } else { 18.0 }, xy.style))
        .margin(si(PANEL_MARGIN))
        .x_label_area_size(si(if xa.categories.is_empty() { 48.0 } else { 56.0 }))
        .y_label_area_size(si(Y_LABEL_AREA))
        .build_cartesian_2d(xr, yr)
        .map_err(backend_err)?;
    let xfmt = |v: &f64| tick_label(xa, *v);
    let yfmt = |v: &f64| tick_label(ya, *v);
    let desc = |a: &Axis, shown: bool| match (shown, a.log) {
        (false, _) => String::new(),
        (true, true) => format!("{} (log scale)", a.label),
        (true, false) => a.label.clone(),
    };
    let (show_x, show_y) = small.unwrap_or((true, true));
    let labels = if small.is_some() { 5 } else { 10 };
    cc.configure_mesh()
        .x_desc(desc(xa, show_x))
        .y_desc(desc(ya, show_y))
        .x_labels(labels)
        .y_labels(labels)
        .x_label_formatter(&xfmt)
        .y_label_formatter(&yfmt)
        .label_style(font(13.0))
        .axis_desc_style(font(14.0))
        .light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(228, 228, 228))
        .draw()
        .map_err(backend_err)?;

    let width = si(2.0);
    let pt = |m: &Mark| Some((to_space(xa, m.x)?, to_space(ya, m.y)?));
    for r in xy.refs.iter().filter(|r| r.facet == facet) {
        let st = colour(r.colour).stroke_width(width);
        let Some(v) = to_space(if r.vertical { xa } else { ya }, r.value) else { continue };
        let line = if r.vertical { [(v, cc.y_range().start), (v, cc.y_range().end)] } else { [(x_lo, v), (x_hi, v)] };
        let (dash, gap) = if r.alt { (s(3.0), s(4.0)) } else { (s(8.0), s(5.0)) };
        cc.draw_series(DashedLineSeries::new(line, dash, gap, st)).map_err(backend_err)?;
        legend.push((&r.label, Key::Line { style: st, dash: Some((dash, gap)), marker: None }));
    }
    for (index, se) in xy.series.iter().enumerate().filter(|(_, s)| s.facet == facet) {
        let c = colour(se.colour);
        let st = c.stroke_width(width);
        let pts: Vec<(f64, f64)> = se.marks.iter().filter_map(pt).collect();
        match se.style {
            Style::Frontier => {
                let band = c.mix(0.45).stroke_width(si(9.0));
                cc.draw_series(LineSeries::new(pts, band)).map_err(backend_err)?;
                legend.push((&se.label, Key::Line { style: band, dash: None, marker: None }));
                continue;
            }
            Style::Line if se.alt => {
                cc.draw_series(DashedLineSeries::new(pts.clone(), s(6.0), s(4.0), st)).map_err(backend_err)?;
                legend.push((&se.label, Key::Line { style: st, dash: Some((s(6.0), s(4.0))), marker: Some(true) }));
            }
            Style::Line => {
                cc.draw_series(LineSeries::new(pts.clone(), st)).map_err(backend_err)?;
                legend.push((&se.label, Key::Line { style: st, dash: None, marker: Some(false) }));
            }
            Style::Bars { width: w } => {
                let fill = if se.alt { c.mix(0.55).filled() } else { c.filled() };
                cc.draw_series(se.marks.iter().filter_map(|m| {
                    let (Some(y), Some(_)) = (to_space(ya, m.y), to_space(xa, m.x)) else { return None };
                    Some(Rectangle::new([(m.x - w / 2.0, y_floor), (m.x + w / 2.0, y)], fill))
                }))
                .map_err(backend_err)?;
                legend.push((&se.label, Key::Bar(fill)));
            }
            Style::Points => legend.push((&se.label, Key::Point(c.filled(), se.alt))),
        }
        // Spread over repetitions (min..max) as error bars.
        let thin = RGBColor(0x33, 0x33, 0x33).stroke_width(si(1.0));
        let cap = s(4.0) as i32;
        for m in &se.marks {
            let (Some(x), Some(lo), Some(hi)) =
                (to_space(xa, m.x), m.lo.and_then(|v| to_space(ya, v)), m.hi.and_then(|v| to_space(ya, v)))
            else {
                continue;
            };
            cc.draw_series([PathElement::new([(x, lo), (x, hi)], thin)]).map_err(backend_err)?;
            cc.draw_series([lo, hi].map(|v| EmptyElement::at((x, v)) + PathElement::new([(-cap, 0), (cap, 0)], thin)))
                .map_err(backend_err)?;
        }
        if !matches!(se.style, Style::Bars { .. }) {
            // Point labels (K of a diffusion point), up and to the right of the marker, in the series' colour.
            let text = font(11.0).color(&c);
            let off = (si(6.0) as i32, -(si(16.0) as i32));
            cc.draw_series(se.marks.iter().filter_map(|m| {
                let (p, label) = (pt(m)?, m.label.as_ref()?);
                Some(EmptyElement::at(p) + Text::new(label.clone(), off, text.clone()))
            }))
            .map_err(backend_err)?;
            let r = si(4.5);
            if se.alt {
                cc.draw_series(pts.iter().map(|&p| EmptyElement::at(p) + triangle(r + 1, c.filled())))
                    .map_err(backend_err)?;
            } else {
                cc.draw_series(pts.iter().map(|&p| Circle::new(p, r, c.filled()))).map_err(backend_err)?;
            }
        }
        // Where each mark landed (not the frontier's, which is not hoverable).
        let r = s(7.0) as i32;
        for (mi, m) in se.marks.iter().enumerate() {
            let Some(p) = pt(m) else { continue };
            let (x, y) = cc.backend_coord(&p);
            let mut h = Hit { series: index, mark: mi, x, y, x0: x - r, y0: y - r, x1: x + r, y1: y + r };
            if let Style::Bars { width: w } = se.style {
                let (a, top) = cc.backend_coord(&(m.x - w / 2.0, p.1));
                let (b, bottom) = cc.backend_coord(&(m.x + w / 2.0, y_floor));
                h = Hit { x0: a, y0: top, x1: b, y1: bottom, ..h };
            }
            hits.push(h);
        }
    }
    Ok(cc)
}

/// A sequential colour-blind-safe scale (viridis), `t` in 0..=1.
pub fn viridis(t: f64) -> RGBColor {
    const STOPS: [(u8, u8, u8); 5] = [(68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37)];
    let t = if t.is_finite() { t.clamp(0.0, 1.0) } else { 0.0 } * (STOPS.len() - 1) as f64;
    let i = (t.floor() as usize).min(STOPS.len() - 2);
    let f = t - i as f64;
    let lerp = |a: u8, b: u8| (f64::from(a) + (f64::from(b) - f64::from(a)) * f).round() as u8;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    RGBColor(lerp(a.0, b.0), lerp(a.1, b.1), lerp(a.2, b.2))
}

/// A diverging colour-blind-safe scale, `t` in -1..=1: red (below), white (0), blue (above).
pub fn diverging(t: f64) -> RGBColor {
    let t = if t.is_finite() { t.clamp(-1.0, 1.0) } else { 0.0 };
    let end = if t < 0.0 { (178.0, 24.0, 43.0) } else { (33.0, 102.0, 172.0) };
    let lerp = |e: f64| (247.0 + (e - 247.0) * t.abs()).round() as u8;
    RGBColor(lerp(end.0), lerp(end.1), lerp(end.2))
}

/// Fill of the OOM heat cells.
pub const OOM_FILL: RGBColor = RGBColor(0x30, 0x30, 0x30);
/// Fill of heat cells without a value.
pub const NA_FILL: RGBColor = RGBColor(0xEE, 0xEE, 0xEE);

fn draw_heat<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    xa: &Axis,
    ya: &Axis,
    panels: &[Panel],
    (unit, center): (&str, Option<f64>),
    style: ChartStyle,
) -> Result<Drawn, ChartError> {
    if panels.iter().all(|p| p.cells.is_empty()) {
        return Err(ChartError::Empty("no cell matches the filters".into()));
    }
    let s = |v: f64| (v * style.scale).round().max(1.0);
    let si = |v: f64| s(v) as u32;
    let font = |size: f64| (FontFamily::SansSerif, s(size)).into_font();
    // Out-of-memory cells are drawn as such, so their values (a peak before the failure) stay out of the scale.
    let values = panels.iter().flat_map(|p| p.cells.iter().filter(|c| !c.oom).filter_map(|c| c.value));
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
    // A diverging scale spans the centre plus and minus the farthest value.
    let (lo, hi) = match center {
        Some(c) if lo <= hi => {
            let r = (lo - c).abs().max((hi - c).abs()).max(1e-9);
            (c - r, c + r)
        }
        _ => (lo, hi),
    };
    let t_of = |v: f64| if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
    let paint = |t: f64| if center.is_some() { diverging(2.0 * t - 1.0) } else { viridis(t) };
    let root = root.titled(title, title_font(root, title, 18.0, style)).map_err(backend_err)?;
    // A colour bar on the right: the scale from the smallest to the largest value, in the figure's unit.
    let (w, h) = root.dim_in_pixel();
    let (root, bar) = root.split_horizontally(w.saturating_sub(si(86.0)));
    if lo <= hi {
        let (x0, x1) = (si(14.0) as i32, si(32.0) as i32);
        let (top, bottom) = (si(40.0) as i32, h as i32 - si(60.0) as i32);
        let steps = 48;
        for i in 0..steps {
            let (a, b) = (i as f64 / steps as f64, (i + 1) as f64 / steps as f64);
            let y = |t: f64| bottom - ((bottom - top) as f64 * t).round() as i32;
            // One value everywhere: the cells' colour, not a range the figure does not have.
            let t = if hi > lo { (a + b) / 2.0 } else { 0.5 };
            bar.draw(&Rectangle::new([(x0, y(b)), (x1, y(a))], paint(t).filled())).map_err(backend_err)?;
        }
        let label = font(12.0).color(&BLACK);
        // 2^v as e^(v ln 2): `exp2` would bring its own routine into the wasm (3 KB), `exp` is there already.
        let fmt = |v: f64| {
            if center.is_some() { format!("{:.2}x", (v * std::f64::consts::LN_2).exp()) } else { format!("{v:.2}") }
        };
        bar.draw(&Text::new(fmt(hi), (x1 + si(4.0) as i32, top - si(6.0) as i32), label.clone()))
            .map_err(backend_err)?;
        bar.draw(&Text::new(fmt(lo), (x1 + si(4.0) as i32, bottom - si(6.0) as i32), label.clone()))
            .map_err(backend_err)?;
        bar.draw(&Text::new(unit.to_string(), (x0, bottom + si(10.0) as i32), label)).map_err(backend_err)?;
    }
    let areas = root.split_evenly((1, panels.len().max(1)));
    let mut hits = Vec::new();
    for (pi, (panel, area)) in panels.iter().zip(&areas).enumerate() {
        let mut cc = ChartBuilder::on(area)
            .caption(&panel.title, title_font(area, &panel.title, 14.0, style))
            .margin(si(10.0))
            .x_label_area_size(si(44.0))
            .y_label_area_size(si(56.0))
            .build_cartesian_2d(scaled(xa, &[], false), scaled(ya, &[], false))
            .map_err(backend_err)?;
        let xfmt = |v: &f64| tick_label(xa, *v);
        let yfmt = |v: &f64| tick_label(ya, *v);
        cc.configure_mesh()
            .disable_mesh()
            .x_desc(xa.label.as_str())
            .y_desc(ya.label.as_str())
            .x_label_formatter(&xfmt)
            .y_label_formatter(&yfmt)
            .label_style(font(13.0))
            .axis_desc_style(font(14.0))
            .draw()
            .map_err(backend_err)?;
        for (ci, c) in panel.cells.iter().enumerate() {
            let (x, y) = (c.col as f64, c.row as f64);
            let fill = match (c.oom, c.value) {
                (true, _) => OOM_FILL,
                (false, Some(v)) => paint(t_of(v)),
                (false, None) => NA_FILL,
            };
            cc.draw_series([Rectangle::new([(x - 0.48, y - 0.48), (x + 0.48, y + 0.48)], fill.filled())])
                .map_err(backend_err)?;
            let light = fill.0 as u32 * 299 + fill.1 as u32 * 587 + fill.2 as u32 * 114 > 128_000;
            let ink = if light { BLACK } else { WHITE };
            let (cx, cy) = cc.backend_coord(&(x, y));
            let (x0, y0) = cc.backend_coord(&(x - 0.48, y + 0.48));
            let (x1, y1) = cc.backend_coord(&(x + 0.48, y - 0.48));
            // The cell's text at 13 px, smaller (to 8 px) where the cell is narrower or lower than that, and none
            // where even 8 px does not fit (many rows, a phone): overprinted labels read as nonsense; the tooltip
            // still has the value.
            let (cell_w, cell_h) = (f64::from((x1 - x0).abs()), f64::from((y0 - y1).abs()));
            let (wide, _) = text_width(area, &c.text, &TextStyle::from(font(13.0)), style)?;
            let size = (13.0 * (cell_w * 0.92 / wide.max(1.0)).min(cell_h * 0.85 / s(13.0))).min(13.0);
            if size >= 8.0 {
                let text_style = font(size).color(&ink).pos(Pos::new(HPos::Center, VPos::Center));
                cc.draw_series([Text::new(c.text.clone(), (x, y), text_style)]).map_err(backend_err)?;
            }
            hits.push(Hit { series: pi, mark: ci, x: cx, y: cy, x0, y0, x1, y1 });
        }
    }
    Ok(Drawn { hits })
}

/// The font of a title drawn across `area`: `size` (scaled), or smaller, down to half of it, where the text would
/// not fit the area's width (a narrow canvas, half of a pair).
fn title_font<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    size: f64,
    style: ChartStyle,
) -> FontDesc<'static> {
    let font = |size: f64| (FontFamily::SansSerif, (size * style.scale).round().max(1.0)).into_font();
    let room = f64::from(area.dim_in_pixel().0) * 0.96;
    let wide = text_width(area, text, &TextStyle::from(font(size)), style).map_or(0.0, |d| d.0);
    font(if wide > room { (size * room / wide).max(size * 0.5) } else { size })
}

/// The marker of a legend row.
#[derive(Clone, Copy)]
enum Key {
    /// A line (or band) in this style, dashed (dash and gap lengths) or solid, with the series' point marker
    /// (a triangle when `true`) or none.
    Line { style: ShapeStyle, dash: Option<(f64, f64)>, marker: Option<bool> },
    /// A bar's fill.
    Bar(ShapeStyle),
    /// A point: a circle, or a triangle when `true`.
    Point(ShapeStyle, bool),
}

/// A legend's row height, width and height in pixels for its non-empty `labels` (what [`draw_legend`] draws).
fn legend_rows<'a, DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    labels: impl Iterator<Item = &'a str>,
    text: &TextStyle<'_>,
    style: ChartStyle,
) -> Result<(i32, i32, i32), ChartError> {
    let px = |v: f64| (v * style.scale).round().max(1.0) as i32;
    let (mut text_w, mut row_h, mut rows) = (0, px(14.0), 0);
    for label in labels.filter(|l| !l.is_empty()) {
        let (w, h) = text_width(area, label, text, style)?;
        text_w = text_w.max(w.ceil() as i32);
        row_h = row_h.max(h as i32 + px(4.0));
        rows += 1;
    }
    let (pad, marker, gap) = (px(6.0), px(20.0), px(6.0));
    Ok((row_h, pad * 2 + marker + gap + text_w, pad * 2 + row_h * rows))
}

/// The size in pixels of the legend of `labels` (empty ones take no row): (width, height).
fn legend_size<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    labels: &[&str],
    font: &FontDesc<'_>,
    style: ChartStyle,
) -> Result<(u32, u32), ChartError> {
    let text = TextStyle::from(font.clone()).pos(Pos::new(HPos::Left, VPos::Center));
    let (_, w, h) = legend_rows(area, labels.iter().copied(), &text, style)?;
    Ok((w.max(0) as u32, h.max(0) as u32))
}

/// The legend: a row per reference line and series (its marker, then its label) in a box in the upper left
/// corner of the plot, or the upper right when `right`. (Drawn here rather than by plotters' series labels,
/// which bring a Unicode lower-casing table into the wasm: about 10 KB gzipped.)
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    rows: &[(&str, Key)],
    right: bool,
    font: &FontDesc<'_>,
    style: ChartStyle,
) -> Result<(), ChartError> {
    let rows: Vec<_> = rows.iter().filter(|r| !r.0.is_empty()).collect();
    if rows.is_empty() {
        return Ok(());
    }
    let px = |v: f64| (v * style.scale).round().max(1.0) as i32;
    let mut text = TextStyle::from(font.clone()).pos(Pos::new(HPos::Left, VPos::Center));
    let (mut row_h, mut box_w, mut box_h) = legend_rows(area, rows.iter().map(|r| r.0), &text, style)?;
    let (pad, marker, gap, margin) = (px(6.0), px(20.0), px(6.0), px(LEGEND_MARGIN));
    // A legend wider than the plot (a long label in half of a pair, on a phone) gets a smaller font, to 60% at
    // most, rather than running past the edge.
    let room = area.dim_in_pixel().0 as i32 - 2 * margin;
    if box_w > room {
        let fixed = 2 * pad + marker + gap;
        let fit = (f64::from(room - fixed) / f64::from((box_w - fixed).max(1))).clamp(0.6, 1.0);
        text = TextStyle::from(font.resize(font.get_size() * fit)).pos(Pos::new(HPos::Left, VPos::Center));
        (row_h, box_w, box_h) = legend_rows(area, rows.iter().map(|r| r.0), &text, style)?;
    }
    // Never left of the area (plotters would pull every element there onto its edge, text over the markers).
    let x0 = if right { (area.dim_in_pixel().0 as i32 - margin - box_w).max(0) } else { margin };
    let (y0, corner) = (margin, |x: i32, y: i32| (x0 + x, margin + y));
    area.draw(&Rectangle::new([(x0, y0), corner(box_w, box_h)], WHITE.mix(0.85).filled())).map_err(backend_err)?;
    area.draw(&Rectangle::new([(x0, y0), corner(box_w, box_h)], BLACK.mix(0.4))).map_err(backend_err)?;
    for (i, (label, key)) in rows.iter().enumerate() {
        let (x, y) = corner(pad, pad + row_h * i as i32 + row_h / 2);
        let mid = (x + marker / 2, y);
        let point = |fill: ShapeStyle, tri: bool| match tri {
            true => area.draw(&(EmptyElement::at(mid) + triangle(px(5.0) as u32, fill))),
            false => area.draw(&Circle::new(mid, px(4.0), fill)),
        };
        match *key {
            Key::Line { style, dash, marker: m } => {
                let (on, off) = dash.map_or((marker, 0), |(d, g)| (d as i32, g as i32));
                let mut at = x;
                while at < x + marker {
                    area.draw(&PathElement::new([(at, y), ((at + on).min(x + marker), y)], style))
                        .map_err(backend_err)?;
                    at += on + off;
                }
                m.map_or(Ok(()), |tri| point(style.color.filled(), tri))
            }
            Key::Bar(fill) => {
                area.draw(&Rectangle::new([(x + px(3.0), y - px(5.0)), (x + px(17.0), y + px(5.0))], fill))
            }
            Key::Point(fill, tri) => point(fill, tri),
        }
        .map_err(backend_err)?;
        area.draw(&Text::new(label.to_string(), (x + marker + gap, y), text.clone())).map_err(backend_err)?;
    }
    Ok(())
}

/// An upward triangle of circumradius `r` around its anchor (as plotters' `TriangleMarker` draws it, without
/// its run-time sine and cosine, which would bring the wasm a trigonometry library).
fn triangle(r: u32, style: ShapeStyle) -> Polygon<(i32, i32)> {
    let r = f64::from(r);
    // cos 30 deg and sin 30 deg.
    let (dx, dy) = ((r * 0.866_025_403_784_438_6).ceil() as i32, (r * 0.5).ceil() as i32);
    Polygon::new(vec![(0, -(r as i32)), (dx, dy), (-dx, dy)], style)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_format_compactly() {
        assert_eq!(fmt_num(1000.0), "1000");
        assert_eq!(fmt_num(2.5), "2.5");
        assert_eq!(fmt_num(0.125), "0.125");
        assert_eq!(fmt_num(2e7), "2e7");
        assert_eq!(nice_ticks(0.0, 10.0, 5), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
    }

    #[test]
    fn log_axes_tick_at_decades_or_powers_of_two() {
        let ax = Axis { pow2: true, ..Axis::numeric("K", true) };
        let sc = scaled(&ax, &[8f64.log10(), 64f64.log10()], false);
        let labels: Vec<String> = sc.ticks.iter().map(|t| tick_label(&ax, *t)).collect();
        assert_eq!(labels, ["8", "16", "32", "64"]);
        let ax = Axis::numeric("ms", true);
        let sc = scaled(&ax, &[0.0, 4.0], false);
        let labels: Vec<String> = sc.ticks.iter().map(|t| tick_label(&ax, *t)).collect();
        assert_eq!(labels, ["1", "10", "100", "1000", "10000"]);
    }

    #[test]
    fn viridis_ends() {
        assert_eq!(viridis(0.0), RGBColor(68, 1, 84));
        assert_eq!(viridis(1.0), RGBColor(253, 231, 37));
        assert_eq!(viridis(f64::NAN), RGBColor(68, 1, 84));
    }
}
