//! Quality per cell group, S_parity, the speedup factor at parity and their bootstrap intervals.
//!
//! Quality does not depend on the batch size, so it is measured once per *group* of cells that differ only in B
//! (same model, sampler, N, K, block length): in the group's cell with the largest B, over the whole prompt set
//! (see `GridConfig::quality`). [`cell_quality`] gives every cell its group's values.
//!
//! For each N and each diffusion series (model, sampler, block length, block cache, K- or threshold-driven)
//! against each AR model:
//! - Q_llama = the AR group's value of the metric; f(k) = the diffusion group's value at K = k;
//! - S_parity = min{ k : f(k) at least as good as Q_llama } ([`crate::derive::s_parity`]); "not reached up to
//!   K_max" is an outcome, not an error. A threshold series' points are its thresholds, each at the forwards it
//!   measured (the median forwards of its smallest-B cell): S_parity is the fewest forwards at parity, and names its threshold (at
//!   equal forwards the higher threshold comes first);
//! - per batch size B: speedup = median L_e2e(AR at B) / median L_e2e(diffusion at S_parity, B), naming the two
//!   cells; missing or failed cells leave the speedup absent with a note;
//! - 95% intervals by a seeded, paired bootstrap over prompts: each resample draws the prompt set's size of
//!   prompt indices with replacement and pools every group's per-prompt values over the same draw; S_parity
//!   and the speedup are recomputed per resample (latencies stay the measured medians). Percentile intervals.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use schema::bundle::{Bundle, Cell, CellKey, CellStatus, Pooling, QualityValue, Sampler};
use schema::grid::{BlockCache, Threshold};
pub use schema::parity::{BootstrapInfo, Estimate, Parity, ParityRecord, SpeedupRow, StepQuality, StepsInterval};

use crate::derive::{cell_steps, cell_summary, s_parity, s_parity_point, speedup};
use crate::rng::SplitMix64;

/// A cell's key without the batch size: the cells that share one quality measurement.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    /// Model id.
    pub model: String,
    /// Generation algorithm.
    pub sampler: Sampler,
    /// Diffusion steps K.
    pub steps: Option<u32>,
    /// Sequence length N.
    pub seq_len: u32,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Output tokens.
    pub output_tokens: u32,
    /// Block length.
    pub block_length: Option<u32>,
    /// Block cache.
    pub cache: Option<BlockCache>,
    /// Confidence threshold.
    pub threshold: Option<Threshold>,
}

impl GroupKey {
    /// The group of a cell.
    pub fn of(k: &CellKey) -> GroupKey {
        GroupKey {
            model: k.model.clone(),
            sampler: k.sampler,
            steps: k.steps,
            seq_len: k.seq_len,
            prompt_tokens: k.prompt_tokens,
            output_tokens: k.output_tokens,
            block_length: k.block_length,
            cache: k.cache,
            threshold: k.threshold,
        }
    }
}

/// Per group, the index of the cell whose quality stands for the group: among the group's cells that have
/// quality values, the one with the largest batch size.
pub fn quality_cells(bundle: &Bundle) -> HashMap<GroupKey, usize> {
    let mut best: HashMap<GroupKey, usize> = HashMap::new();
    for (i, c) in bundle.cells.iter().enumerate().filter(|(_, c)| !c.quality.is_empty()) {
        let g = GroupKey::of(&c.key);
        match best.get(&g) {
            Some(&j) if bundle.cells[j].key.batch_size >= c.key.batch_size => {}
            _ => {
                best.insert(g, i);
            }
        }
    }
    best
}

/// The quality values of every cell, in bundle order: its own, else its group's (empty when neither).
pub fn cell_quality(bundle: &Bundle) -> Vec<Vec<QualityValue>> {
    let groups = quality_cells(bundle);
    bundle
        .cells
        .iter()
        .map(|c| {
            if !c.quality.is_empty() {
                return c.quality.clone();
            }
            groups.get(&GroupKey::of(&c.key)).map(|&i| bundle.cells[i].quality.clone()).unwrap_or_default()
        })
        .collect()
}

/// Pools per-prompt values as `pooling` says, each prompt counted `weight(prompt)` times; `None` when no prompt
/// with a value has a positive weight.
pub fn pool(q: &QualityValue, weight: impl Fn(u32) -> f64) -> Option<f64> {
    let mut num = 0.0;
    let mut den = 0.0;
    for p in &q.per_prompt {
        let w = weight(p.prompt);
        if w <= 0.0 || !p.value.is_finite() {
            continue;
        }
        match q.pooling.unwrap_or(Pooling::Mean) {
            Pooling::Mean => {
                num += w * p.value;
                den += w;
            }
            Pooling::TokenPerplexity => {
                let t = p.tokens.unwrap_or(0) as f64 * w;
                if p.value > 0.0 {
                    num += t * p.value.ln();
                    den += t;
                }
            }
        }
    }
    (den > 0.0).then(|| match q.pooling.unwrap_or(Pooling::Mean) {
        Pooling::Mean => num / den,
        Pooling::TokenPerplexity => (num / den).exp(),
    })
}

