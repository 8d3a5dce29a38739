//! Prompt sets: the study's Wikitext-103 validation documents, the embedded demo set and prompt files, selected
//! deterministically and hashed.
//!
//! A cell's prompt is BOS and the first P - 1 tokens of a prompt text (P = the cell's prompt tokens), so the texts
//! are long: a Wikitext prompt is a whole document (a paragraph to the end of its article, see [`wikitext`]).
//! **The reference of a cell** (the true continuation its generations are compared with) is the rest of the
//! prompt text after the cell's cut, followed by `references[i]` when present; a JSONL prompt file may give that
//! explicit continuation per prompt, the other sources never do.

pub mod wikitext;

use std::path::Path;

use anyhow::Result;
use schema::grid::{PromptConfig, PromptSource};
use sha2::{Digest, Sha256};

use crate::InputError;

/// Eight original encyclopedia-style paragraphs written for this project (not from any data set).
const DEMO_PROMPTS: &str = include_str!("../assets/demo_prompts.txt");

/// The prompts of the embedded set (`source = "embedded"`).
pub fn embedded_count() -> u32 {
    split_paragraphs(DEMO_PROMPTS).len() as u32
}

/// A prompt set ready to tokenize.
#[derive(Debug, Clone, Default)]
pub struct PromptSet {
    /// The prompt texts, in order.
    pub texts: Vec<String>,
    /// Parallel to `texts`: an explicit continuation of each prompt text (from a JSONL file's `reference`).
    pub references: Vec<Option<String>>,
    /// `embedded:demo`, `file:PATH` or `wikitext:DATASET:CONFIG:SPLIT@COMMIT`.
    pub source: String,
    /// How the prompts were picked.
    pub selection: String,
}

impl PromptSet {
    /// A set without references.
    pub fn new(texts: Vec<String>, source: String, selection: String) -> PromptSet {
        let references = vec![None; texts.len()];
        PromptSet { texts, references, source, selection }
    }

    /// Loads the prompt set a config names. `config_dir` resolves relative paths; `hub_cache` is the hub cache
    /// (the models' one: `--model-cache-dir`) that holds the Wikitext dataset.
    pub fn load(cfg: &PromptConfig, config_dir: &Path, hub_cache: &Path) -> Result<PromptSet> {
        let n = cfg.prompt_count() as usize;
        let (all, source) = match cfg.source {
            PromptSource::Embedded => {
                let all = split_paragraphs(DEMO_PROMPTS).into_iter().map(|t| (t, None)).collect();
                (all, "embedded:demo".to_string())
            }
            PromptSource::File => {
                let rel = cfg.path.as_deref().unwrap_or_default();
                let path = config_dir.join(rel);
                let text = crate::input::read_text_file(
                    &path,
                    "prompts.path: the prompt file",
                    "point prompts.path (relative to the config's folder) or --prompt-file (relative to the current \
                     folder) at a UTF-8 text file: JSONL with a \
                     \"prompt\" field per line, or plain text with prompts separated by blank lines",
                )?;
                (parse_prompt_file(&text, &path)?, format!("file:{rel}"))
            }
            PromptSource::Wikitext => {
                let (texts, source, selection) =
                    wikitext::load(hub_cache, cfg.dataset(), cfg.revision(), n, cfg.min_chars() as usize, cfg.seed)
                        .map_err(|e| InputError(format!("prompts: {e}")))?;
                return Ok(PromptSet::new(texts, source, selection));
            }
        };
        if all.len() < n {
            return Err(InputError(format!(
                "field `prompts.count`: {n} prompts, but {source} has only {}\n  fix: lower prompts.count (or \
                 --max-prompts), or add prompts to the file",
                all.len()
            ))
            .into());
        }
        let (texts, references) = all.into_iter().take(n).unzip();
        Ok(PromptSet { texts, references, source, selection: format!("first {n} in file order") })
    }

