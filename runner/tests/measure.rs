//! Measurement (issue 3) on the CPU: every timing and memory field of a run is present and consistent with the
//! definitions (prefill < e2e, ITL and T_gen through `metrics::derive`), the roofline counts are the schema's
//! formulas, an injected out-of-memory fails its cell while the grid goes on, `bench-kernels` prints its
//! figures, and a broken checkpoint is refused naming the file and the tensor.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use candle_core::{DType, Device, Tensor};
use metrics::{derive, roofline};
use runner::generate::{EosPolicy, LladaParams, generate_ar, generate_llada};
use runner::model::{LoadedModel, ModelFiles};
use runner::synth::{Preset, SynthSpec, write_synthetic};
use schema::grid::ModelKind;
use schema::{Bundle, CellStatus, Sampler};

use crate::assert_exit;
use crate::util::{Sandbox, stderr, stdout};

/// 12 cells (4 AR, 8 LLaDA) of tiny models, timing only (no quality): a few seconds in a debug build.
const CONFIG: &str = r#"
[run]
name = "measure"
device = "cpu"
dtype = "f32"
warmup = 1
repetitions = 3
seed = 0

[prompts]
source = "embedded"
count = 8

[grid]
seq_lengths = [40, 48]
batch_sizes = [1, 2]
steps = [4, 8]
output_tokens = 8
block_length = 8

[[models]]
kind = "llama"
id = "test-org/measure-llama"

[models.synthetic]
preset = "tiny"
seed = 1

[[models]]
kind = "llada"
id = "test-org/measure-llada"

[models.synthetic]
preset = "tiny"
seed = 2
"#;

/// `dllm-bench run --config CONFIG` in the sandbox with extra environment; the output and the bundle.
fn run_grid(sb: &Sandbox, env: &[(&str, &str)]) -> (Output, Bundle) {
    let config = sb.write("measure.toml", CONFIG);
    let results = sb.results();
    let out = Command::new(env!("CARGO_BIN_EXE_dllm-bench"))
        .args(["run", "--config", config.to_str().expect("utf8"), "-o", results.to_str().expect("utf8"), "-q"])
        .current_dir(sb.path())
        .env("HF_HUB_CACHE", sb.cache())
        .env_remove("HF_HOME")
        .env_remove(runner::device::INJECT_OOM_ENV)
        .envs(env.iter().copied())
        .output()
        .expect("run dllm-bench");
    let path = PathBuf::from(stdout(&out).trim());
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}\n{}", path.display(), stderr(&out)));
    (out, schema::read_bundle(&text).expect("valid bundle"))
}

