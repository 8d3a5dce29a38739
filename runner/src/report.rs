//! `dllm-bench report`: S_parity, the speedup at parity and the verdict per batch size, as Markdown.
//!
//! Every number comes from `metrics::parity::parity` (the explorer calls the same function), recomputed from the
//! bundle's cells with the metric, evaluator and bootstrap settings asked for (default: the run's config). Energy
//! (format 1.7) comes from `metrics::energy`: joules per generated token beside each latency, or why there is none.
//!
//! `--compare REFERENCE` adds [`compare_section`]: the bundle against a reference implementation's bundle of the
//! same cells (`jobs/hf_reference.py`), per arm and batch size, from `metrics::compare::compare_stacks`.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use metrics::parity::{
    AtBatch, Estimate, ParityOptions, ParityRecord, SpeedupRow, cell_quality, is_parity_point, parity, s_parity_text,
};
use schema::Bundle;
use schema::bundle::Direction;

/// What to report on; `None` fields take the bundle's config (or, without a `[quality]` table, the first
/// perplexity found).
#[derive(Debug, Clone, Default)]
pub struct ReportOptions {
    /// Quality metric, e.g. `perplexity` or `rouge_l_f1`.
    pub metric: Option<String>,
    /// Evaluator of the metric (perplexity).
    pub evaluator: Option<String>,
    /// Bootstrap resamples.
    pub resamples: Option<u32>,
    /// Bootstrap seed.
    pub seed: Option<u64>,
}

/// The options used: the user's, filled in from the bundle.
pub fn resolve(bundle: &Bundle, o: &ReportOptions) -> Option<ParityOptions> {
    let labels: BTreeSet<(String, Option<String>)> =
        bundle.cells.iter().flat_map(|c| c.quality.iter().map(|q| (q.metric.clone(), q.evaluator.clone()))).collect();
    let from_cfg = ParityOptions::from_config(bundle);
    let metric = o
        .metric
        .clone()
        .or_else(|| from_cfg.as_ref().map(|c| c.metric.clone()))
        .or_else(|| labels.iter().find(|l| l.0 == "perplexity").or(labels.first()).map(|l| l.0.clone()))?;
    let evaluator = match &o.evaluator {
        Some(e) => Some(e.clone()),
        None => match from_cfg.as_ref().filter(|c| c.metric == metric) {
            Some(c) => c.evaluator.clone(),
            None => labels.iter().find(|l| l.0 == metric).and_then(|l| l.1.clone()),
        },
    };
    let run = ParityOptions::for_metric(bundle, metric, evaluator);
    Some(ParityOptions { resamples: o.resamples.unwrap_or(run.resamples), seed: o.seed.unwrap_or(run.seed), ..run })
}

fn est(e: &Estimate) -> String {
    match (e.low, e.high) {
        (Some(l), Some(h)) => format!("{} [{}, {}]", num(e.value), num(l), num(h)),
        _ => num(e.value),
    }
}

