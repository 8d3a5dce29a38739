//! How much of its planned grid a bundle holds: an interrupted run's `partial.json`, or a merge with missing
//! cells, is a valid bundle whose S_parity, speedups and verdicts may change when the rest is measured. Every
//! reader says so from this one test (`validate`, `report`, `figures`, the explorer).

use schema::Bundle;

/// A bundle with fewer cells than its run planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partial {
    /// Cells the bundle holds.
    pub present: usize,
    /// Cells the run planned (`provenance.planned_cells`), when recorded.
    pub planned: Option<u32>,
    /// Cells of the grid a merge did not have (`provenance.missing_cells`; not read by wasm builds).
    pub missing: usize,
}

impl Partial {
    /// `16 of 48 planned cells`, or `16 cells, 4 of the grid missing` without a planned count.
    pub fn counts(&self) -> String {
        match self.planned {
            Some(p) => format!("{} of {p} planned cells", self.present),
            None => format!("{} cells, {} of the grid missing", self.present, self.missing),
        }
    }
}

/// The bundle's shortfall; `None` when it holds every cell it planned (or records no plan).
pub fn partial(b: &Bundle) -> Option<Partial> {
    let p = &b.provenance;
    let short = p.planned_cells.is_some_and(|n| (b.cells.len() as u64) < u64::from(n));
    (short || !p.missing_cells.is_empty()).then_some(Partial {
        present: b.cells.len(),
        planned: p.planned_cells,
        missing: p.missing_cells.len(),
    })
}
