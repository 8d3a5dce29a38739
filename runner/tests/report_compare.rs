//! `dllm-bench report RUNNER --compare REFERENCE`: per arm and batch size the latency ratio runner / reference,
//! the factor it puts into the speedup, and the speedup at parity under each stack, on the committed H200 pair
//! (no quality: parity absent, said so) and on a demo run against a copy whose diffusion cells are twice as slow.
//! Also what `validate` and `report` say of a partial bundle, `validate`'s refusal of inconsistent hand edits, the
//! intervals' scope, and the synthetic label of `figures`' LaTeX table.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use crate::assert_exit;
use crate::util::{Sandbox, stdout, with_ar_oom};

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
    // Before the numbers, what a reader must know of this run: one repetition and one warm-up per cell, and an
    // older runner's token count (masked positions counted) read as the valid tokens, as `validate` says too.
    assert!(text.contains("**16 of 16 measured cells have one repetition**"), "{text}");
    assert!(text.contains("**1 warm-up run per cell**, fewer than the study's 3"), "{text}");
    let recounted = a["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .flat_map(|c| c["repetitions"].as_array().expect("reps"))
        .filter(|r| {
            let committed: u64 =
                r["committed_per_step"].as_array().map_or(0, |c| c.iter().filter_map(Value::as_u64).sum());
            r.get("committed_per_step").is_some() && committed < r["output_tokens"].as_u64().expect("tokens")
        })
        .count();
    assert!(recounted > 0, "the H200 bundle's runner counted masked positions");
    let note = format!("{recounted} repetition(s) of an older runner counted positions left masked in output_tokens");
    assert!(text.contains(&format!("**Valid tokens:** {note}")), "{text}");
    let validated = sb.cmd(&["validate", &runner]);
    assert_exit!(validated, 0);
    assert!(stdout(&validated).contains(&note), "{}", stdout(&validated));
    // Two implementations (the runner and HF eager): the factor is theirs, with its spread over the cells.
    assert!(!s.contains("same implementation"), "{s}");
    assert!(s.contains("that factor comes from the implementations"), "{s}");
    assert!(s.contains("(the per-cell ratios put it between "), "{s}");
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
    let runner = demo_run(&sb, "1");
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
    // The "reference" is the runner's own bundle edited: the same tool, commit, device and attention, so the
    // factor is run-to-run variation, not the implementations', and its spread is shown.
    assert!(s.contains("**Both bundles come from the same implementation** (dllm-bench "), "{s}");
    assert!(s.contains("both bundles are the same implementation, so that factor is run-to-run variation"), "{s}");
    assert!(!s.contains("comes from the implementations"), "{s}");
    assert!(s.contains("(the per-cell ratios put it between 2.000x and 2.000x, over 1 AR and "), "{s}");
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

    // Another tool (the reference implementation): the factor is the implementations'.
    b["provenance"]["tool"] = "hf_reference.py".into();
    let other = sb.write("other.json", &serde_json::to_string(&b).expect("json"));
    let out = sb.cmd(&["report", runner.to_str().expect("utf8"), "--compare", other.to_str().expect("utf8")]);
    assert_exit!(out, 0);
    let text = stdout(&out);
    let s = section(&text);
    assert!(!s.contains("same implementation"), "{s}");
    assert!(s.contains("**2.000x** the one the reference gives on the same cells (AR ratio / diffusion ratio)"), "{s}");
    assert!(s.contains("that factor comes from the implementations, not the models"), "{s}");

    // No cell in common: a usage problem, exit 2 naming both files and the fix.
    b["cells"] = serde_json::json!([]);
    let empty = sb.write("empty.json", &serde_json::to_string(&b).expect("json"));
    let out = sb.cmd(&["report", runner.to_str().expect("utf8"), "--compare", empty.to_str().expect("utf8")]);
    assert_exit!(out, 2);
    let err = crate::util::stderr(&out);
    assert!(err.contains("have no cell in common") && err.contains("empty.json"), "{err}");
    assert!(err.contains(runner.to_str().expect("utf8")) && err.contains("fix:"), "{err}");
}