/// What S_parity is computed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParityOptions {
    /// The metric (e.g. `perplexity`).
    pub metric: String,
    /// Its evaluator (`None`: values without an evaluator, i.e. text statistics).
    pub evaluator: Option<String>,
    /// Bootstrap resamples (0: no intervals).
    pub resamples: u32,
    /// Bootstrap seed.
    pub seed: u64,
}

impl ParityOptions {
    /// Bootstrap resamples when a bundle's config does not say.
    pub const DEFAULT_RESAMPLES: u32 = schema::grid::DEFAULT_BOOTSTRAP_RESAMPLES;

    /// `metric` scored by `evaluator`, with the bootstrap settings of the bundle's config (or
    /// [`Self::DEFAULT_RESAMPLES`] and seed 0 without a `[quality]` table).
    pub fn for_metric(bundle: &Bundle, metric: String, evaluator: Option<String>) -> ParityOptions {
        let cfg = Self::from_config(bundle);
        ParityOptions {
            metric,
            evaluator,
            resamples: cfg.as_ref().map_or(Self::DEFAULT_RESAMPLES, |c| c.resamples),
            seed: cfg.as_ref().map_or(0, |c| c.seed),
        }
    }

    /// The options a bundle's config asks for: `quality.parity_metric`, the primary evaluator for perplexity (the
    /// encoder for BERTScore),
    /// `quality.bootstrap_resamples`, `run.seed`. `None` when the config has no `[quality]` table.
    pub fn from_config(bundle: &Bundle) -> Option<ParityOptions> {
        let cfg = &bundle.provenance.config;
        let q = cfg.quality.as_ref()?;
        let evaluator = match q.parity_metric.as_str() {
            "perplexity" => q.evaluators.first().map(|e| e.id.clone()),
            m if m.starts_with("bertscore_") => q.bertscore.as_ref().map(|b| b.id.clone()),
            _ => None,
        };
        Some(ParityOptions {
            metric: q.parity_metric.clone(),
            evaluator,
            resamples: q.bootstrap_resamples,
            seed: cfg.run.seed,
        })
    }
}

/// The value at quantile `p` of sorted values (nearest rank).
fn quantile<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    let n = sorted.len();
    (n > 0).then(|| sorted[((n - 1) as f64 * p).round() as usize])
}

fn interval(mut v: Vec<f64>, value: f64) -> Estimate {
    v.retain(|x| x.is_finite());
    // The same order statistics as `quantile` of the sorted values, by selection (the selection `derive`'s median
    // instantiates already: no f64 sort in the explorer's wasm).
    let mut at = |p: f64| {
        let n = v.len();
        (n > 0).then(|| *v.select_nth_unstable_by(((n - 1) as f64 * p).round() as usize, f64::total_cmp).1)
    };
    let (low, high) = (at(0.025), at(0.975));
    Estimate { value, low, high }
}