fn num(v: f64) -> String {
    if v.abs() >= 1e9 {
        format!("{v:.3e}")
    } else if v.abs() >= 1000.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// Whether any of the bundle's numbers come from synthetic (random) weights: the provenance's flag, or any model's
/// (a hand-edited flag does not drop the label; `validate` refuses the contradiction).
pub fn synthetic_weights(bundle: &Bundle) -> bool {
    bundle.provenance.synthetic_weights || bundle.models.iter().any(|m| m.synthetic)
}

fn short(id: &str) -> &str {
    id.rsplit('/').next().unwrap_or(id)
}

/// The state of the host and the device when each execution started measuring (format 1.8; the study's hardware
/// controls, section 4.2.1), with a bold caution for what can slow a run that is not the model: other processes on
/// the GPU, a power limit below the board's default, a busy host. Nothing for bundles of older runners.
fn conditions(s: &mut String, bundle: &Bundle) {
    let execs: Vec<(usize, &schema::RunConditions)> = bundle
        .provenance
        .executions
        .iter()
        .enumerate()
        .filter_map(|(i, e)| Some((i, e.conditions.as_deref()?)))
        .collect();
    let many = bundle.provenance.executions.len() > 1;
    for (i, c) in execs {
        let mut facts: Vec<String> = Vec::new();
        let mut cautions: Vec<String> = Vec::new();
        if let Some(load) = c.load_average_1m {
            let cpus = c.logical_cpus.map_or(String::new(), |n| format!(" on {}", crate::counted(n as usize, "CPU")));
            facts.push(format!("host load average {load:.2}{cpus}"));
            if load >= c.logical_cpus.map_or(1.0, |n| (f64::from(n) / 4.0).max(1.0)) {
                cautions.push(format!(
                    "the host's load average was {load:.2} when measuring started: other work kept its CPUs busy \
                     (or this run's own preparation, such as writing synthetic weights: a 1-minute average), and \
                     the study's control is exclusive access"
                ));
            }
        }
        if let Some(p) = &c.gpu_performance_state {
            // Read before any work: an idle GPU reports a low state (P8) whatever its clocks will be under load.
            facts.push(format!("GPU performance state {p} before the work"));
        }
        match (c.gpu_max_sm_clock_mhz, c.gpu_application_sm_clock_mhz) {
            (Some(max), Some(app)) => facts.push(format!("SM clock {app} MHz for applications, {max} MHz at most")),
            (Some(max), None) => facts.push(format!("SM clock {max} MHz at most")),
            _ => {}
        }
        match (c.gpu_power_limit_w, c.gpu_default_power_limit_w) {
            (Some(l), Some(d)) => {
                facts.push(format!("power limit {l:.0} W (default {d:.0} W)"));
                if l < d - 0.5 {
                    cautions.push(format!(
                        "the GPU's power limit was {l:.0} W, below its default {d:.0} W: its kernels may be throttled"
                    ));
                }
            }
            (Some(l), None) => facts.push(format!("power limit {l:.0} W")),
            _ => {}
        }
        if let Some(m) = &c.gpu_compute_mode {
            facts.push(format!("compute mode {m}"));
        }
        match (c.gpu_other_processes, c.gpu_other_processes_memory_bytes) {
            (Some(0), _) => facts.push("no other process on the GPU".into()),
            (Some(n), bytes) => {
                let held = bytes.map_or(String::new(), |b| format!(", holding {:.1} GB", b as f64 / 1e9));
                let what = if n == 1 { "1 other process".to_string() } else { format!("{n} other processes") };
                facts.push(format!("{what} on the GPU{held}"));
                cautions.push(format!(
                    "{what} used the GPU when the run started{held}: its times are not the model's alone"
                ));
            }
            _ => {}
        }
        if facts.is_empty() {
            continue;
        }
        let whose = if many { format!(" (execution {i})") } else { String::new() };
        let _ = writeln!(s, "Conditions when measuring started{whose}: {}.\n", facts.join(", "));
        for c in cautions {
            let _ = writeln!(s, "**Caution:** {c}.\n");
        }
    }
}

/// What a reader must know before the numbers: quality values that could not be computed (S_parity skips
/// their K) and diffusion continuations with positions left masked (their text, and its perplexity, covers fewer
/// tokens than N_out).
fn caveats(s: &mut String, bundle: &Bundle) {
    // Failed cells have no timing: a B whose autoregressive cell failed has no speedup row below.
    let failed: Vec<(&schema::Cell, &str, &str)> = bundle
        .cells
        .iter()
        .filter_map(|c| match &c.status {
            schema::CellStatus::Ok => None,
            schema::CellStatus::Oom { message } => Some((c, "out of memory", message.as_str())),
            schema::CellStatus::Error { message } => Some((c, "failed", message.as_str())),
            schema::CellStatus::Skipped { reason } => Some((c, "not run", reason.as_str())),
        })
        .collect();
    if !failed.is_empty() {
        let _ = writeln!(
            s,
            "**{} of {} cells have no timing** (a batch size whose autoregressive cell is among them has no speedup \
             below, and its row or a warning says why):\n",
            failed.len(),
            bundle.cells.len()
        );
        for (c, what, message) in &failed {
            let first = message.lines().next().unwrap_or_default().trim();
            // A message that only repeats what the status says ("out of memory") is not said twice.
            match first.is_empty() || first.eq_ignore_ascii_case(what) {
                true => _ = writeln!(s, "- {}: {what}", c.key),
                false => _ = writeln!(s, "- {}: {what}: {first}", c.key),
            }
        }
        let _ = writeln!(s);
    }
    for (headline, rest) in metrics::derive::run_cautions(bundle) {
        let _ = writeln!(s, "**{headline}**{rest}\n");
    }
    if !bundle.provenance.missing_cells.is_empty() {
        let m = &bundle.provenance.missing_cells;
        let _ = writeln!(
            s,
            "**A partial bundle: {} cells of the grid are in no merged shard** (`merge --allow-missing`):\n",
            m.len()
        );
        for k in m.iter().take(20) {
            let _ = writeln!(s, "- {k}");
        }
        if m.len() > 20 {
            let _ = writeln!(s, "- ... and {} more (provenance.missing_cells)", m.len() - 20);
        }
        let _ = writeln!(s);
    }
    let stalled: Vec<&schema::Cell> = bundle.cells.iter().filter(|c| !c.stalled_prompts.is_empty()).collect();
    if !stalled.is_empty() {
        let _ = writeln!(
            s,
            "**Continuations the sampler could not finish** (a threshold block that commits nothing): their prompts \
             are left out of these cells' quality values, the others are scored:\n"
        );
        for c in &stalled {
            let _ = writeln!(s, "- {}: prompts {:?}", c.key, c.stalled_prompts);
        }
        let _ = writeln!(s);
    }
    let errors: Vec<(&schema::Cell, &schema::bundle::QualityError)> =
        bundle.cells.iter().flat_map(|c| c.quality_errors.iter().map(move |e| (c, e))).collect();
    if !errors.is_empty() {
        let _ = writeln!(
            s,
            "**{} quality values could not be computed** (S_parity skips those K):
",
            errors.len()
        );
        for (c, e) in &errors {
            let by = e.evaluator.as_deref().map_or(String::new(), |e| format!(" under {e}"));
            let _ = writeln!(s, "- {} {}{by}: {}", c.key, e.metric, e.message);
        }
        let _ = writeln!(s);
    }
    let (mut rows, mut masked) = (0usize, 0u64);
    for g in bundle.cells.iter().flat_map(|c| &c.generations) {
        if let Some(m) = g.masked_tokens.filter(|&m| m > 0) {
            rows += 1;
            masked += u64::from(m);
        }
    }
    if rows > 0 {
        let _ = writeln!(
            s,
            "**{masked} generated positions were left as the mask token** in {rows} diffusion continuations: they \
             decode to nothing, so those texts and their perplexities cover fewer tokens than N_out.\n"
        );
    }
}

/// Where the energy figures come from (each execution's counter and idle power), or why cells have none.
fn energy(s: &mut String, bundle: &Bundle) {
    let mut meters: Vec<String> = Vec::new();
    for e in &bundle.provenance.executions {
        if let Some(m) = e.energy.as_ref().filter(|m| m.source.is_some()) {
            let idle = metrics::energy::idle_power_w(m).map_or(String::new(), |w| format!("; idle {} W", num(w)));
            let line = format!("{}{idle}", m.scope.as_deref().unwrap_or("an energy counter"));
            if !meters.contains(&line) {
                meters.push(line);
            }
        }
    }
    if !meters.is_empty() {
        let _ = writeln!(
            s,
            "Energy: {} (joules per generated token are medians over the repetitions).\n",
            meters.join("; ")
        );
    }
    let reasons = metrics::energy::unavailable_reasons(bundle);
    if !reasons.is_empty() {
        let measured = bundle.cells.iter().filter(|c| !c.repetitions.is_empty()).count();
        match meters.is_empty() {
            true => _ = writeln!(s, "**No energy**:\n"),
            false => _ = writeln!(s, "**No energy** for some cells (their energy columns say -):\n"),
        }
        for (reason, n) in &reasons {
            let _ = writeln!(s, "- {n} of {measured} measured cells: {reason}");
        }
        let _ = writeln!(s);
    }
}

/// A cell's joules per generated token (median over its repetitions), as the tables write it.
fn joules_per_token(bundle: &Bundle, key: &schema::CellKey) -> String {
    let cell = bundle.cells.iter().find(|c| c.key == *key);
    let j = cell.and_then(|c| metrics::energy::cell_energy(c).joules_per_token).map(|s| s.median);
    j.map_or_else(|| "-".to_string(), num)
}

/// Without S_parity: one row per cell with energy (latency, joules per token and per sequence, mean power).
fn energy_table(s: &mut String, bundle: &Bundle) {
    let rows: Vec<(&schema::Cell, metrics::energy::CellEnergy)> = bundle
        .cells
        .iter()
        .map(|c| (c, metrics::energy::cell_energy(c)))
        .filter(|(_, e)| e.energy_j.is_some())
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n## Energy per cell (medians over the repetitions)\n\n| cell | L_e2e (ms) | J / token | J / sequence | mean power (W) \
         |\n|---|---:|---:|---:|---:|"
    );
    let med = |x: Option<metrics::derive::Summary>| x.map_or_else(|| "-".to_string(), |s| num(s.median));
    for (c, e) in rows {
        let latency = metrics::derive::summarize(&c.repetitions.iter().map(|r| r.e2e_ms).collect::<Vec<_>>());
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            c.key,
            med(latency),
            med(e.joules_per_token),
            med(e.joules_per_sequence),
            med(e.mean_power_w)
        );
    }
}

