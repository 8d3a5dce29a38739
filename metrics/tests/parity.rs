//! S_parity and the speedup at parity on hand-made bundles (medians are K x B + N + 1, AR: 10 x B + N + 1).

use metrics::derive::Parity;
use metrics::parity::{GroupKey, ParityOptions, cell_quality, parity, pool, quality_cells};
use schema::bundle::{Bundle, Direction, Pooling, PromptValue, QualityValue, Sampler};

use crate::util::sample_bundle;

const LLAMA: &str = "dllm-bench/synthetic-llama-tiny";

/// A perplexity-like value whose per-prompt values are `values` (prompt i has value values[i], 10 tokens each).
fn ppl(values: &[f64]) -> QualityValue {
    let mut q = QualityValue {
        metric: "perplexity".into(),
        direction: Direction::LowerIsBetter,
        value: 0.0,
        evaluator: Some("judge".into()),
        pooling: Some(Pooling::TokenPerplexity),
        per_prompt: values
            .iter()
            .enumerate()
            .map(|(i, &v)| PromptValue { prompt: i as u32, value: v, tokens: Some(10) })
            .collect(),
    };
    q.value = pool(&q, |_| 1.0).expect("values");
    q
}

fn score(metric: &str, direction: Direction, values: &[f64]) -> QualityValue {
    let mut q = QualityValue {
        metric: metric.into(),
        direction,
        value: 0.0,
        evaluator: None,
        pooling: Some(Pooling::Mean),
        per_prompt: values
            .iter()
            .enumerate()
            .map(|(i, &v)| PromptValue { prompt: i as u32, value: v, tokens: None })
            .collect(),
    };
    q.value = pool(&q, |_| 1.0).expect("values");
    q
}

/// Puts `q(K)` on the B = 8 cell of each group at N = 48 (`None` = the AR model).
fn with_quality(mut b: Bundle, q: impl Fn(Option<u32>) -> Option<QualityValue>) -> Bundle {
    for c in &mut b.cells {
        if c.key.seq_len == 48 && c.key.batch_size == 8 {
            c.quality = q(c.key.steps).into_iter().collect();
        }
    }
    b
}

fn opts(metric: &str, evaluator: Option<&str>) -> ParityOptions {
    ParityOptions { metric: metric.into(), evaluator: evaluator.map(str::to_string), resamples: 200, seed: 7 }
}

/// Eight prompts, every one at `level` (so the point estimate is exactly `level`).
fn flat(level: f64) -> Vec<f64> {
    vec![level; 8]
}

#[test]
fn token_perplexity_pools_over_tokens_not_prompts() {
    let mut q = ppl(&[2.0, 8.0]);
    q.per_prompt[1].tokens = Some(30);
    // exp((10 ln 2 + 30 ln 8) / 40) = exp(ln 2 x 100 / 40) = 2^2.5
    assert!((pool(&q, |_| 1.0).expect("value") - 2f64.powf(2.5)).abs() < 1e-9);
    // Resampling weights: prompt 1 drawn twice, prompt 0 not at all.
    assert!((pool(&q, |p| f64::from(p) * 2.0).expect("value") - 8.0).abs() < 1e-9);
    assert_eq!(pool(&q, |_| 0.0), None);
}

#[test]
fn parity_is_the_fewest_steps_at_least_as_good_with_the_speedup_per_batch_size() {
    // Perplexity: K=4 100, K=8 30, K=16 12, K=32 9; LLaMA 12 -> S_parity 16 (tie counts as parity).
    let levels = |k: Option<u32>| match k {
        None => 12.0,
        Some(4) => 100.0,
        Some(8) => 30.0,
        Some(16) => 12.0,
        _ => 9.0,
    };
    let b = with_quality(sample_bundle(), |k| Some(ppl(&flat(levels(k)))));
    let recs = parity(&b, &opts("perplexity", Some("judge")));
    assert_eq!(recs.len(), 1, "one series at N = 48");
    let r = &recs[0];
    assert_eq!((r.seq_len, r.ar_model.as_str(), r.sampler), (48, LLAMA, Sampler::LladaLowConfidence));
    assert_eq!(r.outcome, Parity::Reached { steps: 16 });
    assert!((r.baseline.value - 12.0).abs() < 1e-9);
    assert_eq!(r.curve.iter().map(|s| s.steps).collect::<Vec<_>>(), vec![4, 8, 16, 32]);
    // Every prompt equal: every resample equal, the interval is the point.
    let i = r.s_parity_interval.expect("interval");
    assert_eq!((i.low, i.high), (Some(16), Some(16)));
    assert_eq!(r.reached_fraction, Some(1.0));
    let by_b: Vec<(u32, f64)> = r.speedups.iter().map(|s| (s.batch_size, s.speedup.expect("speedup").value)).collect();
    // AR 10 B + 49 over LLaDA at K = 16: 16 B + 49.
    let want = [(1, 59.0 / 65.0), (4, 89.0 / 113.0), (8, 129.0 / 177.0)];
    assert_eq!(by_b.len(), want.len(), "a speedup per AR batch size: {by_b:?}");
    for ((b, s), (wb, ws)) in by_b.iter().zip(want) {
        assert_eq!(*b, wb);
        assert!((s - ws).abs() < 1e-9, "B = {b}: {s} vs {ws}");
    }
    assert!(r.speedups.iter().all(|s| s.viable == Some(false)));
    let s1 = &r.speedups[0];
    assert_eq!(s1.diffusion_cell.as_ref().map(|k| (k.steps, k.batch_size)), Some((Some(16), 1)));
    assert_eq!(s1.ar_cell.batch_size, 1);
}

