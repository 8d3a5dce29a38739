//! The CLI as users meet it: the demo end to end, plan, validate, and bad input (exit 2, clear message).

use std::path::{Path, PathBuf};

use schema::{CellStatus, Sampler};

use crate::assert_exit;
use crate::util::{Sandbox, stderr, stdout};

fn repo_file(rel: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(rel).display().to_string()
}

/// A smaller demo grid so the debug-build test stays quick; the same code path as the embedded default.
const QUICK: &[&str] = &["--seq-len", "40", "--batch-size", "1,2", "--steps", "4,8", "--repetitions", "2"];

#[test]
fn demo_run_writes_a_valid_bundle_with_both_models() {
    let sb = Sandbox::new();
    let results = sb.results();
    let mut args = vec!["run", "--output-dir", results.to_str().expect("utf8")];
    args.extend_from_slice(QUICK);
    let out = sb.cmd(&args);
    assert_exit!(out, 0);
    let err = stderr(&out);
    assert!(err.contains("[1/6]") && err.contains("[6/6]"), "progress lines per cell: {err}");
    assert!(err.contains("SYNTHETIC"), "says the weights are synthetic: {err}");
    let path = PathBuf::from(stdout(&out).trim());
    assert!(path.starts_with(&results), "bundle path printed on stdout: {path:?}");
    let text = std::fs::read_to_string(&path).expect("bundle");
    let b = schema::read_bundle(&text).expect("valid bundle");
    assert!(b.provenance.synthetic_weights);
    assert_eq!(
        b.provenance.config_source,
        "embedded:config/demo.toml --steps 4,8 --batch-size 1,2 --seq-len 40 --repetitions 2"
    );
    // The two measured models, then the independent evaluator of the demo's [quality] table.
    let ids: Vec<&str> = b.models.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(
        ids,
        ["dllm-bench/synthetic-llama-tiny", "dllm-bench/synthetic-llada-tiny", "dllm-bench/synthetic-evaluator-tiny"]
    );
    // Per B: the AR model, the reference at 2 K, the demo's prefix+threshold series at 3 thresholds.
    assert_eq!(b.cells.len(), 2 * (1 + 2 + 3));
    for c in b.cells.iter().filter(|c| c.key.sampler != schema::Sampler::ArGreedy) {
        let n_out = u64::from(c.key.output_tokens);
        for r in &c.repetitions {
            // The forwards the bundle records are the steps the sampler ran, each with its committed tokens.
            let steps = r.step_ms.as_ref().expect("step times").len();
            let committed = r.committed_per_step.as_ref().expect("committed per step");
            assert_eq!((r.forward_passes, committed.len()), (Some(steps as u32), steps), "{}", c.key);
            assert_eq!(committed.iter().map(|&t| u64::from(t)).sum::<u64>(), r.output_tokens, "{}", c.key);
            if let Some(k) = c.key.steps {
                assert_eq!(steps, k as usize, "{}", c.key);
            }
            assert_eq!(r.kv_cache_bytes.is_some(), c.key.cache.is_some(), "{}", c.key);
        }
        let s = metrics::derive::cell_summary(c);
        let (tpf, fwd) = (s.tokens_per_forward.expect("tokens per forward"), s.forward_passes.expect("forwards"));
        if fwd.min == fwd.max {
            assert!((tpf * fwd.median - n_out as f64).abs() < 1e-9, "{}: {tpf} x {} != {n_out}", c.key, fwd.median);
        }
    }
    // One S_parity record per series.
    assert!(b.parity.iter().any(|r| r.thresholded && r.cache == Some(schema::grid::BlockCache::Prefix)));
    assert!(b.parity.iter().any(|r| !r.thresholded && r.cache.is_none()));
    assert!(b.provenance.attention.contains("in the run's precision"), "no f32 upcast unless asked");
    // Quality: the B = 2 cell of each group has one continuation per prompt, text statistics and the perplexity
    // of both evaluators; the B = 1 cells have none of their own.
    for cell in &b.cells {
        let prompts = b.prompt_set.count as usize;
        if cell.key.batch_size == 2 {
            assert_eq!(cell.generations.len(), prompts, "{}", cell.key);
            assert!(cell.generations.iter().all(|g| g.prompt_bytes > 0 && g.reference.is_some()), "{}", cell.key);
            let labels: Vec<String> = cell.quality.iter().map(|q| q.label()).collect();
            for want in [
                "unigram_entropy",
                "distinct_1",
                "distinct_2",
                "token_f1",
                "rouge_l_f1",
                "perplexity [dllm-bench/synthetic-evaluator-tiny]",
                "perplexity [dllm-bench/synthetic-llama-tiny]",
            ] {
                assert!(labels.iter().any(|l| l == want), "{}: {want} missing from {labels:?}", cell.key);
            }
            let ppl = cell.quality.iter().find(|q| q.metric == "perplexity").expect("perplexity");
            assert_eq!(ppl.per_prompt.len(), prompts, "one value per prompt");
            assert!(ppl.value > 1.0 && ppl.value.is_finite());
        } else {
            assert!(cell.generations.is_empty() && cell.quality.is_empty(), "{}", cell.key);
        }
    }
    assert_eq!(b.parity.len(), 2, "one S_parity entry per series (N = 40)");
    let p = b.parity.iter().find(|r| !r.thresholded).expect("the reference series");
    assert_eq!(p.evaluator.as_deref(), Some("dllm-bench/synthetic-evaluator-tiny"));
    assert_eq!(p.curve.len(), 2);
    assert_eq!(p.speedups.len(), 2, "one row per batch size");
    assert_eq!(p.bootstrap.map(|x| x.resamples), Some(1000));
    for cell in &b.cells {
        assert_eq!(cell.status, CellStatus::Ok, "{}", cell.key);
        assert_eq!(cell.repetitions.len(), 2);
        for r in &cell.repetitions {
            assert!(r.e2e_ms > 0.0);
            assert_eq!(r.output_tokens, u64::from(cell.key.batch_size * cell.key.output_tokens));
            assert_eq!(r.prompt_indices.len(), cell.key.batch_size as usize);
            match cell.key.sampler {
                Sampler::ArGreedy => {
                    let p = r.prefill_ms.expect("AR has a prefill time");
                    assert!(p > 0.0 && p < r.e2e_ms);
                    assert!(r.step_ms.is_none() && r.first_block_ms.is_none());
                }
                _ => {
                    let steps = r.step_ms.as_ref().expect("diffusion step times");
                    // K steps, or as many as the threshold needed (at most one per token).
                    let k = cell.key.steps.unwrap_or(steps.len() as u32);
                    assert!(steps.len() as u32 == k && k <= cell.key.output_tokens, "{}", cell.key);
                    assert_eq!(r.forward_passes, Some(k));
                    assert!(r.prefill_ms.is_none(), "no prefill for diffusion: absent, not 0");
                }
            }
            assert!(r.peak_allocated_bytes.is_none(), "no device memory on the CPU: absent, not 0");
        }
    }
    // No temp file left behind.
    let names: Vec<_> = std::fs::read_dir(&results).expect("results").flatten().map(|e| e.file_name()).collect();
    assert_eq!(names.len(), 1, "{names:?}");

    // The same synthetic checkpoints are reused (same commit) by a second run.
    let again = sb.cmd(&args);
    assert_exit!(again, 0);
    let b2 = schema::read_bundle(&std::fs::read_to_string(stdout(&again).trim()).expect("bundle")).expect("valid");
    assert_eq!(b.models[0].commit, b2.models[0].commit);

    // validate accepts it.
    let v = sb.cmd(&["validate", path.to_str().expect("utf8")]);
    assert_exit!(v, 0);
    assert!(stdout(&v).contains("ok, 12 cells (12 ok), 3 models"), "{}", stdout(&v));
}