/// |a - b| within a relative tolerance (floating-point formulas, not timing noise).
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn every_timing_and_memory_field_is_present_and_consistent_on_cpu() {
    let sb = Sandbox::new();
    let (out, b) = run_grid(&sb, &[]);
    assert_exit!(out, 0);
    assert_eq!(b.cells.len(), 12);
    for cell in &b.cells {
        let k = &cell.key;
        assert_eq!(cell.status, CellStatus::Ok, "{k}");
        assert_eq!(cell.repetitions.len(), 3, "{k}");
        let model = b.model(&k.model).expect("model of the cell");
        let (batch, n_out) = (u64::from(k.batch_size), u64::from(k.output_tokens));
        let dtype_bytes = roofline::precision_bytes(model.dtype);
        for r in &cell.repetitions {
            assert!(r.e2e_ms > 0.0 && r.e2e_ms.is_finite(), "{k}: e2e {}", r.e2e_ms);
            assert_eq!(r.prompt_indices.len(), k.batch_size as usize, "{k}");
            // Throughput: T_gen = B x N_out / L_e2e, per token and per decoded byte.
            assert_eq!(r.output_tokens, batch * n_out, "{k}");
            assert!(r.output_bytes > 0, "{k}");
            let tps = derive::tokens_per_s(r).expect("tokens/s");
            assert!(close(tps, (batch * n_out) as f64 / (r.e2e_ms / 1e3)), "{k}: {tps}");
            assert!(close(derive::bytes_per_s(r).expect("bytes/s"), r.output_bytes as f64 / (r.e2e_ms / 1e3)));
            // Memory on the CPU: the peak resident set; the device figures are CUDA's and absent here.
            let rss = r.peak_rss_bytes.expect("peak RSS on the CPU");
            assert!(rss > model.weights_bytes.expect("weights bytes"), "{k}: RSS {rss} holds the weights");
            assert_eq!((r.peak_allocated_bytes, r.peak_reserved_bytes, r.device_used_bytes), (None, None, None));
            assert_eq!(roofline::activation_bytes(r, model.weights_bytes), None, "no device peak, no split");
            // Roofline context: the schema's formulas for this cell (prompts are exactly prompt_tokens long).
            let prompt = u64::from(k.prompt_tokens);
            let work = match k.sampler {
                Sampler::ArGreedy => roofline::autoregressive(&model.shape, batch, prompt, n_out, dtype_bytes),
                _ => roofline::diffusion(
                    &model.shape,
                    batch,
                    u64::from(k.seq_len),
                    u64::from(k.block_length.expect("block")),
                    u64::from(k.steps.expect("K")),
                    dtype_bytes,
                ),
            };
            assert_eq!(r.weights_read_bytes, Some(work.weights_read_bytes), "{k}");
            assert_eq!(r.flop_count, Some(work.flops), "{k}");
            assert_eq!(r.kv_cache_bytes, work.kv_cache_bytes, "{k}");
            assert!(roofline::achieved_bytes_per_s(r).is_some_and(|x| x > 0.0));
            assert!(roofline::achieved_flops_per_s(r).is_some_and(|x| x > 0.0));
            match k.sampler {
                Sampler::ArGreedy => {
                    let prefill = r.prefill_ms.expect("prefill");
                    assert!(prefill > 0.0 && prefill < r.e2e_ms, "{k}: prefill {prefill} < e2e {}", r.e2e_ms);
                    assert_eq!(r.forward_passes, Some(k.output_tokens), "{k}: 1 prefill + N_out - 1 decodes");
                    let itl = derive::itl_ms(r, k.output_tokens).expect("ITL");
                    assert!(close(itl, (r.e2e_ms - prefill) / (n_out - 1) as f64) && itl > 0.0, "{k}");
                    assert_eq!(
                        r.kv_cache_bytes,
                        Some(roofline::kv_cache_bytes(&model.shape, batch, prompt + n_out - 1, 4))
                    );
                    assert!(r.step_ms.is_none() && r.first_block_ms.is_none(), "{k}");
                }
                _ => {
                    let steps = r.step_ms.as_ref().expect("step times");
                    assert_eq!(steps.len(), k.steps.expect("K") as usize, "{k}: one time per step");
                    assert!(steps.iter().all(|&s| s > 0.0), "{k}");
                    let sum: f64 = steps.iter().sum();
                    assert!(sum <= r.e2e_ms * (1.0 + 1e-9), "{k}: steps {sum} within e2e {}", r.e2e_ms);
                    let first = r.first_block_ms.expect("first block");
                    assert!(first > 0.0 && first <= r.e2e_ms, "{k}");
                    assert_eq!(r.forward_passes, k.steps, "{k}: NFE = K");
                    assert!(r.prefill_ms.is_none() && r.kv_cache_bytes.is_none(), "{k}");
                }
            }
        }
        let s = derive::cell_summary(cell);
        let nfe = match k.sampler {
            Sampler::ArGreedy => n_out,
            _ => u64::from(k.steps.expect("K")),
        };
        let per_forward = s.tokens_per_forward.expect("tokens per forward");
        // Per sequence: N_out over the forwards (a forward advances every row of the batch).
        assert!(close(per_forward, n_out as f64 / nfe as f64), "{k}: {per_forward}");
    }
}

