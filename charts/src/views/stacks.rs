//! Two stacks side by side (issue 30 item 6): with two bundles of the same cells loaded (the runner's and a
//! reference implementation's, `jobs/hf_reference.py`, or one grid on two devices), per arm and batch size the
//! median latency ratio A / B over the cells both measured, the factor those ratios put into the speedup, and the
//! speedup at parity under each bundle. Every number is `metrics::compare::compare_stacks`'s (as `report --compare`
//! prints it); this module only labels and formats them.

use metrics::compare::{StackComparison, StackSide, compare_stacks, paired_cells};
use metrics::parity::{ParityOptions, s_parity_text};

use crate::bundle::LoadedBundle;

use super::options::Options;
use super::parity::{label_options, record_cell, speedup_text};
use super::quality::quality_metric;
use super::series::{series_label, short_model};

/// One arm (model) at one batch size: L_e2e A / B over the cells ok in both.
#[derive(Debug, Clone, PartialEq)]
pub struct StackArmRow {
    /// `AR llama-...` or `diffusion llada-...`.
    pub arm: String,
    /// Batch size.
    pub batch: u32,
    /// Cells ok in both bundles with a latency in each.
    pub cells: usize,
    /// The median ratio.
    pub ratio: f64,
    /// The median ratio as text (`0.625`).
    pub ratio_text: String,
    /// The smallest and largest per-cell ratio as text (`0.620 to 0.630`).
    pub range: String,
}

/// One diffusion series at one (B, N): the speedup at parity under each bundle, and what the implementations put
/// into it.
#[derive(Debug, Clone, PartialEq)]
pub struct StackSpeedupRow {
    /// Sequence length N.
    pub seq: u32,
    /// The diffusion series.
    pub series: String,
    /// The AR model it is compared with.
    pub ar: String,
    /// Batch size.
    pub batch: u32,
    /// S_parity under A (`-`: A has no record of this series).
    pub s_parity_a: String,
    /// The speedup at parity under A (`1.23x`; `-`: none).
    pub speedup_a: String,
    /// S_parity under B.
    pub s_parity_b: String,
    /// The speedup at parity under B.
    pub speedup_b: String,
    /// Speedup A / speedup B (`-` unless both have one).
    pub speedup_ratio: String,
    /// The factor the latency ratios put into any speedup of this diffusion arm over this AR arm at this B
    /// (AR ratio / diffusion ratio; `-`: an arm has no ratio at this B).
    pub factor: String,
}

/// The panel: counts, the arms' ratios, the speedups side by side, and notes saying what is absent and why.
#[derive(Debug, Clone, PartialEq)]
pub struct StackPanel {
    /// The first bundle's file name.
    pub a: String,
    /// The second's.
    pub b: String,
    /// How many cells both have, and how many only one has.
    pub counts: String,
    /// What makes the two bundles' cells measure different things ([`metrics::compare::mismatches`]).
    pub warnings: Vec<String>,
    /// Per arm and B (AR first).
    pub arms: Vec<StackArmRow>,
    /// Why there is no ratio (no cell ok in both with a latency), in place of the arms' table.
    pub arms_note: Option<String>,
    /// Per B, AR arm and diffusion arm: the factor in words.
    pub factors: Vec<String>,
    /// The quality metric S_parity was computed with, when any.
    pub metric: Option<String>,
    /// Per diffusion series, N and B with a record in either bundle.
    pub speedups: Vec<StackSpeedupRow>,
    /// Why there are no speedups, in place of their table.
    pub speedups_note: Option<String>,
}

fn x3(v: f64) -> String {
    format!("{v:.3}")
}

/// The options S_parity is computed with under both stacks: the quality metric the explorer shows (chosen, else
/// the main bundle's run's, else the first), with the main bundle's bootstrap settings.
fn parity_options(a: &LoadedBundle, b: &LoadedBundle, o: &Options) -> Option<ParityOptions> {
    let (label, _) = quality_metric(&[a, b], o)?;
    label_options(&a.bundle, &[a, b], &label)
}

/// Why a bundle has no parity record: no quality values, or no N with both arms' values.
fn absent(lb: &LoadedBundle, records: Option<usize>) -> Option<&'static str> {
    match records {
        Some(n) if n > 0 => None,
        _ if lb.bundle.cells.iter().all(|c| c.quality.is_empty()) => Some("no quality values"),
        _ => Some("no N with both an AR and a diffusion value of the metric"),
    }
}

