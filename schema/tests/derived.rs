//! Derived metrics against hand-computed values.

use schema::bundle::Repetition;
use schema::derive::*;

use crate::util::sample_bundle;

#[test]
fn summary_of_known_values() {
    let s = summarize(&[4.0, 1.0, 3.0, 2.0]).expect("values");
    assert_eq!((s.n, s.min, s.max, s.median, s.mean), (4, 1.0, 4.0, 2.5, 2.5));
    assert!((s.std - (5.0f64 / 3.0).sqrt()).abs() < 1e-12);
    assert_eq!(summarize(&[]), None, "no values is absent, not 0");
    assert_eq!(summarize(&[f64::NAN]), None);
}

#[test]
fn itl_and_throughput_follow_the_study() {
    let r = Repetition {
        e2e_ms: 1000.0,
        prefill_ms: Some(100.0),
        output_tokens: 4 * 128,
        output_bytes: 2048,
        ..Repetition::default()
    };
    // ITL = (1000 - 100) / (128 - 1)
    assert!((itl_ms(&r, 128).expect("itl") - 900.0 / 127.0).abs() < 1e-12);
    assert_eq!(tokens_per_s(&r), Some(512.0));
    assert_eq!(bytes_per_s(&r), Some(2048.0));
    assert_eq!(itl_ms(&Repetition { prefill_ms: None, ..r.clone() }, 128), None);
    assert_eq!(itl_ms(&r, 1), None);
}

#[test]
fn latency_vs_steps_groups_by_batch_and_length_with_the_ar_reference() {
    let b = sample_bundle();
    let series = latency_vs_steps(&b);
    // demo: N {48, 96} x B {1, 4, 8}, one LLaDA sampler.
    assert_eq!(series.len(), 6);
    let s = &series[0];
    assert_eq!((s.seq_len, s.batch_size), (48, 1));
    assert_eq!(s.points.iter().map(|p| p.steps).collect::<Vec<_>>(), [4, 8, 16, 32]);
    // sample latencies: K*B + N + {0, 2, 1} -> median K*B + N + 1
    assert_eq!(s.points[1].e2e_ms.median, 8.0 + 48.0 + 1.0);
    let ar = s.ar_reference.as_ref().expect("AR cell at the same B, N");
    assert_eq!(ar.e2e_ms.median, 10.0 + 48.0 + 1.0);
}

#[test]
fn failed_cells_are_left_out_of_curves() {
    let mut b = sample_bundle();
    let idx = b
        .cells
        .iter()
        .position(|c| c.key.steps == Some(8) && c.key.batch_size == 1 && c.key.seq_len == 48)
        .expect("cell");
    b.cells[idx].status = schema::CellStatus::Oom { message: "oom".into() };
    let s = &latency_vs_steps(&b)[0];
    assert_eq!(s.points.iter().map(|p| p.steps).collect::<Vec<_>>(), [4, 16, 32]);
}

#[test]
fn pareto_front_keeps_only_undominated_points() {
    // (latency, perplexity): lower is better for both.
    let pts = [(10.0, 50.0), (20.0, 30.0), (25.0, 35.0), (30.0, 10.0), (5.0, 80.0), (30.0, 12.0)];
    assert_eq!(pareto_front(&pts, Direction::LowerIsBetter), [4, 0, 1, 3]);
    // Higher-is-better quality flips which points dominate.
    assert_eq!(pareto_front(&[(1.0, 0.5), (2.0, 0.4), (3.0, 0.9)], Direction::HigherIsBetter), [0, 2]);
}

#[test]
fn s_parity_is_the_fewest_steps_that_match() {
    let ppl = [(128, 9.0), (16, 1e5), (32, 40.0), (64, 10.4)];
    assert_eq!(s_parity(&ppl, 10.47, Direction::LowerIsBetter), Parity::Reached { steps: 64 });
    assert_eq!(s_parity(&ppl, 5.0, Direction::LowerIsBetter), Parity::NotReached { max_steps: 128 });
    assert_eq!(s_parity(&[], 5.0, Direction::LowerIsBetter), Parity::NoData);
    assert_eq!(s_parity(&[(16, 0.2), (32, 0.8)], 0.7, Direction::HigherIsBetter), Parity::Reached { steps: 32 });
}

#[test]
fn speedup_is_ar_over_diffusion() {
    assert_eq!(speedup(300.0, 150.0), Some(2.0));
    assert_eq!(speedup(300.0, 0.0), None);
}