#[test]
fn an_injected_out_of_memory_fails_its_cell_and_the_grid_goes_on() {
    let sb = Sandbox::new();
    let target = "test-org/measure-llada N=40 B=2 K=4";
    // With backtraces asked for, as on machines that set RUST_BACKTRACE: candle attaches one to its errors.
    let (out, b) = run_grid(&sb, &[(runner::device::INJECT_OOM_ENV, target), ("RUST_BACKTRACE", "1")]);
    assert_exit!(out, 1);
    assert!(stderr(&out).contains("1 of 12 cells failed"), "{}", stderr(&out));
    assert_eq!(b.cells.len(), 12, "the bundle is complete");
    assert_eq!(b.provenance.planned_cells, Some(12));
    for cell in &b.cells {
        if cell.key.to_string().contains(target) {
            let CellStatus::Oom { message } = &cell.status else { panic!("{}: {:?}", cell.key, cell.status) };
            for want in ["out of memory", "B=2", "N=40", "K=4", "32 prompt + 8 output tokens", "fix:"] {
                assert!(message.contains(want), "{want:?} in {message}");
            }
            assert!(!message.contains('\n'), "one line, no backtrace frames: {message}");
            assert!(cell.repetitions.is_empty(), "the fault hits the first measured run");
        } else {
            assert_eq!(cell.status, CellStatus::Ok, "{}", cell.key);
            assert_eq!(cell.repetitions.len(), 3);
        }
    }
    // The cells after the failed one (the grid goes llama first, then llada by N, B, K) were all measured.
    let last = b.cells.last().expect("cells");
    assert_eq!(last.status, CellStatus::Ok);
}

#[test]
fn out_of_memory_is_recognised_from_cuda_and_cublas_errors() {
    use runner::device::is_out_of_memory;
    assert!(is_out_of_memory(&anyhow::anyhow!("DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\")")));
    assert!(is_out_of_memory(&anyhow::anyhow!("CublasError(CUBLAS_STATUS_ALLOC_FAILED)").context("matmul")));
    assert!(!is_out_of_memory(&anyhow::anyhow!("non-finite values (NaN or inf) in the logits")));
}

// ---------------------------------------------------------------- timings at the generator level

fn tiny(dir: &Path, kind: ModelKind, repo: &str) -> LoadedModel {
    write_synthetic(dir, repo, kind, &SynthSpec::new(Preset::Tiny, 5)).expect("synth");
    let files = ModelFiles::from_hf_cache(dir, repo, "main").expect("files");
    LoadedModel::load(&files, kind, &Device::Cpu, DType::F32).expect("load")
}

#[test]
fn ar_token_times_add_up_to_e2e_and_give_the_itl() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = tiny(dir.path(), ModelKind::Llama, "test-org/t-llama");
    let prompts = vec![(1..=20).collect::<Vec<u32>>(), (30..=45).collect()];
    let n_out = 12;
    let out = generate_ar(&m, &prompts, n_out, EosPolicy::Ignore).expect("generate");
    assert_eq!(out.token_ms.len(), n_out);
    // The laps are back to back from the start: they add up to e2e, and the first is the prefill (TTFT).
    let sum: f64 = out.token_ms.iter().sum();
    assert!((sum - out.e2e_ms).abs() <= 0.5 + 0.02 * out.e2e_ms, "laps {sum} vs e2e {}", out.e2e_ms);
    assert!((out.token_ms[0] - out.prefill_ms).abs() <= 0.5 + 0.05 * out.prefill_ms);
    // ITL = (e2e - prefill) / (N_out - 1) is the mean decode lap.
    let itl = (out.e2e_ms - out.prefill_ms) / (n_out - 1) as f64;
    let mean = out.token_ms[1..].iter().sum::<f64>() / (n_out - 1) as f64;
    assert!((itl - mean).abs() <= 0.1 + 0.05 * mean, "ITL {itl} vs mean decode {mean}");
}

