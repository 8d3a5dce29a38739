//! The two-stack panel (issue 30 item 6): two fixture bundles of the same cells, the second's LLaDA latencies 1.6x
//! and Llama's 1.3x the first's (`explorer/e2e/fixtures/make-fixtures.py`), so that by hand A / B is 1/1.3 = 0.769
//! for the AR arm, 1/1.6 = 0.625 for the diffusion arm, and the implementations' factor 1.6/1.3 = 1.231; the
//! ratios also recomputed here from the files (per (model, B) the median of per-cell median-L_e2e ratios, as the
//! runner's `report --compare` test does). Cells in one bundle only are counted, never drawn; no shared cell: a note.

use std::collections::BTreeMap;

use charts::bundle::{LoadedBundle, load_bundle};
use charts::views::{Options, stack_comparison};
use serde_json::Value;

const H200: &str = include_str!("../../explorer/e2e/fixtures/study-h200.json");
const A100: &str = include_str!("../../explorer/e2e/fixtures/study-a100.json");
const CPU_V1_0: &str = include_str!("../../schema/tests/fixtures/v1.0/demo.json");

fn load(name: &str, text: &str) -> LoadedBundle {
    load_bundle(name, text).expect("fixture loads")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

fn cell_e2e(c: &Value) -> f64 {
    median(c["repetitions"].as_array().expect("reps").iter().map(|r| r["e2e_ms"].as_f64().expect("e2e")).collect())
}

/// (arm, B) -> (cells, median ratio) from the files.
fn expected(a: &str, b: &str) -> BTreeMap<(String, u32), (usize, f64)> {
    let (a, b): (Value, Value) = (serde_json::from_str(a).expect("json"), serde_json::from_str(b).expect("json"));
    let mut groups: BTreeMap<(String, u32), Vec<f64>> = BTreeMap::new();
    for ca in a["cells"].as_array().expect("cells") {
        let Some(cb) = b["cells"].as_array().expect("cells").iter().find(|c| c["key"] == ca["key"]) else { continue };
        if ca["status"]["state"] != "ok" || cb["status"]["state"] != "ok" {
            continue;
        }
        let model = ca["key"]["model"].as_str().expect("model").rsplit('/').next().expect("id");
        let arm = if ca["key"]["sampler"] == "ar_greedy" { "AR" } else { "diffusion" };
        let batch = ca["key"]["batch_size"].as_u64().expect("B") as u32;
        groups.entry((format!("{arm} {model}"), batch)).or_default().push(cell_e2e(ca) / cell_e2e(cb));
    }
    groups.into_iter().map(|(k, v)| (k, (v.len(), median(v)))).collect()
}

#[test]
fn two_stacks_side_by_side_have_the_hand_checked_ratios_factor_and_speedups() {
    let (a, b) = (load("study-h200.json", H200), load("study-a100.json", A100));
    let p = stack_comparison(&[&a, &b], &Options::default()).expect("a panel");
    assert_eq!((p.a.as_str(), p.b.as_str()), ("study-h200.json", "study-a100.json"));
    assert_eq!(p.counts, "20 cells in both bundles (0 only in [A], 0 only in [B]: not compared).");
    // The arms: AR first, each B; the OOM cell (LLaDA, B = 4, N = 256, K = 64) has no ratio.
    let want = expected(H200, A100);
    assert_eq!(p.arms.len(), 4, "{:?}", p.arms);
    assert_eq!(p.arms.len(), want.len());
    for r in &p.arms {
        let (cells, ratio) = want[&(r.arm.clone(), r.batch)];
        assert_eq!(r.cells, cells, "{r:?}");
        assert!((r.ratio - ratio).abs() < 1e-12, "{r:?} against {ratio}");
        assert_eq!(r.ratio_text, format!("{ratio:.3}"));
    }
    assert!(p.arms[0].arm.starts_with("AR ") && p.arms[1].arm.starts_with("AR "), "{:?}", p.arms);
    // By hand: 1/1.3 and 1/1.6 (the fixtures round each latency to a microsecond).
    let ar1 = p.arms.iter().find(|r| r.arm == "AR synthetic-llama-tiny" && r.batch == 1).expect("AR B=1");
    assert!((ar1.ratio - 1.0 / 1.3).abs() < 1e-5, "{ar1:?}");
    assert_eq!((ar1.cells, ar1.ratio_text.as_str()), (2, "0.769"));
    let d4 = p.arms.iter().find(|r| r.arm == "diffusion synthetic-llada-tiny" && r.batch == 4).expect("LLaDA B=4");
    assert!((d4.ratio - 1.0 / 1.6).abs() < 1e-5, "{d4:?}");
    assert_eq!((d4.cells, d4.ratio_text.as_str(), d4.range.as_str()), (7, "0.625", "0.625 to 0.625"));
    assert!(p.arms_note.is_none());
    assert_eq!(p.factors.len(), 2, "{:?}", p.factors);
    for (f, batch) in p.factors.iter().zip([1, 4]) {
        assert!(
            f.starts_with(&format!(
                "B = {batch}: a speedup of synthetic-llada-tiny over synthetic-llama-tiny measured under [A] is 1.231x"
            )),
            "{f}"
        );
    }
    // The speedups at parity: the same S_parity under both (the same quality values), A's speedup 1.6/1.3 B's.
    assert_eq!(p.metric.as_deref(), Some("perplexity"));
    assert!(p.speedups_note.is_none());
    // One series (LLaDA low-confidence) at two N and two B.
    assert_eq!(p.speedups.len(), 4, "{:?}", p.speedups);
    for r in &p.speedups {
        assert_eq!(r.s_parity_a, r.s_parity_b, "{r:?}");
        assert_eq!(r.s_parity_a, if r.seq == 128 { "K = 64" } else { "K = 32" }, "{r:?}");
        assert_eq!(r.factor, "1.231x", "{r:?}");
        if r.speedup_a != "-" {
            let x = |s: &str| s.trim_end_matches('x').parse::<f64>().expect("speedup");
            assert!((x(&r.speedup_a) / x(&r.speedup_b) - 1.6 / 1.3).abs() < 0.01, "{r:?}");
            assert_eq!(r.speedup_ratio, "1.231", "{r:?}");
        }
        assert!(r.series.starts_with("synthetic-llada-tiny (low-confidence remasking)"), "{r:?}");
        assert_eq!(r.ar, "synthetic-llama-tiny");
    }
    // N = 128 (S_parity K = 64) at B = 1 by hand from the fixture's medians: 1178.732 / 1214.772 under A.
    let r = p.speedups.iter().find(|r| (r.seq, r.batch) == (128, 1)).expect("N=128 B=1");
    assert_eq!(r.speedup_a, format!("{:.2}x", 1178.732 / 1214.772));
}

#[test]
fn cells_in_one_bundle_only_are_counted_not_drawn() {
    // B without its B = 4 cells: no B = 4 ratio, no zero.
    let mut v: Value = serde_json::from_str(A100).expect("json");
    v["cells"].as_array_mut().expect("cells").retain(|c| c["key"]["batch_size"] == 1);
    let kept = v["cells"].as_array().expect("cells").len();
    let b = load("b1-only.json", &serde_json::to_string(&v).expect("json"));
    let a = load("study-h200.json", H200);
    let p = stack_comparison(&[&a, &b], &Options::default()).expect("a panel");
    assert_eq!(
        p.counts,
        format!("{kept} cells in both bundles ({} only in [A], 0 only in [B]: not compared).", 20 - kept)
    );
    assert!(p.arms.iter().all(|r| r.batch == 1 && r.ratio > 0.0), "{:?}", p.arms);
    assert_eq!(p.arms.len(), 2);
    assert_eq!(p.factors.len(), 1);
    // B = 4's speedups are A's only: B's side says it has none.
    let r = p.speedups.iter().find(|r| r.batch == 4).expect("A's B = 4 rows");
    assert_eq!(
        (r.s_parity_b.as_str(), r.speedup_b.as_str(), r.speedup_ratio.as_str(), r.factor.as_str()),
        ("-", "-", "-", "-")
    );
    assert_ne!(r.s_parity_a, "-");
}

#[test]
fn no_shared_cell_is_a_one_line_note_and_one_bundle_none() {
    let (a, cpu) = (load("study-h200.json", H200), load("demo.json", CPU_V1_0));
    let e = stack_comparison(&[&a, &cpu], &Options::default()).expect_err("nothing shared");
    assert!(e.starts_with("No cell is in both bundles (20 cells only in [A], "), "{e}");
    assert!(!e.contains('\n'));
    assert!(stack_comparison(&[&a], &Options::default()).is_err());
    // Without quality in either: the ratios, and a note for the speedups.
    let p = stack_comparison(&[&cpu, &cpu], &Options::default()).expect("a panel");
    assert!(p.arms.iter().all(|r| r.ratio_text == "1.000"), "{:?}", p.arms);
    assert!(p.speedups.is_empty() && p.metric.is_none());
    assert_eq!(
        p.speedups_note.as_deref(),
        Some(
            "Speedup at parity under each stack: absent ([A]: no quality values; [B]: no quality values); the latency \
             ratios above are all this comparison has."
        )
    );
}

#[test]
fn a_batch_size_whose_autoregressive_cell_ran_out_of_memory_in_one_bundle_keeps_its_row_saying_why() {
    // [B]'s AR cell at N = 128, B = 4 ran out of memory: [A]'s speedup there stands beside B's reason, not beside
    // a bare "-".
    let mut v: Value = serde_json::from_str(A100).expect("json");
    for c in v["cells"].as_array_mut().expect("cells") {
        let k = &c["key"];
        if k["sampler"] == "ar_greedy" && k["seq_len"] == 128 && k["batch_size"] == 4 {
            c["status"] = serde_json::json!({"state": "oom", "message": "CUDA out of memory (test)"});
            c["repetitions"] = serde_json::json!([]);
        }
    }
    let (a, b) = (load("study-h200.json", H200), load("oom.json", &v.to_string()));
    let p = stack_comparison(&[&a, &b], &Options::default()).expect("a panel");
    assert_eq!(p.speedups.len(), 4, "the row stays: {:?}", p.speedups);
    let r = p.speedups.iter().find(|r| (r.seq, r.batch) == (128, 4)).expect("N=128 B=4");
    assert_eq!(r.speedup_b, "no baseline: the autoregressive cell ran out of memory", "{r:?}");
    assert_eq!((r.s_parity_a.as_str(), r.s_parity_b.as_str()), ("K = 64", "K = 64"), "{r:?}");
    assert!(r.speedup_a.ends_with('x'), "{r:?}");
    assert_eq!(r.speedup_ratio, "-", "{r:?}");
    // The other rows are as before.
    assert!(p.speedups.iter().filter(|r| (r.seq, r.batch) != (128, 4)).all(|r| !r.speedup_b.starts_with("no ")));
}