    /// SHA-256 over the texts, each followed by a 0 byte; then, only when some prompt has a reference, a 0xFF byte
    /// (never in UTF-8, so it cannot be part of a text) and per prompt `0x00` (no reference) or `0x01`, the
    /// reference's byte length (u64, little-endian) and its bytes. A set without references hashes as it did
    /// before references existed.
    pub fn sha256(&self) -> String {
        let mut h = Sha256::new();
        for t in &self.texts {
            h.update(t.as_bytes());
            h.update([0u8]);
        }
        if self.references.iter().any(Option::is_some) {
            h.update([0xffu8]);
            for r in &self.references {
                match r {
                    None => h.update([0u8]),
                    Some(r) => {
                        h.update([1u8]);
                        h.update((r.len() as u64).to_le_bytes());
                        h.update(r.as_bytes());
                    }
                }
            }
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// A note when some batch size is larger than the set: its batches hold prompts more than once (see
    /// [`Self::batch_indices`]). Every row is still computed, so the timing holds; it is said because a reader of
    /// such a grid may expect B distinct prompts. `None` when every B fits.
    pub fn repeated_rows_note(&self, batch_sizes: &[u32]) -> Option<String> {
        let n = self.texts.len();
        let over: Vec<String> = batch_sizes.iter().filter(|&&b| b as usize > n).map(u32::to_string).collect();
        let largest = batch_sizes.iter().copied().max()?;
        (!over.is_empty()).then(|| {
            format!(
                "note: B = {} {} the {n} prompts, so each such batch holds some prompts more than once (every row \
                 is still computed; for B distinct prompts, prompts.count of at least {largest}, from a source that holds \
                 that many)",
                over.join(", "),
                if over.len() == 1 { "exceeds" } else { "exceed" }
            )
        })
    }

    /// The prompt indices of repetition `rep` of a batch of `b`: consecutive prompts, wrapping around.
    pub fn batch_indices(&self, rep: usize, b: usize) -> Vec<u32> {
        let n = self.texts.len();
        (0..b).map(|i| ((rep * b + i) % n) as u32).collect()
    }
}

/// Prompts separated by blank lines (a line of spaces or tabs is blank too), each one's whitespace runs made single
/// spaces. Windows line ends are line ends.
fn split_paragraphs(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut words: Vec<&str> = Vec::new();
    for line in text.lines().chain(std::iter::once("")) {
        if line.trim().is_empty() {
            if !words.is_empty() {
                out.push(words.join(" "));
                words.clear();
            }
        } else {
            words.extend(line.split_whitespace());
        }
    }
    out
}

/// JSONL (one object per line with a `prompt` string and an optional `reference` string; other fields are
/// ignored, but a string field that looks like a misspelling of one the line lacks is refused) when the first
/// non-empty line is shaped as a JSON object (`{` to `}`), and always for a `.jsonl` file; otherwise plain text (a
/// first paragraph that only starts with `{` included) with prompts separated by
/// blank lines (no references). A byte-order mark at the start is not part of the text.
fn parse_prompt_file(text: &str, path: &Path) -> Result<Vec<(String, Option<String>)>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim().is_empty() {
        return Err(InputError(format!(
            "{} is empty: no prompt in it; fix: write one {{\"prompt\": \"...\"}} object per line (JSONL), or plain-text \
             prompts separated by blank lines",
            path.display()
        ))
        .into());
    }
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let jsonl = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("jsonl"));
    // A line that is an object, or is shaped as one (`{` to `}`: a JSONL line with a mistake, said below).
    let object = |line: &str| {
        let line = line.trim();
        line.ends_with('}') || serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(line).is_ok()
    };
    if !first.trim_start().starts_with('{') || (!jsonl && !object(first)) {
        if jsonl {
            let line = text.lines().position(|l| !l.trim().is_empty()).map_or(1, |i| i + 1);
            return Err(InputError(format!(
                "{}: line {line}: not a JSON object, in a .jsonl file; fix: one {{\"prompt\": \"...\"}} object per \
                 line, or give a plain-text prompt file (prompts separated by blank lines) another extension",
                path.display()
            ))
            .into());
        }
        return Ok(split_paragraphs(text).into_iter().map(|t| (t, None)).collect());
    }
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| {
            InputError(format!("{}: line {}: not JSON ({e}); fix: one JSON object per line", path.display(), i + 1))
        })?;
        // A string field one or two letters from a field the line lacks is that field misspelt.
        let misspelt = |o: &serde_json::Map<String, serde_json::Value>| {
            o.iter().filter(|(_, v)| v.is_string()).find_map(|(k, _)| {
                let mut lacked = ["prompt", "reference"].into_iter().filter(|f| !o.contains_key(*f));
                lacked.find(|f| near_miss(k, f)).map(|f| (k.clone(), f))
            })
        };
        if let Some((key, near)) = v.as_object().and_then(misspelt) {
            return Err(InputError(format!(
                "{}: line {}: field {key:?} is not read (\"prompt\" and \"reference\" are); fix: name it {near:?}",
                path.display(),
                i + 1
            ))
            .into());
        }
        let prompt = v.get("prompt").and_then(|p| p.as_str()).ok_or_else(|| {
            InputError(format!(
                "{}: line {}: no string field \"prompt\"; fix: write {{\"prompt\": \"...\"}}",
                path.display(),
                i + 1
            ))
        })?;
        let reference = match v.get("reference") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(r)) => Some(r.clone()),
            Some(other) => {
                return Err(InputError(format!(
                    "{}: line {}: \"reference\" is {other}, not a string; fix: write {{\"prompt\": \"...\", \
                     \"reference\": \"the true continuation\"}} or leave the field out",
                    path.display(),
                    i + 1
                ))
                .into());
            }
        };
        if prompt.trim().is_empty() {
            return Err(InputError(format!(
                "{}: line {}: \"prompt\" is empty: a prompt of no tokens measures nothing; fix: give it text, or \
                 delete the line",
                path.display(),
                i + 1
            ))
            .into());
        }
        out.push((prompt.to_string(), reference));
    }
    Ok(out)
}

