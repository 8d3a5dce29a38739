//! Quality of the generated continuations: text statistics ([`text`]) and generative perplexity under an
//! evaluator model ([`continuation_nll`]), per prompt and pooled per cell.
//!
//! Metrics (names as stored in bundles; all per prompt, pooled by the mean unless said):
//! - `perplexity` (lower is better; evaluator named): `exp` of the mean negative log-likelihood per token of the
//!   continuation given its prompt, both retokenized with the evaluator's tokenizer: `BOS + prompt + continuation`,
//!   scored on the continuation's tokens; pooled over all tokens of all prompts ([`Pooling::TokenPerplexity`]).
//! - `unigram_entropy` (bits; higher is more diverse), `distinct_1`, `distinct_2`: of the continuation's words;
//!   low values flag degenerate, repetitive text whose perplexity is deceptively low.
//! - `token_f1`, `rouge_l_f1` (higher is better): word overlap with the true continuation of the prompt.

pub mod bertscore;
pub mod text;

use anyhow::{Context, Result};
use candle_core::{D, DType, Tensor};
use schema::bundle::{Direction, Generation, Pooling, PromptValue, QualityValue};

use crate::model::{LoadedModel, LogitsSpan, Positions};
use crate::prompts::PromptSet;

/// The text-statistic metrics of a set of generations (no model needed); metrics with no value for any prompt
/// are left out.
pub fn text_quality(generations: &[Generation]) -> Vec<QualityValue> {
    type Metric = fn(&[String], Option<&[String]>) -> Option<f64>;
    let metrics: [(&str, Direction, Metric); 5] = [
        ("unigram_entropy", Direction::HigherIsBetter, |w, _| Some(text::unigram_entropy(w))),
        ("distinct_1", Direction::HigherIsBetter, |w, _| Some(text::distinct_n(w, 1))),
        ("distinct_2", Direction::HigherIsBetter, |w, _| Some(text::distinct_n(w, 2))),
        // The overlaps need the prompt's true continuation: none without one.
        ("token_f1", Direction::HigherIsBetter, |w, r| Some(text::token_f1(w, r?))),
        ("rouge_l_f1", Direction::HigherIsBetter, |w, r| Some(text::rouge_l_f1(w, r?))),
    ];
    let words: Vec<(u32, Vec<String>, Option<Vec<String>>)> =
        generations.iter().map(|g| (g.prompt, text::words(&g.text), g.reference.as_deref().map(text::words))).collect();
    metrics
        .iter()
        .filter_map(|(name, direction, f)| {
            let per_prompt: Vec<PromptValue> = words
                .iter()
                .filter_map(|(p, w, r)| Some(PromptValue { prompt: *p, value: f(w, r.as_deref())?, tokens: None }))
                .collect();
            pooled(name, *direction, None, Pooling::Mean, per_prompt)
        })
        .collect()
}

/// A quality value from per-prompt values; `None` when there are none.
pub(crate) fn pooled(
    metric: &str,
    direction: Direction,
    evaluator: Option<&str>,
    pooling: Pooling,
    per_prompt: Vec<PromptValue>,
) -> Option<QualityValue> {
    let mut q = QualityValue {
        metric: metric.to_string(),
        direction,
        value: 0.0,
        evaluator: evaluator.map(str::to_string),
        pooling: Some(pooling),
        per_prompt,
    };
    q.value = metrics::parity::pool(&q, |_| 1.0)?;
    Some(q)
}