/// The report as Markdown. `source` names the bundle; `recounted`: its repetitions whose token counts the reader
/// corrected ([`schema::ReadBundle::recounted_repetitions`]).
pub fn render(bundle: &Bundle, source: &str, recounted: usize, o: &ReportOptions) -> String {
    let mut s = String::new();
    let p = &bundle.provenance;
    let _ = writeln!(s, "# dllm-bench report: {source}\n");
    if synthetic_weights(bundle) {
        let _ = writeln!(s, "**SYNTHETIC weights: timing is real, quality is meaningless.**\n");
    }
    if recounted > 0 {
        // Before the throughput figures.
        let _ = writeln!(s, "**Valid tokens:** {}.\n", schema::recount_note(recounted));
    }
    let partial = crate::commands::validate::partial(bundle);
    if let Some(x) = &partial {
        let unscored = match x.unscored.len() {
            0 => String::new(),
            n => format!("; {n} quality groups have no quality value yet, so their K are not in S_parity"),
        };
        let _ = writeln!(
            s,
            "**PARTIAL bundle: {}{unscored}.** S_parity, the speedups and the verdicts below come from the cells \
             measured so far and may change when the rest of the grid is measured ({}).\n",
            x.counts(),
            metrics::coverage::finish_hint(bundle)
        );
    }
    let device = p.device.name.as_deref().map_or(p.device.kind.clone(), |n| format!("{} {n}", p.device.kind));
    let _ = writeln!(
        s,
        "{} {} ({}), {} cells on {device}, created {}.\n",
        p.tool,
        p.tool_version,
        p.git_commit.as_deref().unwrap_or("commit unknown"),
        bundle.cells.len(),
        p.created_at
    );
    let wrapped: Vec<String> = bundle
        .models
        .iter()
        .filter_map(|m| {
            m.chat_template.as_ref().map(|c| format!("{} ({} tokens of each prompt)", m.id, c.frame_tokens))
        })
        .collect();
    if !wrapped.is_empty() {
        let _ = writeln!(s, "Prompts wrapped in the model's chat template: {}.\n", wrapped.join(", "));
    }
    conditions(&mut s, bundle);
    caveats(&mut s, bundle);
    energy(&mut s, bundle);
    let Some(opts) = resolve(bundle, o) else {
        let _ = writeln!(
            s,
            "No quality values: the run had no `[quality]` table, so there is no S_parity. Timing is in the \
             bundle (`dllm-bench serve` shows it)."
        );
        energy_table(&mut s, bundle);
        return s;
    };
    let records = parity(bundle, &opts);
    // An N at which no autoregressive cell finished has no record at all: said, not left out.
    for (model, n) in metrics::parity::unjudged_baselines(bundle, &records) {
        let _ = writeln!(s, "**Warning: {}.**\n", metrics::parity::unjudged_baseline_text(model, n));
    }
    let label = match &opts.evaluator {
        Some(e) => format!("{} scored by {e}", opts.metric),
        None => opts.metric.clone(),
    };
    if records.is_empty() {
        let _ = writeln!(
            s,
            "No S_parity for {label}: no N has both an autoregressive and a diffusion value of it. Metrics in the \
             bundle: {}.",
            metrics_in(bundle)
        );
        return s;
    }
    let dir = match records[0].direction {
        Direction::LowerIsBetter => "lower is better",
        Direction::HigherIsBetter => "higher is better",
    };
    let _ = writeln!(s, "Quality: {label} ({dir}).");
    for note in metrics::parity::cautions(bundle, &records) {
        let _ = writeln!(s, "\n**Caution:** {note}.\n");
    }
    if let Some(b) = records.iter().find_map(|r| r.bootstrap) {
        let _ = writeln!(
            s,
            "Intervals: 95% percentile bootstrap over the {} prompts ({} resamples, seed {}). The bootstrap \
             resamples quality only: a speedup's interval is the spread of the K (or threshold) that reaches parity \
             in each resample, with both latencies held at their measured medians, so it does not cover timing noise.",
            b.prompts, b.resamples, b.seed
        );
    }
    summary(&mut s, bundle, &records, partial.is_some());
    let quality = cell_quality(bundle);
    for r in &records {
        section(&mut s, bundle, &quality, r, partial.is_some());
    }
    s
}

