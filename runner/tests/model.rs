//! Model side: synthetic checkpoints, loading through the hf-hub cache layout, the shared transformer against
//! candle-transformers' llama, AR decoding with its KV cache, and the LLaDA reference sampler's schedule.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, IndexOp, Tensor};
use runner::generate::{
    EosPolicy, LladaParams, Remasking, generate_ar, generate_llada, generate_llada_observed, select_positions,
    transfer_schedule,
};
use runner::model::{LoadedModel, LogitsSpan, ModelConfig, ModelFiles, Positions};
use runner::synth::{Preset, SynthSpec, write_synthetic};
use schema::grid::{ModelKind, Precision};

use crate::util::max_abs_diff;

const LLAMA: &str = "test-org/tiny-llama";
const LLADA: &str = "test-org/tiny-llada";

fn repo_of(kind: ModelKind) -> &'static str {
    match kind {
        ModelKind::Llama => LLAMA,
        ModelKind::Llada => LLADA,
        ModelKind::Dream => "test-org/tiny-dream",
    }
}

fn spec(seed: u64, shards: Option<usize>) -> SynthSpec {
    SynthSpec { shards, ..SynthSpec::new(Preset::Tiny, seed) }
}

/// Writes a tiny checkpoint into `cache` and resolves it through the cache layout.
fn tiny_files(cache: &Path, kind: ModelKind, s: &SynthSpec) -> ModelFiles {
    let snap = write_synthetic(cache, repo_of(kind), kind, s).expect("write synthetic");
    let files = ModelFiles::from_hf_cache(cache, repo_of(kind), "main").expect("resolve");
    assert_eq!(files.snapshot_dir, snap);
    files
}

/// Elements of every tensor in a checkpoint's weights files.
pub fn checkpoint_elements(files: &ModelFiles) -> u64 {
    let mut n = 0;
    for w in &files.weights {
        let tensors = candle_core::safetensors::load(w, &Device::Cpu).expect("read safetensors");
        n += tensors.values().map(|t| t.elem_count() as u64).sum::<u64>();
    }
    n
}

fn load(files: &ModelFiles, kind: ModelKind) -> LoadedModel {
    LoadedModel::load(files, kind, &Device::Cpu, DType::F32).expect("load")
}

fn tiny_model(kind: ModelKind) -> (tempfile::TempDir, LoadedModel) {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = tiny_files(dir.path(), kind, &spec(7, None));
    let m = load(&files, kind);
    (dir, m)
}

fn snapshot_bytes(snap: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(snap)
        .expect("read snapshot")
        .map(|e| {
            let e = e.expect("entry");
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).expect("read file"))
        })
        .collect();
    out.sort();
    out
}

fn config_json(files: &ModelFiles) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(&files.config).expect("config")).expect("json")
}

// ---------------------------------------------------------------- synthetic checkpoints and loading

#[test]
fn synth_single_file_llada_loads_through_cache_layout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = tiny_files(dir.path(), ModelKind::Llada, &spec(1, None));
    assert!(files.is_synthetic());
    assert_eq!(files.weights.len(), 1);
    assert!(files.weights[0].ends_with("model.safetensors"));
    assert!(files.index.is_none());
    // The hf-hub layout: refs/main -> commit, snapshot files are relative symlinks into blobs/.
    let repo = dir.path().join("models--test-org--tiny-llada");
    let commit = std::fs::read_to_string(repo.join("refs/main")).expect("ref");
    assert_eq!(commit, files.commit);
    assert_eq!(commit.len(), 40);
    let link = std::fs::read_link(&files.config).expect("config.json is a symlink");
    assert!(link.starts_with("../../blobs"), "{link:?}");
    // Readable by every user of a shared cache, as a download's files are.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let blobs = std::fs::read_dir(repo.join("blobs")).expect("blobs").map(|e| e.expect("entry").path());
        for file in blobs.chain([repo.join("refs/main")]) {
            let mode = std::fs::metadata(&file).expect("metadata").permissions().mode();
            assert_eq!(mode & 0o044, 0o044, "{}: mode {mode:o}", file.display());
        }
    }
    // LLaDA's own (OLMo) field names.
    let cfg = config_json(&files);
    for key in ["d_model", "n_layers", "n_heads", "n_kv_heads", "mlp_hidden_size", "mask_token_id", "rope_theta"] {
        assert!(cfg.get(key).is_some(), "config.json lacks {key}");
    }
    assert!(cfg.get("hidden_size").is_none());
    assert_eq!(cfg["dllm_bench_synthetic"]["seed"], 1);
    let m = load(&files, ModelKind::Llada);
    // Special ids in config.json equal the tokenizer's.
    let mask = m.special.mask.expect("mask id");
    assert_eq!(cfg["mask_token_id"], mask);
    assert_eq!(m.tokenizer.token_to_id("<|mdm_mask|>"), Some(mask));
    assert_eq!(m.tokenizer.token_to_id("<|startoftext|>"), Some(m.special.bos));
    assert_eq!(m.tokenizer.token_to_id("<|endoftext|>"), Some(m.special.eos));
    assert_ne!(m.special.pad, mask);
    assert_eq!(m.config.num_kv_heads, m.config.num_heads);
    // The count (metrics::roofline's formula) is the number of elements the checkpoint holds.
    assert_eq!(m.parameter_count(), checkpoint_elements(&files));
    // Byte-level BPE: any UTF-8 round-trips.
    let text = "Grüße, naïve café — 東京 🚀 and plain words.";
    let enc = m.tokenizer.encode(text, false).expect("encode");
    assert_eq!(m.tokenizer.decode(enc.get_ids(), false).expect("decode"), text);
}

#[test]
fn synth_sharded_llama_loads_with_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = tiny_files(dir.path(), ModelKind::Llama, &spec(1, Some(3)));
    assert_eq!(files.weights.len(), 3);
    assert!(files.index.is_some());
    let names: Vec<String> =
        files.weights.iter().map(|p| p.file_name().expect("name").to_string_lossy().into_owned()).collect();
    assert_eq!(
        names,
        ["model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"]
    );
    let cfg = config_json(&files);
    for key in ["hidden_size", "num_hidden_layers", "num_key_value_heads", "rope_theta", "torch_dtype"] {
        assert!(cfg.get(key).is_some(), "config.json lacks {key}");
    }
    let m = load(&files, ModelKind::Llama);
    assert_eq!(m.config.num_kv_heads, 2);
    assert_eq!(m.config.num_heads, 4);
    assert_eq!(m.tokenizer.token_to_id("<|begin_of_text|>"), Some(m.special.bos));
    assert_eq!(m.tokenizer.token_to_id("<|end_of_text|>"), Some(m.special.eos));
    assert_eq!(cfg["bos_token_id"], m.special.bos);
    // Sharded and single-file checkpoints of the same seed hold the same tensors.
    let dir1 = tempfile::tempdir().expect("tempdir");
    let single = load(&tiny_files(dir1.path(), ModelKind::Llama, &spec(1, None)), ModelKind::Llama);
    let ids = Tensor::new(&[[3u32, 17, 99, 5]], &Device::Cpu).expect("ids");
    let a = m.forward_full(&ids, None).expect("fwd");
    let b = single.forward_full(&ids, None).expect("fwd");
    assert_eq!(max_abs_diff(&a, &b), 0.0);
    // A snapshot with both a model.safetensors and an index loads the single file, as transformers does.
    std::fs::copy(&single.files.weights[0], files.snapshot_dir.join("model.safetensors")).expect("copy");
    let both = ModelFiles::from_hf_cache(dir.path(), repo_of(ModelKind::Llama), "main").expect("resolve");
    assert_eq!((both.weights, both.index), (vec![files.snapshot_dir.join("model.safetensors")], None));
}

#[test]
fn synth_is_deterministic_and_seeded() {
    let (d1, d2, d3) =
        (tempfile::tempdir().expect("t"), tempfile::tempdir().expect("t"), tempfile::tempdir().expect("t"));
    let s1 = write_synthetic(d1.path(), LLADA, ModelKind::Llada, &spec(5, Some(2))).expect("w");
    let s2 = write_synthetic(d2.path(), LLADA, ModelKind::Llada, &spec(5, Some(2))).expect("w");
    let s3 = write_synthetic(d3.path(), LLADA, ModelKind::Llada, &spec(6, Some(2))).expect("w");
    let (b1, b2, b3) = (snapshot_bytes(&s1), snapshot_bytes(&s2), snapshot_bytes(&s3));
    assert_eq!(b1, b2, "same seed must give identical bytes");
    assert_eq!(s1.file_name(), s2.file_name(), "same spec, same commit");
    assert_ne!(s1.file_name(), s3.file_name(), "another seed, another commit");
    let weights = |b: &[(String, Vec<u8>)]| {
        b.iter().filter(|(n, _)| n.ends_with(".safetensors")).map(|(_, d)| d.clone()).collect::<Vec<_>>()
    };
    assert_ne!(weights(&b1), weights(&b3), "another seed must give other weights");
    // Never all zeros; norms near 1, matrices small.
    let tensors =
        candle_core::safetensors::load(s1.join("model-00001-of-00002.safetensors"), &Device::Cpu).expect("safetensors");
    let wte = &tensors["model.transformer.wte.weight"];
    let std = wte.sqr().expect("sqr").mean_all().expect("mean").to_scalar::<f32>().expect("s").sqrt();
    assert!(std > 0.05 && std < 0.5, "embedding std {std}");
    let norm = &tensors["model.transformer.blocks.0.attn_norm.weight"];
    let mean = norm.mean_all().expect("mean").to_scalar::<f32>().expect("s");
    assert!((mean - 1.0).abs() < 0.05, "norm mean {mean}");
}

#[test]
fn synth_reuses_a_complete_folder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = spec(3, None);
    let a = write_synthetic(dir.path(), LLAMA, ModelKind::Llama, &s).expect("w");
    let weights = a.join("model.safetensors");
    let before = std::fs::metadata(&weights).and_then(|m| m.modified()).expect("mtime");
    std::thread::sleep(std::time::Duration::from_millis(20));
    let b = write_synthetic(dir.path(), LLAMA, ModelKind::Llama, &s).expect("w");
    assert_eq!(a, b);
    let after = std::fs::metadata(&weights).and_then(|m| m.modified()).expect("mtime");
    assert_eq!(before, after, "a complete folder must not be rewritten");
    // Another spec in the same repo: a new snapshot, and refs/main follows it.
    let c = write_synthetic(dir.path(), LLAMA, ModelKind::Llama, &spec(4, None)).expect("w");
    assert_ne!(a, c);
    let files = ModelFiles::from_hf_cache(dir.path(), LLAMA, "main").expect("resolve");
    assert_eq!(files.snapshot_dir, c);
    // The old snapshot stays reachable by its commit hash.
    let old = a.file_name().expect("commit").to_string_lossy().into_owned();
    assert_eq!(ModelFiles::from_hf_cache(dir.path(), LLAMA, &old).expect("by commit").snapshot_dir, a);
}

