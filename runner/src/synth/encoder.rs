//! A synthetic RoBERTa encoder: random weights with HF's `RobertaModel` names, in the hf-hub cache layout, for the
//! tests of the embedding-based metrics ([`crate::model::encoder`], [`crate::quality::bertscore`]).
//!
//! Written as [`super::write_synthetic`] writes the generators (blobs named by their sha256, relative links in
//! `snapshots/<commit>/`, `refs/main`; the commit derived from the spec, so the same spec is the same folder, reused
//! when complete; written into a staging folder under the repository's lock and renamed into place). The files are
//! those `RobertaModel.save_pretrained` and a RoBERTa tokenizer save: `config.json` (with the
//! `dllm_bench_synthetic` marker), `model.safetensors` (f32, no `roberta.` prefix, the pooler included),
//! `tokenizer.json` (the byte-level BPE of [`super::build_tokenizer`] rebuilt with RoBERTa's ids: `<s>` 0, `<pad>`
//! 1, `</s>` 2, `<unk>` 3, then the BPE tokens, `<mask>` last; a `RobertaProcessing` post-processor, so
//! `encode(text, true)` adds `<s>` and `</s>`) and `tokenizer_config.json` (its class and `model_max_length`, so
//! transformers' `AutoTokenizer` loads the same tokenizer and truncates where the encoder does).

use std::path::{Path, PathBuf};

use schema::grid::Precision;
use serde::Serialize;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::weights::{Init, TensorSpec, write_safetensors};
use super::{SynthError, complete, publish_snapshot, real_snapshot, write_file};
use crate::model::files::repo_dir;

/// Bumped whenever the encoder generator's output changes for the same spec (it is part of the commit hash).
pub const ENCODER_SYNTH_FORMAT: u32 = 1;

/// BPE tokens trained for the synthetic tokenizer (RoBERTa's five specials come on top).
const BPE_VOCAB: usize = 512;

/// RoBERTa's special tokens before the BPE vocabulary, at ids 0 to 3 (`<mask>` follows the vocabulary).
const LEADING_SPECIALS: [&str; 4] = ["<s>", "<pad>", "</s>", "<unk>"];

/// The shape and seed of a synthetic RoBERTa encoder.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct EncoderSynth {
    /// Seed of the random weights.
    pub seed: u64,
    /// `num_hidden_layers`.
    pub layers: usize,
    /// `hidden_size`.
    pub hidden: usize,
    /// `num_attention_heads` (dividing `hidden`).
    pub heads: usize,
    /// `intermediate_size`.
    pub intermediate: usize,
    /// `max_position_embeddings`: RoBERTa's offset of 2 plus the longest sequence.
    pub max_positions: usize,
}

impl EncoderSynth {
    /// 2 layers, hidden 64, 4 heads, intermediate 128, 130 positions (sequences of up to 128 tokens), seed 0.
    pub fn tiny() -> Self {
        EncoderSynth { seed: 0, layers: 2, hidden: 64, heads: 4, intermediate: 128, max_positions: 130 }
    }

    /// The longest sequence, specials included: the positions after RoBERTa's offset of `pad_token_id + 1` = 2.
    pub fn max_tokens(&self) -> usize {
        self.max_positions.saturating_sub(2)
    }

    fn check(&self) -> Result<(), SynthError> {
        let bad = |what: String| Err(SynthError::Spec(format!("synthetic encoder: {what}")));
        if self.layers == 0 || self.layers > 64 {
            return bad(format!("{} layers; fix: 1 to 64", self.layers));
        }
        if self.heads == 0 || self.hidden == 0 || !self.hidden.is_multiple_of(self.heads) || self.hidden > 4096 {
            return bad(format!(
                "hidden {} with {} heads; fix: a hidden size of at most 4096 that the heads divide",
                self.hidden, self.heads
            ));
        }
        if self.intermediate == 0 || self.intermediate > 8 * self.hidden {
            return bad(format!("intermediate {}; fix: 1 to 8 x hidden", self.intermediate));
        }
        if self.max_positions < 5 || self.max_positions > 8194 {
            return bad(format!("{} positions; fix: 5 to 8194 (2 + the longest sequence)", self.max_positions));
        }
        Ok(())
    }
}

