//! Dream's kind and sampler on a tiny synthetic Dream checkpoint (Qwen2 layout, bidirectional): the shift (a
//! masked position reads the logits of the position to its left), each rule's commits, left padding, and the
//! loader's special ids.

use std::path::Path;

use candle_core::{D, DType, Device, Tensor};
use runner::generate::{DreamParams, dream_transfer_count, generate_dream};
use runner::model::{LoadedModel, ModelFiles};
use runner::synth::{Preset, SynthSpec, write_synthetic};
use schema::grid::{DreamAlg, ModelKind};

const REPO: &str = "test-org/synthetic-dream";

fn synthetic_dream(dir: &Path, seed: u64) -> LoadedModel {
    write_synthetic(dir, REPO, ModelKind::Dream, &SynthSpec::new(Preset::Tiny, seed)).expect("write synthetic");
    let files = ModelFiles::from_hf_cache(dir, REPO, "main").expect("resolve");
    LoadedModel::load(&files, ModelKind::Dream, &Device::Cpu, DType::F32).expect("load")
}

/// The argmax of the full forward's logits at every position of `seq`.
fn argmax_all(m: &LoadedModel, seq: &[u32]) -> Vec<u32> {
    let ids = Tensor::from_vec(seq.to_vec(), (1, seq.len()), &Device::Cpu).expect("ids");
    let logits = m.forward_full(&ids, None).expect("forward");
    logits.argmax(D::Minus1).expect("argmax").flatten_all().expect("flat").to_vec1::<u32>().expect("ids")
}

#[test]
fn a_masked_position_reads_the_logits_to_its_left() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = synthetic_dream(dir.path(), 5);
    let mask = m.special.mask.expect("Dream has a mask token");
    assert_ne!(m.special.pad, mask);
    assert!(!m.config.causal(), "Dream attends both ways");
    let prompt: Vec<u32> = (10..22).collect();
    let n_out = 8;
    // One step commits every position at once from one forward over prompt + masks: token j of the output is the
    // argmax at position p + j - 1 of that forward.
    let params = DreamParams { steps: 1, alg: DreamAlg::MaskgitPlus, ..DreamParams::default() };
    let out = generate_dream(&m, std::slice::from_ref(&prompt), n_out, &params).expect("generate");
    let mut seq = prompt.clone();
    seq.extend(std::iter::repeat_n(mask, n_out));
    let full = argmax_all(&m, &seq);
    let p = prompt.len();
    assert_eq!(out.tokens[0], full[p - 1..p - 1 + n_out], "shifted: position j reads the logits of j - 1");
    assert_ne!(out.tokens[0], full[p..p + n_out], "the tiny model's logits make an unshifted read visible");
    assert_eq!((out.nfe, out.transfers.clone()), (1, vec![vec![n_out]]));
}

#[test]
fn each_rule_commits_its_schedule_and_fills_the_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = synthetic_dream(dir.path(), 6);
    let mask = m.special.mask.expect("mask");
    let prompts = vec![(30..40).collect::<Vec<u32>>(), (50..60).collect()];
    for alg in DreamAlg::ALL {
        let params = DreamParams { steps: 4, alg, seed: 3, ..DreamParams::default() };
        let out = generate_dream(&m, &prompts, 8, &params).expect("generate");
        assert_eq!(out.nfe, 4);
        assert!(out.tokens.iter().all(|r| r.len() == 8 && !r.contains(&mask)), "{alg}: every position filled");
        for row in 0..2 {
            let per_step: Vec<usize> = out.transfers.iter().map(|t| t[row]).collect();
            assert_eq!(per_step.iter().sum::<usize>(), 8, "{alg}");
            if alg != DreamAlg::Origin {
                // By hand (dream.rs's unit test): 8 masks over 4 steps commit 1, 2, 2, 3.
                assert_eq!(per_step, [1, 2, 2, 3], "{alg}");
            }
        }
    }
    assert_eq!(dream_transfer_count(8, 0, 4), 1);
}