#[test]
fn synth_bf16_and_f16_load_and_run() {
    for dtype in [Precision::Bf16, Precision::F16] {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = SynthSpec { dtype: Some(dtype), ..spec(2, None) };
        let files = tiny_files(dir.path(), ModelKind::Llada, &s);
        let m = LoadedModel::load(&files, ModelKind::Llada, &Device::Cpu, DType::BF16).expect("load bf16");
        let out =
            generate_llada(&m, &[vec![5, 6, 7]], 8, &LladaParams { steps: 8, block_length: 8, ..Default::default() })
                .expect("generate");
        assert_eq!(out.tokens[0].len(), 8);
        assert!(!out.tokens[0].contains(&m.special.mask.expect("mask")));
    }
}

#[test]
fn real_preset_parameter_counts() {
    let llama = SynthSpec::new(Preset::Real, 0).model_config(ModelKind::Llama).expect("cfg");
    assert_eq!(llama.parameter_count(), 8_030_261_248);
    assert_eq!(llama.parameters_per_layer(), 218_112_000);
    assert_eq!(llama.kv_bytes_per_token(2), 128 * 1024);
    let llada = SynthSpec::new(Preset::Real, 0).model_config(ModelKind::Llada).expect("cfg");
    assert_eq!(llada.parameters_per_layer(), 218_112_000);
    assert_eq!(llada.parameter_count(), 8_015_581_184);
    assert_eq!(llada.kv_bytes_per_token(2), 512 * 1024);
    assert_eq!((llada.vocab_size, llada.num_kv_heads, llada.intermediate_size), (126_464, 32, 12288));
    assert_eq!(llada.rope_theta, 500_000.0);
}

// ---------------------------------------------------------------- config and file errors

fn write_config(dir: &Path, json: &serde_json::Value) -> PathBuf {
    let p = dir.join("config.json");
    std::fs::write(&p, json.to_string()).expect("write");
    p
}

fn llama_json() -> serde_json::Value {
    serde_json::json!({
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "vocab_size": 512,
        "max_position_embeddings": 1024, "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": false,
        "torch_dtype": "bfloat16", "hidden_act": "silu"
    })
}

#[test]
fn config_without_rope_theta_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut j = llama_json();
    j.as_object_mut().expect("obj").remove("rope_theta");
    let p = write_config(dir.path(), &j);
    let err = ModelConfig::from_file(&p, ModelKind::Llama).expect_err("must refuse").to_string();
    assert!(err.contains("rope_theta"), "{err}");
    assert!(err.contains(&p.display().to_string()), "{err}");
    // transformers 5 spelling is accepted.
    j["rope_parameters"] = serde_json::json!({"rope_theta": 250000.0, "rope_type": "default"});
    j.as_object_mut().expect("obj").remove("torch_dtype");
    j["dtype"] = "bfloat16".into();
    let p = write_config(dir.path(), &j);
    let cfg = ModelConfig::from_file(&p, ModelKind::Llama).expect("rope_parameters");
    assert_eq!(cfg.rope_theta, 250000.0);
    assert_eq!(cfg.checkpoint_dtype.as_deref(), Some("bfloat16"));
}

#[test]
fn config_with_unsupported_features_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (field, value) in [
        ("mlp_bias", serde_json::json!(true)),
        ("hidden_act", serde_json::json!("gelu")),
        // Incomplete llama3 scaling, and a scaling that is not implemented.
        ("rope_scaling", serde_json::json!({"rope_type": "llama3", "factor": 8.0})),
        ("rope_scaling", serde_json::json!({"rope_type": "dynamic", "factor": 2.0})),
    ] {
        let mut j = llama_json();
        j[field] = value;
        let p = write_config(dir.path(), &j);
        let err = ModelConfig::from_file(&p, ModelKind::Llama).expect_err(field).to_string();
        assert!(err.contains(field), "{err}");
    }
    let llada = serde_json::json!({
        "d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 4, "mlp_hidden_size": 128, "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0, "vocab_size": 512, "max_sequence_length": 1024, "alibi": true, "weight_tying": false,
        "rope": true, "layer_norm_type": "rms", "activation_type": "silu", "block_type": "llama"
    });
    let p = write_config(dir.path(), &llada);
    let err = ModelConfig::from_file(&p, ModelKind::Llada).expect_err("alibi").to_string();
    assert!(err.contains("alibi"), "{err}");
}

/// Writes `tensors` and a config.json edited by `edit` as `org/name` in a fresh hf-hub cache layout.
fn write_checkpoint(
    cache: &Path,
    name: &str,
    from: &ModelFiles,
    tensors: &HashMap<String, Tensor>,
    edit: impl FnOnce(&mut serde_json::Value),
) -> ModelFiles {
    let repo = cache.join(format!("models--org--{name}"));
    let snap = repo.join("snapshots/0123456789abcdef0123456789abcdef01234567");
    std::fs::create_dir_all(&snap).expect("snapshot");
    std::fs::create_dir_all(repo.join("refs")).expect("refs");
    std::fs::write(repo.join("refs/main"), "0123456789abcdef0123456789abcdef01234567").expect("ref");
    let mut cfg = config_json(from);
    edit(&mut cfg);
    std::fs::write(snap.join("config.json"), cfg.to_string()).expect("config");
    std::fs::copy(&from.tokenizer, snap.join("tokenizer.json")).expect("tokenizer");
    candle_core::safetensors::save(tensors, snap.join("model.safetensors")).expect("weights");
    ModelFiles::from_hf_cache(cache, &format!("org/{name}"), "main").expect("resolve")
}

/// A tiny synthetic Llama in `dir`, its tensors (to write edited checkpoints from) and its embedding.
fn tiny_llama_tensors(dir: &Path) -> (ModelFiles, HashMap<String, Tensor>, Tensor) {
    let files = tiny_files(dir, ModelKind::Llama, &spec(11, None));
    let tensors = candle_core::safetensors::load(&files.weights[0], &Device::Cpu).expect("weights");
    let embed = tensors.get("model.embed_tokens.weight").expect("embedding").clone();
    (files, tensors, embed)
}

#[test]
fn damaged_checkpoint_files_are_named_with_the_fix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (files, tensors, _) = tiny_llama_tensors(dir.path());
    let model = write_checkpoint(dir.path(), "damaged", &files, &tensors, |_| {});
    let snap = model.config.parent().expect("snapshot").to_path_buf();
    let resolve = || ModelFiles::from_hf_cache(dir.path(), "org/damaged", "main");
    let check = |what: &str| LoadedModel::check_files(&resolve().expect(what), ModelKind::Llama).expect_err(what);
    // A tokenizer cut short: the file and the way out.
    let whole = std::fs::read(snap.join("tokenizer.json")).expect("tokenizer");
    std::fs::write(snap.join("tokenizer.json"), &whole[..whole.len() / 2]).expect("cut");
    let err = check("a cut tokenizer").to_string();
    // (The checkpoint is synthetic, its config.json carrying the marker: written again, not downloaded.)
    assert!(err.contains("tokenizer.json") && err.contains("fix: ") && err.contains("dllm-bench synth"), "{err}");
    assert!(!err.contains("download the model again"), "{err}");
    std::fs::write(snap.join("tokenizer.json"), &whole).expect("restore");
    // config.json without a field every model has.
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(snap.join("config.json")).expect("config")).expect("json");
    cfg.as_object_mut().expect("object").remove("hidden_size");
    std::fs::write(snap.join("config.json"), cfg.to_string()).expect("config");
    let err = check("no hidden_size").to_string();
    assert!(err.contains("config.json") && err.contains("hidden_size") && err.contains("fix: "), "{err}");
    // The weights' name taken by a folder, then by a link to a blob that is gone: not "missing".
    std::fs::rename(snap.join("model.safetensors"), dir.path().join("weights")).expect("move");
    std::fs::create_dir(snap.join("model.safetensors")).expect("folder");
    let err = resolve().expect_err("a folder").to_string();
    assert!(err.contains("model.safetensors: is a folder, not a file; fix: "), "{err}");
    std::fs::remove_dir(snap.join("model.safetensors")).expect("rm");
    std::os::unix::fs::symlink(dir.path().join("gone"), snap.join("model.safetensors")).expect("link");
    let err = resolve().expect_err("a dangling link").to_string();
    assert!(err.contains("model.safetensors: is a link to nothing (its blob is gone); fix: "), "{err}");
}

#[test]
fn a_tied_lm_head_is_the_embedding() {
    // Llama-3.2-1B/3B and most small checkpoints have no lm_head tensor (tie_word_embeddings = true). Their logits
    // must equal an untied model's whose lm_head is a copy of the embedding.
    let dir = tempfile::tempdir().expect("tempdir");
    let (files, mut tensors, embed) = tiny_llama_tensors(dir.path());
    tensors.remove("lm_head.weight").expect("an untied synthetic head");
    let tied = write_checkpoint(dir.path(), "tied", &files, &tensors, |c| c["tie_word_embeddings"] = true.into());
    tensors.insert("lm_head.weight".into(), embed.copy().expect("copy"));
    let untied = write_checkpoint(dir.path(), "untied", &files, &tensors, |_| {});
    let (a, b) = (load(&tied, ModelKind::Llama), load(&untied, ModelKind::Llama));
    assert!(a.config.tied_lm_head && !b.config.tied_lm_head);
    let ids = Tensor::new(&[[1u32, 40, 41, 42, 43, 44]], &Device::Cpu).expect("ids");
    let (la, lb) = (a.forward_full(&ids, None).expect("tied"), b.forward_full(&ids, None).expect("untied"));
    let diff = (la - lb).expect("sub").abs().expect("abs").max_all().expect("max").to_scalar::<f32>().expect("f32");
    assert_eq!(diff, 0.0, "the tied head computes what an lm_head equal to the embedding computes");
    // The tied checkpoint's layout lists no LM head tensor, so nothing is reported missing.
    let cfg = ModelConfig::from_file(&tied.config, ModelKind::Llama).expect("config");
    assert!(
        runner::model::WeightNames::for_kind(ModelKind::Llama).tensors(&cfg).iter().all(|(n, _)| n != "lm_head.weight")
    );
}

#[test]
fn weights_the_layout_would_drop_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (files, mut tensors, embed) = tiny_llama_tensors(dir.path());
    // A tied config whose file holds a head of its own: equal to the embedding it loads (either reading gives the
    // same model), different it is refused (transformers 4 and 5 disagree about which one is meant).
    let tie = |c: &mut serde_json::Value| c["tie_word_embeddings"] = true.into();
    tensors.insert("lm_head.weight".into(), embed.copy().expect("copy"));
    let same = write_checkpoint(dir.path(), "tied-same", &files, &tensors, tie);
    assert!(load(&same, ModelKind::Llama).config.tied_lm_head);
    tensors.insert("lm_head.weight".into(), (&embed * 2.0).expect("scaled"));
    let other = write_checkpoint(dir.path(), "tied-other", &files, &tensors, tie);
    // Before anything loads (fetch and the run's pre-check), and by the load itself.
    let err = LoadedModel::check_files(&other, ModelKind::Llama).expect_err("two heads").to_string();
    assert!(err.contains("lm_head.weight") && err.contains("tie_word_embeddings"), "{err}");
    LoadedModel::load(&other, ModelKind::Llama, &Device::Cpu, DType::F32).expect_err("two heads");
    // A parameter no part of the layout reads (a norm's bias) is refused before anything loads, naming it; a
    // buffer (not a parameter) is left alone.
    tensors.insert("lm_head.weight".into(), embed.copy().expect("copy"));
    let h = embed.dim(1).expect("hidden");
    tensors.insert("model.norm.bias".into(), Tensor::zeros(h, DType::F32, &Device::Cpu).expect("bias"));
    let biased = write_checkpoint(dir.path(), "norm-bias", &files, &tensors, |_| {});
    let err = LoadedModel::check_files(&biased, ModelKind::Llama).expect_err("an unused bias").to_string();
    assert!(err.contains("model.norm.bias") && err.contains("does not use") && !err.contains("  "), "{err}");
    tensors.remove("model.norm.bias");
    let inv_freq = Tensor::zeros(8, DType::F32, &Device::Cpu).expect("buffer");
    tensors.insert("model.layers.0.self_attn.rotary_emb.inv_freq".into(), inv_freq);
    let buffer = write_checkpoint(dir.path(), "buffer", &files, &tensors, |_| {});
    LoadedModel::check_files(&buffer, ModelKind::Llama).expect("a buffer is not a parameter");
}

