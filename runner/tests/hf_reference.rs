//! jobs/hf_reference.py, the PyTorch + HF transformers twin of `dllm-bench run`, against the runner on the CPU
//! (tiny synthetic models, both of HF's attention implementations, eager and sdpa):
//! - it resolves configs as the runner does: for every config/*.toml and two tiny ones, with and without
//!   overrides, the same cells, resolved config and config_source (`hf_reference.py --plan` against
//!   `plan::resolve`), and it refuses (exit 2) every invalid config the runner refuses;
//! - its bundles pass `dllm-bench validate`, and their cells, models, prompt count and per-repetition figures
//!   that do not depend on the clock (token counts, prompt indices, forward passes, steps timed, which optional
//!   fields are present, the roofline counts where both do the same work) equal a real `dllm-bench run` of the
//!   same config and overrides; jobs/compare_bundles.py reads the two.
//!
//! Needs the Python venv that scripts/install-deps.sh installs (.tools/hf-reference: torch and transformers);
//! without it the tests are skipped with a loud message, unless DLLM_BENCH_REQUIRE_HF=1 (scripts/test.sh sets it),
//! which turns the skip into a failure. DLLM_BENCH_HF_PYTHON names another interpreter with both packages.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Instant;

use clap::Parser;
use schema::{Bundle, CellKey, CellStatus, GridConfig, ModelKind, Repetition};

use crate::assert_exit;
use crate::util::{Sandbox, stderr};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().expect("repo root")
}

/// The venv's interpreter when it imports torch and transformers; None (after a loud message) when it does not,
/// and a failure then if DLLM_BENCH_REQUIRE_HF is set.
fn hf_python() -> Option<&'static Path> {
    static PYTHON: OnceLock<Option<PathBuf>> = OnceLock::new();
    PYTHON
        .get_or_init(|| {
            let python = std::env::var_os("DLLM_BENCH_HF_PYTHON")
                .map(PathBuf::from)
                .unwrap_or_else(|| repo().join(".tools/hf-reference/venv/bin/python"));
            let check = Command::new(&python)
                .args(["-c", "import tomllib, torch, transformers; print(torch.__version__, transformers.__version__)"])
                .output();
            match check {
                Ok(o) if o.status.success() => {
                    eprintln!("hf_reference tests: {} (torch, transformers {})", python.display(), stdout_line(&o));
                    Some(python)
                }
                other => {
                    let why = match other {
                        Ok(o) => String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or_default().to_string(),
                        Err(e) => e.to_string(),
                    };
                    let msg = format!(
                        "NO PYTHON WITH TORCH AND TRANSFORMERS at {} ({why}): the jobs/hf_reference.py tests did NOT \
                         run (scripts/install-deps.sh installs the venv)",
                        python.display()
                    );
                    assert!(
                        std::env::var_os("DLLM_BENCH_REQUIRE_HF").is_none(),
                        "{msg}, and DLLM_BENCH_REQUIRE_HF is set"
                    );
                    use std::io::Write;
                    let _ = writeln!(std::io::stderr().lock(), "\n!!!!!!!!!! {msg} !!!!!!!!!!\n");
                    None
                }
            }
        })
        .as_deref()
}

/// [`hf_python`] for the test `test`: when there is no venv, a visible skip line for this test (written past
/// the test harness's capture, so that a plain `cargo test` shows it) and `None`.
pub(crate) fn hf_python_or_skip(test: &str) -> Option<&'static Path> {
    let python = hf_python();
    if python.is_none() {
        use std::io::Write;
        // Not eprintln!: the harness captures that for a passing test.
        let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: no Python with torch and transformers (see above)");
    }
    python
}

