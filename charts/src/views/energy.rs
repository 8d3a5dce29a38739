//! Energy where latency is an axis: joules per generated token (`metrics::energy`), only for bundles that measured
//! it (format 1.7); a cell without energy is left out, never drawn at 0.

use metrics::derive::Summary;
use schema::Cell;

use crate::bundle::LoadedBundle;

/// The axis title of energy per token.
pub(super) const AXIS: &str = "energy per generated token (J, median)";

/// True when any cell of the bundles has a repetition with energy.
pub fn has_energy(bundles: &[&LoadedBundle]) -> bool {
    bundles.iter().flat_map(|b| &b.bundle.cells).flat_map(|c| &c.repetitions).any(|r| r.energy_j.is_some())
}

/// A cell's joules per generated token over its repetitions with energy (`metrics::energy`); `None` without.
pub(super) fn per_token(c: &Cell) -> Option<Summary> {
    // Only the per-token figure (`metrics::energy::cell_energy` summarizes four: more code in the wasm).
    let per_rep: Vec<f64> = c.repetitions.iter().filter_map(metrics::energy::joules_per_token).collect();
    metrics::derive::summarize(&per_rep)
}

/// The note of a view that shows energy: what it is and how many drawn-for cells had none.
pub(super) fn note(missing: usize) -> String {
    let mut s = "Energy: joules per generated token, the device's energy counter read around each run (NVML: the \
                 whole board; RAPL: the CPU packages), no idle power subtracted."
        .to_string();
    if missing > 0 {
        s.push_str(&format!(" {missing} cells without energy are not drawn."));
    }
    s
}