/// One row per diffusion series and N: S_parity and the speedup at parity per batch size.
fn summary(s: &mut String, bundle: &Bundle, records: &[ParityRecord], partial: bool) {
    let _ = writeln!(
        s,
        "\n## Summary: one row per series\n\n| N | diffusion series | vs | S_parity | speedup at parity per B |\n\
         |---:|---|---|---|---|"
    );
    for r in records {
        // Every B, in order: one whose autoregressive cell did not finish has no speedup either.
        let speedups: Vec<String> = metrics::parity::rows_by_batch(bundle, r)
            .iter()
            .map(|at| match at {
                AtBatch::Row(SpeedupRow { speedup: Some(e), .. }) => format!("B={}: {}", at.batch_size(), num(e.value)),
                _ => format!("B={}: -", at.batch_size()),
            })
            .collect();
        let _ = writeln!(
            s,
            "| {} | {} {} | {} | {} | {} |",
            r.seq_len,
            short(&r.diffusion_model),
            series_name(r),
            short(&r.ar_model),
            s_parity_text(r) + if partial { " (partial bundle)" } else { "" },
            speedups.join(", ")
        );
    }
}

/// `(sampler, series, block N)` of a record, as headings name it.
fn series_name(r: &ParityRecord) -> String {
    let sampler = serde_json::to_value(r.sampler).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
    // Dream's sampler has no blocks (its cells carry the grid's block length all the same).
    let blocks = schema::grid::DreamAlg::of(r.sampler).is_none();
    let block = r.block_length.filter(|_| blocks).map_or(String::new(), |b| format!(", block {b}"));
    match r.variant() {
        Some(v) => format!("({sampler}, {v}{block})"),
        None => format!("({sampler}{block})"),
    }
}

fn metrics_in(bundle: &Bundle) -> String {
    let set: BTreeSet<String> = bundle.cells.iter().flat_map(|c| c.quality.iter().map(|q| q.label())).collect();
    if set.is_empty() { "none".into() } else { set.into_iter().collect::<Vec<_>>().join(", ") }
}

