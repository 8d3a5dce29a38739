//! Prompt sets: the embedded demo set and prompt files, selected deterministically and hashed.
//!
//! Wikitext-103 (the study's prompts) arrives with the quality work (issue #4); until then a config that asks
//! for it is refused with a message naming the alternatives.

use std::path::Path;

use anyhow::{Context, Result};
use schema::grid::{PromptConfig, PromptSource};
use sha2::{Digest, Sha256};

use crate::InputError;

/// Eight original encyclopedia-style paragraphs written for this project (not from any data set).
const DEMO_PROMPTS: &str = include_str!("../assets/demo_prompts.txt");

/// A prompt set ready to tokenize.
#[derive(Debug, Clone)]
pub struct PromptSet {
    /// The prompt texts, in order.
    pub texts: Vec<String>,
    /// `embedded:demo` or `file:PATH`.
    pub source: String,
    /// How the prompts were picked.
    pub selection: String,
}

impl PromptSet {
    /// Loads the prompt set a config names. `config_dir` resolves relative paths.
    pub fn load(cfg: &PromptConfig, config_dir: &Path) -> Result<PromptSet> {
        let (all, source) = match cfg.source {
            PromptSource::Embedded => (split_paragraphs(DEMO_PROMPTS), "embedded:demo".to_string()),
            PromptSource::File => {
                let rel = cfg.path.as_deref().unwrap_or_default();
                let path = config_dir.join(rel);
                let text = std::fs::read_to_string(&path).with_context(|| {
                    InputError(format!("prompts.path: cannot read the prompt file {}", path.display()))
                })?;
                (parse_prompt_file(&text, &path)?, format!("file:{rel}"))
            }
            PromptSource::Wikitext => {
                return Err(InputError(
                    "prompts.source = \"wikitext\": this build cannot read the Wikitext-103 parquet files yet \
                     (tracked for the quality work); fix: use source = \"embedded\", or source = \"file\" with \
                     path = a JSONL or text file of prompts"
                        .into(),
                )
                .into());
            }
        };
        let n = cfg.count as usize;
        if all.len() < n {
            return Err(InputError(format!(
                "prompts.count = {n} but {source} has only {} prompts; fix: lower prompts.count (or --max-prompts)",
                all.len()
            ))
            .into());
        }
        Ok(PromptSet { texts: all[..n].to_vec(), source, selection: format!("first {n} in file order") })
    }

    /// SHA-256 over the texts, each followed by a 0 byte.
    pub fn sha256(&self) -> String {
        let mut h = Sha256::new();
        for t in &self.texts {
            h.update(t.as_bytes());
            h.update([0u8]);
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The prompt indices of repetition `rep` of a batch of `b`: consecutive prompts, wrapping around.
    pub fn batch_indices(&self, rep: usize, b: usize) -> Vec<u32> {
        let n = self.texts.len();
        (0..b).map(|i| ((rep * b + i) % n) as u32).collect()
    }
}

fn split_paragraphs(text: &str) -> Vec<String> {
    text.split("\n\n").map(|p| p.split_whitespace().collect::<Vec<_>>().join(" ")).filter(|p| !p.is_empty()).collect()
}

/// JSONL (one object per line with a `prompt` string) when the first non-empty line is an object; otherwise
/// plain text with prompts separated by blank lines.
fn parse_prompt_file(text: &str, path: &Path) -> Result<Vec<String>> {
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    if !first.trim_start().starts_with('{') {
        return Ok(split_paragraphs(text));
    }
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| {
            InputError(format!("{}: line {}: not JSON ({e}); fix: one JSON object per line", path.display(), i + 1))
        })?;
        let prompt = v.get("prompt").and_then(|p| p.as_str()).ok_or_else(|| {
            InputError(format!(
                "{}: line {}: no string field \"prompt\"; fix: write {{\"prompt\": \"...\"}}",
                path.display(),
                i + 1
            ))
        })?;
        out.push(prompt.to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_set_has_eight_long_prompts() {
        let p = split_paragraphs(DEMO_PROMPTS);
        assert_eq!(p.len(), 8);
        assert!(p.iter().all(|t| t.len() > 300), "each demo prompt must be long enough for N = 80 on a tiny BPE");
    }

    #[test]
    fn batches_wrap_around_the_set() {
        let set = PromptSet {
            texts: vec!["a".into(), "b".into(), "c".into()],
            source: String::new(),
            selection: String::new(),
        };
        assert_eq!(set.batch_indices(0, 2), vec![0, 1]);
        assert_eq!(set.batch_indices(1, 2), vec![2, 0]);
        assert_eq!(set.batch_indices(0, 4), vec![0, 1, 2, 0]);
    }
}