/// The two-stack panel of the loaded bundles (the main one A, the compared one B); `Err` with a one-line note
/// when fewer than two bundles are loaded or they have no cell in common (nothing is drawn then). Computed over
/// every cell of both bundles: the filters do not apply.
pub fn stack_comparison(bundles: &[&LoadedBundle], o: &Options) -> Result<StackPanel, String> {
    let [a, b] = bundles else {
        return Err("Load a second bundle of the same cells to compare the two stacks.".into());
    };
    let shared = paired_cells(&a.bundle, &b.bundle).len();
    let (only_a, only_b) = (a.bundle.cells.len() - shared, b.bundle.cells.len() - shared);
    if shared == 0 {
        return Err(format!(
            "No cell is in both bundles ({only_a} cells only in [A], {only_b} only in [B]): there is nothing to \
             compare stack against stack (compare bundles of the same config and overrides)."
        ));
    }
    let opts = parity_options(a, b, o);
    let c: StackComparison = compare_stacks(&a.bundle, &b.bundle, opts.as_ref());
    let arms: Vec<StackArmRow> = c
        .arms
        .iter()
        .map(|r| StackArmRow {
            arm: format!("{} {}", if r.autoregressive { "AR" } else { "diffusion" }, short_model(&r.model)),
            batch: r.batch_size,
            cells: r.cells,
            ratio: r.median,
            ratio_text: x3(r.median),
            range: format!("{} to {}", x3(r.min), x3(r.max)),
        })
        .collect();
    let arms_note = arms.is_empty().then(|| {
        "No cell is ok in both bundles with a latency: there is no ratio (failed, OOM and skipped cells have none)."
            .to_string()
    });
    let factors = c
        .factors
        .iter()
        .map(|f| {
            format!(
                "B = {}: a speedup of {} over {} measured under [A] is {}x the one [B] gives on the same cells (AR \
                 ratio / diffusion ratio): that factor comes from the stacks, not the models{}.",
                f.batch_size,
                short_model(&f.diffusion_model),
                short_model(&f.ar_model),
                x3(f.factor),
                if (f.factor - 1.0).abs() < 0.05 { " (close to 1: the verdict is the models')" } else { "" }
            )
        })
        .collect();
    let (why_a, why_b) = (absent(a, c.parity_first), absent(b, c.parity_second));
    let speedups_note = match (why_a, why_b) {
        (Some(x), Some(y)) => Some(format!(
            "Speedup at parity under each stack: absent ([A]: {x}; [B]: {y}); the latency ratios above are all this \
             comparison has."
        )),
        _ => None,
    };
    let side = |p: &Option<StackSide>| match p {
        Some(x) => (s_parity_text(&x.record), x.speedup_text(|v| speedup_text(Some(v)))),
        None => ("-".to_string(), "-".to_string()),
    };
    let speedups = match speedups_note {
        Some(_) => Vec::new(),
        None => c
            .speedups
            .iter()
            .map(|p| {
                let series = [(a, &p.first), (b, &p.second)]
                    .into_iter()
                    .find_map(|(lb, x)| x.as_ref().and_then(|x| record_cell(lb, &x.record)))
                    .map_or_else(|| short_model(&p.diffusion_model).to_string(), series_label);
                let ((s_parity_a, speedup_a), (s_parity_b, speedup_b)) = (side(&p.first), side(&p.second));
                let both = p.speedup_ratio();
                let factor = c
                    .factors
                    .iter()
                    .find(|f| {
                        f.batch_size == p.batch_size
                            && f.ar_model == p.ar_model
                            && f.diffusion_model == p.diffusion_model
                    })
                    .map_or("-".into(), |f| format!("{}x", x3(f.factor)));
                StackSpeedupRow {
                    seq: p.seq_len,
                    series,
                    ar: short_model(&p.ar_model).to_string(),
                    batch: p.batch_size,
                    s_parity_a,
                    speedup_a,
                    s_parity_b,
                    speedup_b,
                    speedup_ratio: both.map_or("-".into(), x3),
                    factor,
                }
            })
            .collect(),
    };
    let metric = opts.map(|o| match o.evaluator {
        Some(e) => format!("{} [{e}]", o.metric),
        None => o.metric,
    });
    Ok(StackPanel {
        a: a.source.clone(),
        b: b.source.clone(),
        counts: format!("{shared} cells in both bundles ({only_a} only in [A], {only_b} only in [B]: not compared)."),
        warnings: metrics::compare::mismatches(&a.bundle, &b.bundle, ["[A]", "[B]"]),
        arms,
        arms_note,
        factors,
        metric: metric.filter(|_| speedups_note.is_none()),
        speedups,
        speedups_note,
    })
}