#[test]
fn olmo_fields_that_change_the_model_are_read_or_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llada = |extra: serde_json::Value| {
        let mut j = serde_json::json!({
            "d_model": 64, "n_layers": 2, "n_heads": 4, "mlp_hidden_size": 128, "rms_norm_eps": 1e-5,
            "rope_theta": 500000.0, "vocab_size": 512, "max_sequence_length": 1024, "weight_tying": false,
            "rope": true, "layer_norm_type": "rms", "activation_type": "silu", "block_type": "llama"
        });
        for (k, v) in extra.as_object().expect("obj") {
            match v {
                // A null drops the field.
                serde_json::Value::Null if k != "multi_query_attention" => j.as_object_mut().expect("obj").remove(k),
                _ => j.as_object_mut().expect("obj").insert(k.clone(), v.clone()),
            };
        }
        ModelConfig::from_file(&write_config(dir.path(), &j), ModelKind::Llada)
    };
    // The fields that choose the architecture are never defaulted (upstream's defaults are not LLaDA-8B's).
    for field in ["weight_tying", "rope", "layer_norm_type", "activation_type", "block_type"] {
        let err = llada(serde_json::json!({ field: null })).expect_err(field).to_string();
        assert!(
            err.contains(&format!("`{field}` is missing: add \"{field}\"")) && err.contains("does not guess"),
            "{err}"
        );
    }
    assert!(llada(serde_json::json!({"weight_tying": true})).expect("tied").tied_lm_head);
    // OLMo's effective_n_kv_heads.
    let kv = |extra| llada(extra).expect("loads").num_kv_heads;
    assert_eq!(kv(serde_json::json!({"multi_query_attention": true})), 1);
    assert_eq!(kv(serde_json::json!({"multi_query_attention": false})), 4);
    assert_eq!(kv(serde_json::json!({"multi_query_attention": null, "n_kv_heads": 2})), 2);
    assert_eq!(kv(serde_json::json!({"n_kv_heads": 1, "multi_query_attention": true})), 1);
    // The real config's values of the fields below load.
    let real = serde_json::json!({"bias_for_layer_norm": false, "layer_norm_with_affine": true, "n_kv_heads": 4});
    assert_eq!(kv(real), 4);
    for (field, extra) in [
        ("multi_query_attention", serde_json::json!({"n_kv_heads": 2, "multi_query_attention": true})),
        ("bias_for_layer_norm", serde_json::json!({"bias_for_layer_norm": true})),
        ("layer_norm_with_affine", serde_json::json!({"layer_norm_with_affine": false})),
    ] {
        let err = llada(extra).expect_err(field).to_string();
        assert!(err.contains(field), "{err}");
    }
    // transformers' "swish" is SiLU.
    let mut j = llama_json();
    j["hidden_act"] = "swish".into();
    ModelConfig::from_file(&write_config(dir.path(), &j), ModelKind::Llama).expect("swish is silu");
}

#[test]
fn missing_files_name_the_expected_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Nothing on disk says the repository would be synthetic: the fix is a download, not `dllm-bench synth`.
    let err = ModelFiles::from_hf_cache(dir.path(), "nobody/nothing", "main").expect_err("no repo").to_string();
    assert!(err.contains("models--nobody--nothing"), "{err}");
    assert!(err.contains("huggingface-cli download nobody/nothing") && !err.contains("dllm-bench synth"), "{err}");
    // A synthetic snapshot (its config.json has the marker) is written again by `dllm-bench synth`.
    let files = tiny_files(dir.path(), ModelKind::Llama, &spec(1, None));
    std::fs::remove_file(&files.weights[0]).expect("rm");
    let err = ModelFiles::from_hf_cache(dir.path(), LLAMA, "main").expect_err("no weights").to_string();
    assert!(err.contains(&files.weights[0].display().to_string()), "{err}");
    assert!(err.contains("dllm-bench synth") && !err.contains("huggingface-cli"), "{err}");
    // A shard named by the index but absent.
    let sharded = tiny_files(dir.path(), ModelKind::Llada, &spec(1, Some(2)));
    std::fs::remove_file(&sharded.weights[1]).expect("rm");
    let err = ModelFiles::from_hf_cache(dir.path(), LLADA, "main").expect_err("no shard").to_string();
    assert!(err.contains("model-00002-of-00002.safetensors"), "{err}");
    let err = ModelFiles::from_hf_cache(dir.path(), LLADA, "v9").expect_err("no ref").to_string();
    assert!(err.contains("refs/v9"), "{err}");
}

#[test]
fn pad_equal_to_mask_is_refused_at_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = tiny_files(dir.path(), ModelKind::Llada, &spec(1, None));
    let mut cfg = config_json(&files);
    cfg["pad_token_id"] = cfg["mask_token_id"].clone();
    std::fs::remove_file(&files.config).expect("rm link");
    std::fs::write(&files.config, cfg.to_string()).expect("write");
    let err = LoadedModel::load(&files, ModelKind::Llada, &Device::Cpu, DType::F32).expect_err("pad == mask");
    assert!(err.to_string().contains("pad"), "{err}");
}

#[test]
fn a_pytorch_only_snapshot_is_told_that_only_safetensors_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (files, tensors, _) = tiny_llama_tensors(dir.path());
    let real = |c: &mut serde_json::Value| {
        c.as_object_mut().expect("object").remove("dllm_bench_synthetic");
    };
    let model = write_checkpoint(dir.path(), "pytorch-only", &files, &tensors, real);
    let snap = model.snapshot_dir.clone();
    std::fs::remove_file(&model.weights[0]).expect("rm");
    let resolve = || ModelFiles::from_hf_cache(dir.path(), "org/pytorch-only", "main").expect_err("no safetensors");
    // A real snapshot without weights at all: download it (not `dllm-bench synth`: it is not synthetic).
    let err = resolve().to_string();
    assert!(err.contains("huggingface-cli download org/pytorch-only") && !err.contains("dllm-bench synth"), "{err}");
    // Only PyTorch weights, single or sharded: a download would fetch the same files, so it is not the fix.
    for names in [&["pytorch_model.bin"][..], &["pytorch_model-00001-of-00002.bin", "pytorch_model.bin.index.json"]] {
        for name in names {
            std::fs::write(snap.join(name), b"PK").expect("pytorch weights");
        }
        let err = resolve().to_string();
        assert!(err.contains("only safetensors checkpoints load") && err.contains("fix: "), "{err}");
        assert!(names.iter().all(|n| err.contains(n)), "{err}");
        assert!(!err.contains("download org/") && !err.contains("dllm-bench synth"), "{err}");
        for name in names {
            std::fs::remove_file(snap.join(name)).expect("rm");
        }
    }
}

/// Replaces a snapshot file (a link into blobs/, or a file) with a file of its own holding `bytes`.
fn replace_file(path: &Path, bytes: impl AsRef<[u8]>) {
    std::fs::remove_file(path).expect("rm");
    std::fs::write(path, bytes).expect("write");
}

/// Rewrites the JSON file `path` as `edit` changes it.
fn edit_json(path: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("json");
    edit(&mut v);
    replace_file(path, v.to_string());
}

/// Adds a special token to a tokenizer.json's added tokens.
fn add_token(tokenizer: &mut serde_json::Value, id: u32, content: &str) {
    let token = serde_json::json!({
        "id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false,
        "normalized": false, "special": true
    });
    tokenizer["added_tokens"].as_array_mut().expect("added_tokens").push(token);
}

/// A copy of the checkpoint `files` of `kind` as `org/{name}` whose embedding and LM head have `extra` zero rows
/// more than its tokenizer has tokens (config.json's vocabulary grown to match), as real checkpoints pad them
/// (LLaDA: 126349 tokens, 126464 rows; Qwen2.5 and Dream: 151665 of 152064). Answers the files and tensors.
fn padded_vocab(
    cache: &Path,
    name: &str,
    files: &ModelFiles,
    kind: ModelKind,
    extra: usize,
) -> (ModelFiles, HashMap<String, Tensor>) {
    let mut tensors = candle_core::safetensors::load(&files.weights[0], &Device::Cpu).expect("weights");
    let names = runner::model::WeightNames::for_kind(kind);
    for name in [names.embed, names.lm_head].map(|n| format!("{n}.weight")) {
        let t = tensors.get(&name).unwrap_or_else(|| panic!("{name}")).clone();
        let pad = Tensor::zeros((extra, t.dim(1).expect("hidden")), t.dtype(), t.device()).expect("pad");
        tensors.insert(name, Tensor::cat(&[&t, &pad], 0).expect("cat"));
    }
    let grow = |c: &mut serde_json::Value| {
        for field in ["vocab_size", "embedding_size"] {
            if let Some(v) = c.get(field).and_then(|v| v.as_u64()) {
                c[field] = (v + extra as u64).into();
            }
        }
    };
    (write_checkpoint(cache, name, files, &tensors, grow), tensors)
}

fn max_token_id(files: &ModelFiles) -> u32 {
    let tok = tokenizers::Tokenizer::from_file(&files.tokenizer).expect("tokenizer");
    tok.get_vocab(true).into_values().max().expect("tokens")
}

