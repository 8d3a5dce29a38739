//! Prompts as token ids, tokenized once per model, and where a cell's prompt ends in its text (the true
//! continuation that text metrics compare with).
//!
//! A cell's prompt row is `prompt_tokens` long: BOS and the first `prompt_tokens - 1` tokens of the prompt text,
//! or, with a chat template (`prompts.chat_template`), the template's tokens around the first `prompt_tokens -
//! frame` tokens of the text ([`ChatFrame::wrap`]). Either way N counts every token the model is given, and the
//! text's cut (`Generation::prompt_bytes`, the start of the true continuation) is where its share ends.

use std::collections::HashMap;

use anyhow::Result;

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
        encode_cached(&mut self.encoded, model, prompts, index)
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
        let (ids, _) = encode_cached(&mut self.encoded, model, prompts, index)?;
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

/// The ids and byte offsets of a whole prompt text, from `cache` or tokenized into it.
fn encode_cached<'a>(
    cache: &'a mut HashMap<u32, Encoded>,
    model: &LoadedModel,
    prompts: &PromptSet,
    index: u32,
) -> Result<&'a Encoded> {
    Ok(match cache.entry(index) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => {
            let text = &prompts.texts[index as usize];
            let enc = model.tokenizer.encode(text.as_str(), false).map_err(|e| anyhow::anyhow!("tokenizer: {e}"))?;
            e.insert((enc.get_ids().to_vec(), enc.get_offsets().to_vec()))
        }
    })
}