#[test]
fn llada_step_times_add_up_to_e2e() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = tiny(dir.path(), ModelKind::Llada, "test-org/t-llada");
    let params = LladaParams { steps: 8, block_length: 4, ..Default::default() };
    let out = generate_llada(&m, &[(1..=20).collect()], 8, &params).expect("generate");
    assert_eq!((out.nfe, out.step_ms.len()), (8, 8));
    let sum: f64 = out.step_ms.iter().sum();
    assert!((sum - out.e2e_ms).abs() <= 0.5 + 0.02 * out.e2e_ms, "steps {sum} vs e2e {}", out.e2e_ms);
    // Two blocks of four steps: the first block ends after about half the steps.
    let half: f64 = out.step_ms[..4].iter().sum();
    assert!((out.first_block_ms - half).abs() <= 0.5 + 0.05 * half, "{} vs {half}", out.first_block_ms);
}

#[test]
fn roofline_counts_equal_the_checkpoints() {
    // metrics::roofline's parameter count (which the loader also reports) against the elements the synthetic
    // checkpoints hold, and its KV-cache bytes against the cache's shape written out.
    let dir = tempfile::tempdir().expect("tempdir");
    for preset in [Preset::Tiny, Preset::Small] {
        for kind in [ModelKind::Llama, ModelKind::Llada] {
            let repo = format!("test/{preset:?}-{kind:?}").to_lowercase();
            write_synthetic(dir.path(), &repo, kind, &SynthSpec::new(preset, 0)).expect("write synthetic");
            let files = ModelFiles::from_hf_cache(dir.path(), &repo, "main").expect("resolve");
            let cfg = SynthSpec::new(preset, 0).model_config(kind).expect("config");
            assert_eq!(
                roofline::parameters(&cfg.shape()),
                crate::model::checkpoint_elements(&files),
                "{preset:?} {kind:?}"
            );
            let per_token = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 2;
            assert_eq!(roofline::kv_cache_bytes(&cfg.shape(), 3, 5, 2), 15 * per_token as u64);
        }
    }
}

// ---------------------------------------------------------------- bench-kernels

/// Sizes that make `bench-kernels` quick on the CPU.
pub(crate) const SMALL: [&str; 16] = [
    "--seq-len",
    "64",
    "--batch",
    "2",
    "--decode-tokens",
    "4",
    "--block-length",
    "8",
    "--matmul-size",
    "128",
    "--copy-mib",
    "4",
    "--warmup",
    "0",
    "--repetitions",
    "2",
];

#[test]
fn bench_kernels_prints_its_figures_on_the_cpu() {
    let sb = Sandbox::new();
    let small = SMALL;
    let mut args = vec!["bench-kernels", "--json"];
    args.extend_from_slice(&small);
    let out = sb.cmd(&args);
    assert_exit!(out, 0);
    let r: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json report");
    for key in ["copy_bytes_per_s", "matmul_flops_per_s"] {
        assert!(r[key].as_f64().is_some_and(|x| x > 0.0), "{key}: {r}");
    }
    assert_eq!(r["clock"], "monotonic");
    assert_eq!(r["dtype"], "f32");
    for phase in ["decode", "llada_step"] {
        for key in ["ms", "bytes_per_s", "flops_per_s", "ratio_to_floor"] {
            assert!(r[phase][key].as_f64().is_some_and(|x| x > 0.0 && x.is_finite()), "{phase}.{key}: {r}");
        }
    }
    // The selection ran on the step's B x block x vocab logits, each variant timed.
    let sel = &r["llada_selection"];
    assert_eq!((sel["batch"].as_u64(), sel["block"].as_u64()), (Some(2), Some(8)), "{sel}");
    assert_eq!(sel["vocab"], r["llada_step"]["shape"]["vocab"], "{sel}");
    for key in ["greedy_f32_ms", "greedy_f64_ms", "sampled_device_noise_ms", "sampled_host_noise_ms"] {
        assert!(sel[key].as_f64().is_some_and(|x| x > 0.0 && x.is_finite()), "llada_selection.{key}: {r}");
    }
    // The step's FLOPs are the schema's formula for the LLaDA shape at B=2, N=64, logits for 8 positions.
    let shape: schema::ModelShape = serde_json::from_value(r["llada_step"]["shape"].clone()).expect("shape");
    let f = roofline::Forward { batch: 2, tokens: 64, context: 64, logits: 8 };
    assert_eq!(r["llada_step"]["flops"].as_u64(), Some(roofline::forward_flops(&shape, f)));
    // The text report names the targets.
    let mut args = vec!["bench-kernels"];
    args.extend_from_slice(&small);
    let out = sb.cmd(&args);
    assert_exit!(out, 0);
    let text = stdout(&out);
    for want in [
        "copy bandwidth",
        "matmul rate",
        "AR decode token",
        "LLaDA step",
        "LLaDA selection",
        "target <= 1.5x",
        "target >= 60%",
    ] {
        assert!(text.contains(want), "{want:?} in\n{text}");
    }
}

