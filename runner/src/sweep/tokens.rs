//! Prompts as token ids, tokenized once per model, and where a cell's prompt ends in its text (the true
//! continuation that text metrics compare with).
//!
//! A cell's prompt row is `prompt_tokens` long: BOS and the first `prompt_tokens - 1` tokens of the prompt text,
//! or, with a chat template (`prompts.chat_template`), the template's tokens around the first `prompt_tokens -
//! frame` tokens of the text ([`ChatFrame::wrap`]). Either way N counts every token the model is given, and the
//! text's cut (`Generation::prompt_bytes`, the start of the true continuation) is where its share ends.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use anyhow::Result;
use schema::bundle::CellKey;
use schema::grid::{GridConfig, ModelSpec};

use crate::InputError;
use crate::model::{ChatFrame, LoadedModel};
use crate::prompts::PromptSet;

/// A prompt text's token ids and their byte ranges in the text.
pub(super) type Encoded = (Vec<u32>, Vec<(usize, usize)>);

/// Each prompt text tokenized once per model, and the model's chat template frame when prompts are wrapped.
#[derive(Default)]
pub(super) struct TokenCache {
    encoded: HashMap<u32, Encoded>,
    chat: Option<ChatFrame>,
}

impl TokenCache {
    /// A cache of one model's prompts, wrapped in `chat` when given.
    pub(super) fn new(chat: Option<ChatFrame>) -> Self {
        Self { encoded: HashMap::new(), chat }
    }

    /// The ids and byte offsets of a whole prompt text.
    pub(super) fn encoded(&mut self, model: &LoadedModel, prompts: &PromptSet, index: u32) -> Result<&Encoded> {
        encode_cached(&mut self.encoded, &model.tokenizer, prompts, index)
    }

    /// How many tokens of the prompt text a row of `prompt_tokens` holds: all but BOS, or all but the chat
    /// template's (at least one: a template that leaves no room for the text is an error of the cell).
    fn text_tokens(&self, index: u32, prompt_tokens: u32) -> Result<usize> {
        let Some(frame) = &self.chat else { return Ok((prompt_tokens as usize).saturating_sub(1)) };
        match (prompt_tokens as usize).checked_sub(frame.len()) {
            Some(n) if n > 0 => Ok(n),
            _ => anyhow::bail!(
                "prompt {index}: the chat template takes {} of the cell's {prompt_tokens} prompt tokens and leaves \
                 none for the prompt text; fix: longer sequence lengths (or fewer output tokens)",
                frame.len()
            ),
        }
    }

    /// The cell's prompt row of `prompt_tokens` ids: BOS followed by the first `prompt_tokens - 1` tokens of the
    /// prompt, or the chat template around the text's share. A prompt too short to fill the cell's prompt length
    /// is an error of the cell, never a silently shorter sequence: N must be real.
    pub(super) fn prompt(
        &mut self,
        model: &LoadedModel,
        prompts: &PromptSet,
        index: u32,
        prompt_tokens: u32,
    ) -> Result<Vec<u32>> {
        let take = self.text_tokens(index, prompt_tokens)?;
        let (ids, _) = encode_cached(&mut self.encoded, &model.tokenizer, prompts, index)?;
        if ids.len() < take {
            let after = if self.chat.is_some() { "in the chat template" } else { "after BOS" };
            anyhow::bail!(
                "prompt {index} has {} tokens but the cell needs {take} {after} (prompt_tokens {prompt_tokens}); \
                 fix: use longer prompts, or shorter sequence lengths",
                ids.len()
            );
        }
        let text = &ids[..take];
        Ok(match &self.chat {
            Some(frame) => frame.wrap(text),
            None => std::iter::once(model.special.bos).chain(text.iter().copied()).collect(),
        })
    }

    /// Where a cell's prompt ends in the prompt text (bytes; after the text's share of the row), and the true
    /// continuation: the text after the cut, followed by the prompt's reference when the set has one, cut to the
    /// first `output_tokens` tokens.
    pub(super) fn cut(
        &mut self,
        model: &LoadedModel,
        prompts: &PromptSet,
        index: u32,
        prompt_tokens: u32,
        output_tokens: u32,
    ) -> Result<(u32, Option<String>)> {
        let text = &prompts.texts[index as usize];
        let take = self.text_tokens(index, prompt_tokens)?;
        let (_, offsets) = self.encoded(model, prompts, index)?;
        let mut cut = match take {
            0 => 0,
            _ => offsets.get(take - 1).map_or(text.len(), |o| o.1),
        };
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        let mut rest = text[cut..].to_string();
        if let Some(Some(r)) = prompts.references.get(index as usize) {
            if !rest.is_empty() && !rest.ends_with(char::is_whitespace) && !r.starts_with(char::is_whitespace) {
                rest.push(' ');
            }
            rest.push_str(r);
        }
        // Only the first `output_tokens` tokens are kept, and a Wikitext document runs to its article's end (tens
        // of kilobytes): tokenize a prefix that holds them with room to spare, the whole rest only when the prefix
        // does not (pre-tokenization splits locally, so tokens ending well before the prefix's end are the rest's).
        let encode = |t: &str| model.tokenizer.encode(t, false).map_err(|e| anyhow::anyhow!("tokenizer: {e}"));
        let mut prefix = ((output_tokens as usize + 8) * 32).min(rest.len());
        while !rest.is_char_boundary(prefix) {
            prefix += 1;
        }
        let mut enc = encode(&rest[..prefix])?;
        let last = (output_tokens as usize).checked_sub(1).and_then(|i| enc.get_offsets().get(i).map(|o| o.1));
        if prefix < rest.len() && last.is_none_or(|end| end + 256 > prefix) {
            enc = encode(&rest)?;
        }
        let n = enc.get_offsets().len().min(output_tokens as usize);
        let reference = match n {
            0 => None,
            _ => {
                let mut end = enc.get_offsets()[n - 1].1.min(rest.len());
                while !rest.is_char_boundary(end) {
                    end += 1;
                }
                Some(rest[..end].trim().to_string()).filter(|r| !r.is_empty())
            }
        };
        Ok((cut as u32, reference))
    }
}

