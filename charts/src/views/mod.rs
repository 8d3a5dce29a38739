//! The explorer's views, filters and page state, without any browser API (so it is tested natively).
//!
//! Every number comes from `metrics::derive` (summaries, throughput, memory, TTFT/ITL, step time, Pareto
//! frontier, S_parity); this module picks the cells the filters keep, lays the numbers out as
//! [`Figure`]s, panels and table rows, writes the CSV, and maps the page state to and from the URL.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use metrics::derive::{
    self, CellRef, Direction, MemoryMetric, Parity, ParityPanel, QualityPoint, Summary, ar_timings, gigabytes,
    memory_heatmap, pareto_view, step_timings, throughput_bars,
};
use schema::grid::{Precision, SamplerVariant};
use schema::key::Threshold;
use schema::{Bundle, Cell, CellStatus, Sampler};

use crate::bundle::LoadedBundle;
use crate::figure::{self, Axis, CellId, Figure, HeatCell, Mark, Panel, Plot, RefLine, Series, Style};

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
            ViewKind::StepTime => "Time per step (LLaDA)",
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

/// The serde name of a sampler (`ar_greedy`, ...).
pub fn sampler_name(s: Sampler) -> &'static str {
    match s {
        Sampler::ArGreedy => "ar_greedy",
        Sampler::LladaLowConfidence => "llada_low_confidence",
        Sampler::LladaRandom => "llada_random",
        Sampler::DreamOrigin => "dream_origin",
        Sampler::DreamMaskgitPlus => "dream_maskgit_plus",
        Sampler::DreamTopkMargin => "dream_topk_margin",
        Sampler::DreamEntropy => "dream_entropy",
    }
}

fn sampler_label(s: Sampler) -> &'static str {
    match s {
        Sampler::ArGreedy => "greedy",
        Sampler::LladaLowConfidence => "low-confidence remasking",
        Sampler::LladaRandom => "random remasking",
        Sampler::DreamOrigin => "origin",
        Sampler::DreamMaskgitPlus => "maskgit_plus",
        Sampler::DreamTopkMargin => "topk_margin",
        Sampler::DreamEntropy => "entropy",
    }
}

fn precision_of(b: &Bundle, c: &Cell) -> Option<Precision> {
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
            metric: None,
            peak_bw_tbs: None,
            peak_tflops: None,
            pareto_x: ParetoX::Latency,
            multiples: false,
        }
    }
}

/// The values each filter can take over the loaded bundles (sorted), for the filter selects.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FilterChoices {
    /// Model ids.
    pub models: Vec<String>,
    /// Sampler names.
    pub samplers: Vec<String>,
    /// K values.
    pub steps: Vec<u32>,
    /// B values.
    pub batches: Vec<u32>,
    /// N values.
    pub seqs: Vec<u32>,
    /// Precisions.
    pub precisions: Vec<String>,
}

/// The filter choices of the loaded bundles.
pub fn filter_choices(bundles: &[&LoadedBundle]) -> FilterChoices {
    let (mut m, mut s, mut p) = (BTreeSet::<&str>::new(), BTreeSet::<&str>::new(), BTreeSet::<String>::new());
    let (mut k, mut b, mut n) = (BTreeSet::<u32>::new(), BTreeSet::<u32>::new(), BTreeSet::<u32>::new());
    for lb in bundles {
        for c in &lb.bundle.cells {
            m.insert(c.key.model.as_str());
            s.insert(sampler_name(c.key.sampler));
            k.extend(c.key.steps);
            b.insert(c.key.batch_size);
            n.insert(c.key.seq_len);
        }
        p.extend(lb.bundle.models.iter().map(|x| x.dtype.to_string()));
    }
    FilterChoices {
        models: m.iter().map(|x| x.to_string()).collect(),
        samplers: s.iter().map(|x| x.to_string()).collect(),
        steps: k.iter().copied().collect(),
        batches: b.iter().copied().collect(),
        seqs: n.iter().copied().collect(),
        precisions: p.iter().cloned().collect(),
    }
}

/// The cells of `lb` the filters keep.
pub fn kept<'a>(lb: &'a LoadedBundle, f: &Filters) -> Vec<CellRef<'a>> {
    lb.bundle
        .cells
        .iter()
        .zip(&lb.summaries)
        .enumerate()
        .filter(|(_, (c, _))| f.keeps(&lb.bundle, c))
        .map(|(index, (cell, summary))| CellRef { index, cell, summary })
        .collect()
}

/// The distinct values, in order. (Inserting, where `collect` would sort: a collect instantiates a whole stable
/// sort per element type, about 2 KB of wasm each.)
fn set<T: Ord>(values: impl IntoIterator<Item = T>) -> BTreeSet<T> {
    let mut s = BTreeSet::new();
    values.into_iter().for_each(|v| {
        s.insert(v);
    });
    s
}

/// Tag of a loaded bundle in legends: `A` and `B` when two are compared, nothing otherwise.
fn tag(bi: usize, n: usize) -> String {
    if n > 1 { format!("[{}] ", ["A", "B"].get(bi).copied().unwrap_or("?")) } else { String::new() }
}

/// A series' identity: model, sampler, block length (diffusion variants).
fn series_label(c: &Cell) -> String {
    let k = &c.key;
    let mut s = format!("{} ({})", short_model(&k.model), sampler_label(k.sampler));
    if let Some(b) = k.block_length {
        let _ = write!(s, " block {b}");
    }
    if let Some(v) = k.variant().filter(|v| *v != SamplerVariant::Reference) {
        let _ = write!(s, " {v}");
    }
    s
}

/// A diffusion point's label: `K=8`, or `t=0.9` for a threshold cell.
fn point_label(c: &Cell, steps: u32) -> String {
    match c.key.threshold {
        Some(t) => format!("t={t}"),
        None => format!("K={steps}"),
    }
}

/// The x axis of diffusion steps: K, and a threshold series' measured forwards when one is drawn.
fn steps_axis(series: &[Series]) -> Axis {
    let thresholds =
        series.iter().flat_map(|s| &s.marks).any(|m| m.label.as_deref().is_some_and(|l| l.starts_with("t=")));
    let title =
        if thresholds { "diffusion steps K (threshold series: forwards measured)" } else { "diffusion steps K" };
    Axis { pow2: true, ..Axis::numeric(title, true) }
}

/// The model id without its organisation (`GSAI-ML/LLaDA-8B-Instruct` -> `LLaDA-8B-Instruct`).
pub fn short_model(id: &str) -> &str {
    id.rsplit('/').next().unwrap_or(id)
}

/// Colour index per series identity, stable across bundles (compared bundles share colours): the series are
/// numbered in the order the chart meets them, or for small multiples in the order the bundles' cells first show
/// them, so that a series keeps its colour in every facet. (One chart does without that pass over every cell: a
/// few milliseconds of each redraw on a 10,000-cell bundle.) A series is told by its model, sampler, block length
/// and variant (what [`series_label`] writes), compared without writing its label.
struct Palette<'a>(Vec<(&'a str, Sampler, Option<u32>, Option<SamplerVariant>)>);

impl<'a> Palette<'a> {
    fn of(bundles: &[&'a LoadedBundle], o: &Options) -> Self {
        let mut p = Palette(Vec::new());
        for lb in bundles.iter().filter(|_| o.multiples) {
            lb.bundle.cells.iter().for_each(|c| {
                p.colour(c);
            });
        }
        p
    }

    fn colour(&mut self, c: &'a Cell) -> usize {
        if c.key.sampler == Sampler::ArGreedy {
            return figure::AR;
        }
        let k = &c.key;
        let id = (k.model.as_str(), k.sampler, k.block_length, k.variant());
        match self.0.iter().position(|x| *x == id) {
            Some(i) => i,
            None => {
                self.0.push(id);
                self.0.len() - 1
            }
        }
    }
}

/// The (B, N) a per-shape view shows: the filters', else the smallest the bundles have; and a note saying
/// which was chosen.
pub fn shape(bundles: &[&LoadedBundle], f: &Filters) -> Option<((u32, u32), Option<String>)> {
    let ch = filter_choices(bundles);
    let b = f.batch.or_else(|| ch.batches.first().copied())?;
    let n = f.seq.or_else(|| ch.seqs.first().copied())?;
    let note = (f.batch.is_none() || f.seq.is_none())
        .then(|| format!("Showing B = {b}, N = {n} (the smallest; choose B and N in the filters for another shape)."));
    Some(((b, n), note))
}

fn ms(s: &Summary) -> String {
    format!("median {:.2} ms (min {:.2}, max {:.2}, n = {})", s.median, s.min, s.max, s.n)
}

fn key_text(tag: &str, c: &Cell) -> String {
    format!("{tag}{}", c.key)
}

/// A view's content: a figure, or a message saying why there is none; plus notes shown above it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChartView {
    /// The figure, or why there is none.
    pub figure: Result<Figure, String>,
    /// Notes (which shape is shown, what a metric means).
    pub notes: Vec<String>,
}