#[test]
fn plan_prints_the_cells_of_the_primary_grid() {
    let sb = Sandbox::new();
    let out = sb.cmd(&["plan", "--config", &repo_file("config/experiments.toml")]);
    assert_exit!(out, 0);
    let text = stdout(&out);
    assert!(text.starts_with("# 16 cells from"), "{text}");
    assert_eq!(text.lines().filter(|l| l.starts_with("GSAI-ML/LLaDA-8B-Base")).count(), 12);
    assert_eq!(text.lines().filter(|l| l.starts_with("meta-llama/Meta-Llama-3-8B")).count(), 4);
    assert!(!text.contains("SYNTHETIC"), "real checkpoints: {text}");
    // The work: 16 cells x 8 generations; per generation 4 x 128 AR forwards and 4 x (32 + 64 + 128) LLaDA ones.
    let work = "# work: 128 batch generations (16 cells x (3 warm-up + 5 repetitions)), 11264 forward passes";
    assert!(text.lines().any(|l| l.starts_with(work)), "{text}");
    // The embedded demo's models are synthetic: said before its cells.
    let demo = stdout(&sb.cmd(&["plan"]));
    let said = "# SYNTHETIC weights (timing is real, quality is meaningless): dllm-bench/synthetic-llama-tiny, \
                dllm-bench/synthetic-llada-tiny";
    assert!(demo.lines().nth(2).is_some_and(|l| l.starts_with(said)), "{demo}");
    assert!(!demo.contains("more steps than output tokens"), "{demo}");
    // A K above the output tokens (32 at N = 48 in the demo) is said: its extra steps commit nothing.
    let big = stdout(&sb.cmd(&["plan", "--steps", "4,64", "--seq-len", "48"]));
    let said = "# note: more steps than output tokens: K = 64 at N = 48 (32 output tokens); the steps past one";
    assert!(big.lines().any(|l| l.starts_with(said)), "{big}");
    // The diffusion samplers at a temperature beside the AR model, which decodes greedily: said.
    assert!(!demo.contains("temperature"), "{demo}");
    let text = std::fs::read_to_string(repo_file("config/demo.toml")).expect("the demo config");
    assert!(text.contains("temperature = 0.0\n"));
    let warm = sb.write("warm.toml", &text.replace("temperature = 0.0\n", "temperature = 0.1\n"));
    let warm = stdout(&sb.cmd(&["plan", "--config", warm.to_str().expect("utf8")]));
    let said =
        "# note: temperature = 0.1 applies to the diffusion samplers only; the autoregressive model decodes greedily";
    assert!(warm.lines().any(|l| l.starts_with(said)), "{warm}");
}

#[test]
fn plan_check_refuses_what_would_stop_run_before_it_measures() {
    let sb = Sandbox::new();
    // The demo: synthetic models (`run` writes them), embedded prompts, the CPU: nothing stops it.
    let out = sb.cmd(&["plan", "--check"]);
    assert_exit!(out, 0);
    assert!(!stdout(&out).contains("would stop"), "{}", stdout(&out));
    // The primary grid in an empty cache, with this CPU-only test binary: every problem at once, each with its fix.
    let grid = repo_file("config/experiments.toml");
    let out = sb.cmd(&["plan", "--check", "--config", &grid]);
    assert_exit!(out, 2);
    let err = stderr(&out);
    assert!(err.contains("plan --check: `run` would stop before measuring anything (3 problems)"), "{err}");
    for says in [
        "built without CUDA; fix: rebuild with",
        "meta-llama/Meta-Llama-3-8B, GSAI-ML/LLaDA-8B-Base",
        &format!("fix: `dllm-bench fetch --config {grid}`"),
        "the prompts cannot be read",
    ] {
        assert!(err.contains(says), "{says}: {err}");
    }
    // Without --check the same are notes, and the plan succeeds (as a preview on a laptop).
    let out = sb.cmd(&["plan", "--config", &grid]);
    assert_exit!(out, 0);
    let notes = stdout(&out).lines().filter(|l| l.starts_with("# `run` would stop before measuring: ")).count();
    assert_eq!(notes, 3, "{}", stdout(&out));
    // A parity search split into shards: `run --shard` refuses it, and so does the check of the array.
    let out = sb.cmd(&["plan", "--check", "--parity-search", "--shards", "2"]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("quality.parity_search needs the whole grid's quality"), "{}", stderr(&out));
    assert_exit!(sb.cmd(&["plan", "--check", "--parity-search"]), 0);
    let run_dir = sb.path().join("searched-shard");
    let out = sb.cmd(&["run", "--parity-search", "--shard", "0/2", "--run-dir", run_dir.to_str().expect("utf8")]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("fix: set quality.parity_search = false for a sharded run"), "{}", stderr(&out));
}

#[test]
fn plan_previews_shards_and_an_empty_shard_is_refused_before_it_runs() {
    let sb = Sandbox::new();
    let grid = repo_file("config/experiments.toml");
    // Four shards of the 16 cells: every cell once, the shares adding up to the whole.
    let out = sb.cmd(&["plan", "--config", &grid, "--shards", "4"]);
    assert_exit!(out, 0);
    let text = stdout(&out);
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("#   shard ")).collect();
    assert_eq!(rows.len(), 4, "{text}");
    let mut cells = 0;
    for (i, row) in rows.iter().enumerate() {
        let rest = row.strip_prefix(&format!("#   shard {i}/4: ")).expect("shard row");
        cells += rest.split(' ').next().and_then(|n| n.parse::<usize>().ok()).expect("count");
    }
    assert_eq!(cells, 16, "{text}");
    // One shard's listing: its own cells only, as `run --shard` measures them.
    let mut listed = 0;
    for i in 0..4 {
        let out = sb.cmd(&["plan", "--config", &grid, "--shard", &format!("{i}/4")]);
        assert_exit!(out, 0);
        let text = stdout(&out);
        assert!(text.starts_with(&format!("# shard {i}/4: ")) && text.contains(" of the 16 cells from"), "{text}");
        listed += text.lines().filter(|l| l.starts_with("GSAI-ML/") || l.starts_with("meta-llama/")).count();
    }
    assert_eq!(listed, 16);
    // More shards than cells: refused by plan (as jobs/submit.sh calls it) and by run, before a folder is made.
    let out = sb.cmd(&["plan", "--config", &grid, "--shards", "17"]);
    assert_exit!(out, 2);
    assert!(
        stderr(&out).contains("16 cells into 17 shards leaves") && stderr(&out).contains("fix: 16 shards or fewer"),
        "{}",
        stderr(&out)
    );
    let run_dir = sb.path().join("empty-shard");
    let out = sb.cmd(&["run", "--shard", "99/100", "--run-dir", run_dir.to_str().expect("utf8")]);
    assert_exit!(out, 2);
    assert!(
        stderr(&out).contains("--shard: shard 99/100: ") && stderr(&out).contains("leaves this shard without cells"),
        "{}",
        stderr(&out)
    );
    assert!(!run_dir.exists(), "nothing written for an empty shard");
    // A shard of that split that would get a cell is refused as well: the array's tasks fail alike, at once.
    let out = sb.cmd(&["run", "--shard", "0/100", "--run-dir", run_dir.to_str().expect("utf8")]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("shards without cells"), "{}", stderr(&out));
    assert!(!run_dir.exists(), "nothing written for a shard of too many");
}