/// S_parity and the speedup for every N, diffusion series and AR model of the bundle that have values of the
/// metric. Ordered by N, AR model, diffusion model, sampler, block length.
pub fn parity(bundle: &Bundle, opts: &ParityOptions) -> Vec<ParityRecord> {
    let groups = quality_cells(bundle);
    let value_of = |g: &GroupKey| -> Option<&QualityValue> {
        let cell = &bundle.cells[*groups.get(g)?];
        cell.quality.iter().find(|q| q.metric == opts.metric && q.evaluator == opts.evaluator)
    };
    // Medians of ok cells by key.
    let e2e: HashMap<&CellKey, f64> = bundle
        .cells
        .iter()
        .filter(|c| c.status == CellStatus::Ok)
        .filter_map(|c| Some((&c.key, cell_summary(c).e2e_ms?.median)))
        .collect();
    // Inserted, not collected: a collect into a set instantiates a whole stable sort (wasm size).
    let mut quality_groups: BTreeSet<GroupKey> = BTreeSet::new();
    groups.keys().for_each(|g| {
        quality_groups.insert(g.clone());
    });
    let ar_groups: Vec<&GroupKey> = quality_groups.iter().filter(|g| g.sampler == Sampler::ArGreedy).collect();
    // Diffusion series: (N, model, sampler, block, cache, thresholded) -> points (steps or forwards, threshold,
    // group), ordered by steps, then the higher threshold first.
    type SeriesKey = (u32, String, Sampler, Option<u32>, Option<BlockCache>, bool);
    type Point<'a> = (u32, Option<Threshold>, &'a GroupKey);
    let thresholds = threshold_cells(bundle);
    let mut series: BTreeMap<SeriesKey, Vec<Point<'_>>> = BTreeMap::new();
    for g in quality_groups.iter().filter(|g| g.sampler != Sampler::ArGreedy) {
        let steps = match (g.steps, g.threshold) {
            (Some(k), _) => Some(k),
            (None, Some(_)) => thresholds.get(g).and_then(|&i| cell_steps(&bundle.cells[i])),
            (None, None) => None,
        };
        if let Some(k) = steps {
            let key = (g.seq_len, g.model.clone(), g.sampler, g.block_length, g.cache, g.threshold.is_some());
            let points = series.entry(key).or_default();
            // Inserted in order, not sorted afterwards: a sort of these tuples would instantiate a whole sort
            // (the explorer's wasm size).
            let at = points.iter().position(|p| (p.0, std::cmp::Reverse(p.1)) > (k, std::cmp::Reverse(g.threshold)));
            points.insert(at.unwrap_or(points.len()), (k, g.threshold, g));
        }
    }
    let prompts = bundle.prompt_set.count;
    let mut out = Vec::new();
    for ar in ar_groups {
        let Some(base_q) = value_of(ar) else { continue };
        for ((n, model, sampler, block, cache, thresholded), by_k) in
            series.iter().filter(|((n, ..), _)| *n == ar.seq_len)
        {
            // (steps, threshold, group, value), in the series' order.
            let curve_q: Vec<(u32, Option<Threshold>, &GroupKey, &QualityValue)> =
                by_k.iter().filter_map(|&(k, t, g)| Some((k, t, g, value_of(g)?))).collect();
            if curve_q.is_empty() {
                continue;
            }
            let direction = base_q.direction;
            let points: Vec<(u32, f64)> = curve_q.iter().map(|(k, _, _, q)| (*k, q.value)).collect();
            let outcome = s_parity(&points, base_q.value, direction);
            let matched = s_parity_point(&points, base_q.value, direction);
            // Batch sizes of the AR cells at this N, with the diffusion cells they are matched with.
            let ar_cells: Vec<&Cell> = bundle
                .cells
                .iter()
                .filter(|c| GroupKey::of(&c.key) == *ar && c.status == CellStatus::Ok && e2e.contains_key(&c.key))
                .collect();
            // The diffusion cell of point `i` of the curve at batch size `b`.
            let diff_cell = |i: usize, b: u32| -> Option<(&CellKey, f64)> {
                let g = curve_q.get(i)?.2;
                bundle.cells.iter().find_map(|c| {
                    (GroupKey::of(&c.key) == *g && c.key.batch_size == b).then_some(())?;
                    Some((&c.key, *e2e.get(&c.key)?))
                })
            };
            // Bootstrap.
            let with_detail =
                !base_q.per_prompt.is_empty() && curve_q.iter().all(|(_, _, _, q)| !q.per_prompt.is_empty());
            let resamples = if with_detail && prompts > 0 { opts.resamples } else { 0 };
            let mut rng = SplitMix64::new(opts.seed ^ u64::from(*n).rotate_left(32));
            let mut boot_base = Vec::new();
            let mut boot_curve: Vec<Vec<f64>> = vec![Vec::new(); curve_q.len()];
            // Per resample: S_parity and the index of its point in the curve.
            let mut boot_steps: Vec<Option<(u32, usize)>> = Vec::new();
            let mut counts = vec![0u32; prompts as usize];
            for _ in 0..resamples {
                counts.iter_mut().for_each(|c| *c = 0);
                for _ in 0..prompts {
                    counts[rng.below(prompts) as usize] += 1;
                }
                let w = |p: u32| counts.get(p as usize).map_or(0.0, |&c| f64::from(c));
                let Some(b) = pool(base_q, w) else { continue };
                boot_base.push(b);
                // Points without a value in this resample score NaN, which never reaches parity.
                let mut pts = Vec::with_capacity(curve_q.len());
                for (i, (k, _, _, q)) in curve_q.iter().enumerate() {
                    let v = pool(q, w);
                    if let Some(v) = v {
                        boot_curve[i].push(v);
                    }
                    pts.push((*k, v.unwrap_or(f64::NAN)));
                }
                boot_steps.push(s_parity_point(&pts, b, direction).map(|i| (pts[i].0, i)));
            }
            let boot = resamples > 0 && !boot_steps.is_empty();
            let baseline = if boot { interval(boot_base, base_q.value) } else { Estimate::point(base_q.value) };
            let curve = curve_q
                .iter()
                .zip(boot_curve)
                .map(|((k, t, _, q), v)| StepQuality {
                    steps: *k,
                    threshold: *t,
                    quality: if boot { interval(v, q.value) } else { Estimate::point(q.value) },
                })
                .collect();
            let (s_parity_interval, reached_fraction) = if boot {
                // Not reached sorts above every K.
                // (As u64: the one integer sort the crate instantiates, which keeps the explorer's wasm small.)
                let mut s: Vec<u64> = boot_steps.iter().map(|s| s.map_or(u64::MAX, |(k, _)| u64::from(k))).collect();
                s.sort_unstable();
                let bound = |p| quantile(&s, p).filter(|&k| k != u64::MAX).and_then(|k| u32::try_from(k).ok());
                let reached = boot_steps.iter().filter(|s| s.is_some()).count() as f64 / boot_steps.len() as f64;
                (Some(StepsInterval { low: bound(0.025), high: bound(0.975) }), Some(reached))
            } else {
                (None, None)
            };
            let speedups = ar_cells
                .iter()
                .map(|c| {
                    let b = c.key.batch_size;
                    let ar_ms = e2e[&c.key];
                    let mut row = SpeedupRow {
                        batch_size: b,
                        ar_cell: c.key.clone(),
                        ar_e2e_ms: ar_ms,
                        diffusion_cell: None,
                        diffusion_e2e_ms: None,
                        speedup: None,
                        viable: None,
                        note: None,
                    };
                    let Parity::Reached { steps } = outcome else {
                        row.note = Some(match outcome {
                            Parity::NotReached { .. } if *thresholded => {
                                "parity not reached at any threshold of the grid".to_string()
                            }
                            Parity::NotReached { max_steps } => format!("parity not reached up to K = {max_steps}"),
                            _ => "no diffusion quality values".into(),
                        });
                        return row;
                    };
                    let at = match matched.and_then(|i| curve_q[i].1) {
                        Some(t) => format!("threshold {t} ({steps} forwards)"),
                        None => format!("K = {steps}"),
                    };
                    // Each point's cell at this B, looked up once (the resamples below reuse them).
                    let at_b: Vec<Option<(&CellKey, f64)>> = (0..curve_q.len()).map(|i| diff_cell(i, b)).collect();
                    let Some((key, ms)) = matched.and_then(|i| at_b[i]) else {
                        row.note = Some(format!("no ok diffusion cell at {at}, B = {b}"));
                        return row;
                    };
                    let Some(point) = speedup(ar_ms, ms) else { return row };
                    let est = if boot {
                        let v: Vec<f64> =
                            boot_steps.iter().flatten().filter_map(|&(_, i)| speedup(ar_ms, at_b[i]?.1)).collect();
                        interval(v, point)
                    } else {
                        Estimate::point(point)
                    };
                    row.diffusion_cell = Some(key.clone());
                    row.diffusion_e2e_ms = Some(ms);
                    row.speedup = Some(est);
                    row.viable = Some(point > 1.0);
                    row
                })
                .collect();
            out.push(ParityRecord {
                metric: opts.metric.clone(),
                evaluator: opts.evaluator.clone(),
                direction,
                seq_len: *n,
                ar_model: ar.model.clone(),
                diffusion_model: model.clone(),
                sampler: *sampler,
                block_length: *block,
                cache: *cache,
                thresholded: *thresholded,
                parity_threshold: matched.and_then(|i| curve_q[i].1),
                baseline,
                curve,
                outcome,
                s_parity_interval,
                reached_fraction,
                speedups,
                bootstrap: boot.then_some(BootstrapInfo { resamples, seed: opts.seed, prompts }),
            });
        }
    }
    out
}

