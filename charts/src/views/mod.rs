//! The views of the explorer and of `dllm-bench figures`, without any browser API (so they are tested natively).
//!
//! Every number comes from `metrics::derive` (summaries, throughput, memory, TTFT/ITL, step time, Pareto
//! frontier, S_parity); these modules pick the cells the filters keep and lay the numbers out as [`Figure`]s,
//! S_parity rows and table rows. This one dispatches a view to its chart family and draws small multiples; the
//! families are its modules (latency, throughput, memory, timing, roofline, quality, Pareto, the answer), beside
//! the options, the filter choices, the series' labels and colours, the S_parity rows, the two stacks side by side
//! (`stacks`: two bundles of the same cells, `metrics::compare`) and the table with its CSV.

mod answer;
mod choices;
mod energy;
mod latency;
mod memory;
mod options;
mod pareto;
mod parity;
mod quality;
mod roofline;
mod series;
mod stacks;
mod table;
mod throughput;
mod timing;

pub use answer::answer;
pub use choices::{FilterChoices, filter_choices, kept, shape};
pub use energy::has_energy;
pub use options::{Filters, Options, ParetoX, ViewKind};
pub use parity::{ParityRow, parity_not_drawn, parity_rows};
pub use quality::{quality_metric, quality_metrics};
pub use roofline::NO_ROOFLINE;
pub use series::{sampler_name, short_model};
pub use stacks::{StackArmRow, StackPanel, StackSpeedupRow, stack_comparison};
pub use table::{COLUMNS, CSV_EXTRA_COLUMNS, Row, cell_details, csv, download_name, rows, sort_rows};
pub use throughput::throughput_scaling;

use schema::{Cell, CellStatus, Sampler};

use crate::bundle::LoadedBundle;
use crate::figure::{self, Figure, Plot, RefLine, Series};

