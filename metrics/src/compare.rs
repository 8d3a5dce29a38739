//! Two bundles of the same cells side by side: the runner's and a reference implementation's
//! (`jobs/hf_reference.py`), or one grid on two devices.
//!
//! - per cell ([`cell_latency`], [`ratio`]): the median L_e2e, the median ITL (AR) or step time (diffusion) and
//!   the peak memory of each; `dllm-bench compare` prints them with their ratios;
//! - per arm (model) and batch size ([`compare_stacks`]): the median over the cells both have of the latency
//!   ratio first / second, the factor those ratios put into any speedup of a diffusion arm over an AR arm, and the
//!   speedup at parity computed under each bundle ([`crate::parity::parity`]) side by side; `dllm-bench report
//!   --compare` prints them.

use schema::key::{BlockCache, Sampler};
use schema::{Bundle, Cell, CellKey, CellStatus};

use crate::derive::{Summary, cell_summary, summarize};
use crate::parity::{AtBatch, ParityOptions, ParityRecord, parity, rows_by_batch};

/// A cell's latency figures, from [`crate::derive::cell_summary`]; `None` where the cell has none.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CellLatency {
    /// Median L_e2e, ms.
    pub e2e_ms: Option<f64>,
    /// Median inter-token latency (AR) or step time (diffusion), ms.
    pub unit_ms: Option<f64>,
    /// Peak memory: allocated bytes on CUDA, else the process's peak RSS.
    pub peak_bytes: Option<u64>,
}

/// The latency figures of a cell.
pub fn cell_latency(c: &Cell) -> CellLatency {
    let s = cell_summary(c);
    let median = |x: Option<Summary>| x.map(|x| x.median);
    let unit = if c.key.sampler == Sampler::ArGreedy { s.itl_ms } else { s.step_ms };
    CellLatency {
        e2e_ms: median(s.e2e_ms),
        unit_ms: median(unit),
        peak_bytes: s.peak_allocated_bytes.or(s.peak_rss_bytes),
    }
}

/// `num / den`, absent when either is or `den` is not positive.
pub fn ratio(num: Option<f64>, den: Option<f64>) -> Option<f64> {
    match (num, den) {
        (Some(n), Some(d)) if d > 0.0 && n.is_finite() => Some(n / d),
        _ => None,
    }
}

/// What makes two bundles' cells of one key measure different things, each in words (without a final full stop):
/// a model of another shape, another kind or model of device (the study mixes no GPU models: the ratios would be
/// the devices' as much as the implementations'), another precision, another prompt set (what a key does not hold
/// but timing and quality depend on). Every reader of two bundles side by side says these (`compare`, `report
/// --compare`, the explorer's two-stack panel), naming the bundles as `names` says (`["A", "B"]`). Empty when
/// nothing differs.
pub fn mismatches(a: &Bundle, b: &Bundle, [na, nb]: [&str; 2]) -> Vec<String> {
    let mut out = Vec::new();
    for m in &b.models {
        if let Some(s) = a.models.iter().find(|x| x.id == m.id).map(|x| &x.shape).filter(|s| **s != m.shape) {
            out.push(format!(
                "{}: the shapes differ ({na} {s:?}, {nb} {:?}): the cells do not measure the same model",
                m.id, m.shape
            ));
        }
    }
    let (da, db) = (&a.provenance.device, &b.provenance.device);
    if da.kind != db.kind {
        out.push(format!("the bundles ran on different kinds of device ({na} {}, {nb} {})", da.kind, db.kind));
    } else if let (Some(x), Some(y)) = (&da.name, &db.name)
        && x != y
    {
        out.push(format!(
            "the bundles ran on different devices ({na} {x}, {nb} {y}): their ratios are the devices' as much as the \
             implementations' (the study does not mix GPU models)"
        ));
    }
    let (ra, rb) = (&a.provenance.config.run, &b.provenance.config.run);
    if ra.dtype != rb.dtype {
        out.push(format!("the bundles ran at different precisions ({na} {}, {nb} {})", ra.dtype, rb.dtype));
    }
    let (pa, pb) = (&a.prompt_set, &b.prompt_set);
    if let (Some(x), Some(y)) = (&pa.sha256, &pb.sha256)
        && x != y
    {
        out.push(format!(
            "the bundles' prompt sets differ ({na} {} {}, {nb} {} {}): a cell of one shape ran as many tokens from other \
             prompts (its timing compares; its text and quality do not)",
            pa.source, pa.selection, pb.source, pb.selection
        ));
    }
    out
}

/// The cells of `a` that `b` has too, in `a`'s order, each with `b`'s cell of the same key.
pub fn paired_cells<'a>(a: &'a Bundle, b: &'a Bundle) -> Vec<(&'a Cell, &'a Cell)> {
    let by_key: std::collections::HashMap<&CellKey, &Cell> = b.cells.iter().map(|c| (&c.key, c)).collect();
    a.cells.iter().filter_map(|ca| by_key.get(&ca.key).map(|cb| (ca, *cb))).collect()
}

