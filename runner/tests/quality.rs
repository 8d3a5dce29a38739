//! Quality metrics: text statistics against hand-computed values, perplexity of a model with uniform logits.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use runner::model::{LoadedModel, ModelFiles};
use runner::quality::{continuation_nll, text, text_quality};
use runner::synth::{SynthSpec, write_synthetic};
use schema::bundle::Generation;
use schema::grid::{ModelKind, SynthPreset};

fn w(s: &str) -> Vec<String> {
    text::words(s)
}

#[test]
fn words_are_lowercased_alphanumeric_runs() {
    assert_eq!(w("The cat, the CAT; a dog!"), ["the", "cat", "the", "cat", "a", "dog"]);
    assert_eq!(w("  ...  "), Vec::<String>::new());
    assert_eq!(w("1874 granite-quarried"), ["1874", "granite", "quarried"]);
}

#[test]
fn entropy_and_distinct_n_match_hand_computed_values() {
    let x = w("The cat, the CAT; a dog!");
    // p = 1/3, 1/3, 1/6, 1/6: H = 2/3 log2 3 + 1/3 log2 6
    let h = 2.0 / 3.0 * 3f64.log2() + 1.0 / 3.0 * 6f64.log2();
    assert!((text::unigram_entropy(&x) - h).abs() < 1e-12);
    assert_eq!(text::unigram_entropy(&w("same same same same")), 0.0);
    // No words (empty once decoded, or only punctuation): as degenerate as text gets, 0, not left out.
    assert_eq!(text::unigram_entropy(&[]), 0.0);
    assert_eq!(text::unigram_entropy(&w("________ ...")), 0.0);
    assert_eq!(text::distinct_n(&x, 1), 4.0 / 6.0);
    // Bigrams: the cat, cat the, the cat, cat a, a dog -> 4 distinct of 5.
    assert_eq!(text::distinct_n(&x, 2), 0.8);
    assert_eq!(text::distinct_n(&w("one"), 2), 0.0, "no bigram");
    assert_eq!(text::distinct_n(&[], 1), 0.0);
}

#[test]
fn overlap_metrics_match_hand_computed_values() {
    // Overlap {the, cat}: P = 2/3, R = 2/5, F1 = 0.5.
    let f1 = text::token_f1(&w("the cat sat"), &w("the cat ate the fish"));
    assert!((f1 - 0.5).abs() < 1e-12);
    // LCS of a b c d / a c e d is a c d: P = R = 3/4.
    let rl = text::rouge_l_f1(&w("a b c d"), &w("a c e d"));
    assert!((rl - 0.75).abs() < 1e-12);
    assert_eq!(text::rouge_l_f1(&w("x y"), &w("z")), 0.0);
    // An empty prediction scores 0 (rouge_score; SQuAD: 1 only when both are empty).
    assert_eq!(text::token_f1(&w(""), &w("z")), 0.0);
    assert_eq!(text::token_f1(&w("z"), &w("")), 0.0);
    assert_eq!(text::token_f1(&w(""), &w("")), 1.0);
    assert_eq!(text::rouge_l_f1(&w("____"), &w("z")), 0.0);
    assert_eq!(text::rouge_l_f1(&w("a"), &w("a")), 1.0);
}