#[test]
fn a_shards_bundle_in_an_output_folder_names_its_shard() {
    let sb = Sandbox::new();
    let small = ["--seq-len", "48", "--batch-size", "1", "--steps", "4,8", "--repetitions", "1", "--warmup", "0", "-q"];
    for shard in ["0/2", "1/2"] {
        let mut args = vec!["run", "-o", "out", "--shard", shard];
        args.extend_from_slice(&small);
        assert_exit!(sb.cmd(&args), 0);
    }
    let mut names: Vec<String> = std::fs::read_dir(sb.path().join("out"))
        .expect("the output folder")
        .map(|e| e.expect("an entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 2, "{names:?}");
    for (i, name) in names.iter().enumerate() {
        assert!(name.starts_with(&format!("demo-shard-{i}-of-2-")) && name.ends_with(".json"), "{names:?}");
    }
}

#[test]
fn overrides_apply_and_are_validated() {
    let sb = Sandbox::new();
    let out =
        sb.cmd(&["plan", "--config", &repo_file("config/experiments.toml"), "--steps", "64", "--batch-size", "4"]);
    assert_exit!(out, 0);
    assert!(stdout(&out).starts_with("# 4 cells from"), "{}", stdout(&out));
    let bad = sb.cmd(&["plan", "--batch-size", "0"]);
    assert_exit!(bad, 2);
    assert!(
        stderr(&bad).contains("--batch-size 0") && stderr(&bad).contains("grid.batch_sizes[0]"),
        "{}",
        stderr(&bad)
    );
    // A list typed with spaces after its commas is the same list; a word in it is named.
    let spaced = sb.cmd(&["plan", "--steps", "4, 8", "--batch-size", "1, 4", "--thresholds", "0.9, 0.5"]);
    let plain = sb.cmd(&["plan", "--steps", "4,8", "--batch-size", "1,4", "--thresholds", "0.9,0.5"]);
    assert_exit!(spaced, 0);
    assert_eq!(stdout(&spaced).lines().skip(1).collect::<Vec<_>>(), stdout(&plain).lines().skip(1).collect::<Vec<_>>());
    let word = sb.cmd(&["plan", "--steps", "4,eight"]);
    assert_exit!(word, 2);
    assert!(stderr(&word).contains("\"eight\" is not a whole number"), "{}", stderr(&word));
    // What is wrong with a number is said as such: a comma too many, a sign, a size.
    for (steps, said) in [("4,8,", "a comma too many?"), ("-4", "-4 is negative"), ("9999999999", "is too large")] {
        let out = sb.cmd(&["plan", "--steps", steps]);
        assert_exit!(out, 2);
        assert!(stderr(&out).contains(said), "{steps}: {}", stderr(&out));
    }
    for (flag, value, said) in [("--warmup", "-1", "-1 is negative"), ("--repetitions", "0", "0 is too few")] {
        let out = sb.cmd(&["plan", flag, value]);
        assert_exit!(out, 2);
        assert!(stderr(&out).contains(said) && !stderr(&out).contains("4294967295"), "{flag}: {}", stderr(&out));
    }
}

#[test]
fn bad_configs_exit_2_with_file_field_and_fix() {
    let sb = Sandbox::new();
    let demo = std::fs::read_to_string(repo_file("config/demo.toml")).expect("demo");
    let cases = [
        (demo.replace("steps = [4, 8, 16, 32]", "steps = [4, 0]"), "grid.steps[1]"),
        (demo.replace("kind = \"llada\"", "kind = \"bert\""), "unknown variant `bert`"),
        (demo.replace("batch_sizes = [1, 4, 8]", "batch_sizes = [0]"), "grid.batch_sizes[0]"),
        ("this is not toml".to_string(), "line 1"),
    ];
    for (i, (text, expect)) in cases.iter().enumerate() {
        let path = sb.write(&format!("bad{i}.toml"), text);
        for cmd in ["plan", "run"] {
            let out = sb.cmd(&[cmd, "--config", path.to_str().expect("utf8")]);
            assert_exit!(out, 2);
            let err = stderr(&out);
            assert!(err.contains(&format!("bad{i}.toml")) && err.contains(expect), "{cmd} bad{i}: {err}");
            assert!(err.contains("fix:"), "{cmd} bad{i} says the fix: {err}");
            assert!(!err.contains("panicked"), "{err}");
        }
    }
    let missing = sb.cmd(&["run", "--config", "nope.toml"]);
    assert_exit!(missing, 2);
    assert!(stderr(&missing).contains("nope.toml"));
}

#[test]
fn missing_model_exits_2_naming_the_cache_path() {
    let sb = Sandbox::new();
    let out = sb.cmd(&["run", "--config", &repo_file("config/experiments_cpu_test.toml"), "--max-prompts", "1"]);
    assert_exit!(out, 2);
    let err = stderr(&out);
    // Wikitext is refused before any model is touched; with a prompt file the model is what is missing.
    assert!(err.contains("wikitext"), "{err}");
    let prompts = sb.write("p.txt", "One prompt.\n\nAnother prompt.\n");
    let cfg = std::fs::read_to_string(repo_file("config/experiments_cpu_test.toml"))
        .expect("cfg")
        .replace("source = \"wikitext\"", &format!("source = \"file\"\npath = {:?}", prompts.display().to_string()))
        .replace("count = 8", "count = 2");
    let path = sb.write("cpu.toml", &cfg);
    let out = sb.cmd(&["run", "--config", path.to_str().expect("utf8")]);
    assert_exit!(out, 2);
    let err = stderr(&out);
    assert!(err.contains("models--meta-llama--Meta-Llama-3-8B") && err.contains("fix:"), "{err}");
    assert!(!sb.results().exists(), "no bundle is written when nothing ran");
}

#[test]
fn a_closed_pipe_ends_a_printing_command_quietly_and_a_run_goes_on() {
    use std::process::{Command, Stdio};
    // `dllm-bench schema | head -1`: the JSON Schema is larger than a pipe's buffer, so the writes after the
    // reader has gone fail.
    let mut child = Command::new(env!("CARGO_BIN_EXE_dllm-bench"))
        .arg("schema")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run dllm-bench");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(141), "128 + SIGPIPE: {}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"), "no panic report: {}", stderr(&out));
    // `dllm-bench schema > /dev/full`: the output cannot be written, which is said as an error, not a panic.
    if let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") {
        let out = Command::new(env!("CARGO_BIN_EXE_dllm-bench")).arg("schema").stdout(full).output().expect("run");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.starts_with("error: cannot write to standard output: No space left") && !err.contains("panicked"),
            "{err}"
        );
    }
    // `dllm-bench run 2>&1 | head -3`: a run loses its messages, not its cells or its exit status.
    let sb = Sandbox::new();
    let args: Vec<&str> = ["run", "-o", "out"].iter().chain(QUICK).copied().collect();
    let mut child = sb.command(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run dllm-bench");
    drop((child.stdout.take(), child.stderr.take()));
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(0));
    let bundles: Vec<_> = std::fs::read_dir(sb.path().join("out")).expect("out").flatten().collect();
    assert_eq!(bundles.len(), 1, "the bundle is written");
}

#[test]
fn synth_defaults_follow_the_preset() {
    use clap::Parser;
    use runner::cli::{Cli, Command};
    use schema::grid::Precision;
    let spec = |flags: &[&str]| {
        let args = ["dllm-bench", "synth", "--repo-id", "o/n"].iter().chain(flags);
        let Command::Synth(args) = Cli::try_parse_from(args).expect("flags parse").command else { panic!("not synth") };
        let (kind, spec) = args.spec().expect("a valid spec");
        let r = spec.resolve(kind);
        (r.dtype, r.shards, r.hidden)
    };
    // The real checkpoints' dtype and shard counts, unless the flags say otherwise.
    assert_eq!(spec(&["--kind", "llada", "--preset", "real"]), (Precision::Bf16, 6, 4096));
    assert_eq!(spec(&["--kind", "llama", "--preset", "real"]), (Precision::Bf16, 4, 4096));
    assert_eq!(
        spec(&["--kind", "llama", "--preset", "real", "--dtype", "f32", "--shards", "1"]),
        (Precision::F32, 1, 4096)
    );
    assert_eq!(spec(&["--kind", "llada"]), (Precision::F32, 1, 64));
    assert_eq!(
        spec(&["--kind", "llama", "--preset", "small", "--dtype", "bf16", "--shards", "3"]),
        (Precision::Bf16, 3, 256)
    );
}

#[test]
fn cuda_without_the_feature_says_so() {
    if cfg!(feature = "cuda") {
        return;
    }
    let sb = Sandbox::new();
    let out = sb.cmd(&["run", "--device", "cuda", "--seq-len", "40"]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("built without CUDA"), "{}", stderr(&out));
}

#[test]
fn validate_refuses_bad_bundles_with_exit_2() {
    let sb = Sandbox::new();
    let cases = [
        ("notjson.json", "{ nope", "not a valid JSON file"),
        ("newer.json", "{\"schema_version\": \"9.0\"}", "upgrade dllm-bench"),
        ("partial.json", "{\"schema_version\": \"1.0\", \"models\": []}", "missing field"),
    ];
    for (name, text, expect) in cases {
        let p = sb.write(name, text);
        let out = sb.cmd(&["validate", p.to_str().expect("utf8")]);
        assert_exit!(out, 2);
        assert!(stderr(&out).contains(expect), "{name}: {}", stderr(&out));
    }
    let old = sb.cmd(&["validate", &repo_file("schema/tests/fixtures/v0.1/cpu-draft.json")]);
    assert_exit!(old, 0);
    let upgraded = format!("schema 0.1 upgraded to {}", schema::SchemaVersion::CURRENT);
    assert!(stdout(&old).contains(&upgraded), "{}", stdout(&old));
}

#[test]
fn unknown_flag_exits_2() {
    let out = Sandbox::new().cmd(&["run", "--stepz", "3"]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("--stepz"));
}

