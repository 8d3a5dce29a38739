//! How much of its planned grid a bundle holds: an interrupted run's `partial.json` (stopped while measuring, or
//! while its evaluators scored the continuations), or a merge with missing cells, is a valid bundle whose
//! S_parity, speedups and verdicts may change when the rest is measured. Every reader says so from this one test
//! (`validate`, `report`, `figures`, `export`, the explorer).

use schema::{Bundle, Cell, CellKey};

/// A bundle with fewer cells than its run planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partial {
    /// Cells the bundle holds.
    pub present: usize,
    /// Cells the run planned (`provenance.planned_cells`), when recorded.
    pub planned: Option<u32>,
    /// Cells of the grid a merge did not have (`provenance.missing_cells`; not read by wasm builds).
    pub missing: usize,
    /// Cells whose continuations not every evaluator has scored yet ([`unscored_cells`]).
    pub unscored: Vec<CellKey>,
    /// The shard of a grid split in more than one (`provenance.shard`): the bundle holds its own cells, the other
    /// shards' are in their bundles until `dllm-bench merge` joins them.
    pub shard: Option<schema::ShardInfo>,
}

impl Partial {
    /// `16 of 48 planned cells`, or `16 cells, 4 of the grid missing` without a planned count.
    /// With `, the continuations of 10 not yet scored by every evaluator` where some are not. A shard's starts
    /// `shard 1/3 of the grid (not merged): `, and holding all its planned cells says `its 16 cells`.
    pub fn counts(&self) -> String {
        let mut s = match self.shard {
            Some(shard) => format!("shard {shard} of the grid (not merged): "),
            None => String::new(),
        };
        match self.planned {
            Some(p) if self.shard.is_some() && self.present as u64 >= u64::from(p) => {
                s.push_str(&format!("its {} cells", self.present))
            }
            Some(p) => s.push_str(&format!("{} of {p} planned cells", self.present)),
            None => s.push_str(&format!("{} cells, {} of the grid missing", self.present, self.missing)),
        }
        if !self.unscored.is_empty() {
            s.push_str(&format!(", the continuations of {} not yet scored by every evaluator", self.unscored.len()));
        }
        s
    }
}

/// Whether `evaluator` has settled the perplexity of `cell`'s continuations: a value, or the error that prevented
/// it (`quality_errors`). What a run's scoring still has to do, and what a bundle stopped while scoring lacks.
pub fn perplexity_settled(cell: &Cell, evaluator: &str) -> bool {
    settled(cell, "perplexity", evaluator)
}

/// Whether `evaluator` has settled `metric` of `cell`'s continuations: a value, or the error that prevented it.
/// BERTScore's three values are settled together, by `bertscore_f1`'s value or error.
pub fn settled(cell: &Cell, metric: &str, evaluator: &str) -> bool {
    let of = |m: &str, by: Option<&str>| m == metric && by == Some(evaluator);
    cell.quality.iter().any(|q| of(&q.metric, q.evaluator.as_deref()))
        || cell.quality_errors.iter().any(|q| of(&q.metric, q.evaluator.as_deref()))
}

/// The metric that says whether a cell's BERTScore is settled ([`settled`]).
pub const BERTSCORE_SETTLED_BY: &str = "bertscore_f1";

/// The cells with continuations (each group's quality cell) whose perplexity some evaluator of the bundle's
/// `[quality]` table has not settled ([`perplexity_settled`]), or whose BERTScore its encoder has not: a run
/// stopped while its evaluators scored writes
/// every cell, but not every value its verdicts come from.
pub fn unscored_cells(b: &Bundle) -> Vec<&CellKey> {
    let evaluators = b.provenance.config.evaluators();
    let encoder = b.provenance.config.quality.as_ref().and_then(|q| q.bertscore.as_ref()).map(|e| e.id.as_str());
    b.cells
        .iter()
        .filter(|c| {
            !c.generations.is_empty()
                && (evaluators.iter().any(|e| !perplexity_settled(c, &e.id))
                    || encoder.is_some_and(|e| !settled(c, BERTSCORE_SETTLED_BY, e)))
        })
        .map(|c| &c.key)
        .collect()
}

/// What finishes a partial bundle, in words every reader gives as the fix: a run of the runner (tool
/// `dllm-bench`) resumes, or its shards merge; a reference's (`jobs/hf_reference.py`, which does not resume)
/// measures the cells left into another bundle.
pub fn finish_hint(b: &Bundle) -> &'static str {
    match b.provenance.by_runner() {
        true => "resume the run (dllm-bench run --resume DIR), or merge every shard's bundle",
        false => {
            "measure the cells left with jobs/hf_reference.py --steps, --seq-len or --batch-size into another bundle \
             (it does not resume)"
        }
    }
}

/// The bundle's shortfall; `None` when it holds every cell it planned (or records no plan), every evaluator has
/// scored its continuations, and it is the whole grid (not one shard of several: its S_parity would be read on
/// that shard's cells alone).
pub fn partial(b: &Bundle) -> Option<Partial> {
    let p = &b.provenance;
    let short = p.planned_cells.is_some_and(|n| (b.cells.len() as u64) < u64::from(n));
    let unscored: Vec<CellKey> = unscored_cells(b).into_iter().cloned().collect();
    let shard = p.shard.filter(|s| s.count > 1);
    (short || !p.missing_cells.is_empty() || !unscored.is_empty() || shard.is_some()).then_some(Partial {
        present: b.cells.len(),
        planned: p.planned_cells,
        missing: p.missing_cells.len(),
        unscored,
        shard,
    })
}