/// The demo with quality at K 2 and 8, N = 48, at `batch_sizes` (B 1 and 4: 12 cells, quality in each group's
/// B = 4 cell), in the run folder `run`: its bundle.
fn demo_run(sb: &Sandbox, batch_sizes: &str) -> PathBuf {
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
        batch_sizes,
        "--seq-len",
        "48",
        "--run-dir",
        sb.path().join("run").to_str().expect("utf8"),
    ]);
    assert_exit!(out, 0);
    sb.path().join("run/bundle.json")
}

fn read(p: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).expect("bundle")).expect("json")
}

#[test]
fn validate_and_report_say_a_bundle_is_partial() {
    let sb = Sandbox::new();
    let full = demo_run(&sb, "1,4");
    let mut b = read(&full);
    let planned = b["provenance"]["planned_cells"].as_u64().expect("planned_cells");
    assert_eq!(planned, b["cells"].as_array().expect("cells").len() as u64);
    // What an interrupted run leaves: the first cells (every B = 1 cell and the K = 2 group's B = 4 one), the
    // planned count kept. K = 8 and the threshold series have no quality value yet.
    b["cells"].as_array_mut().expect("cells").truncate(8);
    b.as_object_mut().expect("bundle").remove("parity");
    let partial = sb.write("partial.json", &serde_json::to_string(&b).expect("json"));
    let p = partial.to_str().expect("utf8");

    let out = sb.cmd(&["validate", p]);
    assert_exit!(out, 0);
    let text = stdout(&out);
    assert!(text.contains(&format!("partial.json: valid but PARTIAL: 8 of {planned} planned cells")), "{text}");
    assert!(!text.contains(": ok,"), "{text}");
    assert!(text.contains(&format!("{} planned cells not measured yet", planned - 8)), "{text}");
    assert!(text.contains("quality groups have no quality value yet"), "{text}");
    // --complete refuses it, naming the file and the fix; the whole bundle passes.
    let out = sb.cmd(&["validate", "--complete", p]);
    assert_exit!(out, 2);
    let err = crate::util::stderr(&out);
    assert!(err.contains("partial.json (8 of") && err.contains("fix:"), "{err}");
    let out = sb.cmd(&["validate", "--complete", full.to_str().expect("utf8")]);
    assert_exit!(out, 0);
    assert!(stdout(&out).contains(": ok, 12 cells") && !stdout(&out).contains("PARTIAL"), "{}", stdout(&out));

    // The report: a warning before any number, beside S_parity and on each verdict.
    let out = sb.cmd(&["report", p]);
    assert_exit!(out, 0);
    let text = stdout(&out);
    let warning = text.find("**PARTIAL bundle: 8 of").unwrap_or_else(|| {
        panic!(
            "no partial warning:
{text}"
        )
    });
    assert!(warning < text.find("## Summary").expect("summary"), "{text}");
    assert!(text.contains("may change when the rest of the grid is measured"), "{text}");
    assert!(text.contains("(PARTIAL bundle: from the cells measured so far; may change"), "{text}");
    assert!(
        text.contains("faster at equal quality (partial bundle)")
            || text.contains("slower at equal quality (partial bundle)"),
        "{text}"
    );
    let out = sb.cmd(&["report", full.to_str().expect("utf8")]);
    assert!(!stdout(&out).contains("PARTIAL") && !stdout(&out).contains("partial bundle"), "{}", stdout(&out));
}