#[test]
fn prompts_too_short_for_n_are_refused_before_any_model_loads() {
    // N = 1000 (within the tiny models' 1024 positions) needs longer prompts than the embedded set has: refused with
    // the lengths, the prompts and the fix, before a model loads or a run folder is made.
    let sb = Sandbox::new();
    let results = sb.results();
    // `plan` before the synthetic weights are written: nothing to check against, said.
    let plan = sb.cmd(&["plan", "--seq-len", "200,1000"]);
    assert_exit!(plan, 0);
    assert!(
        stdout(&plan).contains("yet, synthetic: `run` writes them")
            && stdout(&plan).contains("synthetic-llada-tiny")
            && stdout(&plan).contains("synthetic-evaluator-tiny (evaluator)"),
        "{}",
        stdout(&plan)
    );
    let out = sb.cmd(&[
        "run",
        "--output-dir",
        results.to_str().expect("utf8"),
        "--seq-len",
        "200,1000",
        "--batch-size",
        "1",
        "--steps",
        "4",
        "--samplers",
        "reference",
        "--warmup",
        "0",
    ]);
    assert_exit!(out, 2);
    let err = stderr(&out);
    assert!(err.contains("embedded:demo") && err.contains("N = 1000 (N_out 32) needs 967 tokens"), "{err}");
    assert!(err.contains("prompt 0 has"), "names the prompts: {err}");
    assert!(!err.contains("N = 200 "), "N = 200 fits: {err}");
    assert!(err.contains("fix: ") && err.contains("leave N = 1000 out of grid.seq_lengths"), "{err}");
    assert!(!err.contains("loading"), "no model loaded: {err}");
    assert!(stdout(&out).trim().is_empty(), "no bundle: {}", stdout(&out));
    assert!(!results.exists() || std::fs::read_dir(&results).expect("dir").next().is_none(), "nothing written");
    // The weights are in the cache now: `plan` refuses what `run` refused, and checks what fits.
    let plan = sb.cmd(&["plan", "--seq-len", "200,1000"]);
    assert_exit!(plan, 2);
    assert!(stderr(&plan).contains("N = 1000 (N_out 32) needs 967 tokens"), "{}", stderr(&plan));
    let plan = sb.cmd(&["plan", "--seq-len", "200"]);
    assert_exit!(plan, 0);
    assert!(stdout(&plan).contains("# checked against"), "{}", stdout(&plan));
}

#[test]
fn the_prompt_length_check_reads_only_the_prompts_the_cells_use() {
    // Prompt 0 is long, prompt 1 short. One repetition of B = 1 reads prompt 0 only: the run goes ahead. Quality
    // generates a continuation of every prompt at the largest B: refused, naming prompt 1.
    let sb = Sandbox::new();
    let long: Vec<String> = (0..300).map(|i| format!("word{}", i % 37)).collect();
    sb.write("prompts.txt", &format!("{}\n\nonly a few words here\n", long.join(" ")));
    let demo = std::fs::read_to_string(repo_file("config/demo.toml")).expect("demo");
    let demo =
        demo.replacen("source = \"embedded\"\ncount = 8", "source = \"file\"\npath = \"prompts.txt\"\ncount = 2", 1);
    let plain = sb.write("plain.toml", demo.split("\n[quality]").next().expect("config"));
    let scored = sb.write("scored.toml", &demo);
    let args = |cfg: &Path| -> Vec<String> {
        let cfg = cfg.to_str().expect("utf8");
        let flags = "--seq-len 96 --batch-size 1 --steps 4 --samplers reference --warmup 0 --repetitions 1";
        let mut a: Vec<String> = ["run", "--config", cfg, "--output-dir", "results"].map(String::from).to_vec();
        a.extend(flags.split(' ').map(String::from));
        a
    };
    let run = |cfg: &Path| sb.cmd(&args(cfg).iter().map(String::as_str).collect::<Vec<_>>());
    let out = run(&plain);
    assert_exit!(out, 0);
    let out = run(&scored);
    assert_exit!(out, 2);
    let err = stderr(&out);
    assert!(err.contains("file:prompts.txt") && err.contains("1 of the 2 prompts"), "{err}");
    assert!(err.contains("prompt 1 has") && !err.contains("prompt 0 has"), "{err}");
    assert!(err.contains("longer prompts in the prompt file (prompts.path)"), "{err}");
}

#[test]
fn files_of_the_tool_given_as_a_bundle_are_named_for_what_they_are() {
    let sb = Sandbox::new();
    let dir = sb.path().join("one.run");
    let d = dir.to_str().expect("utf8");
    let flags = ["--seq-len", "48", "--batch-size", "1", "--steps", "4", "--samplers", "reference", "--warmup", "0"];
    let out = sb.cmd(&[&["run", "--run-dir", d, "--repetitions", "1"], &flags[..]].concat());
    assert_exit!(out, 0);
    let bundle = stdout(&out).trim().to_string();
    let journal = dir.join("journal.jsonl");
    // Kept: the run was given its folder, so its journal stays beside the bundle.
    assert!(journal.is_file(), "{}", journal.display());
    let empty = sb.write("empty.json", "\n");
    let config = sb.write("grid.json", &std::fs::read_to_string(repo_file("config/demo.toml")).expect("demo"));
    let cases = [
        (
            journal.to_str().expect("utf8").to_string(),
            format!("is a run's journal, not a bundle (its run's bundle: {bundle}"),
        ),
        (d.to_string(), format!("is a run folder, not a bundle; fix: pass {bundle}")),
        (empty.to_str().expect("utf8").to_string(), "is empty".to_string()),
        (config.to_str().expect("utf8").to_string(), "is TOML (a grid config?)".to_string()),
    ];
    for (file, says) in cases {
        for cmd in ["validate", "report"] {
            let out = sb.cmd(&[cmd, &file]);
            assert_exit!(out, 2);
            assert!(stderr(&out).contains(&says), "{cmd} {file}: {}", stderr(&out));
            assert!(stderr(&out).contains("fix: "), "{cmd} {file}: {}", stderr(&out));
        }
    }
}

/// The demo config without its quality table and with `line` added to `[run]`, run quickly: its config text and
/// bundle.
fn demo_run_with(sb: &Sandbox, line: &str) -> (String, schema::Bundle) {
    let demo = std::fs::read_to_string(repo_file("config/demo.toml")).expect("demo");
    let cfg = demo.replacen("seed = 0\n", &format!("seed = 0\n{line}\n"), 1);
    let cfg = cfg.split("\n[quality]").next().expect("config").to_string();
    assert!(cfg.contains(line));
    let path = sb.write("run.toml", &cfg);
    let results = sb.results();
    let mut args = vec!["run", "--config", path.to_str().expect("utf8"), "-o", results.to_str().expect("utf8")];
    args.extend_from_slice(QUICK);
    let out = sb.cmd(&args);
    assert_exit!(out, 0);
    let b = schema::read_bundle(&std::fs::read_to_string(stdout(&out).trim()).expect("bundle")).expect("valid");
    (cfg, b)
}

#[test]
fn attention_f32_is_asked_for_by_the_config_and_recorded() {
    let sb = Sandbox::new();
    let (_, b) = demo_run_with(&sb, "attention_f32 = true");
    assert!(b.provenance.config.run.attention_f32);
    assert!(b.provenance.attention.contains("upcast to f32"), "{}", b.provenance.attention);
}

#[test]
fn fused_attention_is_asked_for_by_the_config_recorded_and_refused_on_cuda() {
    let sb = Sandbox::new();
    let (cfg, b) = demo_run_with(&sb, "attention = \"fused\"");
    assert_eq!(b.provenance.config.run.attention, schema::grid::AttentionKernel::Fused);
    assert!(b.provenance.attention.contains("one fused attention kernel"), "{}", b.provenance.attention);
    assert!(b.cells.iter().all(|c| c.status == CellStatus::Ok), "every cell runs with the fused kernel");

    // A GPU has no fused attention yet: the config is refused before anything runs, naming the field.
    let gpu = cfg.replacen("device = \"cpu\"", "device = \"cuda\"", 1);
    assert!(gpu.contains("device = \"cuda\""));
    let path = sb.write("fused-gpu.toml", &gpu);
    let out = sb.cmd(&["plan", "--config", path.to_str().expect("utf8")]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("run.attention"), "{}", stderr(&out));
}

#[test]
fn cuda_graphs_and_fused_cuda_ops_are_refused_on_the_cpu_naming_the_field() {
    let sb = Sandbox::new();
    for (flag, field) in [("--cuda-graphs", "run.cuda_graphs"), ("--cuda-fused-ops", "run.cuda_fused_ops")] {
        let out = sb.cmd(&["plan", flag]);
        assert_exit!(out, 2);
        assert!(stderr(&out).contains(field), "{}", stderr(&out));
        assert!(stderr(&out).contains(&format!("drop {flag}")), "{}", stderr(&out));
        // On a CUDA device the plan stands (running it needs the GPU).
        let out = sb.cmd(&["plan", flag, "--device", "cuda"]);
        assert_exit!(out, 0);
    }
    let out = sb.cmd(&["bench-kernels", "--shape", "tiny", "--cuda-graphs"]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("--device cuda"), "{}", stderr(&out));
}

#[test]
fn cudnn_attention_is_refused_on_the_cpu_and_in_f32() {
    let sb = Sandbox::new();
    let out = sb.cmd(&["plan", "--attention", "cudnn"]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("run.attention") && stderr(&out).contains("cuDNN"), "{}", stderr(&out));
    // On CUDA it needs bf16 or f16 (cuDNN has no f32 flash attention).
    let out = sb.cmd(&["plan", "--attention", "cudnn", "--device", "cuda", "--dtype", "f32"]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("bf16"), "{}", stderr(&out));
    let out = sb.cmd(&["plan", "--attention", "cudnn", "--device", "cuda", "--dtype", "bf16"]);
    assert_exit!(out, 0);
    let out = sb.cmd(&["plan", "--attention", "flash"]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("ops, fused or cudnn"), "{}", stderr(&out));
    let out = sb.cmd(&["bench-kernels", "--shape", "tiny", "--attention", "cudnn"]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("--device cuda"), "{}", stderr(&out));
}