#[test]
fn text_quality_keeps_per_prompt_values_and_their_mean() {
    let g = |prompt, text: &str, reference: Option<&str>| Generation {
        prompt,
        prompt_bytes: 1,
        text: text.into(),
        reference: reference.map(str::to_string),
        masked_tokens: None,
    };
    let q = text_quality(&[g(0, "a b c d", Some("a c e d")), g(3, "a a", None)]);
    let get = |m: &str| q.iter().find(|q| q.metric == m).unwrap_or_else(|| panic!("{m}"));
    let rouge = get("rouge_l_f1");
    assert_eq!(rouge.per_prompt.len(), 1, "no reference, no overlap value");
    assert_eq!(rouge.per_prompt[0].prompt, 0);
    let ent = get("unigram_entropy");
    assert_eq!(ent.per_prompt.iter().map(|p| p.prompt).collect::<Vec<_>>(), [0, 3]);
    assert!((ent.value - (2.0 + 0.0) / 2.0).abs() < 1e-12, "mean of 2 bits and 0 bits");
    assert!(q.iter().all(|q| q.evaluator.is_none()));
    // A continuation with no word counts in every mean, at 0: the cell's values stay over all its prompts.
    let q = text_quality(&[g(0, "a b c d", Some("a c e d")), g(1, "", Some("a c")), g(2, "____", Some("x"))]);
    for metric in ["unigram_entropy", "distinct_1", "distinct_2", "token_f1", "rouge_l_f1"] {
        let v = q.iter().find(|q| q.metric == metric).unwrap_or_else(|| panic!("{metric}"));
        assert_eq!(v.per_prompt.iter().map(|p| p.prompt).collect::<Vec<_>>(), [0, 1, 2], "{metric}");
        assert_eq!(v.per_prompt[1].value, 0.0, "{metric}");
        assert!((v.value - v.per_prompt[0].value / 3.0).abs() < 1e-12, "{metric}: the mean of three");
    }
}

/// A tiny synthetic Llama whose output head is all zeros: every logit is 0, the next-token distribution uniform.
fn uniform_model(dir: &std::path::Path) -> LoadedModel {
    let id = "test/uniform-llama";
    let snapshot = write_synthetic(dir, id, ModelKind::Llama, &SynthSpec::new(SynthPreset::Tiny, 5)).expect("write");
    let file = snapshot.join("model.safetensors");
    let mut tensors: HashMap<String, Tensor> = candle_core::safetensors::load(&file, &Device::Cpu).expect("load");
    let head = tensors.get("lm_head.weight").expect("lm_head");
    let zeros = Tensor::zeros(head.shape(), head.dtype(), &Device::Cpu).expect("zeros");
    tensors.insert("lm_head.weight".into(), zeros);
    std::fs::remove_file(&file).expect("unlink the snapshot's link to the blob");
    candle_core::safetensors::save(&tensors, &file).expect("save");
    let files = ModelFiles::from_hf_cache(dir, id, "main").expect("files");
    LoadedModel::load(&files, ModelKind::Llama, &Device::Cpu, DType::F32).expect("model")
}

#[test]
fn uniform_logits_give_a_perplexity_equal_to_the_vocabulary() {
    let dir = tempfile::tempdir().expect("tmp");
    let m = uniform_model(dir.path());
    let v = m.config.vocab_size as f64;
    let (nll, n) = continuation_nll(&m, "The lighthouse on the northern tip", " was built in 1874 from granite.")
        .expect("score")
        .expect("tokens");
    assert!(n > 5, "{n} tokens");
    let ppl = (nll / n as f64).exp();
    assert!((ppl - v).abs() / v < 1e-5, "perplexity {ppl}, vocabulary {v}");
    // No continuation tokens: no value (absent, never 0).
    assert_eq!(continuation_nll(&m, "The lighthouse", "").expect("score"), None);
}

