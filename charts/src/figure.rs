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
/// A facet's margin (small multiples), CSS pixels.
const FACET_MARGIN: f64 = 6.0;
/// A facet's height besides its plot (title, margins, x tick labels), the strips of the axes' titles under and left
/// of the facets, and the width of the left column's y tick labels, CSS pixels.
const FACET_CHROME: f64 = 66.0;
const FACET_X_TITLE: f64 = 24.0;
const FACET_Y_TITLE: f64 = 24.0;
const FACET_Y_TICKS: f64 = 54.0;
/// A facet's plot height over its width.
const FACET_ASPECT: f64 = 0.7;

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

    /// The height of the figure drawn `width` wide on a screen ([`Figure::height_for`] with the default style).
    pub fn height(&self, width: u32) -> u32 {
        self.height_for(width, ChartStyle::default())
    }

    /// The height of the figure drawn `width` wide (CSS pixels, as `style` draws it: its scale aside): 56% of it,
    /// more where a narrow chart needs it for its title, its plot (half as tall as wide) and a legend that goes
    /// under it; for small multiples the title, a row of facets (each plot 70% as tall as wide) per row and the
    /// legend under them. The texts' widths are estimated here (0.58 em a character), so the drawing, which
    /// measures them, may give the plots a little more or less.
    pub fn height_for(&self, width: u32, style: ChartStyle) -> u32 {
        let single = width * 56 / 100;
        let w = f64::from(width);
        match &self.plot {
            Plot::Xy { grid: Some(g), series, refs, .. } => {
                let cols = g.cols.clamp(1, g.titles.len().max(1));
                let rows = g.titles.len().div_ceil(cols) as f64;
                let plot_w = ((w - Y_LABEL_AREA) / cols as f64 - 2.0 * FACET_MARGIN).max(40.0);
                let facets = rows * (plot_w * FACET_ASPECT + FACET_CHROME) + FACET_X_TITLE;
                let legend = legend_estimate(&legend_labels(refs, series), w, style).1;
                ((title_estimate(&self.title, w, style) + facets + legend).round() as u32).max(single)
            }
            Plot::Xy { series, refs, .. } => {
                let plot_w = w - Y_LABEL_AREA - 2.0 * PANEL_MARGIN;
                let (box_w, strip) = legend_estimate(&legend_labels(refs, series), w, style);
                let strip = if box_w > plot_w - 2.0 * LEGEND_MARGIN { strip } else { 0.0 };
                let need = title_estimate(&self.title, w, style) + 2.0 * PANEL_MARGIN + 48.0 + plot_w * 0.5 + strip;
                (need.round() as u32).max(single)
            }
            Plot::Pair { first, second } if width < PAIR_SIDE_BY_SIDE => {
                first.height_for(width, style) + second.height_for(width, style)
            }
            // Heat map panels in rows where they do not fit side by side, each about 3:4.
            Plot::Heat { panels, .. } => {
                let cols = heat_columns(panels.len(), w);
                let rows = panels.len().div_ceil(cols) as f64;
                let panel = ((w - HEAT_BAR) / cols as f64 * 0.75).max(120.0);
                ((title_estimate(&self.title, w, style) + rows * panel).round() as u32).max(single)
            }
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

/// Where a text landed, in backend pixels: its box (a point label; a legend's whole box).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextBox {
    /// The text (a legend's: its rows' labels, one a line).
    pub text: String,
    /// Left, top, right, bottom.
    pub rect: [i32; 4],
}

impl TextBox {
    /// Whether the two boxes share pixels (touching edges do not count).
    pub fn overlaps(&self, o: &TextBox) -> bool {
        overlap(self.rect, o.rect)
    }
}

fn overlap(a: [i32; 4], b: [i32; 4]) -> bool {
    a[0] < b[2] && b[0] < a[2] && a[1] < b[3] && b[1] < a[3]
}

/// What [`draw`] drew, for hit-testing and tests.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Drawn {
    /// One per hoverable mark.
    pub hits: Vec<Hit>,
    /// The point labels drawn (a label that found no free place beside its point is not drawn).
    #[serde(skip)]
    pub labels: Vec<TextBox>,
    /// The legends drawn.
    #[serde(skip)]
    pub legends: Vec<TextBox>,
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
    /// The smallest font size (CSS pixels at scale 1, as the figure's own sizes) a text may shrink to where it does
    /// not fit: titles and legend labels wrap over lines instead, heat map cells go without their text. 0: titles
    /// shrink to half their size, legends to 60%, heat map cells' text to 8 px (a screen's choices); a printed
    /// figure sets what stays legible on paper.
    pub min_text: f64,
}

