//! The LLaDA sampler's choices against models whose logits are known: which positions a step commits
//! (low-confidence remasking ranks the masked positions by the softmax probability of the predicted token, not
//! left to right) and which tokens temperature sampling draws (softmax(logits / T)).
//!
//! Every test runs the real path: a tiny synthetic LLaDA checkpoint in the cache layout (its weights rewritten by
//! hand where the test needs known logits), the loader, the transformer and `generate_llada_observed`. A sampler
//! whose confidence were constant commits left to right and passes the schedule tests in `model.rs`; these fail.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, IndexOp, Tensor};
use runner::generate::{
    BlockCache, Confidence, GumbelNoise, LladaParams, Remasking, generate_llada, generate_llada_observed,
    transfer_schedule,
};
use runner::model::{LoadedModel, ModelConfig, ModelFiles, WeightNames};
use runner::synth::{Preset, SynthSpec, write_synthetic};
use schema::grid::ModelKind;

use crate::util::max_abs_diff;

const REPO: &str = "test-org/crafted-llada";

/// Writes a tiny synthetic LLaDA checkpoint into `dir` and loads it (f32, CPU).
fn synthetic_llada(dir: &Path, seed: u64) -> (ModelFiles, LoadedModel) {
    write_synthetic(dir, REPO, ModelKind::Llada, &SynthSpec::new(Preset::Tiny, seed)).expect("write synthetic");
    let files = ModelFiles::from_hf_cache(dir, REPO, "main").expect("resolve");
    let m = LoadedModel::load(&files, ModelKind::Llada, &Device::Cpu, DType::F32).expect("load");
    (files, m)
}

/// Every tensor of a checkpoint as a flat f32 buffer with its shape, to be set entry by entry.
struct Weights {
    cfg: ModelConfig,
    names: WeightNames,
    mask: usize,
    tensors: HashMap<String, (Vec<usize>, Vec<f32>)>,
}

impl Weights {
    fn set(&mut self, name: &str, row: usize, col: usize, value: f32) {
        let (shape, data) = self.tensors.get_mut(name).unwrap_or_else(|| panic!("no tensor {name}"));
        assert!(shape.len() == 2 && row < shape[0] && col < shape[1], "{name}[{row}][{col}] is outside {shape:?}");
        data[row * shape[1] + col] = value;
    }

    fn embed(&self) -> String {
        format!("{}.weight", self.names.embed)
    }

    fn lm_head(&self) -> String {
        format!("{}.weight", self.names.lm_head)
    }

    fn layer(&self, l: usize, part: &str) -> String {
        format!("{}.{l}.{part}.weight", self.names.layers)
    }

    /// Each token's embedding is one unit vector: the mask's `MASK_DIM`, `PROMPT`'s `PROMPT_DIM`, every other
    /// token's `OTHER_DIM`. Nothing else reads or writes `OTHER_DIM`, so committed tokens carry no signal.
    fn one_hot_embeddings(&mut self) {
        let embed = self.embed();
        for t in 0..self.cfg.vocab_size {
            let dim = match t {
                t if t == self.mask => MASK_DIM,
                t if t == PROMPT as usize => PROMPT_DIM,
                _ => OTHER_DIM,
            };
            self.set(&embed, t, dim, 1.0);
        }
    }
}

/// The tiny LLaDA checkpoint with every matrix zero and every norm weight one, then `craft` sets the entries that
/// matter; written over the snapshot's weights file and loaded (f32, CPU). With zero output projections
/// (attention and MLP) a layer adds nothing to the residual stream.
fn crafted_llada(dir: &Path, craft: impl FnOnce(&mut Weights)) -> LoadedModel {
    let (files, m) = synthetic_llada(dir, 1);
    assert_eq!(files.weights.len(), 1, "one weights file");
    let names = WeightNames::for_kind(ModelKind::Llada);
    let tensors = names
        .tensors(&m.config)
        .into_iter()
        .map(|(name, shape)| {
            let fill = if shape.len() == 1 { 1.0 } else { 0.0 };
            let n = shape.iter().product();
            (name, (shape, vec![fill; n]))
        })
        .collect();
    let mask = m.special.mask.expect("mask id") as usize;
    for t in [PROMPT, FAVOURED].into_iter().chain(SUPPORT) {
        assert!(t as usize != mask && t != m.special.pad && !m.special.stop.contains(&t), "{t} is a special id");
    }
    let mut w = Weights { cfg: m.config.clone(), names, mask, tensors };
    drop(m);
    craft(&mut w);
    let tensors: HashMap<String, Tensor> = w
        .tensors
        .into_iter()
        .map(|(name, (shape, data))| (name, Tensor::from_vec(data, shape, &Device::Cpu).expect("tensor")))
        .collect();
    let path = &files.weights[0];
    std::fs::remove_file(path).expect("remove the snapshot's link");
    candle_core::safetensors::save(&tensors, path).expect("save");
    LoadedModel::load(&files, ModelKind::Llada, &Device::Cpu, DType::F32).expect("load crafted")
}