#[test]
fn parity_search_closes_the_gap_below_s_parity_and_report_gives_the_verdict() {
    use crate::assert_exit;
    use crate::util::{Sandbox, stdout};
    let sb = Sandbox::new();
    let results = sb.results();
    let args = [
        "run",
        "--output-dir",
        results.to_str().expect("utf8"),
        // At this shape the seeded demo models reach parity between the grid's two K (10 when written).
        "--seq-len",
        "96",
        "--batch-size",
        "1,2",
        "--steps",
        "8,32",
        "--samplers",
        "reference",
        "--repetitions",
        "1",
        "--warmup",
        "0",
        "--parity-search",
    ];
    let out = sb.cmd(&args);
    assert_exit!(out, 0);
    let path = stdout(&out).trim().to_string();
    let b = schema::read_bundle(&std::fs::read_to_string(&path).expect("bundle")).expect("valid");
    assert_eq!(b.parity.len(), 1);
    let r = &b.parity[0];
    let ks: Vec<u32> = r.curve.iter().map(|c| c.steps).collect();
    // Every K the search added was measured at both batch sizes, and quality in the B = 2 cell.
    assert!(ks.len() > 2, "the search added K between 8 and 32: {ks:?}");
    for k in ks.iter().filter(|k| ![8, 32].contains(*k)) {
        let cells: Vec<_> = b.cells.iter().filter(|c| c.key.steps == Some(*k)).collect();
        assert_eq!(cells.iter().map(|c| c.key.batch_size).collect::<Vec<_>>(), [1, 2], "K = {k}");
        assert!(cells.iter().all(|c| c.status == schema::CellStatus::Ok));
        assert!(!cells[1].generations.is_empty() && cells[0].generations.is_empty());
    }
    let metrics::derive::Parity::Reached { steps } = r.outcome else {
        panic!("parity must be reached at this shape: {:?}, curve {ks:?}", r.outcome)
    };
    // One block: every K is valid, so the search stops only when the K just below S_parity missed.
    let below = ks.iter().copied().filter(|&k| k < steps).max().expect("a K below S_parity was measured");
    assert_eq!(steps - below, 1, "gap closed: curve {ks:?}, S_parity {steps}");
    assert_eq!(b.cells.len(), 6 + 2 * (ks.len() - 2), "the added cells are in the bundle like any other");

    let rep = sb.cmd(&["report", &path]);
    assert_exit!(rep, 0);
    let text = stdout(&rep);
    for want in ["SYNTHETIC", "## N = 96", "Q_llama", "S_parity", "| B |", "verdict", "llada_low_confidence"] {
        assert!(text.contains(want), "{want} missing from the report:\n{text}");
    }
    // A verdict per batch size ("viable: faster ..." or "not viable: ...").
    assert_eq!(text.matches("viable: ").count(), 2, "a verdict per batch size:\n{text}");
    // Another metric of the bundle, chosen on the command line.
    let rouge = sb.cmd(&["report", &path, "--metric", "rouge_l_f1"]);
    assert_exit!(rouge, 0);
    assert!(stdout(&rouge).contains("Quality: rouge_l_f1 (higher is better)"), "{}", stdout(&rouge));
}

#[test]
fn a_long_documents_reference_is_its_first_output_tokens() {
    // The true continuation is cut from a prefix of the rest of the document (documents run to tens of
    // kilobytes); it must equal the cut of the whole rest, tokenized here independently.
    use crate::assert_exit;
    use crate::util::{Sandbox, stdout};
    let sb = Sandbox::new();
    let demo = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../config/demo.toml")).expect("demo");
    let base: Vec<String> = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/assets/demo_prompts.txt"))
        .expect("prompts")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    // Three documents of about 20 KB each, each a different rotation of the demo prompts.
    let docs: Vec<String> =
        (0..3).map(|i| (0..40).map(|j| base[(i + j) % base.len()].as_str()).collect::<Vec<_>>().join(" ")).collect();
    let jsonl: String = docs.iter().map(|d| serde_json::json!({ "prompt": d }).to_string() + "\n").collect();
    let prompts = sb.write("long.jsonl", &jsonl);
    let config = demo.replace(
        "source = \"embedded\"\ncount = 8",
        &format!("source = \"file\"\npath = {:?}\ncount = 3", prompts.to_str().expect("utf8")),
    );
    assert_ne!(config, demo, "the demo config's [prompts] table changed: update this test");
    let cfg = sb.write("long.toml", &config);
    let out = sb.cmd(&[
        "run",
        "--config",
        cfg.to_str().expect("utf8"),
        "--output-dir",
        sb.results().to_str().expect("utf8"),
        "--seq-len",
        "48",
        "--batch-size",
        "1",
        "--steps",
        "8",
        "--repetitions",
        "1",
        "--warmup",
        "0",
    ]);
    assert_exit!(out, 0);
    let b = schema::read_bundle(&std::fs::read_to_string(stdout(&out).trim()).expect("bundle")).expect("valid");
    let mut checked = 0;
    for c in &b.cells {
        let repo = sb.cache().join(format!("models--{}", c.key.model.replace('/', "--")));
        let tokenizer = std::fs::read_dir(repo.join("snapshots"))
            .expect("snapshots")
            .map(|e| e.expect("entry").path().join("tokenizer.json"))
            .next()
            .expect("a snapshot");
        let tok = tokenizers::Tokenizer::from_file(&tokenizer).expect("tokenizer");
        for g in &c.generations {
            let rest = &docs[g.prompt as usize][g.prompt_bytes as usize..];
            let enc = tok.encode(rest, false).expect("encode");
            let n = enc.get_offsets().len().min(c.key.output_tokens as usize);
            let want = rest[..enc.get_offsets()[n - 1].1].trim();
            assert_eq!(g.reference.as_deref(), Some(want), "{} prompt {}", c.key, g.prompt);
            checked += 1;
        }
    }
    assert!(checked >= 6, "references of both models' cells checked ({checked})");
}