#[test]
fn bench_kernels_drift_compares_a_precision_with_f32() {
    let sb = Sandbox::new();
    let mut args = vec!["bench-kernels", "--json", "--dtype", "bf16", "--drift"];
    args.extend_from_slice(&SMALL);
    let out = sb.cmd(&args);
    assert_exit!(out, 0);
    let r: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json report");
    let drift = r["drift"].as_array().expect("drift");
    assert_eq!(drift.iter().map(|d| d["model"].as_str()).collect::<Vec<_>>(), [Some("llama"), Some("llada")]);
    for d in drift {
        // B x block positions x the tiny vocabulary, compared in full.
        let vocab = r["llada_step"]["shape"]["vocab"].as_u64().expect("vocab");
        assert_eq!(d["logits"].as_u64(), Some(2 * 8 * vocab), "{d}");
        let (max, scale, mean) = (
            d["max_abs_diff"].as_f64().unwrap(),
            d["f32_max_abs"].as_f64().unwrap(),
            d["mean_abs_diff"].as_f64().unwrap(),
        );
        // bf16 rounds the weights and activations: the logits move, by little against their scale.
        assert!(max > 0.0 && mean > 0.0 && mean <= max && max < 0.25 * scale, "{d}");
        let agree = d["argmax_agreement"].as_f64().unwrap();
        assert!((0.5..=1.0).contains(&agree), "{d}");
    }
    // The text report says it; f32 against f32 is refused.
    let text: Vec<&str> = args.iter().copied().filter(|a| *a != "--json").collect();
    let out = sb.cmd(&text);
    assert_exit!(out, 0);
    assert!(stdout(&out).contains("bf16 against f32  llada"), "{}", stdout(&out));
    let out = sb.cmd(&["bench-kernels", "--drift", "--seq-len", "48", "--decode-tokens", "4"]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("--drift") && stderr(&out).contains("fix: --dtype bf16"), "{}", stderr(&out));
}

#[test]
fn bench_kernels_refuses_bad_arguments_with_exit_2() {
    let sb = Sandbox::new();
    for (args, want) in [
        (&["bench-kernels", "--decode-tokens", "64", "--seq-len", "64"][..], "--decode-tokens"),
        (&["bench-kernels", "--device", "tpu"][..], "not a device"),
        (&["bench-kernels", "--repetitions", "0"][..], "--repetitions"),
        // Sizes that would abort the process on an allocation: bounded, or refused before anything is made.
        (&["bench-kernels", "--batch", "100000"][..], "--batch 100000 is more than"),
        (&["bench-kernels", "--seq-len", "100000000"][..], "--seq-len 100000000 is more than"),
        (&["bench-kernels", "--copy-mib", "100000000"][..], "--copy-mib"),
        (&["bench-kernels", "--vocab", "4000000000"][..], "--vocab"),
        (&["bench-kernels", "--hidden", "65536", "--layers", "64"][..], "GB available"),
        (&["bench-kernels", "--hidden", "4000000000"][..], "--hidden 4000000000 is more than"),
    ] {
        let out = sb.cmd(args);
        assert_exit!(out, 2);
        assert!(stderr(&out).contains(want), "{want}: {}", stderr(&out));
    }
    if !candle_core::utils::cuda_is_available() {
        let out = sb.cmd(&["bench-kernels", "--device", "cuda:0"]);
        assert_exit!(out, 2);
        assert!(stderr(&out).contains("built without CUDA"), "{}", stderr(&out));
    }
}