/// Per threshold group, the index of its ok cell with the smallest batch size (at B = 1, the forwards of one
/// sequence): the cell whose measured forwards ([`crate::derive::cell_steps`], the median rounded up) are the
/// group's cost. One pass over the cells.
fn threshold_cells(bundle: &Bundle) -> HashMap<GroupKey, usize> {
    let mut out: HashMap<GroupKey, usize> = HashMap::new();
    for (i, c) in bundle.cells.iter().enumerate() {
        if c.status != CellStatus::Ok || c.key.threshold.is_none() {
            continue;
        }
        let j = out.entry(GroupKey::of(&c.key)).or_insert(i);
        if bundle.cells[*j].key.batch_size > c.key.batch_size {
            *j = i;
        }
    }
    out
}

/// S_parity's bootstrap interval in words, as every reader writes it: `95% interval 4 to 16; parity reached in
/// 80% of resamples` (an end where parity was not reached: `not reached (> K_max)`); `None` without a bootstrap.
pub fn s_parity_interval_text(r: &ParityRecord) -> Option<String> {
    let (i, f) = (r.s_parity_interval?, r.reached_fraction?);
    let max = r.curve.iter().map(|c| c.steps).max().unwrap_or(0);
    let end = |k: Option<u32>| k.map_or_else(|| format!("not reached (> {max})"), |k| k.to_string());
    Some(format!("95% interval {} to {}; parity reached in {:.0}% of resamples", end(i.low), end(i.high), f * 100.0))
}

/// What an uncertain S_parity ([`uncertain_text`]) means for a speedup's interval, as the explorer's rows and
/// `figures`' LaTeX say it after the warning.
pub const UNCERTAIN_SPEEDUP: &str = "S_parity is uncertain, and the speedup interval is over those resamples alone";