/// The demo at N = 96, K 8 and 32, the batch sizes `batches`, one repetition, with an out-of-memory injected into
/// the cells whose key contains `target`: the output, the bundle's path and the bundle.
fn run_with_oom(
    sb: &crate::util::Sandbox,
    batches: &str,
    target: &str,
) -> (std::process::Output, String, schema::Bundle) {
    use crate::util::stdout;
    let results = sb.results();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dllm-bench"))
        .args(["run", "-o", results.to_str().expect("utf8"), "-q", "--seq-len", "96", "--batch-size", batches])
        .args(["--steps", "8,32", "--samplers", "reference", "--repetitions", "1", "--warmup", "0"])
        .current_dir(sb.path())
        .env("HF_HUB_CACHE", sb.cache())
        .env_remove("HF_HOME")
        .env(runner::device::INJECT_OOM_ENV, target)
        .output()
        .expect("run");
    let path = stdout(&out).trim().to_string();
    let b = schema::read_bundle(&std::fs::read_to_string(&path).expect("bundle")).unwrap_or_else(|e| panic!("{e}"));
    (out, path, b)
}

#[test]
fn a_group_whose_largest_b_runs_out_of_memory_keeps_its_quality_from_a_smaller_b() {
    use crate::assert_exit;
    use crate::util::{Sandbox, stderr, stdout};
    let sb = Sandbox::new();
    let target = "dllm-bench/synthetic-llada-tiny N=96 B=2 K=8";
    let (out, path, b) = run_with_oom(&sb, "1,2", target);
    assert_exit!(out, 1);
    let oom = b.cells.iter().find(|c| c.key.to_string().contains(target)).expect("the target cell");
    assert!(matches!(oom.status, schema::CellStatus::Oom { .. }), "{:?}", oom.status);
    assert!(oom.repetitions.is_empty(), "its timing failed");
    // Its group's continuations were generated in batches of 1 (the B that ran) and scored.
    assert_eq!(oom.generations.len() as u32, b.prompt_set.count, "{}", stderr(&out));
    assert!(oom.quality.iter().any(|q| q.metric == "perplexity"), "{:?}", oom.quality);
    assert!(oom.quality_errors.is_empty(), "{:?}", oom.quality_errors);
    let b1 = b.cells.iter().find(|c| c.key.to_string().contains("llada-tiny N=96 B=1 K=8")).expect("B = 1");
    assert!(b1.generations.is_empty() && b1.status == schema::CellStatus::Ok);
    // S_parity's curve still has K = 8, and the speedup at B = 1 is there.
    let r = b.parity.first().expect("a parity record");
    assert!(r.curve.iter().any(|c| c.steps == 8), "{:?}", r.curve);
    // The report says which cell has no timing, and why.
    let rep = sb.cmd(&["report", &path]);
    assert_exit!(rep, 0);
    let text = stdout(&rep);
    assert!(text.contains("1 of 6 cells have no timing"), "{text}");
    assert!(text.contains(&format!("{target} block=32: out of memory")), "{text}");

    // B listed largest first: when the B = 2 cell fails, no smaller cell of its group has run yet (as in a shard
    // without them): the continuations are generated in batches of the grid's smaller B all the same.
    let sb = Sandbox::new();
    let (out, _, b) = run_with_oom(&sb, "2,1", target);
    assert_exit!(out, 1);
    let oom = b.cells.iter().find(|c| c.key.to_string().contains(target)).expect("the target cell");
    assert_eq!(oom.generations.len() as u32, b.prompt_set.count, "{}", stderr(&out));
    assert!(oom.quality_errors.is_empty(), "{:?}", oom.quality_errors);

    // No smaller B in the grid: the missing quality is said, not silent.
    let sb = Sandbox::new();
    let (out, _, b) = run_with_oom(&sb, "2", target);
    assert_exit!(out, 1);
    let oom = b.cells.iter().find(|c| c.key.to_string().contains(target)).expect("the target cell");
    assert!(oom.generations.is_empty());
    let e = oom.quality_errors.iter().find(|e| e.metric == "generations").expect("a generations error");
    assert!(e.message.contains("no smaller B"), "{}", e.message);
}