impl Default for ChartStyle {
    fn default() -> Self {
        Self { scale: 1.0, text_width: 1.0, min_text: 0.0 }
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
            drawn.labels.extend(more.labels);
            drawn.legends.extend(more.legends);
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
    let (mut legend, mut drawn) = (Vec::new(), Drawn::default());
    let labels = legend_labels(refs, series);
    let m = s(LEGEND_MARGIN);
    let Some(g) = grid else {
        // The legend goes in the upper corner with fewer marks under it; where marks would still fall under it, the
        // y axis reaches higher until they are below it.
        let (x, y) = (&x_range.range, &y_range.range);
        let (mid_x, mid_y) = ((x.start + x.end) / 2.0, (y.start + y.end) / 2.0);
        let pt = |m: &Mark| Some((to_space(xa, m.x)?, to_space(ya, m.y)?));
        let upper = |left: bool| marks().filter_map(pt).filter(|p| p.1 > mid_y && (p.0 < mid_x) == left).count();
        let right = upper(true) > upper(false);
        // The plotting area, as xy_panel lays it out (margins, y labels; title and x labels about 110 px), in
        // pixels.
        let (w, h) = root.dim_in_pixel();
        let (plot_w, plot_h) = (f64::from(w) - s(Y_LABEL_AREA + 2.0 * PANEL_MARGIN), f64::from(h) - s(110.0));
        let lay = legend_layout(root, &labels, &font(12.0), style, (plot_w - 2.0 * m) as i32, false)?;
        let (box_w, box_h) = (f64::from(lay.w), f64::from(lay.h));
        let f = (m + box_h) / plot_h;
        // A legend that does not fit in the plot (wider than it, its labels wrapped, or over 60% of its height) goes
        // under it.
        let wrapped = lay.lines.iter().any(|l| l.len() > 1);
        let inside = box_w <= plot_w - 2.0 * m && f < 0.6 && !wrapped;
        let (fx0, fx1) = match right {
            true => (1.0 - (m + box_w) / plot_w, 1.0 - m / plot_w),
            false => (m / plot_w, (m + box_w) / plot_w),
        };
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
        if inside && (0.0..0.6).contains(&f) && top > y.end - f * (y.end - y.start) {
            let base = y.start;
            let more: Vec<f64> =
                ys.iter().copied().chain([base + (top - base) / (1.0 - f) + 0.02 * (top - base)]).collect();
            y_range = scaled(ya, &more, has_bars);
        }
        let xy = Xy { axes: (xa, ya), ranges: (x_range, y_range), series, refs, style };
        let (chart, strip) = match inside || labels.is_empty() {
            true => (root.clone(), None),
            false => {
                let lay = legend_layout(root, &labels, &font(12.0), style, w as i32 - 2 * m as i32, true)?;
                let (a, b) = root.split_vertically(h as i32 - lay.h - 2 * m as i32);
                (a, Some(b))
            }
        };
        let at = Facet { index: 0, small: None, legend: inside.then_some((right, lay.w, lay.h)) };
        let cc = xy_panel(&chart, title, &xy, at, &mut legend, &mut drawn)?;
        let placed = match &strip {
            None => draw_legend(&cc.plotting_area().strip_coord_spec(), &legend, Some(right), &font(12.0), style)?,
            Some(strip) => draw_legend(strip, &legend, None, &font(12.0), style)?,
        };
        drawn.legends.extend(placed);
        return Ok(drawn);
    };
    let xy = Xy { axes: (xa, ya), ranges: (x_range, y_range), series, refs, style };
    // Small multiples: the facets in rows under the title across the width, the axes' titles once (under and left of
    // them), one legend (each label once) in a strip under them. Only the left column has y tick labels (the axes
    // are shared), so every plot is as wide.
    let root = titled(root, title, 18.0, style)?;
    let (w, h) = root.dim_in_pixel();
    let lay = legend_layout(&root, &labels, &font(12.0), style, w as i32 - 2 * m as i32, true)?;
    let strip_h = if labels.is_empty() { 0 } else { lay.h + 2 * m as i32 };
    let (charts, strip) = root.split_vertically(h as i32 - strip_h);
    let (left, charts) = charts.split_horizontally(s(FACET_Y_TITLE) as i32);
    let (charts, under) = charts.split_vertically(charts.dim_in_pixel().1 as i32 - s(FACET_X_TITLE) as i32);
    let desc = TextStyle::from(font(14.0)).color(&BLACK).pos(Pos::new(HPos::Center, VPos::Center));
    let (uw, uh) = under.dim_in_pixel();
    under.draw(&Text::new(axis_title(xa), (uw as i32 / 2, uh as i32 / 2), desc.clone())).map_err(backend_err)?;
    // The y title along the facets' height, smaller where it is longer than that (to the style's smallest text).
    let (lw, lh) = left.dim_in_pixel();
    let (y_title, room) = (axis_title(ya), f64::from(lh) * 0.96);
    let long = text_width(&left, &y_title, &desc, style)?.0;
    let least = s(14.0 * 0.7).max(s(style.min_text)).min(s(14.0));
    let desc = match long > room {
        true => desc.clone().font.resize((s(14.0) * room / long).max(least)).into_text_style(&left),
        false => desc,
    };
    let desc = desc.transform(FontTransform::Rotate270).pos(Pos::new(HPos::Center, VPos::Center));
    left.draw(&Text::new(y_title, (lw as i32 / 2, lh as i32 / 2), desc)).map_err(backend_err)?;
    let cols = g.cols.clamp(1, g.titles.len().max(1));
    let rows = g.titles.len().div_ceil(cols);
    let (cw, ch) = charts.dim_in_pixel();
    let (y_area, fm) = (s(FACET_Y_TICKS), s(FACET_MARGIN));
    let plot_w = ((f64::from(cw) - y_area) / cols as f64 - 2.0 * fm).max(1.0);
    let xs: Vec<i32> = (1..cols).map(|c| (y_area + c as f64 * (plot_w + 2.0 * fm)).round() as i32).collect();
    let row_h = (f64::from(ch) / rows as f64).max(1.0);
    let ys: Vec<i32> = (1..rows).map(|r| (r as f64 * row_h).round() as i32).collect();
    let areas = charts.split_by_breakpoints(xs, ys);
    for (k, (t, area)) in g.titles.iter().zip(&areas).enumerate() {
        let at = Facet { index: k, small: Some(k % cols == 0), legend: None };
        xy_panel(area, t, &xy, at, &mut legend, &mut drawn)?;
    }
    let mut once: Vec<(&str, Key)> = Vec::new();
    for row in legend {
        if !once.iter().any(|r| r.0 == row.0) {
            once.push(row);
        }
    }
    drawn.legends.extend(draw_legend(&strip, &once, None, &font(12.0), style)?);
    Ok(drawn)
}

/// The legend's labels of an x/y figure: its reference lines' and series', each once, none empty.
fn legend_labels<'a>(refs: &'a [RefLine], series: &'a [Series]) -> Vec<&'a str> {
    let mut labels: Vec<&str> = Vec::new();
    for l in refs.iter().map(|r| r.label.as_str()).chain(series.iter().map(|s| s.label.as_str())) {
        if !l.is_empty() && !labels.contains(&l) {
            labels.push(l);
        }
    }
    labels
}

/// An axis' title as drawn.
fn axis_title(a: &Axis) -> String {
    if a.log { format!("{} (log scale)", a.label) } else { a.label.clone() }
}

/// Which chart of an x/y figure [`xy_panel`] draws: the facet's index (0 in a single chart); `small`: a facet of
/// small multiples, without the axes' titles (drawn once for all), with y tick labels where `Some(true)` (the left
/// column); `legend`: the legend box the point labels keep clear of, in the plot's upper right
/// corner (`.0`) or left, `.1` by `.2` pixels.
#[derive(Clone, Copy)]
struct Facet {
    index: usize,
    small: Option<bool>,
    legend: Option<(bool, i32, i32)>,
}

/// One chart of an x/y figure (see [`Facet`]): its axes and mesh, then the reference lines and series of its facet
/// with their error bars and markers, then their point labels where each finds room; their legend rows, hits and
/// label boxes are appended. Returns the chart.
fn xy_panel<'a, 'b, DB: DrawingBackend>(
    area: &'b DrawingArea<DB, Shift>,
    caption: &str,
    xy: &Xy<'a>,
    at: Facet,
    legend: &mut Vec<(&'a str, Key)>,
    drawn: &mut Drawn,
) -> Result<ChartContext<'b, DB, Cartesian2d<Scaled, Scaled>>, ChartError> {
    let ((xa, ya), (xr, yr)) = (xy.axes, xy.ranges.clone());
    let (facet, small) = (at.index, at.small);
    let s = |v: f64| (v * xy.style.scale).round().max(1.0);
    let si = |v: f64| s(v) as u32;
    let (x_lo, x_hi, y_floor) = (xr.range.start, xr.range.end, yr.range.start);
    let font = |size: f64| (FontFamily::SansSerif, s(size)).into_font();
    // A facet has smaller margins, tick labels without the axes' titles, y tick labels only in the left column.
    let (titles, show_y) = (small.is_none(), small.unwrap_or(true));
    let margin = si(if small.is_some() { FACET_MARGIN } else { PANEL_MARGIN });
    let x_area = match (xa.categories.is_empty(), titles) {
        (true, true) => 48.0,
        (false, true) => 56.0,
        (true, false) => 26.0,
        (false, false) => 34.0,
    };
    let y_area = match (titles, show_y) {
        (true, _) => si(Y_LABEL_AREA),
        (false, true) => si(FACET_Y_TICKS),
        (false, false) => 0,
    };
    let (title_font, lines) = title_lines(area, caption, if small.is_some() { 14.0 } else { 18.0 }, xy.style)?;
    let mut builder = ChartBuilder::on(area);
    builder.margin(margin).x_label_area_size(si(x_area)).y_label_area_size(y_area);
    if let [one] = lines.as_slice() {
        builder.caption(one, title_font);
    } else {
        let used = title_text(area, &lines, &title_font, margin as i32, xy.style)?;
        builder.margin_top(margin as i32 + used);
    }
    let mut cc = builder.build_cartesian_2d(xr, yr).map_err(backend_err)?;
    let xfmt = |v: &f64| tick_label(xa, *v);
    let yfmt = |v: &f64| if show_y { tick_label(ya, *v) } else { String::new() };
    let desc = |a: &Axis| if titles { axis_title(a) } else { String::new() };
    // The axes' titles at 14 px, smaller (to 70%, or the smallest text) where the x title is wider than the chart.
    let room = f64::from(area.dim_in_pixel().0) * 0.9;
    let wide = text_width(area, &desc(xa), &TextStyle::from(font(14.0)), xy.style)?.0;
    let least = (14.0 * 0.7f64).max(xy.style.min_text).min(14.0) * xy.style.scale;
    let desc_font = match wide > room {
        true => FontDesc::from((FontFamily::SansSerif, (s(14.0) * room / wide).max(least))),
        false => font(14.0),
    };
    let labels = if small.is_some() { 5 } else { 10 };
    cc.configure_mesh()
        .x_desc(desc(xa))
        .y_desc(desc(ya))
        .x_labels(labels)
        .y_labels(labels)
        .x_label_formatter(&xfmt)
        .y_label_formatter(&yfmt)
        .label_style(font(13.0))
        .axis_desc_style(desc_font)
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
            drawn.hits.push(h);
        }
    }
    place_labels(area, &cc, xy, at, drawn)?;
    Ok(cc)
}

