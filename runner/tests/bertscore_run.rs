//! BERTScore through `dllm-bench run`: a `[quality.bertscore]` table (a synthetic RoBERTa written into the cache as
//! a checkpoint of its own) scores every group's continuations; the bundle lists the encoder and validates; S_parity
//! reads on `bertscore_f1`; a resume scores only what is missing; bad tables are refused before anything runs.

use std::path::{Path, PathBuf};

use schema::Bundle;

use crate::assert_exit;
use crate::util::{Sandbox, stderr, stdout};

const ENCODER: &str = "test/tiny-roberta";

/// The demo config, lighter (fewer cells), with `extra` appended after its `[quality]` table.
fn config(sb: &Sandbox, name: &str, quality_head: &str, extra: &str) -> PathBuf {
    let demo =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../config/demo.toml")).expect("demo");
    let cfg = demo
        .replace("batch_sizes = [1, 4, 8]", "batch_sizes = [1, 4]")
        .replace("steps = [4, 8, 16, 32]", "steps = [4, 16]")
        .replace("thresholds = [0.9, 0.03, 0.02]", "thresholds = [0.9]")
        .replace("repetitions = 3", "repetitions = 1")
        .replacen("[quality]\n", &format!("[quality]\n{quality_head}"), 1);
    sb.write(name, &format!("{cfg}\n{extra}"))
}

fn synthetic_encoder(layer: u32) -> String {
    format!("[quality.bertscore]\nid = \"{ENCODER}\"\nlayer = {layer}\n\n[quality.bertscore.synthetic]\nseed = 4\n")
}