/// Every prompt that a cell of `model` still to run reads is long enough for the cell's prompt length: the
/// batches of its warm-ups and measured runs, and with quality the whole set at the grid's largest B (see
/// [`super::scoring::add_generations`]). Checked with the tokenizer (and chat template frame) before the weights
/// load, so that a short prompt file is refused at once, naming the prompts, the lengths and the fix, instead of
/// failing every such cell after each model loads. [`TokenCache::prompt`] checks each row again.
pub(super) fn check_prompt_lengths(
    model: &ModelSpec,
    tokenizer: &tokenizers::Tokenizer,
    chat: Option<ChatFrame>,
    prompts: &PromptSet,
    todo: &[CellKey],
    cfg: &GridConfig,
) -> Result<()> {
    let n = prompts.texts.len();
    let runs = cfg.run.warmup.max(cfg.run.repetitions) as usize;
    let max_b = cfg.grid.batch_sizes.iter().copied().max().unwrap_or(1);
    // Per prompt length: the cells' N and N_out (one pair: prompt_tokens = N - N_out), and the prompts read.
    let mut reads: BTreeMap<u32, ((u32, u32), BTreeSet<u32>)> = BTreeMap::new();
    for k in todo.iter().filter(|k| k.model == model.id) {
        let entry = reads.entry(k.prompt_tokens).or_insert_with(|| ((k.seq_len, k.output_tokens), BTreeSet::new()));
        let b = k.batch_size as usize;
        if (cfg.quality.is_some() && k.batch_size == max_b) || runs * b >= n {
            entry.1.extend(0..n as u32);
        } else {
            entry.1.extend((0..runs).flat_map(|i| prompts.batch_indices(i, b)));
        }
    }
    let mut cache = TokenCache::new(chat);
    let mut short = Vec::new();
    for (&prompt_tokens, ((seq_len, output_tokens), indices)) in &reads {
        let Some(&first) = indices.first() else { continue };
        let take =
            cache.text_tokens(first, prompt_tokens).map_err(|e| InputError(format!("model {}: {e}", model.id)))?;
        let mut lacking = Vec::new();
        for &i in indices {
            let have = encode_cached(&mut cache.encoded, tokenizer, prompts, i)?.0.len();
            if have < take {
                lacking.push((i, have));
            }
        }
        if lacking.is_empty() {
            continue;
        }
        let listed: Vec<String> = lacking.iter().take(4).map(|(i, have)| format!("prompt {i} has {have}")).collect();
        let more = match lacking.len() {
            l if l > 4 => format!(" and {} more", l - 4),
            _ => String::new(),
        };
        let after = if cache.chat.is_some() { "inside the chat template" } else { "after BOS" };
        short.push((
            seq_len,
            format!(
                "N = {seq_len} (N_out {output_tokens}) needs {take} tokens of each prompt {after}, and {} of the {} \
                 prompts its cells read are shorter ({}{more})",
                lacking.len(),
                indices.len(),
                listed.join(", ")
            ),
        ));
    }
    if short.is_empty() {
        return Ok(());
    }
    let lengths: Vec<String> = short.iter().map(|(n, _)| n.to_string()).collect();
    let longer = match prompts.source.split(':').next() {
        Some("file") => "longer prompts in the prompt file (prompts.path)",
        Some("wikitext") => "a larger prompts.min_chars, so that the documents picked are longer",
        _ => "longer prompts (prompts.source = \"file\" with prompts.path)",
    };
    Err(InputError(format!(
        "model {}: the prompts ({}) are too short for some cells (refused before any cell is measured): {}; fix: {longer}, or \
         leave N = {} out of grid.seq_lengths (or --seq-len)",
        model.id,
        prompts.source,
        short.into_iter().map(|(_, m)| m).collect::<Vec<_>>().join("; "),
        lengths.join(", ")
    ))
    .into())
}

/// The ids and byte offsets of a whole prompt text, from `cache` or tokenized into it.
fn encode_cached<'a>(
    cache: &'a mut HashMap<u32, Encoded>,
    tokenizer: &tokenizers::Tokenizer,
    prompts: &PromptSet,
    index: u32,
) -> Result<&'a Encoded> {
    Ok(match cache.entry(index) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => {
            let text = &prompts.texts[index as usize];
            let enc = tokenizer.encode(text.as_str(), false).map_err(|e| anyhow::anyhow!("tokenizer: {e}"))?;
            e.insert((enc.get_ids().to_vec(), enc.get_offsets().to_vec()))
        }
    })
}