/// The message of the quality views for bundles without quality values.
pub const NO_QUALITY: &str = "No quality measured in this bundle: its cells have no quality values (the run had \
     no [quality] table, or the bundle predates schema 1.1), so the Pareto frontier, quality vs steps and S_parity \
     cannot be shown.";

/// Builds the figure of a chart view over the loaded bundles (the main one first).
pub fn chart_view(view: ViewKind, bundles: &[&LoadedBundle], f: &Filters, o: &Options) -> ChartView {
    let mut notes = Vec::new();
    let figure = match view {
        ViewKind::Latency | ViewKind::Pareto | ViewKind::QualitySteps | ViewKind::Throughput => match o.multiples {
            true => multiples(view, bundles, f, o, &mut notes),
            false => per_shape(view, bundles, f, o, &mut notes),
        },
        ViewKind::Memory => memory(bundles, f, o, &mut notes),
        ViewKind::ArTiming => ar_timing(bundles, f, o),
        ViewKind::StepTime => step_time(bundles, f, o, &mut notes),
        // The answer's chart: the verdict per (N, B) and series, or the latencies when nothing measured quality.
        // The answer first: the finding in one sentence (the first note), the verdict per series and (N, B) as the
        // chart; the latencies when nothing measured quality.
        ViewKind::Answer => match answer(bundles, o) {
            Ok((sentence, verdict)) => {
                notes.push(sentence);
                notes.push(
                    "Left (above, on a narrow screen), each cell: the speedup at parity; blue: faster at equal \
                     quality, red: slower, grey: parity not reached (the tooltip names S_parity and its 95% \
                     interval). Right (below): the Pareto frontier of quality against latency at the shape the \
                     filters pick. Detail: the S_parity and Pareto frontier tabs."
                        .into(),
                );
                if bundles.len() > 1 {
                    notes.push(
                        "The verdict is the main bundle's; the S_parity tab has both bundles' rows, and the Pareto \
                         frontier beside it draws both."
                            .into(),
                    );
                }
                // The Pareto frontier beside the verdict, as the Pareto tab draws it.
                let pareto = match o.multiples {
                    true => multiples(ViewKind::Pareto, bundles, f, o, &mut notes),
                    false => per_shape(ViewKind::Pareto, bundles, f, o, &mut notes),
                };
                Ok(match pareto {
                    Ok(p) => Figure {
                        title: verdict.title.clone(),
                        plot: Plot::Pair { first: Box::new(verdict), second: Box::new(p) },
                    },
                    Err(_) => verdict,
                })
            }
            Err(e) => {
                notes.push(e);
                per_shape(ViewKind::Latency, bundles, f, o, &mut notes)
            }
        },
        ViewKind::Roofline => roofline(bundles, f, o, &mut notes),
        ViewKind::Parity | ViewKind::Details => Err("this view is not a chart".into()),
    };
    // The figure itself says so when any of its numbers come from synthetic weights (the PNG export, `figures`).
    let figure = figure.map(|mut fig| {
        if bundles.iter().any(|b| b.synthetic_weights) {
            fig.label_synthetic();
        }
        fig
    });
    ChartView { figure, notes }
}

/// A per-shape chart's title suffix: its shape, or for small multiples the grid's layout.
fn shape_text(o: &Options, b: u32, n: u32) -> String {
    if o.multiples { " at every shape (rows N, columns B; shared axes)".into() } else { format!(" (B = {b}, N = {n})") }
}

/// A reference line's value in its legend (`: 12.3 ms`); none for small multiples, whose facets share one legend.
fn value_text(o: &Options, value: impl FnOnce() -> String) -> String {
    if o.multiples { String::new() } else { format!(": {}", value()) }
}

/// A per-shape view (latency, Pareto, quality, throughput) at the shape the filters pick. (Each view is called here
/// only, so that the wasm has one copy of it.)
#[inline(never)]
fn per_shape(
    view: ViewKind,
    bundles: &[&LoadedBundle],
    f: &Filters,
    o: &Options,
    n: &mut Vec<String>,
) -> Result<Figure, String> {
    match view {
        ViewKind::Latency => latency(bundles, f, o, n),
        ViewKind::Pareto => pareto(bundles, f, o, n),
        ViewKind::QualitySteps => quality_steps(bundles, f, o, n),
        _ => throughput(bundles, f, o, n),
    }
}

/// The most facets small multiples draw (a study's grid has 4 to 16 shapes).
pub const MAX_FACETS: usize = 24;

/// Small multiples of a per-shape view: its figure at every (N, B) the filters keep (every N for throughput, whose
/// x axis is B), as the facets of one figure, rows N and columns B, the axes shared. A shape without a figure keeps
/// its place, empty.
fn multiples(
    view: ViewKind,
    bundles: &[&LoadedBundle],
    f: &Filters,
    o: &Options,
    notes: &mut Vec<String>,
) -> Result<Figure, String> {
    let ch = filter_choices(bundles);
    let ns: Vec<u32> = f.seq.map_or(ch.seqs, |n| vec![n]);
    let bs: Vec<Option<u32>> = match view {
        ViewKind::Throughput => vec![f.batch],
        _ => f.batch.map_or(ch.batches, |b| vec![b]).into_iter().map(Some).collect(),
    };
    if ns.len() * bs.len() > MAX_FACETS {
        return Err(format!(
            "{} shapes are too many to draw at once (at most {MAX_FACETS}): choose an N or a B in the filters.",
            ns.len() * bs.len()
        ));
    }
    let (mut titles, mut series, mut refs, mut first, mut why) = (Vec::new(), Vec::new(), Vec::new(), None, None);
    for &n in &ns {
        for &b in &bs {
            let at = Filters { seq: Some(n), batch: b, ..f.clone() };
            let mut said = Vec::new();
            let fig = per_shape(view, bundles, &at, o, &mut said);
            let facet = titles.len();
            titles.push(
                b.filter(|_| view != ViewKind::Throughput).map_or(format!("N = {n}"), |b| format!("N = {n}, B = {b}")),
            );
            let (title, x, y, s, r) = match fig {
                Ok(Figure { title, plot: Plot::Xy { x, y, series, refs, .. } }) => (title, x, y, series, refs),
                Ok(_) => continue,
                Err(e) => {
                    why = Some(e);
                    continue;
                }
            };
            said.retain(|s| !notes.contains(s));
            notes.extend(said);
            series.extend(s.into_iter().map(|s| Series { facet, ..s }));
            refs.extend(r.into_iter().map(|r| RefLine { facet, ..r }));
            first.get_or_insert((title, x, y));
        }
    }
    let (title, x, y) = first.ok_or_else(|| why.unwrap_or_else(|| "no shape the filters keep has cells".into()))?;
    notes.push(
        "Every shape at once: a small chart per (N, B) the filters keep, all with the same axes (untick \"every shape\" \
         for one chart at a time)."
            .into(),
    );
    let cols = if view == ViewKind::Throughput { ns.len().min(3) } else { bs.len() };
    Ok(Figure { title, plot: Plot::Xy { x, y, series, refs, grid: Some(figure::Grid { titles, cols }) } })
}

fn latency(bundles: &[&LoadedBundle], f: &Filters, o: &Options, notes: &mut Vec<String>) -> Result<Figure, String> {
    let ((b, n), note) = shape(bundles, f).ok_or("no cells")?;
    notes.extend(note);
    let mut pal = Palette::of(bundles, o);
    let (mut series, mut refs) = (Vec::new(), Vec::new());
    for (bi, lb) in bundles.iter().enumerate() {
        let t = tag(bi, bundles.len());
        let at: Vec<CellRef> = kept(lb, f)
            .into_iter()
            .filter(|c| c.cell.key.batch_size == b && c.cell.key.seq_len == n && c.cell.status == CellStatus::Ok)
            .collect();
        for c in &at {
            let Some(e) = c.summary.e2e_ms else { continue };
            match derive::cell_steps(c.cell) {
                None if c.cell.key.sampler != Sampler::ArGreedy => {}
                None => refs.push(RefLine {
                    label: format!(
                        "{t}{} (autoregressive){}",
                        short_model(&c.cell.key.model),
                        value_text(o, || format!("{:.1} ms", e.median))
                    ),
                    value: e.median,
                    vertical: false,
                    colour: figure::AR,
                    alt: bi > 0,
                    facet: 0,
                }),
                Some(k) => {
                    let label = format!("{t}{}", series_label(c.cell));
                    let mark = Mark {
                        x: f64::from(k),
                        y: e.median,
                        lo: Some(e.min),
                        hi: Some(e.max),
                        tip: format!("{}\nL_e2e {}", key_text(&t, c.cell), ms(&e)),
                        cell: Some(CellId { bundle: bi, cell: c.index }),
                        label: Some(point_label(c.cell, k)),
                    };
                    push_mark(&mut series, label, pal.colour(c.cell), Style::Line, bi > 0, mark);
                }
            }
        }
    }
    sort_marks(&mut series);
    Ok(Figure {
        title: format!("Latency vs diffusion steps{}", shape_text(o, b, n)),
        plot: Plot::Xy {
            x: steps_axis(&series),
            y: Axis::numeric("median end-to-end latency L_e2e (ms)", o.log_y),
            series,
            refs,
            grid: None,
        },
    })
}

