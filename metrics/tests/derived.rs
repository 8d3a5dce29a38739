//! Derived metrics against hand-computed values.

use metrics::derive::*;
use schema::bundle::Repetition;

use crate::util::sample_bundle;

#[test]
fn summary_of_known_values() {
    let s = summarize(&[4.0, 1.0, 3.0, 2.0]).expect("values");
    assert_eq!((s.n, s.min, s.max, s.median, s.mean), (4, 1.0, 4.0, 2.5, 2.5));
    assert!((s.std.unwrap() - (5.0f64 / 3.0).sqrt()).abs() < 1e-12);
    assert_eq!(summarize(&[]), None, "no values is absent, not 0");
    assert_eq!(summarize(&[f64::NAN]), None);
    assert_eq!(summarize(&[3.0]).map(|s| (s.n, s.median, s.std)), Some((1, 3.0, None)), "one value has no spread");
}

#[test]
fn the_median_by_selection_equals_the_sorted_median() {
    let mut rng = metrics::rng::SplitMix64::new(7);
    for n in 1..40 {
        // Few distinct values, so ties are common.
        let v: Vec<f64> = (0..n).map(|_| f64::from(rng.below(6)) * 0.5).collect();
        let mut sorted = v.clone();
        sorted.sort_by(f64::total_cmp);
        let want = if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 };
        let s = summarize(&v).expect("values");
        assert_eq!((s.median, s.min, s.max), (want, sorted[0], sorted[n - 1]), "{v:?}");
    }
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

// ---- the explorer's views --------------------------------------------------------------------------

fn refs<'a>(b: &'a schema::Bundle, s: &'a [CellSummary]) -> Vec<CellRef<'a>> {
    b.cells.iter().zip(s).enumerate().map(|(index, (cell, summary))| CellRef { index, cell, summary }).collect()
}

fn find(b: &schema::Bundle, steps: Option<u32>, batch: u32, seq: u32) -> usize {
    b.cells
        .iter()
        .position(|c| c.key.steps == steps && c.key.batch_size == batch && c.key.seq_len == seq)
        .expect("cell")
}

#[test]
fn throughput_bars_are_per_cell_with_the_spread_of_repetitions() {
    let mut b = sample_bundle();
    let oom = find(&b, Some(8), 1, 48);
    b.cells[oom].status = schema::CellStatus::Oom { message: "oom".into() };
    let s = summaries(&b);
    let bars = throughput_bars(&refs(&b, &s));
    assert_eq!(bars.len(), b.cells.len() - 1, "the OOM cell has no bar");
    // K=4 B=1 N=48: e2e {52, 54, 53} ms, 32 tokens and 100 bytes per repetition.
    let i = find(&b, Some(4), 1, 48);
    let bar = bars.iter().find(|x| x.cell == i).expect("bar");
    assert!((bar.tokens_per_s.median - 32.0 / 0.053).abs() < 1e-9);
    assert!((bar.tokens_per_s.min - 32.0 / 0.054).abs() < 1e-9);
    assert!((bar.tokens_per_s.max - 32.0 / 0.052).abs() < 1e-9);
    assert!((bar.bytes_per_s.median - 100.0 / 0.053).abs() < 1e-9);
}

#[test]
fn memory_heatmap_takes_the_largest_peak_and_marks_oom() {
    let mut b = sample_bundle();
    for (i, c) in b.cells.iter_mut().enumerate() {
        for (j, r) in c.repetitions.iter_mut().enumerate() {
            r.peak_allocated_bytes = Some(1_000_000_000 * (i as u64 + 1) + j as u64);
            r.peak_reserved_bytes = Some(2_000_000_000 * (i as u64 + 1));
        }
    }
    let (k4, k8) = (find(&b, Some(4), 1, 48), find(&b, Some(8), 1, 48));
    let oom = find(&b, Some(4), 8, 96);
    b.cells[oom].status = schema::CellStatus::Oom { message: "out of memory".into() };
    b.cells[oom].repetitions.clear();
    let s = summaries(&b);
    let heat = memory_heatmap(&refs(&b, &s), MemoryMetric::Allocated);
    let llada = |n, bs| {
        heat.iter().find(|m| m.model.contains("llada") && m.seq_len == n && m.batch_size == bs).expect("heat cell")
    };
    // demo: 2 models x N {48, 96} x B {1, 4, 8}
    assert_eq!(heat.len(), 12);
    let c = llada(48, 1);
    assert_eq!(c.cells.len(), 4, "all K merged");
    assert!(c.cells.contains(&k4) && c.cells.contains(&k8));
    let largest = c.cells.iter().max().copied().expect("cells");
    assert_eq!(c.peak_bytes, Some(1_000_000_000 * (largest as u64 + 1) + 2));
    assert_eq!(c.largest, Some(largest), "the cell of the peak");
    assert!(!c.oom());
    assert!(llada(96, 8).oom());
    assert_eq!(llada(96, 8).oom_cells, [oom], "the cell that ran out of memory");
    let reserved = memory_heatmap(&refs(&b, &s), MemoryMetric::Reserved);
    assert_eq!(reserved[0].peak_bytes.map(|v| v % 2_000_000_000), Some(0));
    assert_eq!(memory_heatmap(&refs(&b, &s), MemoryMetric::Rss)[0].peak_bytes, None, "not measured is absent");
    assert_eq!(gigabytes(1_500_000_000), 1.5);
}