fn section(
    s: &mut String,
    bundle: &Bundle,
    quality: &[Vec<schema::bundle::QualityValue>],
    r: &ParityRecord,
    partial: bool,
) {
    let _ = writeln!(
        s,
        "\n## N = {}: {} {} vs {}\n",
        r.seq_len,
        short(&r.diffusion_model),
        series_name(r),
        short(&r.ar_model)
    );
    let _ = writeln!(s, "Q_llama (the AR model's quality) = {}\n", est(&r.baseline));
    if r.thresholded {
        let _ = writeln!(s, "| threshold | forwards | f [95%] | at least as good as Q_llama |\n|---:|---:|---|---|");
    } else {
        let _ = writeln!(s, "| K | f(K) [95%] | at least as good as Q_llama |\n|---:|---|---|");
    }
    for c in &r.curve {
        let good = r.direction.at_least_as_good(c.quality.value, r.baseline.value);
        let mark = if is_parity_point(r, c) { " (S_parity)" } else { "" };
        let good = if good { "yes" } else { "no" };
        match c.threshold {
            Some(t) if r.thresholded => {
                let _ = writeln!(s, "| {t} | {} | {} | {good}{mark} |", c.steps, est(&c.quality));
            }
            _ => {
                let _ = writeln!(s, "| {} | {} | {good}{mark} |", c.steps, est(&c.quality));
            }
        }
    }
    let _ = writeln!(s);
    let _ = write!(s, "S_parity: {}", s_parity_text(r));
    if let Some(interval) = metrics::parity::s_parity_interval_text(r) {
        let _ = write!(s, " ({interval})");
    }
    if let Some(bracket) = metrics::parity::s_parity_bracket_text(r) {
        let _ = write!(s, ". {bracket}");
    }
    if partial {
        let _ =
            write!(s, " **(PARTIAL bundle: from the cells measured so far; may change when the rest is measured)**");
    }
    let _ = writeln!(s, ".\n");
    if let (Some(warning), Some(f)) = (metrics::parity::uncertain_text(r), r.reached_fraction) {
        let _ = writeln!(
            s,
            "**Warning: {warning}**: S_parity is uncertain, and each speedup interval below is over those resamples \
             alone (in the other {:.0}% there is no speedup).\n",
            (1.0 - f) * 100.0
        );
    }
    let _ = writeln!(
        s,
        "| B | L_e2e {} (ms) | L_e2e {} at S_parity (ms) | speedup [95%, quality only] | J/token {} | J/token {} at \
         S_parity | verdict |\n|---:|---:|---:|---|---:|---:|---|",
        short(&r.ar_model),
        short(&r.diffusion_model),
        short(&r.ar_model),
        short(&r.diffusion_model)
    );
    // The rows by B: each speedup row, and a B whose autoregressive cell did not finish as a row with no numbers.
    for at in metrics::parity::rows_by_batch(bundle, r) {
        let row = match at {
            AtBatch::Row(row) => row,
            AtBatch::Unfinished { ar_cell, what } => {
                let verdict = metrics::parity::unfinished_verdict(r, what);
                let verdict = if partial { format!("{verdict} (partial bundle)") } else { verdict };
                let _ = writeln!(s, "| {} | - | - | - | - | - | {verdict} |", ar_cell.batch_size);
                continue;
            }
        };
        let (diff, sp, verdict) = match (&row.speedup, row.diffusion_e2e_ms) {
            (Some(e), Some(ms)) => (
                num(ms),
                est(e),
                // The row's own verdict (metrics::parity's, as every reader's); the value only says why not.
                match (metrics::parity::viable(r, &AtBatch::Row(row)), e.value) {
                    (Some(true), _) => "viable: faster at equal quality",
                    (_, 1.0) => "not viable: equal latency at equal quality (not faster)",
                    _ => "not viable: slower at equal quality",
                }
                .to_string(),
            ),
            _ => (
                "-".into(),
                "-".into(),
                format!(
                    "{}: {}",
                    metrics::parity::verdict_without_speedup(r),
                    row.note.as_deref().unwrap_or("no speedup")
                ),
            ),
        };
        let verdict = if partial { format!("{verdict} (partial bundle)") } else { verdict };
        let ar_j = joules_per_token(bundle, &row.ar_cell);
        let diff_j = row.diffusion_cell.as_ref().map_or_else(|| "-".to_string(), |k| joules_per_token(bundle, k));
        let _ = writeln!(
            s,
            "| {} | {} | {diff} | {sp} | {ar_j} | {diff_j} | {verdict} |",
            row.batch_size,
            num(row.ar_e2e_ms)
        );
    }
    // Degenerate text flatters perplexity: compare the output entropy at S_parity.
    for w in metrics::parity::low_entropy_at_parity(bundle, quality, r) {
        let _ = writeln!(s, "\nWarning: {w}.");
    }
    if let Some(w) = less_text_at_parity(bundle, r) {
        let _ = writeln!(s, "\nWarning: {w}.");
    }
}

/// Below this fraction of the AR model's words per continuation, the diffusion output at S_parity is said to be less
/// text: the study compares equal amounts of text (section 4.2.3).
const LESS_TEXT_RATIO: f64 = 0.5;