fn push_mark(series: &mut Vec<Series>, label: String, colour: usize, style: Style, alt: bool, mark: Mark) {
    match series.iter_mut().find(|s| s.label == label) {
        Some(s) => s.marks.push(mark),
        None => series.push(Series { label, colour, style, alt, marks: vec![mark], facet: 0 }),
    }
}

fn sort_marks(series: &mut [Series]) {
    for s in series {
        s.marks.sort_by(|a, b| a.x.total_cmp(&b.x));
    }
}

fn throughput(bundles: &[&LoadedBundle], f: &Filters, o: &Options, notes: &mut Vec<String>) -> Result<Figure, String> {
    let ch = filter_choices(bundles);
    let n = f.seq.or_else(|| ch.seqs.first().copied()).ok_or("no cells")?;
    if f.seq.is_none() {
        notes.push(format!("Showing N = {n} (the smallest; choose N in the filters for another length)."));
    }
    // (bundle, cell index, cell, tokens/s, bytes/s)
    let mut bars: Vec<(usize, usize, &Cell, Summary, Summary)> = Vec::new();
    for (bi, lb) in bundles.iter().enumerate() {
        let cells: Vec<CellRef> = kept(lb, f).into_iter().filter(|c| c.cell.key.seq_len == n).collect();
        for t in throughput_bars(&cells) {
            bars.push((bi, t.cell, &lb.bundle.cells[t.cell], t.tokens_per_s, t.bytes_per_s));
        }
    }
    // Small multiples share the x axis: every B the filters keep, at every N.
    let batches: Vec<u32> = match o.multiples {
        true => ch.batches.iter().copied().filter(|b| f.batch.is_none_or(|x| x == *b)).collect(),
        false => set(bars.iter().map(|b| b.2.key.batch_size)).into_iter().collect(),
    };
    // One bar per (bundle, model, sampler, K or threshold) in each B; AR first, then by K, then by threshold.
    // The set orders by (diffusion, label, K, threshold, bundle); the ids are kept as (bundle, diffusion, label, K,
    // threshold).
    type Id = (usize, bool, String, Option<u32>, Option<Threshold>);
    let id_of = |bi: usize, c: &Cell| -> Id {
        (bi, c.key.sampler != Sampler::ArGreedy, series_label(c), c.key.steps, c.key.threshold)
    };
    let ids: Vec<Id> = set(bars.iter().map(|(bi, _, c, ..)| {
        let (bi, d, label, k, t) = id_of(*bi, c);
        (d, label, k, t, bi)
    }))
    .into_iter()
    .map(|(d, label, k, t, bi)| (bi, d, label, k, t))
    .collect();
    let width = 0.84 / ids.len().max(1) as f64;
    let mut pal = PointPalette::of(bundles, o);
    let mut series: Vec<Series> = Vec::new();
    let unit = if o.bytes { "bytes/s" } else { "tokens/s" };
    for (j, id) in ids.iter().enumerate() {
        let t = tag(id.0, bundles.len());
        let mut marks = Vec::new();
        let mut colour = 0;
        let same = |b: &&(usize, usize, &Cell, Summary, Summary)| id_of(b.0, b.2) == *id;
        for (bi, ci, c, tok, byt) in bars.iter().filter(same) {
            colour = pal.colour(c);
            let v = if o.bytes { byt } else { tok };
            let cat = batches.iter().position(|x| *x == c.key.batch_size).unwrap_or(0);
            marks.push(Mark {
                x: cat as f64 - 0.42 + width * (j as f64 + 0.5),
                y: v.median,
                lo: Some(v.min),
                hi: Some(v.max),
                tip: format!(
                    "{}\n{:.1} tokens/s (min {:.1}, max {:.1})\n{:.1} bytes/s (min {:.1}, max {:.1})",
                    key_text(&t, c),
                    tok.median,
                    tok.min,
                    tok.max,
                    byt.median,
                    byt.min,
                    byt.max
                ),
                cell: Some(CellId { bundle: *bi, cell: *ci }),
                label: None,
            });
        }
        series.push(Series {
            label: format!("{t}{}{}", id.2, point_suffix(id.3, id.4)),
            colour,
            style: Style::Bars { width: width * 0.92 },
            alt: id.0 > 0,
            marks,
            facet: 0,
        });
    }
    Ok(Figure {
        title: format!(
            "Throughput ({unit}, median with min..max over repetitions), {}",
            if o.multiples { "every N".to_string() } else { format!("N = {n}") }
        ),
        plot: Plot::Xy {
            x: Axis::categorical("batch size B", batches.iter().map(|b| format!("B={b}")).collect()),
            y: Axis::numeric(format!("generation throughput ({unit})"), o.log_y),
            series,
            refs: Vec::new(),
            grid: None,
        },
    })
}

/// Colour index per (series, K or threshold) for the throughput charts, where each K and each threshold of a series
/// is a series of its own (the legend names each): numbered in the order met, or for small multiples over every cell
/// first, as [`Palette`] numbers the series; black for the AR model.
struct PointPalette<'a>(Palette<'a>, Vec<(usize, Option<u32>, Option<Threshold>)>);