#[test]
fn a_left_padded_row_generates_what_it_generates_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = synthetic_dream(dir.path(), 7);
    let short: Vec<u32> = (70..76).collect();
    let long: Vec<u32> = (80..92).collect();
    let params = DreamParams { steps: 4, alg: DreamAlg::Entropy, ..DreamParams::default() };
    let alone = generate_dream(&m, std::slice::from_ref(&short), 6, &params).expect("alone");
    let batch = generate_dream(&m, &[long, short], 6, &params).expect("batch");
    // Dream's positions count a padded row's real tokens from 0, and pad keys are masked out.
    assert_eq!(batch.tokens[1], alone.tokens[0]);
}

#[test]
fn the_sampler_refuses_other_kinds_and_the_mask_in_a_prompt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = synthetic_dream(dir.path(), 8);
    let mask = m.special.mask.expect("mask");
    let err = generate_dream(&m, &[vec![1, mask]], 4, &DreamParams { steps: 2, ..DreamParams::default() });
    assert!(err.expect_err("refused").to_string().contains("mask id"));
    let err = generate_dream(&m, &[vec![1, 2]], 4, &DreamParams { steps: 0, ..DreamParams::default() });
    assert!(err.expect_err("refused").to_string().contains("steps"));
}

#[test]
fn the_dream_demo_runs_end_to_end_with_one_s_parity_record_per_rule() {
    use crate::assert_exit;
    use crate::util::{Sandbox, stderr, stdout};
    let sb = Sandbox::new();
    let config = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../config/dream_demo.toml");
    let config = config.to_str().expect("utf8");
    let out = sb.cmd(&["run", "-c", config, "-o", "out", "-q", "--steps", "4", "--repetitions", "1"]);
    assert_exit!(out, 0);
    let text = std::fs::read_to_string(sb.path().join(stdout(&out).trim())).expect("bundle");
    let b = schema::read_bundle(&text).expect("valid bundle");
    assert!(b.provenance.synthetic_weights);
    let kinds: Vec<schema::ModelKind> = b.models.iter().map(|m| m.kind).collect();
    assert!(kinds.contains(&schema::ModelKind::Dream) && kinds.contains(&schema::ModelKind::Llama), "{kinds:?}");
    for c in b.cells.iter().filter(|c| c.key.sampler.kind() == schema::ModelKind::Dream) {
        assert_eq!(c.status, schema::CellStatus::Ok, "{}", c.key);
        assert_eq!((c.key.steps, c.key.block_length), (Some(4), Some(c.key.output_tokens)), "{}", c.key);
        for r in &c.repetitions {
            assert_eq!(r.forward_passes, Some(4), "{}", c.key);
            let committed = r.committed_per_step.as_ref().expect("committed per step");
            assert_eq!(committed.iter().map(|&t| u64::from(t)).sum::<u64>(), r.output_tokens, "{}", c.key);
        }
    }
    // One S_parity record per decoding rule, each named by its sampler (no LLaDA series).
    let samplers: std::collections::BTreeSet<_> = b.parity.iter().map(|r| r.sampler).collect();
    assert_eq!(samplers.len(), 4, "{samplers:?}");
    assert!(b.parity.iter().all(|r| r.variant().is_none()));
    let report = sb.cmd(&["report", sb.path().join(stdout(&out).trim()).to_str().expect("utf8")]);
    assert_exit!(report, 0);
    let md = stdout(&report);
    assert!(md.contains("dream_entropy") && !md.contains("reference, block"), "{md}");
    // A bad rule is exit 2 naming the field and the choices.
    let good = std::fs::read_to_string(config).expect("config");
    let bad = good.replace("\"origin\"]", "\"greedy\"]");
    assert_ne!(bad, good, "config/dream_demo.toml no longer ends its dream_algs with \"origin\": update this test");
    let path = sb.write("bad.toml", &bad);
    let out = sb.cmd(&["plan", "-c", path.to_str().expect("utf8")]);
    assert_exit!(out, 2);
    // The field and the choices, not only the bad line echoed back: `origin` is a choice the bad line lacks.
    let err = stderr(&out);
    assert!(err.contains("dream_algs") && err.contains("`origin`") && err.contains("expected one of"), "{err}");
}