/// Whether `key` looks like a misspelling of `field`: the same letters but for case, or at most two edits apart.
fn near_miss(key: &str, field: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (key.to_lowercase().chars().collect(), field.chars().collect());
    if a.len().abs_diff(b.len()) > 2 {
        return false;
    }
    // Levenshtein distance, one row at a time.
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()] <= 2
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
    fn near_misses_of_the_read_fields_are_typos_other_fields_are_not() {
        for k in ["refrence", "Reference", "promt", "prompts", "PROMPT", "referenc"] {
            assert!(near_miss(k, "prompt") || near_miss(k, "reference"), "{k}");
        }
        for k in ["id", "source", "title", "text", "answer", "meta"] {
            assert!(!near_miss(k, "prompt") && !near_miss(k, "reference"), "{k}");
        }
    }

    #[test]
    fn windows_line_ends_separate_plain_text_prompts_as_unix_ones_do() {
        let unix = "First prompt,\nits second line.\n\nSecond prompt.\n\n\nThird.\n";
        let windows = unix.replace('\n', "\r\n");
        let path = Path::new("prompts.txt");
        let read = |t: &str| parse_prompt_file(t, path).expect("parses");
        assert_eq!(read(unix).len(), 3);
        assert_eq!(read(&windows), read(unix));
        assert_eq!(read(&format!("\u{feff}{windows}"))[0].0, "First prompt, its second line.");
    }

    #[test]
    fn a_line_of_spaces_separates_prompts_and_a_brace_starts_a_plain_text_prompt() {
        let path = Path::new("prompts.txt");
        let read = |t: &str| parse_prompt_file(t, path).expect("parses");
        let texts = |t: &str| read(t).into_iter().map(|(p, _)| p).collect::<Vec<_>>();
        assert_eq!(texts("First prompt.\n  \t\nSecond prompt.\n"), ["First prompt.", "Second prompt."]);
        assert_eq!(texts("{braces} open this one.\n\nThen another.\n"), ["{braces} open this one.", "Then another."]);
        // A line shaped as an object is JSONL, and a mistake in it is said, not read as text.
        let err = parse_prompt_file("{\"prompt\": \"a\",}\n", path).expect_err("a bad JSONL line");
        assert!(format!("{err:#}").contains("line 1"), "{err:#}");
        assert_eq!(read("{\"prompt\": \"a\"}\n")[0].0, "a");
    }

    #[test]
    fn batches_wrap_around_the_set() {
        let set = PromptSet::new(vec!["a".into(), "b".into(), "c".into()], String::new(), String::new());
        assert_eq!(set.batch_indices(0, 2), vec![0, 1]);
        assert_eq!(set.batch_indices(1, 2), vec![2, 0]);
        assert_eq!(set.batch_indices(0, 4), vec![0, 1, 2, 0]);
        // B = 4 repeats a prompt of the three, and is said; B <= 3 is not.
        assert_eq!(set.repeated_rows_note(&[1, 3]), None);
        let note = set.repeated_rows_note(&[1, 4, 8]).expect("B = 4 and 8 exceed 3 prompts");
        assert!(note.starts_with("note: B = 4, 8 exceed the 3 prompts") && note.contains("at least 8"), "{note}");
    }
}