/// The warning every reader writes beside a record whose parity the point estimate reached but not every bootstrap
/// resample did (S_parity is uncertain): `parity was reached in only 62% of the bootstrap resamples`; `None`
/// otherwise.
pub fn uncertain_text(r: &ParityRecord) -> Option<String> {
    // (Its consequence for one speedup interval: [`UNCERTAIN_SPEEDUP`].)
    match (r.reached_fraction, r.outcome) {
        (Some(f), Parity::Reached { .. }) if f < 1.0 => {
            Some(format!("parity was reached in only {:.0}% of the bootstrap resamples", f * 100.0))
        }
        _ => None,
    }
}

/// Where the true S_parity lies given the steps tried: (the largest tried below S_parity, which missed, S_parity];
/// `None` as the lower end where S_parity is the fewest tried, and no interval where parity was not reached.
pub fn grid_interval(r: &ParityRecord) -> Option<(Option<u32>, u32)> {
    let Parity::Reached { steps } = r.outcome else { return None };
    Some((r.curve.iter().map(|c| c.steps).filter(|&k| k < steps).max(), steps))
}

/// What the grid's steps say of a K series' S_parity, as every reader writes it: S_parity is the fewest steps *tried*
/// that reach parity, so the true fewest lie above the largest K tried below it (`K = 32 did not reach parity: the
/// fewest steps that do lie in (32, 64]; run --parity-search measures the K between`), or, at the smallest K tried,
/// may be fewer still. `None` for a threshold series and where parity was not reached.
pub fn s_parity_bracket_text(r: &ParityRecord) -> Option<String> {
    let (below, steps) = grid_interval(r).filter(|_| !r.thresholded)?;
    Some(match below {
        Some(below) if below + 1 == steps => format!("K = {below} did not reach parity: {steps} is the fewest steps"),
        Some(below) => format!(
            "K = {below} did not reach parity: the fewest steps that do lie in ({below}, {steps}]; run --parity-search \
             measures the K between"
        ),
        None => format!("{steps} is the fewest steps tried: fewer may reach parity too"),
    })
}

/// S_parity of a record in words, as every reader writes it: `K = 8`, `3 forwards (threshold 0.9)`, `not reached
/// up to K = 128`, `not reached at any threshold`, `no data`.
pub fn s_parity_text(r: &ParityRecord) -> String {
    match (r.outcome, r.parity_threshold) {
        (Parity::Reached { steps }, Some(t)) => {
            format!("{steps} forward{} (threshold {t})", if steps == 1 { "" } else { "s" })
        }
        (Parity::Reached { steps }, None) => format!("K = {steps}"),
        (Parity::NotReached { .. }, _) if r.thresholded => "not reached at any threshold".into(),
        (Parity::NotReached { max_steps }, _) => format!("not reached up to K = {max_steps}"),
        (Parity::NoData, _) => "no data".into(),
    }
}

/// The verdict of a speedup row that has no speedup, as every reader writes it: `not viable` where the diffusion
/// model never reached the AR model's quality (a verdict), `no verdict` where parity was reached but the
/// diffusion cell at S_parity has no timing at this B (it failed, ran out of memory or was not run: nothing was
/// measured to judge) or there are no quality values.
pub fn verdict_without_speedup(r: &ParityRecord) -> &'static str {
    verdict_without_speedup_why(r.outcome).0
}

/// Whether a batch size of record `r` is viable, as its verdict says: its speedup row's (above 1 at parity),
/// `false` where parity was not reached (a verdict that needs no latency, so also for a B whose autoregressive
/// cell did not finish), else `None` (no verdict: nothing to judge by).
pub fn viable(r: &ParityRecord, at: &AtBatch) -> Option<bool> {
    let row = match at {
        AtBatch::Row(row) => row.viable,
        AtBatch::Unfinished { .. } => None,
    };
    row.or(matches!(r.outcome, Parity::NotReached { .. }).then_some(false))
}

/// [`verdict_without_speedup`] of an outcome, with why (`parity not reached`), for a reader with no record's note
/// at hand (the explorer's S_parity rows).
pub fn verdict_without_speedup_why(outcome: Parity) -> (&'static str, &'static str) {
    match outcome {
        Parity::NotReached { .. } => ("not viable", "parity not reached"),
        Parity::Reached { .. } => ("no verdict", "the diffusion cell at S_parity was not measured"),
        Parity::NoData => ("no verdict", "no quality values"),
    }
}

/// What a chart cell of a speedup row without a speedup says: `no parity` (not reached), `not measured` (reached,
/// but the diffusion cell at S_parity has no timing at this B), `no data`.
pub fn no_speedup_label(r: &ParityRecord) -> &'static str {
    match r.outcome {
        Parity::NotReached { .. } => "no parity",
        Parity::Reached { .. } => "not measured",
        Parity::NoData => "no data",
    }
}

