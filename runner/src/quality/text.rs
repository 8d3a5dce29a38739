//! Text statistics of a continuation, tokenizer-independent so that both models are measured alike.
//!
//! Words: the text lowercased and split at every character that is not alphanumeric (so punctuation and
//! whitespace separate words and are not words). Every statistic is over these words:
//! - `unigram_entropy`: Shannon entropy, in bits, of the continuation's word frequencies (repetitive text is low);
//! - `distinct_n`: distinct n-grams / n-grams of the continuation;
//! - `token_f1`: F1 of the bag-of-words overlap with the reference (SQuAD style);
//! - `rouge_l_f1`: F1 of the longest common subsequence with the reference (ROUGE-L, beta = 1).
//!
//! A continuation with no words (empty once decoded: all end-of-sequence or padding tokens; or only punctuation,
//! `"________"`) scores the worst value of each, 0, as degenerate as text gets: left out, it would vanish from its
//! cell's mean exactly where a sampler fails, and the two arms' means would be over different prompts. So
//! `unigram_entropy` and `distinct_n` are 0 without a word (`distinct_n` is 0 too with fewer than `n` words: no
//! n-gram), and the overlaps are 0 against a reference with words, as rouge_score and SQuAD's evaluation script
//! score an empty prediction (SQuAD's 1 when both are empty).

use std::collections::{BTreeMap, HashMap, HashSet};

/// The words of `text` (see the module doc).
pub fn words(text: &str) -> Vec<String> {
    text.to_lowercase().split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_string).collect()
}

/// Entropy in bits of the word frequencies; 0 for no words (see the module doc).
pub fn unigram_entropy(words: &[String]) -> f64 {
    if words.is_empty() {
        return 0.0;
    }
    // Ordered: the sum below adds in one order in every process (a hash map's order changes between processes, and
    // with it the last bits of the sum).
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for w in words {
        *counts.entry(w).or_default() += 1;
    }
    let n = words.len() as f64;
    counts.values().map(|&c| c as f64 / n).map(|p| -p * p.log2()).sum::<f64>().max(0.0)
}

/// Distinct n-grams over n-grams; 0 when there is no n-gram (fewer than `n` words, or `n` = 0: see the module
/// doc).
pub fn distinct_n(words: &[String], n: usize) -> f64 {
    if n == 0 || words.len() < n {
        return 0.0;
    }
    let grams: Vec<&[String]> = words.windows(n).collect();
    let distinct: HashSet<&[String]> = grams.iter().copied().collect();
    distinct.len() as f64 / grams.len() as f64
}

fn f1(overlap: f64, candidate: usize, reference: usize) -> f64 {
    if overlap == 0.0 {
        return 0.0;
    }
    let p = overlap / candidate as f64;
    let r = overlap / reference as f64;
    2.0 * p * r / (p + r)
}

/// Bag-of-words F1 against the reference; with no words on a side, 1 if the other has none either, else 0
/// (SQuAD's rule).
pub fn token_f1(candidate: &[String], reference: &[String]) -> f64 {
    if candidate.is_empty() || reference.is_empty() {
        return f64::from(u8::from(candidate.is_empty() && reference.is_empty()));
    }
    let mut counts: HashMap<&str, isize> = HashMap::new();
    for w in reference {
        *counts.entry(w).or_default() += 1;
    }
    let mut overlap = 0usize;
    for w in candidate {
        if let Some(c) = counts.get_mut(w.as_str())
            && *c > 0
        {
            *c -= 1;
            overlap += 1;
        }
    }
    f1(overlap as f64, candidate.len(), reference.len())
}

/// Length of the longest common subsequence (O(n m) time, O(m) memory).
fn lcs(a: &[String], b: &[String]) -> usize {
    let mut prev = vec![0usize; b.len() + 1];
    let mut cur = vec![0usize; b.len() + 1];
    for x in a {
        for (j, y) in b.iter().enumerate() {
            cur[j + 1] = if x == y { prev[j] + 1 } else { cur[j].max(prev[j + 1]) };
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// ROUGE-L F1 against the reference; 0 when either side has no words (rouge_score's rule).
pub fn rouge_l_f1(candidate: &[String], reference: &[String]) -> f64 {
    if candidate.is_empty() || reference.is_empty() {
        return 0.0;
    }
    f1(lcs(candidate, reference) as f64, candidate.len(), reference.len())
}