// Embedding dimensions of the crafted models (one role each) and the tokens they give roles to.
const MASK_DIM: usize = 0;
const PROMPT_DIM: usize = 1;
const SIGNAL_DIM: usize = 2;
const OTHER_DIM: usize = 3;
/// The one prompt token of the ordering model.
const PROMPT: u32 = 100;
/// The token the ordering model predicts at every masked position.
const FAVOURED: u32 = 200;
/// The RoPE pair the ordering model's attention uses: rotate-half pair i turns by theta^(-2i / head_dim) radians
/// per position; pair 1 at the tiny preset (theta 500000, head_dim 16) by 0.194, so 16 positions after the
/// prompt stay within half a turn.
const PAIR: usize = 1;

/// A model under which the confidence of a masked position grows with its position, so low-confidence remasking
/// commits RIGHT to left (a constant confidence commits left to right).
///
/// Layer 0's head 0 does it. The mask token's query and `PROMPT`'s key meet in RoPE pair `PAIR` with opposite
/// signs, so a masked position j scores -S cos(ωj) on the prompt at position 0 (S = 4): rising with j while
/// ωj < π. Every other key (masks, committed tokens) is zero, scores 0 and carries a zero value, so the weight on
/// the prompt, and with it what the prompt's value writes into `SIGNAL_DIM` through the output projection, grows
/// with j. The LM head reads `SIGNAL_DIM` into `FAVOURED` alone (every other logit 0): `FAVOURED` is the
/// prediction everywhere and its softmax probability grows with j. Committed tokens look like masks to the
/// attention, so the confidences stay the same from step to step.
fn right_to_left_llada(dir: &Path) -> LoadedModel {
    crafted_llada(dir, |w| {
        w.one_hot_embeddings();
        let half = w.cfg.head_dim / 2;
        assert!(PAIR < half);
        // After the attention norm a one-hot embedding is sqrt(hidden) = 8 in its dimension: q = 8 * 0.5,
        // k = -8 * 0.5, scaled by 1/sqrt(head_dim) = 1/4: S = 4.
        w.set(&w.layer(0, w.names.q), PAIR, MASK_DIM, 0.5);
        w.set(&w.layer(0, w.names.k), PAIR, PROMPT_DIM, -0.5);
        w.set(&w.layer(0, w.names.v), 0, PROMPT_DIM, 0.5);
        w.set(&w.layer(0, w.names.o), SIGNAL_DIM, 0, 1.0);
        w.set(&w.lm_head(), FAVOURED as usize, SIGNAL_DIM, 1.0);
    })
}

/// Softmax probability and id of the argmax at each position of `logits` `(len, vocab)`.
fn argmax_confidences(logits: &Tensor) -> Vec<(u32, f64)> {
    let rows = logits.to_dtype(DType::F64).expect("f64").to_vec2::<f64>().expect("rows");
    rows.iter()
        .map(|l| {
            let (arg, max) = l
                .iter()
                .copied()
                .enumerate()
                .fold((0, f64::NEG_INFINITY), |best, (i, x)| if x > best.1 { (i, x) } else { best });
            let sum: f64 = l.iter().map(|x| (x - max).exp()).sum();
            (arg as u32, 1.0 / sum)
        })
        .collect()
}

/// Step at which each generated position stopped being a mask, from the sequences observed after each step.
fn commit_steps(m: &LoadedModel, prompt: &[u32], n_out: usize, params: &LladaParams) -> (Vec<usize>, Vec<u32>) {
    let mask = m.special.mask.expect("mask");
    let p = prompt.len();
    let mut at = vec![None; n_out];
    let out = generate_llada_observed(m, &[prompt.to_vec()], n_out, params, &mut |step, x| {
        for (j, slot) in at.iter_mut().enumerate() {
            if x[0][p + j] != mask && slot.is_none() {
                *slot = Some(step);
            }
        }
    })
    .expect("generate");
    (at.into_iter().map(|a| a.expect("every position committed")).collect(), out.tokens[0].clone())
}

/// The steps [`commit_steps`] must see when each block of `bl` commits its positions in one fixed order, `rank(i)`
/// the turn of the block's position i (0 first), each step taking its count of the schedule of `steps` over the
/// `n_out / bl` blocks. (Right to left and left to right are the two orders the crafted models force.)
fn commit_steps_in_order(n_out: usize, bl: usize, steps: usize, rank: impl Fn(usize) -> usize) -> Vec<usize> {
    let spb = steps / (n_out / bl);
    let schedule = transfer_schedule(bl, spb);
    (0..n_out)
        .map(|j| {
            let (block, rank) = (j / bl, rank(j % bl));
            let mut done = 0;
            let s = schedule
                .iter()
                .position(|&k| {
                    done += k;
                    done > rank
                })
                .expect("scheduled");
            block * spb + s
        })
        .collect()
}