#[test]
fn a_bundle_stopped_while_its_evaluators_scored_is_partial_to_every_reader() {
    let sb = Sandbox::new();
    let full = demo_run(&sb, "1,4");
    let mut b = read(&full);
    // What a run stopped while scoring leaves: every cell, the text statistics of each quality cell, but the
    // evaluator's perplexity of only some (the first two).
    let mut scored = 0;
    let mut cut = 0;
    for c in b["cells"].as_array_mut().expect("cells") {
        if c["generations"].as_array().is_none_or(|g| g.is_empty()) {
            continue;
        }
        scored += 1;
        if scored > 2 {
            let q = c["quality"].as_array_mut().expect("quality");
            let before = q.len();
            q.retain(|v| v["evaluator"].is_null());
            assert!(q.len() < before && !q.is_empty(), "text statistics stay, the perplexity goes: {q:?}");
            cut += 1;
        }
    }
    assert!(cut >= 2, "{cut} quality cells cut");
    b.as_object_mut().expect("bundle").remove("parity");
    let partial = sb.write("scoring.json", &serde_json::to_string(&b).expect("json"));
    let p = partial.to_str().expect("utf8");
    let counts = format!("12 of 12 planned cells, the continuations of {cut} not yet scored by every evaluator");

    let out = sb.cmd(&["validate", p]);
    assert_exit!(out, 0);
    let text = stdout(&out);
    assert!(text.contains(&format!("scoring.json: valid but PARTIAL: {counts}")), "{text}");
    assert!(!text.contains("planned cells not measured yet"), "every cell is there: {text}");
    assert!(text.contains(&format!("partial: the continuations of {cut} cells are not yet scored by every")), "{text}");
    assert!(text.contains("resume the run (dllm-bench run --resume DIR)"), "{text}");
    assert!(!text.contains("quality groups have no quality value yet"), "every group has its values: {text}");
    let out = sb.cmd(&["validate", "--complete", p]);
    assert_exit!(out, 2);
    // The report warns before any number; export says it on its standard error.
    let out = sb.cmd(&["report", p]);
    assert_exit!(out, 0);
    let text = stdout(&out);
    let warning = text.find(&format!("**PARTIAL bundle: {counts}")).unwrap_or_else(|| panic!("no warning:\n{text}"));
    assert!(warning < text.find("## Summary").expect("summary"), "{text}");
    for table in ["parity", "repetitions"] {
        let out = sb.cmd(&["export", p, "--table", table, "-o", &format!("{table}.csv")]);
        assert_exit!(out, 0);
        let err = crate::util::stderr(&out);
        assert!(err.contains(&format!("warning: {p} is a PARTIAL bundle ({counts})")), "{err}");
    }
    // The whole bundle: none of it.
    let whole = full.to_str().expect("utf8");
    assert!(!stdout(&sb.cmd(&["validate", whole])).contains("PARTIAL"));
    let out = sb.cmd(&["export", whole, "-o", "whole.csv"]);
    assert!(!crate::util::stderr(&out).contains("PARTIAL"), "{}", crate::util::stderr(&out));
}

#[test]
fn report_says_what_the_speedup_interval_covers() {
    let sb = Sandbox::new();
    let full = demo_run(&sb, "1,4");
    let out = sb.cmd(&["report", full.to_str().expect("utf8")]);
    assert_exit!(out, 0);
    let text = stdout(&out);
    assert!(text.contains("The bootstrap resamples quality only"), "{text}");
    assert!(
        text.contains("with both latencies held at their measured medians, so it does not cover timing noise"),
        "{text}"
    );
    assert!(text.contains("| speedup [95%, quality only] |"), "{text}");
}

