//! BERTScore on a synthetic RoBERTa encoder: its defining properties (a text against itself scores 1, other texts
//! less, empty texts no value), the encoder's refusals, the bundle's values, and agreement with bert_score's
//! algorithm in PyTorch + HF transformers (tests/bertscore_reference.py; skipped loudly without the venv of
//! scripts/install-deps.sh, a failure then under DLLM_BENCH_REQUIRE_HF=1, as the hf_reference tests).

use std::path::PathBuf;
use std::process::Command;

use candle_core::{DType, Device};
use runner::model::ModelFiles;
use runner::model::encoder::Encoder;
use runner::quality::bertscore::{bertscore, bertscore_values, encode_text};
use runner::synth::encoder::{EncoderSynth, write_synthetic_encoder};
use schema::bundle::{Direction, Generation, Pooling};

use crate::hf_reference::hf_python_or_skip;

const REPO: &str = "dllm-bench/synthetic-roberta-bertscore";

/// The tiny synthetic encoder in a fresh cache, loaded on the CPU in f32.
fn synthetic() -> (tempfile::TempDir, ModelFiles, Encoder) {
    let cache = tempfile::tempdir().expect("temp dir");
    write_synthetic_encoder(cache.path(), REPO, &EncoderSynth { seed: 3, ..EncoderSynth::tiny() }).expect("written");
    let files = ModelFiles::from_hf_cache(cache.path(), REPO, "main").expect("in the cache");
    let encoder = Encoder::load(&files, &Device::Cpu, DType::F32).expect("loaded");
    (cache, files, encoder)
}

/// A text of `words` words, longer than the encoder's 128 tokens for 100 words.
fn long_text(seed: usize, words: usize) -> String {
    const W: [&str; 12] =
        ["river", "stone", "quietly", "market", "garden", "after", "the", "morning", "light", "of", "cold", "paper"];
    (0..words).map(|i| W[(i * 7 + seed * 5 + i / 3) % W.len()]).collect::<Vec<_>>().join(" ")
}

/// The pairs both implementations score: identical, unrelated, one word changed, two texts cut past 128 tokens,
/// surrounding whitespace, non-ASCII, special tokens in the text, an empty candidate, an empty reference.
fn pairs() -> Vec<(String, String)> {
    let s = |a: &str, b: &str| (a.to_string(), b.to_string());
    vec![
        s("The cat sat on the mat.", "The cat sat on the mat."),
        s("Stock markets fell sharply on Monday.", "The recipe needs two eggs and a cup of flour."),
        s("The quick brown fox jumps over the lazy dog.", "The quick brown fox leaps over the lazy dog."),
        (long_text(1, 160), long_text(2, 150)),
        s("  \n\tThe cat sat on the mat.  \n", "the cat sat on a mat"),
        s("Café naïve — 東京 🚀 déjà vu", "Cafe naive - Tokyo rocket deja vu"),
        s("hello </s> world <mask> again", "hello world again"),
        s(" \n ", "Something to compare against."),
        s("A candidate without a reference.", "\t"),
    ]
}