#[test]
fn guided_llada_cells_record_two_forward_passes_per_step() {
    let sb = Sandbox::new();
    let demo = std::fs::read_to_string(repo_file("config/demo.toml")).expect("demo");
    let cfg = demo.replace("temperature = 0.0", "temperature = 0.0\ncfg_scale = 2.0");
    let cfg = cfg.split("\n[quality]").next().expect("config").to_string();
    let path = sb.write("cfg.toml", &cfg);
    let out = sb.cmd(&[
        "run",
        "-c",
        path.to_str().expect("utf8"),
        "-o",
        "out",
        "-q",
        "--seq-len",
        "40",
        "--batch-size",
        "2",
        "--steps",
        "4",
        "--repetitions",
        "1",
    ]);
    assert_exit!(out, 0);
    let b = schema::read_bundle(&std::fs::read_to_string(sb.path().join(stdout(&out).trim())).expect("bundle"))
        .expect("valid");
    assert_eq!(b.provenance.config.grid.cfg_scale, 2.0, "the bundle says guidance was used");
    for c in &b.cells {
        // A threshold series runs as many steps as it needs, each a forward of both passes.
        let steps_run = c.repetitions[0].step_ms.as_ref().map_or(0, Vec::len) as u32;
        let want = match (c.key.steps, c.key.threshold) {
            (Some(k), _) => 2 * k,
            (None, Some(_)) => 2 * steps_run,
            (None, None) => c.key.output_tokens,
        };
        assert!(c.repetitions.iter().all(|r| r.forward_passes == Some(want)), "{}", c.key);
    }
    refused_cfg(&sb, &demo.replace("temperature = 0.0", "temperature = 0.0\ncfg_scale = -1.0"));
}

fn refused_cfg(sb: &Sandbox, text: &str) {
    let path = sb.write("bad-cfg.toml", text);
    let out = sb.cmd(&["plan", "-c", path.to_str().expect("utf8")]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("grid.cfg_scale"), "{}", stderr(&out));
}

#[test]
fn the_ranking_precision_and_the_noise_source_are_config_choices_recorded_in_the_bundle() {
    let sb = Sandbox::new();
    let demo = std::fs::read_to_string(repo_file("config/demo.toml")).expect("demo");
    let demo = demo.split("\n[quality]").next().expect("config").to_string();
    let run = |name: &str, text: &str| {
        let path = sb.write(name, text);
        let mut args = vec!["run", "-c", path.to_str().expect("utf8"), "-o", "out", "-q"];
        args.extend_from_slice(QUICK);
        let out = sb.cmd(&args);
        assert_exit!(out, 0);
        let text = std::fs::read_to_string(sb.path().join(stdout(&out).trim())).expect("bundle");
        (schema::read_bundle(&text).expect("valid"), text)
    };
    // The defaults are written out, so a bundle says how it ranked even when the config did not.
    let (b, text) = run("default.toml", &demo);
    assert_eq!(b.provenance.config.grid.confidence, schema::grid::Confidence::F32);
    // The run measured its device's ceilings before its first cell (the roofline's defaults).
    let peaks = b.provenance.executions[0].device_peaks.as_ref().expect("device peaks");
    assert!(
        peaks.copy_bytes_per_s > 1e6 && peaks.matmul_flops_per_s > 1e6 && peaks.dtype == b.provenance.config.run.dtype
    );
    assert!(text.contains("\"confidence\": \"f32\"") && text.contains("\"gumbel_noise\": \"device\""), "{text}");
    let chosen = demo.replace("temperature = 0.0", "temperature = 0.5\nconfidence = \"f64\"\ngumbel_noise = \"host\"");
    assert_ne!(chosen, demo, "the demo config sets the temperature");
    let (b, _) = run("chosen.toml", &chosen);
    assert_eq!(b.provenance.config.grid.confidence, schema::grid::Confidence::F64);
    assert_eq!(b.provenance.config.grid.gumbel_noise, schema::grid::GumbelNoise::Host);
    assert!(b.cells.iter().all(|c| c.status == schema::bundle::CellStatus::Ok), "every cell ran");

    let bad = sb.write("bad.toml", &demo.replace("temperature = 0.0", "temperature = 0.0\nconfidence = \"f16\""));
    let out = sb.cmd(&["plan", "-c", bad.to_str().expect("utf8")]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("confidence") && stderr(&out).contains("f32"), "{}", stderr(&out));
}

/// The width and height an SVG document declares.
fn svg_size(svg: &str) -> (u32, u32) {
    let attr = |name: &str| -> u32 {
        let at = svg.find(&format!(" {name}=\"")).unwrap_or_else(|| panic!("no {name} in the SVG")) + name.len() + 3;
        svg[at..].split('"').next().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("bad {name}"))
    };
    (attr("width"), attr("height"))
}

/// A PNG's width, height and the share of its pixels that are not white, decoded.
fn png_facts(bytes: &[u8]) -> (u32, u32, f64) {
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes)).read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("its pixels");
    let px = info.color_type.samples();
    let pixels = &buf[..info.buffer_size()];
    let inked = pixels.chunks(px).filter(|p| p.iter().take(3).any(|v| *v < 240)).count();
    (info.width, info.height, inked as f64 / (pixels.len() / px) as f64)
}

/// A PDF's structure: the header, the cross-reference table `startxref` points at, every in-use entry of it
/// pointing at its object, a page, and an embedded font (the text is text). Byte offsets: the file is binary.
fn check_pdf(pdf: &[u8], name: &str) {
    let find =
        |from: usize, what: &str| pdf[from..].windows(what.len()).position(|w| w == what.as_bytes()).map(|i| i + from);
    let starts = |at: usize, what: &str| pdf.get(at..at + what.len()) == Some(what.as_bytes());
    // A line's text, and where the next begins (after its `\n`, `\r\n` or `\r`).
    let next = |at: usize| {
        let end = at + pdf[at..].iter().position(|b| *b == b'\n' || *b == b'\r').unwrap_or(pdf.len() - at);
        end + if pdf[end..].starts_with(b"\r\n") { 2 } else { 1 }
    };
    let ascii = |at: usize| -> String {
        pdf[at..].iter().take_while(|b| **b != b'\n' && **b != b'\r').map(|b| *b as char).collect()
    };
    assert!(starts(0, "%PDF-1.") && pdf.trim_ascii_end().ends_with(b"%%EOF"), "{name}.pdf: header and end");
    let tail = pdf.len().saturating_sub(64);
    let sx = find(tail, "startxref").expect("startxref") + "startxref".len();
    let start: usize =
        String::from_utf8_lossy(&pdf[sx..]).split_whitespace().next().and_then(|v| v.parse().ok()).expect("offset");
    assert!(starts(start, "xref"), "{name}.pdf: startxref points at the table");
    let mut at = next(start);
    let count: usize = ascii(at).split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("count");
    at = next(at);
    let mut objects = 0;
    for i in 0..count {
        let line = ascii(at);
        at = next(at);
        let parts: Vec<&str> = line.split_whitespace().collect();
        if parts.get(2) == Some(&"n") {
            let off: usize = parts[0].parse().expect("offset");
            assert!(starts(off, &format!("{i} 0 obj")), "{name}.pdf: entry {i} points at its object");
            objects += 1;
        }
    }
    assert!(objects > 3, "{name}.pdf: {objects} objects");
    assert!(
        find(0, "/Type /Page").is_some() && find(0, "/FontFile").is_some(),
        "{name}.pdf: a page and an embedded font"
    );
}