#[test]
fn tokenizer_and_config_of_different_models_are_refused_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let synthetic = tiny_files(dir.path(), ModelKind::Llada, &spec(3, None));
    let (files, tensors) = padded_vocab(dir.path(), "padded-llada", &synthetic, ModelKind::Llada, 8);
    let base = load(&files, ModelKind::Llada);
    let vocab = base.config.vocab_size as u32;
    // A tokenizer smaller than the vocabulary is normal (LLaDA: 126349 tokens of 126464 rows): loaded.
    assert!(max_token_id(&files) < vocab - 1, "the synthetic tokenizer leaves rows unused");
    let check = |f: &ModelFiles| LoadedModel::check_files(f, ModelKind::Llada).expect_err("refused");
    let bad_input = |e: runner::model::ModelError| runner::exit_code(&anyhow::Error::new(e));

    // A tokenizer with an id past config.json's vocabulary (LLaDA's config beside Llama-3's 128256 tokens): its
    // ids would index past the embedding mid-cell. Refused by the pre-run check, naming the tokenizer, even when
    // config.json's own EOS is that id (formerly blamed on config.json). An added token takes the id after the
    // tokenizer's last: here the first past the unpadded synthetic vocabulary.
    let unpadded = candle_core::safetensors::load(&synthetic.weights[0], &Device::Cpu).expect("weights");
    let past = max_token_id(&synthetic) + 1;
    let big = write_checkpoint(dir.path(), "big-tokenizer", &synthetic, &unpadded, |c| c["eos_token_id"] = past.into());
    edit_json(&big.tokenizer, |t| add_token(t, past, "<|other_models_eot|>"));
    assert_eq!(max_token_id(&big), past);
    let err = check(&big);
    let text = err.to_string();
    let head = format!("{}: tokenizer.json and config.json are of different models", big.tokenizer.display());
    assert!(text.starts_with(&head), "{text}");
    assert!(text.contains(&format!("up to {past}")) && text.contains(&format!("vocabulary of {past}")), "{text}");
    assert!(text.contains("fix: "), "{text}");
    assert_eq!(bad_input(err), 2, "a mismatched tokenizer is bad input");

    // LLaDA's tokenizer without its added tokens (its ids stop before BOS 126080): config.json's ids are not tokens.
    let bare = write_checkpoint(dir.path(), "no-added-tokens", &files, &tensors, |_| {});
    edit_json(&bare.tokenizer, |t| t["added_tokens"] = serde_json::json!([]));
    let err = check(&bare);
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("{}: special token bos: bos_token_id {}", bare.config.display(), base.special.bos)),
        "{text}"
    );
    assert!(
        text.contains("is not a token of") && text.contains("different models") && text.contains("fix: "),
        "{text}"
    );
    assert_eq!(bad_input(err), 2);

    // An id past the vocabulary in generation_config.json names that file, not config.json.
    let strip = |c: &mut serde_json::Value| {
        c.as_object_mut().expect("object").remove("eos_token_id");
    };
    let gen_cfg = write_checkpoint(dir.path(), "generation-eos", &files, &tensors, strip);
    let generation = gen_cfg.snapshot_dir.join("generation_config.json");
    std::fs::write(&generation, format!(r#"{{"eos_token_id": {}}}"#, vocab + 3)).expect("generation config");
    let err = check(&gen_cfg).to_string();
    assert!(
        err.starts_with(&format!("{}: special token eos: eos_token_id {}", generation.display(), vocab + 3)),
        "{err}"
    );
    assert!(err.contains(&format!("outside the vocabulary of {vocab}")) && err.contains("fix: "), "{err}");
    // Every stop id it lists is checked, not only the first.
    std::fs::write(&generation, format!(r#"{{"eos_token_id": [{}, {}]}}"#, base.special.eos, vocab + 3))
        .expect("write");
    let err = check(&gen_cfg).to_string();
    assert!(err.contains("generation_config.json") && err.contains(&format!("eos_token_id {}", vocab + 3)), "{err}");
    std::fs::write(&generation, format!(r#"{{"eos_token_id": [{}]}}"#, base.special.eos)).expect("write");
    LoadedModel::check_files(&gen_cfg, ModelKind::Llada).expect("its own ids");
}

/// Rewrites a safetensors file's header as `edit` changes it (the tensor bytes kept), with `tail` appended.
fn edit_safetensors(path: &Path, edit: impl FnOnce(&mut serde_json::Value), tail: &[u8]) {
    let bytes = std::fs::read(path).expect("read");
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).expect("header");
    edit(&mut header);
    let text = header.to_string();
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend(text.as_bytes());
    out.extend(&bytes[8 + n..]);
    out.extend(tail);
    replace_file(path, out);
}

#[test]
fn safetensors_offsets_that_disagree_with_the_shapes_are_refused_naming_the_tensor() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (files, tensors, _) = tiny_llama_tensors(dir.path());
    let model = write_checkpoint(dir.path(), "offsets", &files, &tensors, |_| {});
    let path = model.weights[0].clone();
    let whole = std::fs::read(&path).expect("weights");
    let offsets = |h: &serde_json::Value, name: &str| -> [u64; 2] {
        serde_json::from_value(h[name]["data_offsets"].clone()).expect("offsets")
    };
    let last = {
        let n = u64::from_le_bytes(whole[..8].try_into().expect("8 bytes")) as usize;
        let h: serde_json::Value = serde_json::from_slice(&whole[8..8 + n]).expect("header");
        let obj = h.as_object().expect("object");
        obj.keys().filter(|k| *k != "__metadata__").max_by_key(|k| offsets(&h, k)[1]).expect("a tensor").clone()
    };
    let refused = |what: &str| {
        let err = LoadedModel::check_files(&model, ModelKind::Llama).expect_err(what).to_string();
        std::fs::write(&path, &whole).expect("restore");
        assert!(err.starts_with(&path.display().to_string()) && err.contains("fix: "), "{what}: {err}");
        // The test's checkpoint is a synthetic one (its config.json carries the marker): written again, not fetched.
        assert!(err.contains("write it again with `dllm-bench synth --kind llama"), "{what}: {err}");
        err
    };
    // A tensor whose offsets span fewer bytes than its shape x dtype (the file's length unchanged).
    edit_safetensors(&path, |h| h[&last]["data_offsets"][1] = (offsets(h, &last)[1] - 4).into(), &[]);
    let err = refused("a short tensor");
    assert!(err.contains(&format!("`{last}`")) && err.contains("data_offsets") && err.contains("takes"), "{err}");
    // Two tensors on the same bytes (each the right size): the second overlaps the first.
    let (a, b) = ("model.layers.0.input_layernorm.weight", "model.layers.1.input_layernorm.weight");
    edit_safetensors(&path, |h| h[b]["data_offsets"] = h[a]["data_offsets"].clone(), &[]);
    let err = refused("an overlap");
    assert!(err.contains(&format!("`{b}`")) && err.contains("overlap"), "{err}");
    // Bytes after the last tensor.
    edit_safetensors(&path, |_| {}, &[0; 8]);
    let err = refused("trailing bytes");
    assert!(err.contains("its tensors end at data byte") && err.contains("after its header"), "{err}");
    LoadedModel::check_files(&model, ModelKind::Llama).expect("the file as written");
}

#[test]
fn a_config_id_of_the_token_tokenizer_config_names_is_accepted() {
    // Dream's config.json may say BOS 151665, `<|beginoftext|>`, the token its tokenizer_config.json names,
    // while the layout's fallback string is `<|endoftext|>`.
    let dir = tempfile::tempdir().expect("tempdir");
    let synthetic = tiny_files(dir.path(), ModelKind::Dream, &spec(5, None));
    let (files, tensors) = padded_vocab(dir.path(), "padded-dream", &synthetic, ModelKind::Dream, 8);
    let base = load(&files, ModelKind::Dream);
    let endoftext = base.tokenizer.token_to_id("<|endoftext|>").expect("<|endoftext|>");
    let bot = max_token_id(&files) + 1;
    assert!((bot as usize) < base.config.vocab_size);
    let with_bos = |name: &str, bos: u32| {
        let f = write_checkpoint(dir.path(), name, &files, &tensors, |c| c["bos_token_id"] = bos.into());
        edit_json(&f.tokenizer, |t| add_token(t, bot, "<|beginoftext|>"));
        std::fs::write(
            f.snapshot_dir.join("tokenizer_config.json"),
            r#"{"bos_token": "<|beginoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
                "mask_token": "<|mask|>"}"#,
        )
        .expect("tokenizer config");
        f
    };
    let m = load(&with_bos("dream-beginoftext", bot), ModelKind::Dream);
    assert_eq!(m.special.bos, bot);
    assert!(m.special.sources.contains(&format!("bos {bot} (config.json bos_token_id)")), "{}", m.special.sources);
    // Dream-v0-Base's files: config.json says `<|endoftext|>` although tokenizer_config.json names
    // `<|beginoftext|>`: the layout's token, accepted as before.
    assert_eq!(load(&with_bos("dream-endoftext", endoftext), ModelKind::Dream).special.bos, endoftext);
    // Any other id is refused, naming what the tokenizer maps both tokens to.
    let other = with_bos("dream-other", 7);
    let err = LoadedModel::load(&other, ModelKind::Dream, &Device::Cpu, DType::F32).expect_err("bos 7").to_string();
    assert!(err.contains("says 7") && err.contains(&format!("<|beginoftext|> to {bot}")), "{err}");
    assert!(err.contains(&format!("<|endoftext|> to {endoftext}")), "{err}");
}

// ---------------------------------------------------------------- the transformer against candle-transformers

#[test]
fn llama_logits_match_candle_transformers() {
    use candle_transformers::models::llama as ct;
    let dir = tempfile::tempdir().expect("tempdir");
    let files = tiny_files(dir.path(), ModelKind::Llama, &spec(11, None));
    let ours = load(&files, ModelKind::Llama);
    let text = std::fs::read_to_string(&files.config).expect("config");
    let cfg: ct::LlamaConfig = serde_json::from_str(&text).expect("candle config");
    assert_eq!(cfg.rope_theta, 500000.0, "candle must see the same RoPE base");
    let cfg = cfg.into_config(false);
    let vb = candle_nn::VarBuilder::from_tensors(
        candle_core::safetensors::load(&files.weights[0], &Device::Cpu).expect("load"),
        DType::F32,
        &Device::Cpu,
    );
    let theirs = ct::Llama::load(vb, &cfg).expect("candle llama");
    let prompt: Vec<u32> = vec![11, 300, 42, 7, 99, 250, 3, 18, 64, 401, 5];
    for len in [1, 4, prompt.len()] {
        let ids = Tensor::new(&prompt[..len], &Device::Cpu).expect("ids").unsqueeze(0).expect("u");
        let mut cache = ct::Cache::new(false, DType::F32, &cfg, &Device::Cpu).expect("cache");
        let want = theirs.forward(&ids, 0, &mut cache).expect("candle fwd"); // (1, vocab), last position
        let got = ours.forward_full(&ids, None).expect("fwd").i((.., len - 1, ..)).expect("last");
        let d = max_abs_diff(&got, &want);
        assert!(d < 1e-4, "len {len}: max |diff| {d}");
    }
    // With candle's own KV cache, token by token, the last logits still agree with our full pass.
    let mut cache = ct::Cache::new(true, DType::F32, &cfg, &Device::Cpu).expect("cache");
    let mut want = None;
    for (i, &t) in prompt.iter().enumerate() {
        let ids = Tensor::new(&[[t]], &Device::Cpu).expect("ids");
        want = Some(theirs.forward(&ids, i, &mut cache).expect("candle step"));
    }
    let ids = Tensor::new(prompt.as_slice(), &Device::Cpu).expect("ids").unsqueeze(0).expect("u");
    let got = ours.forward_full(&ids, None).expect("fwd").i((.., prompt.len() - 1, ..)).expect("last");
    let d = max_abs_diff(&got, &want.expect("steps"));
    assert!(d < 1e-4, "cached candle vs ours: {d}");
}

#[test]
fn bidirectional_padding_is_exact_up_to_position_shift() {
    // A left-padded LLaDA row equals the unpadded sequence run at positions shifted by the padding.
    let (_d, m) = tiny_model(ModelKind::Llada);
    let tf = &m.transformer;
    let row: Vec<u32> = vec![9, 8, 7, 6, 5, 4];
    let pad = 3;
    let padded: Vec<u32> = std::iter::repeat_n(m.special.pad, pad).chain(row.iter().copied()).collect();
    let valid = vec![padded.iter().enumerate().map(|(j, _)| j >= pad).collect::<Vec<bool>>()];
    let ids = Tensor::new(padded.as_slice(), &Device::Cpu).expect("ids").unsqueeze(0).expect("u");
    let got = m.forward_full(&ids, Some(&valid)).expect("fwd").narrow(1, pad, row.len()).expect("narrow");
    let ids = Tensor::new(row.as_slice(), &Device::Cpu).expect("ids").unsqueeze(0).expect("u");
    let rope = tf.rope(&Positions::Range { start: pad, len: row.len() }).expect("rope");
    let want = tf.forward(&ids, &rope, None, None, LogitsSpan::All).expect("fwd");
    let d = max_abs_diff(&got, &want);
    assert!(d < 1e-5, "{d}");
}

// ---------------------------------------------------------------- autoregressive decoding

fn argmax_last(m: &LoadedModel, seq: &[u32]) -> u32 {
    let ids = Tensor::new(seq, &Device::Cpu).expect("ids").unsqueeze(0).expect("u");
    let logits = m.forward_full(&ids, None).expect("fwd").i((0, seq.len() - 1)).expect("last");
    logits.argmax(0).expect("argmax").to_scalar::<u32>().expect("id")
}

#[test]
fn ar_cached_decode_equals_uncached_forward_with_left_padding() {
    let (_d, m) = tiny_model(ModelKind::Llama);
    let prompts = vec![vec![5u32, 9, 200], vec![17, 3, 88, 120, 61, 7, 400], vec![42]];
    let n_out = 10;
    let out = generate_ar(&m, &prompts, n_out, EosPolicy::Ignore).expect("generate");
    assert_eq!(out.tokens.len(), 3);
    assert_eq!(out.token_ms.len(), n_out);
    assert!(out.e2e_ms >= out.prefill_ms && out.prefill_ms > 0.0);
    for (p, generated) in prompts.iter().zip(&out.tokens) {
        assert_eq!(generated.len(), n_out);
        let mut seq = p.clone();
        for &t in generated {
            // Uncached, unpadded, batch of one: the greedy choice must be the same token.
            assert_eq!(argmax_last(&m, &seq), t, "prompt {p:?}");
            seq.push(t);
        }
    }
    // A row's tokens do not depend on the padding the batch gives it (padding-aware positions).
    let alone = generate_ar(&m, &prompts[2..], n_out, EosPolicy::Ignore).expect("generate");
    assert_eq!(alone.tokens[0], out.tokens[2]);
}

/// Greedy tokens of candle-transformers' llama (its growing `Tensor::cat` cache and `repeat_kv` attention), one
/// unpadded row at a time.
fn candle_greedy(files: &ModelFiles, prompt: &[u32], n_out: usize) -> Vec<u32> {
    use candle_transformers::models::llama as ct;
    let text = std::fs::read_to_string(&files.config).expect("config");
    let cfg: ct::LlamaConfig = serde_json::from_str(&text).expect("candle config");
    let cfg = cfg.into_config(false);
    let vb = candle_nn::VarBuilder::from_tensors(
        candle_core::safetensors::load(&files.weights[0], &Device::Cpu).expect("load"),
        DType::F32,
        &Device::Cpu,
    );
    let model = ct::Llama::load(vb, &cfg).expect("candle llama");
    let mut cache = ct::Cache::new(true, DType::F32, &cfg, &Device::Cpu).expect("cache");
    let ids = Tensor::new(prompt, &Device::Cpu).expect("ids").unsqueeze(0).expect("u");
    let mut logits = model.forward(&ids, 0, &mut cache).expect("prefill");
    let mut out = Vec::with_capacity(n_out);
    for s in 0..n_out {
        let t =
            logits.argmax(candle_core::D::Minus1).expect("argmax").i(0).expect("row").to_scalar::<u32>().expect("id");
        out.push(t);
        if s + 1 < n_out {
            let ids = Tensor::new(&[[t]], &Device::Cpu).expect("ids");
            logits = model.forward(&ids, prompt.len() + s, &mut cache).expect("step");
        }
    }
    out
}

#[test]
fn ar_preallocated_cache_and_grouped_attention_decode_as_candle_llama() {
    // The preallocated in-place cache and the grouped-query attention (no KV head copied; the tiny Llama has 4
    // query heads over 2 KV heads) against candle-transformers' concatenating cache with repeated KV heads, at
    // several batch sizes with left padding: the same greedy tokens in every row.
    let dir = tempfile::tempdir().expect("tempdir");
    let files = tiny_files(dir.path(), ModelKind::Llama, &spec(11, None));
    let m = load(&files, ModelKind::Llama);
    assert!(m.config.num_heads > m.config.num_kv_heads, "the test needs grouped-query attention");
    let pool: Vec<Vec<u32>> =
        vec![vec![5, 9, 200], vec![17, 3, 88, 120, 61, 7, 400], vec![42], vec![300, 301, 302, 303, 304], vec![64, 65]];
    let n_out = 12;
    let want: Vec<Vec<u32>> = pool.iter().map(|p| candle_greedy(&files, p, n_out)).collect();
    for b in [1, 2, 3, 5] {
        let out = generate_ar(&m, &pool[..b], n_out, EosPolicy::Ignore).expect("generate");
        assert_eq!(out.tokens, want[..b], "batch {b}");
    }
}

#[test]
fn kv_cache_is_preallocated_for_exactly_the_tokens_fed() {
    // A generation of n_out tokens feeds the prompt and n_out - 1 tokens: the buffers hold exactly that, the
    // bytes metrics::roofline::kv_cache_bytes counts; one token more is refused.
    let (_d, m) = tiny_model(ModelKind::Llama);
    let tf = &m.transformer;
    let (b, p, n_out) = (3, 4, 5);
    let mut cache = tf.new_cache(p + n_out - 1);
    assert_eq!(cache.allocated_bytes(), 0);
    let ids = Tensor::from_vec(vec![7u32; b * p], (b, p), &Device::Cpu).expect("ids");
    let rope = tf.rope(&Positions::Range { start: 0, len: p }).expect("rope");
    let bias = tf.attention_bias(None, b, 0, p, p).expect("bias");
    tf.forward(&ids, &rope, bias.as_ref(), Some(&mut cache), LogitsSpan::Last).expect("prefill");
    let expected = metrics::roofline::kv_cache_bytes(&m.config.shape(), b as u64, (p + n_out - 1) as u64, 4);
    assert_eq!(cache.allocated_bytes() as u64, expected);
    let step = |cache: &mut runner::model::KvCache| {
        let pos = cache.len();
        let ids = Tensor::from_vec(vec![9u32; b], (b, 1), &Device::Cpu).expect("ids");
        let rope = tf.rope(&Positions::Range { start: pos, len: 1 }).expect("rope");
        let bias = tf.attention_bias(None, b, pos, 1, pos + 1).expect("bias");
        tf.forward(&ids, &rope, bias.as_ref(), Some(cache), LogitsSpan::Last)
    };
    for _ in 1..n_out {
        step(&mut cache).expect("decode step");
    }
    assert_eq!(cache.len(), p + n_out - 1);
    assert_eq!(cache.allocated_bytes() as u64, expected, "written in place, never grown");
    let err = step(&mut cache).expect_err("past the capacity");
    assert!(err.to_string().contains("KV cache full"), "{err}");
}

/// Rewrites the tiny Llama so that EOS is the greedy choice everywhere (a large constant component in every
/// embedding, read by the EOS row of the LM head).
fn eos_loving_llama(dir: &Path) -> LoadedModel {
    let files = tiny_files(dir, ModelKind::Llama, &spec(9, None));
    let eos = config_json(&files)["eos_token_id"].as_u64().expect("eos") as usize;
    let path = &files.weights[0];
    let mut t: HashMap<String, Tensor> = candle_core::safetensors::load(path, &Device::Cpu).expect("load");
    let emb = &t["model.embed_tokens.weight"];
    let (v, h) = emb.dims2().expect("dims");
    let mut bump = vec![0f32; v * h];
    for r in 0..v {
        bump[r * h] = 8.0;
    }
    let emb = (emb + Tensor::from_vec(bump, (v, h), &Device::Cpu).expect("t")).expect("add");
    let mut head = t["lm_head.weight"].to_vec2::<f32>().expect("head");
    head[eos][0] = 4.0;
    t.insert("model.embed_tokens.weight".into(), emb);
    t.insert("lm_head.weight".into(), Tensor::new(head, &Device::Cpu).expect("head"));
    std::fs::remove_file(path).expect("rm link");
    candle_core::safetensors::save(&t, path).expect("save");
    load(&files, ModelKind::Llama)
}

#[test]
fn ar_emits_exactly_n_out_when_eos_is_the_greedy_choice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = eos_loving_llama(dir.path());
    let prompts = vec![vec![5u32, 6, 7], vec![100, 101]];
    assert_eq!(argmax_last(&m, &prompts[0]), m.special.eos, "precondition: EOS is the argmax");
    let ignore = generate_ar(&m, &prompts, 6, EosPolicy::Ignore).expect("ignore");
    for row in &ignore.tokens {
        assert_eq!(row.len(), 6);
        assert!(row.contains(&m.special.eos), "ignore keeps EOS as a token: {row:?}");
    }
    let suppress = generate_ar(&m, &prompts, 6, EosPolicy::Suppress).expect("suppress");
    for row in &suppress.tokens {
        assert_eq!(row.len(), 6);
        assert!(!row.iter().any(|t| m.special.stop.contains(t)), "suppress never emits a stop id: {row:?}");
    }
}

#[test]
fn ar_rejects_bad_input() {
    let (_d, m) = tiny_model(ModelKind::Llama);
    assert!(generate_ar(&m, &[], 4, EosPolicy::Ignore).is_err());
    assert!(generate_ar(&m, &[vec![]], 4, EosPolicy::Ignore).is_err());
    assert!(generate_ar(&m, &[vec![1]], 0, EosPolicy::Ignore).is_err());
    let (_d2, llada) = tiny_model(ModelKind::Llada);
    assert!(generate_ar(&llada, &[vec![1]], 4, EosPolicy::Ignore).is_err());
}

// ---------------------------------------------------------------- the LLaDA sampler

#[test]
fn transfer_schedule_follows_the_reference_rule() {
    assert_eq!(transfer_schedule(10, 4), [3, 3, 2, 2]);
    assert_eq!(transfer_schedule(8, 8), [1; 8]);
    assert_eq!(transfer_schedule(3, 5), [1, 1, 1, 0, 0]);
    assert_eq!(transfer_schedule(32, 1), [32]);
    for m in 0..40 {
        for spb in 1..20 {
            let s = transfer_schedule(m, spb);
            assert_eq!(s.len(), spb);
            assert_eq!(s.iter().sum::<usize>(), m);
            assert!(s.windows(2).all(|w| w[0] >= w[1] && w[0] - w[1] <= 1));
        }
    }
}

#[test]
fn top_k_ties_break_towards_the_lower_position() {
    const M: u32 = 99;
    let block = [M, 5, M, M, M, M];
    // Equal confidences: the lowest masked positions win; committed position 1 is never chosen.
    assert_eq!(select_positions(&block, M, &[0.5; 6], 3), [0, 2, 3]);
    // Higher confidence first, then position; NaN ranks last; k beyond the masked count is capped.
    let conf = [0.1, 1.0, 0.7, f64::NAN, 0.7, 0.9];
    assert_eq!(select_positions(&block, M, &conf, 3), [5, 2, 4]);
    assert_eq!(select_positions(&block, M, &conf, 10), [5, 2, 4, 0, 3]);
    assert!(select_positions(&block, M, &conf, 0).is_empty());
}

#[test]
fn attention_is_bidirectional_for_llada_and_causal_for_llama() {
    for kind in [ModelKind::Llada, ModelKind::Llama] {
        let (_d, m) = tiny_model(kind);
        let a = Tensor::new(&[[5u32, 6, 7, 8]], &Device::Cpu).expect("ids");
        let b = Tensor::new(&[[5u32, 6, 7, 300]], &Device::Cpu).expect("ids");
        let la = m.forward_full(&a, None).expect("fwd").i((.., 0, ..)).expect("pos 0");
        let lb = m.forward_full(&b, None).expect("fwd").i((.., 0, ..)).expect("pos 0");
        let d = max_abs_diff(&la, &lb);
        match kind {
            ModelKind::Llada | ModelKind::Dream => {
                assert!(d > 1e-4, "a diffusion model's first position must see the last token ({d})")
            }
            ModelKind::Llama => assert_eq!(d, 0.0, "Llama's first position must not see the future"),
        }
    }
}

#[test]
fn llada_schedule_commits_and_nfe() {
    let (_d, m) = tiny_model(ModelKind::Llada);
    let mask = m.special.mask.expect("mask");
    let prompts = vec![vec![11u32, 12, 13, 14], vec![21, 22]];
    // (n_out, block_length, steps): one block; several blocks; spb > block_length; one step per block.
    for (n_out, bl, steps) in [(16, 16, 16), (16, 8, 4), (16, 4, 8), (8, 4, 10), (12, 4, 3), (12, 12, 5)] {
        let blocks = n_out / bl;
        let spb = steps / blocks;
        let p = 4;
        // committed_at[row][j] = step at which generated position j stopped being a mask.
        let mut committed_at = vec![vec![None::<usize>; n_out]; prompts.len()];
        let mut prev: Option<Vec<Vec<u32>>> = None;
        let params = LladaParams { steps, block_length: bl, ..Default::default() };
        let out = generate_llada_observed(&m, &prompts, n_out, &params, &mut |step, x| {
            for (r, row) in x.iter().enumerate() {
                assert_eq!(row.len(), p + n_out);
                for j in 0..n_out {
                    let t = row[p + j];
                    if let Some(prev) = &prev {
                        let before = prev[r][p + j];
                        if before != mask {
                            assert_eq!(t, before, "a committed token changed (row {r}, pos {j}, step {step})");
                        }
                    }
                    if t != mask && committed_at[r][j].is_none() {
                        committed_at[r][j] = Some(step);
                    }
                }
            }
            prev = Some(x.to_vec());
        })
        .expect("generate");
        let case = format!("n_out {n_out}, block {bl}, steps {steps}");
        assert_eq!(out.nfe, steps, "{case}");
        assert_eq!(out.step_ms.len(), steps, "{case}");
        assert_eq!(out.transfers.len(), steps, "{case}");
        let sched = transfer_schedule(bl, spb);
        for (s, per_row) in out.transfers.iter().enumerate() {
            for &k in per_row {
                assert_eq!(k, sched[s % spb], "{case}, step {s}");
            }
        }
        for (r, row) in out.tokens.iter().enumerate() {
            assert_eq!(row.len(), n_out);
            assert!(!row.contains(&mask), "{case}: mask left in row {r}");
            for (j, at) in committed_at[r].iter().enumerate() {
                let at = at.expect("every position committed");
                assert_eq!(at / spb, j / bl, "{case}: position {j} committed at step {at}, outside its block");
            }
            // Tokens committed at each step = the transfer count of that step.
            for s in 0..steps {
                let n = committed_at[r].iter().filter(|a| **a == Some(s)).count();
                assert_eq!(n, out.transfers[s][r], "{case}, row {r}, step {s}");
            }
        }
        assert!(out.first_block_ms > 0.0 && out.first_block_ms <= out.e2e_ms);
        // Deterministic: the same run twice gives the same tokens.
        let again = generate_llada(&m, &prompts, n_out, &params).expect("again");
        assert_eq!(again.tokens, out.tokens, "{case}");
    }
}

#[test]
fn llada_sampling_and_random_remasking_are_seeded() {
    let (_d, m) = tiny_model(ModelKind::Llada);
    let prompts = vec![vec![30u32, 31, 32]];
    for (temperature, remasking) in
        [(1.0, Remasking::LowConfidence), (0.0, Remasking::Random), (0.7, Remasking::Random)]
    {
        let params =
            |seed| LladaParams { steps: 16, block_length: 8, temperature, remasking, seed, ..LladaParams::default() };
        let a = generate_llada(&m, &prompts, 16, &params(1)).expect("a");
        let b = generate_llada(&m, &prompts, 16, &params(1)).expect("b");
        assert_eq!(a.tokens, b.tokens);
        assert_eq!(a.transfers, b.transfers);
        let others: Vec<_> = (2..6).map(|s| generate_llada(&m, &prompts, 16, &params(s)).expect("c").tokens).collect();
        assert!(others.iter().any(|o| *o != a.tokens), "the seed must matter ({temperature}, {remasking:?})");
    }
}

#[test]
fn llada_row_does_not_depend_on_other_rows() {
    let (_d, m) = tiny_model(ModelKind::Llada);
    let params = LladaParams { steps: 8, block_length: 4, ..Default::default() };
    let short = vec![40u32, 41];
    let a = generate_llada(&m, &[short.clone(), vec![1, 2, 3, 4, 5]], 8, &params).expect("a");
    let b = generate_llada(&m, &[short.clone(), vec![9, 9, 9, 9, 9]], 8, &params).expect("b");
    assert_eq!(a.tokens[0], b.tokens[0], "padding is masked out: the other row cannot leak in");
    // Unpadded, a batch of one is the same as the same row next to an equally long one.
    let c = generate_llada(&m, &[short.clone(), vec![7, 8]], 8, &params).expect("c");
    let d = generate_llada(&m, &[short], 8, &params).expect("d");
    assert_eq!(c.tokens[0], d.tokens[0]);
}

#[test]
fn llada_rejects_bad_parameters() {
    let (_d, m) = tiny_model(ModelKind::Llada);
    let mask = m.special.mask.expect("mask");
    let ok = LladaParams { steps: 8, block_length: 4, ..Default::default() };
    let p = vec![vec![1u32, 2]];
    assert!(generate_llada(&m, &p, 8, &ok).is_ok());
    let bad = |params: LladaParams, prompts: &[Vec<u32>], n_out: usize| {
        generate_llada(&m, prompts, n_out, &params).expect_err("must refuse").to_string()
    };
    assert!(bad(ok, &p, 10).contains("block_length"));
    assert!(bad(LladaParams { steps: 3, ..ok }, &p, 8).contains("steps"));
    assert!(bad(LladaParams { steps: 0, ..ok }, &p, 8).contains("steps"));
    assert!(bad(LladaParams { block_length: 0, ..ok }, &p, 8).contains("block_length"));
    assert!(bad(LladaParams { temperature: -1.0, ..ok }, &p, 8).contains("temperature"));
    assert!(bad(ok, &[vec![]], 8).contains("empty"));
    assert!(bad(ok, &[], 8).contains("no prompts"));
    assert!(bad(ok, &[vec![1, mask]], 8).contains("mask"));
    let (_d2, llama) = tiny_model(ModelKind::Llama);
    assert!(generate_llada(&llama, &p, 8, &ok).is_err());
}

/// CPU cost of the tiny models (run with `--ignored --nocapture`): ms per AR token, ms per LLaDA step.
#[test]
#[ignore]
fn tiny_cpu_timing() {
    let (_d, llama) = tiny_model(ModelKind::Llama);
    let (_d2, llada) = tiny_model(ModelKind::Llada);
    let prompt = vec![(1..=16).collect::<Vec<u32>>()];
    let _ = generate_ar(&llama, &prompt, 32, EosPolicy::Ignore).expect("warm");
    let ar = generate_ar(&llama, &prompt, 32, EosPolicy::Ignore).expect("ar");
    let decode: f64 = ar.token_ms[1..].iter().sum::<f64>() / (ar.token_ms.len() - 1) as f64;
    let params = LladaParams { steps: 32, block_length: 32, ..Default::default() };
    let _ = generate_llada(&llada, &prompt, 32, &params).expect("warm");
    let ll = generate_llada(&llada, &prompt, 32, &params).expect("llada");
    let step = ll.step_ms.iter().sum::<f64>() / ll.step_ms.len() as f64;
    println!(
        "tiny CPU: AR prefill {:.3} ms, {decode:.3} ms/token; LLaDA N=48: {step:.3} ms/step, e2e {:.1} ms",
        ar.prefill_ms, ll.e2e_ms
    );
}

#[test]
fn classifier_free_guidance_uses_the_masked_prompt_pass_and_counts_two_forwards_per_step() {
    let (_d, m) = tiny_model(ModelKind::Llada);
    let mask = m.special.mask.expect("mask");
    let prompt = vec![11u32, 12, 13, 14];
    let (p, n_out, s) = (prompt.len(), 8, 1.5);
    let params = LladaParams { steps: 8, block_length: 8, cfg_scale: s, ..Default::default() };
    let mut first: Option<Vec<u32>> = None;
    let out = generate_llada_observed(&m, std::slice::from_ref(&prompt), n_out, &params, &mut |step, x| {
        if step == 0 {
            first = Some(x[0].clone());
        }
    })
    .expect("generate");
    assert_eq!(out.nfe, 16, "two forward evaluations per step");
    assert_eq!(out.step_ms.len(), 8);

    // The first step by hand: conditional logits of prompt + masks, unconditional of masks only (the prompt
    // masked), guided = un + (s + 1) (cond - un); the most confident masked position takes its argmax.
    let row = |r: Vec<u32>| Tensor::new(r.as_slice(), &Device::Cpu).and_then(|t| t.unsqueeze(0)).expect("ids");
    let x0: Vec<u32> = prompt.iter().copied().chain(std::iter::repeat_n(mask, n_out)).collect();
    let un0: Vec<u32> = std::iter::repeat_n(mask, p + n_out).collect();
    let logits = |ids: Vec<u32>| -> Vec<Vec<f64>> {
        let l = m.forward_full(&row(ids), None).expect("forward").i((0, p..p + n_out)).expect("block");
        l.to_dtype(DType::F64).expect("f64").to_vec2::<f64>().expect("values")
    };
    let (cond, un) = (logits(x0), logits(un0));
    let mut best: Option<(f64, usize, u32)> = None;
    for j in 0..n_out {
        let g: Vec<f64> = cond[j].iter().zip(&un[j]).map(|(c, u)| u + (s + 1.0) * (c - u)).collect();
        let (arg, max) =
            g.iter().enumerate().fold((0, f64::NEG_INFINITY), |a, (i, &v)| if v > a.1 { (i, v) } else { a });
        let conf = 1.0 / g.iter().map(|v| (v - max).exp()).sum::<f64>();
        if best.is_none_or(|(c, ..)| conf > c) {
            best = Some((conf, j, arg as u32));
        }
    }
    let (_, j, token) = best.expect("a position");
    let first = first.expect("step 0 observed");
    let committed: Vec<(usize, u32)> =
        (0..n_out).filter(|&i| first[p + i] != mask).map(|i| (i, first[p + i])).collect();
    assert_eq!(committed, [(j, token)], "step 0 commits the guided logits' most confident position");
}

// ---------------------------------------------------------------- other checkpoints of the llama layout

/// Llama-3.1's published RoPE scaling (Meta-Llama-3.1-8B's config.json).
fn llama31_scaling() -> serde_json::Value {
    serde_json::json!({
        "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192, "rope_type": "llama3"
    })
}

/// A Llama-3-8B-shaped config.json (head_dim 128, theta 500000) edited by `edit`, parsed as the llama kind.
fn llama8b_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) -> Result<ModelConfig, String> {
    let mut j = serde_json::json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "vocab_size": 128256, "max_position_embeddings": 131072,
        "hidden_act": "silu"
    });
    edit(&mut j);
    let p = dir.join("config.json");
    std::fs::write(&p, j.to_string()).expect("config");
    ModelConfig::from_file(&p, ModelKind::Llama).map_err(|e| e.to_string())
}