/// The point labels of facet `at` (K of a diffusion point), in the series' colours, each at the first of eight
/// places around its point (up and right first, as before) that stays in the plot and clear of every label placed
/// before it, every marker and the legend; a label with no such place is left out (the tooltip has it). Series by
/// series, point by point: the same figure always gets the same labels.
fn place_labels<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    cc: &ChartContext<'_, DB, Cartesian2d<Scaled, Scaled>>,
    xy: &Xy<'_>,
    at: Facet,
    drawn: &mut Drawn,
) -> Result<(), ChartError> {
    let ((xa, ya), style) = (xy.axes, xy.style);
    let px = |v: f64| (v * style.scale).round().max(1.0) as i32;
    let pt = |m: &Mark| Some((to_space(xa, m.x)?, to_space(ya, m.y)?));
    let (xr, yr) = cc.plotting_area().get_pixel_range();
    let (x0, x1, y0, y1) = (xr.start, xr.end, yr.start, yr.end);
    let series =
        || xy.series.iter().filter(|s| s.facet == at.index && !matches!(s.style, Style::Bars { .. } | Style::Frontier));
    // Markers, then the legend, are kept clear.
    let r = px(5.5);
    let mut taken: Vec<[i32; 4]> = series()
        .flat_map(|s| s.marks.iter().filter_map(pt))
        .map(|p| cc.backend_coord(&p))
        .map(|(x, y)| [x - r, y - r, x + r, y + r])
        .collect();
    let m = px(LEGEND_MARGIN);
    taken.extend(at.legend.map(|(right, w, h)| {
        let left = if right { x0 + (x1 - x0 - m - w).max(0) } else { x0 + m };
        [left, y0 + m, left + w, y0 + m + h]
    }));
    let size = (FontFamily::SansSerif, (11f64.max(style.min_text) * style.scale).round().max(1.0)).into_font();
    let gap = px(3.0);
    for se in series() {
        let ink = colour(se.colour);
        let text = TextStyle::from(size.clone()).color(&ink);
        for m in &se.marks {
            let (Some(p), Some(label)) = (pt(m), m.label.as_ref()) else { continue };
            let (x, y) = cc.backend_coord(&p);
            let (w, h) = text_width(area, label, &text, style)?;
            let (w, h) = (w.ceil() as i32, h as i32);
            let (right, left, up, down) = (x + r + gap, x - r - gap - w, y - r - gap - h, y + r + gap);
            let places = [
                (right, up),
                (right, down),
                (left, up),
                (left, down),
                (right, y - h / 2),
                (left, y - h / 2),
                (x - w / 2, up),
                (x - w / 2, down),
            ];
            let free = |&(l, t): &(i32, i32)| {
                let b = [l, t, l + w, t + h];
                l >= x0 && t >= y0 && l + w <= x1 && t + h <= y1 && !taken.iter().any(|o| overlap(*o, b))
            };
            let Some((l, t)) = places.into_iter().find(free) else { continue };
            cc.plotting_area()
                .draw(&(EmptyElement::at(p) + Text::new(label.clone(), (l - x, t - y), text.clone())))
                .map_err(backend_err)?;
            taken.push([l, t, l + w, t + h]);
            drawn.labels.push(TextBox { text: label.clone(), rect: [l, t, l + w, t + h] });
        }
    }
    Ok(())
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
    let root = titled(root, title, 18.0, style)?;
    // A colour bar on the right: the scale from the smallest to the largest value, in the figure's unit.
    let (w, h) = root.dim_in_pixel();
    let (root, bar) = root.split_horizontally(w.saturating_sub(si(HEAT_BAR)));
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
    // Side by side where they are wide enough, else in rows.
    let cols = heat_columns(panels.len(), f64::from(root.dim_in_pixel().0) / style.scale);
    let areas = root.split_evenly((panels.len().div_ceil(cols), cols));
    let mut hits = Vec::new();
    for (pi, (panel, area)) in panels.iter().zip(&areas).enumerate() {
        let (title_font, lines) = title_lines(area, &panel.title, 14.0, style)?;
        let mut builder = ChartBuilder::on(area);
        builder.margin(si(10.0)).x_label_area_size(si(44.0)).y_label_area_size(si(56.0));
        if let [one] = lines.as_slice() {
            builder.caption(one, title_font);
        } else {
            let used = title_text(area, &lines, &title_font, si(10.0) as i32, style)?;
            builder.margin_top(si(10.0) as i32 + used);
        }
        let mut cc = builder.build_cartesian_2d(scaled(xa, &[], false), scaled(ya, &[], false)).map_err(backend_err)?;
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
            // The cell's text at 13 px, smaller (to 8 px, or the style's `min_text`) where the cell is narrower or
            // lower than that, and none where even that does not fit (many rows, a phone): overprinted labels read
            // as nonsense; the tooltip still has the value.
            let (cell_w, cell_h) = (f64::from((x1 - x0).abs()), f64::from((y0 - y1).abs()));
            let (wide, _) = text_width(area, &c.text, &TextStyle::from(font(13.0)), style)?;
            let size = (13.0 * (cell_w * 0.92 / wide.max(1.0)).min(cell_h * 0.85 / s(13.0))).min(13.0);
            if size >= style.min_text.max(8.0) {
                let text_style = font(size).color(&ink).pos(Pos::new(HPos::Center, VPos::Center));
                cc.draw_series([Text::new(c.text.clone(), (x, y), text_style)]).map_err(backend_err)?;
            }
            hits.push(Hit { series: pi, mark: ci, x: cx, y: cy, x0, y0, x1, y1 });
        }
    }
    Ok(Drawn { hits, ..Drawn::default() })
}

