//! jobs/hf_reference.py, the PyTorch + HF transformers twin of `dllm-bench run`, against the runner on the CPU
//! (tiny synthetic models, both of HF's attention implementations, eager and sdpa):
//! - it resolves configs as the runner does: for every config/*.toml and two tiny ones, with and without
//!   overrides, the same cells, resolved config and config_source (`hf_reference.py --plan` against
//!   `plan::resolve`), and it refuses (exit 2) every invalid config the runner refuses;
//! - its bundles pass `dllm-bench validate`, and their cells, models, prompt count and per-repetition figures
//!   that do not depend on the clock (token counts, prompt indices, forward passes, steps timed, which optional
//!   fields are present, the roofline counts where both do the same work) equal a real `dllm-bench run` of the
//!   same config and overrides; `dllm-bench compare` reads the two.
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
                .args(["-c", "import torch, transformers; print(torch.__version__, transformers.__version__)"])
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
    hf_reference_command(python, dir, cache, args).output().expect("run hf_reference.py")
}

/// The command [`hf_reference`] runs, to start it and signal it.
fn hf_reference_command(python: &Path, dir: &Path, cache: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(python);
    cmd.arg(repo().join("jobs/hf_reference.py"))
        .args(args)
        .current_dir(dir)
        .env("HF_HUB_CACHE", cache)
        .env_remove("HF_HOME")
        .env("HF_HUB_OFFLINE", "1")
        .env("OMP_NUM_THREADS", "1")
        .env("DLLM_BENCH", env!("CARGO_BIN_EXE_dllm-bench"));
    cmd
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

/// `dllm-bench plan --json --config PATH FLAGS` (the one resolution hf_reference.py reads), or its exit status and
/// stderr.
fn plan_json(sb: &Sandbox, path: &str, flags: &[&str]) -> Result<serde_json::Value, String> {
    let out = sb.cmd(&[&["plan", "--json", "--config", path], flags].concat());
    if !out.status.success() {
        return Err(format!("exit {:?}: {}", out.status.code(), stderr(&out)));
    }
    Ok(serde_json::from_slice(&out.stdout).expect("plan --json prints JSON"))
}

/// `plan --json` says what the schema and metrics functions say: the config `plan::resolve` resolves (overrides
/// applied), its cells as `GridConfig::cells` expands them, each model's shape, and each cell's roofline counts
/// as `metrics::roofline` counts them; and it refuses (exit 2) what `resolve` refuses.
#[test]
fn plan_json_is_the_runners_resolution() {
    let sb = Sandbox::new();
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
    let override_sets: [&[&str]; 4] = [
        &[],
        &["--samplers", "threshold,prefix+threshold", "--thresholds", "0.9,0.25,1"],
        B_OVERRIDES,
        &["--max-prompts", "100", "--device", "cuda:1", "--dtype", "bf16", "--warmup", "0", "--repetitions", "1"],
    ];
    let (mut compared, mut counted) = (0, 0);
    for config in &configs {
        for flags in override_sets {
            let args = Flags::try_parse_from(["dllm-bench", "--config", config].iter().chain(flags)).expect("flags");
            let resolved = runner::plan::resolve(&args.config).map_err(|e| format!("{e:#}"));
            let plan = plan_json(&sb, config, flags);
            let (r, p) = match (&resolved, &plan) {
                (Ok(r), Ok(p)) => (r, p),
                (Err(_), Err(e)) => {
                    assert!(e.starts_with("exit Some(2)"), "{config} {flags:?}: {e}");
                    continue;
                }
                _ => panic!("{config} {flags:?}: resolve says {resolved:?}\nplan --json says {plan:?}"),
            };
            let what = format!("{config} {flags:?}");
            let config_back: GridConfig = serde_json::from_value(p["config"].clone()).expect("a GridConfig");
            assert_eq!(config_back, r.config, "{what}: resolved config");
            assert_eq!(p["config_source"], r.source.as_str(), "{what}");
            assert_eq!(p["config_sha256"], r.sha256().as_str(), "{what}");
            assert_eq!(p["prompt_count"], r.config.prompts.prompt_count(), "{what}");
            let cells = p["cells"].as_array().expect("cells");
            let keys: Vec<CellKey> =
                cells.iter().map(|c| serde_json::from_value(c["key"].clone()).expect("a cell key")).collect();
            assert_eq!(keys, r.config.cells(), "{what}: cells");
            assert!(!keys.is_empty(), "{what}");
            let bytes = metrics::roofline::precision_bytes(r.config.run.dtype);
            for (m, pm) in r.config.models.iter().zip(p["models"].as_array().expect("models")) {
                assert_eq!(pm["id"], m.id.as_str(), "{what}");
                let shape: schema::ModelShape = serde_json::from_value(pm["shape"].clone()).expect("a shape");
                let preset = m.synthetic.as_ref().map_or(schema::grid::SynthPreset::Real, |s| s.preset);
                let own = &p["presets"][serde_json::to_value(preset).unwrap().as_str().unwrap()]
                    [serde_json::to_value(m.kind).unwrap().as_str().unwrap()]["shape"];
                if m.synthetic.as_ref().is_none_or(|s| s.hidden.is_none() && s.layers.is_none()) {
                    assert_eq!(&pm["shape"], own, "{what}: {} has its preset's shape", m.id);
                }
                if let Some(l) = m.synthetic.as_ref().and_then(|s| s.layers) {
                    assert_eq!(shape.layers, l, "{what}");
                }
                assert_eq!(pm["parameters"], metrics::roofline::parameters(&shape), "{what}");
                for (key, c) in keys.iter().zip(cells).filter(|(k, _)| k.model == m.id) {
                    let (b, prompt, n_out) =
                        (u64::from(key.batch_size), u64::from(key.prompt_tokens), u64::from(key.output_tokens));
                    let roof = &c["roofline"];
                    if key.sampler == schema::key::Sampler::ArGreedy {
                        let w = metrics::roofline::autoregressive(&shape, b, prompt, n_out, bytes);
                        assert_eq!(roof["work"]["flop_count"], w.flops, "{what} {key}");
                        assert_eq!(roof["work"]["weights_read_bytes"], w.weights_read_bytes, "{what} {key}");
                        assert_eq!(roof["work"]["kv_cache_bytes"], w.kv_cache_bytes.expect("AR has a cache"));
                        assert_eq!(roof["work"]["forwards"], n_out, "{what} {key}");
                    } else if key.cache.is_none() {
                        let block = u64::from(key.block_length.expect("a LLaDA block"));
                        let w = metrics::roofline::diffusion(&shape, b, prompt + n_out, block, 1, bytes);
                        assert_eq!(roof["forward"]["flop_count"], w.flops, "{what} {key}");
                        assert_eq!(roof["forward"]["weights_read_bytes"], w.weights_read_bytes, "{what} {key}");
                        let all = metrics::roofline::diffusion(&shape, b, prompt + n_out, prompt + n_out, 1, bytes);
                        assert_eq!(roof["forward_all_logits"]["flop_count"], all.flops, "{what} {key}");
                        match key.steps {
                            Some(k) => assert_eq!(roof["work"]["flop_count"], w.flops * u64::from(k), "{what} {key}"),
                            None => {
                                assert!(roof["work"].is_null(), "{what} {key}: a threshold's forwards are measured")
                            }
                        }
                    }
                    counted += 1;
                }
            }
            compared += 1;
        }
    }
    assert!(compared >= 20 && counted >= 200, "only {compared} resolutions, {counted} cells compared");
    // --shapes and --layers: every model counted with that preset and that many layers.
    let p = plan_json(&sb, &configs[configs.len() - 2], &["--shapes", "real", "--layers", "1"]).expect("plan");
    for m in p["models"].as_array().expect("models") {
        let kind = m["kind"].as_str().expect("kind");
        let mut real = p["presets"]["real"][kind]["shape"].clone();
        real["layers"] = 1.into();
        assert_eq!(m["shape"], real, "{m}");
        assert_eq!(m["preset"], "real");
    }
    assert_exit!(sb.cmd(&["plan", "--layers", "1"]), 2);

    // Configs the runner refuses: plan --json exits 2 and names the problem.
    let cases: &[(&str, &str, &str)] = &[
        ("seq_lengths = [13, 20]", "seq_lengths = [13, 13]", "duplicate N"),
        ("steps = [2, 4]", "steps = [3]", "K not a multiple of the blocks"),
        ("block_length = 4", "block_lenght = 4", "unknown field in [grid]"),
        ("count = 3", "count = 0", "no prompts"),
        ("id = \"dllm-bench/synthetic-llama-hfref-a\"", "id = \"a/b/c\"", "not a hub id"),
        ("preset = \"tiny\"\nseed = 1", "preset = \"tiny\"\nseed = 1\nhidden = 30", "unbuildable hidden size"),
        ("thresholds = [2.0, 0.0]", "thresholds = [2.0, -0.5]", "negative threshold"),
    ];
    for (from, to, what) in cases {
        assert!(TINY_A.contains(from), "{what}: {from:?} not in TINY_A");
        let path = sb.write("invalid.toml", &TINY_A.replacen(from, to, 1));
        match plan_json(&sb, path.to_str().expect("utf8"), &[]) {
            Err(e) => assert!(e.starts_with("exit Some(2)") && e.contains("error:"), "{what}: {e}"),
            Ok(_) => panic!("{what}: plan --json accepts it"),
        }
    }
}

/// hf_reference.py resolves nothing itself: the runner's refusal is its refusal (exit 2, the runner's message),
/// and it refuses what HF cannot run (run.attention_f32) on top.
#[test]
fn hf_reference_refuses_what_the_runner_refuses() {
    let Some(python) = hf_python_or_skip("hf_reference::hf_reference_refuses_what_the_runner_refuses") else {
        return;
    };
    let sb = Sandbox::new();
    let path = sb.write("bad.toml", &TINY_A.replacen("steps = [2, 4]", "steps = [3]", 1));
    let out = hf_reference(python, sb.path(), &sb.path().join("hub"), &["--config", path.to_str().expect("utf8")]);
    assert_exit!(out, 2);
    let runner = sb.cmd(&["plan", "--config", path.to_str().expect("utf8")]);
    assert_exit!(runner, 2);
    let msg = stderr(&runner);
    assert!(stderr(&out).contains(msg.trim().trim_start_matches("error: ")), "{}\nvs {msg}", stderr(&out));
    let path = sb.write("f32.toml", &TINY_A.replacen("seed = 0\n", "seed = 0\nattention_f32 = true\n", 1));
    let out = hf_reference(python, sb.path(), &sb.path().join("hub"), &["--config", path.to_str().expect("utf8")]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("attention_f32"), "{}", stderr(&out));
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
            let table = sb.cmd(&["compare", "--markdown", runner_path.to_str().expect("utf8"), path]);
            assert_exit!(table, 0);
            let rows = String::from_utf8_lossy(&table.stdout).lines().filter(|l| l.starts_with("| ")).count();
            assert_eq!(rows, hf.cells.len() + 2, "{what}: a header, its rule and one row per cell");
            eprintln!("{what}: {} cells equal the runner's in {:.1} s", hf.cells.len(), t.elapsed().as_secs_f64());
        }
        // The models are the runner's kinds: one llama, one llada.
        let kinds: Vec<ModelKind> = runner.models.iter().map(|m| m.kind).collect();
        assert_eq!(kinds, [ModelKind::Llama, ModelKind::Llada]);
    }
    eprintln!("hf_reference.py bundles: {:.1} s", started.elapsed().as_secs_f64());
}