/// The mean words per continuation (as the text statistics count words: `quality::text::words`) of the cell whose
/// quality stands for `key`'s group (`metrics::parity::quality_cells`: the continuations its quality values
/// scored). `None` without continuations.
fn words_per_continuation(
    bundle: &Bundle,
    groups: &std::collections::HashMap<metrics::parity::GroupKey, usize>,
    key: &schema::CellKey,
) -> Option<f64> {
    let cell = &bundle.cells[*groups.get(&metrics::parity::GroupKey::of(key))?];
    let words: usize = cell.generations.iter().map(|g| crate::quality::text::words(&g.text).len()).sum();
    (!cell.generations.is_empty()).then(|| words as f64 / cell.generations.len() as f64)
}

/// A warning when the diffusion output at S_parity is far less text than the AR model's (fewer than
/// [`LESS_TEXT_RATIO`] of its words per continuation): end-of-sequence or padding tokens fill its positions, they
/// decode to nothing, and its quality is over less text than the baseline's. `None` otherwise.
fn less_text_at_parity(bundle: &Bundle, r: &metrics::parity::ParityRecord) -> Option<String> {
    let row = r.speedups.iter().find(|x| x.diffusion_cell.is_some())?;
    let groups = metrics::parity::quality_cells(bundle);
    let d = words_per_continuation(bundle, &groups, row.diffusion_cell.as_ref()?)?;
    let a = words_per_continuation(bundle, &groups, &row.ar_cell)?;
    (a > 0.0 && d < LESS_TEXT_RATIO * a).then(|| {
        format!(
            "at S_parity the diffusion output has {d:.1} words per continuation, the autoregressive model's {a:.1}: \
             its positions hold tokens that decode to no words (end-of-sequence or padding), so its quality is over \
             less text than the baseline's (the study compares equal amounts of text, section 4.2.3)"
        )
    })
}

/// `report --compare`: the runner's bundle against a reference's of the same cells (`jobs/hf_reference.py`), from
/// `metrics::compare::compare_stacks`: per arm and batch size the median L_e2e ratio runner / reference, what those
/// ratios do to a speedup, and the speedup at parity under each stack side by side (the same parity options for
/// both: the runner bundle's, else the reference's).
pub fn compare_section(runner: &Bundle, reference: &Bundle, reference_source: &str, o: &ReportOptions) -> String {
    let mut s = String::new();
    let opts = resolve(runner, o).or_else(|| resolve(reference, o));
    let c = metrics::compare::compare_stacks(runner, reference, opts.as_ref());
    let _ = writeln!(s, "\n## Runner against reference: the implementations' share of the verdict\n");
    let _ = writeln!(s, "Runner: {}.  ", crate::compare::describe(runner));
    let _ = writeln!(s, "Reference ({reference_source}): {}.\n", crate::compare::describe(reference));
    for w in metrics::compare::mismatches(runner, reference, ["runner", "reference"]) {
        let _ = writeln!(s, "**Warning:** {w}.\n");
    }
    let pairs = metrics::compare::paired_cells(runner, reference);
    let (only_runner, only_reference) = (runner.cells.len() - pairs.len(), reference.cells.len() - pairs.len());
    let _ = writeln!(
        s,
        "{} cells in both bundles ({only_runner} only in the runner's, {only_reference} only in the reference's).",
        pairs.len()
    );
    if c.arms.is_empty() {
        let _ = writeln!(
            s,
            "\nNo cell is ok in both with a latency: there is no ratio (compare bundles of the same config and \
             overrides)."
        );
    } else {
        let _ = writeln!(
            s,
            "\nL_e2e runner / reference, the median over the cells ok in both (below 1: the runner is faster).\n\n\
             | arm | B | cells | runner / reference | range |\n|---|---:|---:|---:|---|"
        );
        for a in &c.arms {
            let arm = if a.autoregressive { "AR" } else { "diffusion" };
            let _ = writeln!(
                s,
                "| {arm} {} | {} | {} | {} | {} to {} |",
                short(&a.model),
                a.batch_size,
                a.cells,
                num(a.median),
                num(a.min),
                num(a.max)
            );
        }
        let _ = writeln!(s);
        let same = same_implementation(runner, reference);
        if let Some(what) = &same {
            let _ = writeln!(
                s,
                "**Both bundles come from the same implementation** ({what}): a ratio or factor away from 1 below is \
                 run-to-run variation between two measurements, not a difference of implementations.\n"
            );
        }
        for f in &c.factors {
            let arm = |ar: bool, model: &str| {
                c.arms.iter().find(|a| a.autoregressive == ar && a.model == model && a.batch_size == f.batch_size)
            };
            // The factor's spread over the cells: the extreme per-cell ratios of the two arms.
            let spread = match (arm(true, &f.ar_model), arm(false, &f.diffusion_model)) {
                (Some(a), Some(d)) if d.max > 0.0 && d.min > 0.0 => {
                    let (lo, hi) = (a.min / d.max, a.max / d.min);
                    let within = if lo <= 1.0 && hi >= 1.0 { "; 1 is within it: the factor may be noise" } else { "" };
                    format!(
                        " (the per-cell ratios put it between {}x and {}x, over {} AR and {} diffusion cells{within})",
                        num(lo),
                        num(hi),
                        a.cells,
                        d.cells
                    )
                }
                _ => String::new(),
            };
            let cause = match (&same, (f.factor - 1.0).abs() < 0.05) {
                (Some(_), _) => {
                    "both bundles are the same implementation, so that factor is run-to-run variation, not the \
                     implementations'"
                }
                (None, true) => {
                    "that factor comes from the implementations, not the models (here it is close to 1: the verdict \
                     is the models')"
                }
                (None, false) => "that factor comes from the implementations, not the models",
            };
            let _ = writeln!(
                s,
                "- B = {}: a speedup of {} over {} measured with the runner is **{}x** the one the reference gives on \
                 the same cells (AR ratio / diffusion ratio){spread}: {cause}.",
                f.batch_size,
                short(&f.diffusion_model),
                short(&f.ar_model),
                num(f.factor),
            );
        }
    }
    let absent = |bundle: &Bundle, records: Option<usize>| -> Option<String> {
        match records {
            Some(n) if n > 0 => None,
            _ if bundle.cells.iter().all(|c| c.quality.is_empty()) => Some("no quality values".into()),
            _ => Some("no N with both an AR and a diffusion value of the metric".into()),
        }
    };
    let (why_runner, why_reference) = (absent(runner, c.parity_first), absent(reference, c.parity_second));
    if let (Some(a), Some(b)) = (&why_runner, &why_reference) {
        let _ = writeln!(
            s,
            "\nSpeedup at parity under each stack: absent (the runner's bundle: {a}; the reference's: {b}), so the \
             latency ratios above are all this comparison has; run both with a `[quality]` table for S_parity."
        );
        return s;
    }
    let label = opts.as_ref().map_or(String::new(), |o| match &o.evaluator {
        Some(e) => format!("{} scored by {e}", o.metric),
        None => o.metric.clone(),
    });
    let _ = writeln!(
        s,
        "\nSpeedup at parity under each stack ({label}; each bundle's own S_parity and latencies):\n\n\
         | N | diffusion series | vs | B | S_parity runner | speedup runner | S_parity reference | speedup reference \
         | runner / reference |\n|---:|---|---|---:|---|---:|---|---:|---:|"
    );
    for p in &c.speedups {
        let series = p.first.as_ref().or(p.second.as_ref()).map(|x| series_name(&x.record)).unwrap_or_default();
        let side = |x: &Option<metrics::compare::StackSide>| match x {
            Some(x) => (s_parity_text(&x.record), x.speedup_text(num)),
            None => ("-".into(), "-".into()),
        };
        let ((ka, sa), (kb, sb)) = (side(&p.first), side(&p.second));
        let both = p.speedup_ratio();
        let _ = writeln!(
            s,
            "| {} | {} {series} | {} | {} | {ka} | {sa} | {kb} | {sb} | {} |",
            p.seq_len,
            short(&p.diffusion_model),
            short(&p.ar_model),
            p.batch_size,
            both.map_or("-".into(), num)
        );
    }
    for (who, why) in [("the runner's", why_runner), ("the reference's", why_reference)] {
        if let Some(why) = why {
            let _ = writeln!(s, "\nNo S_parity in {who} bundle ({why}): its columns are \"-\".");
        }
    }
    s
}