/// The narrowest heat map panel, CSS pixels.
const HEAT_PANEL: f64 = 200.0;
/// The colour bar's width, CSS pixels.
const HEAT_BAR: f64 = 86.0;

/// The panels a row of a heat map `width` CSS pixels wide holds.
fn heat_columns(panels: usize, width: f64) -> usize {
    (((width - HEAT_BAR) / HEAT_PANEL).floor().max(1.0) as usize).clamp(1, panels.max(1))
}

/// The font of a title drawn across `area` and its lines: `size` (scaled), or smaller, down to half of it (never
/// below the style's `min_text`), where the text would not fit the area's width (a narrow canvas, half of a pair);
/// wrapped at spaces where it does not fit even so.
fn title_lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    size: f64,
    style: ChartStyle,
) -> Result<(FontDesc<'static>, Vec<String>), ChartError> {
    let font = |size: f64| (FontFamily::SansSerif, (size * style.scale).max(1.0)).into_font();
    let room = f64::from(area.dim_in_pixel().0) * 0.96;
    let full = font((size * style.scale).round() / style.scale);
    let wide = text_width(area, text, &TextStyle::from(full.clone()), style)?.0;
    let least = (size * 0.5).max(style.min_text).min(size);
    let font = match wide > room {
        false => full,
        // Shrunk to fit; where even the smallest size does not, three quarters of the size over lines.
        true if size * room / wide >= least => font(size * room / wide),
        true => font((size * 0.75).max(least)),
    };
    let lines = wrap(area, text, &TextStyle::from(font.clone()), style, room)?;
    Ok((font, lines))
}