#[test]
fn llada_commits_by_confidence_right_to_left_on_a_crafted_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = right_to_left_llada(dir.path());
    let mask = m.special.mask.expect("mask");
    let n_max = 16;
    let omega = m.config.rope_theta.powf(-2.0 * PAIR as f64 / m.config.head_dim as f64);
    assert!(omega * n_max as f64 <= 0.99 * std::f64::consts::PI, "pair {PAIR} turns {omega} rad per position");
    // The crafting, seen from the logits: FAVOURED predicted everywhere, its probability rising with position.
    let seq: Vec<u32> = std::iter::once(PROMPT).chain(std::iter::repeat_n(mask, n_max)).collect();
    let ids = Tensor::new(seq.as_slice(), &Device::Cpu).expect("ids").unsqueeze(0).expect("batch");
    let logits = m.forward_full(&ids, None).expect("forward").i((0, 1..)).expect("generated positions");
    let conf = argmax_confidences(&logits);
    assert!(conf.iter().all(|&(t, _)| t == FAVOURED), "{conf:?}");
    for pair in conf.windows(2) {
        assert!(pair[1].1 > pair[0].1 * 1.0001, "confidence must rise with position: {conf:?}");
    }
    assert!(conf[0].1 < 0.01 && conf[n_max - 1].1 > 0.5, "{conf:?}");

    // (n_out, block_length, steps): one commit per step; two per step over two blocks; an uneven schedule.
    for (n_out, bl, steps) in [(16, 16, 16), (16, 8, 8), (12, 4, 6), (15, 15, 4)] {
        let params = LladaParams { steps, block_length: bl, ..LladaParams::default() };
        // Within a block, the right-most masked position first; block by block, each step its scheduled count.
        let expected = commit_steps_in_order(n_out, bl, steps, |i| bl - 1 - i);
        let (at, tokens) = commit_steps(&m, &[PROMPT], n_out, &params);
        let case = format!("n_out {n_out}, block {bl}, steps {steps}");
        assert_eq!(at, expected, "{case}: step at which each position was committed");
        assert!(tokens.iter().all(|&t| t == FAVOURED), "{case}: {tokens:?}");
    }
}

#[test]
fn llada_commits_the_most_confident_positions_of_a_random_model() {
    // Each step's commits against the confidences recomputed from an uncached forward of the sequence before the
    // step, by generate.py's rule: every masked position up to the block's end is ranked (a position whose
    // prediction was the mask id stays masked and is ranked again, in later blocks too), the k most confident are
    // chosen, and those whose argmax is not the mask id change. The random weights make near ties rare (1e-9 allows
    // for rounding); the seeds run until a position left masked by an earlier block has been ranked again.
    let prompts = vec![vec![11u32, 12, 13, 14, 15], vec![21, 22]];
    let p = 5;
    let (mut out_of_order, mut pairs, mut leftovers_ranked, mut mask_chosen) = (0, 0, 0, 0);
    for seed in 0..40u64 {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_files, m) = synthetic_llada(dir.path(), seed);
        let mask = m.special.mask.expect("mask");
        for (n_out, bl, steps) in [(16, 8, 8), (12, 12, 5), (16, 4, 8)] {
            let case = format!("seed {seed}, n_out {n_out}, block {bl}, steps {steps}");
            let params = LladaParams { steps, block_length: bl, ..LladaParams::default() };
            let spb = steps / (n_out / bl);
            let first: Vec<Vec<u32>> = prompts
                .iter()
                .map(|r| {
                    let pad = std::iter::repeat_n(m.special.pad, p - r.len());
                    pad.chain(r.iter().copied()).chain(std::iter::repeat_n(mask, n_out)).collect()
                })
                .collect();
            let valid: Vec<Vec<bool>> =
                prompts.iter().map(|r| (0..p + n_out).map(|j| j + r.len() >= p).collect()).collect();
            let mut seqs = vec![first];
            let out = generate_llada_observed(&m, &prompts, n_out, &params, &mut |_, x| seqs.push(x.to_vec()))
                .expect("generate");
            assert_eq!(seqs.len(), steps + 1);
            for s in 0..steps {
                let (before, after) = (&seqs[s], &seqs[s + 1]);
                let flat: Vec<u32> = before.iter().flatten().copied().collect();
                let ids = Tensor::from_vec(flat, (prompts.len(), p + n_out), &Device::Cpu).expect("ids");
                let logits = m.forward_full(&ids, Some(&valid)).expect("forward");
                let (block, start) = (s / spb, p + (s / spb) * bl);
                let k = transfer_schedule(bl, spb)[s % spb];
                for r in 0..prompts.len() {
                    let conf = argmax_confidences(&logits.i(r).expect("row"));
                    let mut ranked: Vec<usize> = (p..start + bl).filter(|&j| before[r][j] == mask).collect();
                    ranked.sort_by(|&a, &b| conf[b].1.total_cmp(&conf[a].1).then(a.cmp(&b)));
                    let chosen = &ranked[..k.min(ranked.len())];
                    if let (Some(&last), Some(&next)) = (chosen.last(), ranked.get(k)) {
                        assert!(conf[last].1 - conf[next].1 > 1e-9, "{case}, step {s}, row {r}: a near tie");
                    }
                    let want: Vec<usize> = chosen.iter().copied().filter(|&j| conf[j].0 != mask).collect();
                    let mut changed: Vec<usize> = (p..p + n_out).filter(|&j| before[r][j] != after[r][j]).collect();
                    changed.sort_by(|&a, &b| conf[b].1.total_cmp(&conf[a].1).then(a.cmp(&b)));
                    assert_eq!(changed, want, "{case}, step {s}, row {r}: the positions committed");
                    for &j in &changed {
                        assert_eq!(after[r][j], conf[j].0, "{case}, step {s}, row {r}: position {j} takes the argmax");
                    }
                    assert_eq!(changed.len(), out.transfers[s][r], "{case}, step {s}, row {r}: tokens committed");
                    leftovers_ranked += usize::from(block > 0 && ranked.iter().any(|&j| j < start));
                    mask_chosen += usize::from(chosen.len() > want.len());
                    let masked_in_block: Vec<usize> = (start..start + bl).filter(|&j| before[r][j] == mask).collect();
                    out_of_order += usize::from(!changed.is_empty() && changed[..] != masked_in_block[..changed.len()]);
                    pairs += 1;
                }
            }
        }
        if seed >= 3 && leftovers_ranked > 0 {
            break;
        }
    }
    // Left to right would be the order of a constant confidence: it must not be what happened.
    assert!(
        out_of_order * 2 >= pairs,
        "only {out_of_order} of {pairs} (step, row) commits were out of left-to-right order"
    );
    assert!(
        mask_chosen > 0 && leftovers_ranked > 0,
        "no chosen mask id ({mask_chosen}) or leftover ({leftovers_ranked})"
    );
}

