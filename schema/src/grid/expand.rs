//! What a validated config expands to: the prompt/output split of each sequence length, the cells in the
//! order the runner measures them, and the evaluators as model specs.

use super::types::default_revision;
use super::{GridConfig, LengthSplit, ModelKind, ModelSpec, Remasking, Threshold};
use crate::key::{CellKey, Sampler};

impl GridConfig {
    /// The evaluators as model specs (Llama layout), in config order; none without a `[quality]` table.
    pub fn evaluators(&self) -> Vec<ModelSpec> {
        let Some(q) = &self.quality else { return Vec::new() };
        q.evaluators
            .iter()
            .map(|e| match self.models.iter().find(|m| m.id == e.id) {
                Some(m) if e.revision.is_none() && e.synthetic.is_none() => m.clone(),
                _ => ModelSpec {
                    kind: ModelKind::Llama,
                    id: e.id.clone(),
                    revision: e.revision.clone().unwrap_or_else(default_revision),
                    synthetic: e.synthetic.clone(),
                },
            })
            .collect()
    }

    /// Splits a sequence length into prompt and output tokens; `None` when either would be empty.
    pub fn split(&self, seq_len: u32) -> Option<LengthSplit> {
        let g = &self.grid;
        let (prompt, output) = match (g.output_tokens, g.prompt_fraction) {
            (Some(out), _) => (seq_len.checked_sub(out)?, out),
            (None, Some(f)) => {
                let prompt = (f64::from(seq_len) * f).round() as u32;
                (prompt, seq_len.checked_sub(prompt)?)
            }
            (None, None) => return None,
        };
        (prompt > 0 && output > 0).then_some(LengthSplit { prompt_tokens: prompt, output_tokens: output })
    }

    /// What `plan` and `run` say about a valid config before it runs, in this order: [`Self::steps_past_tokens_note`],
    /// [`Self::temperature_note`], those that apply.
    pub fn notes(&self) -> Vec<String> {
        [self.steps_past_tokens_note(), self.temperature_note()].into_iter().flatten().collect()
    }

    /// A note when the diffusion samplers sample (temperature > 0) beside an autoregressive model, which decodes
    /// greedily whatever the temperature: the two arms' quality then comes from different decoding (the study's
    /// controls, section 4.3.2, hold one temperature for all). `None` otherwise.
    pub fn temperature_note(&self) -> Option<String> {
        let ar = self.models.iter().any(|m| m.kind == ModelKind::Llama);
        (ar && self.grid.temperature != 0.0).then(|| {
            format!(
                "note: temperature = {} applies to the diffusion samplers only; the autoregressive model decodes \
                 greedily (temperature 0), so the two arms' quality comes from different decoding: for S_parity \
                 under one control, set temperature = 0",
                self.grid.temperature
            )
        })
    }

    /// A note when some diffusion K is larger than the output tokens at some N: a step past one per token
    /// commits nothing, yet its forward pass counts in the latency (the config allows up to
    /// [`super::limits::STEPS_PER_OUTPUT_TOKEN`] steps a token; the study's K <= N_out). `None` otherwise.
    pub fn steps_past_tokens_note(&self) -> Option<String> {
        let diffusion = self.models.iter().any(|m| m.kind != ModelKind::Llama);
        let g = &self.grid;
        let mut at: Vec<String> = Vec::new();
        for &n in &g.seq_lengths {
            let Some(split) = self.split(n) else { continue };
            let over: Vec<String> =
                g.steps.iter().filter(|&&k| k > split.output_tokens).map(|k| format!("K = {k}")).collect();
            if !over.is_empty() {
                at.push(format!("{} at N = {n} ({} output tokens)", over.join(", "), split.output_tokens));
            }
        }
        (diffusion && !at.is_empty()).then(|| {
            format!(
                "note: more steps than output tokens: {}; the steps past one per token commit nothing, and their \
                 forward passes count in the latency",
                at.join("; ")
            )
        })
    }

    /// Every cell of the grid, in the order the runner measures them: per model, per N, per B, per sampler series, per K (or threshold).
    /// Call only on a validated config (invalid lengths are skipped).
    pub fn cells(&self) -> Vec<CellKey> {
        let g = &self.grid;
        let mut cells = Vec::new();
        for m in &self.models {
            for &n in &g.seq_lengths {
                let Some(split) = self.split(n) else { continue };
                for &b in &g.batch_sizes {
                    let key = |sampler, steps, block_length| CellKey {
                        model: m.id.clone(),
                        sampler,
                        steps,
                        batch_size: b,
                        seq_len: n,
                        prompt_tokens: split.prompt_tokens,
                        output_tokens: split.output_tokens,
                        block_length,
                        cache: None,
                        threshold: None,
                    };
                    match m.kind {
                        ModelKind::Llama => cells.push(key(Sampler::ArGreedy, None, None)),
                        ModelKind::Llada => {
                            let sampler = match g.remasking {
                                Remasking::LowConfidence => Sampler::LladaLowConfidence,
                                Remasking::Random => Sampler::LladaRandom,
                            };
                            let block = g.block_length.unwrap_or(split.output_tokens);
                            for v in &g.samplers {
                                let cache = v.cache();
                                if v.thresholded() {
                                    for &t in &g.thresholds {
                                        let threshold = Some(Threshold(t));
                                        cells.push(CellKey { cache, threshold, ..key(sampler, None, Some(block)) });
                                    }
                                } else {
                                    for &k in &g.steps {
                                        cells.push(CellKey { cache, ..key(sampler, Some(k), Some(block)) });
                                    }
                                }
                            }
                        }
                        ModelKind::Dream => {
                            for alg in &g.dream_algs {
                                for &k in &g.steps {
                                    cells.push(key(alg.sampler(), Some(k), Some(split.output_tokens)));
                                }
                            }
                        }
                    }
                }
            }
        }
        cells
    }
}