/// Draws `lines` centred across `area` from `top` down; returns the height they take with their padding (as
/// plotters' own title).
fn title_text<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    lines: &[String],
    font: &FontDesc<'_>,
    top: i32,
    style: ChartStyle,
) -> Result<i32, ChartError> {
    let text = TextStyle::from(font.clone()).pos(Pos::new(HPos::Center, VPos::Top));
    let line_h = text_width(area, "Hg", &text, style)?.1 as i32;
    let (pad, step) = ((line_h / 2).min(5), (f64::from(line_h) * 1.2).round() as i32);
    let mid = area.dim_in_pixel().0 as i32 / 2;
    for (i, line) in lines.iter().enumerate() {
        area.draw(&Text::new(line.clone(), (mid, top + pad + step * i as i32), text.clone())).map_err(backend_err)?;
    }
    Ok(2 * pad + step * (lines.len().max(1) as i32 - 1) + line_h)
}

/// `area` under its title (see [`title_lines`]).
fn titled<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    size: f64,
    style: ChartStyle,
) -> Result<DrawingArea<DB, Shift>, ChartError> {
    let (font, lines) = title_lines(area, text, size, style)?;
    if let [one] = lines.as_slice() {
        return area.titled(one, font).map_err(backend_err);
    }
    let used = title_text(area, &lines, &font, 0, style)?;
    Ok(area.split_vertically(used).1)
}