#[test]
fn llama31_rope_scaling_gives_the_published_frequencies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scaled = llama8b_config(dir.path(), |j| j["rope_scaling"] = llama31_scaling()).expect("llama3 scaling");
    let f = scaled.rope_inv_freq();
    assert_eq!(f.len(), 64);
    // Worked by hand from theta = 500000, head_dim = 128 (inv_freq_i = theta^(-i/64)), factor 8, low 1, high 4,
    // original context 8192: wavelengths below 8192/4 = 2048 keep their frequency, above 8192/1 are divided by 8.
    // i = 0: inv 1, wavelength 2 pi: kept.
    assert_eq!(f[0], 1.0);
    // i = 32: inv = 500000^-0.5 = 1.4142136e-3, wavelength 2 pi / inv = 4442.883 (medium): smooth =
    // (8192 / 4442.883 - 1) / 3 = 0.2812818, scaled = inv * ((1 - smooth) / 8 + smooth) = inv * 0.3711216
    // = 5.24846e-4.
    assert!((f[32] - 5.24846e-4).abs() < 1e-9, "{}", f[32]);
    // i = 63: inv = 500000^(-63/64) = exp(-12.917327) = 2.455141e-6, wavelength 2.56e6 (long): divided by 8
    // = 3.068926e-7.
    assert!((f[63] - 3.068926e-7).abs() < 1e-12, "{}", f[63]);
    // Unscaled, the same config gives theta^(-i/64) everywhere.
    let plain = llama8b_config(dir.path(), |_| {}).expect("plain");
    assert!((plain.rope_inv_freq()[32] - 1.414214e-3).abs() < 1e-9);
    assert!(plain.rope_scaling.is_none());
    // transformers 5 writes the same fields under rope_parameters, beside rope_theta.
    let v5 = llama8b_config(dir.path(), |j| {
        let mut p = llama31_scaling();
        p["rope_theta"] = 500000.0.into();
        j["rope_parameters"] = p;
        j.as_object_mut().expect("object").remove("rope_theta");
    })
    .expect("transformers-5 spelling");
    assert_eq!(v5.rope_inv_freq(), f);
    // Other scalings, and a llama3 scaling with a field missing, are refused naming the field.
    let err =
        llama8b_config(dir.path(), |j| j["rope_scaling"] = serde_json::json!({"rope_type": "yarn", "factor": 4.0}))
            .expect_err("yarn");
    assert!(err.contains("rope_scaling.rope_type") && err.contains("yarn"), "{err}");
    let err = llama8b_config(dir.path(), |j| {
        let mut s = llama31_scaling();
        s.as_object_mut().expect("object").remove("low_freq_factor");
        j["rope_scaling"] = s;
    })
    .expect_err("incomplete");
    assert!(err.contains("rope_scaling.low_freq_factor"), "{err}");
}