// ---------------------------------------------------------------- broken checkpoints

/// A tiny checkpoint of `kind` in `dir` (`shards` files), resolved through the cache layout.
fn checkpoint(dir: &Path, kind: ModelKind, repo: &str, shards: Option<usize>) -> ModelFiles {
    let spec = SynthSpec { shards, ..SynthSpec::new(Preset::Tiny, 3) };
    write_synthetic(dir, repo, kind, &spec).expect("synth");
    ModelFiles::from_hf_cache(dir, repo, "main").expect("files")
}

/// Replaces a snapshot file (a symlink into blobs/) by a real file with `text`.
fn overwrite(path: &Path, bytes: &[u8]) {
    std::fs::remove_file(path).expect("rm link");
    std::fs::write(path, bytes).expect("write");
}

/// Rewrites one safetensors file with `edit` applied to its tensors.
fn edit_weights(path: &Path, edit: impl FnOnce(&mut HashMap<String, Tensor>)) {
    let mut t = candle_core::safetensors::load(path, &Device::Cpu).expect("load");
    edit(&mut t);
    std::fs::remove_file(path).expect("rm link");
    candle_core::safetensors::save(&t, path).expect("save");
}

fn load_err(files: &ModelFiles, kind: ModelKind) -> String {
    LoadedModel::load(files, kind, &Device::Cpu, DType::F32).expect_err("must refuse").to_string()
}

#[test]
fn a_tensor_of_the_wrong_shape_names_the_file_and_the_tensor() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = checkpoint(dir.path(), ModelKind::Llama, "bad/shape", None);
    let name = "model.layers.1.mlp.up_proj.weight";
    edit_weights(&files.weights[0], |t| {
        t.insert(name.into(), Tensor::ones((100, 64), DType::F32, &Device::Cpu).expect("t"));
    });
    let err = load_err(&files, ModelKind::Llama);
    let file = files.weights[0].display().to_string();
    for want in [file.as_str(), name, "[100, 64]", "[224, 64]", "config.json"] {
        assert!(err.contains(want), "{want:?} in {err}");
    }
}

#[test]
fn a_tensor_of_a_non_float_dtype_names_the_file_and_the_tensor() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = checkpoint(dir.path(), ModelKind::Llada, "bad/dtype", None);
    let name = "model.transformer.blocks.0.q_proj.weight";
    edit_weights(&files.weights[0], |t| {
        let q = t[name].to_dtype(DType::I64).expect("i64");
        t.insert(name.into(), q);
    });
    let err = load_err(&files, ModelKind::Llada);
    let file = files.weights[0].display().to_string();
    for want in [file.as_str(), name, "I64", "float"] {
        assert!(err.contains(want), "{want:?} in {err}");
    }
}

#[test]
fn a_tensor_missing_from_its_shard_names_the_shard_and_the_tensor() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = checkpoint(dir.path(), ModelKind::Llama, "bad/tensor", Some(2));
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(files.index.as_ref().expect("index")).expect("read"))
            .expect("json");
    let name = "model.norm.weight";
    let shard = index["weight_map"][name].as_str().expect("shard of the final norm").to_string();
    let path = files.snapshot_dir.join(&shard);
    edit_weights(&path, |t| {
        t.remove(name);
    });
    let err = load_err(&files, ModelKind::Llama);
    for want in [path.display().to_string(), name.to_string(), "model.safetensors.index.json".to_string()] {
        assert!(err.contains(&want), "{want:?} in {err}");
    }
    // A missing shard file is refused before loading, by name (covered for the index in model.rs as well).
    std::fs::remove_file(&path).expect("rm");
    let err = ModelFiles::from_hf_cache(dir.path(), "bad/tensor", "main").expect_err("no shard").to_string();
    assert!(err.contains(&shard), "{err}");
}