/// When two bundles come from the same implementation (the same tool, version, commit and dirty sources, device and
/// attention), what they share in words; `None` when any of those differ.
pub fn same_implementation(a: &Bundle, b: &Bundle) -> Option<String> {
    let (p, q) = (&a.provenance, &b.provenance);
    let device = |p: &schema::bundle::Provenance| (p.device.kind.clone(), p.device.name.clone());
    let same = p.tool == q.tool
        && p.tool_version == q.tool_version
        && p.git_commit == q.git_commit
        && p.git_dirty == q.git_dirty
        && device(p) == device(q)
        && p.attention == q.attention;
    same.then(|| {
        let d = &p.device;
        let device = d.name.as_deref().map_or(d.kind.clone(), |n| format!("{} {n}", d.kind));
        format!(
            "{} {}, commit {}, on {device}, attention {}",
            p.tool,
            p.tool_version,
            p.git_commit.as_deref().unwrap_or("unknown"),
            p.attention.split(';').next().unwrap_or_default()
        )
    })
}

/// `dllm-bench report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// The bundle.
    #[arg(value_name = "BUNDLE")]
    pub bundle: std::path::PathBuf,
    /// Quality metric (default: the run's `quality.parity_metric`): perplexity, rouge_l_f1, token_f1, ...
    #[arg(long)]
    pub metric: Option<String>,
    /// Evaluator of the metric (default: the run's primary evaluator for perplexity).
    #[arg(long, value_name = "MODEL_ID")]
    pub evaluator: Option<String>,
    /// Bootstrap resamples, 1 to 1,000,000 (default: the run's `quality.bootstrap_resamples`, else 1000).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(schema::grid::limits::BOOTSTRAP_RESAMPLES)))]
    pub resamples: Option<u32>,
    /// Bootstrap seed (default: the run's seed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// A reference bundle of the same cells (jobs/hf_reference.py's): also print per arm and batch size the latency
    /// ratio BUNDLE / REFERENCE and the speedup at parity under each stack side by side. Exit 2 when the two have
    /// no cell in common.
    #[arg(long, value_name = "REFERENCE")]
    pub compare: Option<std::path::PathBuf>,
    /// Write the report to this file (atomically) instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
}

