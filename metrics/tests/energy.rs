//! Energy (format 1.7) against hand-computed values: per token, per sequence, mean power, a cell's summaries, and
//! why a cell has none.

use metrics::energy::*;
use schema::bundle::{EnergyMeter, EnergySource, Execution, Repetition};

use crate::util::sample_bundle;

fn rep(energy_j: Option<f64>, window_ms: Option<f64>) -> Repetition {
    Repetition {
        e2e_ms: 1000.0,
        output_tokens: 4 * 32,
        energy_j,
        energy_window_ms: window_ms,
        prompt_indices: vec![0, 1, 2, 3],
        ..Repetition::default()
    }
}

#[test]
fn joules_per_token_sequence_and_mean_power() {
    let r = rep(Some(256.0), Some(1250.0));
    assert_eq!(joules_per_token(&r), Some(2.0), "256 J over 4 x 32 tokens");
    assert_eq!(joules_per_sequence(&r, 4), Some(64.0), "256 J over 4 sequences");
    assert_eq!(mean_power_w(&r), Some(204.8), "256 J over 1.25 s");
    // Unmeasured is absent, never 0.
    let none = rep(None, None);
    assert_eq!((joules_per_token(&none), joules_per_sequence(&none, 4), mean_power_w(&none)), (None, None, None));
    assert_eq!(joules_per_token(&Repetition { output_tokens: 0, ..r.clone() }), None);
    assert_eq!(joules_per_sequence(&r, 0), None);
    assert_eq!(mean_power_w(&rep(Some(1.0), Some(0.0))), None);
    // A measured 0 J (a counter that did not tick) is a value, not a gap.
    assert_eq!(joules_per_token(&rep(Some(0.0), Some(5.0))), Some(0.0));
}

#[test]
fn cell_energy_summarizes_the_repetitions_with_energy() {
    let mut b = sample_bundle();
    let cell = &mut b.cells[0];
    let bsz = cell.key.batch_size;
    let tokens = cell.repetitions[0].output_tokens as f64;
    cell.repetitions[0].energy_j = Some(10.0);
    cell.repetitions[0].energy_window_ms = Some(100.0);
    cell.repetitions[1].energy_j = Some(30.0);
    cell.repetitions[1].energy_window_ms = Some(200.0);
    let e = cell_energy(cell);
    let j = e.energy_j.expect("two repetitions have energy");
    assert_eq!((j.n, j.median, j.min, j.max), (2, 20.0, 10.0, 30.0));
    assert_eq!(e.joules_per_token.map(|s| s.median), Some(20.0 / tokens));
    assert_eq!(e.joules_per_sequence.map(|s| s.median), Some(20.0 / f64::from(bsz)));
    assert_eq!(e.mean_power_w.map(|s| (s.min, s.max)), Some((100.0, 150.0)));
    let none = cell_energy(&b.cells[1]);
    assert_eq!((none.energy_j, none.joules_per_token, none.mean_power_w), (None, None, None));
}

#[test]
fn a_cell_without_energy_says_why() {
    let mut b = sample_bundle();
    // No executions at all: a writer before 1.7.
    assert!(unavailable_reason(&b, &b.cells[0]).expect("absent").contains("before 1.7"));
    let exec = |energy| Execution {
        started_at: "2026-11-21T00:00:00Z".into(),
        host: None,
        device: schema::DeviceInfo { kind: "cpu".into(), ..schema::DeviceInfo::default() },
        shard: None,
        slurm: None,
        device_peaks: None,
        energy: Some(energy),
        conditions: None,
    };
    b.provenance.executions = vec![
        exec(EnergyMeter {
            source: None,
            scope: None,
            unavailable: Some("no RAPL here".into()),
            idle_energy_j: None,
            idle_window_ms: None,
        }),
        exec(EnergyMeter {
            source: Some(EnergySource::Rapl),
            scope: Some("package-0".into()),
            unavailable: None,
            idle_energy_j: Some(3.0),
            idle_window_ms: Some(1000.0),
        }),
    ];
    for (i, c) in b.cells.iter_mut().enumerate() {
        c.execution = Some(u32::from(i % 2 == 1));
        for r in c.repetitions.iter_mut().filter(|_| i % 2 == 1) {
            r.energy_j = Some(1.0);
            r.energy_window_ms = Some(10.0);
        }
    }
    assert_eq!(unavailable_reason(&b, &b.cells[0]).as_deref(), Some("no RAPL here"));
    assert_eq!(unavailable_reason(&b, &b.cells[1]), None);
    assert_eq!(meter(&b, &b.cells[1]).and_then(|m| m.source), Some(EnergySource::Rapl));
    assert_eq!(meter(&b, &b.cells[1]).and_then(idle_power_w), Some(3.0), "3 J over 1 s");
    assert_eq!(meter(&b, &b.cells[0]).and_then(idle_power_w), None);
    let half = b.cells.len().div_ceil(2);
    assert_eq!(unavailable_reasons(&b), vec![("no RAPL here".to_string(), half)]);
    // A meter that read nothing for a cell (a failed reading) is said too.
    b.cells[1].repetitions.iter_mut().for_each(|r| r.energy_j = None);
    assert!(unavailable_reason(&b, &b.cells[1]).expect("absent").contains("could not be read"));
}