#[test]
fn a_truncated_weights_file_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = checkpoint(dir.path(), ModelKind::Llama, "bad/truncated", None);
    let bytes = std::fs::read(&files.weights[0]).expect("read");
    overwrite(&files.weights[0], &bytes[..100]);
    let err = load_err(&files, ModelKind::Llama);
    assert!(err.contains(&files.weights[0].display().to_string()) && err.contains("truncated"), "{err}");
}

#[test]
fn a_tokenizer_without_the_mask_token_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = checkpoint(dir.path(), ModelKind::Llada, "bad/mask", None);
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&files.config).expect("config")).expect("json");
    cfg.as_object_mut().expect("obj").remove("mask_token_id");
    overwrite(&files.config, cfg.to_string().as_bytes());
    let tok = std::fs::read_to_string(&files.tokenizer).expect("tokenizer").replace("<|mdm_mask|>", "<|not_a_mask|>");
    overwrite(&files.tokenizer, tok.as_bytes());
    let err = load_err(&files, ModelKind::Llada);
    for want in [files.tokenizer.display().to_string(), "<|mdm_mask|>".to_string(), "mask".to_string()] {
        assert!(err.contains(&want), "{want:?} in {err}");
    }
}

#[test]
fn an_unknown_or_other_architecture_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = checkpoint(dir.path(), ModelKind::Llama, "bad/arch", None);
    // The right checkpoint under the other kind: the error says which kind it is.
    let err = load_err(&files, ModelKind::Llada);
    assert!(err.contains("LlamaForCausalLM") && err.contains("kind = \"llama\""), "{err}");
    assert!(err.contains(&files.config.display().to_string()), "{err}");
    // An architecture the runner does not implement.
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&files.config).expect("config")).expect("json");
    cfg["architectures"] = serde_json::json!(["MistralForCausalLM"]);
    cfg["model_type"] = "mistral".into();
    overwrite(&files.config, cfg.to_string().as_bytes());
    let err = load_err(&files, ModelKind::Llama);
    for want in ["MistralForCausalLM", "unknown architecture", &files.config.display().to_string()] {
        assert!(err.contains(want), "{want:?} in {err}");
    }
}

#[test]
fn a_cell_that_fails_before_its_warm_ups_end_records_the_warm_ups_done() {
    // A fault injected into the first warm-up of every cell: none of the two asked for was done.
    let sb = Sandbox::new();
    let cfg = sb.write(
        "w2.toml",
        "[run]\nname = \"w\"\ndevice = \"cpu\"\ndtype = \"f32\"\nwarmup = 2\nrepetitions = 1\n\n[prompts]\n\
         source = \"embedded\"\ncount = 2\n\n[grid]\nseq_lengths = [48]\nbatch_sizes = [1]\noutput_tokens = 16\n\n\
         [[models]]\nkind = \"llama\"\nid = \"dllm-bench/synthetic-llama-tiny\"\n\n[models.synthetic]\npreset = \"tiny\"\n",
    );
    let out = sb
        .command(&["run", "--config", cfg.to_str().expect("utf8"), "-o", "res"])
        .env(runner::device::INJECT_OOM_ENV, "warmup:synthetic-llama-tiny")
        .output()
        .expect("run");
    assert_exit!(out, 1);
    let bundle = std::fs::read_dir(sb.path().join("res"))
        .expect("res")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "json"))
        .expect("a bundle");
    let b = schema::read_bundle(&std::fs::read_to_string(bundle).expect("read")).expect("valid");
    assert!(!b.cells.is_empty());
    for c in &b.cells {
        assert!(matches!(c.status, schema::CellStatus::Oom { .. }), "{}: {:?}", c.key, c.status);
        assert_eq!((c.warmup_runs, c.repetitions.len()), (0, 0), "{}: no warm-up was done", c.key);
    }
}