/// The deterministic commit hash of a spec (40 hex digits).
fn commit_of(repo_id: &str, spec: &EncoderSynth) -> String {
    let canon = json!({ "format": ENCODER_SYNTH_FORMAT, "kind": "roberta-encoder", "repo_id": repo_id, "spec": spec });
    let digest = Sha256::digest(canon.to_string().as_bytes());
    digest.iter().take(20).map(|b| format!("{b:02x}")).collect()
}

/// The synthetic tokenizer with RoBERTa's ids and post-processor, and its vocabulary size.
fn roberta_tokenizer() -> Result<(tokenizers::Tokenizer, usize), SynthError> {
    let terr = |e: String| SynthError::Tokenizer(e);
    let trained = super::build_tokenizer(BPE_VOCAB, &[]).map_err(terr)?;
    let mut json: serde_json::Value = serde_json::from_str(&trained.to_string(false).map_err(|e| terr(e.to_string()))?)
        .map_err(|e| terr(e.to_string()))?;
    let vocab = json["model"]["vocab"].as_object().ok_or_else(|| terr("the BPE model has no vocab".into()))?;
    let n = LEADING_SPECIALS.len();
    let mut shifted = serde_json::Map::new();
    for (i, s) in LEADING_SPECIALS.iter().enumerate() {
        shifted.insert(s.to_string(), json!(i));
    }
    let mut entries: Vec<(String, u64)> =
        vocab.iter().map(|(t, id)| (t.clone(), id.as_u64().unwrap_or(u64::MAX))).collect();
    entries.sort_by_key(|(_, id)| *id);
    for (t, id) in entries {
        if id == u64::MAX {
            return Err(terr(format!("BPE token {t:?} has no id")));
        }
        shifted.insert(t, json!(id + n as u64));
    }
    let mask = shifted.len();
    shifted.insert("<mask>".into(), json!(mask));
    json["model"]["vocab"] = serde_json::Value::Object(shifted);
    let added = |id: usize, content: &str, lstrip: bool| {
        json!({ "id": id, "content": content, "single_word": false, "lstrip": lstrip, "rstrip": false,
                "normalized": false, "special": true })
    };
    let mut tokens: Vec<serde_json::Value> =
        LEADING_SPECIALS.iter().enumerate().map(|(i, s)| added(i, s, false)).collect();
    // RoBERTa's `<mask>` takes the space before it.
    tokens.push(added(mask, "<mask>", true));
    json["added_tokens"] = json!(tokens);
    json["post_processor"] = json!({
        "type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0], "trim_offsets": true,
        "add_prefix_space": false
    });
    let text = json.to_string();
    let tok: tokenizers::Tokenizer = text.parse().map_err(|e: tokenizers::Error| terr(e.to_string()))?;
    Ok((tok, mask + 1))
}

/// `config.json` as `RobertaConfig` writes it, with the marker.
fn config_json(spec: &EncoderSynth, vocab: usize) -> serde_json::Value {
    json!({
        "architectures": ["RobertaModel"],
        "model_type": "roberta",
        "attention_probs_dropout_prob": 0.1,
        "bos_token_id": 0,
        "classifier_dropout": null,
        "eos_token_id": 2,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": spec.hidden,
        "initializer_range": 0.02,
        "intermediate_size": spec.intermediate,
        "layer_norm_eps": 1e-5,
        "max_position_embeddings": spec.max_positions,
        "num_attention_heads": spec.heads,
        "num_hidden_layers": spec.layers,
        "pad_token_id": 1,
        "position_embedding_type": "absolute",
        "torch_dtype": "float32",
        "type_vocab_size": 1,
        "use_cache": true,
        "vocab_size": vocab,
        "dllm_bench_synthetic": {
            "format": ENCODER_SYNTH_FORMAT,
            "kind": "roberta-encoder",
            "seed": spec.seed,
            "dtype": Precision::F32,
            "shards": 1,
            "layers": spec.layers,
            "hidden": spec.hidden,
            "heads": spec.heads,
            "intermediate": spec.intermediate,
            "max_positions": spec.max_positions,
        },
    })
}

