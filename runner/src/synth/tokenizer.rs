//! A small byte-level BPE tokenizer for synthetic checkpoints.
//!
//! Trained with the tokenizers crate's BPE trainer on an embedded English text, with all 256 byte symbols in the
//! initial alphabet, so any UTF-8 text round-trips. The model's special tokens are added after training: their
//! ids follow the BPE vocabulary (so they differ from the real checkpoints' ids, which sit near 126k/128k).

use std::collections::HashSet;

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::TrainerWrapper;
use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{AddedToken, Tokenizer};

const CORPUS: &str = include_str!("corpus.txt");

/// Trains the tokenizer with at most `bpe_vocab` BPE tokens, then adds `specials` in order.
pub fn build_tokenizer(bpe_vocab: usize, specials: &[&str]) -> Result<Tokenizer, String> {
    let mut tok = Tokenizer::new(BPE::default());
    tok.with_pre_tokenizer(Some(ByteLevel::default().add_prefix_space(false)));
    tok.with_decoder(Some(ByteLevelDecoder::default()));
    tok.with_post_processor(Some(ByteLevel::default().trim_offsets(false)));
    let alphabet: HashSet<char> = ByteLevel::alphabet().into_iter().collect();
    let mut trainer: TrainerWrapper = BpeTrainerBuilder::new()
        .vocab_size(bpe_vocab)
        .min_frequency(2)
        .show_progress(false)
        .initial_alphabet(alphabet)
        .build()
        .into();
    let lines: Vec<&str> = CORPUS.lines().filter(|l| !l.trim().is_empty()).collect();
    tok.train(&mut trainer, lines.iter()).map_err(|e| e.to_string())?;
    let added: Vec<AddedToken> = specials.iter().map(|s| AddedToken::from(*s, true)).collect();
    tok.add_special_tokens(&added);
    Ok(tok)
}