#[test]
fn figures_draw_a_gpu_bundle_s_reserved_peaks_beside_the_allocated_ones() {
    // The study's M_peak is the memory pool's reserved peak: a device's bundle gets that heatmap too, titled so,
    // with the same cells (OOM marked); a CPU bundle (RSS only) does not.
    let sb = Sandbox::new();
    let bundle = repo_file("explorer/e2e/fixtures/study-h200.json");
    assert_exit!(sb.cmd(&["figures", bundle.as_str(), "-o", "gpu"]), 0);
    let read = |f: &str| std::fs::read_to_string(sb.path().join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    let (allocated, reserved) = (read("gpu/memory_heatmap.svg"), read("gpu/memory_heatmap_reserved.svg"));
    assert!(allocated.contains("allocated") && !allocated.contains("reserved"), "the allocated peaks' title");
    assert!(reserved.contains("reserved device memory"), "the reserved peaks' title");
    assert_eq!(allocated.matches(">\nOOM\n</text>").count(), reserved.matches(">\nOOM\n</text>").count());
    assert!(read("gpu/captions.md").contains("memory_heatmap_reserved.svg"));
    let cpu = repo_file("schema/tests/fixtures/v1.4/demo-peaks.json");
    assert_exit!(sb.cmd(&["figures", cpu.as_str(), "-o", "cpu"]), 0);
    assert!(
        sb.path().join("cpu/memory_heatmap.svg").exists()
            && !sb.path().join("cpu/memory_heatmap_reserved.svg").exists()
    );
    // The CPU bundle drawn into the GPU bundle's folder: the figures it does not draw go (the folder holds one
    // bundle's set, as its captions say), a file the user put there stays.
    std::fs::write(sb.path().join("gpu/notes.txt"), "mine").expect("a user's file");
    let out = sb.cmd(&["figures", cpu.as_str(), "-o", "gpu"]);
    assert_exit!(out, 0);
    assert!(!sb.path().join("gpu/memory_heatmap_reserved.svg").exists(), "the earlier bundle's reserved heatmap");
    assert!(stderr(&out).contains("an earlier `figures` wrote there"), "{}", stderr(&out));
    assert_eq!(read("gpu/notes.txt"), "mine");
    let captions = read("gpu/captions.md");
    for line in captions.lines().filter_map(|l| l.strip_prefix("## ")).filter(|l| !l.ends_with(')')) {
        assert!(sb.path().join("gpu").join(line).is_file(), "{line}, listed in the captions, is there");
    }
}

/// The font sizes of an SVG's texts, in its pixels.
fn font_sizes(svg: &str) -> Vec<f64> {
    svg.split("font-size=\"")
        .skip(1)
        .map(|t| t.split('"').next().and_then(|v| v.parse().ok()).expect("a font size"))
        .collect()
}

/// The resolution a PNG's `pHYs` chunk records, in pixels per inch (rounded).
fn png_dpi(png: &[u8]) -> Option<u32> {
    let at = png.windows(4).position(|w| w == b"pHYs")?;
    let per_metre = u32::from_be_bytes(png.get(at + 4..at + 8)?.try_into().ok()?);
    (png.get(at + 12) == Some(&1)).then(|| (f64::from(per_metre) * 0.0254).round() as u32)
}

#[test]
fn figures_are_as_wide_as_width_says_in_inches_with_text_of_7_points_or_more() {
    // The committed H200 bundles (the runner's, compared with the HF reference's), at a journal's single and double
    // column: the SVG 96 pixels an inch, the PNG at --dpi (recorded in it), no text under 7 pt at that size.
    let sb = Sandbox::new();
    let runner = repo_file("results/gpu_primary-h200-runner-20261126.json");
    let reference = repo_file("results/gpu_primary-h200-hf-eager-20261126.json");
    for (inches, dpi) in [("3.5", 300u32), ("7", 150)] {
        let out_dir = format!("w{inches}");
        let dpi_arg = dpi.to_string();
        let args = ["figures", runner.as_str(), "--compare", reference.as_str(), "-o", out_dir.as_str()];
        let out = sb.cmd(&[&args[..], &["--format", "svg,png", "--width", inches, "--dpi", dpi_arg.as_str()]].concat());
        assert_exit!(out, 0);
        let dir = sb.path().join(&out_dir);
        let width_in: f64 = inches.parse().expect("a number");
        let mut svgs = 0;
        for entry in std::fs::read_dir(&dir).expect("the folder") {
            let path = entry.expect("an entry").path();
            if path.extension().and_then(|e| e.to_str()) != Some("svg") {
                continue;
            }
            svgs += 1;
            let name = path.display().to_string();
            let svg = std::fs::read_to_string(&path).expect("svg");
            let (w, h) = svg_size(&svg);
            assert_eq!(f64::from(w), width_in * 96.0, "{name}: {w} pixels wide");
            let least = font_sizes(&svg).into_iter().fold(f64::INFINITY, f64::min);
            assert!(least * 72.0 / 96.0 >= 6.99, "{name}: a text of {least} px, under 7 pt at {inches} in");
            let png = std::fs::read(path.with_extension("png")).expect("png");
            let (pw, ph, _) = png_facts(&png);
            let at_dpi = |v: u32| (f64::from(v) * f64::from(dpi) / 96.0).round() as u32;
            assert_eq!((pw, ph), (at_dpi(w), at_dpi(h)), "{name}: the PNG at {dpi} dpi");
            assert_eq!(png_dpi(&png), Some(dpi), "{name}: the PNG records its resolution");
        }
        assert!(svgs >= 10, "{svgs} figures");
        let all = std::fs::read_to_string(dir.join("latency_vs_steps_all_shapes.svg")).expect("small multiples");
        // Every facet, its title shortened where the full one would not fit its width (3.5 in).
        assert!(all.contains("N = 1024, B = 4") || all.contains("N=1024, B=4"), "every facet");
        let captions = std::fs::read_to_string(dir.join("captions.md")).expect("captions");
        assert!(captions.contains(&format!("{inches} in wide")), "{captions}");
    }
    // A width that is not a size is refused (exit 2) naming the flag and what to give.
    for bad in ["0", "-1", "abc", "1000", "0.1", "0.99"] {
        let out = sb.cmd(&["figures", runner.as_str(), "-o", "bad", "--width", bad]);
        assert_exit!(out, 2);
        let err = stderr(&out);
        assert!(err.contains("--width") && err.contains("inches") && err.contains("3.5"), "--width {bad}: {err}");
    }
    for bad in ["-2", "0.00001"] {
        let out = sb.cmd(&["figures", runner.as_str(), "-o", "bad", "--height", bad]);
        assert_exit!(out, 2);
        assert!(stderr(&out).contains("--height") && stderr(&out).contains("inches"), "{}", stderr(&out));
    }
    // A PNG wider than the renderer takes is refused before anything is drawn.
    let out = sb.cmd(&["figures", runner.as_str(), "-o", "huge", "--format", "png", "--width", "40", "--dpi", "1200"]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("--dpi") && !sb.path().join("huge/roofline.png").exists(), "{}", stderr(&out));
}

/// The number of marks `captions.md` gives for `file` (`## FILE`, then `TITLE (N marks).`); 0 when it gives none.
fn caption_marks(captions: &str, file: &str) -> usize {
    let Some(at) = captions.find(&format!("## {file}\n")) else { return 0 };
    let text = captions[at..].lines().nth(2).unwrap_or_default();
    let count = text.strip_suffix(" marks).").and_then(|t| t.rsplit('(').next());
    count.and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// Whether an SVG figure draws `marks` marks (> 0): as many shapes (circles, triangles, rectangles: points, bars,
/// heat-map cells) besides the white background rectangle every figure has.
fn draws_marks(svg: &str, marks: usize) -> bool {
    let shapes: usize = ["<circle", "<polygon", "<rect"].iter().map(|s| svg.matches(s).count()).sum();
    marks > 0 && shapes > marks
}

#[test]
fn the_figure_check_fails_on_a_figure_without_its_marks() {
    // Axes, a legend and a white background, but no mark: what a broken drawing would leave.
    let empty = "<svg><rect x=\"0\" y=\"0\" fill=\"#FFFFFF\"/><rect fill=\"#FFFFFF\"/><line/><polyline/><circle/>\
                 <text>K</text></svg>";
    assert!(!draws_marks(empty, 4));
    assert!(!draws_marks("<svg><rect/><circle/><circle/></svg>", 0), "a figure with no marks is not drawn");
    assert!(draws_marks("<svg><rect/><circle/><circle/><polygon/><rect/></svg>", 4));
    let captions = "# Figures\n\n## a.svg\n\nLatency (B = 1) [SYNTHETIC weights] (12 marks).\n";
    assert_eq!((caption_marks(captions, "a.svg"), caption_marks(captions, "b.svg")), (12, 0));
}

#[test]
fn figures_writes_every_figure_the_bundle_can_fill_with_captions() {
    let sb = Sandbox::new();
    let bundle = repo_file("schema/tests/fixtures/v1.4/demo-peaks.json");
    let out = sb.cmd(&["figures", bundle.as_str(), "-o", "figs"]);
    assert_exit!(out, 0);
    let dir = sb.path().join("figs");
    let b = schema::read_bundle(&std::fs::read_to_string(&bundle).expect("fixture")).expect("valid");
    let captions = std::fs::read_to_string(dir.join("captions.md")).expect("captions");
    assert!(captions.contains("SYNTHETIC weights") && captions.contains("demo-peaks.json"), "{captions}");
    let mut shapes: Vec<(u32, u32)> = b.cells.iter().map(|c| (c.key.seq_len, c.key.batch_size)).collect();
    shapes.sort_unstable();
    shapes.dedup();
    let mut want: Vec<String> = Vec::new();
    for (n, bs) in &shapes {
        for stem in ["latency_vs_steps", "quality_vs_steps", "pareto_frontier"] {
            want.push(format!("{stem}_N{n}_B{bs}.svg"));
        }
    }
    for n in shapes.iter().map(|s| s.0).collect::<std::collections::BTreeSet<_>>() {
        want.push(format!("throughput_by_batch_size_N{n}.svg"));
        want.push(format!("throughput_vs_batch_size_N{n}.svg"));
        want.push(format!("step_time_N{n}.svg"));
    }
    want.extend(["memory_heatmap.svg", "roofline.svg"].map(String::from));
    for stem in ["latency_vs_steps", "quality_vs_steps", "pareto_frontier", "throughput_by_batch_size"] {
        want.push(format!("{stem}_all_shapes.svg"));
    }
    for file in &want {
        let text = std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let body = text.trim();
        assert!(body.starts_with("<svg") && body.ends_with("</svg>"), "{file} is not one SVG document");
        assert_eq!(body.matches("<svg").count(), 1, "{file}");
        // Drawn marks (as many as the caption counts), and the title says the weights were synthetic.
        let marks = caption_marks(&captions, file);
        assert!(draws_marks(body, marks), "{file} draws fewer shapes than its {marks} marks");
        assert!(body.contains("[SYNTHETIC weights]"), "{file}: no synthetic label in its title");
        assert!(captions.contains(&format!("## {file}")), "{file} has no caption");
    }
    // Small multiples: a facet title per shape, and taller than one chart when there are several rows.
    let all = std::fs::read_to_string(dir.join("latency_vs_steps_all_shapes.svg")).expect("small multiples");
    for (n, bs) in &shapes {
        assert!(all.contains(&format!("N = {n}, B = {bs}")), "no facet for N = {n}, B = {bs}");
    }
    // PNG and PDF of every figure, drawn from its SVG with the system's fonts: valid files of the SVG's size.
    let out = sb.cmd(&["figures", bundle.as_str(), "-o", "all", "--format", "svg,png,pdf,svg"]);
    assert_exit!(out, 0);
    // A format given twice is written once (one caption each).
    let captions = std::fs::read_to_string(sb.path().join("all/captions.md")).expect("captions");
    assert_eq!(captions.matches(&format!("## {}\n", want[0])).count(), 1, "{captions}");
    for file in &want {
        let svg = std::fs::read_to_string(sb.path().join("all").join(file)).expect("svg");
        let (w, h) = svg_size(&svg);
        let stem = file.trim_end_matches(".svg");
        let png = std::fs::read(sb.path().join("all").join(format!("{stem}.png"))).expect("png");
        let (pw, ph, inked) = png_facts(&png);
        // 300 dpi (the default) over the SVG's 96 pixels an inch.
        let at_300 = |v: u32| (f64::from(v) * 300.0 / 96.0).round() as u32;
        assert_eq!((pw, ph), (at_300(w), at_300(h)), "{stem}.png is the SVG at 300 dpi");
        assert!(inked > 0.01, "{stem}.png: {inked} of its pixels are not white");
        let pdf = std::fs::read(sb.path().join("all").join(format!("{stem}.pdf"))).expect("pdf");
        check_pdf(&pdf, stem);
    }
    // A --font file that holds no font, PNG and PDF are refused at once with the fix (SVG needs none), and no
    // library's log line says it first.
    let not_a_font = sb.write("not-a-font.ttf", "plain text");
    let out = sb.cmd(&[
        "figures",
        bundle.as_str(),
        "-o",
        "nofont",
        "--format",
        "png",
        "--font",
        not_a_font.to_str().expect("utf8"),
    ]);
    assert_exit!(out, 2);
    let err = stderr(&out);
    assert!(err.starts_with("error: --font ") && err.contains("not a font file") && err.contains(".ttf"), "{err}");
    // --font with SVG alone, which uses none: refused, not ignored.
    let font = not_a_font.to_str().expect("utf8");
    let out = sb.cmd(&["figures", bundle.as_str(), "-o", "svgfont", "--format", "svg", "--font", font]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("--font is for PNG and PDF") && !sb.path().join("svgfont").exists());
    assert!(!sb.path().join("nofont/latency_vs_steps_all_shapes.png").exists(), "nothing drawn");
    // The roofline draws the ceilings the run measured.
    let roofline = std::fs::read_to_string(dir.join("roofline.svg")).expect("roofline");
    assert!(roofline.contains("TFLOP/s measured"), "the measured ceilings are in the legend");
    // The S_parity table: the report and a LaTeX tabular with a row per (N, B).
    let md = std::fs::read_to_string(dir.join("s_parity.md")).expect("markdown");
    assert!(md.contains("S_parity"), "{md}");
    let tex = std::fs::read_to_string(dir.join("s_parity.tex")).expect("latex");
    assert!(tex.contains("\\begin{tabular}") && tex.contains("\\end{tabular}\\par\n"), "{tex}");
    // Under the table only the series' notes (S_parity's interval, its warnings), one line each.
    let after = &tex[tex.find("\\end{tabular}\\par\n").expect("end") + "\\end{tabular}\\par\n".len()..];
    let notes: Vec<&str> = after.lines().collect();
    assert!(!notes.is_empty(), "the demo's prompts give S_parity intervals, said under the table: {tex}");
    assert!(notes.iter().all(|l| l.starts_with("\\noindent{\\footnotesize $N = ") && l.ends_with("\\par}")), "{tex}");
    assert_eq!(tex.lines().filter(|l| l.ends_with("\\\\") && !l.starts_with('$')).count(), shapes.len(), "{tex}");

    // A bundle without quality: the quality figures are listed as not drawn, with the reason; nothing empty.
    let old = repo_file("schema/tests/fixtures/v1.0/demo.json");
    let out = sb.cmd(&["figures", old.as_str(), "-o", "old"]);
    assert_exit!(out, 0);
    let captions = std::fs::read_to_string(sb.path().join("old/captions.md")).expect("captions");
    assert!(captions.contains("(not drawn)"), "{captions}");
    assert!(!sb.path().join("old/s_parity.tex").exists(), "no table without quality");
    // Unknown formats are refused, naming the ones there are.
    let out = sb.cmd(&["figures", old.as_str(), "--format", "gif"]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("svg") && stderr(&out).contains("pdf"), "{}", stderr(&out));
    let out = sb.cmd(&["figures", "missing.json"]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("missing.json"), "{}", stderr(&out));
}

#[test]
fn figures_draw_energy_against_quality_when_the_bundle_measured_both_and_say_why_not_otherwise() {
    let sb = Sandbox::new();
    let bundle = repo_file("schema/tests/fixtures/v1.4/demo-peaks.json");
    // Without energy: one entry in the captions, not drawn, with the reason.
    let out = sb.cmd(&["figures", bundle.as_str(), "-o", "plain"]);
    assert_exit!(out, 0);
    let captions = std::fs::read_to_string(sb.path().join("plain/captions.md")).expect("captions");
    assert!(
        captions.contains("## energy_pareto_frontier (not drawn)\n\nNo energy measured in this bundle"),
        "{captions}"
    );
    // The same bundle with energy in every repetition: a Pareto frontier of quality against joules per token per
    // shape.
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&bundle).expect("fixture")).expect("json");
    for c in v["cells"].as_array_mut().expect("cells") {
        for r in c["repetitions"].as_array_mut().expect("repetitions") {
            r["energy_j"] = serde_json::json!(r["output_tokens"].as_f64().expect("tokens") * 0.5);
            r["energy_window_ms"] = r["e2e_ms"].clone();
        }
    }
    let with = sb.write("energy.json", &v.to_string());
    let out = sb.cmd(&["figures", with.to_str().expect("utf8"), "-o", "energy"]);
    assert_exit!(out, 0);
    let captions = std::fs::read_to_string(sb.path().join("energy/captions.md")).expect("captions");
    let b = schema::read_bundle(&v.to_string()).expect("valid");
    for c in &b.cells {
        let file = format!("energy_pareto_frontier_N{}_B{}.svg", c.key.seq_len, c.key.batch_size);
        let svg =
            std::fs::read_to_string(sb.path().join("energy").join(&file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(svg.contains("energy per generated token (J, median)"), "{file}: the x axis");
        assert!(captions.contains(&format!("## {file}\n\nPareto frontier: energy vs")), "{captions}");
        assert!(draws_marks(&svg, caption_marks(&captions, &file)), "{file}");
    }
    assert!(!captions.contains("energy_pareto_frontier (not drawn)"), "{captions}");
}

#[test]
fn figures_captions_speak_print_say_the_report_s_cautions_and_the_compare_legend() {
    // Captions for a paper: no explorer controls (tabs, tooltips, filters, a narrow screen); the bundle's cautions
    // as `report` says them; with --compare, the labels' real prefixes.
    let sb = Sandbox::new();
    let bundle = repo_file("schema/tests/fixtures/v1.4/demo-peaks.json");
    let out = sb.cmd(&["figures", bundle.as_str(), "--compare", bundle.as_str(), "-o", "figs"]);
    assert_exit!(out, 0);
    let captions = std::fs::read_to_string(sb.path().join("figs/captions.md")).expect("captions");
    for ui in [
        "untick",
        "filter K to see one",
        "enter peaks above",
        "Run details table",
        "on a narrow screen",
        "tooltip",
        " tabs",
        "in the filters",
    ] {
        assert!(!captions.contains(ui), "{ui:?} in captions.md: {captions}");
    }
    assert!(captions.contains("\"[A] \"") && captions.contains("\"[B] \""), "{captions}");
    assert!(!captions.contains("\"B: \""), "{captions}");
    // demo-peaks ran one warm-up on a CPU (the study's 1): no warm-up caution; a caution per fact it has.
    let b = schema::read_bundle(&std::fs::read_to_string(&bundle).expect("fixture")).expect("valid");
    let single = b.cells.iter().filter(|c| c.status == schema::CellStatus::Ok && c.repetitions.len() == 1).count();
    assert_eq!(captions.contains("measured cells have one repetition"), single > 0, "{captions}");
    let failed = b.cells.iter().filter(|c| c.status != schema::CellStatus::Ok).count();
    assert_eq!(captions.contains("cells have no timing"), failed > 0, "{captions}");
    // Throughput's small multiples are per N.
    let at = captions.find("## throughput_by_batch_size_all_shapes.svg").expect("its caption");
    let next = captions[at + 1..].find("\n## ").map_or(captions.len(), |i| at + 1 + i);
    assert!(captions[at..next].contains("a small chart per N "), "{}", &captions[at..next]);
}

#[test]
fn a_command_that_writes_a_file_or_folder_prints_its_path_alone_on_standard_output() {
    let sb = Sandbox::new();
    let bundle = repo_file("schema/tests/fixtures/v1.0/demo.json");
    let bundle = bundle.as_str();
    let dist = sb.path().join("dist");
    std::fs::create_dir_all(sb.path().join("res")).expect("results");
    std::fs::create_dir_all(&dist).expect("dist");
    std::fs::write(dist.join("index.html"), "<html></html>").expect("index");
    std::fs::copy(bundle, sb.path().join("res/a.json")).expect("copy");
    for (args, path) in [
        (vec!["export", "-o", "x.csv", bundle], "x.csv"),
        (vec!["merge", "-o", "m.json", bundle], "m.json"),
        (vec!["report", "-o", "r.md", bundle], "r.md"),
        (vec!["figures", "-o", "figs", "--format", "svg", bundle], "figs"),
        (vec!["site", "--results", "res", "--explorer", "dist", "--out", "site"], "site"),
    ] {
        let out = sb.cmd(&args);
        assert_exit!(out, 0);
        assert_eq!(stdout(&out), format!("{path}\n"), "{args:?}: {}", stderr(&out));
        assert!(sb.path().join(path).exists(), "{args:?}");
    }
}

#[test]
fn prompt_file_reads_the_prompts_from_a_file_relative_to_the_current_folder() {
    let sb = Sandbox::new();
    let paragraphs = [
        "The lighthouse stood on the northern cape for two hundred years, and its keepers wrote down every ship that \
         passed in a long ledger bound in leather.",
        "In the spring of that year the river rose higher than anyone in the village could remember, and the mill by \
         the bridge was carried away in a single night.",
        "The committee met on Tuesday to discuss the budget for the new library, which had grown far beyond what the \
         town council first agreed to pay for.",
    ];
    sb.write("mine.txt", &paragraphs.join("\n\n"));
    // The demo's count (8) stays: a file of 3 is refused, naming the file, the field and --max-prompts.
    let out = sb.cmd(&["plan", "--prompt-file", "mine.txt"]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("mine.txt has only 3") && stderr(&out).contains("--max-prompts"), "{}", stderr(&out));
    let out = sb.cmd(&["plan", "--prompt-file", "mine.txt", "--max-prompts", "3"]);
    assert_exit!(out, 0);
    assert!(stdout(&out).lines().nth(1).is_some_and(|l| l.contains("3 prompts (file)")), "{}", stdout(&out));
    let out = sb.cmd(&["plan", "--prompt-file", "missing.txt"]);
    assert_exit!(out, 2);
    assert!(
        stderr(&out).contains("missing.txt: no such file") && stderr(&out).contains("--prompt-file"),
        "{}",
        stderr(&out)
    );
    // A run takes them: the continuations are of the file's prompts.
    let args = ["run", "-o", "out", "--prompt-file", "mine.txt", "--max-prompts", "2", "-q"];
    let out =
        sb.cmd(&[&args[..], &["--seq-len", "40", "--batch-size", "1", "--steps", "4", "--repetitions", "1"]].concat());
    assert_exit!(out, 0);
    let bundle: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(sb.path().join(stdout(&out).trim())).expect("the bundle"))
            .expect("json");
    let source = bundle["prompt_set"]["source"].as_str().expect("a source");
    assert!(source.starts_with("file:/") && source.ends_with("/mine.txt"), "the file read, in full: {source}");
    assert_eq!(bundle["prompt_set"]["count"], 2);
}

#[test]
fn report_states_the_conditions_when_measuring_started_and_cautions_of_a_shared_or_throttled_gpu() {
    let sb = Sandbox::new();
    let text = std::fs::read_to_string(repo_file("schema/tests/fixtures/v1.8/demo.json")).expect("fixture");
    let out = sb.cmd(&["report", &repo_file("schema/tests/fixtures/v1.8/demo.json")]);
    assert_exit!(out, 0);
    assert!(stdout(&out).contains("Conditions when measuring started: host load average "), "{}", stdout(&out));
    let mut v: serde_json::Value = serde_json::from_str(&text).expect("json");
    v["provenance"]["executions"][0]["conditions"] = serde_json::json!({
        "load_average_1m": 0.1, "logical_cpus": 16, "gpu_performance_state": "P8", "gpu_max_sm_clock_mhz": 1980,
        "gpu_application_sm_clock_mhz": 1755, "gpu_power_limit_w": 300.0, "gpu_default_power_limit_w": 700.0,
        "gpu_compute_mode": "Default", "gpu_other_processes": 2, "gpu_other_processes_memory_bytes": 4_000_000_000u64
    });
    let shared = sb.write("shared.json", &v.to_string());
    let out = sb.cmd(&["report", shared.to_str().expect("utf8")]);
    assert_exit!(out, 0);
    let said = stdout(&out);
    assert!(
        said.contains(
            "power limit 300 W (default 700 W), compute mode Default, 2 other processes on the GPU, holding 4.0 GB"
        ),
        "{said}"
    );
    assert!(said.contains("**Caution:** the GPU's power limit was 300 W, below its default 700 W"), "{said}");
    assert!(said.contains("**Caution:** 2 other processes used the GPU when the run started"), "{said}");
    assert!(!said.contains("load average was"), "an idle host: {said}");
}

#[test]
fn report_warns_when_the_diffusion_output_at_parity_is_far_less_text_than_the_baselines() {
    let sb = Sandbox::new();
    let path = repo_file("schema/tests/fixtures/v1.8/demo.json");
    let less = "the diffusion output has 0.0 words per continuation";
    let out = sb.cmd(&["report", &path]);
    assert_exit!(out, 0);
    assert!(!stdout(&out).contains("words per continuation"), "{}", stdout(&out));
    // Every diffusion continuation decoded to nothing (end-of-sequence padding), its quality values unchanged.
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture")).expect("json");
    for c in v["cells"].as_array_mut().expect("cells") {
        if c["key"]["sampler"] != "ar_greedy" {
            for g in c.get_mut("generations").and_then(|g| g.as_array_mut()).into_iter().flatten() {
                g["text"] = "".into();
            }
        }
    }
    let empty = sb.write("empty.json", &v.to_string());
    let out = sb.cmd(&["report", empty.to_str().expect("utf8")]);
    assert_exit!(out, 0);
    assert!(stdout(&out).contains(less) && stdout(&out).contains("section 4.2.3"), "{}", stdout(&out));
}