/// `tokenizer_config.json` of a RoBERTa tokenizer (transformers' `RobertaTokenizer`).
fn tokenizer_config_json(spec: &EncoderSynth) -> serde_json::Value {
    json!({
        "tokenizer_class": "RobertaTokenizer",
        "model_max_length": spec.max_tokens(),
        "add_prefix_space": false,
        "trim_offsets": true,
        "errors": "replace",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "sep_token": "</s>",
        "cls_token": "<s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "mask_token": "<mask>",
    })
}

/// The tensors of `RobertaModel` (the pooler included, so that transformers loads it without a warning).
fn tensors(spec: &EncoderSynth, vocab: usize) -> Vec<TensorSpec> {
    let (h, i) = (spec.hidden, spec.intermediate);
    let mut shapes: Vec<(String, Vec<usize>)> = vec![
        ("embeddings.word_embeddings.weight".into(), vec![vocab, h]),
        ("embeddings.position_embeddings.weight".into(), vec![spec.max_positions, h]),
        ("embeddings.token_type_embeddings.weight".into(), vec![1, h]),
        ("embeddings.LayerNorm.weight".into(), vec![h]),
        ("embeddings.LayerNorm.bias".into(), vec![h]),
    ];
    for l in 0..spec.layers {
        let p = format!("encoder.layer.{l}");
        for (name, out, inp) in [
            ("attention.self.query", h, h),
            ("attention.self.key", h, h),
            ("attention.self.value", h, h),
            ("attention.output.dense", h, h),
            ("intermediate.dense", i, h),
            ("output.dense", h, i),
        ] {
            shapes.push((format!("{p}.{name}.weight"), vec![out, inp]));
            shapes.push((format!("{p}.{name}.bias"), vec![out]));
        }
        for norm in ["attention.output.LayerNorm", "output.LayerNorm"] {
            shapes.push((format!("{p}.{norm}.weight"), vec![h]));
            shapes.push((format!("{p}.{norm}.bias"), vec![h]));
        }
    }
    shapes.push(("pooler.dense.weight".into(), vec![h, h]));
    shapes.push(("pooler.dense.bias".into(), vec![h]));
    // As the generators: N(0, std) with std = max(0.02, 1/sqrt(hidden)), LayerNorm weights 1 + N(0, 0.05).
    let std = (1.0 / (h as f32).sqrt()).max(0.02);
    shapes
        .into_iter()
        .map(|(name, shape)| {
            let init = if name.ends_with("LayerNorm.weight") {
                Init { mean: 1.0, std: 0.05 }
            } else if name.ends_with(".bias") {
                Init { mean: 0.0, std: 0.02 }
            } else {
                Init { mean: 0.0, std }
            };
            TensorSpec { name, shape, init }
        })
        .collect()
}

/// Whether `snapshot` holds the whole encoder `marker` describes.
fn encoder_complete(snapshot: &Path, marker: &serde_json::Value) -> bool {
    complete(snapshot, marker) && snapshot.join("tokenizer_config.json").is_file()
}

