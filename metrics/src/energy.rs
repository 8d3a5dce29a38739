//! Energy (bundle format 1.7): what a repetition's joules give per generated token, per sequence and as mean
//! power, and a cell's summaries of them. Every reader (`report`, `export`, the explorer) calls these.
//!
//! A repetition's `energy_j` is the device's energy counter over the run (NVML on CUDA: the whole board; RAPL on
//! the CPU: the whole packages), read around it; its `energy_window_ms` is the time between the two readings. No
//! idle power is subtracted: the figures are what the device drew while it generated. A repetition without
//! energy gives `None` (its execution's [`schema::bundle::EnergyMeter`] says why), never 0.

use schema::Bundle;
use schema::bundle::{Cell, EnergyMeter, Repetition};

use crate::derive::{Summary, summarize};

/// Joules per generated token of one repetition: `energy_j` over the batch's generated tokens (B x N_out, less any
/// position a diffusion model left masked).
pub fn joules_per_token(rep: &Repetition) -> Option<f64> {
    let j = rep.energy_j?;
    (rep.output_tokens > 0).then(|| j / rep.output_tokens as f64)
}

/// Joules per generated sequence of one repetition: `energy_j` over the batch's `batch_size` rows (one prompt's
/// continuation each).
pub fn joules_per_sequence(rep: &Repetition, batch_size: u32) -> Option<f64> {
    let j = rep.energy_j?;
    (batch_size > 0).then(|| j / f64::from(batch_size))
}

/// Mean power over a repetition's energy window, watts: `energy_j` / `energy_window_ms`.
pub fn mean_power_w(rep: &Repetition) -> Option<f64> {
    let (j, ms) = (rep.energy_j?, rep.energy_window_ms?);
    (ms > 0.0).then(|| j / (ms / 1000.0))
}

/// Mean power of the idle device before the first cell, watts: an execution's idle energy over its window.
pub fn idle_power_w(meter: &EnergyMeter) -> Option<f64> {
    let (j, ms) = (meter.idle_energy_j?, meter.idle_window_ms?);
    (ms > 0.0).then(|| j / (ms / 1000.0))
}

/// A cell's energy figures, each summarized over its repetitions that have energy. All `None` when none does.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CellEnergy {
    /// Joules per run (the whole batch).
    pub energy_j: Option<Summary>,
    /// Joules per generated token ([`joules_per_token`]).
    pub joules_per_token: Option<Summary>,
    /// Joules per generated sequence ([`joules_per_sequence`]).
    pub joules_per_sequence: Option<Summary>,
    /// Mean power, watts ([`mean_power_w`]).
    pub mean_power_w: Option<Summary>,
}

/// Summarizes a cell's energy over its repetitions.
pub fn cell_energy(cell: &Cell) -> CellEnergy {
    // As `derive::cell_summary`: a cell that did not finish has no summary.
    if cell.status != schema::CellStatus::Ok {
        return CellEnergy::default();
    }
    let reps = &cell.repetitions;
    let of = |f: &dyn Fn(&Repetition) -> Option<f64>| summarize(&reps.iter().filter_map(f).collect::<Vec<_>>());
    CellEnergy {
        energy_j: of(&|r| r.energy_j),
        joules_per_token: of(&joules_per_token),
        joules_per_sequence: of(&|r| joules_per_sequence(r, cell.key.batch_size)),
        mean_power_w: of(&mean_power_w),
    }
}

/// The energy meter of the execution that measured `cell`, when the bundle records one (format 1.7).
pub fn meter<'a>(bundle: &'a Bundle, cell: &Cell) -> Option<&'a EnergyMeter> {
    let e = cell.execution?;
    bundle.provenance.executions.get(e as usize)?.energy.as_ref()
}

/// Why a cell's repetitions have no energy: its execution's `unavailable`, or, for a bundle without a meter (older
/// than 1.7, or a writer that does not measure energy), a sentence that says so. `None` when the cell has energy.
pub fn unavailable_reason(bundle: &Bundle, cell: &Cell) -> Option<String> {
    if cell.repetitions.iter().any(|r| r.energy_j.is_some()) {
        return None;
    }
    match meter(bundle, cell) {
        Some(m) => match &m.unavailable {
            Some(reason) => Some(reason.clone()),
            None if cell.repetitions.is_empty() => Some("the cell has no measured run".into()),
            None => Some("the energy counter could not be read around this cell's runs (see the run's log)".into()),
        },
        None if cell.repetitions.is_empty() => Some("the cell has no measured run".into()),
        None => Some("not recorded: the bundle's writer measured no energy (format before 1.7)".into()),
    }
}

/// The distinct reasons a bundle's cells have no energy, each with the number of cells it applies to, in order of
/// first appearance. Empty when every measured cell has energy.
pub fn unavailable_reasons(bundle: &Bundle) -> Vec<(String, usize)> {
    let mut out: Vec<(String, usize)> = Vec::new();
    for c in bundle.cells.iter().filter(|c| !c.repetitions.is_empty()) {
        if let Some(r) = unavailable_reason(bundle, c) {
            match out.iter_mut().find(|(x, _)| *x == r) {
                Some((_, n)) => *n += 1,
                None => out.push((r, 1)),
            }
        }
    }
    out
}
