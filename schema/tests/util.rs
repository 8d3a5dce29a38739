//! Shared helpers: fixture paths and a small valid bundle built in code.

use std::path::PathBuf;

use schema::bundle::*;
use schema::grid::{GridConfig, ModelKind, Precision};

pub fn fixture(rel: &str) -> String {
    // Shared with the metrics crate's tests: the path goes through the schema crate's folder from either.
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../schema/tests/fixtures").join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

pub fn demo_config() -> GridConfig {
    let text = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../config/demo.toml"))
        .expect("config/demo.toml");
    GridConfig::from_toml(&text, "config/demo.toml").expect("demo config is valid")
}

fn model(id: &str, kind: ModelKind) -> ModelInfo {
    ModelInfo {
        id: id.into(),
        revision: "main".into(),
        commit: Some("abc".into()),
        kind,
        generation: kind.generation().into(),
        parameters: 1000,
        weights_bytes: Some(4000),
        dtype: Precision::F32,
        tokenizer: TokenizerInfo {
            vocab_size: 512,
            bos_id: Some(1),
            eos_id: Some(2),
            mask_id: None,
            special_sources: None,
            sha256: None,
        },
        synthetic: true,
        shape: ModelShape { layers: 2, hidden: 64, heads: 4, kv_heads: 2, intermediate: 128, vocab: 512 },
        chat_template: None,
    }
}

pub fn rep(e2e_ms: f64) -> Repetition {
    Repetition { prompt_indices: vec![0], e2e_ms, output_tokens: 32, output_bytes: 100, ..Repetition::default() }
}

/// A bundle of every cell of the demo config's reference sampler (its fast series left out), with latencies
/// derived from the key so tests can predict them.
pub fn sample_bundle() -> Bundle {
    let mut config = demo_config();
    config.grid.samplers = vec![schema::grid::SamplerVariant::Reference];
    config.grid.thresholds.clear();
    sample_bundle_of(config)
}

/// A bundle of every cell of `config`, latencies derived from the key; a threshold cell records
/// `16 * threshold` forwards, rounded up (at least 1).
pub fn sample_bundle_of(config: GridConfig) -> Bundle {
    let cells = config
        .cells()
        .into_iter()
        .map(|key| {
            let ar = key.sampler == Sampler::ArGreedy;
            let forwards = key.threshold.map(|t| ((16.0 * t.value()).ceil() as u32).max(1));
            let base =
                f64::from(key.steps.or(forwards).unwrap_or(10)) * f64::from(key.batch_size) + f64::from(key.seq_len);
            // B prompts per run, B x N_out tokens, as the runner records them.
            let (b, n_out) = (key.batch_size, key.output_tokens);
            let rep = |ms: f64| Repetition {
                prefill_ms: ar.then_some(2.0),
                forward_passes: forwards,
                prompt_indices: (0..b).map(|i| i % 8).collect(),
                output_tokens: u64::from(b * n_out),
                ..rep(ms)
            };
            let reps = vec![rep(base), rep(base + 2.0), rep(base + 1.0)];
            Cell {
                key,
                status: CellStatus::Ok,
                warmup_runs: 1,
                repetitions: reps,
                execution: None,
                quality: vec![],
                generations: vec![],
                quality_errors: vec![],
                stalled_prompts: vec![],
            }
        })
        .collect();
    Bundle {
        schema_version: schema::SchemaVersion::CURRENT,
        provenance: Provenance {
            tool: "dllm-bench".into(),
            tool_version: "0.1.0".into(),
            git_commit: None,
            git_dirty: Vec::new(),
            created_at: "2026-11-21T00:00:00Z".into(),
            host: None,
            device: DeviceInfo { kind: "cpu".into(), ..DeviceInfo::default() },
            synthetic_weights: true,
            config_source: "embedded:config/demo.toml".into(),
            config: config.clone(),
            attention: "test".into(),
            config_sha256: None,
            shard: None,
            planned_cells: None,
            executions: Vec::new(),
            missing_cells: Vec::new(),
        },
        models: vec![
            model("dllm-bench/synthetic-llama-tiny", ModelKind::Llama),
            model("dllm-bench/synthetic-llada-tiny", ModelKind::Llada),
        ],
        encoders: Vec::new(),
        prompt_set: PromptSetInfo {
            source: "embedded:demo".into(),
            selection: "first 8".into(),
            count: 8,
            sha256: Some("00".into()),
        },
        cells,
        parity: Vec::new(),
    }
}