impl<'a> PointPalette<'a> {
    fn of(bundles: &[&'a LoadedBundle], o: &Options) -> Self {
        let mut p = PointPalette(Palette(Vec::new()), Vec::new());
        for lb in bundles.iter().filter(|_| o.multiples) {
            lb.bundle.cells.iter().for_each(|c| {
                p.colour(c);
            });
        }
        p
    }

    fn colour(&mut self, c: &'a Cell) -> usize {
        let series = self.0.colour(c);
        if series == figure::AR {
            return figure::AR;
        }
        let id = (series, c.key.steps, c.key.threshold);
        match self.1.iter().position(|x| *x == id) {
            Some(i) => i,
            None => {
                self.1.push(id);
                self.1.len() - 1
            }
        }
    }
}

/// What tells a throughput series' cells apart within a sampler series: ` K=64`, ` t=0.9`, nothing for AR.
fn point_suffix(steps: Option<u32>, threshold: Option<Threshold>) -> String {
    match (steps, threshold) {
        (Some(k), _) => format!(" K={k}"),
        (None, Some(t)) => format!(" t={t}"),
        (None, None) => String::new(),
    }
}

/// Throughput scaling with the batch size at sequence length `n`: tokens/s (or bytes/s) against B, a line per model,
/// sampler and K, min..max over repetitions as error bars; the throughput bars' numbers
/// (`metrics::derive::throughput_bars`) drawn as lines. `dllm-bench figures` writes it
/// (`throughput_vs_batch_size_N*.svg`); the explorer shows the same numbers as bars.
pub fn throughput_scaling(bundles: &[&LoadedBundle], n: u32, o: &Options) -> Result<Figure, String> {
    let mut pal = PointPalette::of(bundles, o);
    let mut series = Vec::new();
    let unit = if o.bytes { "bytes/s" } else { "tokens/s" };
    for (bi, lb) in bundles.iter().enumerate() {
        let t = tag(bi, bundles.len());
        let cells: Vec<CellRef> =
            kept(lb, &Filters::default()).into_iter().filter(|c| c.cell.key.seq_len == n).collect();
        for bar in throughput_bars(&cells) {
            let c = &lb.bundle.cells[bar.cell];
            let v = if o.bytes { bar.bytes_per_s } else { bar.tokens_per_s };
            let mark = Mark {
                x: f64::from(c.key.batch_size),
                y: v.median,
                lo: Some(v.min),
                hi: Some(v.max),
                tip: format!("{}\n{:.1} {unit} (min {:.1}, max {:.1})", key_text(&t, c), v.median, v.min, v.max),
                cell: Some(CellId { bundle: bi, cell: bar.cell }),
                label: None,
            };
            let label = format!("{t}{}{}", series_label(c), point_suffix(c.key.steps, c.key.threshold));
            push_mark(&mut series, label, pal.colour(c), Style::Line, bi > 0, mark);
        }
    }
    if series.is_empty() {
        return Err(format!("no successful cell at N = {n} has a throughput"));
    }
    sort_marks(&mut series);
    Ok(Figure {
        title: format!("Throughput scaling with the batch size ({unit}, median with min..max), N = {n}"),
        plot: Plot::Xy {
            x: Axis { pow2: true, ..Axis::numeric("batch size B", true) },
            y: Axis::numeric(format!("generation throughput ({unit})"), o.log_y),
            series,
            refs: Vec::new(),
            grid: None,
        },
    })
}

fn memory(bundles: &[&LoadedBundle], f: &Filters, o: &Options, notes: &mut Vec<String>) -> Result<Figure, String> {
    let ch = filter_choices(bundles);
    let (xs, ys) = (ch.batches.clone(), ch.seqs.clone());
    let mut metric_names = BTreeSet::new();
    let mut heats = Vec::new();
    for (bi, lb) in bundles.iter().enumerate() {
        let t = tag(bi, bundles.len());
        let cells = kept(lb, f);
        let cpu = lb.bundle.provenance.device.kind == "cpu"
            || (cells.iter().all(|c| c.summary.peak_allocated_bytes.is_none())
                && cells.iter().any(|c| c.summary.peak_rss_bytes.is_some()));
        let metric = if cpu { MemoryMetric::Rss } else { o.memory };
        metric_names.insert(match metric {
            MemoryMetric::Allocated => "peak allocated device memory",
            MemoryMetric::Reserved => "peak reserved device memory (memory pool)",
            MemoryMetric::Rss => "peak resident set size of the process (CPU run: no device memory)",
        });
        if cpu && o.memory == MemoryMetric::Reserved {
            notes.push(format!("{t}CPU bundle: it has no reserved device memory, so RSS is shown."));
        }
        heats.push((bi, t, metric, memory_heatmap(&cells, metric)));
    }
    // One unit for the whole figure, fitted to its values: MB when every peak is below 1 GB.
    let largest = heats.iter().flat_map(|h| h.3.iter().filter_map(|c| c.peak_bytes)).max().unwrap_or(0);
    let (unit, per) = if largest < 1_000_000_000 { ("MB", 1e6) } else { ("GB", 1e9) };
    let mut panels = Vec::new();
    for (bi, t, metric, heat) in &heats {
        let models = set(heat.iter().map(|h| h.model.as_str()));
        for m in models {
            let cells = heat
                .iter()
                .filter(|h| h.model == m)
                .map(|h| {
                    let value = h.peak_bytes.map(|v| v as f64 / per);
                    let text = if h.oom {
                        "OOM".to_string()
                    } else {
                        value.map_or("n/a".into(), |v| format!("{v:.2} {unit}"))
                    };
                    let mut tip = format!("{t}{m} N={} B={} ({} cells)\n", h.seq_len, h.batch_size, h.cells.len());
                    match (h.peak_bytes, h.oom) {
                        (Some(v), oom) => {
                            let _ = write!(tip, "{:.3} GB ({v} bytes)", gigabytes(v));
                            if oom {
                                tip.push_str("\nout of memory in at least one cell");
                            }
                        }
                        (None, true) => tip.push_str("out of memory"),
                        (None, false) => tip.push_str("not measured"),
                    }
                    HeatCell {
                        row: ys.iter().position(|n| *n == h.seq_len).unwrap_or(0),
                        col: xs.iter().position(|b| *b == h.batch_size).unwrap_or(0),
                        value,
                        text,
                        oom: h.oom,
                        tip,
                        cell: h.cells.first().map(|&cell| CellId { bundle: *bi, cell }),
                    }
                })
                .collect();
            let what = match metric {
                MemoryMetric::Allocated => "allocated",
                MemoryMetric::Reserved => "reserved",
                MemoryMetric::Rss => "RSS",
            };
            panels.push(Panel { title: format!("{t}{} ({what})", short_model(m)), cells });
        }
    }
    if panels.is_empty() {
        return Err("no cell matches the filters".into());
    }
    notes.push(format!(
        "Largest peak over the diffusion steps K at each (N, B) (filter K to see one); {unit} = 10^{} bytes; the \
         colour bar spans the figure's smallest to largest value.",
        if unit == "MB" { 6 } else { 9 }
    ));
    Ok(Figure {
        title: format!("Memory: {}", metric_names.into_iter().collect::<Vec<_>>().join("; ")),
        plot: Plot::Heat {
            x: Axis::categorical("batch size B", xs.iter().map(|b| b.to_string()).collect()),
            y: Axis::categorical("sequence length N", ys.iter().map(|n| n.to_string()).collect()),
            panels,
            unit: unit.into(),
            center: None,
        },
    })
}

fn ar_timing(bundles: &[&LoadedBundle], f: &Filters, o: &Options) -> Result<Figure, String> {
    let mut series = Vec::new();
    let mut seqs = BTreeSet::new();
    for lb in bundles {
        seqs.extend(kept(lb, f).iter().filter(|c| c.cell.key.sampler == Sampler::ArGreedy).map(|c| c.cell.key.seq_len));
    }
    let seqs: Vec<u32> = seqs.into_iter().collect();
    for (bi, lb) in bundles.iter().enumerate() {
        let t = tag(bi, bundles.len());
        let cells = kept(lb, f);
        for a in ar_timings(&cells) {
            let c = &lb.bundle.cells[a.cell];
            let j = seqs.iter().position(|n| *n == c.key.seq_len).unwrap_or(0);
            let id = Some(CellId { bundle: bi, cell: a.cell });
            let name = short_model(&c.key.model);
            for (what, s, colour) in [("TTFT", a.ttft_ms, 2 * j), ("ITL", a.itl_ms, 2 * j + 1)] {
                let mark = Mark {
                    x: f64::from(c.key.batch_size),
                    y: s.median,
                    lo: Some(s.min),
                    hi: Some(s.max),
                    tip: format!("{}\nTTFT {}\nITL {}", key_text(&t, c), ms(&a.ttft_ms), ms(&a.itl_ms)),
                    cell: id,
                    label: None,
                };
                let label = format!("{t}{name} {what}, N={}", c.key.seq_len);
                push_mark(&mut series, label, colour, Style::Line, bi > 0, mark);
            }
        }
    }
    if series.is_empty() {
        return Err("no successful autoregressive cell with a prefill time matches the filters".into());
    }
    sort_marks(&mut series);
    Ok(Figure {
        title: "Autoregressive model: time to first token (TTFT) and inter-token latency (ITL)".into(),
        plot: Plot::Xy {
            x: Axis { pow2: o.log_x, ..Axis::numeric("batch size B", o.log_x) },
            y: Axis::numeric("median time (ms)", o.log_y),
            series,
            refs: Vec::new(),
            grid: None,
        },
    })
}

fn step_time(bundles: &[&LoadedBundle], f: &Filters, o: &Options, notes: &mut Vec<String>) -> Result<Figure, String> {
    let ch = filter_choices(bundles);
    let n = f.seq.or_else(|| ch.seqs.first().copied()).ok_or("no cells")?;
    if f.seq.is_none() {
        notes.push(format!("Showing N = {n} (the smallest; choose N in the filters for another length)."));
    }
    let mut series = Vec::new();
    let batches: Vec<u32> = ch.batches.clone();
    for (bi, lb) in bundles.iter().enumerate() {
        let t = tag(bi, bundles.len());
        let cells: Vec<CellRef> = kept(lb, f).into_iter().filter(|c| c.cell.key.seq_len == n).collect();
        for st in step_timings(&cells) {
            let c = &lb.bundle.cells[st.cell];
            let j = batches.iter().position(|b| *b == c.key.batch_size).unwrap_or(0);
            let mark = Mark {
                x: f64::from(st.steps),
                y: st.step_ms.median,
                lo: Some(st.step_ms.min),
                hi: Some(st.step_ms.max),
                tip: format!("{}\ntime per step {}", key_text(&t, c), ms(&st.step_ms)),
                cell: Some(CellId { bundle: bi, cell: st.cell }),
                label: None,
            };
            let label = format!("{t}{} B={}", series_label(c), c.key.batch_size);
            push_mark(&mut series, label, j, Style::Line, bi > 0, mark);
        }
    }
    if series.is_empty() {
        return Err("no successful diffusion cell with step times matches the filters".into());
    }
    sort_marks(&mut series);
    Ok(Figure {
        title: format!("Time per diffusion step (median over all steps and repetitions), N = {n}"),
        plot: Plot::Xy {
            x: Axis { pow2: true, ..Axis::numeric("diffusion steps K", true) },
            y: Axis::numeric("time per step (ms)", o.log_y),
            series,
            refs: Vec::new(),
            grid: None,
        },
    })
}

/// The message of the roofline view for bundles without the work counts.
pub const NO_ROOFLINE: &str = "No roofline data in this bundle: its repetitions do not record the weights read and \
     the FLOP count (schema 1.2 and later do), so the achieved bandwidth and FLOP rate cannot be shown.";

fn roofline(bundles: &[&LoadedBundle], f: &Filters, o: &Options, notes: &mut Vec<String>) -> Result<Figure, String> {
    if !bundles.iter().any(|lb| metrics::roofline::has_roofline(&lb.bundle)) {
        return Err(NO_ROOFLINE.into());
    }
    // Ceilings: what the user entered, else what the (first) bundle's run measured on its device.
    let recorded: Vec<(usize, &schema::bundle::DevicePeaks)> =
        bundles.first().map(|lb| metrics::roofline::recorded_peaks(&lb.bundle)).unwrap_or_default();
    let measured = recorded.first().map(|&(_, p)| p);
    let peak_bw = o.peak_bw_tbs.map(|v| v * 1e12).or(measured.map(|p| p.copy_bytes_per_s));
    let peak_flops = o.peak_tflops.map(|v| v * 1e12).or(measured.map(|p| p.matmul_flops_per_s));
    let mut pal = Palette::of(bundles, o);
    let mut series = Vec::new();
    let (mut x_lo, mut x_hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for (bi, lb) in bundles.iter().enumerate() {
        let t = tag(bi, bundles.len());
        for p in metrics::roofline::roofline_points(&kept(lb, f)) {
            let c = &lb.bundle.cells[p.cell];
            x_lo = x_lo.min(p.intensity);
            x_hi = x_hi.max(p.intensity);
            let mut tip = format!(
                "{}\narithmetic intensity {:.3} FLOP/byte\nachieved {:.4} TFLOP/s, {:.3} GB/s of weights\n{} FLOPs, \
                 {} bytes of weights read, L_e2e median {:.2} ms",
                key_text(&t, c),
                p.intensity,
                p.flops_per_s / 1e12,
                p.bytes_per_s / 1e9,
                p.flop_count,
                p.weights_read_bytes,
                p.e2e_ms
            );
            if let Some(roof) = metrics::roofline::attainable_flops_per_s(p.intensity, peak_bw, peak_flops) {
                let _ =
                    write!(tip, "\n{:.1}% of the roofline ({:.4} TFLOP/s)", 100.0 * p.flops_per_s / roof, roof / 1e12);
            }
            let mark = Mark {
                x: p.intensity,
                y: p.flops_per_s / 1e12,
                lo: None,
                hi: None,
                tip,
                cell: Some(CellId { bundle: bi, cell: p.cell }),
                label: None,
            };
            push_mark(&mut series, format!("{t}{}", series_label(c)), pal.colour(c), Style::Points, bi > 0, mark);
        }
    }
    if series.is_empty() {
        return Err("no successful cell with recorded work (weights read, FLOPs) matches the filters".into());
    }
    sort_marks(&mut series);
    if peak_bw.is_some() || peak_flops.is_some() {
        // The ceiling over the points' intensities (a factor 2 beyond them), through the ridge point.
        let (a, b) = (x_lo / 2.0, x_hi * 2.0);
        let mut xs = vec![a, b];
        if let (Some(bw), Some(fl)) = (peak_bw, peak_flops)
            && let Some(r) = metrics::roofline::ridge_intensity(bw, fl)
            && r > a
            && r < b
        {
            xs.insert(1, r);
        }
        let marks = xs
            .into_iter()
            .filter_map(|x| {
                let y = metrics::roofline::attainable_flops_per_s(x, peak_bw, peak_flops)? / 1e12;
                Some(Mark { x, y, lo: None, hi: None, tip: String::new(), cell: None, label: None })
            })
            .collect();
        let source = |entered: bool| if entered { "entered" } else { "measured" };
        let mut what = Vec::new();
        what.extend(peak_bw.map(|v| format!("{} TB/s {}", figure::fmt_num(v / 1e12), source(o.peak_bw_tbs.is_some()))));
        what.extend(
            peak_flops.map(|v| format!("{} TFLOP/s {}", figure::fmt_num(v / 1e12), source(o.peak_tflops.is_some()))),
        );
        series.insert(
            0,
            Series {
                label: format!("roofline ({})", what.join(", ")),
                colour: figure::FRONTIER,
                style: Style::Frontier,
                alt: false,
                marks,
                facet: 0,
            },
        );
        if let Some(p) = measured.filter(|_| o.peak_bw_tbs.is_none() || o.peak_tflops.is_none()) {
            let (i, _) = recorded[0];
            let device = &bundles[0].bundle.provenance.executions[i].device;
            notes.push(format!(
                "Ceilings measured by the run on its device ({}) before its first cell: copy bandwidth {} GB/s (read + \
                 write, a {} MiB device-to-device copy) and matmul rate {} TFLOP/s ({n}x{n}x{n}, {}), medians of {}; \
                 enter peaks above to override them.",
                device.name.as_deref().unwrap_or(&device.kind),
                figure::fmt_num(p.copy_bytes_per_s / 1e9),
                p.copy_bytes >> 20,
                figure::fmt_num(p.matmul_flops_per_s / 1e12),
                p.dtype,
                p.repetitions,
                n = p.matmul_size,
            ));
            // Other executions, or a compared bundle's run, may have measured other ceilings: only one roofline
            // is drawn.
            let others = bundles.iter().flat_map(|lb| metrics::roofline::recorded_peaks(&lb.bundle));
            if others.map(|(_, q)| q).any(|q| q != p) {
                notes.push(
                    "Other executions or bundles measured other ceilings; the main bundle's first are drawn (enter \
                     peaks above to compare every point with the same roofline)."
                        .into(),
                );
            }
        }
        if o.peak_bw_tbs.is_some() || o.peak_tflops.is_some() {
            notes.push("Ceilings you entered replace the measured ones.".into());
        }
    } else {
        notes.push(
            "Achieved rates without ceilings: this bundle does not record its device's peaks (runners before \
             format 1.4 did not measure them). Enter the peak bandwidth (TB/s) and peak FLOP rate (TFLOP/s) above \
             to draw the roofline."
                .into(),
        );
    }
    notes.push(
        "One point per successful cell kept by the filters (all B, N and K): analytic FLOPs and bytes of weights \
         read (metrics::roofline) over the median end-to-end latency."
            .into(),
    );
    Ok(Figure {
        title: "Roofline: achieved FLOP rate against arithmetic intensity".into(),
        plot: Plot::Xy {
            x: Axis::numeric("arithmetic intensity (FLOP per byte of weights read)", true),
            y: Axis::numeric("achieved FLOP rate (TFLOP/s)", true),
            series,
            refs: Vec::new(),
            grid: None,
        },
    })
}

/// The quality metric shown: the chosen one if a bundle has it, else the one the first bundle's run defines
/// S_parity with (`quality.parity_metric`, scored by its primary evaluator), else the first any bundle has.
pub fn quality_metric(bundles: &[&LoadedBundle], o: &Options) -> Option<(String, Direction)> {
    let all: Vec<&crate::bundle::QualityValue> = bundles.iter().flat_map(|b| b.quality.iter().flatten()).collect();
    let run_metric = bundles.first().and_then(|b| metrics::parity::ParityOptions::from_config(&b.bundle)).map(|p| {
        match p.evaluator {
            Some(e) => format!("{} [{e}]", p.metric),
            None => p.metric,
        }
    });
    let find = |m: &String| all.iter().find(|q| q.metric == *m);
    let pick =
        o.metric.as_ref().and_then(find).or_else(|| run_metric.as_ref().and_then(find)).or_else(|| all.first())?;
    Some((pick.metric.clone(), pick.direction))
}

/// Every quality metric name of the loaded bundles.
pub fn quality_metrics(bundles: &[&LoadedBundle]) -> Vec<String> {
    set(bundles.iter().flat_map(|b| b.quality.iter().flatten()).map(|q| q.metric.as_str()))
        .into_iter()
        .map(str::to_string)
        .collect()
}

fn quality_of(lb: &LoadedBundle, cell: usize, metric: &str) -> Option<f64> {
    lb.quality.get(cell)?.iter().find(|q| q.metric == metric).map(|q| q.value)
}

/// Quality points (cells with the metric and a latency) of one bundle at (B, N), diffusion then AR.
fn quality_points(lb: &LoadedBundle, f: &Filters, metric: &str, b: u32, n: u32) -> Vec<QualityPoint> {
    kept(lb, f)
        .into_iter()
        .filter(|c| c.cell.key.batch_size == b && c.cell.key.seq_len == n && c.cell.status == CellStatus::Ok)
        .filter_map(|c| {
            Some(QualityPoint {
                cell: c.index,
                steps: derive::cell_steps(c.cell),
                e2e_ms: c.summary.e2e_ms?.median,
                quality: quality_of(lb, c.index, metric)?,
            })
        })
        .collect()
}

fn direction_text(d: Direction) -> &'static str {
    match d {
        Direction::LowerIsBetter => "lower is better",
        Direction::HigherIsBetter => "higher is better",
    }
}

fn pareto(bundles: &[&LoadedBundle], f: &Filters, o: &Options, notes: &mut Vec<String>) -> Result<Figure, String> {
    let (metric, dir) = quality_metric(bundles, o).ok_or(NO_QUALITY)?;
    let ((b, n), note) = shape(bundles, f).ok_or("no cells")?;
    notes.extend(note);
    let mut pal = Palette::of(bundles, o);
    let mut series = Vec::new();
    // The x of a point: its latency, or (hardware-independent) its forwards or tokens per forward per sequence.
    // The frontier is taken over latency or forwards (fewer is better; tokens per forward is N_out / forwards).
    let px = o.pareto_x;
    let x_of = |lb: &LoadedBundle, p: &QualityPoint| {
        let s = &lb.summaries[p.cell];
        match px {
            ParetoX::Latency => Some(p.e2e_ms),
            ParetoX::Forwards => s.forward_passes.map(|f| f.median),
            ParetoX::TokensPerForward => s.tokens_per_forward,
        }
    };
    for (bi, lb) in bundles.iter().enumerate() {
        let t = tag(bi, bundles.len());
        let mut pts = quality_points(lb, f, &metric, b, n);
        let forwards = |p: &QualityPoint| lb.summaries[p.cell].forward_passes.map(|f| f.median);
        if px != ParetoX::Latency {
            // Points of bundles that did not record forwards have no place on these axes.
            pts.retain(|p| forwards(p).is_some());
            pts.iter_mut().for_each(|p| p.e2e_ms = forwards(p).unwrap_or(f64::NAN));
        }
        let view = pareto_view(&pts, dir);
        let front: Vec<Mark> = view
            .front
            .iter()
            .map(|&i| {
                let p = &pts[i];
                let x = x_of(lb, p).unwrap_or(f64::NAN);
                Mark { x, y: p.quality, lo: None, hi: None, tip: String::new(), cell: None, label: None }
            })
            .collect();
        if !front.is_empty() {
            series.push(Series {
                label: match o.multiples {
                    true => format!("{t}Pareto frontier"),
                    false => format!("{t}Pareto frontier ({} points)", front.len()),
                },
                colour: figure::FRONTIER,
                style: Style::Frontier,
                alt: bi > 0,
                marks: front,
                facet: 0,
            });
        }
        for (i, p) in pts.iter().enumerate() {
            let c = &lb.bundle.cells[p.cell];
            let on = view.front.contains(&i);
            let s = &lb.summaries[p.cell];
            // Only what was measured. The tokens per forward are pooled over the runs (N_out / the mean forwards),
            // so the mean is shown beside the median the x axis uses: they differ when prompts differ per run.
            let mut measured = Vec::new();
            if let Some(e) = s.e2e_ms {
                measured.push(format!("L_e2e median {:.2} ms", e.median));
            }
            if let (Some(f), Some(tpf)) = (s.forward_passes, s.tokens_per_forward) {
                measured.push(format!(
                    "forwards per run median {} (mean {:.1}), {tpf:.2} tokens per forward",
                    f.median, f.mean
                ));
            }
            let mut measured = measured.join(", ");
            if !measured.is_empty() {
                measured.push('\n');
            }
            let mark = Mark {
                x: x_of(lb, p).unwrap_or(f64::NAN),
                y: p.quality,
                lo: None,
                hi: None,
                tip: format!(
                    "{}\n{measured}{metric} {:.4} ({})\n{}",
                    key_text(&t, c),
                    p.quality,
                    direction_text(dir),
                    if on { "on the Pareto frontier" } else { "dominated" }
                ),
                cell: Some(CellId { bundle: bi, cell: p.cell }),
                label: p.steps.map(|k| point_label(c, k)),
            };
            let (label, style) = match p.steps {
                Some(_) => (format!("{t}{}", series_label(c)), Style::Line),
                None => (format!("{t}{} (autoregressive)", short_model(&c.key.model)), Style::Points),
            };
            push_mark(&mut series, label, pal.colour(c), style, bi > 0, mark);
        }
    }
    if series.is_empty() {
        return Err(format!("no cell at B = {b}, N = {n} has a value of {metric}"));
    }
    // Diffusion curves follow the x axis (K is also the latency order).
    for s in series.iter_mut().filter(|s| s.style == Style::Line) {
        s.marks.sort_by(|a, b| a.x.total_cmp(&b.x));
    }
    notes.push(format!("Quality metric: {metric} ({}).", direction_text(dir)));
    let (what, axis) = match px {
        ParetoX::Latency => ("latency", "median end-to-end latency L_e2e (ms)"),
        ParetoX::Forwards => ("forward passes", "forward passes per run (median; fewer is cheaper)"),
        ParetoX::TokensPerForward => ("tokens per forward", "tokens per forward pass and sequence (more is cheaper)"),
    };
    Ok(Figure {
        title: format!("Pareto frontier: {what} vs {metric}{}", shape_text(o, b, n)),
        plot: Plot::Xy {
            x: Axis::numeric(axis, o.log_x),
            y: Axis::numeric(format!("{metric} ({})", direction_text(dir)), o.log_y),
            series,
            refs: Vec::new(),
            grid: None,
        },
    })
}

/// The answer, from the main bundle's parity records ([`metrics::parity::parity`], the numbers `report` prints):
/// one sentence stating the finding, and the verdict as one heat map, a panel per diffusion series (columns B, rows
/// N): each cell says the speedup at parity and is coloured by its log2 on a scale diverging at 1x (blue faster,
/// red slower; grey where parity was not reached); the tooltip names S_parity and the interval. `Err` when nothing
/// measured quality.
pub fn answer(bundles: &[&LoadedBundle], o: &Options) -> Result<(String, Figure), String> {
    let (metric, _) = quality_metric(bundles, o).ok_or(NO_QUALITY)?;
    let lb = bundles.first().ok_or("no bundle")?;
    let ch = filter_choices(&[lb]);
    let mut panels: Vec<Panel> = Vec::new();
    // (speedup, where) of every cell with one, and the number of (series, N, B) judged.
    let (mut found, mut judged) = (Vec::new(), 0);
    for r in parity_records(lb, &metric).iter() {
        let Some(cell) = record_cell(lb, r) else { continue };
        let series = format!("{} vs {}", series_label(cell), short_model(&r.ar_model));
        // Panels side by side: a short title (model and series), the whole label in each tooltip.
        let title = match r.variant() {
            Some(v) => format!("{} {v}", short_model(&r.diffusion_model)),
            None => format!("{} {}", short_model(&r.diffusion_model), sampler_label(r.sampler)),
        };
        let i = panels.iter().position(|p| p.title == title).unwrap_or(panels.len());
        if i == panels.len() {
            panels.push(Panel { title, cells: Vec::new() });
        }
        for row in &r.speedups {
            judged += 1;
            let (n, b) = (r.seq_len, row.batch_size);
            let e = row.speedup;
            if let Some(e) = e {
                found.push((e.value, format!("{series}, N = {n}, B = {b}")));
            }
            panels[i].cells.push(HeatCell {
                row: ch.seqs.iter().position(|&y| y == n).unwrap_or(0),
                col: ch.batches.iter().position(|&x| x == b).unwrap_or(0),
                value: e.map(|e| e.value.log2()),
                text: e.map_or("no parity".into(), |e| format!("{:.2}x", e.value)),
                oom: false,
                tip: format!(
                    "{series}\nN = {n}, B = {b}\nS_parity: {}\nspeedup at parity: {}",
                    metrics::parity::s_parity_text(r),
                    e.map_or("-".into(), |e| match (e.low, e.high) {
                        (Some(l), Some(h)) => format!("{:.3}x [{l:.3}, {h:.3}]", e.value),
                        _ => format!("{:.3}x", e.value),
                    })
                ),
                cell: None,
            });
        }
    }
    if panels.is_empty() {
        return Err("no diffusion series against an AR model has quality values".into());
    }
    let fastest = found.iter().max_by(|a, b| a.0.total_cmp(&b.0));
    let slowest = found.iter().min_by(|a, b| a.0.total_cmp(&b.0));
    let faster = found.iter().filter(|f| f.0 > 1.0).count();
    let sentence = match (slowest, fastest) {
        (Some(lo), Some(hi)) => format!(
            "At the AR model's quality ({metric}), the diffusion model is faster in {faster} of the {judged} \
             (series, N, B) judged: the speedup at parity ranges from {:.2}x ({}) to {:.2}x ({}); where a cell \
             says no parity, the diffusion model did not reach the AR model's quality at any step count tried.",
            lo.0, lo.1, hi.0, hi.1
        ),
        _ => format!(
            "The diffusion model reaches the AR model's quality ({metric}) in none of the {judged} (series, N, B) \
             judged: there is no speedup at parity to report."
        ),
    };
    let figure = Figure {
        title: "Speedup at parity, L_e2e(AR) / L_e2e(diffusion at S_parity)".into(),
        plot: Plot::Heat {
            x: Axis::categorical("batch size B", ch.batches.iter().map(|b| b.to_string()).collect()),
            y: Axis::categorical("sequence length N", ch.seqs.iter().map(|n| n.to_string()).collect()),
            panels,
            unit: "speedup".into(),
            center: Some(0.0),
        },
    };
    Ok((sentence, figure))
}

/// One row of the S_parity panel: a diffusion model/sampler against the AR model at one (B, N).
#[derive(Debug, Clone, PartialEq)]
pub struct ParityRow {
    /// `[A] ` / `[B] ` or empty.
    pub tag: String,
    /// Diffusion series label.
    pub diffusion: String,
    /// AR model.
    pub ar: String,
    /// Batch size.
    pub batch: u32,
    /// Sequence length.
    pub seq: u32,
    /// The derived panel.
    pub panel: ParityPanel,
    /// S_parity in words ([`metrics::parity::s_parity_text`], as `report` writes it).
    pub s_parity: String,
    /// Key of the matched diffusion cell.
    pub matched_key: Option<String>,
    /// Key of the AR cell.
    pub ar_key: String,
    /// Entropy far below the AR model's at S_parity (needs the `unigram_entropy` metric).
    pub entropy_warning: bool,
    /// 95% bootstrap intervals of S_parity and of this B's speedup, as text (needs per-prompt values).
    pub bootstrap: Option<String>,
}

/// The bundle's S_parity records for a metric label of the explorer (`metric` or `metric [evaluator]`), with the
/// bootstrap settings of the run's config (1000 resamples, seed 0 without one).
/// Computed once per bundle and metric (the page redraws the table on every change of its state).
fn parity_records(lb: &LoadedBundle, label: &str) -> std::sync::Arc<Vec<metrics::parity::ParityRecord>> {
    lb.parity_cache.get_or(label, || {
        let Some(q) = lb.bundle.cells.iter().flat_map(|c| &c.quality).find(|q| q.label() == label) else {
            return Vec::new();
        };
        let opts = metrics::parity::ParityOptions::for_metric(&lb.bundle, q.metric.clone(), q.evaluator.clone());
        metrics::parity::parity(&lb.bundle, &opts)
    })
}

/// The intervals of one batch size's row from its record.
fn bootstrap_text(r: &metrics::parity::ParityRecord, b: u32) -> Option<String> {
    let i = r.s_parity_interval?;
    let k = |x: Option<u32>| x.map_or("not reached".to_string(), |k| k.to_string());
    let mut t = format!("S_parity [{}, {}]", k(i.low), k(i.high));
    if let Some(f) = r.reached_fraction {
        let _ = write!(t, ", reached in {:.0}% of resamples", f * 100.0);
    }
    if let Some((lo, hi)) =
        r.speedups.iter().find(|s| s.batch_size == b).and_then(|s| s.speedup).and_then(|e| Some((e.low?, e.high?)))
    {
        let _ = write!(t, "; speedup [{lo:.2}x, {hi:.2}x]");
    }
    Some(t)
}

/// A diffusion cell of a record's series at its N (for the series' label and the filters).
fn record_cell<'a>(lb: &'a LoadedBundle, r: &metrics::parity::ParityRecord) -> Option<&'a Cell> {
    lb.bundle.cells.iter().find(|c| {
        c.key.seq_len == r.seq_len
            && c.key.model == r.diffusion_model
            && c.key.sampler == r.sampler
            && c.key.block_length == r.block_length
            && c.key.variant() == r.variant()
    })
}

