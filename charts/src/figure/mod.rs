//! Every chart of the explorer, drawn with plotters on any `DrawingBackend` from a [`Figure`].
//!
//! A [`Figure`] is plain data: axes, series of marks (points, lines, bars with error bars), reference
//! lines, or heatmap panels. The numbers in it come ready-made from `metrics::derive` (through
//! `crate::views`); this module only places them, and reports where each mark landed ([`Drawn`]) for
//! tooltips, clicks and tests. No wasm dependency: the browser draws on a canvas, `dllm-bench figures` and the
//! tests into SVG.
//!
//! This module holds the model (the figure's data, the style, what was drawn where) and [`draw`]; the drawing is in
//! its modules: the axes' scales and ticks, the xy charts (one or small multiples), the heat maps, and text (titles,
//! legends and their size estimates).

mod axes;
mod heat;
mod text;
mod xy;

pub use axes::fmt_num;
pub use heat::{NA_FILL, NA_HATCH, OOM_FILL, SHORT_FORMS, diverging, short_form, viridis};

use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Serialize;

use axes::{axis_title, axis_title_least};
use heat::{HEAT_BAR, draw_heat, heat_columns};
use text::{legend_estimate, title_estimate};
use xy::{draw_xy, legend_inside, legend_labels};

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

/// The least height of a single x/y chart's plot, CSS pixels: a figure is made taller (a phone, a legend under the
/// plot) rather than its plot thinner than this.
pub const MIN_PLOT_HEIGHT: f64 = 120.0;

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
    /// A count (diffusion steps, batch sizes): ticks at powers of two on a log axis, at whole numbers on a linear
    /// one.
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
    /// Lower end of the error bar: the spread's (min over repetitions), or an interval's (quality's 95% bootstrap).
    pub lo: Option<f64>,
    /// Upper end of the error bar (max over repetitions, or the interval's upper end).
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
    /// The compared bundle's series: dashed lines, triangle markers, paler bars outlined in the series' colour.
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
    /// An interval around the value (low, high), shaded behind the line in its colour: the 95% bootstrap interval
    /// of the AR model's quality.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub band: Option<(f64, f64)>,
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

    /// The height of the figure drawn `width` wide ([`Figure::height_for`] with the default style).
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
            Plot::Xy { series, refs, y, .. } => {
                let plot_w = w - Y_LABEL_AREA - 2.0 * PANEL_MARGIN;
                let plot_h = single_plot_height(plot_w, y, style);
                // Room for the legend's strip under the plot wherever the drawing puts the legend there: the same
                // decision ([`legend_inside`]) on estimates of the same sizes (a row a line of 12 px text).
                let labels = legend_labels(refs, series);
                let (box_w, strip) = legend_estimate(&labels, w, style);
                let box_h = labels.len() as f64 * (12.0 * 1.2 + 4.0) + 12.0;
                let wrapped = box_w > plot_w - 2.0 * LEGEND_MARGIN;
                let inside = labels.is_empty()
                    || legend_inside((plot_w, plot_h), (box_w.min(plot_w), box_h), wrapped, LEGEND_MARGIN);
                let strip = if inside { 0.0 } else { strip };
                let need = title_estimate(&self.title, w, style) + 2.0 * PANEL_MARGIN + 48.0 + plot_h + strip;
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

/// The height (CSS pixels) a single x/y chart's plot `plot_w` wide is given: half its width, or as tall as the y
/// axis' title at its smallest (a phone, a printed column), up to square; never under [`MIN_PLOT_HEIGHT`].
pub(super) fn single_plot_height(plot_w: f64, y: &Axis, style: ChartStyle) -> f64 {
    let y_title = axis_title(y).chars().count() as f64 * 0.58 * axis_title_least(style);
    (plot_w * 0.5).max(y_title + 8.0).min(plot_w).max(MIN_PLOT_HEIGHT)
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
    /// Each plot's area (an x/y chart's or facet's, a heat map panel's), left, top, right, bottom in backend
    /// pixels: the browser test checks that none is squeezed flat on a phone.
    pub plots: Vec<[i32; 4]>,
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

    /// The mark [`Self::at`] finds first, then every other mark drawn on the same spot (centres within a pixel:
    /// an `[A]` and a `[B]` point of equal value, two series through one point), in drawing order: a tooltip names
    /// them all, since the one on top hides the others.
    pub fn all_at(&self, x: i32, y: i32, radius: i32) -> Vec<&Hit> {
        self.at(x, y, radius).map(|first| self.on_spot(first)).unwrap_or_default()
    }

    /// `first` (one of [`Self::hits`]), then every other mark whose centre is within a pixel of its centre, in
    /// drawing order: what the pointer over `first`, or the keyboard on it, names.
    pub fn on_spot<'a>(&'a self, first: &'a Hit) -> Vec<&'a Hit> {
        let same = |h: &&Hit| !std::ptr::eq(*h, first) && (h.x - first.x).abs() <= 1 && (h.y - first.y).abs() <= 1;
        std::iter::once(first).chain(self.hits.iter().filter(same)).collect()
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

impl ChartStyle {
    /// The explorer's canvas at `scale` device pixels per CSS pixel: no text under 9 CSS pixels (a legend at 60% of
    /// its 12 px was 7 px on a phone, too small to read), longer titles and legend labels wrap instead.
    pub fn screen(scale: f64) -> Self {
        Self { scale, min_text: 9.0, ..Self::default() }
    }
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
                false => {
                    let css = ChartStyle { scale: 1.0, ..style };
                    root.split_vertically(h * first.height_for(css_w, css) / fig.height_for(css_w, css).max(1))
                }
            };
            let mut drawn = draw_plot(&a, first, style)?;
            let offset = first.series_count();
            let more = draw_plot(&b, second, style)?;
            drawn.hits.extend(more.hits.into_iter().map(|h| Hit { series: h.series + offset, ..h }));
            drawn.labels.extend(more.labels);
            drawn.legends.extend(more.legends);
            drawn.plots.extend(more.plots);
            drawn
        }
    })
}