/// `value` without what depends on the clock or the machine's load: times, memory peaks, when and where it ran,
/// and the speedups (ratios of times).
fn without_timing(value: &mut serde_json::Value) {
    const TIMING: [&str; 12] = [
        "created_at",
        "started_at",
        "executions",
        "e2e_ms",
        "prefill_ms",
        "first_block_ms",
        "step_ms",
        "peak_allocated_bytes",
        "peak_reserved_bytes",
        "peak_rss_bytes",
        "device_used_bytes",
        "speedups",
    ];
    match value {
        serde_json::Value::Object(o) => {
            o.retain(|k, _| !TIMING.contains(&k.as_str()));
            o.values_mut().for_each(without_timing);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(without_timing),
        _ => {}
    }
}

/// The paths where two JSON values differ (at most `limit`).
fn differences(a: &serde_json::Value, b: &serde_json::Value, path: &str, out: &mut Vec<String>, limit: usize) {
    use serde_json::Value;
    if out.len() >= limit || a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) if x.len() == y.len() && x.keys().eq(y.keys()) => {
            for (k, v) in x {
                differences(v, &y[k], &format!("{path}.{k}"), out, limit);
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (v, w)) in x.iter().zip(y).enumerate() {
                differences(v, w, &format!("{path}[{i}]"), out, limit);
            }
        }
        _ => out.push(format!("{path}: {a} vs {b}")),
    }
}

#[test]
fn two_runs_of_one_config_record_the_same_numbers_to_the_last_bit() {
    // Two processes (each with its own hash seeds) on the demo's models, quality and both sampler series: every
    // number that does not come from a clock is bit-identical (compared with ==, not a tolerance).
    use crate::assert_exit;
    use crate::util::{Sandbox, stdout};
    let sb = Sandbox::new();
    let args = [
        "run",
        "-q",
        "--seq-len",
        "48",
        "--batch-size",
        "1,2",
        "--steps",
        "4,8",
        "--thresholds",
        "0.9,0.02",
        "--repetitions",
        "1",
        "--warmup",
        "0",
        "--output-dir",
    ];
    let mut bundles = Vec::new();
    for out in ["first", "second"] {
        let run = sb.cmd(&[&args[..], &[out]].concat());
        assert_exit!(run, 0);
        let text = std::fs::read_to_string(sb.path().join(stdout(&run).trim())).expect("bundle");
        let b = schema::read_bundle(&text).expect("valid bundle");
        let entropy = b.cells.iter().flat_map(|c| &c.quality).filter(|q| q.metric == "unigram_entropy").count();
        assert!(entropy > 0, "the run measured the text statistics");
        let mut v: serde_json::Value = serde_json::from_str(&text).expect("json");
        without_timing(&mut v);
        bundles.push(v);
    }
    let mut diffs = Vec::new();
    differences(&bundles[0], &bundles[1], "", &mut diffs, 10);
    assert!(diffs.is_empty(), "two runs of one config differ outside the timings:\n{}", diffs.join("\n"));
}