/// The S_parity rows: per bundle, per (B, N) kept (N fixed by the filter or the smallest), per diffusion
/// series; `Err` with the reason when there is no quality data. Every number comes from the bundle's parity
/// records ([`metrics::parity::parity`], as `report` and the stored `bundle.parity`), read per batch size by
/// [`derive::parity_panel`]: the explorer never computes S_parity itself.
pub fn parity_rows(bundles: &[&LoadedBundle], f: &Filters, o: &Options) -> Result<(String, Vec<ParityRow>), String> {
    let (metric, dir) = quality_metric(bundles, o).ok_or(NO_QUALITY)?;
    let mut rows = Vec::new();
    for (bi, lb) in bundles.iter().enumerate() {
        let t = tag(bi, bundles.len());
        let recs = parity_records(lb, &metric);
        let kept_cells = kept(lb, f);
        let is_kept = |key: &schema::CellKey| kept_cells.iter().any(|c| c.cell.key == *key);
        let shapes = set(kept_cells.iter().map(|c| (c.cell.key.seq_len, c.cell.key.batch_size)));
        for (n, b) in shapes {
            for r in recs.iter().filter(|r| r.seq_len == n) {
                let Some(panel) = derive::parity_panel(r, b, &lb.bundle.cells) else { continue };
                let Some(series) = record_cell(lb, r) else { continue };
                let ar_cell = &lb.bundle.cells[panel.ar.cell];
                // The filters keep the AR cell and at least one cell of the diffusion series at this (B, N).
                let series_kept = kept_cells.iter().any(|c| {
                    c.cell.key.batch_size == b
                        && c.cell.key.seq_len == n
                        && c.cell.key.model == r.diffusion_model
                        && c.cell.key.sampler == r.sampler
                        && c.cell.key.variant() == r.variant()
                });
                if !is_kept(&ar_cell.key) || !series_kept {
                    continue;
                }
                let entropy_warning = panel.matched.is_some_and(|m| {
                    match (quality_of(lb, m.cell, "unigram_entropy"), quality_of(lb, panel.ar.cell, "unigram_entropy"))
                    {
                        (Some(d), Some(a)) => derive::entropy_warning(d, a),
                        _ => false,
                    }
                });
                rows.push(ParityRow {
                    s_parity: metrics::parity::s_parity_text(r),
                    bootstrap: bootstrap_text(r, b),
                    tag: t.clone(),
                    diffusion: series_label(series),
                    ar: short_model(&ar_cell.key.model).to_string(),
                    batch: b,
                    seq: n,
                    matched_key: panel.matched.map(|m| lb.bundle.cells[m.cell].key.to_string()),
                    ar_key: ar_cell.key.to_string(),
                    panel,
                    entropy_warning,
                });
            }
        }
    }
    if rows.is_empty() {
        return Err(format!("no (B, N) with both an AR and a diffusion value of {metric} matches the filters"));
    }
    Ok((format!("{metric} ({})", direction_text(dir)), rows))
}