fn read(path: &Path) -> Bundle {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    schema::read_bundle(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn a_run_scores_bertscore_with_its_encoder_and_reads_parity_on_it() {
    let sb = Sandbox::new();
    let cfg = config(&sb, "bs.toml", "", &synthetic_encoder(2));
    let run_dir = sb.path().join("bs-run");
    let out = sb.cmd(&["run", "--config", cfg.to_str().expect("utf8"), "--run-dir", run_dir.to_str().expect("utf8")]);
    assert_exit!(out, 0);
    assert!(stderr(&out).contains("BERTScore F1 of"), "progress names each cell's score: {}", stderr(&out));
    let bundle_path = run_dir.join("bundle.json");
    let b = read(&bundle_path);
    assert_eq!(b.schema_version, schema::SchemaVersion::CURRENT);
    // The encoder as loaded, synthetic, at the layer asked for.
    assert_eq!(b.encoders.len(), 1, "{:?}", b.encoders);
    let e = &b.encoders[0];
    assert!(e.id == ENCODER && e.synthetic && e.layer == 2 && e.layers == 2 && e.architecture == "roberta", "{e:?}");
    assert!(e.commit.len() == 40 && e.parameters > 0 && e.tokenizer_sha256.is_some(), "{e:?}");
    assert!(b.provenance.synthetic_weights);
    assert_eq!(b.provenance.config.quality.as_ref().and_then(|q| q.bertscore.as_ref()).and_then(|s| s.layer), Some(2));
    // Every group's quality cell has the three values, per prompt, within [-1, 1], F1 between P and R's harmonic
    // bounds; the other cells none.
    let quality_cells: Vec<_> = b.cells.iter().filter(|c| !c.generations.is_empty()).collect();
    assert!(!quality_cells.is_empty());
    for c in &quality_cells {
        let get = |m: &str| {
            c.quality
                .iter()
                .find(|q| q.metric == m && q.evaluator.as_deref() == Some(ENCODER))
                .unwrap_or_else(|| panic!("{}: no {m} ({:?})", c.key, c.quality_errors))
        };
        let (p, r, f) = (get("bertscore_precision"), get("bertscore_recall"), get("bertscore_f1"));
        let with_reference =
            c.generations.iter().filter(|g| g.reference.as_deref().is_some_and(|t| !t.trim().is_empty()));
        assert_eq!(f.per_prompt.len(), with_reference.count(), "{}: one value per prompt with a reference", c.key);
        assert!(f.direction == schema::bundle::Direction::HigherIsBetter);
        for ((p, r), f) in p.per_prompt.iter().zip(&r.per_prompt).zip(&f.per_prompt) {
            assert!(p.prompt == r.prompt && r.prompt == f.prompt);
            for v in [p.value, r.value, f.value] {
                assert!((-1.0..=1.0 + 1e-9).contains(&v), "{}: {v}", c.key);
            }
            if p.value + r.value > 0.0 {
                let h = 2.0 * p.value * r.value / (p.value + r.value);
                assert!(
                    (f.value - h).abs() < 1e-9,
                    "{}: F1 {} is the harmonic mean of {} and {}",
                    c.key,
                    f.value,
                    p.value,
                    r.value
                );
            }
        }
        let mean = f.per_prompt.iter().map(|v| v.value).sum::<f64>() / f.per_prompt.len() as f64;
        assert!((f.value - mean).abs() < 1e-9, "pooled by the mean");
    }
    // The bundle validates, and S_parity reads on bertscore_f1 (the report names the encoder).
    let v = sb.cmd(&["validate", bundle_path.to_str().expect("utf8")]);
    assert_exit!(v, 0);
    let r = sb.cmd(&["report", bundle_path.to_str().expect("utf8"), "--metric", "bertscore_f1"]);
    assert_exit!(r, 0);
    assert!(stdout(&r).contains("bertscore_f1") && stdout(&r).contains(ENCODER), "{}", stdout(&r));

    // The same grid with parity_metric = "bertscore_f1": its stored parity records are on it, under the encoder.
    let cfg = config(&sb, "bs-parity.toml", "parity_metric = \"bertscore_f1\"\n", &synthetic_encoder(1))
        .to_str()
        .expect("utf8")
        .to_string();
    let text = std::fs::read_to_string(&cfg).expect("config");
    std::fs::write(&cfg, text.replacen("parity_metric = \"perplexity\"\n", "", 1)).expect("config");
    let run_dir = sb.path().join("bs-parity");
    let out = sb.cmd(&["run", "--config", &cfg, "--run-dir", run_dir.to_str().expect("utf8"), "-q"]);
    assert_exit!(out, 0);
    let b = read(&run_dir.join("bundle.json"));
    assert!(!b.parity.is_empty());
    assert!(
        b.parity.iter().all(|p| p.metric == "bertscore_f1" && p.evaluator.as_deref() == Some(ENCODER)),
        "{:?}",
        b.parity[0]
    );
    assert_eq!(b.encoders[0].layer, 1);
}

#[test]
fn a_resume_scores_only_the_bertscore_that_is_missing() {
    let sb = Sandbox::new();
    let cfg = config(&sb, "bs.toml", "", &synthetic_encoder(2));
    let run_dir = sb.path().join("run");
    let dir = run_dir.to_str().expect("utf8");
    let out = sb.cmd(&["run", "--config", cfg.to_str().expect("utf8"), "--run-dir", dir, "-q"]);
    assert_exit!(out, 0);
    let whole = read(&run_dir.join("bundle.json"));
    // Drop the BERTScore records of the journal (as a stop while the encoder scored leaves it) and resume.
    let journal = run_dir.join("journal.jsonl");
    let text = std::fs::read_to_string(&journal).expect("journal");
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| {
            let bertscore = l.starts_with("{\"quality\"") && l.contains("\"bertscore_");
            !(bertscore || l.starts_with("{\"encoder\""))
        })
        .collect();
    assert!(kept.len() < text.lines().count(), "the journal held BERTScore records");
    std::fs::write(&journal, kept.join("\n") + "\n").expect("journal");
    std::fs::remove_file(run_dir.join("bundle.json")).expect("bundle");
    let out = sb.cmd(&["run", "--resume", dir]);
    assert_exit!(out, 0);
    let err = stderr(&out);
    assert!(err.contains("BERTScore F1 of") && !err.contains("perplexity of"), "only BERTScore is scored again: {err}");
    let again = read(&run_dir.join("bundle.json"));
    let values = |b: &Bundle| -> Vec<(String, String, f64)> {
        b.cells
            .iter()
            .flat_map(|c| c.quality.iter().map(move |q| (c.key.to_string(), q.metric.clone(), q.value)))
            .filter(|(_, m, _)| m.starts_with("bertscore_"))
            .collect()
    };
    assert_eq!(values(&again), values(&whole), "the same scores (deterministic)");
    assert_eq!(again.encoders, whole.encoders);
}

#[test]
fn bad_bertscore_tables_are_refused_before_anything_runs() {
    let sb = Sandbox::new();
    let cases = [
        // A checkpoint whose layer bert_score does not know, without a layer.
        ("[quality.bertscore]\nid = \"org/some-encoder\"\n", "quality.bertscore.layer"),
        ("[quality.bertscore]\nid = \"FacebookAI/roberta-large\"\nlayer = 0\n", "layer 0 is the embeddings"),
        // A layer the synthetic encoder does not have.
        (&synthetic_encoder(3), "has 2 layers"),
        ("[quality.bertscore]\nid = \"dllm-bench/synthetic-llama-tiny\"\nlayer = 2\n", "is a measured model"),
        ("[quality.bertscore]\nid = \"x\"\nlayer = 2\nsynthetic = { seed = 1, hidden = 3 }\n", "hidden"),
    ];
    for (i, (extra, says)) in cases.iter().enumerate() {
        let cfg = config(&sb, &format!("bad{i}.toml"), "", extra);
        let out = sb.cmd(&["plan", "--config", cfg.to_str().expect("utf8")]);
        assert_exit!(out, 2);
        assert!(stderr(&out).contains(says), "{extra}: {}", stderr(&out));
    }
    // bertscore_f1 as the parity metric needs the table.
    let cfg = config(&sb, "nometric.toml", "", "").to_str().expect("utf8").to_string();
    let text = std::fs::read_to_string(&cfg).expect("config").replacen("\"perplexity\"", "\"bertscore_f1\"", 1);
    std::fs::write(&cfg, text).expect("config");
    let out = sb.cmd(&["plan", "--config", &cfg]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("[quality.bertscore]"), "{}", stderr(&out));
    // An encoder that is not in the cache: `plan --check` says so with the fix, and `run` stops before measuring.
    let cfg = config(&sb, "absent.toml", "", "[quality.bertscore]\nid = \"FacebookAI/roberta-large\"\n");
    let cfg = cfg.to_str().expect("utf8");
    let out = sb.cmd(&["plan", "--check", "--config", cfg]);
    assert_exit!(out, 2);
    assert!(stdout(&out).contains("FacebookAI/roberta-large (BERTScore encoder)"), "{}", stdout(&out));
    let run_dir = sb.path().join("absent-run");
    let out = sb.cmd(&["run", "--config", cfg, "--run-dir", run_dir.to_str().expect("utf8")]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("BERTScore encoder FacebookAI/roberta-large"), "{}", stderr(&out));
    assert!(!run_dir.join("journal.jsonl").exists(), "nothing measured");
    // --bertscore without a [quality] table.
    let bare = config(&sb, "bare.toml", "", "");
    let text = std::fs::read_to_string(&bare).expect("config");
    let text = text.split("\n[quality]").next().expect("head").to_string();
    std::fs::write(&bare, text).expect("config");
    let out = sb.cmd(&["plan", "--config", bare.to_str().expect("utf8"), "--bertscore"]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("--bertscore") && stderr(&out).contains("[quality]"), "{}", stderr(&out));
    // With one, --bertscore names roberta-large at the bert_score package's layer 17.
    let out = sb.cmd(&["plan", "--config", config(&sb, "ok.toml", "", "").to_str().expect("utf8"), "--bertscore"]);
    assert_exit!(out, 0);
    let text = stdout(&out);
    assert!(text.contains("--bertscore FacebookAI/roberta-large"), "the override is in the source: {text}");
    assert!(text.contains("encoder FacebookAI/roberta-large (revision main), layer 17"), "{text}");
}