#[test]
fn qwen2_and_llama_attention_biases_are_read_from_the_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let qwen2 = llama8b_config(dir.path(), |j| {
        j["architectures"] = serde_json::json!(["Qwen2ForCausalLM"]);
        j["model_type"] = "qwen2".into();
    })
    .expect("qwen2 loads as the llama layout");
    assert!(qwen2.qkv_bias && !qwen2.o_bias, "Qwen2: biases on q, k, v only");
    let biased = llama8b_config(dir.path(), |j| j["attention_bias"] = true.into()).expect("attention_bias");
    assert!(biased.qkv_bias && biased.o_bias, "Llama's attention_bias: all four projections");
    let plain = llama8b_config(dir.path(), |_| {}).expect("plain");
    assert!(!plain.qkv_bias && !plain.o_bias);
    let names = runner::model::WeightNames::for_kind(ModelKind::Llama);
    let count = |c: &ModelConfig| names.tensors(c).iter().filter(|(n, _)| n.ends_with(".bias")).count();
    assert_eq!((count(&plain), count(&qwen2), count(&biased)), (0, 3 * 32, 4 * 32));
    for (field, value, want) in [
        ("mlp_bias", serde_json::json!(true), "mlp_bias"),
        ("use_sliding_window", serde_json::json!(true), "use_sliding_window"),
        ("architectures", serde_json::json!(["MistralForCausalLM"]), "Qwen2ForCausalLM"),
    ] {
        let err = llama8b_config(dir.path(), |j| j[field] = value).expect_err(field);
        assert!(err.contains(want), "{field}: {err}");
    }
}

