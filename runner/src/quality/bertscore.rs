//! BERTScore (Zhang et al. 2020) of a continuation against the prompt's true continuation, as the `bert_score`
//! package (0.3.13) computes it with its defaults (no idf weighting, no baseline rescaling), one pair at a time.
//!
//! Each text is `strip()`ped (Python's whitespace), given a leading space for RoBERTa (the package passes
//! `add_prefix_space=True` to RoBERTa's tokenizer), encoded with the special tokens and cut to the encoder's
//! length (the text's last tokens dropped, the closing special kept: HF's `truncation=True`). Its hidden states at
//! the chosen layer, each row scaled to unit length, give the cosine similarities of every candidate token with
//! every reference token (the specials included). Precision is the mean over the candidate's tokens of each one's
//! best similarity in the reference; recall the same the other way; F1 their harmonic mean. The package averages
//! with idf weights of 1 for every token and 0 for the tokenizer's CLS and SEP ids, so the specials are left out
//! of the means (by id, as there). Which encoder and layer is the caller's: [`schema::grid::bertscore_default_layer`]
//! gives the package's choice for the common checkpoints.

use anyhow::{Context, Result};
use schema::bundle::{Direction, Generation, Pooling, PromptValue, QualityValue};

use super::pooled;
use crate::model::encoder::{Encoder, EncoderType};

/// BERTScore of one candidate against one reference.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BertScore {
    /// Mean over the candidate's tokens of the best cosine similarity with a reference token.
    pub precision: f64,
    /// Mean over the reference's tokens of the best cosine similarity with a candidate token.
    pub recall: f64,
    /// `2 P R / (P + R)`; 0 when `P + R` is 0.
    pub f1: f64,
}

/// Python's `str.strip()`: its whitespace is Unicode's White_Space and the separators U+001C to U+001F.
fn python_strip(text: &str) -> &str {
    text.trim_matches(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
}

/// The token ids `bert_score` encodes `text` to (its `sent_encode`): stripped, a leading space for RoBERTa, the
/// special tokens added, cut to the encoder's length. `None` for a text that is empty once stripped (the package
/// encodes it to the specials alone and scores it 0).
pub fn encode_text(encoder: &Encoder, text: &str) -> Result<Option<Vec<u32>>> {
    let text = python_strip(text);
    if text.is_empty() {
        return Ok(None);
    }
    let text = match encoder.config.model_type {
        EncoderType::Roberta => format!(" {text}"),
        EncoderType::Bert => text.to_string(),
    };
    let ids = encoder
        .tokenizer
        .encode(text, true)
        .map_err(|e| anyhow::anyhow!("{}: {e}", encoder.files.tokenizer.display()))?
        .get_ids()
        .to_vec();
    if ids.len() > encoder.config.max_tokens {
        anyhow::bail!(
            "the encoder's tokenizer gave {} tokens, more than its {}: its truncation was changed after loading",
            ids.len(),
            encoder.config.max_tokens
        );
    }
    Ok(Some(ids))
}

/// The mean of each row's maximum of `sim` (rows x cols, row-major), over the rows `keep` marks.
fn mean_of_best(sim: &[f32], cols: usize, keep: &[bool]) -> f64 {
    let (mut sum, mut n) = (0.0f64, 0usize);
    for (row, _) in sim.chunks(cols).zip(keep).filter(|(_, k)| **k) {
        sum += f64::from(row.iter().copied().fold(f32::NEG_INFINITY, f32::max));
        n += 1;
    }
    sum / n as f64
}

/// BERTScore of `candidate` against `reference` with the hidden states of `layer`. `None` when either is empty
/// once stripped, or has no token besides the specials (where `bert_score` warns and gives 0, we record nothing).
pub fn bertscore(encoder: &Encoder, layer: usize, candidate: &str, reference: &str) -> Result<Option<BertScore>> {
    let (Some(c), Some(r)) = (encode_text(encoder, candidate)?, encode_text(encoder, reference)?) else {
        return Ok(None);
    };
    let content = |ids: &[u32]| ids.iter().map(|id| !encoder.special_ids.contains(id)).collect::<Vec<bool>>();
    let (keep_c, keep_r) = (content(&c), content(&r));
    if !keep_c.contains(&true) || !keep_r.contains(&true) {
        return Ok(None);
    }
    let ec = encoder.normalized_states(&c, layer).context("encoding the candidate")?;
    let er = encoder.normalized_states(&r, layer).context("encoding the reference")?;
    // (candidate, reference) cosine similarities, and their transpose for the recall.
    let sim = ec.matmul(&er.t()?)?;
    let precision = mean_of_best(&sim.flatten_all()?.to_vec1::<f32>()?, r.len(), &keep_c);
    let recall = mean_of_best(&sim.t()?.contiguous()?.flatten_all()?.to_vec1::<f32>()?, c.len(), &keep_r);
    // bert_score: 2PR/(P+R) with a NaN (P = R = 0) set to 0; P = -R != 0 (an infinity there) is 0 here too.
    let sum = precision + recall;
    let f1 = if sum == 0.0 { 0.0 } else { 2.0 * precision * recall / sum };
    for (what, v) in [("precision", precision), ("recall", recall), ("F1", f1)] {
        if !v.is_finite() {
            anyhow::bail!(
                "the BERTScore {what} is not finite ({v}): the encoder {} gives NaN or infinite hidden states (a \
                 damaged checkpoint?)",
                encoder.files.repo_id
            );
        }
    }
    Ok(Some(BertScore { precision, recall, f1 }))
}

/// The `bertscore_precision`, `bertscore_recall` and `bertscore_f1` values (higher is better, evaluator
/// `evaluator_id`, the mean over prompts) of the generations that have a reference, each scored against it at
/// `layer`. A metric no prompt has a value for is left out.
pub fn bertscore_values(
    encoder: &Encoder,
    evaluator_id: &str,
    layer: usize,
    generations: &[Generation],
) -> Result<Vec<QualityValue>> {
    let mut per_prompt: [Vec<PromptValue>; 3] = Default::default();
    for g in generations {
        let Some(reference) = g.reference.as_deref() else { continue };
        let score = bertscore(encoder, layer, &g.text, reference)
            .with_context(|| format!("BERTScore of the continuation of prompt {} under {evaluator_id}", g.prompt))?;
        if let Some(s) = score {
            for (values, value) in per_prompt.iter_mut().zip([s.precision, s.recall, s.f1]) {
                values.push(PromptValue { prompt: g.prompt, value, tokens: None });
            }
        }
    }
    let names = ["bertscore_precision", "bertscore_recall", "bertscore_f1"];
    Ok(names
        .into_iter()
        .zip(per_prompt)
        .filter_map(|(name, values)| pooled(name, Direction::HigherIsBetter, Some(evaluator_id), Pooling::Mean, values))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_is_python_s() {
        assert_eq!(python_strip(" \t\n\u{1c}\u{1f}\u{a0}\u{3000}a b\u{2029}\u{85} "), "a b");
        // Not whitespace to Python: kept.
        assert_eq!(python_strip("\u{200b}a\u{feff}"), "\u{200b}a\u{feff}");
    }

    #[test]
    fn precision_is_the_mean_of_each_kept_row_s_best() {
        let sim = [0.1f32, 0.9, -0.5, -0.2, 0.3, 0.4];
        assert!((mean_of_best(&sim, 3, &[true, true]) - 0.65).abs() < 1e-7);
        assert!((mean_of_best(&sim, 3, &[false, true]) - 0.4).abs() < 1e-7);
    }
}