#[test]
fn validate_refuses_inconsistent_hand_edits_naming_the_field_and_the_fix() {
    let sb = Sandbox::new();
    let full = demo_run(&sb, "1,4");
    let b = read(&full);
    let refused = |name: &str, edit: &dyn Fn(&mut Value), want: &[&str]| {
        let mut x = b.clone();
        edit(&mut x);
        let p = sb.write(name, &serde_json::to_string(&x).expect("json"));
        let out = sb.cmd(&["validate", p.to_str().expect("utf8")]);
        assert_exit!(out, 2);
        let err = crate::util::stderr(&out);
        assert!(err.contains(name) && err.contains("fix:"), "{name}: {err}");
        for w in want {
            assert!(err.contains(w), "{name}: no {w:?} in {err}");
        }
        p
    };
    // No synthetic label on a bundle of synthetic models: refused by every reader (schema::check_bundle), report
    // too, which would otherwise print the numbers of random weights unlabelled.
    let label = ["provenance.synthetic_weights is false but models[0]", "set provenance.synthetic_weights to true"];
    let p = refused("unlabelled.json", &|x| x["provenance"]["synthetic_weights"] = false.into(), &label);
    let report = sb.cmd(&["report", p.to_str().expect("utf8")]);
    assert_exit!(report, 2);
    assert!(label.iter().all(|w| crate::util::stderr(&report).contains(w)), "{}", crate::util::stderr(&report));
    // Energy on a repetition of an execution that had no counter (this demo's: no RAPL here, or made so).
    refused(
        "energy.json",
        &|x| {
            x["provenance"]["executions"][0]["energy"] = serde_json::json!({"unavailable": "no RAPL"});
            x["cells"][0]["repetitions"][0]["energy_j"] = 1.5.into();
            x["cells"][0]["repetitions"][0]["energy_window_ms"] = 10.0.into();
        },
        &[
            "cells[0].repetitions[0].energy_j is 1.5",
            "provenance.executions[0].energy says energy was unavailable (no RAPL)",
        ],
    );
    // Zeros where no measurement is 0.
    for field in ["peak_rss_bytes", "kv_cache_bytes", "weights_read_bytes"] {
        let msg = format!("cells[0].repetitions[0].{field} is 0");
        refused(
            &format!("zero-{field}.json"),
            &|x| x["cells"][0]["repetitions"][0][field] = 0.into(),
            &[&msg, "never 0"],
        );
    }
    // The bundle as written passes, without a warning.
    let ok = sb.cmd(&["validate", full.to_str().expect("utf8")]);
    assert_exit!(ok, 0);
    assert!(!stdout(&ok).contains("warning"), "{}", stdout(&ok));
    // A misspelled field is valid JSON every reader ignores: validate names it (its value is lost to them).
    let mut x = b.clone();
    let rep = &mut x["cells"][0]["repetitions"][0];
    let e2e = rep["e2e_ms"].clone();
    rep["e2e_msec"] = e2e;
    let p = sb.write("typo.json", &serde_json::to_string(&x).expect("json"));
    let out = sb.cmd(&["validate", p.to_str().expect("utf8")]);
    assert_exit!(out, 0);
    let text = stdout(&out);
    assert!(text.contains("warning: cells[0].repetitions[0].e2e_msec is not a field of schema"), "{text}");
    assert!(text.contains("(misspelled? did you mean `e2e_ms`? its value is lost"), "the field it is near: {text}");
    // So in a file of an older minor of this major (minors only add fields): the 1.5 bundles of results/.
    x["schema_version"] = "1.5".into();
    let p = sb.write("typo-1.5.json", &serde_json::to_string(&x).expect("json"));
    let text = stdout(&sb.cmd(&["validate", p.to_str().expect("utf8")]));
    assert!(text.contains("warning: cells[0].repetitions[0].e2e_msec is not a field of schema"), "{text}");
}

#[test]
fn report_cautions_when_the_evaluator_is_a_model_it_compares() {
    let sb = Sandbox::new();
    let full = demo_run(&sb, "1");
    let p = full.to_str().expect("utf8");
    // The demo's primary evaluator is an independent model; its second is the AR model itself.
    let independent = stdout(&sb.cmd(&["report", p]));
    // (Not the host's load: the run's conditions caution of a busy machine, which a test suite on two cores can be.)
    let cautions: Vec<&str> = independent
        .lines()
        .filter(|l| l.starts_with("**Caution:**") && !l.contains("the host's load average was"))
        .collect();
    // Two prompts (the run's --max-prompts): only the caution of a bootstrap over so few.
    assert_eq!(cautions.len(), 1, "{independent}");
    assert!(cautions[0].contains("a bootstrap over 2 prompts"), "{independent}");
    // A K series' S_parity says what the grid's steps bracket (metrics::parity::s_parity_bracket_text).
    let reached: Vec<&str> = independent.lines().filter(|l| l.starts_with("S_parity: K = ")).collect();
    assert!(!reached.is_empty(), "the demo's reference series reaches parity: {independent}");
    for l in &reached {
        assert!(l.contains("did not reach parity: ") || l.contains("is the fewest steps tried"), "{l}");
    }
    let own = stdout(&sb.cmd(&["report", p, "--evaluator", "dllm-bench/synthetic-llama-tiny"]));
    assert!(
        own.contains(
            "**Caution:** perplexity is scored by dllm-bench/synthetic-llama-tiny, which is also the autoregressive \
             model compared: a model scoring its own greedy text favours it"
        ),
        "{own}"
    );
}