#[test]
fn not_reached_is_an_outcome_with_notes_not_an_error() {
    let b = with_quality(sample_bundle(), |k| Some(ppl(&flat(if k.is_none() { 5.0 } else { 50.0 }))));
    let r = &parity(&b, &opts("perplexity", Some("judge")))[0];
    assert_eq!(r.outcome, Parity::NotReached { max_steps: 32 });
    assert_eq!(r.reached_fraction, Some(0.0));
    let i = r.s_parity_interval.expect("interval");
    assert_eq!((i.low, i.high), (None, None), "None bounds mean not reached");
    assert_eq!(r.speedups.len(), 3, "a row per AR batch size, each saying why it has no speedup");
    assert!(r.speedups.iter().all(|s| s.speedup.is_none() && s.note.as_deref().is_some_and(|n| n.contains("32"))));
}

#[test]
fn higher_is_better_metrics_reach_parity_from_below() {
    let b = with_quality(sample_bundle(), |k| {
        let v = match k {
            None => 0.4,
            Some(k) => f64::from(k) / 64.0, // 0.0625, 0.125, 0.25, 0.5
        };
        Some(score("rouge_l_f1", Direction::HigherIsBetter, &flat(v)))
    });
    let r = &parity(&b, &opts("rouge_l_f1", None))[0];
    assert_eq!(r.direction, Direction::HigherIsBetter);
    assert_eq!(r.outcome, Parity::Reached { steps: 32 });
    assert_eq!(metrics::parity::floor_tie_note(std::slice::from_ref(r)), None, "a baseline above the floor");
    // A baseline at the floor (0: no overlap with the reference) is matched by any point at 0: cautioned.
    let floor = with_quality(sample_bundle(), |_| Some(score("rouge_l_f1", Direction::HigherIsBetter, &flat(0.0))));
    let records = parity(&floor, &opts("rouge_l_f1", None));
    assert_eq!(records[0].outcome, Parity::Reached { steps: 4 });
    let note = metrics::parity::floor_tie_note(&records).expect("a caution");
    assert!(note.contains("rouge_l_f1 is 0, the metric's floor"), "{note}");
    // A not-reached record says "not viable"; its rows "no parity".
    let never = with_quality(sample_bundle(), |k| Some(ppl(&flat(if k.is_some() { 20.0 } else { 10.0 }))));
    let n = &parity(&never, &opts("perplexity", Some("judge")))[0];
    assert_eq!(
        (metrics::parity::verdict_without_speedup(n), metrics::parity::no_speedup_label(n)),
        ("not viable", "no parity")
    );
    // A metric the bundle does not have: nothing, not an error.
    assert!(parity(&b, &opts("perplexity", Some("judge"))).is_empty());
    // The same metric name under another evaluator is another metric.
    assert!(parity(&b, &opts("rouge_l_f1", Some("judge"))).is_empty());
}