/// The tokens the sampling model gives a probability, and their logits.
const SUPPORT: [u32; 4] = [300, 301, 302, 303];
const SUPPORT_LOGITS: [f32; 4] = [0.0, 0.6, 1.2, 1.8];

/// A model whose logits at every masked position are `logits` on `SUPPORT` and `rest` on every other token: no
/// layer writes anything, so a position's final state is its token's embedding, and the LM head reads the mask's
/// dimension (scaled by 1/sqrt(hidden), as the final norm makes a one-hot embedding sqrt(hidden)).
fn fixed_logits_llada(dir: &Path, logits: [f32; 4], rest: f32) -> LoadedModel {
    crafted_llada(dir, |w| {
        w.one_hot_embeddings();
        let scale = 1.0 / (w.cfg.hidden_size as f32).sqrt();
        let head = w.lm_head();
        for t in 0..w.cfg.vocab_size {
            let logit = SUPPORT.iter().position(|&s| s as usize == t).map_or(rest, |i| logits[i]);
            w.set(&head, t, MASK_DIM, logit * scale);
        }
    })
}

/// Pearson's chi-square statistic of `counts` against probabilities `probs`.
fn chi_square(counts: &[usize], probs: &[f64]) -> f64 {
    let n: usize = counts.iter().sum();
    counts.iter().zip(probs).map(|(&c, &p)| (c as f64 - n as f64 * p).powi(2) / (n as f64 * p)).sum()
}