#[test]
fn ar_timings_give_ttft_and_itl() {
    let b = sample_bundle();
    let s = summaries(&b);
    let t = ar_timings(&refs(&b, &s));
    assert_eq!(t.len(), 6, "one per AR cell");
    let ar = find(&b, None, 1, 48);
    let x = t.iter().find(|x| x.cell == ar).expect("AR cell");
    assert_eq!(x.ttft_ms.median, 2.0);
    // e2e {58, 60, 59}, prefill 2, N_out 32: ITL = (e2e - 2) / 31
    assert!((x.itl_ms.median - 57.0 / 31.0).abs() < 1e-12);
    assert!((x.itl_ms.max - 58.0 / 31.0).abs() < 1e-12);
}

#[test]
fn step_timings_summarize_every_step() {
    let mut b = sample_bundle();
    let i = find(&b, Some(4), 1, 48);
    b.cells[i].repetitions[0].step_ms = Some(vec![1.0, 2.0, 3.0, 4.0]);
    b.cells[i].repetitions[1].step_ms = Some(vec![5.0, 6.0, 7.0, 8.0]);
    let s = summaries(&b);
    let t = step_timings(&refs(&b, &s));
    assert_eq!(t.len(), 1, "only cells with step times");
    assert_eq!((t[0].cell, t[0].steps, t[0].step_ms.n, t[0].step_ms.median, t[0].step_ms.max), (i, 4, 8, 4.5, 8.0));
}

fn qp(cell: usize, steps: Option<u32>, e2e_ms: f64, quality: f64) -> QualityPoint {
    QualityPoint { cell, steps, e2e_ms, quality }
}

#[test]
fn pareto_view_spans_both_models() {
    // Perplexity (lower is better): K=16 is fast but bad, K=64 matches, K=128 is slower and no better than AR.
    let pts = [
        qp(0, Some(16), 100.0, 30.0),
        qp(1, Some(64), 400.0, 10.0),
        qp(2, Some(128), 800.0, 10.0),
        qp(3, None, 600.0, 9.0),
    ];
    let v = pareto_view(&pts, Direction::LowerIsBetter);
    assert_eq!(v.front, [0, 1, 3]);
    assert_eq!(v.points.len(), 4);
}

#[test]
fn parity_panel_reads_the_one_parity_record_per_batch_size() {
    let b = schema::read_bundle(&crate::util::fixture("v1.2/demo-quality.json")).expect("fixture");
    let opts = metrics::parity::ParityOptions::from_config(&b).expect("quality config");
    let records = metrics::parity::parity(&b, &opts);
    assert!(!records.is_empty());
    let mut panels = 0;
    for r in &records {
        for row in &r.speedups {
            let p = parity_panel(r, row.batch_size, &b.cells).expect("a panel for every B with an AR cell");
            panels += 1;
            assert_eq!(p.parity, r.outcome);
            assert_eq!(b.cells[p.ar.cell].key, row.ar_cell);
            assert_eq!(p.matched.map(|m| b.cells[m.cell].key.clone()), row.diffusion_cell);
            assert_eq!(p.speedup, row.speedup.map(|e| e.value));
            assert_eq!(p.viable, row.viable);
            match r.outcome {
                Parity::Reached { steps } => {
                    let below = r.curve.iter().map(|c| c.steps).filter(|&k| k < steps).max();
                    assert_eq!(p.interval, Some((below, steps)));
                }
                _ => assert_eq!((p.interval, p.matched), (None, None)),
            }
        }
        assert!(parity_panel(r, 999, &b.cells).is_none(), "no AR cell at B = 999: no panel");
    }
    assert!(panels >= 2, "{panels} panels");
}

#[test]
fn entropy_warning_when_far_below_ar() {
    assert!(entropy_warning(3.0, 5.0));
    assert!(!entropy_warning(4.5, 5.0));
    assert!(!entropy_warning(f64::NAN, 5.0));
}