#[test]
fn figures_latex_table_cautions_when_the_primary_evaluator_is_a_compared_model() {
    // The demo with its second evaluator (the measured llama) alone: S_parity read under the AR model's own scoring.
    let sb = Sandbox::new();
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/demo.toml");
    let demo = std::fs::read_to_string(demo).expect("demo.toml");
    let independent = "[[quality.evaluators]]\nid = \"dllm-bench/synthetic-evaluator-tiny\"\n\n\
                       [quality.evaluators.synthetic]\npreset = \"tiny\"\nseed = 3\n";
    assert!(demo.contains(independent), "the demo's first evaluator");
    let config = sb.write("own.toml", &demo.replace(independent, ""));
    let c = config.to_str().expect("utf8");
    let args = ["run", "-q", "--config", c, "--max-prompts", "2", "--repetitions", "1", "--warmup", "0"];
    let run =
        sb.cmd(&[&args[..], &["--steps", "2", "--batch-size", "1", "--seq-len", "48", "--run-dir", "own"]].concat());
    assert_exit!(run, 0);
    let out = sb.cmd(&["figures", "own/bundle.json", "-o", "figs"]);
    assert_exit!(out, 0);
    let tex = std::fs::read_to_string(sb.path().join("figs/s_parity.tex")).expect("s_parity.tex");
    assert!(
        tex.contains(
            "\\noindent\\emph{Caution: perplexity is scored by dllm-bench/synthetic-llama-tiny, which is also the \
             autoregressive model compared"
        ),
        "{tex}"
    );
}

#[test]
fn figures_latex_table_says_synthetic_weights() {
    let sb = Sandbox::new();
    let full = demo_run(&sb, "1,4");
    let out = sb.cmd(&["figures", full.to_str().expect("utf8"), "-o", "figs"]);
    assert_exit!(out, 0);
    let tex = std::fs::read_to_string(sb.path().join("figs/s_parity.tex")).expect("s_parity.tex");
    // Printed text (not a LaTeX comment) above the table; under it, each series' S_parity interval.
    let label = "\\noindent\\emph{SYNTHETIC weights: timing is real, quality is meaningless.}\\par";
    assert!(tex.lines().any(|l| l == label), "{tex}");
    assert!(tex.contains("intervals: prompts resampled for quality only; latencies at their medians"), "{tex}");
    assert!(tex.find(label).expect("label") < tex.find("\\begin{tabular}").expect("tabular"), "{tex}");
    let notes = &tex[tex.find("\\end{tabular}").expect("end")..];
    let bundle = schema::read_bundle(&std::fs::read_to_string(&full).expect("bundle")).expect("reads");
    let opts = metrics::parity::ParityOptions::from_config(&bundle).expect("the demo's [quality]");
    let records = metrics::parity::parity(&bundle, &opts);
    for r in &records {
        let i = metrics::parity::s_parity_interval_text(r).expect("the demo's prompts give intervals");
        let line = format!("$N = {}$", r.seq_len);
        assert!(
            notes.lines().any(|l| l.contains(&line) && l.contains(&i.replace('%', "\\%").replace('>', "$>$"))),
            "{i}\n{tex}"
        );
    }
}

/// The B column of each speedup table of `report` under the headings that start with `heading`, with each row.
fn speedup_tables<'a>(report: &'a str, heading: &str) -> Vec<Vec<(&'a str, &'a str)>> {
    report
        .split("\n## ")
        .filter(|section| section.starts_with(heading))
        .map(|section| {
            let table = &section[section.find("\n| B |").expect("a speedup table")..];
            table
                .lines()
                .skip(3)
                .take_while(|l| l.starts_with("| "))
                .map(|l| (l.split(" | ").next().unwrap_or_default().trim_start_matches("| "), l))
                .collect()
        })
        .collect()
}