use latency::latency;
use memory::memory;
use pareto::pareto;
use quality::quality_steps;
use roofline::roofline;
use throughput::throughput;
use timing::{ar_timing, step_time};

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
    // Energy only where a bundle measured it (a deep link's `energy=1` on a bundle without it shows the latencies).
    let effective;
    let o = match o.energy && !has_energy(bundles) {
        true => {
            effective = Options { energy: false, ..o.clone() };
            &effective
        }
        false => o,
    };
    let figure = match view {
        ViewKind::Latency | ViewKind::Pareto | ViewKind::QualitySteps | ViewKind::Throughput => match o.multiples {
            true => multiples(view, bundles, f, o, &mut notes),
            false => per_shape(view, bundles, f, o, &mut notes),
        },
        ViewKind::Memory => memory(bundles, f, o, &mut notes),
        ViewKind::ArTiming => ar_timing(bundles, f, o, &mut notes),
        ViewKind::StepTime => step_time(bundles, f, o, &mut notes),
        // The answer's chart: the verdict per (N, B) and series, or the latencies when nothing measured quality.
        // The answer first: the finding in one sentence (the first note), the verdict per series and (N, B) as the
        // chart; the latencies when nothing measured quality.
        ViewKind::Answer => match answer(bundles, o) {
            Ok((sentence, verdict)) => {
                notes.push(sentence);
                let cells = match &verdict.plot {
                    Plot::Heat { panels, .. } => panels.iter().flat_map(|p| &p.cells).collect::<Vec<_>>(),
                    _ => Vec::new(),
                };
                let baseline = cells.iter().any(|c| c.text == answer::NO_BASELINE);
                let marked = cells.iter().any(|c| c.text.ends_with(answer::LOW_ENTROPY_MARK));
                let unsure = cells
                    .iter()
                    .any(|c| c.text.trim_end_matches(answer::LOW_ENTROPY_MARK).ends_with(answer::UNCERTAIN_MARK));
                notes.push(format!(
                    "Left (above, on a narrow screen), each cell: the speedup at parity; blue: faster at equal \
                         quality, red: slower; grey (hatched): no parity (not reached) or not measured (reached, but \
                         the diffusion cell at S_parity has no timing){}, written {} where the words do not fit; the \
                         tooltip names S_parity, its 95% interval and why.{}{} Right (below): the Pareto frontier \
                         of quality against latency at the shape the filters pick. Detail: the S_parity and Pareto \
                         frontier tabs.",
                    if baseline { " or no baseline (the autoregressive cell at that B did not finish)" } else { "" },
                    short_forms_text(baseline),
                    match unsure {
                        true =>
                            " Warning: a speedup marked ? has an uncertain S_parity (parity was not reached in \
                                 every bootstrap resample; its tooltip says in how many).",
                        false => "",
                    },
                    match marked {
                        true =>
                            " Warning: a speedup marked * may owe its parity to repetitive text (the diffusion \
                                 output's unigram entropy at S_parity is far below the AR model's; its tooltip says \
                                 by how much).",
                        false => "",
                    }
                ));
                if bundles.len() > 1 {
                    notes.push(
                        "The verdict is the main bundle's ([A]); the S_parity tab has both bundles' rows, the Pareto \
                         frontier beside it draws both, and below, the two stacks side by side say how much of the \
                         speedup the implementations carry."
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
    // Under the timing charts, what the run measured that their bars and medians cannot show (one repetition: no
    // spread; fewer warm-ups than the study's), as `report` and `figures` say it.
    if matches!(view, ViewKind::Latency | ViewKind::Throughput | ViewKind::ArTiming | ViewKind::StepTime) {
        for (bi, b) in bundles.iter().enumerate() {
            for (headline, rest) in metrics::derive::run_cautions(&b.bundle) {
                notes.push(format!("{}{headline}{rest}", series::tag(bi, bundles.len())));
            }
        }
    }
    // The figure itself says so when any of its numbers come from synthetic weights (the PNG export, `figures`).
    let figure = figure.map(|mut fig| {
        if bundles.iter().any(|b| b.synthetic_weights) {
            fig.label_synthetic();
        }
        fig
    });
    ChartView { figure, notes }
}

/// The heat map's short forms in words: `n/p (no parity) and n/m (not measured)`, as [`figure::SHORT_FORMS`] has
/// them (the answer's verdicts only: `no data` has no cell there), with `n/b (no baseline)` where `baseline` (the
/// figure has such a cell).
fn short_forms_text(baseline: bool) -> String {
    let wanted =
        |long: &str| ["no parity", "not measured"].contains(&long) || (baseline && long == answer::NO_BASELINE);
    let forms = figure::SHORT_FORMS.iter().filter(|(long, _)| wanted(long));
    let mut words: Vec<String> = forms.map(|(long, short)| format!("{short} ({long})")).collect();
    let last = words.pop().unwrap_or_default();
    match words.is_empty() {
        true => last,
        false => format!("{} and {last}", words.join(", ")),
    }
}

/// The one shape (B, N) a view of one shape draws (latency, quality vs steps, Pareto): [`choices::shape`]'s, with its
/// note (which shape, where the filters leave several) and the note naming the cells at it that are not drawn
/// ([`not_drawn`]) added to `notes`.
pub(super) fn drawn_shape(
    bundles: &[&LoadedBundle],
    f: &Filters,
    notes: &mut Vec<String>,
) -> Result<(u32, u32), String> {
    let ((b, n), note) = choices::shape(bundles, f).ok_or("no cells")?;
    notes.extend(note);
    let at = |c: &schema::Cell| c.key.batch_size == b && c.key.seq_len == n;
    notes.extend(not_drawn(bundles, f, &format!("B = {b}, N = {n}"), &at, (false, false)));
    Ok((b, n))
}

/// The note naming the cells a view leaves out because they did not finish (out of memory, failed, skipped), among
/// those the filters keep that `at` picks (the view's shape, `shape` in words: `B = 4, N = 256`); `None` when
/// every such cell ran. Each is named as the view's legend and points name it (`K=64`), with its B (`batch`: a view
/// over every B) and N (`seq`), and its state: a chart that silently lost its out-of-memory cells reads as if they
/// were never planned.
pub(super) fn not_drawn(
    bundles: &[&LoadedBundle],
    f: &Filters,
    shape: &str,
    at: &dyn Fn(&Cell) -> bool,
    (batch, seq): (bool, bool),
) -> Option<String> {
    const LISTED: usize = 12;
    let mut names = Vec::new();
    for (bi, lb) in bundles.iter().enumerate() {
        let t = series::tag(bi, bundles.len());
        for c in lb.bundle.cells.iter().filter(|c| c.status != CellStatus::Ok && f.keeps(&lb.bundle, c) && at(c)) {
            let k = &c.key;
            let mut name = match (k.sampler, k.steps) {
                (Sampler::ArGreedy, _) => format!("{t}{} (autoregressive)", short_model(&k.model)),
                (_, steps) => format!("{t}{} {}", series::series_label(c), series::point_label(c, steps.unwrap_or(0))),
            };
            if batch {
                name.push_str(&format!(" B={}", k.batch_size));
            }
            if seq {
                name.push_str(&format!(" N={}", k.seq_len));
            }
            let state = match c.status {
                CellStatus::Oom { .. } => "out of memory",
                CellStatus::Error { .. } => "failed",
                _ => "skipped",
            };
            names.push(format!("{name} ({state})"));
        }
    }
    if names.is_empty() {
        return None;
    }
    let more = names.len().saturating_sub(LISTED);
    names.truncate(LISTED);
    let more = if more > 0 { format!("; and {more} more") } else { String::new() };
    Some(format!("Not drawn ({shape}): {}{more}. Their messages are in the Run details table.", names.join("; ")))
}

/// How a title that says what its error bars are starts that part (`(bars: 95% bootstrap intervals over prompts)`):
/// small multiples look for it among their facets' titles.
const BARS_NOTE: &str = " (bars: ";

/// A title's suffix saying what its error bars are (`what`), or nothing where it draws none.
fn bars_text(with: bool, what: &str) -> String {
    if with { format!("{BARS_NOTE}{what})") } else { String::new() }
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
            // The facets' titles differ only in what their error bars are (a facet without per-prompt values
            // has none): the figure's says it where any facet has them.
            match &mut first {
                None => first = Some((title, x, y)),
                Some((t, _, _)) if !t.contains(BARS_NOTE) && title.contains(BARS_NOTE) => *t = title,
                Some(_) => {}
            }
        }
    }
    let (title, x, y) = first.ok_or_else(|| why.unwrap_or_else(|| "no shape the filters keep has cells".into()))?;
    // Throughput's facets are per N (its bars are the batch sizes), the others' per (N, B).
    let per = if view == ViewKind::Throughput { "N" } else { "(N, B)" };
    notes.push(format!(
        "Every shape at once: a small chart per {per} the filters keep, all with the same axes (untick \"every shape\" \
         for one chart at a time)."
    ));
    let cols = if view == ViewKind::Throughput { ns.len().min(3) } else { bs.len() };
    Ok(Figure { title, plot: Plot::Xy { x, y, series, refs, grid: Some(figure::Grid { titles, cols }) } })
}