/// Summed negative log-likelihood (nats) of `continuation`'s tokens given `prompt`, and their number, under the
/// evaluator: `BOS + tokens(prompt) + tokens(continuation)` in one causal pass. `None` when the continuation has
/// no tokens.
pub fn continuation_nll(evaluator: &LoadedModel, prompt: &str, continuation: &str) -> Result<Option<(f64, u64)>> {
    let encode = |t: &str| -> Result<Vec<u32>> {
        Ok(evaluator
            .tokenizer
            .encode(t, false)
            .map_err(|e| anyhow::anyhow!("evaluator tokenizer: {e}"))?
            .get_ids()
            .to_vec())
    };
    let mut ids = vec![evaluator.special.bos];
    ids.extend(encode(prompt)?);
    let start = ids.len();
    let cont = encode(continuation)?;
    if cont.is_empty() {
        return Ok(None);
    }
    ids.extend(&cont);
    let max = evaluator.config.max_position_embeddings;
    if ids.len() > max {
        anyhow::bail!(
            "prompt + continuation are {} evaluator tokens, more than its {max} positions; fix: shorter sequence \
             lengths, or an evaluator with a longer context",
            ids.len()
        );
    }
    let t = ids.len();
    let input = Tensor::from_vec(ids, (1, t), &evaluator.device)?;
    let rope = evaluator.transformer.rope(&Positions::Range { start: 0, len: t })?;
    let bias = evaluator.transformer.attention_bias(None, 1, 0, t, t)?;
    // Logits at positions start-1 .. t-2 predict the continuation's tokens at start .. t-1.
    let span = LogitsSpan::Range { start: start - 1, len: cont.len() };
    let logits = evaluator.transformer.forward(&input, &rope, bias.as_ref(), None, span)?;
    let logp = candle_nn::ops::log_softmax(&logits.squeeze(0)?.to_dtype(DType::F32)?, D::Minus1)?;
    let target = Tensor::from_vec(cont, (t - start, 1), &evaluator.device)?;
    let picked = logp.gather(&target, 1)?.sum_all()?.to_scalar::<f32>()?;
    let nll = -f64::from(picked);
    if !nll.is_finite() {
        anyhow::bail!("the evaluator's log-likelihood is not finite (NaN or inf logits)");
    }
    Ok(Some((nll, (t - start) as u64)))
}

/// The `perplexity` value of a cell's generations under `evaluator` (its id recorded); `None` when no
/// continuation has a token.
pub fn perplexity(
    evaluator: &LoadedModel,
    evaluator_id: &str,
    prompts: &PromptSet,
    generations: &[Generation],
) -> Result<Option<QualityValue>> {
    let mut per_prompt = Vec::new();
    for g in generations {
        let text = prompts.texts.get(g.prompt as usize).with_context(|| format!("no prompt {}", g.prompt))?;
        // The prompt the model saw: its first `prompt_bytes` bytes. A cut past the text's end or inside a UTF-8
        // character would hand the evaluator the whole document (the true continuation included): an error.
        let prompt = text.get(..g.prompt_bytes as usize).with_context(|| {
            format!(
                "prompt {}: its recorded cut at byte {} is not a character boundary of its {}-byte text (the \
                 prompt set changed since the generations were made?)",
                g.prompt,
                g.prompt_bytes,
                text.len()
            )
        })?;
        if let Some((nll, n)) = continuation_nll(evaluator, prompt, &g.text)
            .with_context(|| format!("scoring the continuation of prompt {}", g.prompt))?
        {
            let mean = nll / n as f64;
            // exp overflows f64 past a mean of about 709.8 nats a token: a value no reader could store (a bundle
            // holds finite numbers only), so the cell's perplexity is an error that says why, not infinity.
            let value = mean.exp();
            if !value.is_finite() {
                anyhow::bail!(
                    "the continuation of prompt {} has a mean negative log-likelihood of {mean:.1} nats per token \
                     under {evaluator_id}: its perplexity exp({mean:.1}) is beyond f64's range (the evaluator gives \
                     these tokens almost no probability: a damaged evaluator checkpoint, or one whose vocabulary is \
                     not the text's?)",
                    g.prompt
                );
            }
            per_prompt.push(PromptValue { prompt: g.prompt, value, tokens: Some(n) });
        }
    }
    Ok(pooled("perplexity", Direction::LowerIsBetter, Some(evaluator_id), Pooling::TokenPerplexity, per_prompt))
}