#[test]
fn a_batch_size_whose_autoregressive_cell_ran_out_of_memory_keeps_a_row_saying_why() {
    let sb = Sandbox::new();
    // The AR cell at B = 1, N = 48 (not its group's quality cell, B = 8) ran out of memory.
    let bundle = with_ar_oom(&sb, "oom.json", &[1], false);
    let b = bundle.to_str().expect("utf8");
    let out = sb.cmd(&["report", b]);
    assert_exit!(out, 0);
    let report = stdout(&out);
    let why = "the autoregressive cell ran out of memory (no baseline latency)";
    // Each N = 48 series keeps B = 1, first, as a row with no numbers; N = 96 keeps its measured B = 1.
    let tables = speedup_tables(&report, "N = 48: ");
    assert_eq!(tables.len(), 2, "the reference and prefix+threshold series: {report}");
    for rows in &tables {
        assert_eq!(rows.iter().map(|(b, _)| *b).collect::<Vec<_>>(), ["1", "4", "8"], "{report}");
        assert!(rows[0].1.starts_with("| 1 | - | - | - | - | - | "), "{}", rows[0].1);
    }
    // Reached parity: no verdict without the baseline's latency; not reached: not viable all the same.
    assert!(tables[0][0].1.ends_with(&format!("| no verdict: {why} |")), "{}", tables[0][0].1);
    let not_reached = format!("| not viable: parity not reached at any threshold; {why} |");
    assert!(tables[1][0].1.ends_with(&not_reached), "{}", tables[1][0].1);
    assert!(speedup_tables(&report, "N = 96: ").iter().all(|rows| !rows[0].1.contains(why)), "{report}");
    assert!(report.contains("its row or a warning says why"), "{report}");
    // The summary lists every B of the shape, B = 1 with no speedup.
    assert!(report.contains("| B=1: -, B=4: "), "{report}");
    // The LaTeX table says it under the table, per series.
    let figs = sb.cmd(&["figures", b, "-o", "figs", "--format", "svg"]);
    assert_exit!(figs, 0);
    let tex = std::fs::read_to_string(sb.path().join("figs/s_parity.tex")).expect("s_parity.tex");
    let said = format!("$B = 1$: no row, {why}.");
    assert_eq!(tex.matches(&said).count(), 2, "{tex}");
    assert!(tex.lines().filter(|l| l.contains(&said)).all(|l| l.starts_with("\\noindent{\\footnotesize $N = 48$")));
    // Two batch sizes the same way: one sentence.
    let two = with_ar_oom(&sb, "oom2.json", &[1, 4], false);
    let figs = sb.cmd(&["figures", two.to_str().expect("utf8"), "-o", "figs2", "--format", "svg"]);
    assert_exit!(figs, 0);
    let tex = std::fs::read_to_string(sb.path().join("figs2/s_parity.tex")).expect("s_parity.tex");
    assert_eq!(tex.matches(&format!("$B = 1, 4$: no row, {why}.")).count(), 2, "{tex}");
    // The bundle as written, whole: no such row.
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../schema/tests/fixtures/v1.5/demo-series.json");
    let whole = sb.cmd(&["report", fixture.to_str().expect("utf8")]);
    assert_exit!(whole, 0);
    assert!(!stdout(&whole).contains("no baseline latency"), "{}", stdout(&whole));
}

#[test]
fn report_compare_keeps_a_batch_size_whose_autoregressive_cell_ran_out_of_memory_on_one_side_saying_why() {
    let sb = Sandbox::new();
    // The "runner": the demo-series fixture with its AR cell at N = 48, B = 1 out of memory; the "reference": the
    // fixture whole, its tool renamed so that the two are not one implementation.
    let runner = with_ar_oom(&sb, "oom.json", &[1], false);
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../schema/tests/fixtures/v1.5/demo-series.json");
    let mut whole: Value = serde_json::from_str(&std::fs::read_to_string(&fixture).expect("fixture")).expect("json");
    whole["provenance"]["tool"] = "hf_reference.py".into();
    let reference = sb.write("reference.json", &whole.to_string());
    let (r, f) = (runner.to_str().expect("utf8"), reference.to_str().expect("utf8"));
    let out = sb.cmd(&["report", r, "--compare", f]);
    assert_exit!(out, 0);
    let text = stdout(&out);
    let s = section(&text);
    // | N | series | vs | B | S_parity runner | speedup runner | S_parity reference | speedup reference | ratio |
    let rows: Vec<Vec<&str>> =
        s.lines().filter(|l| l.starts_with("| 48 |")).map(|l| l.split('|').map(str::trim).collect()).collect();
    let at_b1: Vec<&Vec<&str>> = rows.iter().filter(|c| c[4] == "1").collect();
    assert_eq!(at_b1.len(), 2, "B = 1 keeps its row in both N = 48 series:\n{s}");
    for cols in at_b1 {
        assert_eq!(cols[6], "no baseline: the autoregressive cell ran out of memory", "{cols:?}");
        // The runner's record of the series is there: its S_parity is shown, the same as the reference's.
        assert_ne!(cols[5], "-", "{cols:?}");
        assert_eq!(cols[5], cols[7], "{cols:?}");
        assert_eq!(cols[9], "-", "no ratio without the runner's speedup: {cols:?}");
    }
    // The reference's own speedup at B = 1 is a number where its series reached parity.
    assert!(rows.iter().any(|c| c[4] == "1" && c[8].parse::<f64>().is_ok()), "{s}");
    // The other batch sizes are unchanged: both sides have their speedups and a ratio.
    assert!(rows.iter().filter(|c| c[4] != "1").all(|c| !c[6].starts_with("no baseline")), "{s}");
    // Swapped, the reference's column says it.
    let out = sb.cmd(&["report", f, "--compare", r]);
    assert_exit!(out, 0);
    let text = stdout(&out);
    let swapped = section(&text);
    let b1: Vec<Vec<&str>> = swapped
        .lines()
        .filter(|l| l.starts_with("| 48 |"))
        .map(|l| l.split('|').map(str::trim).collect::<Vec<_>>())
        .filter(|c| c[4] == "1")
        .collect();
    assert_eq!(b1.len(), 2, "{swapped}");
    assert!(
        b1.iter().all(|c| c[8] == "no baseline: the autoregressive cell ran out of memory" && c[7] != "-"),
        "{swapped}"
    );
}