/// `text` broken at spaces into lines no wider than `room` pixels (a word wider than that keeps a line to itself).
fn wrap<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    font: &TextStyle<'_>,
    style: ChartStyle,
    room: f64,
) -> Result<Vec<String>, ChartError> {
    if text_width(area, text, font, style)?.0 <= room {
        return Ok(vec![text.to_string()]);
    }
    let mut lines: Vec<String> = Vec::new();
    for word in text.split(' ') {
        match lines.last_mut() {
            Some(line) if text_width(area, &format!("{line} {word}"), font, style)?.0 <= room => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    Ok(lines)
}

/// The estimated height of a title `width` pixels wide (see [`title_lines`]; 0.58 em a character).
fn title_estimate(text: &str, width: f64, style: ChartStyle) -> f64 {
    let size = (18.0 * 0.5f64).max(style.min_text).min(18.0);
    let wide = text.chars().count() as f64 * 0.58 * size * style.text_width.max(1.0);
    let lines = (wide / (width * 0.96)).ceil().max(1.0);
    let full = text.chars().count() as f64 * 0.58 * 18.0 * style.text_width.max(1.0) <= width * 0.96;
    if full { 40.0 } else { lines * size * 1.2 + 12.0 }
}

/// The legend of `labels` estimated without a backend (0.58 em a character): the width of its box in a plot, at the
/// smallest font it may shrink to, and the height of a strip of it `width` wide (see [`legend_layout`]).
fn legend_estimate(labels: &[&str], width: f64, style: ChartStyle) -> (f64, f64) {
    if labels.is_empty() {
        return (0.0, 0.0);
    }
    let em = 0.58 * style.text_width.max(1.0);
    let least = if style.min_text > 0.0 { style.min_text.min(12.0) } else { 12.0 * 0.6 };
    let chars = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0) as f64;
    let fixed = 38.0;
    let room = width - 2.0 * LEGEND_MARGIN;
    let (text_w, col_w) = (chars * em * 12.0, fixed + chars * em * 12.0);
    let cols = (room / col_w).floor().clamp(1.0, labels.len() as f64);
    let (size, lines) = match text_w + fixed > room {
        true => (least, (chars * em * least / (room - fixed).max(40.0)).ceil().max(1.0)),
        false => (12.0, 1.0),
    };
    let rows = (labels.len() as f64 / cols).ceil() * lines;
    (fixed + chars * em * least, rows * (size * 1.2 + 4.0) + 12.0 + 2.0 * LEGEND_MARGIN)
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

/// A legend laid out: its text style, each row's label in lines, a line's height, a column's width, the number of
/// columns, and the box's width and height, in pixels.
struct LegendLayout {
    text: TextStyle<'static>,
    lines: Vec<Vec<String>>,
    line_h: i32,
    col_w: i32,
    cols: usize,
    w: i32,
    h: i32,
}

impl LegendLayout {
    /// The height of each row of entries (as many lines as its most wrapped label).
    fn row_heights(&self) -> impl Iterator<Item = i32> + '_ {
        self.lines.chunks(self.cols).map(|row| row.iter().map(Vec::len).max().unwrap_or(1) as i32 * self.line_h)
    }
}

/// Lays out the legend of `labels` (empty ones take no row) in at most `room` pixels' width: one column (in a
/// plot), or as many columns as fit when `columns` (a strip under the charts), entries row by row. Wider than
/// `room`, its font shrinks (to 60%, or to the style's `min_text`), then its labels wrap.
fn legend_layout<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    labels: &[&str],
    font: &FontDesc<'static>,
    style: ChartStyle,
    room: i32,
    columns: bool,
) -> Result<LegendLayout, ChartError> {
    let px = |v: f64| (v * style.scale).round().max(1.0) as i32;
    let labels: Vec<&str> = labels.iter().copied().filter(|l| !l.is_empty()).collect();
    let widest = |text: &TextStyle<'_>| -> Result<(i32, i32), ChartError> {
        let (mut w, mut h) = (0, 0);
        for l in &labels {
            let (a, b) = text_width(area, l, text, style)?;
            (w, h) = (w.max(a.ceil() as i32), h.max(b as i32));
        }
        Ok((w, h))
    };
    let size = font.get_size();
    let at = |size: f64| TextStyle::from(font.resize(size)).pos(Pos::new(HPos::Left, VPos::Center));
    let mut text = at(size);
    let (mut text_w, mut h) = widest(&text)?;
    let (pad, marker, gap) = (px(6.0), px(20.0), px(6.0));
    let fixed = 2 * pad + marker + gap;
    // A legend wider than its room (a long label in half of a pair, on a phone, in a printed column) gets a smaller
    // font rather than running past the edge, then its labels wrap.
    if fixed + text_w > room {
        let least = if style.min_text > 0.0 { (style.min_text * style.scale / size).min(1.0) } else { 0.6 };
        text = at(size * (f64::from(room - fixed) / f64::from(text_w.max(1))).clamp(least, 1.0));
        (text_w, h) = widest(&text)?;
    }
    let text_room = (room - fixed).max(px(40.0));
    let mut lines = Vec::new();
    for l in &labels {
        lines.push(wrap(area, l, &text, style, f64::from(text_room))?);
    }
    if text_w > text_room {
        text_w = 0;
        for line in lines.iter().flatten() {
            text_w = text_w.max(text_width(area, line, &text, style)?.0.ceil() as i32);
        }
    }
    let col_w = fixed + text_w;
    let cols = if columns { (room / col_w.max(1)).clamp(1, labels.len().max(1) as i32) as usize } else { 1 };
    let line_h = px(14.0).max(h + px(4.0));
    let mut lay = LegendLayout { text, lines, line_h, col_w, cols, w: 0, h: 0 };
    let rows: i32 = lay.row_heights().sum();
    (lay.w, lay.h) = if labels.is_empty() { (0, 0) } else { (col_w * cols as i32, 2 * pad + rows) };
    Ok(lay)
}