/// Writes (or reuses) the synthetic RoBERTa encoder `spec` for `repo_id` under the hf-hub cache root `cache_dir`,
/// and points `refs/main` at it. Returns the snapshot folder. A repository whose `refs/main` is a real checkpoint
/// is refused ([`SynthError::RealCheckpoint`]).
pub fn write_synthetic_encoder(cache_dir: &Path, repo_id: &str, spec: &EncoderSynth) -> Result<PathBuf, SynthError> {
    spec.check()?;
    let repo = repo_dir(cache_dir, repo_id);
    let commit = commit_of(repo_id, spec);
    if let Some(real) = real_snapshot(&repo) {
        return Err(SynthError::RealCheckpoint { repo_id: repo_id.into(), cache: cache_dir.into(), commit: real });
    }
    let (tok, vocab) = roberta_tokenizer()?;
    let config = config_json(spec, vocab);
    let marker = config["dllm_bench_synthetic"].clone();
    publish_snapshot(
        &repo,
        &commit,
        |snap| encoder_complete(snap, &marker),
        |snapshot, new_blobs| {
            let pretty =
                |v: &serde_json::Value| serde_json::to_string_pretty(v).map_err(|e| SynthError::Spec(e.to_string()));
            let cfg_text = pretty(&config)?;
            write_file(&repo, snapshot, new_blobs, "config.json", |w| w.write_all(cfg_text.as_bytes()))?;
            let tok_text = tok.to_string(true).map_err(|e| SynthError::Tokenizer(e.to_string()))?;
            write_file(&repo, snapshot, new_blobs, "tokenizer.json", |w| w.write_all(tok_text.as_bytes()))?;
            let tc_text = pretty(&tokenizer_config_json(spec))?;
            write_file(&repo, snapshot, new_blobs, "tokenizer_config.json", |w| w.write_all(tc_text.as_bytes()))?;
            let weights = tensors(spec, vocab);
            write_file(&repo, snapshot, new_blobs, "model.safetensors", |w| {
                write_safetensors(w, &weights, Precision::F32, spec.seed)
            })
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tokenizer_has_roberta_s_ids_and_wraps_a_text_in_s_and_slash_s() {
        let (tok, vocab) = roberta_tokenizer().expect("tokenizer");
        for (i, s) in LEADING_SPECIALS.iter().enumerate() {
            assert_eq!(tok.token_to_id(s), Some(i as u32), "{s}");
        }
        assert_eq!(tok.token_to_id("<mask>"), Some(vocab as u32 - 1));
        assert_eq!(tok.get_vocab_size(true), vocab);
        let ids = tok.encode(" the cat", true).expect("encode").get_ids().to_vec();
        assert_eq!((ids[0], ids[ids.len() - 1]), (0, 2), "{ids:?}");
        assert!(ids[1..ids.len() - 1].iter().all(|&id| (4..vocab as u32 - 1).contains(&id)), "{ids:?}");
        let back = tok.decode(&ids, true).expect("decode");
        assert_eq!(back, " the cat");
        assert_eq!(tok.encode("", true).expect("empty").get_ids(), [0, 2]);
    }

    #[test]
    fn the_same_spec_is_the_same_snapshot_and_another_seed_another() {
        let cache = tempfile::tempdir().expect("tempdir");
        let spec = EncoderSynth::tiny();
        let a = write_synthetic_encoder(cache.path(), "t/enc", &spec).expect("written");
        let weights = std::fs::read(a.join("model.safetensors")).expect("weights");
        let again = write_synthetic_encoder(cache.path(), "t/enc", &spec).expect("reused");
        assert_eq!(a, again);
        assert_eq!(std::fs::read(again.join("model.safetensors")).expect("weights"), weights);
        let other = write_synthetic_encoder(cache.path(), "t/enc", &EncoderSynth { seed: 1, ..spec.clone() })
            .expect("another seed");
        assert_ne!(other, a);
        assert_ne!(std::fs::read(other.join("model.safetensors")).expect("weights"), weights);
        let bad = EncoderSynth { heads: 5, ..spec };
        assert!(matches!(write_synthetic_encoder(cache.path(), "t/enc", &bad), Err(SynthError::Spec(_))));
    }
}
