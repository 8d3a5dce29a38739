//! Nothing silent: a quality value that cannot be computed is recorded and fails the run, a model that cannot
//! be loaded leaves a readable partial bundle, diffusion continuations count their masked positions, the
//! evaluators' precision is stated.

use std::path::PathBuf;

use schema::{CellStatus, Sampler};

use crate::assert_exit;
use crate::util::{Sandbox, poison, rewrite, stderr, stdout};

fn demo() -> String {
    std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../config/demo.toml")).expect("demo")
}

// The reference sampler only: the counts below are its groups.
const QUICK: &[&str] = &[
    "--seq-len",
    "40",
    "--batch-size",
    "1,2",
    "--steps",
    "4,8",
    "--samplers",
    "reference",
    "--repetitions",
    "1",
    "-q",
];

#[test]
fn a_perplexity_that_cannot_be_scored_is_recorded_and_fails_the_run() {
    let sb = Sandbox::new();
    // The primary evaluator's weights are NaN: its log-likelihoods are not finite.
    let synth = sb.cmd(&["synth", "--kind", "llama", "--repo-id", "test/nan-evaluator", "--seed", "9"]);
    assert_exit!(synth, 0);
    poison(&PathBuf::from(stdout(&synth).trim()).join("model.safetensors"), "model.norm.weight");
    let cfg = demo().replacen(
        "id = \"dllm-bench/synthetic-evaluator-tiny\"\n\n[quality.evaluators.synthetic]\npreset = \"tiny\"\nseed = 3\n",
        "id = \"test/nan-evaluator\"\n",
        1,
    );
    assert!(cfg.contains("test/nan-evaluator"), "config edit applied");
    let path = sb.write("nan.toml", &cfg);
    let mut args = vec!["run", "-c", path.to_str().expect("utf8"), "-o", "out"];
    args.extend_from_slice(QUICK);
    let out = sb.cmd(&args);
    assert_exit!(out, 1);
    assert!(stderr(&out).contains("quality values could not be computed"), "{}", stderr(&out));
    let bundle_path = sb.path().join(stdout(&out).trim());
    let report = sb.cmd(&["report", bundle_path.to_str().expect("utf8")]);
    assert_exit!(report, 0);
    assert!(stdout(&report).contains("quality values could not be computed"), "{}", stdout(&report));
    let text = std::fs::read_to_string(&bundle_path).expect("bundle");
    let b = schema::read_bundle(&text).expect("valid bundle");
    let scored: Vec<_> = b.cells.iter().filter(|c| !c.generations.is_empty()).collect();
    assert_eq!(scored.len(), 3, "one quality cell per group (AR, K = 4, K = 8)");
    for c in &scored {
        assert_eq!(c.status, CellStatus::Ok, "timing stands: {}", c.key);
        let e = c.quality_errors.iter().find(|e| e.evaluator.as_deref() == Some("test/nan-evaluator"));
        let e = e.unwrap_or_else(|| panic!("{}: no recorded failure in {:?}", c.key, c.quality_errors));
        assert!(e.metric == "perplexity" && e.message.contains("not finite"), "{e:?}");
        // The second evaluator (the measured llama) still scored it.
        assert!(c.quality.iter().any(|q| q.evaluator.as_deref() == Some("dllm-bench/synthetic-llama-tiny")));
        // Diffusion continuations say how many positions stayed masked; AR ones do not have any.
        for g in &c.generations {
            assert_eq!(g.masked_tokens.is_some(), c.key.sampler != Sampler::ArGreedy, "{}", c.key);
        }
    }
    // The evaluators' precision is stated in the embedded config.
    assert_eq!(b.provenance.config.quality.as_ref().and_then(|q| q.dtype), Some(schema::grid::Precision::F32));
}

