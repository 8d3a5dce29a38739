//! The largest values a config (and a bundle's embedded config) may hold. Beyond them no model or machine the
//! study runs on can hold the work, and the runner would abort on an allocation or run for days inside one
//! repetition; validation refuses them, naming the field and the limit.

/// Longest sequence length N: the longest context of the model families the runner loads (Llama-3.1's 128K).
pub const SEQ_LEN: u32 = 131_072;
/// Largest batch size B.
pub const BATCH_SIZE: u32 = 4096;
/// Most diffusion steps per generated token: past one step per token a step commits nothing, so K above
/// this multiple of N_out only repeats forward passes.
pub const STEPS_PER_OUTPUT_TOKEN: u32 = 16;
/// Most warm-up runs per cell.
pub const WARMUP: u32 = 1000;
/// Most measured runs per cell.
pub const REPETITIONS: u32 = 10_000;
/// Most prompts in a set.
pub const PROMPTS: u32 = 1_000_000;
/// Most bootstrap resamples.
pub const BOOTSTRAP_RESAMPLES: u32 = 1_000_000;
/// Most prompt draws of a whole bootstrap (resamples x prompts): each draw pools every cell group's
/// per-prompt values, so this bounds the time `report` and the writers spend on intervals (minutes at most).
pub const BOOTSTRAP_DRAWS: u64 = 100_000_000;
/// Highest sampling temperature (logits divided by more than this are noise).
pub const TEMPERATURE: f64 = 100.0;
/// Highest classifier-free guidance scale.
pub const CFG_SCALE: f64 = 100.0;
/// Longest run name (it prefixes file names: NAME-STAMP.json must fit a file system's 255 bytes).
pub const RUN_NAME_CHARS: usize = 100;
/// Longest model id or revision.
pub const ID_CHARS: usize = 200;
/// Synthetic checkpoints: most layers.
pub const SYNTH_LAYERS: u32 = 1024;
/// Synthetic checkpoints: largest hidden size.
pub const SYNTH_HIDDEN: u32 = 65_536;
/// Synthetic checkpoints: most safetensors shards.
pub const SYNTH_SHARDS: u32 = 1024;
/// Most shards of a grid (`--shard I/N`).
pub const SHARDS: u32 = 100_000;