/// SIGTERM (a job's time limit, a capped call on a lent GPU) mid-grid: the finished cells are written as a partial
/// bundle that validates, the cell under way is dropped, and the exit status is the runner's 75.
#[test]
fn a_reference_run_stopped_by_sigterm_writes_its_finished_cells_as_a_partial_bundle() {
    let Some(python) = hf_python_or_skip("hf_reference::a_reference_run_stopped_by_sigterm_writes_its_finished_cells")
    else {
        return;
    };
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let sb = Sandbox::new();
    let cache = sb.cache();
    sb.write("a.toml", TINY_A);
    // The tokenizers the reference reads (output_bytes): written by one small run of the runner.
    let seed = sb.cmd(&["run", "--config", "a.toml", "--seq-len", "13", "--batch-size", "1", "--steps", "2", "-q"]);
    assert_exit!(seed, 0);
    let path = sb.path().join("stopped.json");
    // 20 cells of about half a second each (50 repetitions): the signal comes after the first.
    let args =
        ["--config", "a.toml", "--threads", "1", "--repetitions", "50", "--output", path.to_str().expect("utf8")];
    let mut child = hf_reference_command(python, sb.path(), &cache, &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run hf_reference.py");
    let mut log = String::new();
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    for line in lines.by_ref() {
        let line = line.expect("stderr line");
        log.push_str(&line);
        log.push('\n');
        if line.contains(": ok, median e2e") {
            let kill = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill");
            assert!(kill.success());
            break;
        }
    }
    for line in lines {
        log.push_str(&line.expect("stderr line"));
        log.push('\n');
    }
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(75), "{log}");
    assert!(log.contains("stopped by SIGTERM after ") && log.contains("is a partial bundle"), "{log}");
    let validate = sb.cmd(&["validate", path.to_str().expect("utf8")]);
    assert_exit!(validate, 0);
    // The fix it gives is the reference's (which does not resume), not the runner's --resume.
    let said = String::from_utf8_lossy(&validate.stdout).to_string();
    assert!(said.contains("valid but PARTIAL") && said.contains("measure the cells left with jobs/hf_reference.py"));
    assert!(!said.contains("--resume"), "{said}");
    let hf = schema::read_bundle(&std::fs::read_to_string(&path).expect("partial bundle")).expect("valid");
    let planned = hf.provenance.planned_cells.expect("planned_cells") as usize;
    assert!(!hf.cells.is_empty() && hf.cells.len() < planned, "{} of {planned} cells: {log}", hf.cells.len());
    // Every cell written is finished: all its repetitions, none cut.
    assert!(hf.cells.iter().all(|c| c.status == CellStatus::Ok && c.repetitions.len() == 50), "{log}");
    // Readers say it is partial.
    let report = sb.cmd(&["report", path.to_str().expect("utf8")]);
    assert_exit!(report, 0);
    assert!(String::from_utf8_lossy(&report.stdout).contains("**PARTIAL bundle: "), "{}", stderr(&report));
}