/// The legend: a row per reference line and series (its marker, then its label), in a box in the upper left
/// corner of the plot, or the upper right when `Some(true)`; `None`: the whole `area` is a strip under the charts,
/// the box centred in it, its entries in as many columns as fit. Returns the box drawn. (Drawn here rather than by
/// plotters' series labels, which bring a Unicode lower-casing table into the wasm: about 10 KB gzipped.)
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    rows: &[(&str, Key)],
    corner: Option<bool>,
    font: &FontDesc<'static>,
    style: ChartStyle,
) -> Result<Option<TextBox>, ChartError> {
    let rows: Vec<_> = rows.iter().filter(|r| !r.0.is_empty()).collect();
    if rows.is_empty() {
        return Ok(None);
    }
    let px = |v: f64| (v * style.scale).round().max(1.0) as i32;
    let (pad, marker, gap, margin) = (px(6.0), px(20.0), px(6.0), px(LEGEND_MARGIN));
    let area_w = area.dim_in_pixel().0 as i32;
    let labels: Vec<&str> = rows.iter().map(|r| r.0).collect();
    let lay = legend_layout(area, &labels, font, style, area_w - 2 * margin, corner.is_none())?;
    let (box_w, box_h) = (lay.w, lay.h);
    // Never left of the area (plotters would pull every element there onto its edge, text over the markers).
    let x0 = match corner {
        Some(true) => (area_w - margin - box_w).max(0),
        Some(false) => margin,
        None => ((area_w - box_w) / 2).max(0),
    };
    let (y0, corner) = (margin, |x: i32, y: i32| (x0 + x, margin + y));
    area.draw(&Rectangle::new([(x0, y0), corner(box_w, box_h)], WHITE.mix(0.85).filled())).map_err(backend_err)?;
    area.draw(&Rectangle::new([(x0, y0), corner(box_w, box_h)], BLACK.mix(0.4))).map_err(backend_err)?;
    let heights: Vec<i32> = lay.row_heights().collect();
    for (i, ((_, key), lines)) in rows.iter().zip(&lay.lines).enumerate() {
        let (row, col) = (i / lay.cols, i % lay.cols);
        let top = pad + heights[..row].iter().sum::<i32>();
        let (x, y) = corner(pad + lay.col_w * col as i32, top + lay.line_h / 2);
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
        for (j, line) in lines.iter().enumerate() {
            let at = (x + marker + gap, y + lay.line_h * j as i32);
            area.draw(&Text::new(line.clone(), at, lay.text.clone())).map_err(backend_err)?;
        }
    }
    let (bx, by) = area.get_base_pixel();
    let rect = [bx + x0, by + y0, bx + x0 + box_w, by + y0 + box_h];
    Ok(Some(TextBox { text: labels.join("\n"), rect }))
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