/// Runs `dllm-bench report`.
pub fn main(args: &ReportArgs) -> anyhow::Result<std::process::ExitCode> {
    let read = crate::input::read_bundle_file(&args.bundle)?;
    let recounted = read.recounted_repetitions;
    let bundle = read.bundle;
    if let Some(r) = args.resamples {
        let draws = u64::from(r) * u64::from(bundle.prompt_set.count);
        if draws > schema::grid::limits::BOOTSTRAP_DRAWS {
            return Err(crate::InputError(format!(
                "--resamples {r}: over the bundle's {} prompts that is {draws} bootstrap draws, more than the limit {}; \
                 fix: use fewer resamples",
                bundle.prompt_set.count,
                schema::grid::limits::BOOTSTRAP_DRAWS
            ))
            .into());
        }
    }
    // A metric or evaluator the bundle has no value for is a typo: refused, naming what it has.
    type Label = (String, Option<String>);
    let labels: BTreeSet<Label> =
        bundle.cells.iter().flat_map(|c| c.quality.iter().map(|q| (q.metric.clone(), q.evaluator.clone()))).collect();
    let have = |pick: &dyn Fn(&Label) -> Option<String>| -> Vec<String> {
        labels.iter().filter_map(pick).collect::<BTreeSet<_>>().into_iter().collect()
    };
    if let Some(m) = args.metric.as_deref().filter(|m| !labels.iter().any(|l| l.0 == *m)) {
        let metrics = have(&|l| Some(l.0.clone()));
        return Err(crate::InputError(format!(
            "--metric {m}: {} has no value of it; fix: {}",
            args.bundle.display(),
            match metrics.is_empty() {
                true => "the bundle has no quality values (run with a [quality] table)".to_string(),
                false => format!("use one of {}", metrics.join(", ")),
            }
        ))
        .into());
    }
    if let Some(e) = args.evaluator.as_deref() {
        let of_metric = |l: &Label| args.metric.as_ref().is_none_or(|m| *m == l.0);
        if !labels.iter().any(|l| of_metric(l) && l.1.as_deref() == Some(e)) {
            let evaluators = have(&|l| l.1.clone().filter(|_| of_metric(l)));
            return Err(crate::InputError(format!(
                "--evaluator {e}: {} has no value scored by it{}; fix: {}",
                args.bundle.display(),
                args.metric.as_deref().map(|m| format!(" for {m}")).unwrap_or_default(),
                match evaluators.is_empty() {
                    true => "leave --evaluator out (no value of the bundle names an evaluator)".to_string(),
                    false => format!("use one of {}", evaluators.join(", ")),
                }
            ))
            .into());
        }
    }
    let opts = ReportOptions {
        metric: args.metric.clone(),
        evaluator: args.evaluator.clone(),
        resamples: args.resamples,
        seed: args.seed,
    };
    let mut report = render(&bundle, &args.bundle.display().to_string(), recounted, &opts);
    if let Some(path) = &args.compare {
        let reference = crate::input::read_bundle_file(path)?.bundle;
        if metrics::compare::paired_cells(&bundle, &reference).is_empty() {
            return Err(crate::compare::no_common_cell(&args.bundle, path).into());
        }
        report += &compare_section(&bundle, &reference, &path.display().to_string(), &opts);
    }
    match &args.output {
        Some(path) => {
            crate::output::write_atomic(path, report.as_bytes())?;
            // As export and merge: the path of what was written on standard output.
            println!("{}", path.display());
        }
        None => print!("{report}"),
    }
    Ok(std::process::ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record whose parity was reached in only part of the resamples warns, beside S_parity, that the speedup
    /// interval covers those resamples alone.
    #[test]
    fn a_parity_reached_in_part_of_the_resamples_is_warned_of() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../schema/tests/fixtures/v1.5/demo-series.json");
        let bundle = schema::read_bundle(&std::fs::read_to_string(path).expect("fixture")).expect("bundle");
        let opts = resolve(&bundle, &ReportOptions::default()).expect("quality");
        let records = parity(&bundle, &opts);
        let mut r = records
            .into_iter()
            .find(|r| matches!(r.outcome, schema::parity::Parity::Reached { .. }) && r.reached_fraction.is_some())
            .expect("a record at parity with a bootstrap");
        let quality = cell_quality(&bundle);
        let mut whole = String::new();
        r.reached_fraction = Some(1.0);
        section(&mut whole, &bundle, &quality, &r, false);
        assert!(!whole.contains("Warning: parity was reached in only"), "{whole}");
        r.reached_fraction = Some(0.62);
        let mut s = String::new();
        section(&mut s, &bundle, &quality, &r, false);
        assert!(
            s.contains(
                "**Warning: parity was reached in only 62% of the bootstrap resamples**: S_parity is uncertain, and \
                 each speedup interval below is over those resamples alone (in the other 38% there is no speedup)."
            ),
            "{s}"
        );
    }
}
