//! `dllm-bench report RUNNER --compare REFERENCE`: per arm and batch size the latency ratio runner / reference,
//! the factor it puts into the speedup, and the speedup at parity under each stack, on the committed H200 pair
//! (no quality: parity absent, said so) and on a demo run against a copy whose diffusion cells are twice as slow.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use crate::assert_exit;
use crate::util::{Sandbox, stdout};

fn results(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../results").join(name).display().to_string()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

fn cell_e2e(c: &Value) -> f64 {
    median(c["repetitions"].as_array().expect("reps").iter().map(|r| r["e2e_ms"].as_f64().expect("e2e")).collect())
}

/// The section of the report after its heading.
fn section(text: &str) -> &str {
    let at = text.find("## Runner against reference").unwrap_or_else(|| panic!("no compare section:\n{text}"));
    &text[at..]
}

#[test]
fn report_compare_states_the_ratios_of_the_h200_pair_and_that_parity_is_absent() {
    let sb = Sandbox::new();
    let (runner, reference) =
        (results("gpu_primary-h200-runner-20261126.json"), results("gpu_primary-h200-hf-eager-20261126.json"));
    let out = sb.cmd(&["report", &runner, "--compare", &reference]);
    assert_exit!(out, 0);
    let text = stdout(&out);
    let s = section(&text);
    // The ratios, from the bundles here: per (model, B) the median of per-cell median-L_e2e ratios.
    let read = |p: &str| -> Value { serde_json::from_str(&std::fs::read_to_string(p).expect("bundle")).expect("json") };
    let (a, b) = (read(&runner), read(&reference));
    let mut groups: BTreeMap<(String, u64), Vec<f64>> = BTreeMap::new();
    for cb in b["cells"].as_array().expect("cells") {
        let ca = a["cells"].as_array().expect("cells").iter().find(|c| c["key"] == cb["key"]).expect("runner cell");
        let model = cb["key"]["model"].as_str().expect("model").rsplit('/').next().expect("id").to_string();
        groups
            .entry((model, cb["key"]["batch_size"].as_u64().expect("B")))
            .or_default()
            .push(cell_e2e(ca) / cell_e2e(cb));
    }
    assert_eq!(groups.len(), 4, "AR and LLaDA at B 1 and 4");
    let mut ratio = BTreeMap::new();
    for ((model, batch), v) in &groups {
        let m = median(v.clone());
        let arm = if model.contains("llama") { "AR" } else { "diffusion" };
        let row = format!("| {arm} {model} | {batch} | {} | {m:.3} |", v.len());
        assert!(s.contains(&row), "no row {row:?}:\n{s}");
        ratio.insert((arm, *batch), m);
    }
    for batch in [1, 4] {
        let factor = ratio[&("AR", batch)] / ratio[&("diffusion", batch)];
        let line = format!(
            "B = {batch}: a speedup of synthetic-llada-8b over synthetic-llama-8b measured with the runner is **{factor:.3}x**"
        );
        assert!(s.contains(&line), "no {line:?}:\n{s}");
    }
    assert!(s.contains("8 cells in both bundles (8 only in the runner's, 0 only in the reference's)"), "{s}");
    assert!(
        s.contains("Speedup at parity under each stack: absent (the runner's bundle: no quality values; the reference's: no quality values)"),
        "{s}"
    );
    assert!(!s.contains("S_parity runner"), "no parity table without parity:\n{s}");
}

#[test]
fn report_compare_puts_the_implementations_factor_beside_each_stacks_speedup() {
    let sb = Sandbox::new();
    // The demo (tiny synthetic models, with quality): AR and two LLaDA series at K 2 and 8, B = 1.
    let out = sb.cmd(&[
        "run",
        "--quiet",
        "--max-prompts",
        "2",
        "--repetitions",
        "1",
        "--warmup",
        "0",
        "--steps",
        "2,8",
        "--batch-size",
        "1",
        "--seq-len",
        "48",
        "--run-dir",
        sb.path().join("run").to_str().expect("utf8"),
    ]);
    assert_exit!(out, 0);
    let runner = sb.path().join("run/bundle.json");
    let mut b: Value = serde_json::from_str(&std::fs::read_to_string(&runner).expect("bundle")).expect("json");
    // The "reference": the same cells, every diffusion repetition twice as long.
    for c in b["cells"].as_array_mut().expect("cells") {
        if c["key"]["sampler"] == "ar_greedy" {
            continue;
        }
        for r in c["repetitions"].as_array_mut().expect("reps") {
            let e2e = r["e2e_ms"].as_f64().expect("e2e");
            r["e2e_ms"] = (2.0 * e2e).into();
        }
    }
    let reference = sb.write("reference.json", &serde_json::to_string(&b).expect("json"));
    let out = sb.cmd(&["report", runner.to_str().expect("utf8"), "--compare", reference.to_str().expect("utf8")]);
    assert_exit!(out, 0);
    let text = stdout(&out);
    let s = section(&text);
    assert!(s.contains("| AR synthetic-llama-tiny | 1 | 1 | 1.000 | 1.000 to 1.000 |"), "{s}");
    // Every diffusion cell (both series) half the reference's latency.
    let row = s.lines().find(|l| l.starts_with("| diffusion synthetic-llada-tiny | 1 |")).expect("diffusion row");
    assert!(row.ends_with(" | 0.500 | 0.500 to 0.500 |"), "{s}");
    assert!(s.contains("is **2.000x** the one the reference gives"), "{s}");
    // Each stack's own S_parity and speedup: the same S_parity, the runner's speedup twice the reference's.
    let rows: Vec<&str> = s.lines().filter(|l| l.starts_with("| 48 |")).collect();
    assert_eq!(rows.len(), 2, "one row per series at B = 1:\n{s}");
    for row in rows {
        let cols: Vec<&str> = row.split('|').map(str::trim).collect();
        // | N | series | vs | B | S_parity runner | speedup runner | S_parity reference | speedup reference | ratio |
        assert_eq!(cols[5], cols[7], "the same S_parity under both: {row}");
        let (x, y): (f64, f64) = (cols[6].parse().expect("speedup"), cols[8].parse().expect("speedup"));
        assert!((x / y - 2.0).abs() < 0.01, "{row}");
        assert_eq!(cols[9], "2.000", "{row}");
    }
    assert!(!s.contains("No S_parity"), "{s}");
}