/// One arm at one batch size: the latency ratio first / second over the cells both bundles measured.
#[derive(Debug, Clone, PartialEq)]
pub struct ArmRatio {
    /// The model.
    pub model: String,
    /// Whether the arm is autoregressive (else a diffusion model).
    pub autoregressive: bool,
    /// Batch size B.
    pub batch_size: u32,
    /// Cells ok in both bundles with a median L_e2e in each.
    pub cells: usize,
    /// Median over those cells of L_e2e(first) / L_e2e(second).
    pub median: f64,
    /// Smallest per-cell ratio.
    pub min: f64,
    /// Largest per-cell ratio.
    pub max: f64,
}

/// What the latency ratios do to a speedup of `diffusion_model` over `ar_model` at one batch size: a speedup
/// (L_e2e AR / L_e2e diffusion) measured under the first bundle's stack is `factor` times the one the second
/// stack gives on the same cells (`factor` = AR ratio / diffusion ratio).
#[derive(Debug, Clone, PartialEq)]
pub struct ImplementationFactor {
    /// Batch size B.
    pub batch_size: u32,
    /// The AR arm.
    pub ar_model: String,
    /// The diffusion arm.
    pub diffusion_model: String,
    /// Median AR ratio / median diffusion ratio.
    pub factor: f64,
}

/// The speedup at parity of one series at one batch size, computed under each bundle.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeedupPair {
    /// Sequence length N.
    pub seq_len: u32,
    /// The AR model.
    pub ar_model: String,
    /// The diffusion model.
    pub diffusion_model: String,
    /// The diffusion sampler.
    pub sampler: Sampler,
    /// Its block length.
    pub block_length: Option<u32>,
    /// Its block cache.
    pub cache: Option<BlockCache>,
    /// A threshold series.
    pub thresholded: bool,
    /// Batch size B.
    pub batch_size: u32,
    /// The first bundle's side: its record of the series and what it has at this B.
    pub first: Option<StackSide>,
    /// The second bundle's.
    pub second: Option<StackSide>,
}

/// One bundle's side of a [`SpeedupPair`]: its record of the series (S_parity and the rest) and its speedup at the
/// pair's B, or why it has none.
#[derive(Debug, Clone, PartialEq)]
pub struct StackSide {
    /// The bundle's record of the series.
    pub record: ParityRecord,
    /// The speedup at this B; `None`: none (see `unfinished`, else the record's outcome or its row's note).
    pub speedup: Option<f64>,
    /// The autoregressive cell at this B did not finish in this bundle: what happened to it (`ran out of memory`,
    /// [`AtBatch::Unfinished`]), so that there is no baseline latency to divide by.
    pub unfinished: Option<&'static str>,
}

impl StackSide {
    /// The speedup in words, `number` writing the figure: it, `no baseline: the autoregressive cell ran out of
    /// memory` where the autoregressive cell at this B did not finish, else `-`. What `report --compare` and the
    /// explorer's two stacks write in the side's column.
    pub fn speedup_text(&self, number: impl Fn(f64) -> String) -> String {
        match (self.speedup, self.unfinished) {
            (Some(v), _) => number(v),
            (None, Some(what)) => format!("no baseline: the autoregressive cell {what}"),
            (None, None) => "-".into(),
        }
    }
}

/// A diffusion series against an AR model at one N, as a record and a pair name it: (N, AR model, diffusion model,
/// sampler, block length, block cache, thresholded).
type Series<'a> = (u32, &'a str, &'a str, Sampler, Option<u32>, Option<BlockCache>, bool);

fn record_series(r: &ParityRecord) -> Series<'_> {
    (r.seq_len, &r.ar_model, &r.diffusion_model, r.sampler, r.block_length, r.cache, r.thresholded)
}

impl SpeedupPair {
    /// Its series.
    fn series(&self) -> Series<'_> {
        let p = self;
        (p.seq_len, &p.ar_model, &p.diffusion_model, p.sampler, p.block_length, p.cache, p.thresholded)
    }

    /// The speedup under the first bundle over the one under the second, where both have one.
    pub fn speedup_ratio(&self) -> Option<f64> {
        ratio(self.first.as_ref().and_then(|x| x.speedup), self.second.as_ref().and_then(|x| x.speedup))
    }
}