impl ParityRow {
    /// The interval as text: `(32, 64]`.
    pub fn interval_text(&self) -> String {
        match self.panel.interval {
            Some((Some(lo), hi)) => format!("({lo}, {hi}]"),
            Some((None, hi)) => format!("<= {hi} (smallest K tried)"),
            None => "-".into(),
        }
    }

    /// Speedup as text.
    pub fn speedup_text(&self) -> String {
        self.panel.speedup.map_or("-".into(), |s| format!("{s:.2}x"))
    }

    /// The verdict.
    pub fn verdict(&self) -> &'static str {
        match self.panel.viable {
            Some(true) => "viable (speedup > 1)",
            Some(false) => "not viable (slower at parity)",
            None => "not viable (parity not reached)",
        }
    }
}

fn quality_steps(
    bundles: &[&LoadedBundle],
    f: &Filters,
    o: &Options,
    notes: &mut Vec<String>,
) -> Result<Figure, String> {
    let (metric, dir) = quality_metric(bundles, o).ok_or(NO_QUALITY)?;
    let ((b, n), note) = shape(bundles, f).ok_or("no cells")?;
    notes.extend(note);
    let mut pal = Palette::of(bundles, o);
    let (mut series, mut refs) = (Vec::new(), Vec::new());
    for (bi, lb) in bundles.iter().enumerate() {
        let t = tag(bi, bundles.len());
        let pts = quality_points(lb, f, &metric, b, n);
        let ar = pts.iter().find(|p| p.steps.is_none()).copied();
        if let Some(a) = ar {
            let model = short_model(&lb.bundle.cells[a.cell].key.model);
            refs.push(RefLine {
                label: format!("{t}{model} (autoregressive){}", value_text(o, || format!("{:.4}", a.quality))),
                value: a.quality,
                vertical: false,
                colour: figure::AR,
                alt: bi > 0,
                facet: 0,
            });
        }
        for p in pts.iter().filter(|p| p.steps.is_some()) {
            let c = &lb.bundle.cells[p.cell];
            let mark = Mark {
                x: f64::from(p.steps.unwrap_or(1)),
                y: p.quality,
                lo: None,
                hi: None,
                tip: format!(
                    "{}\n{metric} {:.4} ({})\nL_e2e median {:.2} ms",
                    key_text(&t, c),
                    p.quality,
                    direction_text(dir),
                    p.e2e_ms
                ),
                cell: Some(CellId { bundle: bi, cell: p.cell }),
                label: c.key.threshold.map(|th| format!("t={th}")),
            };
            push_mark(&mut series, format!("{t}{}", series_label(c)), pal.colour(c), Style::Line, bi > 0, mark);
        }
        if let Some(a) = ar {
            // S_parity of each diffusion series drawn here, from the bundle's parity records.
            let ar_model = &lb.bundle.cells[a.cell].key.model;
            let recs = parity_records(lb, &metric);
            for r in recs.iter().filter(|r| r.seq_len == n && r.ar_model == *ar_model) {
                let drawn = pts.iter().any(|p| {
                    let k = &lb.bundle.cells[p.cell].key;
                    p.steps.is_some()
                        && k.model == r.diffusion_model
                        && k.sampler == r.sampler
                        && k.variant() == r.variant()
                });
                if let (true, Parity::Reached { steps }) = (drawn, r.outcome) {
                    let label = match r.parity_threshold {
                        _ if o.multiples => format!("{t}S_parity"),
                        Some(th) => format!("{t}S_parity = {steps} forwards (threshold {th})"),
                        None => format!("{t}S_parity = {steps}"),
                    };
                    refs.push(RefLine {
                        label,
                        value: f64::from(steps),
                        vertical: true,
                        colour: 5,
                        alt: bi > 0,
                        facet: 0,
                    });
                }
            }
        }
    }
    if series.is_empty() {
        return Err(format!("no diffusion cell at B = {b}, N = {n} has a value of {metric}"));
    }
    sort_marks(&mut series);
    Ok(Figure {
        title: format!("{metric} vs diffusion steps{}", shape_text(o, b, n)),
        plot: Plot::Xy {
            x: steps_axis(&series),
            y: Axis::numeric(format!("{metric} ({})", direction_text(dir)), o.log_y),
            series,
            refs,
            grid: None,
        },
    })
}