#[test]
fn report_compare_lists_a_batch_size_only_the_reference_has_with_its_series_in_b_order() {
    let sb = Sandbox::new();
    // The "runner": the demo-series fixture without its B = 1 cells (a partial bundle); the "reference": whole.
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../schema/tests/fixtures/v1.5/demo-series.json");
    let whole: Value = serde_json::from_str(&std::fs::read_to_string(&fixture).expect("fixture")).expect("json");
    let mut cut = whole.clone();
    cut["cells"].as_array_mut().expect("cells").retain(|c| c["key"]["batch_size"] != 1);
    let runner = sb.write("cut.json", &cut.to_string());
    let mut reference = whole;
    reference["provenance"]["tool"] = "hf_reference.py".into();
    let reference = sb.write("reference.json", &reference.to_string());
    let out = sb.cmd(&["report", runner.to_str().expect("utf8"), "--compare", reference.to_str().expect("utf8")]);
    assert_exit!(out, 0);
    let text = stdout(&out);
    let s = section(&text);
    // | N | series | vs | B | ...: each series' rows together, by B, B = 1 (the reference's only) first.
    let rows: Vec<(String, String)> = s
        .lines()
        .filter(|l| l.starts_with("| 48 |") || l.starts_with("| 96 |"))
        .map(|l| {
            let c: Vec<&str> = l.split('|').map(str::trim).collect();
            (format!("{} {}", c[1], c[2]), c[4].to_string())
        })
        .collect();
    assert!(rows.iter().any(|(_, b)| b == "1"), "{s}");
    let mut seen: Vec<&String> = Vec::new();
    for (i, (series, b)) in rows.iter().enumerate() {
        if seen.last() != Some(&series) {
            assert!(!seen.contains(&series), "the rows of {series} are not together:\n{s}");
            seen.push(series);
            assert_eq!(b, "1", "{series} starts at B = 1:\n{s}");
        } else {
            assert!(rows[i - 1].1.parse::<u32>().expect("B") < b.parse::<u32>().expect("B"), "B order:\n{s}");
        }
    }
}

#[test]
fn an_n_at_which_no_autoregressive_cell_finished_is_said_to_have_no_s_parity() {
    let sb = Sandbox::new();
    let bundle = with_ar_oom(&sb, "none.json", &[1, 4, 8], true);
    let b = bundle.to_str().expect("utf8");
    let out = sb.cmd(&["report", b]);
    assert_exit!(out, 0);
    let report = stdout(&out);
    let warning = "no S_parity at N = 48 against dllm-bench/synthetic-llama-tiny: none of its autoregressive cells \
                   there finished (no quality baseline, no latency)";
    assert!(report.contains(&format!("**Warning: {warning}.**")), "{report}");
    assert!(speedup_tables(&report, "N = 48: ").is_empty() && !speedup_tables(&report, "N = 96: ").is_empty());
    let figs = sb.cmd(&["figures", b, "-o", "figs", "--format", "svg"]);
    assert_exit!(figs, 0);
    let tex = std::fs::read_to_string(sb.path().join("figs/s_parity.tex")).expect("s_parity.tex");
    assert!(tex.contains("\\noindent\\emph{Warning: no S\\_parity at N = 48 against"), "{tex}");
}