fn softmax(logits: &[f64], temperature: f64) -> Vec<f64> {
    let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = logits.iter().map(|l| ((l - max) / temperature).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.iter().map(|x| x / sum).collect()
}

#[test]
fn llada_temperature_samples_from_softmax_of_logits_over_t() {
    let dir = tempfile::tempdir().expect("tempdir");
    // -100 elsewhere: every draw falls in the support.
    let m = fixed_logits_llada(dir.path(), SUPPORT_LOGITS, -100.0);
    let mask = m.special.mask.expect("mask");
    // One block of n_out masks filled in one step: every position is an independent draw of the sampler.
    let n_out = 512;
    let seq: Vec<u32> = std::iter::once(PROMPT).chain(std::iter::repeat_n(mask, n_out)).collect();
    let ids = Tensor::new(seq.as_slice(), &Device::Cpu).expect("ids").unsqueeze(0).expect("batch");
    let logits = m.forward_full(&ids, None).expect("forward").i((0, 1..)).expect("generated positions");
    let logits = logits.to_dtype(DType::F64).expect("f64").to_vec2::<f64>().expect("rows");
    // The crafting: the same logits at every masked position, SUPPORT_LOGITS (up to the norm's eps) on SUPPORT.
    assert!(logits.iter().all(|l| *l == logits[0]), "the logits must not depend on the position");
    let support: Vec<f64> = SUPPORT.iter().map(|&t| logits[0][t as usize]).collect();
    for (got, want) in support.iter().zip(SUPPORT_LOGITS) {
        assert!((got - f64::from(want)).abs() < 1e-3, "{support:?}");
    }
    assert!(logits[0].iter().enumerate().all(|(t, &l)| SUPPORT.contains(&(t as u32)) || l < -99.0));

    let greedy = LladaParams { steps: 1, block_length: n_out, ..LladaParams::default() };
    let out = generate_llada(&m, &[vec![PROMPT]], n_out, &greedy).expect("temperature 0");
    assert!(out.tokens[0].iter().all(|&t| t == SUPPORT[3]), "temperature 0 is the argmax");

    let untempered = softmax(&support, 1.0);
    for temperature in [0.5, 2.0] {
        let mut counts = [0usize; 4];
        for seed in 0..8 {
            let params = LladaParams { temperature, seed, ..greedy };
            let out = generate_llada(&m, &[vec![PROMPT]], n_out, &params).expect("sample");
            for t in &out.tokens[0] {
                let i = SUPPORT.iter().position(|s| s == t);
                counts[i.unwrap_or_else(|| panic!("T {temperature}: drew {t}, outside the support"))] += 1;
            }
        }
        let want = softmax(&support, temperature);
        // 3 degrees of freedom: P(chi2 > 30) is about 1.4e-6 (and the seeds are fixed).
        let fit = chi_square(&counts, &want);
        assert!(fit < 30.0, "T {temperature}: counts {counts:?} against softmax(logits / T) {want:?}: chi2 {fit}");
        // What a sampler that ignored T would draw is far off: the two distributions differ clearly.
        let off = chi_square(&counts, &untempered);
        assert!(off > 150.0, "T {temperature}: counts {counts:?} against softmax(logits) {untempered:?}: chi2 {off}");
    }
}

// ---------------------------------------------------------------- confidence precision

/// Tokens and per-step commits of a generation with the confidence in `dtype`.
fn run_with(
    m: &LoadedModel,
    prompts: &[Vec<u32>],
    n_out: usize,
    params: LladaParams,
    dtype: Confidence,
) -> (Vec<Vec<u32>>, Vec<Vec<usize>>) {
    let params = LladaParams { confidence: dtype, ..params };
    let out = generate_llada(m, prompts, n_out, &params).expect("generate");
    (out.tokens, out.transfers)
}

#[test]
fn f32_confidence_on_the_device_commits_as_the_f64_reference() {
    // The default selection (argmax and 1 / sum(exp(l - max)) reduced in f32, only B x block values to the host)
    // against the reference's full f64 copy of the block's logits: the same tokens, committed at the same steps,
    // for several K and blocks, left-padded rows, greedy and sampled.
    let dir = tempfile::tempdir().expect("tempdir");
    let (_files, m) = synthetic_llada(dir.path(), 7);
    let prompts = vec![vec![11u32, 12, 13, 14, 15], vec![21, 22], vec![31, 32, 33]];
    for (n_out, bl, steps) in [(16, 8, 8), (12, 12, 5), (16, 4, 16), (8, 8, 3), (8, 2, 4)] {
        for temperature in [0.0, 0.7] {
            let case = format!("n_out {n_out}, block {bl}, steps {steps}, temperature {temperature}");
            let params = LladaParams { steps, block_length: bl, temperature, seed: 5, ..LladaParams::default() };
            let f64_run = run_with(&m, &prompts, n_out, params, Confidence::F64);
            let f32_run = run_with(&m, &prompts, n_out, params, Confidence::F32);
            assert_eq!(f32_run, f64_run, "{case}");
            // In an f32 run the logits' own dtype is f32: the `logits` choice takes the same path's values.
            let logits_run = run_with(&m, &prompts, n_out, params, Confidence::Logits);
            assert_eq!(logits_run, f64_run, "{case}: confidence in the logits' dtype");
        }
    }
}

#[test]
fn f32_confidence_breaks_ties_towards_the_lower_position_and_token() {
    // Every masked position has the same logits (no layer writes anything), and two tokens share the largest
    // logit: the argmax ties between tokens and the confidence ties between positions. Both precisions pick the
    // lower token id and commit left to right.
    let dir = tempfile::tempdir().expect("tempdir");
    let m = fixed_logits_llada(dir.path(), [1.5, 1.5, 0.5, -0.5], 0.0);
    for (n_out, bl, steps) in [(8, 8, 8), (8, 4, 4), (12, 4, 6), (6, 6, 4)] {
        let params = LladaParams { steps, block_length: bl, ..LladaParams::default() };
        // Left to right within each block: position j of a block goes at the step its rank j is scheduled.
        let expected = commit_steps_in_order(n_out, bl, steps, |i| i);
        for dtype in [Confidence::F32, Confidence::F64, Confidence::Logits] {
            let case = format!("n_out {n_out}, block {bl}, steps {steps}, {dtype:?}");
            let (at, tokens) = commit_steps(&m, &[PROMPT], n_out, &LladaParams { confidence: dtype, ..params });
            assert_eq!(at, expected, "{case}: ties must commit the lower position first");
            assert!(tokens.iter().all(|&t| t == SUPPORT[0]), "{case}: the lower of the tied tokens: {tokens:?}");
        }
    }
}

#[test]
fn gumbel_noise_on_the_cpu_is_the_host_stream_whichever_source_is_asked() {
    // candle's CPU generator cannot be seeded, so `gumbel_noise = "device"` draws the host's seeded stream there:
    // both sources give the same samples on the CPU, a seed reproduces them, and another seed changes them.
    let dir = tempfile::tempdir().expect("tempdir");
    let (_files, m) = synthetic_llada(dir.path(), 7);
    let prompts = vec![vec![11u32, 12, 13, 14, 15], vec![21, 22]];
    let sample = |seed: u64, gumbel_noise: GumbelNoise| {
        let params =
            LladaParams { steps: 8, block_length: 8, temperature: 1.5, seed, gumbel_noise, ..LladaParams::default() };
        generate_llada(&m, &prompts, 16, &params).expect("sample").tokens
    };
    let host = sample(3, GumbelNoise::Host);
    assert_eq!(sample(3, GumbelNoise::Device), host, "device noise on the CPU is the host stream");
    assert_eq!(sample(3, GumbelNoise::Host), host, "a seed reproduces its samples");
    let others: Vec<_> = (4..8).map(|seed| sample(seed, GumbelNoise::Device)).collect();
    assert!(others.iter().any(|t| *t != host), "other seeds must draw other samples: {others:?} vs {host:?}");
}

// ---------------------------------------------------------------- sampler variants: block caches, thresholds

/// Tokens, per-step commits and forwards of a generation.
fn variant_run(
    m: &LoadedModel,
    prompts: &[Vec<u32>],
    n_out: usize,
    params: LladaParams,
) -> (Vec<Vec<u32>>, Vec<Vec<usize>>, usize) {
    let out = generate_llada(m, prompts, n_out, &params).expect("generate");
    assert_eq!(out.nfe, out.transfers.len(), "one forward per step");
    assert_eq!(out.block_steps.iter().sum::<usize>(), out.nfe, "the forwards of the blocks add up");
    let committed: usize = out.transfers.iter().flatten().sum();
    assert_eq!(committed, prompts.len() * n_out, "every position committed once");
    (out.tokens, out.transfers, out.nfe)
}

#[test]
fn a_threshold_above_one_without_a_cache_is_the_reference_at_one_token_per_step() {
    // Above 1 no confidence qualifies, so each step commits the most confident position alone: the reference
    // sampler at K = N_out, step for step, greedy and sampled, with left padding and several blocks.
    let dir = tempfile::tempdir().expect("tempdir");
    let (_files, m) = synthetic_llada(dir.path(), 7);
    let prompts = vec![vec![11u32, 12, 13, 14, 15], vec![21, 22], vec![31, 32, 33]];
    for (n_out, bl) in [(16, 8), (12, 4), (8, 8)] {
        for temperature in [0.0, 0.7] {
            let case = format!("n_out {n_out}, block {bl}, temperature {temperature}");
            let base = LladaParams { block_length: bl, temperature, seed: 3, ..LladaParams::default() };
            let reference = variant_run(&m, &prompts, n_out, LladaParams { steps: n_out, ..base });
            let threshold = variant_run(&m, &prompts, n_out, LladaParams { threshold: Some(1.5), ..base });
            assert_eq!(threshold, reference, "{case}");
            assert_eq!(threshold.2, n_out, "{case}: N_out forwards");
        }
    }
}

#[test]
fn a_threshold_of_zero_commits_each_block_in_one_step_with_or_without_a_cache() {
    // Every confidence is at least 0: a block is one forward, which is also a cache's refresh, so the caches
    // change nothing.
    let dir = tempfile::tempdir().expect("tempdir");
    let (_files, m) = synthetic_llada(dir.path(), 9);
    let prompts = vec![vec![11u32, 12, 13], vec![21]];
    let (n_out, bl) = (12, 4);
    let base = LladaParams { block_length: bl, threshold: Some(0.0), ..LladaParams::default() };
    let plain = variant_run(&m, &prompts, n_out, base);
    assert_eq!(plain.2, n_out / bl, "one forward per block");
    assert!(plain.1.iter().all(|step| step.iter().all(|&k| k == bl)), "whole blocks per step: {:?}", plain.1);
    // One forward per block with K = blocks is the reference sampler too.
    assert_eq!(plain, variant_run(&m, &prompts, n_out, LladaParams { steps: n_out / bl, threshold: None, ..base }));
    for cache in [BlockCache::Prefix, BlockCache::Dual] {
        assert_eq!(variant_run(&m, &prompts, n_out, LladaParams { cache: Some(cache), ..base }), plain, "{cache:?}");
    }
}

#[test]
fn a_cache_refreshed_at_every_step_gives_the_reference_tokens() {
    // K = the number of blocks: every step is a block's first, a full forward that refreshes the cache, so a cached
    // sampler is the reference's step for step. With more steps per block the cache is read, and its sequences
    // still fill every position.
    let dir = tempfile::tempdir().expect("tempdir");
    let (_files, m) = synthetic_llada(dir.path(), 11);
    let prompts = vec![vec![11u32, 12, 13, 14, 15], vec![21, 22]];
    for (n_out, bl) in [(16, 4), (12, 6), (8, 8)] {
        let blocks = n_out / bl;
        for temperature in [0.0, 0.9] {
            let base = LladaParams { steps: blocks, block_length: bl, temperature, seed: 2, ..LladaParams::default() };
            let reference = variant_run(&m, &prompts, n_out, base);
            for cache in [BlockCache::Prefix, BlockCache::Dual] {
                let case = format!("n_out {n_out}, block {bl}, temperature {temperature}, {cache:?}");
                let cached = variant_run(&m, &prompts, n_out, LladaParams { cache: Some(cache), ..base });
                assert_eq!(cached, reference, "{case}");
                let more = LladaParams { steps: n_out, cache: Some(cache), ..base };
                let (tokens, _, nfe) = variant_run(&m, &prompts, n_out, more);
                assert_eq!((tokens.len(), nfe), (2, n_out), "{case}");
            }
        }
    }
}

#[test]
fn cached_forwards_right_after_a_refresh_equal_the_full_forward() {
    // The prefix cache's keys and values at a block's start are a fresh forward's: a forward that feeds only the
    // block and what follows (prefix) or only the block (dual), reading the rest from the cache the full forward
    // just filled, gives the full forward's logits for the block. Two rows, one left-padded.
    let dir = tempfile::tempdir().expect("tempdir");
    let (_files, m) = synthetic_llada(dir.path(), 13);
    let tf = &m.transformer;
    let mask = m.special.mask.expect("mask");
    let pad = m.special.pad;
    let (p, n_out, bl) = (5usize, 12usize, 4usize);
    let len = p + n_out;
    let rows: Vec<Vec<u32>> = vec![
        [11u32, 12, 13, 14, 15].into_iter().chain([40, 41, 42, 43]).chain(std::iter::repeat_n(mask, 8)).collect(),
        [pad, pad, pad, 21, 22].into_iter().chain([50, mask, 52, mask]).chain(std::iter::repeat_n(mask, 8)).collect(),
    ];
    let valid: Vec<Vec<bool>> = rows.iter().map(|r| r.iter().map(|&t| t != pad).collect()).collect();
    let ids = |from: usize, to: usize| {
        let flat: Vec<u32> = rows.iter().flat_map(|r| r[from..to].to_vec()).collect();
        Tensor::from_vec(flat, (2, to - from), &Device::Cpu).expect("ids")
    };
    let rope = tf.rope(&runner::model::Positions::Range { start: 0, len }).expect("rope");
    let bias = tf.attention_bias(Some(&valid), 2, 0, len, len).expect("bias");
    for block in 0..n_out / bl {
        let start = p + block * bl;
        let full_span = runner::model::LogitsSpan::Range { start, len: bl };
        let mut cache = tf.new_cache(len);
        let full = tf.forward(&ids(0, len), &rope, bias.as_ref(), Some(&mut cache), full_span).expect("full");
        let plain = tf.forward(&ids(0, len), &rope, bias.as_ref(), None, full_span).expect("no cache");
        assert!(max_abs_diff(&full, &plain) == 0.0, "filling the cache changes nothing");
        for (to, span) in [
            (len, runner::model::LogitsSpan::Range { start: 0, len: bl }),
            (start + bl, runner::model::LogitsSpan::All),
        ] {
            cache.seek(start).expect("seek");
            let part = tf
                .forward(
                    &ids(start, to),
                    &rope.narrow(start, to - start).expect("rope"),
                    bias.as_ref(),
                    Some(&mut cache),
                    span,
                )
                .expect("cached forward");
            let d = max_abs_diff(&part, &full);
            assert!(d < 1e-4, "block {block}, feeding {start}..{to}: logits differ by {d}");
            assert_eq!(cache.len(), len, "the cache stays filled");
        }
    }
}

#[test]
fn thresholds_commit_every_position_at_or_above_them_and_ties_together() {
    // The tie model: every masked position has the same confidence c. Below c a block goes in one step (all tied
    // positions qualify); above it one position per step, the lower first.
    let dir = tempfile::tempdir().expect("tempdir");
    let m = fixed_logits_llada(dir.path(), [3.0, 0.5, 0.0, -0.5], 0.0);
    let (n_out, bl) = (8, 4);
    let confidence = {
        let mask = m.special.mask.expect("mask");
        let ids = Tensor::from_vec(vec![PROMPT, mask], (1, 2), &Device::Cpu).expect("ids");
        let rope = m.transformer.rope(&runner::model::Positions::Range { start: 0, len: 2 }).expect("rope");
        let logits = m.transformer.forward(&ids, &rope, None, None, runner::model::LogitsSpan::Last).expect("forward");
        argmax_confidences(&logits.squeeze(0).expect("squeeze"))[0].1
    };
    for cache in [None, Some(BlockCache::Prefix), Some(BlockCache::Dual)] {
        let below =
            LladaParams { block_length: bl, threshold: Some(confidence - 1e-3), cache, ..LladaParams::default() };
        let (at, tokens) = commit_steps(&m, &[PROMPT], n_out, &below);
        assert_eq!(at, [0, 0, 0, 0, 1, 1, 1, 1], "{cache:?}: tied positions at c >= threshold go together");
        assert!(tokens.iter().all(|&t| t == SUPPORT[0]), "{cache:?}: {tokens:?}");
        let above = LladaParams { threshold: Some(confidence + 1e-3), ..below };
        let (at, _) = commit_steps(&m, &[PROMPT], n_out, &above);
        assert_eq!(at, (0..n_out).collect::<Vec<_>>(), "{cache:?}: one per step, lower position first");
    }
}

#[test]
fn the_block_cache_holds_every_layer_for_the_whole_sequence() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_files, m) = synthetic_llada(dir.path(), 5);
    let prompts = vec![vec![11u32, 12, 13], vec![21]];
    let (n_out, bl) = (8, 4);
    let c = &m.config;
    let expected = 2 * c.num_layers * prompts.len() * (3 + n_out) * c.num_kv_heads * c.head_dim * 4;
    for cache in [BlockCache::Prefix, BlockCache::Dual] {
        let params = LladaParams { steps: 4, block_length: bl, cache: Some(cache), ..LladaParams::default() };
        let out = generate_llada(&m, &prompts, n_out, &params).expect("generate");
        assert_eq!(out.cache_bytes, Some(expected), "{cache:?}");
        assert_eq!(out.block_steps, [2, 2], "{cache:?}");
    }
    let out =
        generate_llada(&m, &prompts, n_out, &LladaParams { steps: 4, block_length: bl, ..LladaParams::default() })
            .expect("generate");
    assert_eq!(out.cache_bytes, None);
}