#[test]
fn missing_or_failed_cells_leave_that_speedup_absent_with_a_note() {
    let mut b = with_quality(sample_bundle(), |k| Some(ppl(&flat(if k == Some(4) { 20.0 } else { 10.0 }))));
    // S_parity = 8; remove the K = 8, B = 4 cell and fail the K = 8, B = 1 cell.
    b.cells.retain(|c| !(c.key.seq_len == 48 && c.key.steps == Some(8) && c.key.batch_size == 4));
    for c in &mut b.cells {
        if c.key.seq_len == 48 && c.key.steps == Some(8) && c.key.batch_size == 1 {
            c.status = schema::CellStatus::Oom { message: "out of memory".into() };
        }
    }
    let r = &parity(&b, &opts("perplexity", Some("judge")))[0];
    assert_eq!(r.outcome, Parity::Reached { steps: 8 });
    let rows: Vec<(u32, bool)> = r.speedups.iter().map(|s| (s.batch_size, s.speedup.is_some())).collect();
    assert_eq!(rows, vec![(1, false), (4, false), (8, true)]);
    assert!(r.speedups[0].note.as_deref().is_some_and(|n| n.contains("K = 8, B = 1")));
    // Parity was reached: a row without timing has no verdict, not "not viable".
    assert_eq!(metrics::parity::verdict_without_speedup(r), "no verdict");
    assert_eq!(metrics::parity::no_speedup_label(r), "not measured");
    // A diffusion K without quality is left out of the curve, not treated as a miss.
    let mut b2 = b.clone();
    for c in &mut b2.cells {
        if c.key.steps == Some(4) {
            c.quality.clear();
        }
    }
    let r2 = &parity(&b2, &opts("perplexity", Some("judge")))[0];
    assert_eq!(r2.curve.iter().map(|s| s.steps).collect::<Vec<_>>(), vec![8, 16, 32]);
}

#[test]
fn bootstrap_is_seeded_reproducible_and_brackets_the_point() {
    // Prompts differ, so resamples differ: LLaMA around 10, K=8 around 10 (parity uncertain), K=16 clearly better.
    let llama = [8.0, 9.0, 10.0, 11.0, 12.0, 9.5, 10.5, 10.0];
    let k8 = [7.0, 13.0, 9.0, 12.0, 8.0, 11.0, 10.0, 10.5];
    let b = with_quality(sample_bundle(), |k| {
        Some(ppl(&match k {
            None => llama.to_vec(),
            Some(4) => flat(40.0),
            Some(8) => k8.to_vec(),
            _ => flat(5.0),
        }))
    });
    let a = parity(&b, &opts("perplexity", Some("judge")));
    let again = parity(&b, &opts("perplexity", Some("judge")));
    assert_eq!(a, again, "same seed, same intervals");
    let other = parity(&b, &ParityOptions { seed: 8, ..opts("perplexity", Some("judge")) });
    assert_ne!(a[0].baseline.low, other[0].baseline.low, "another seed draws other resamples");
    let r = &a[0];
    let (lo, hi) = (r.baseline.low.expect("low"), r.baseline.high.expect("high"));
    assert!(lo < r.baseline.value && r.baseline.value < hi, "{lo} < {} < {hi}", r.baseline.value);
    let i = r.s_parity_interval.expect("interval");
    assert_eq!((i.low, i.high), (Some(8), Some(16)), "parity at 8 in some resamples, 16 in the others");
    let f = r.reached_fraction.expect("fraction");
    assert!(f == 1.0, "K = 16 always reaches parity: {f}");
    let bi = r.bootstrap.expect("bootstrap info");
    assert_eq!((bi.resamples, bi.seed, bi.prompts), (200, 7, 8));
}

#[test]
fn every_cell_of_a_group_shares_the_quality_of_its_largest_batch() {
    let b = with_quality(sample_bundle(), |k| Some(ppl(&flat(if k.is_none() { 3.0 } else { 4.0 }))));
    let groups = quality_cells(&b);
    let per_cell = cell_quality(&b);
    for (i, c) in b.cells.iter().enumerate() {
        let g = GroupKey::of(&c.key);
        if c.key.seq_len == 48 {
            assert_eq!(b.cells[groups[&g]].key.batch_size, 8);
            assert_eq!(per_cell[i].len(), 1, "{}", c.key);
        } else {
            assert!(!groups.contains_key(&g) && per_cell[i].is_empty(), "{}", c.key);
        }
    }
}

