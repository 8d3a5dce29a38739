//! The parity search (`--parity-search`): the next K values to measure between each S_parity and the K below it.

use schema::bundle::{Bundle, CellKey};
use schema::grid::GridConfig;

/// The next cells of the parity search: for each S_parity reached with a gap to the K below it (or to 0), the
/// valid K (a multiple of the blocks) nearest the middle of the gap, at every batch size of the grid. Empty when
/// every gap is closed.
pub(super) fn parity_search_cells(cfg: &GridConfig, bundle: &Bundle, planned: &[CellKey]) -> Vec<CellKey> {
    let mut out: Vec<CellKey> = Vec::new();
    for r in &bundle.parity {
        // Threshold series have no K to search between.
        let metrics::derive::Parity::Reached { steps } = r.outcome else { continue };
        if r.thresholded {
            continue;
        }
        let below = r.curve.iter().map(|c| c.steps).filter(|&k| k < steps).max().unwrap_or(0);
        let Some(template) = planned.iter().find(|k| {
            k.model == r.diffusion_model
                && k.sampler == r.sampler
                && k.seq_len == r.seq_len
                && k.block_length == r.block_length
                && k.cache == r.cache
                && k.threshold.is_none()
                && k.steps == Some(steps)
        }) else {
            continue;
        };
        let blocks = template.output_tokens / template.block_length.unwrap_or(template.output_tokens).max(1);
        let blocks = blocks.max(1);
        // Multiples of `blocks` strictly between `below` and `steps`; take the one nearest the middle.
        let lo = below / blocks + 1;
        let hi = (steps - 1) / blocks;
        if lo > hi {
            continue;
        }
        let mid = ((below + steps) / 2 / blocks).clamp(lo, hi) * blocks;
        for &b in &cfg.grid.batch_sizes {
            let key = CellKey { steps: Some(mid), batch_size: b, ..template.clone() };
            if !planned.contains(&key) && !out.contains(&key) {
                out.push(key);
            }
        }
    }
    out
}