// ---- the table of cells and its CSV ---------------------------------------------------------------------

/// Columns of the cell table and the CSV.
pub const COLUMNS: [&str; 14] = [
    "bundle",
    "model",
    "sampler",
    "K",
    "B",
    "N",
    "status",
    "e2e_ms_median",
    "tokens_per_s_median",
    "bytes_per_s_median",
    "ttft_ms_median",
    "itl_ms_median",
    "step_ms_median",
    "peak_memory_gb",
];

/// One row of the cell table: display text per column and a sort key per column.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Which cell.
    pub id: CellId,
    /// Text per column ([`COLUMNS`]).
    pub text: Vec<String>,
    /// Number per numeric column (NaN when absent), for sorting.
    pub num: Vec<f64>,
    /// Status state (`ok`, `oom`, ...), for styling.
    pub state: &'static str,
}

fn status_text(s: &CellStatus) -> (&'static str, String) {
    match s {
        CellStatus::Ok => ("ok", "ok".into()),
        CellStatus::Oom { message } => ("oom", format!("oom: {message}")),
        CellStatus::Error { message } => ("error", format!("error: {message}")),
        CellStatus::Skipped { reason } => ("skipped", format!("skipped: {reason}")),
    }
}

/// The rows of the kept cells of every loaded bundle.
pub fn rows(bundles: &[&LoadedBundle], f: &Filters) -> Vec<Row> {
    let mut out = Vec::new();
    for (bi, lb) in bundles.iter().enumerate() {
        let name = lb.source.clone();
        for c in kept(lb, f) {
            let k = &c.cell.key;
            let s = c.summary;
            let med = |x: Option<Summary>| x.map_or(f64::NAN, |v| v.median);
            let mem = s.peak_allocated_bytes.or(s.peak_rss_bytes).map_or(f64::NAN, gigabytes);
            let nums = [
                f64::NAN,
                f64::NAN,
                f64::NAN,
                k.steps.map_or(f64::NAN, f64::from),
                f64::from(k.batch_size),
                f64::from(k.seq_len),
                f64::NAN,
                med(s.e2e_ms),
                med(s.tokens_per_s),
                med(s.bytes_per_s),
                med(s.prefill_ms),
                med(s.itl_ms),
                med(s.step_ms),
                mem,
            ];
            let (state, status) = status_text(&c.cell.status);
            let num_text = |v: f64, digits: usize| if v.is_nan() { String::new() } else { format!("{v:.digits$}") };
            let text = vec![
                name.clone(),
                k.model.clone(),
                match k.variant().filter(|v| *v != SamplerVariant::Reference) {
                    Some(v) => format!("{} {v}", sampler_name(k.sampler)),
                    None => sampler_name(k.sampler).to_string(),
                },
                match (k.steps, k.threshold) {
                    (None, Some(t)) => format!("t={t}"),
                    (k, _) => k.map(|v| v.to_string()).unwrap_or_default(),
                },
                k.batch_size.to_string(),
                k.seq_len.to_string(),
                status,
                num_text(nums[7], 3),
                num_text(nums[8], 2),
                num_text(nums[9], 2),
                num_text(nums[10], 3),
                num_text(nums[11], 4),
                num_text(nums[12], 4),
                num_text(nums[13], 3),
            ];
            out.push(Row { id: CellId { bundle: bi, cell: c.index }, text, num: nums.to_vec(), state });
        }
    }
    out
}