/// The caveat every reader prints beside S_parity when parity was reached at the floor of a higher-is-better score
/// (ROUGE, BERTScore): an AR baseline of 0 is matched by any diffusion point scoring 0 too, a tie of two texts that
/// share nothing with the reference, which says nothing about quality. `None` when no record reached parity so.
pub fn floor_tie_note(records: &[ParityRecord]) -> Option<String> {
    let r = records.iter().find(|r| {
        r.direction == schema::key::Direction::HigherIsBetter
            && r.baseline.value <= 0.0
            && matches!(r.outcome, Parity::Reached { .. })
    })?;
    Some(format!(
        "the AR baseline's {} is 0, the metric's floor, so any diffusion point scoring 0 reaches parity: a tie of two \
         texts that share nothing with the reference says nothing about quality (use another metric)",
        r.metric
    ))
}

/// The caveat every reader prints when the evaluator that scored a record is one of the models it compares (the
/// study's primary grid scores with Meta-Llama-3-8B, its AR arm): the baseline quality is then that model's
/// perplexity on its own greedy text, which favours it, so S_parity may come later than under an independent
/// evaluator. `None` when no record is scored by a compared model.
pub fn self_scored_note(records: &[ParityRecord]) -> Option<String> {
    let r =
        records.iter().find(|r| r.evaluator.as_ref().is_some_and(|e| *e == r.ar_model || *e == r.diffusion_model))?;
    let e = r.evaluator.as_deref().unwrap_or_default();
    let arm = if *e == r.ar_model { "the autoregressive model" } else { "the diffusion model" };
    Some(format!(
        "{metric} is scored by {e}, which is also {arm} compared: a model scoring its own greedy text favours it, so \
         the baseline quality may be out of the other model's reach and S_parity later than under an independent \
         evaluator (add one as another [[quality.evaluators]] table and read its S_parity too)",
        metric = r.metric
    ))
}