/// The tiny synthetic Llama rewritten as a Qwen2 checkpoint: q/k/v biases from `bias(name, len)`.
fn tiny_qwen2(cache: &Path, name: &str, from: &ModelFiles, bias: impl Fn(&str, usize) -> Tensor) -> ModelFiles {
    let mut tensors = candle_core::safetensors::load(&from.weights[0], &Device::Cpu).expect("weights");
    let names: Vec<(String, usize)> = tensors
        .iter()
        .filter(|(n, _)| n.ends_with("q_proj.weight") || n.ends_with("k_proj.weight") || n.ends_with("v_proj.weight"))
        .map(|(n, t)| (n.replace(".weight", ".bias"), t.dims()[0]))
        .collect();
    for (n, len) in names {
        tensors.insert(n.clone(), bias(&n, len));
    }
    write_checkpoint(cache, name, from, &tensors, |c| {
        c["architectures"] = serde_json::json!(["Qwen2ForCausalLM"]);
        c["model_type"] = "qwen2".into();
    })
}

#[test]
fn qwen2_biases_are_loaded_and_change_the_logits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = tiny_files(dir.path(), ModelKind::Llama, &spec(13, None));
    let llama = load(&files, ModelKind::Llama);
    let zeros =
        tiny_qwen2(dir.path(), "qwen-zero", &files, |_, len| Tensor::zeros(len, DType::F32, &Device::Cpu).expect("z"));
    let biased = tiny_qwen2(dir.path(), "qwen-biased", &files, |n, len| {
        let seed = n.bytes().map(f32::from).sum::<f32>();
        let v: Vec<f32> = (0..len).map(|i| ((i as f32 + seed) * 0.37).sin() * 0.5).collect();
        Tensor::from_vec(v, len, &Device::Cpu).expect("bias")
    });
    let ids = Tensor::new(&[[1u32, 40, 41, 42, 43, 44]], &Device::Cpu).expect("ids");
    let base = llama.forward_full(&ids, None).expect("llama");
    let with_zeros = load(&zeros, ModelKind::Llama);
    assert!(with_zeros.config.qkv_bias);
    assert_eq!(max_abs_diff(&with_zeros.forward_full(&ids, None).expect("zeros"), &base), 0.0, "zero biases add 0");
    let d = max_abs_diff(&load(&biased, ModelKind::Llama).forward_full(&ids, None).expect("biased"), &base);
    assert!(d > 1e-2, "the biases must reach the logits: max difference {d}");
    // A Qwen2 checkpoint without its biases is refused, naming the tensor.
    let tensors = candle_core::safetensors::load(&files.weights[0], &Device::Cpu).expect("weights");
    let bare = write_checkpoint(dir.path(), "qwen-bare", &files, &tensors, |c| c["model_type"] = "qwen2".into());
    let err = LoadedModel::load(&bare, ModelKind::Llama, &Device::Cpu, DType::F32).expect_err("no biases").to_string();
    assert!(err.contains("q_proj.bias"), "{err}");
}

/// transformers' logits (f32, eager attention) of `ids` through `AutoModelForCausalLM` loaded from the snapshot.
fn hf_logits(python: &Path, files: &ModelFiles, ids: &[u32]) -> Tensor {
    let script = r#"
import json, sys, torch, transformers
path, ids = sys.argv[1], json.loads(sys.argv[2])
model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
with torch.no_grad():
    print(json.dumps(model(torch.tensor([ids])).logits[0].tolist()))
"#;
    let out = std::process::Command::new(python)
        .args(["-c", script])
        .arg(&files.snapshot_dir)
        .arg(serde_json::to_string(ids).expect("ids"))
        .env("OMP_NUM_THREADS", "1")
        .output()
        .expect("python");
    assert!(out.status.success(), "{}: {}", files.repo_id, String::from_utf8_lossy(&out.stderr));
    let hf: Vec<Vec<f32>> = serde_json::from_slice(&out.stdout).expect("logits json");
    Tensor::new(hf, &Device::Cpu).expect("hf").unsqueeze(0).expect("batch")
}

#[test]
fn qwen2_and_llama31_logits_match_hf_transformers() {
    // The same checkpoints through transformers' Qwen2ForCausalLM and LlamaForCausalLM (f32, eager attention).
    let Some(python) = crate::hf_reference::hf_python_or_skip("model::qwen2_and_llama31_logits_match_hf_transformers")
    else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let files = tiny_files(dir.path(), ModelKind::Llama, &spec(17, None));
    let qwen2 = tiny_qwen2(dir.path(), "qwen", &files, |n, len| {
        let seed = n.bytes().map(f32::from).sum::<f32>();
        let v: Vec<f32> = (0..len).map(|i| ((i as f32 + seed) * 0.61).cos() * 0.3).collect();
        Tensor::from_vec(v, len, &Device::Cpu).expect("bias")
    });
    let tensors = candle_core::safetensors::load(&files.weights[0], &Device::Cpu).expect("weights");
    // A short original context, so that the scaling moves the frequencies these positions use.
    let scaled = write_checkpoint(dir.path(), "llama31", &files, &tensors, |c| {
        let mut s = llama31_scaling();
        s["original_max_position_embeddings"] = 64.into();
        c["rope_scaling"] = s;
    });
    let ids: Vec<u32> = vec![1, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56];
    let plain = load(&files, ModelKind::Llama);
    let t = Tensor::new(ids.as_slice(), &Device::Cpu).expect("ids").unsqueeze(0).expect("batch");
    for (name, files) in [("qwen2", &qwen2), ("llama3 rope scaling", &scaled)] {
        let hf = hf_logits(python, files, &ids);
        let ours = load(files, ModelKind::Llama).forward_full(&t, None).expect("ours");
        let d = max_abs_diff(&ours, &hf);
        assert!(d < 1e-4, "{name}: max |ours - transformers| = {d}");
        // And the feature is visible: without it the logits are far from transformers'.
        let without = max_abs_diff(&plain.forward_full(&t, None).expect("plain"), &hf);
        assert!(without > 1e-2, "{name}: the plain model is within {without} of transformers: the test sees nothing");
    }
}