/// Sorts rows by column `col` (numbers numerically, absent last; text lexically).
pub fn sort_rows(rows: &mut [Row], col: usize, descending: bool) {
    rows.sort_by(|a, b| {
        let (x, y) = (a.num[col], b.num[col]);
        let ord = if x.is_nan() && y.is_nan() {
            a.text[col].cmp(&b.text[col])
        } else if x.is_nan() {
            return std::cmp::Ordering::Greater;
        } else if y.is_nan() {
            return std::cmp::Ordering::Less;
        } else {
            x.total_cmp(&y)
        };
        if descending { ord.reverse() } else { ord }
    });
}

/// CSV (RFC 4180) of the rows, with a header line.
pub fn csv(rows: &[Row]) -> String {
    let field = |s: &str| {
        if s.contains([',', '"', '\n', '\r']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() }
    };
    let mut out = COLUMNS.join(",");
    out.push('\n');
    for r in rows {
        out.push_str(&r.text.iter().map(|t| field(t)).collect::<Vec<_>>().join(","));
        out.push('\n');
    }
    out
}

/// The details of one cell (shown when a point or a row is clicked): label/value rows.
pub fn cell_details(lb: &LoadedBundle, cell: usize) -> Vec<(String, String)> {
    let Some(c) = lb.bundle.cells.get(cell) else { return Vec::new() };
    let s = &lb.summaries[cell];
    let k = &c.key;
    let mut out = vec![
        ("bundle".to_string(), lb.source.clone()),
        ("cell".into(), format!("#{cell}: {k}")),
        ("sampler".into(), sampler_name(k.sampler).into()),
        ("prompt / output tokens".into(), format!("{} / {}", k.prompt_tokens, k.output_tokens)),
        ("status".into(), status_text(&c.status).1),
        ("repetitions (warm-up)".into(), format!("{} ({})", c.repetitions.len(), c.warmup_runs)),
    ];
    let mut sum = |name: &str, v: Option<Summary>| {
        if let Some(v) = v {
            out.push((name.to_string(), format!("{} (mean {:.3}, std {:.3})", ms(&v), v.mean, v.std)));
        }
    };
    sum("L_e2e", s.e2e_ms);
    sum("TTFT (prefill)", s.prefill_ms);
    sum("ITL", s.itl_ms);
    sum("first block", s.first_block_ms);
    sum("time per step", s.step_ms);
    if let Some(t) = s.tokens_per_s {
        out.push(("tokens/s".into(), format!("median {:.2} (min {:.2}, max {:.2})", t.median, t.min, t.max)));
    }
    if let Some(t) = s.bytes_per_s {
        out.push(("bytes/s".into(), format!("median {:.2} (min {:.2}, max {:.2})", t.median, t.min, t.max)));
    }
    if let Some(t) = s.tokens_per_forward {
        out.push(("tokens per forward".into(), format!("{t:.3}")));
    }
    for (name, v) in [
        ("peak allocated", s.peak_allocated_bytes),
        ("peak reserved", s.peak_reserved_bytes),
        ("peak RSS (process)", s.peak_rss_bytes),
    ] {
        if let Some(v) = v {
            out.push((name.into(), format!("{:.3} GB ({v} bytes)", gigabytes(v))));
        }
    }
    for q in lb.quality.get(cell).into_iter().flatten() {
        out.push((format!("quality: {}", q.metric), format!("{} ({})", q.value, direction_text(q.direction))));
    }
    out
}