#[test]
fn writers_store_the_parity_the_config_asks_for() {
    // The demo config's [quality] names the primary evaluator and 1000 resamples.
    let mut b = sample_bundle();
    let cfg = b.provenance.config.quality.clone().expect("the demo config measures quality");
    let primary = cfg.evaluators[0].id.clone();
    for c in &mut b.cells {
        if c.key.batch_size == 8 {
            let mut q = ppl(&flat(if c.key.steps.is_none() { 10.0 } else { 9.0 }));
            q.evaluator = Some(primary.clone());
            c.quality = vec![q];
        }
    }
    metrics::parity::recompute(&mut b);
    assert_eq!(b.parity.len(), 2, "one record per N");
    assert!(b.parity.iter().all(|r| r.outcome == Parity::Reached { steps: 4 } && r.evaluator == Some(primary.clone())));
    assert_eq!(b.parity[0].bootstrap.map(|x| x.resamples), Some(cfg.bootstrap_resamples));
    // Stored as written (JSON floats may differ in the last bit, so compare what readers show).
    let back = schema::read_bundle(&schema::write_bundle(&b)).expect("round trip");
    assert_eq!(back.parity.len(), b.parity.len());
    for (x, y) in back.parity.iter().zip(&b.parity) {
        assert_eq!((x.outcome, x.seq_len, x.speedups.len()), (y.outcome, y.seq_len, y.speedups.len()));
        for (s, t) in x.speedups.iter().zip(&y.speedups) {
            let (s, t) = (s.speedup.expect("speedup").value, t.speedup.expect("speedup").value);
            assert!((s - t).abs() < 1e-12);
        }
    }
}

#[test]
fn the_demo_bundle_has_quality_and_an_s_parity_entry_that_recomputes_the_same() {
    // A real run of the embedded demo (synthetic weights) by this version.
    let b = schema::read_bundle(&crate::util::fixture("v1.2/demo-quality.json")).expect("1.2 fixture");
    assert!(b.provenance.synthetic_weights, "labelled synthetic");
    assert!(b.cells.iter().any(|c| !c.generations.is_empty() && c.quality.iter().any(|q| q.metric == "perplexity")));
    assert_eq!(b.parity.len(), 2, "one S_parity entry per N");
    let mut again = b.clone();
    metrics::parity::recompute(&mut again);
    assert_eq!(again.parity.len(), b.parity.len());
    for (x, y) in b.parity.iter().zip(&again.parity) {
        assert_eq!((x.outcome, x.s_parity_interval, x.seq_len), (y.outcome, y.s_parity_interval, y.seq_len));
        assert!((x.baseline.value - y.baseline.value).abs() < 1e-9 * x.baseline.value);
    }
}

#[test]
fn every_series_has_its_own_s_parity_and_a_threshold_series_the_fewest_forwards_at_parity() {
    // The demo's two series: the reference (K 4..32) and prefix+threshold at 0.9, 0.03, 0.02, whose cells record
    // 15, 1 and 1 forwards (16 x threshold, rounded up). Thresholds 0.03 and 0.02 tie at one forward: 0.03 (the
    // higher) comes first, but only 0.02 reaches parity, so S_parity is 1 forward at threshold 0.02.
    use schema::grid::{BlockCache, Threshold};
    let b = crate::util::sample_bundle_of(crate::util::demo_config());
    let level = |c: &schema::bundle::Cell| match (c.key.steps, c.key.threshold.map(|t| t.value())) {
        (None, None) => 12.0,
        (Some(k), _) if k >= 16 => 11.0,
        (Some(_), _) => 30.0,
        (None, Some(t)) if t == 0.02 || t == 0.9 => 12.0,
        (None, Some(_)) => 13.0,
    };
    let mut b = b;
    for c in &mut b.cells {
        if c.key.seq_len == 48 && c.key.batch_size == 8 {
            c.quality = vec![ppl(&flat(level(c)))];
        }
    }
    let recs = parity(&b, &opts("perplexity", Some("judge")));
    assert_eq!(recs.len(), 2, "one record per series at N = 48");
    let (reference, fast) = (&recs[0], &recs[1]);
    assert_eq!((reference.cache, reference.thresholded), (None, false));
    assert_eq!(reference.outcome, Parity::Reached { steps: 16 });
    assert_eq!(metrics::parity::s_parity_text(reference), "K = 16");
    assert_eq!((fast.cache, fast.thresholded), (Some(BlockCache::Prefix), true));
    let curve: Vec<(u32, Option<f64>)> =
        fast.curve.iter().map(|c| (c.steps, c.threshold.map(Threshold::value))).collect();
    assert_eq!(curve, [(1, Some(0.03)), (1, Some(0.02)), (15, Some(0.9))]);
    assert_eq!(fast.outcome, Parity::Reached { steps: 1 });
    assert_eq!(fast.parity_threshold, Some(Threshold(0.02)));
    assert_eq!(metrics::parity::s_parity_text(fast), "1 forward (threshold 0.02)");
    let marked: Vec<bool> = fast.curve.iter().map(|c| metrics::parity::is_parity_point(fast, c)).collect();
    assert_eq!(marked, [false, true, false]);
    // The speedup compares with the cell at threshold 0.02 (latency 1 x B + 48 + 1): AR 10 B + 49.
    let batches = fast.speedups.iter().map(|r| r.batch_size).collect::<Vec<_>>();
    assert_eq!(batches, [1, 4, 8], "a speedup row per AR batch size");
    for row in &fast.speedups {
        let key = row.diffusion_cell.as_ref().expect("matched cell");
        assert_eq!(
            (key.threshold, key.cache, key.batch_size),
            (Some(Threshold(0.02)), Some(BlockCache::Prefix), row.batch_size)
        );
        let want = f64::from(10 * row.batch_size + 49) / f64::from(row.batch_size + 49);
        assert!((row.speedup.expect("speedup").value - want).abs() < 1e-9, "B = {}", row.batch_size);
        assert_eq!(row.viable, Some(true));
    }
    // Not reached at any threshold says so.
    for c in &mut b.cells {
        if c.key.threshold.is_some() && !c.quality.is_empty() {
            c.quality = vec![ppl(&flat(50.0))];
        }
    }
    let fast = parity(&b, &opts("perplexity", Some("judge"))).remove(1);
    assert_eq!(metrics::parity::s_parity_text(&fast), "not reached at any threshold");
    assert_eq!(fast.speedups.len(), 3, "a row per AR batch size");
    assert!(fast.speedups.iter().all(|r| r.note.as_deref() == Some("parity not reached at any threshold of the grid")));
}