/// Two stacks compared: [`compare_stacks`].
#[derive(Debug, Clone, PartialEq)]
pub struct StackComparison {
    /// Per arm and batch size, ordered by AR first, then model and B.
    pub arms: Vec<ArmRatio>,
    /// Per batch size, AR arm and diffusion arm that both have a ratio.
    pub factors: Vec<ImplementationFactor>,
    /// Parity records of the first bundle (`None`: no parity options, e.g. no quality values).
    pub parity_first: Option<usize>,
    /// Parity records of the second bundle.
    pub parity_second: Option<usize>,
    /// Every series and batch size with a record in either bundle.
    pub speedups: Vec<SpeedupPair>,
}

/// `first` (e.g. the runner's bundle) against `second` (a reference's of the same cells): per arm and batch size
/// the median L_e2e ratio first / second, the factor the ratios put into the speedup, and the speedup at parity
/// under each bundle with `opts` (the same options for both; `None`: no parity).
pub fn compare_stacks(first: &Bundle, second: &Bundle, opts: Option<&ParityOptions>) -> StackComparison {
    // (AR first, model, B) -> per-cell ratios.
    let mut groups: std::collections::BTreeMap<(bool, String, u32), Vec<f64>> = Default::default();
    for (a, b) in paired_cells(first, second) {
        if a.status != CellStatus::Ok || b.status != CellStatus::Ok {
            continue;
        }
        if let Some(r) = ratio(cell_latency(a).e2e_ms, cell_latency(b).e2e_ms) {
            let ar = a.key.sampler == Sampler::ArGreedy;
            groups.entry((!ar, a.key.model.clone(), a.key.batch_size)).or_default().push(r);
        }
    }
    let arms: Vec<ArmRatio> = groups
        .into_iter()
        .filter_map(|((diffusion, model, batch_size), v)| {
            let s = summarize(&v)?;
            Some(ArmRatio {
                model,
                autoregressive: !diffusion,
                batch_size,
                cells: s.n,
                median: s.median,
                min: s.min,
                max: s.max,
            })
        })
        .collect();
    let mut factors = Vec::new();
    for ar in arms.iter().filter(|a| a.autoregressive) {
        for d in arms.iter().filter(|d| !d.autoregressive && d.batch_size == ar.batch_size && d.median > 0.0) {
            factors.push(ImplementationFactor {
                batch_size: ar.batch_size,
                ar_model: ar.model.clone(),
                diffusion_model: d.model.clone(),
                factor: ar.median / d.median,
            });
        }
    }
    factors.sort_by(|x, y| {
        (x.batch_size, &x.ar_model, &x.diffusion_model).cmp(&(y.batch_size, &y.ar_model, &y.diffusion_model))
    });
    let (pa, pb) = match opts {
        Some(o) => (Some(parity(first, o)), Some(parity(second, o))),
        None => (None, None),
    };
    let mut speedups: Vec<SpeedupPair> = Vec::new();
    // Every batch size of each record, a B whose autoregressive cell did not finish included: it keeps its pair
    // with the other bundle's row (and says why it has no speedup) rather than showing as absent.
    for (side, bundle, records) in [(0, first, &pa), (1, second, &pb)] {
        for r in records.iter().flatten() {
            for row in rows_by_batch(bundle, r) {
                let batch_size = row.batch_size();
                let same = |p: &SpeedupPair| p.series() == record_series(r) && p.batch_size == batch_size;
                let at = match speedups.iter().position(same) {
                    Some(i) => i,
                    None => {
                        speedups.push(SpeedupPair {
                            seq_len: r.seq_len,
                            ar_model: r.ar_model.clone(),
                            diffusion_model: r.diffusion_model.clone(),
                            sampler: r.sampler,
                            block_length: r.block_length,
                            cache: r.cache,
                            thresholded: r.thresholded,
                            batch_size,
                            first: None,
                            second: None,
                        });
                        speedups.len() - 1
                    }
                };
                let (speedup, unfinished) = match row {
                    AtBatch::Row(row) => (row.speedup.map(|e| e.value), None),
                    AtBatch::Unfinished { what, .. } => (None, Some(what)),
                };
                let value = Some(StackSide { record: r.clone(), speedup, unfinished });
                if side == 0 {
                    speedups[at].first = value;
                } else {
                    speedups[at].second = value;
                }
            }
        }
    }
    // Each series' batch sizes together, by B, the series in the order they first came (a B that only the second
    // bundle has joins its series rather than the end).
    let rank: Vec<(usize, u32)> = speedups
        .iter()
        .map(|p| (speedups.iter().position(|q| q.series() == p.series()).unwrap_or(0), p.batch_size))
        .collect();
    let mut ranked: Vec<((usize, u32), SpeedupPair)> = rank.into_iter().zip(speedups).collect();
    ranked.sort_by_key(|(k, _)| *k);
    let speedups = ranked.into_iter().map(|(_, p)| p).collect();
    StackComparison {
        arms,
        factors,
        parity_first: pa.as_ref().map(Vec::len),
        parity_second: pb.as_ref().map(Vec::len),
        speedups,
    }
}