#[test]
fn a_text_scores_one_against_itself_and_less_against_another() {
    let (_cache, files, enc) = synthetic();
    assert_eq!((enc.config.layers, enc.config.max_tokens), (2, 128));
    assert_eq!(enc.special_ids, [0, 2]);
    for layer in 0..=2 {
        let same = bertscore(&enc, layer, "The cat sat on the mat.", " The cat sat on the mat.\n").expect("scored");
        let same = same.expect("a value");
        for v in [same.precision, same.recall, same.f1] {
            assert!((v - 1.0).abs() < 1e-6, "layer {layer}: {same:?}");
        }
        let other = bertscore(&enc, layer, "Stock markets fell on Monday.", "The recipe needs two eggs.")
            .expect("scored")
            .expect("a value");
        for v in [other.precision, other.recall, other.f1] {
            assert!(v < 1.0 - 1e-4 && (-1.0..=1.0).contains(&v), "layer {layer}: {other:?}");
        }
        let f1 = 2.0 * other.precision * other.recall / (other.precision + other.recall);
        assert!((other.f1 - f1).abs() < 1e-12);
    }
    // Empty once stripped: no value, either side.
    assert_eq!(bertscore(&enc, 2, " \n\t", "a reference").expect("scored"), None);
    assert_eq!(bertscore(&enc, 2, "a candidate", "").expect("scored"), None);
    // A text cut to the encoder's 128 tokens keeps its closing </s>.
    let ids = encode_text(&enc, &long_text(0, 200)).expect("encoded").expect("ids");
    assert_eq!((ids.len(), ids[0], ids[127]), (128, 0, 2));
    // A layer past the last is refused, with the layers there are.
    let err = bertscore(&enc, 3, "a", "b").expect_err("layer 3 of 2");
    assert!(format!("{err:#}").contains("has 2 layers"), "{err:#}");
    assert!(enc.hidden_states(&ids, 3).is_err());
    let h = enc.hidden_states(&ids, 2).expect("hidden states");
    assert_eq!(h.dims(), [128, 64]);
    assert_eq!(h.dtype(), DType::F32);
    // Too many tokens for the position embedding.
    assert!(enc.hidden_states(&[5; 129], 1).is_err());
    // Half-precision weights score within rounding of f32's.
    for dtype in [DType::BF16, DType::F16] {
        let half = Encoder::load(&files, &Device::Cpu, dtype).expect("loaded");
        let (a, b) = ("the river and the stone", "the stones by the river");
        let want = bertscore(&enc, 2, a, b).expect("f32").expect("some");
        let got = bertscore(&half, 2, a, b).expect("half").expect("some");
        assert!((got.f1 - want.f1).abs() < 2e-2, "{dtype:?}: {got:?} against f32's {want:?}");
    }
}

#[test]
fn an_encoder_config_of_another_architecture_is_refused_with_the_file_and_the_fix() {
    let (cache, files, _) = synthetic();
    let text = std::fs::read_to_string(&files.config).expect("config.json");
    let bad = cache.path().join("gpt2-config.json");
    std::fs::write(&bad, text.replace("\"model_type\": \"roberta\"", "\"model_type\": \"gpt2\"")).expect("write");
    let files = ModelFiles { config: bad.clone(), ..files };
    for err in [Encoder::check_files(&files).map(|_| ()), Encoder::load(&files, &Device::Cpu, DType::F32).map(|_| ())] {
        let err = format!("{:#}", err.expect_err("gpt2 refused"));
        assert!(err.contains(&bad.display().to_string()) && err.contains("model_type"), "{err}");
        assert!(err.contains("\"gpt2\"") && err.contains("fix:") && err.contains("roberta"), "{err}");
    }
}

#[test]
fn a_missing_or_misshapen_tensor_is_named_with_its_file() {
    let (cache, files, _) = synthetic();
    let weights = std::fs::read(&files.weights[0]).expect("weights");
    let n = u64::from_le_bytes(weights[..8].try_into().expect("8 bytes")) as usize;
    let header = std::str::from_utf8(&weights[8..8 + n]).expect("utf8");
    for (from, to, says) in [
        ("encoder.layer.1.output.dense.bias", "encoder.layer.1.output.dense.bia5", "is missing"),
        ("\"shape\":[128,64]", "\"shape\":[64,128]", "has shape [64, 128]"),
    ] {
        assert!(header.contains(from), "{from}");
        let mut changed = weights.clone();
        changed[8..8 + n].copy_from_slice(header.replacen(from, to, 1).as_bytes());
        let path = cache.path().join("changed.safetensors");
        std::fs::write(&path, changed).expect("write");
        let files = ModelFiles { weights: vec![path.clone()], ..files.clone() };
        let err = format!("{:#}", Encoder::load(&files, &Device::Cpu, DType::F32).expect_err(says));
        assert!(err.contains(&path.display().to_string()) && err.contains(says), "{err}");
        assert!(err.contains("encoder.layer.") && err.contains("fix:"), "{err}");
    }
}