#[test]
fn a_bootstrap_over_few_prompts_is_cautioned() {
    let quality = |n: usize| {
        let mut b = with_quality(sample_bundle(), move |k| Some(ppl(&vec![if k.is_none() { 5.0 } else { 4.0 }; n])));
        b.prompt_set.count = n as u32;
        b
    };
    let records = parity(&quality(8), &opts("perplexity", Some("judge")));
    assert_eq!(records[0].bootstrap.map(|b| b.prompts), Some(8));
    assert_eq!(metrics::parity::few_prompts_note(&records), None, "eight prompts");
    for (n, says) in [(1, "over 1 prompt:"), (4, "over 4 prompts:")] {
        let records = parity(&quality(n), &opts("perplexity", Some("judge")));
        let note = metrics::parity::few_prompts_note(&records).expect("a caution");
        assert!(note.contains(says), "{note}");
    }
}

#[test]
fn a_value_that_leaves_out_prompts_the_cell_generated_for_is_cautioned() {
    let generation = |prompt| schema::bundle::Generation {
        prompt,
        prompt_bytes: 1,
        text: String::new(),
        reference: None,
        masked_tokens: None,
    };
    let mut b = with_quality(sample_bundle(), |k| Some(ppl(&[if k.is_none() { 5.0 } else { 4.0 }; 8])));
    for c in b.cells.iter_mut().filter(|c| !c.quality.is_empty()) {
        c.generations = (0..8).map(generation).collect();
    }
    let records = parity(&b, &opts("perplexity", Some("judge")));
    assert_eq!(metrics::parity::unscored_prompts_note(&b, &records), None, "every prompt scored");
    // One diffusion cell's perplexity lacks two prompts (their continuations had no token to score).
    let cell = b.cells.iter_mut().find(|c| !c.quality.is_empty() && c.key.steps.is_some()).expect("a diffusion cell");
    cell.quality[0] = ppl(&[4.0; 6]);
    let key = cell.key.clone();
    let records = parity(&b, &opts("perplexity", Some("judge")));
    let cells = metrics::parity::unscored_prompts(&b, &records);
    assert_eq!(cells, [(&key, 6, 8)]);
    let note = metrics::parity::unscored_prompts_note(&b, &records).expect("a caution");
    assert!(note.starts_with("perplexity leaves out prompts in 1 cell (down to 6 of 8 prompts)"), "{note}");
    assert!(metrics::parity::cautions(&b, &records).contains(&note));
    // Another metric's values are not this record's concern.
    let records = parity(&b, &opts("rouge_l_f1", None));
    assert_eq!(metrics::parity::unscored_prompts(&b, &records), []);
}