// ---------------------------------------------------------------- special tokens from the checkpoint's own files

#[test]
fn special_tokens_come_from_the_checkpoints_files_with_their_source() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = tiny_files(dir.path(), ModelKind::Llama, &spec(19, None));
    let base = load(&files, ModelKind::Llama);
    let tensors = candle_core::safetensors::load(&files.weights[0], &Device::Cpu).expect("weights");
    let id = |t: &str| base.tokenizer.token_to_id(t).unwrap_or_else(|| panic!("{t} in the synthetic tokenizer"));
    // The synthetic config states its ids: config.json is the source.
    assert!(base.special.sources.contains(&format!("bos {} (config.json bos_token_id)", base.special.bos)));
    assert!(base.special.sources.contains("pad") && base.special.sources.contains("eos"), "{}", base.special.sources);

    // Without ids in config.json: generation_config.json first, then tokenizer_config.json's token strings.
    let strip = |c: &mut serde_json::Value| {
        let o = c.as_object_mut().expect("object");
        for f in ["bos_token_id", "eos_token_id", "pad_token_id"] {
            o.remove(f);
        }
    };
    let bare = write_checkpoint(dir.path(), "bare", &files, &tensors, strip);
    let eot = id("<|eot_id|>");
    std::fs::write(bare.snapshot_dir.join("generation_config.json"), format!(r#"{{"eos_token_id": [{eot}, 5]}}"#))
        .expect("generation config");
    std::fs::write(
        bare.snapshot_dir.join("tokenizer_config.json"),
        r#"{"bos_token": {"content": "<|end_of_text|>"}, "pad_token": "<|eot_id|>"}"#,
    )
    .expect("tokenizer config");
    let m = load(&bare, ModelKind::Llama);
    assert_eq!(m.special.eos, eot, "generation_config.json's first eos");
    assert!(m.special.stop.contains(&5), "every eos of generation_config.json stops: {:?}", m.special.stop);
    assert_eq!(m.special.bos, id("<|end_of_text|>"), "tokenizer_config.json's bos_token");
    assert_eq!(m.special.pad, eot, "tokenizer_config.json's pad_token");
    let s = &m.special.sources;
    assert!(s.contains("generation_config.json eos_token_id") && s.contains("tokenizer_config.json bos_token"), "{s}");

    // Nothing but the tokenizer: the layout's own token, said so.
    let none = write_checkpoint(dir.path(), "none", &files, &tensors, strip);
    let m = load(&none, ModelKind::Llama);
    assert_eq!(m.special.bos, id("<|begin_of_text|>"));
    assert!(m.special.sources.contains("the Llama layout's token"), "{}", m.special.sources);
    assert!(m.special.sources.contains("pad") && m.special.sources.contains("no pad token given"));

    // A tokenizer_config.json naming a token the tokenizer lacks is refused, naming the file and the field.
    std::fs::write(none.snapshot_dir.join("tokenizer_config.json"), r#"{"bos_token": "<s>"}"#).expect("write");
    let err = LoadedModel::load(&none, ModelKind::Llama, &Device::Cpu, DType::F32).expect_err("no <s>").to_string();
    assert!(err.contains("tokenizer_config.json") && err.contains("bos_token") && err.contains("<s>"), "{err}");

    // config.json's EOS is the end-of-turn token, as in Meta-Llama-3-8B-Instruct (128009): accepted, both stop.
    let (end, eot) = (id("<|end_of_text|>"), id("<|eot_id|>"));
    let instruct = write_checkpoint(dir.path(), "instruct", &files, &tensors, |c| c["eos_token_id"] = eot.into());
    let m = load(&instruct, ModelKind::Llama);
    assert_eq!(m.special.eos, eot);
    assert!(m.special.stop.contains(&eot) && m.special.stop.contains(&end), "{:?}", m.special.stop);
    assert!(m.special.sources.contains(&format!("eos {eot} (config.json eos_token_id)")), "{}", m.special.sources);
    // Any other id there is a config of another model's tokenizer: refused, naming both.
    let other = write_checkpoint(dir.path(), "other", &files, &tensors, |c| c["eos_token_id"] = 7.into());
    let err = LoadedModel::load(&other, ModelKind::Llama, &Device::Cpu, DType::F32).expect_err("eos 7").to_string();
    assert!(
        err.contains("config.json") && err.contains("says 7") && err.contains(&format!("<|end_of_text|> to {end}")),
        "{err}"
    );
}

#[test]
fn synth_writes_the_llama_kinds_other_layouts_and_they_load_as_transformers_does() {
    use schema::grid::SynthLayout;
    let dir = tempfile::tempdir().expect("tempdir");
    let ids: Vec<u32> = (1..=24).collect();
    let t = Tensor::new(ids.as_slice(), &Device::Cpu).expect("ids").unsqueeze(0).expect("batch");
    // Without the venv, the layouts are still written and loaded; only the comparison with transformers is skipped.
    let python = crate::hf_reference::hf_python_or_skip(
        "the transformers comparison of model::synth_writes_the_llama_kinds_other_layouts_and_they_load_as_transformers_does",
    );
    for layout in [SynthLayout::Llama31, SynthLayout::Llama32, SynthLayout::Qwen2] {
        let repo = format!("test-org/tiny-{layout:?}").to_lowercase();
        let s = SynthSpec { layout: Some(layout), ..spec(23, None) };
        write_synthetic(dir.path(), &repo, ModelKind::Llama, &s).expect("write synthetic");
        let files = ModelFiles::from_hf_cache(dir.path(), &repo, "main").expect("resolve");
        let m = load(&files, ModelKind::Llama);
        let c = &m.config;
        match layout {
            SynthLayout::Qwen2 => assert!(c.qkv_bias && !c.o_bias && c.rope_theta == 1e6 && c.rope_scaling.is_none()),
            SynthLayout::Llama31 => assert!(c.rope_scaling.is_some_and(|r| r.factor == 8.0) && !c.tied_lm_head),
            SynthLayout::Llama32 => assert!(c.rope_scaling.is_some_and(|r| r.factor == 32.0) && c.tied_lm_head),
            SynthLayout::Llama3 => unreachable!(),
        }
        let out = generate_ar(&m, &[vec![5, 6, 7, 8]], 6, EosPolicy::Ignore).expect("generate");
        assert_eq!(out.tokens[0].len(), 6, "{layout:?}");
        assert_eq!(m.parameter_count(), checkpoint_elements(&files), "{layout:?}: the tied head once, the biases");
        if let Some(python) = python {
            let d = max_abs_diff(&m.forward_full(&t, None).expect("ours"), &hf_logits(python, &files, &ids));
            assert!(d < 1e-4, "{layout:?}: max |ours - transformers| = {d}");
        }
    }
    // A layout is a llama-kind checkpoint: LLaDA has one.
    let s = SynthSpec { layout: Some(SynthLayout::Qwen2), ..spec(23, None) };
    assert!(s.check(ModelKind::Llada).expect_err("llada + qwen2").to_string().contains("layout"));
}

// ---------------------------------------------------------------- fused attention (run.attention = "fused")

#[test]
fn fused_attention_computes_the_ops_paths_forward() {
    // The fused CPU kernel (online softmax over blocks) against candle's ops, through the whole model: a causal
    // Llama with grouped queries and left padding, its cached decode, and a bidirectional LLaDA; the same logits
    // up to f32 rounding, and the same greedy tokens.
    use runner::model::TransformerOptions;
    let fused = TransformerOptions { fused_attention: true, ..TransformerOptions::default() };
    for kind in [ModelKind::Llama, ModelKind::Llada] {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = tiny_files(dir.path(), kind, &spec(7, None));
        let ops = load(&files, kind);
        let fu = LoadedModel::load_with(&files, kind, &Device::Cpu, DType::F32, fused).expect("load fused");
        let ids =
            Tensor::from_vec((0..2 * 150).map(|i| (i * 37 % 500) as u32).collect::<Vec<_>>(), (2, 150), &Device::Cpu)
                .expect("ids");
        let mut valid = vec![vec![true; 150]; 2];
        valid[1][..20].fill(false);
        let (a, b) =
            (ops.forward_full(&ids, Some(&valid)).expect("ops"), fu.forward_full(&ids, Some(&valid)).expect("fused"));
        let scale =
            a.abs().expect("abs").flatten_all().expect("flat").max(0).expect("max").to_scalar::<f32>().expect("v");
        let diff = max_abs_diff(&a, &b);
        assert!(diff <= 1e-5 * scale.max(1.0), "{kind:?}: logits differ by {diff} (largest {scale})");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let files = tiny_files(dir.path(), ModelKind::Llama, &spec(7, None));
    let ops = load(&files, ModelKind::Llama);
    let fu = LoadedModel::load_with(&files, ModelKind::Llama, &Device::Cpu, DType::F32, fused).expect("load fused");
    let prompts = vec![vec![5u32, 9, 200], vec![17, 3, 88, 120, 61, 7, 400], vec![42]];
    let want = generate_ar(&ops, &prompts, 8, EosPolicy::Ignore).expect("ops");
    let got = generate_ar(&fu, &prompts, 8, EosPolicy::Ignore).expect("fused");
    assert_eq!(got.tokens, want.tokens);
}

// ---------------------------------------------------------------- static decode steps (run.cuda_graphs)

#[test]
fn static_decode_steps_choose_the_eager_decodes_tokens() {
    // The steps a CUDA graph captures (the cache position on the device, attention over the whole cache behind a
    // length mask, the chosen token written back on the device), run eagerly on the CPU: the same tokens as the
    // eager decode, with and without padding, with EOS suppressed, for every output length down to one token.
    use runner::model::TransformerOptions;
    let graph = TransformerOptions { decode_graph: true, ..TransformerOptions::default() };
    let dir = tempfile::tempdir().expect("tempdir");
    let files = tiny_files(dir.path(), ModelKind::Llama, &spec(7, None));
    let eager = load(&files, ModelKind::Llama);
    let fixed = LoadedModel::load_with(&files, ModelKind::Llama, &Device::Cpu, DType::F32, graph).expect("load");
    let padded = vec![vec![5u32, 9, 200], vec![17, 3, 88, 120, 61, 7, 400], vec![42]];
    let even = vec![vec![5u32, 9, 200, 4], vec![17, 3, 88, 120]];
    for prompts in [&padded, &even] {
        for eos in [EosPolicy::Ignore, EosPolicy::Suppress] {
            for n_out in [1, 2, 3, 12] {
                let want = generate_ar(&eager, prompts, n_out, eos).expect("eager");
                let got = generate_ar(&fixed, prompts, n_out, eos).expect("static");
                assert_eq!(got.tokens, want.tokens, "{n_out} tokens, {eos:?}, prompts {prompts:?}");
                assert_eq!(got.token_ms.len(), n_out);
                assert!(got.token_ms.iter().all(|&ms| ms >= 0.0) && got.e2e_ms >= got.prefill_ms);
            }
        }
    }
}