#[test]
fn positions_left_masked_are_not_output_tokens() {
    let sb = Sandbox::new();
    // A LLaDA whose final hidden state keeps one dimension, x, and whose LM head gives the mask id the logit x and
    // every other token 0: wherever x > 0 the prediction is the mask id itself, and the position stays masked.
    let synth = sb.cmd(&["synth", "--kind", "llada", "--repo-id", "test/mask-llada", "--seed", "3"]);
    assert_exit!(synth, 0);
    let snapshot = PathBuf::from(stdout(&synth).trim());
    let tokenizer: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(snapshot.join("tokenizer.json")).expect("tokenizer"))
            .expect("json");
    let mask =
        tokenizer["added_tokens"].as_array().expect("added tokens").iter().find(|t| t["content"] == "<|mdm_mask|>");
    let mask = mask.and_then(|t| t["id"].as_u64()).expect("the mask token") as usize;
    // The weights file is a link into the blobs: write a copy in its place.
    let weights = snapshot.join("model.safetensors");
    let bytes = std::fs::read(&weights).expect("weights");
    std::fs::remove_file(&weights).expect("unlink the blob link");
    std::fs::write(&weights, &bytes).expect("copy");
    rewrite(&weights, "model.transformer.ln_f.weight", |_, c| if c == 0 { 1.0 } else { 0.0 });
    rewrite(&weights, "model.transformer.ff_out.weight", |r, c| if r == mask && c == 0 { 1.0 } else { 0.0 });
    let cfg = demo().replacen(
        "id = \"dllm-bench/synthetic-llada-tiny\"\n\n[models.synthetic]\npreset = \"tiny\"\nseed = 2\n",
        "id = \"test/mask-llada\"\n",
        1,
    );
    let cfg = cfg.split("\n[quality]").next().expect("config").to_string();
    let path = sb.write("mask.toml", &cfg);
    let mut args = vec!["run", "-c", path.to_str().expect("utf8"), "-o", "out"];
    args.extend_from_slice(QUICK);
    let out = sb.cmd(&args);
    assert_exit!(out, 0);
    let b = schema::read_bundle(&std::fs::read_to_string(sb.path().join(stdout(&out).trim())).expect("bundle"))
        .expect("valid bundle");
    let mut left_masked = 0;
    for c in b.cells.iter().filter(|c| c.key.sampler != Sampler::ArGreedy) {
        let positions = u64::from(c.key.batch_size) * u64::from(c.key.output_tokens);
        for r in &c.repetitions {
            // The tokens the steps committed are the output tokens; throughput counts those.
            let committed: u64 = r.committed_per_step.as_ref().expect("committed").iter().map(|&n| u64::from(n)).sum();
            assert_eq!(r.output_tokens, committed, "{}", c.key);
            assert!(r.output_tokens <= positions, "{}", c.key);
            left_masked += positions - r.output_tokens;
            let t = metrics::derive::tokens_per_s(r).expect("throughput");
            assert!((t - committed as f64 / (r.e2e_ms / 1000.0)).abs() <= 1e-9 * t, "{}", c.key);
        }
    }
    assert!(left_masked > 0, "the planted model leaves positions masked");
}

#[test]
fn a_model_that_cannot_be_loaded_is_refused_before_any_cell_and_the_same_command_runs_once_fixed() {
    let sb = Sandbox::new();
    // A LLaDA checkpoint whose weights file is cut short: found in the cache, refused when loaded.
    let synth = sb.cmd(&["synth", "--kind", "llada", "--repo-id", "test/cut-llada", "--seed", "2"]);
    assert_exit!(synth, 0);
    let weights = PathBuf::from(stdout(&synth).trim()).join("model.safetensors");
    let bytes = std::fs::read(&weights).expect("weights");
    std::fs::remove_file(&weights).expect("unlink the blob link");
    std::fs::write(&weights, &bytes[..bytes.len() / 2]).expect("truncated copy");
    let cfg = demo().replacen(
        "id = \"dllm-bench/synthetic-llada-tiny\"\n\n[models.synthetic]\npreset = \"tiny\"\nseed = 2\n",
        "id = \"test/cut-llada\"\n",
        1,
    );
    let cfg = cfg.split("\n[quality]").next().expect("config").to_string();
    let path = sb.write("cut.toml", &cfg);
    let dir = sb.path().join("job.run");
    let mut args = vec!["run", "-c", path.to_str().expect("utf8"), "--run-dir", dir.to_str().expect("utf8")];
    args.extend_from_slice(QUICK);
    let out = sb.cmd(&args);
    assert_exit!(out, 2);
    let err = stderr(&out);
    assert!(err.contains("test/cut-llada") && err.contains("truncated") && err.contains("fix"), "{err}");
    // Checked before the llama's cells: nothing was measured or journaled.
    assert!(!dir.join("partial.json").exists() && !dir.join("journal.jsonl").exists());
    // The cache mended, the same command runs the whole grid.
    std::fs::write(&weights, &bytes).expect("the whole file again");
    let out = sb.cmd(&args);
    assert_exit!(out, 0);
    let b = schema::read_bundle(&std::fs::read_to_string(dir.join("bundle.json")).expect("bundle")).expect("valid");
    assert!(
        b.cells.iter().any(|c| c.key.sampler != Sampler::ArGreedy)
            && b.cells.iter().all(|c| c.status == CellStatus::Ok)
    );
}

#[test]
fn memory_peaks_that_could_not_be_reset_are_dropped_one_by_one() {
    use runner::device::{MemoryPeaks, PeakWindow};
    let p = MemoryPeaks { allocated: Some(1), reserved: Some(2), device_used: Some(3), rss: Some(4) };
    let no_rss = p.within(PeakWindow { pool: true, rss: false });
    assert_eq!(no_rss, MemoryPeaks { rss: None, ..p }, "a read-only clear_refs drops only the RSS peak");
    let no_pool = p.within(PeakWindow { pool: false, rss: true });
    assert_eq!(no_pool, MemoryPeaks { allocated: None, reserved: None, ..p });
}