fn stdout_line(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// `python jobs/hf_reference.py ARGS`, from `dir`, with `cache` as the HF cache and one torch thread (two
/// cores run the whole suite at once).
fn hf_reference(python: &Path, dir: &Path, cache: &Path, args: &[&str]) -> Output {
    Command::new(python)
        .arg(repo().join("jobs/hf_reference.py"))
        .args(args)
        .current_dir(dir)
        .env("HF_HUB_CACHE", cache)
        .env_remove("HF_HOME")
        .env("HF_HUB_OFFLINE", "1")
        .env("OMP_NUM_THREADS", "1")
        .output()
        .expect("run hf_reference.py")
}

/// Multiple blocks, low-confidence remasking, output_tokens; prompt indices wrap around the 3 prompts.
const TINY_A: &str = r#"
[run]
name = "hf_reference_a"
device = "cpu"
dtype = "f32"
warmup = 1
repetitions = 2
seed = 0

[prompts]
source = "embedded"
count = 3

[grid]
seq_lengths = [13, 20]
batch_sizes = [1, 2]
steps = [2, 4]
samplers = ["reference", "threshold"]
thresholds = [2.0, 0.0]
output_tokens = 8
block_length = 4

[[models]]
kind = "llama"
id = "dllm-bench/synthetic-llama-hfref-a"

[models.synthetic]
preset = "tiny"
seed = 1

[[models]]
kind = "llada"
id = "dllm-bench/synthetic-llada-hfref-a"

[models.synthetic]
preset = "tiny"
seed = 2
"#;

/// prompt_fraction (N = 13 rounds 6.5 up), one block, random remasking at a temperature, EOS suppressed, a prompt
/// preset, synthetic layer and hidden overrides, a [quality] table (left out by the reference); run with
/// overrides ([`B_OVERRIDES`]).
const TINY_B: &str = r#"
[run]
name = "hf_reference_b"
device = "cpu"
dtype = "f32"
warmup = 2
repetitions = 5
seed = 7

[prompts]
source = "embedded"
preset = "small"

[grid]
seq_lengths = [64]
batch_sizes = [8]
steps = [64]
prompt_fraction = 0.5
remasking = "random"
temperature = 0.5
eos = "suppress"

[[models]]
kind = "llama"
id = "dllm-bench/synthetic-llama-hfref-b"

[models.synthetic]
preset = "tiny"
seed = 4
layers = 1

[[models]]
kind = "llada"
id = "dllm-bench/synthetic-llada-hfref-b"

[models.synthetic]
preset = "tiny"
seed = 5
hidden = 32
layers = 3

[quality]
parity_metric = "rouge_l_f1"
"#;

const B_OVERRIDES: &[&str] = &[
    "--seq-len",
    "13,11",
    "--batch-size",
    "3",
    "--steps",
    "3,6",
    "--warmup",
    "1",
    "--repetitions",
    "2",
    "--max-prompts",
    "5",
];

#[derive(clap::Parser)]
struct Flags {
    #[command(flatten)]
    config: runner::plan::ConfigArgs,
}

/// A resolution: the cells, the resolved config without `[quality]` (the reference stores none), config_source.
type Plan = (Vec<CellKey>, GridConfig, String);

/// The runner's resolution of `--config PATH FLAGS`: (cells, config without quality, config_source), or the error.
fn runner_plan(path: &str, flags: &[&str]) -> Result<Plan, String> {
    let args =
        Flags::try_parse_from(["dllm-bench", "--config", path].iter().chain(flags)).map_err(|e| e.to_string())?;
    let resolved = runner::plan::resolve(&args.config).map_err(|e| format!("{e:#}"))?;
    let mut config = resolved.config.clone();
    config.quality = None;
    Ok((resolved.config.cells(), config, resolved.source))
}

/// hf_reference.py's resolution (`--plan`), or its exit status and stderr.
fn python_plan(python: &Path, dir: &Path, path: &str, flags: &[&str]) -> Result<Plan, String> {
    let out = hf_reference(python, dir, &dir.join("hub"), &[&["--config", path, "--plan"], flags].concat());
    if !out.status.success() {
        return Err(format!("exit {:?}: {}", out.status.code(), stderr(&out)));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--plan prints JSON");
    let cells = serde_json::from_value(v["cells"].clone()).expect("cells are cell keys");
    let config = serde_json::from_value(v["config"].clone()).expect("a GridConfig");
    Ok((cells, config, v["config_source"].as_str().expect("config_source").to_string()))
}

#[test]
fn plan_resolves_configs_as_the_runner() {
    let Some(python) = hf_python_or_skip("hf_reference::plan_resolves_configs_as_the_runner") else { return };
    let started = Instant::now();
    let sb = Sandbox::new();
    // Absolute paths: the runner's resolution runs in this process, the reference in the sandbox.
    let tiny = [sb.write("a.toml", TINY_A), sb.write("b.toml", TINY_B)].map(|p| p.display().to_string());
    let mut configs: Vec<String> = std::fs::read_dir(repo().join("config"))
        .expect("config/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .map(|p| p.display().to_string())
        .collect();
    configs.sort();
    assert!(configs.len() >= 5, "{configs:?}");
    configs.extend(tiny);
    let override_sets: [&[&str]; 6] = [
        &[],
        &["--samplers", "threshold,prefix+threshold", "--thresholds", "0.9,0.25,1"],
        &["--samplers", "reference,dual", "--steps", "8"],
        B_OVERRIDES,
        &["--seq-len", "100,64", "--batch-size", "2,1", "--steps", "32,8"],
        &["--max-prompts", "100", "--device", "cuda:1", "--dtype", "bf16", "--warmup", "0", "--repetitions", "1"],
    ];
    let mut compared = 0;
    for config in &configs {
        for flags in override_sets {
            let runner = runner_plan(config, flags);
            let python = python_plan(python, sb.path(), config, flags);
            match (&runner, &python) {
                (Ok(r), Ok(p)) => {
                    assert_eq!(p.0, r.0, "{config} {flags:?}: cells");
                    assert_eq!(p.1, r.1, "{config} {flags:?}: resolved config (without [quality])");
                    assert_eq!(p.2, r.2, "{config} {flags:?}: config_source");
                    compared += 1;
                }
                (Err(_), Err(e)) => assert!(e.starts_with("exit Some(2)"), "{config} {flags:?}: {e}"),
                _ => panic!("{config} {flags:?}: the runner says {runner:?}\nhf_reference.py says {python:?}"),
            }
        }
    }
    assert!(compared >= 20, "only {compared} resolutions compared");

    // Configs the runner refuses: so does the reference (exit 2), and both accept the valid variants.
    let cases: &[(&str, &str, &str)] = &[
        ("seq_lengths = [13, 20]", "seq_lengths = [13, 13]", "duplicate N"),
        ("batch_sizes = [1, 2]", "batch_sizes = [2, 2]", "duplicate B"),
        ("steps = [2, 4]", "steps = [4, 4]", "duplicate K"),
        ("steps = [2, 4]", "steps = []", "LLaDA without steps"),
        ("steps = [2, 4]", "steps = [3]", "K not a multiple of the blocks"),
        ("steps = [2, 4]", "steps = [256]", "more than 16 steps per output token"),
        ("block_length = 4", "block_length = 0", "block_length 0"),
        ("block_length = 4", "block_length = 3", "block_length not dividing N_out"),
        ("block_length = 4", "block_lenght = 4", "unknown field in [grid]"),
        ("seed = 0\n", "sed = 0\n", "unknown field in [run]"),
        ("preset = \"tiny\"\nseed = 1", "preset = \"tiny\"\nseed = 1\nheads = 2", "unknown synthetic field"),
        ("[[models]]", "[qualty]\n\n[[models]]", "unknown table"),
        ("count = 3", "count = 3\npreset = \"small\"", "count and preset disagree"),
        ("count = 3", "count = 0", "no prompts"),
        ("count = 3", "count = 3\npath = \"p.txt\"", "path without source = file"),
        ("source = \"embedded\"", "source = \"file\"", "source = file without path"),
        ("seq_lengths = [13, 20]", "seq_lengths = [8]", "N leaves no prompt"),
        ("seq_lengths = [13, 20]", "seq_lengths = [0, 13]", "N = 0"),
        ("batch_sizes = [1, 2]", "batch_sizes = [1.5]", "a float batch size"),
        ("batch_sizes = [1, 2]", "batch_sizes = [-1]", "a negative batch size"),
        ("output_tokens = 8", "output_tokens = 8\nprompt_fraction = 0.5", "output_tokens and prompt_fraction"),
        ("output_tokens = 8\nblock_length = 4", "prompt_fraction = 1.0", "prompt_fraction 1"),
        ("block_length = 4", "block_length = 4\ntemperature = -1.0", "negative temperature"),
        ("block_length = 4", "block_length = 4\nremasking = \"high\"", "unknown remasking"),
        ("device = \"cpu\"", "device = \"gpu\"", "unknown device"),
        ("dtype = \"f32\"", "dtype = \"f64\"", "unknown dtype"),
        ("repetitions = 2", "repetitions = 0", "no repetitions"),
        ("repetitions = 2", "repetitions = 20000", "too many repetitions"),
        ("name = \"hf_reference_a\"", "name = \"a b\"", "run name with a space"),
        ("seed = 0\n", "seed = \"x\"\n", "a string seed"),
        ("id = \"dllm-bench/synthetic-llada-hfref-a\"", "id = \"dllm-bench/synthetic-llama-hfref-a\"", "one id twice"),
        ("id = \"dllm-bench/synthetic-llama-hfref-a\"", "id = \"a/b/c\"", "not a hub id"),
        ("preset = \"tiny\"\nseed = 1", "preset = \"tiny\"\nseed = 1\nhidden = 30", "unbuildable hidden size"),
        ("preset = \"tiny\"\nseed = 1", "preset = \"tiny\"\nseed = 1\nlayers = 0", "0 layers"),
        ("preset = \"tiny\"\nseed = 1", "preset = \"tiny\"\nseed = 1\nshards = 99", "more shards than tensors"),
        ("[[models]]", "[quality]\nparity_metric = \"bleu\"\n\n[[models]]", "unknown parity metric"),
        ("name = \"hf_reference_a\"\n", "", "no run name"),
        ("thresholds = [2.0, 0.0]", "thresholds = [2.0, 2.0]", "duplicate threshold"),
        ("thresholds = [2.0, 0.0]", "thresholds = [2.0, -0.5]", "negative threshold"),
        ("thresholds = [2.0, 0.0]", "thresholds = []", "a threshold series without thresholds"),
        ("samplers = [\"reference\", \"threshold\"]", "samplers = []", "no sampler series"),
        ("samplers = [\"reference\", \"threshold\"]", "samplers = [\"prefix\", \"prefix\"]", "duplicate series"),
        ("samplers = [\"reference\", \"threshold\"]", "samplers = [\"threshold\"]", "steps without K series"),
        ("samplers = [\"reference\", \"threshold\"]", "samplers = [\"reference\"]", "thresholds without series"),
        ("samplers = [\"reference\", \"threshold\"]", "samplers = [\"fast\"]", "unknown series"),
    ];
    for (from, to, what) in cases {
        assert!(TINY_A.contains(from), "{what}: {from:?} not in TINY_A");
        let path = sb.write("invalid.toml", &TINY_A.replacen(from, to, 1));
        let path = path.to_str().expect("utf8");
        let runner = runner_plan(path, &[]);
        assert!(runner.is_err(), "{what}: the runner accepts it");
        match python_plan(python, sb.path(), path, &[]) {
            Err(e) => assert!(e.starts_with("exit Some(2)") && e.contains("error:"), "{what}: {e}"),
            Ok(_) => panic!("{what}: hf_reference.py accepts a config the runner refuses: {runner:?}"),
        }
    }
    // Refused by the reference alone: HF's attention cannot upcast q, k and v as the runner does.
    let path = sb.write("f32.toml", &TINY_A.replacen("seed = 0\n", "seed = 0\nattention_f32 = true\n", 1));
    let path = path.to_str().expect("utf8");
    assert!(runner_plan(path, &[]).is_ok());
    let e = python_plan(python, sb.path(), path, &[]).expect_err("attention_f32 refused");
    assert!(e.starts_with("exit Some(2)") && e.contains("attention_f32"), "{e}");
    eprintln!(
        "hf_reference.py --plan: {compared} resolutions, {} refusals in {:.1} s",
        cases.len(),
        started.elapsed().as_secs_f64()
    );
}

/// The figures of a repetition that do not depend on the clock or the weights' bytes: token counts, prompt
/// indices, forward passes, the number of steps timed, which optional fields are present, and the roofline
/// counts (the LLaDA FLOPs only when both compute the LM head over the same positions).
fn countable(r: &Repetition, same_llada_work: bool, llada: bool) -> Repetition {
    let zero = |v: Option<f64>| v.map(|_| 0.0);
    let present = |v: Option<u64>| v.map(|_| 0);
    Repetition {
        e2e_ms: 0.0,
        prefill_ms: zero(r.prefill_ms),
        first_block_ms: zero(r.first_block_ms),
        step_ms: r.step_ms.as_ref().map(|s| vec![0.0; s.len()]),
        output_bytes: 0,
        peak_allocated_bytes: present(r.peak_allocated_bytes),
        peak_reserved_bytes: present(r.peak_reserved_bytes),
        peak_rss_bytes: present(r.peak_rss_bytes),
        device_used_bytes: present(r.device_used_bytes),
        flop_count: if llada && !same_llada_work { present(r.flop_count) } else { r.flop_count },
        ..r.clone()
    }
}

fn compare(runner: &Bundle, hf: &Bundle, same_llada_work: bool, what: &str) {
    assert_eq!(hf.provenance.tool, "hf-transformers-reference", "{what}");
    assert_eq!(hf.provenance.planned_cells, runner.provenance.planned_cells, "{what}: planned cells");
    let mut config = runner.provenance.config.clone();
    config.quality = None;
    assert_eq!(hf.provenance.config, config, "{what}: the stored config (without [quality])");
    let mut models = runner.models.clone();
    // The ids are compared; where the runner's loader found them (`special_sources`) is its own provenance.
    models.iter_mut().for_each(|m| {
        m.commit = None;
        m.tokenizer.special_sources = None;
    });
    assert_eq!(hf.models, models, "{what}: models (kind, shapes, parameters, dtype, tokenizer)");
    assert_eq!(hf.prompt_set.count, runner.prompt_set.count, "{what}: prompt count");
    let keys = |b: &Bundle| b.cells.iter().map(|c| c.key.clone()).collect::<Vec<_>>();
    assert_eq!(keys(hf), keys(runner), "{what}: cell keys, in order");
    for (h, r) in hf.cells.iter().zip(&runner.cells) {
        let cell = format!("{what}: {}", r.key);
        assert_eq!(h.status, CellStatus::Ok, "{cell}");
        assert_eq!(r.status, CellStatus::Ok, "{cell}");
        assert_eq!(h.warmup_runs, r.warmup_runs, "{cell}: warm-up runs");
        assert_eq!(h.repetitions.len(), r.repetitions.len(), "{cell}: repetitions");
        let llada = r.key.sampler != schema::Sampler::ArGreedy;
        for (i, (hr, rr)) in h.repetitions.iter().zip(&r.repetitions).enumerate() {
            assert_eq!(
                countable(hr, same_llada_work, llada),
                countable(rr, same_llada_work, llada),
                "{cell}, repetition {i}: token counts, prompts, passes, fields present, roofline"
            );
            if let Some(t) = r.key.threshold {
                // The grid's thresholds make the forwards independent of the weights: above 1 one token per
                // step (N_out forwards), 0 a whole block per step (one forward per block).
                let (n_out, block) = (r.key.output_tokens, r.key.block_length.expect("block"));
                let want = if t.value() > 1.0 { n_out } else { n_out / block };
                assert_eq!(hr.forward_passes, Some(want), "{cell}: forwards");
            }
            assert_eq!(hr.output_tokens, u64::from(r.key.batch_size * r.key.output_tokens), "{cell}");
            assert!(hr.e2e_ms > 0.0 && hr.output_bytes > 0, "{cell}: {hr:?}");
        }
    }
}

#[test]
fn bundles_equal_a_runner_run_on_both_attention_implementations() {
    let Some(python) = hf_python_or_skip("hf_reference::bundles_equal_a_runner_run_on_both_attention_implementations")
    else {
        return;
    };
    let started = Instant::now();
    let sb = Sandbox::new();
    let cache = sb.cache();
    // Each config with both attention implementations, and each LLaDA logits mode once.
    struct Case {
        name: &'static str,
        toml: &'static str,
        overrides: &'static [&'static str],
        modes: [(&'static str, &'static str); 2],
    }
    let cases = [
        Case { name: "a.toml", toml: TINY_A, overrides: &[], modes: [("sdpa", "full"), ("eager", "block")] },
        Case { name: "b.toml", toml: TINY_B, overrides: B_OVERRIDES, modes: [("eager", "full"), ("sdpa", "block")] },
    ];
    for Case { name, toml, overrides, modes } in cases {
        sb.write(name, toml);
        let run_dir = sb.path().join(format!("{name}.run"));
        let run_dir = run_dir.to_str().expect("utf8");
        let out = sb.cmd(&[&["run", "--config", name, "--run-dir", run_dir, "-q"], overrides].concat());
        assert_exit!(out, 0);
        let runner_path = Path::new(run_dir).join("bundle.json");
        let runner =
            schema::read_bundle(&std::fs::read_to_string(&runner_path).expect("runner bundle")).expect("valid");
        for (attn, logits) in modes {
            let what = format!("{name} --attn {attn} --llada-logits {logits}");
            let t = Instant::now();
            let path = sb.path().join(format!("{name}-hf-{attn}.json"));
            let path = path.to_str().expect("utf8");
            let args = [
                &["--config", name, "--attn", attn, "--llada-logits", logits, "--threads", "1", "--output", path],
                overrides,
            ]
            .concat();
            let out = hf_reference(python, sb.path(), &cache, &args);
            assert_exit!(out, 0);
            let log = stderr(&out);
            // The implementation asked for is the one HF used, for both models (no silent fallback).
            assert_eq!(log.matches(&format!("attention {attn}) built")).count(), 2, "{what}: {log}");
            assert_exit!(sb.cmd(&["validate", path]), 0);
            let hf = schema::read_bundle(&std::fs::read_to_string(path).expect("hf bundle")).expect("valid");
            assert!(hf.provenance.attention.starts_with(&format!("hf-transformers {attn} ")), "{what}");
            compare(&runner, &hf, logits == "block", &what);
            let table = Command::new(python)
                .arg(repo().join("jobs/compare_bundles.py"))
                .args([runner_path.to_str().expect("utf8"), path])
                .output()
                .expect("compare_bundles.py");
            assert_exit!(table, 0);
            eprintln!("{what}: {} cells equal the runner's in {:.1} s", hf.cells.len(), t.elapsed().as_secs_f64());
        }
        // The models are the runner's kinds: one llama, one llada.
        let kinds: Vec<ModelKind> = runner.models.iter().map(|m| m.kind).collect();
        assert_eq!(kinds, [ModelKind::Llama, ModelKind::Llada]);
    }
    eprintln!("hf_reference.py bundles: {:.1} s", started.elapsed().as_secs_f64());
}