/// The cautions every reader prints with S_parity, in this order: [`self_scored_note`], [`floor_tie_note`],
/// [`few_prompts_note`], [`unscored_prompts_note`], those that apply.
pub fn cautions(bundle: &Bundle, records: &[ParityRecord]) -> Vec<String> {
    [
        self_scored_note(records),
        floor_tie_note(records),
        few_prompts_note(records),
        unscored_prompts_note(bundle, records),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The cells behind `records` (their models at their N) whose value of a record's metric, under its evaluator,
/// leaves out prompts the cell generated for, as (cell, prompts scored, prompts generated): a continuation with
/// nothing to score has no value (perplexity: no evaluator token once decoded, the text all end-of-sequence,
/// padding or mask tokens). The text statistics score such a continuation 0 instead, so they cover every prompt.
pub fn unscored_prompts<'a>(bundle: &'a Bundle, records: &[ParityRecord]) -> Vec<(&'a CellKey, usize, usize)> {
    let mut out = Vec::new();
    for c in &bundle.cells {
        let generated: BTreeSet<u32> = c.generations.iter().map(|g| g.prompt).collect();
        if generated.is_empty() {
            continue;
        }
        let of_record = |r: &ParityRecord| {
            r.seq_len == c.key.seq_len && (c.key.model == r.ar_model || c.key.model == r.diffusion_model)
        };
        let scored = c
            .quality
            .iter()
            .filter(|q| records.iter().any(|r| of_record(r) && q.metric == r.metric && q.evaluator == r.evaluator))
            .map(|q| q.per_prompt.iter().filter(|p| generated.contains(&p.prompt)).count())
            .min();
        if let Some(scored) = scored.filter(|&n| n < generated.len()) {
            out.push((&c.key, scored, generated.len()));
        }
    }
    out
}

/// [`unscored_prompts`] in words (without a final full stop); `None` when every value covers its cell's prompts.
pub fn unscored_prompts_note(bundle: &Bundle, records: &[ParityRecord]) -> Option<String> {
    let cells = unscored_prompts(bundle, records);
    let (_, scored, generated) = *cells.iter().min_by(|a, b| (a.1 * b.2).cmp(&(b.1 * a.2)))?;
    let metric = records.first().map_or("the quality", |r| r.metric.as_str());
    Some(format!(
        "{metric} leaves out prompts in {} (down to {scored} of {generated} prompts): a continuation with nothing \
         to score (empty once decoded: all end-of-sequence, padding or mask tokens) has no value, so those cells' \
         quality is over fewer prompts than the others' and says nothing of the outputs that failed most",
        if cells.len() == 1 { "1 cell".to_string() } else { format!("{} cells", cells.len()) }
    ))
}

/// The unigram entropies (diffusion, AR) at S_parity of a record at batch size `b`, where the diffusion output's
/// is far below the AR model's ([`crate::derive::entropy_warning`]): degenerate text that flatters perplexity. The
/// diffusion cell at S_parity and the AR cell at that B (each cell's own values, else its group's: `quality`, from
/// [`cell_quality`]); `None` without a diffusion cell at S_parity at that B, an entropy, or a warning. The S_parity
/// table, the answer's heat map, `report` and `figures` all judge each batch size by this.
pub fn low_entropy_at_batch(
    bundle: &Bundle,
    quality: &[Vec<schema::bundle::QualityValue>],
    r: &ParityRecord,
    b: u32,
) -> Option<(f64, f64)> {
    let row = r.speedups.iter().find(|x| x.batch_size == b && x.diffusion_cell.is_some())?;
    let entropy = |key: &schema::CellKey| {
        let i = bundle.cells.iter().position(|c| c.key == *key)?;
        quality[i].iter().find(|q| q.metric == "unigram_entropy").map(|q| q.value)
    };
    let (d, a) = (row.diffusion_cell.as_ref().and_then(entropy)?, entropy(&row.ar_cell)?);
    crate::derive::entropy_warning(d, a).then_some((d, a))
}

/// [`low_entropy_at_batch`] over a record's batch sizes, as the warnings a reader writes once per record: one per
/// pair of entropies, naming its batch sizes (`at B = 1, 4: ...`) unless it holds at every B with a diffusion cell at
/// S_parity. Empty when none applies.
pub fn low_entropy_at_parity(
    bundle: &Bundle,
    quality: &[Vec<schema::bundle::QualityValue>],
    r: &ParityRecord,
) -> Vec<String> {
    let rows: Vec<u32> = r.speedups.iter().filter(|x| x.diffusion_cell.is_some()).map(|x| x.batch_size).collect();
    let mut groups: Vec<((f64, f64), Vec<u32>)> = Vec::new();
    for &b in &rows {
        if let Some(pair) = low_entropy_at_batch(bundle, quality, r, b) {
            match groups.iter_mut().find(|(p, _)| *p == pair) {
                Some((_, bs)) => bs.push(b),
                None => groups.push((pair, vec![b])),
            }
        }
    }
    groups
        .into_iter()
        .map(|((d, a), bs)| {
            let text = low_entropy_text(d, a);
            if bs.len() == rows.len() {
                return text;
            }
            let bs: Vec<String> = bs.iter().map(u32::to_string).collect();
            format!("at B = {}: {text}", bs.join(", "))
        })
        .collect()
}

/// [`low_entropy_at_parity`]'s warning in words (without a final full stop).
pub fn low_entropy_text(diffusion: f64, ar: f64) -> String {
    format!(
        "at S_parity the diffusion output's unigram entropy ({diffusion:.2} bits) is below {:.0}% of the \
         autoregressive model's ({ar:.2} bits): parity may come from repetitive text",
        crate::derive::ENTROPY_WARNING_RATIO * 100.0
    )
}

/// Below this many prompts a bootstrap over them says little: with one prompt every resample is that prompt.
pub const FEW_PROMPTS: u32 = 5;

/// The caveat every reader prints when the intervals come from a bootstrap over fewer than [`FEW_PROMPTS`] prompts:
/// its resamples repeat the same few prompts, so an interval (and S_parity's) is narrow, or a single value, because
/// there is little to resample, not because the quality is known. `None` otherwise.
pub fn few_prompts_note(records: &[ParityRecord]) -> Option<String> {
    let n = records.iter().filter_map(|r| r.bootstrap).map(|b| b.prompts).filter(|&n| n < FEW_PROMPTS).min()?;
    Some(format!(
        "the intervals come from a bootstrap over {n} prompt{}: its resamples repeat the same few prompts, so an \
         interval is narrow (with one prompt, a single value) for want of data, not because the quality is known; \
         use more prompts (prompts.preset = \"medium\" has 32) before reading S_parity's interval",
        if n == 1 { "" } else { "s" }
    ))
}

/// What happened to a cell that did not finish, in words (`ran out of memory`); `None` for an ok cell.
fn unfinished_what(status: &CellStatus) -> Option<&'static str> {
    match status {
        CellStatus::Ok => None,
        CellStatus::Oom { .. } => Some("ran out of memory"),
        CellStatus::Error { .. } => Some("failed"),
        CellStatus::Skipped { .. } => Some("was not run"),
    }
}