#[test]
fn a_cached_block_ends_when_full_and_a_threshold_block_that_commits_nothing_fails() {
    // K / blocks above the block length: the reference runs the surplus steps (they commit nothing); a cached
    // sampler ends each block as soon as it is full, as Fast-dLLM's loop does.
    let dir = tempfile::tempdir().expect("tempdir");
    let (_files, m) = synthetic_llada(dir.path(), 11);
    let mask = m.special.mask.expect("mask");
    let prompts = vec![vec![11u32, 12, 13, 14, 15]];
    let base = LladaParams { steps: 16, block_length: 4, ..LladaParams::default() };
    let reference = generate_llada(&m, &prompts, 8, &base).expect("generate");
    assert_eq!((reference.nfe, reference.block_steps.clone()), (16, vec![8, 8]));
    assert!(reference.tokens[0].iter().all(|&t| t != mask), "this seed fills every position");
    for cache in [BlockCache::Prefix, BlockCache::Dual] {
        let out = generate_llada(&m, &prompts, 8, &LladaParams { cache: Some(cache), ..base }).expect("generate");
        assert_eq!((out.nfe, out.block_steps.clone()), (8, vec![4, 4]), "{cache:?}: one commit per step, then full");
        assert!(out.tokens[0].iter().all(|&t| t != mask), "{cache:?}");
    }

    // A model that predicts the mask id at every masked position: the fixed schedule runs its steps and commits no
    // token; a threshold block would never fill, and fails instead of looping.
    let dir = tempfile::tempdir().expect("tempdir");
    let stuck = crafted_llada(dir.path(), |w| {
        w.one_hot_embeddings();
        let (head, mask) = (w.lm_head(), w.mask);
        w.set(&head, mask, MASK_DIM, 1.0);
    });
    let fixed = generate_llada(&stuck, &prompts, 8, &base).expect("a fixed schedule ends");
    assert!(fixed.tokens[0].iter().all(|&t| t == mask), "{:?}", fixed.tokens);
    assert_eq!(fixed.nfe, 16);
    assert!(fixed.transfers.iter().flatten().all(|&n| n == 0), "no token committed: {:?}", fixed.transfers);
    for (cache, remasking, forwards) in [
        (None, Remasking::LowConfidence, 1),
        (Some(BlockCache::Prefix), Remasking::LowConfidence, 1),
        (None, Remasking::Random, 64),
    ] {
        let params = LladaParams { threshold: Some(0.5), cache, remasking, ..base };
        match generate_llada(&stuck, &prompts, 8, &params) {
            Err(e @ runner::generate::GenerateError::Stalled(_)) => {
                let msg = e.to_string();
                assert!(msg.contains("mask id") && msg.contains(&format!("in {forwards} forward")), "{msg}");
            }
            other => panic!("{cache:?} {remasking:?}: {:?}", other.map(|o| o.nfe)),
        }
    }
}