#[test]
fn the_bundle_s_values_are_the_mean_over_the_prompts_with_a_reference() {
    let (_cache, _files, enc) = synthetic();
    let g = |prompt: u32, text: &str, reference: Option<&str>| Generation {
        prompt,
        prompt_bytes: 0,
        text: text.into(),
        reference: reference.map(str::to_string),
        masked_tokens: None,
    };
    let gens = [
        g(0, "the river and the stone", Some("the river by the stones")),
        g(1, "no reference here", None),
        g(2, "", Some("an empty continuation has no value")),
        g(3, "morning light on paper", Some("cold morning light")),
    ];
    let values = bertscore_values(&enc, REPO, 2, &gens).expect("scored");
    let names: Vec<&str> = values.iter().map(|q| q.metric.as_str()).collect();
    assert_eq!(names, ["bertscore_precision", "bertscore_recall", "bertscore_f1"]);
    let pairs = [(0, &gens[0]), (3, &gens[3])];
    for (i, q) in values.iter().enumerate() {
        assert_eq!(
            (q.direction, q.pooling, q.evaluator.as_deref()),
            (Direction::HigherIsBetter, Some(Pooling::Mean), Some(REPO))
        );
        let prompts: Vec<u32> = q.per_prompt.iter().map(|p| p.prompt).collect();
        assert_eq!(prompts, [0, 3], "{}", q.metric);
        for ((_, generation), p) in pairs.iter().zip(&q.per_prompt) {
            let s = bertscore(&enc, 2, &generation.text, generation.reference.as_deref().expect("ref"))
                .expect("ok")
                .expect("some");
            assert_eq!(p.value, [s.precision, s.recall, s.f1][i]);
            assert_eq!(p.tokens, None);
        }
        let mean = q.per_prompt.iter().map(|p| p.value).sum::<f64>() / 2.0;
        assert!((q.value - mean).abs() < 1e-12, "{}", q.metric);
    }
    // No prompt with a reference: no values at all.
    assert!(bertscore_values(&enc, REPO, 2, &gens[1..3]).expect("scored").is_empty());
}

/// The runner's BERTScore equals bert_score's algorithm in PyTorch + transformers on the same snapshot, for every
/// pair and layer: the same token ids (strip, prefix space, specials, truncation) and P, R, F1 within 1e-5.
#[test]
fn bertscore_equals_bert_score_s_algorithm_in_pytorch() {
    let Some(python) = hf_python_or_skip("bertscore::bertscore_equals_bert_score_s_algorithm_in_pytorch") else {
        return;
    };
    let (cache, files, enc) = synthetic();
    let pairs = pairs();
    let pairs_path = cache.path().join("pairs.json");
    std::fs::write(&pairs_path, serde_json::to_string(&pairs).expect("json")).expect("write pairs");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/bertscore_reference.py");
    let layers = [0usize, 1, 2];
    let out = Command::new(python)
        .arg(&script)
        .arg(&files.snapshot_dir)
        .arg(&pairs_path)
        .args(layers.map(|l| l.to_string()))
        .env("HF_HUB_OFFLINE", "1")
        .env("OMP_NUM_THREADS", "1")
        .output()
        .expect("run bertscore_reference.py");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bertscore_reference.py failed:\n{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(json["model_max_length"], 128, "the tokenizer truncates where the encoder does");
    let mut worst = 0.0f64;
    for layer in layers {
        let results = json["layers"][layer.to_string()].as_array().expect("results");
        assert_eq!(results.len(), pairs.len());
        for ((cand, reference), want) in pairs.iter().zip(results) {
            let what = format!("layer {layer}, {cand:?} against {reference:?}");
            let got = bertscore(&enc, layer, cand, reference).expect("scored");
            let Some(got) = got else {
                assert!(want.is_null(), "{what}: no value here, {want} there");
                continue;
            };
            assert!(!want.is_null(), "{what}: {got:?} here, no value there");
            let ids = |v: &serde_json::Value| -> Vec<u32> { serde_json::from_value(v.clone()).expect("token ids") };
            let c = encode_text(&enc, cand).expect("encoded").expect("ids");
            let r = encode_text(&enc, reference).expect("encoded").expect("ids");
            assert_eq!(c, ids(&want["cand_ids"]), "{what}: candidate ids");
            assert_eq!(r, ids(&want["ref_ids"]), "{what}: reference ids");
            for (name, v) in [("precision", got.precision), ("recall", got.recall), ("f1", got.f1)] {
                let w = want[name].as_f64().expect(name);
                let diff = (v - w).abs();
                worst = worst.max(diff);
                assert!(diff < 1e-5, "{what}: {name} {v} here, {w} in PyTorch");
            }
        }
    }
    let long = json["layers"]["2"][3]["cand_ids"].as_array().expect("the long pair").len();
    assert_eq!(long, 128, "the long candidate is cut to 128 tokens");
    eprintln!("bertscore: {} pairs x {} layers equal PyTorch's within {worst:.2e}", pairs.len(), layers.len());
}