/// The autoregressive cells of record `r` (its AR model, at its N) that did not finish (out of memory, failed, not
/// run), at batch sizes the record has no speedup row for (no baseline latency to divide by), by B, each with what
/// happened in words (`ran out of memory`). Readers list them with the record's rows ([`rows_by_batch`]): a table
/// that silently lacks a B reads as if it had never been planned.
pub fn unfinished_baselines<'a>(bundle: &'a Bundle, r: &ParityRecord) -> Vec<(&'a CellKey, &'static str)> {
    let mut out: Vec<(&CellKey, &'static str)> = bundle
        .cells
        .iter()
        .filter(|c| c.key.sampler == Sampler::ArGreedy && c.key.model == r.ar_model && c.key.seq_len == r.seq_len)
        .filter(|c| !r.speedups.iter().any(|row| row.batch_size == c.key.batch_size))
        .filter_map(|c| Some((&c.key, unfinished_what(&c.status)?)))
        .collect();
    out.sort_by_key(|(k, _)| k.batch_size);
    out
}

/// One batch size of a record, as every reader lists them: its speedup row, or the autoregressive cell that did not
/// finish at that B ([`unfinished_baselines`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AtBatch<'a> {
    /// A speedup row (with a speedup, or a note saying why there is none).
    Row(&'a SpeedupRow),
    /// No speedup row: the autoregressive cell at this B did not finish; `what` happened to it, in words.
    Unfinished {
        /// The autoregressive cell.
        ar_cell: &'a CellKey,
        /// `ran out of memory`, `failed` or `was not run`.
        what: &'static str,
    },
}

impl AtBatch<'_> {
    /// The batch size.
    pub fn batch_size(&self) -> u32 {
        match self {
            AtBatch::Row(row) => row.batch_size,
            AtBatch::Unfinished { ar_cell, .. } => ar_cell.batch_size,
        }
    }
}

/// Every batch size of record `r`, by B: its speedup rows and the batch sizes whose autoregressive cell did not
/// finish. What `report`'s tables and summary, `export --table parity` and the explorer's answer list.
pub fn rows_by_batch<'a>(bundle: &'a Bundle, r: &'a ParityRecord) -> Vec<AtBatch<'a>> {
    let unfinished =
        unfinished_baselines(bundle, r).into_iter().map(|(ar_cell, what)| AtBatch::Unfinished { ar_cell, what });
    let mut rows: Vec<AtBatch<'a>> = r.speedups.iter().map(AtBatch::Row).chain(unfinished).collect();
    rows.sort_by_key(AtBatch::batch_size);
    rows
}

/// Why a batch size of [`unfinished_baselines`] has no speedup, as every reader writes it: `the autoregressive cell
/// ran out of memory (no baseline latency)`.
pub fn unfinished_baseline_text(what: &str) -> String {
    format!("the autoregressive cell {what} (no baseline latency)")
}

/// The verdict of such a batch size with why, as `report` writes it: `not viable` where parity was not reached (that
/// verdict needs no latency), else `no verdict`.
pub fn unfinished_verdict(r: &ParityRecord, what: &str) -> String {
    let why = unfinished_baseline_text(what);
    match r.outcome {
        Parity::NotReached { .. } => format!("not viable: parity {}; {why}", s_parity_text(r)),
        _ => format!("no verdict: {why}"),
    }
}

/// The (AR model, N) of `bundle` at which no autoregressive cell finished, so that no record of `records` compares
/// against it there (no quality baseline, no latency): every reader says so where S_parity at that N would be.
pub fn unjudged_baselines<'a>(bundle: &'a Bundle, records: &[ParityRecord]) -> Vec<(&'a str, u32)> {
    let mut at: BTreeMap<(&str, u32), bool> = BTreeMap::new();
    for c in bundle.cells.iter().filter(|c| c.key.sampler == Sampler::ArGreedy) {
        *at.entry((c.key.model.as_str(), c.key.seq_len)).or_insert(true) &= unfinished_what(&c.status).is_some();
    }
    at.into_iter()
        .filter(|&((m, n), none_finished)| none_finished && !records.iter().any(|r| r.ar_model == m && r.seq_len == n))
        .map(|(k, _)| k)
        .collect()
}

/// What a reader writes of an (AR model, N) of [`unjudged_baselines`].
pub fn unjudged_baseline_text(ar_model: &str, seq_len: u32) -> String {
    format!(
        "no S_parity at N = {seq_len} against {ar_model}: none of its autoregressive cells there finished (no quality baseline, no latency)"
    )
}

/// Whether `point` of a record's curve is its S_parity point (the threshold at parity for a threshold series).
pub fn is_parity_point(r: &ParityRecord, point: &StepQuality) -> bool {
    match (r.outcome, r.thresholded) {
        (Parity::Reached { .. }, true) => point.threshold.is_some() && point.threshold == r.parity_threshold,
        (Parity::Reached { steps }, false) => point.steps == steps,
        _ => false,
    }
}

/// Recomputes a bundle's stored parity records ([`schema::Bundle::parity`]) from its cells, with the options its
/// config asks for (writers call this last; no `[quality]` table: none).
pub fn recompute(bundle: &mut Bundle) {
    bundle.parity = match ParityOptions::from_config(bundle) {
        Some(o) => parity(bundle, &o),
        None => Vec::new(),
    };
}
