//! From a config file and command-line overrides to a validated plan: the cells to measure.
//! Nothing heavy happens before this succeeds, so bad input fails in milliseconds with exit status 2.

use std::path::{Path, PathBuf};

use anyhow::Result;
use schema::grid::{AttentionKernel, DeviceSpec, GridConfig, ModelKind, Precision, SamplerVariant};

use crate::InputError;

/// The embedded default config, `config/demo.toml`.
pub const DEMO_TOML: &str = include_str!("../../config/demo.toml");

/// Which grid to run and overrides of its fields (the seeds' `--steps`, `--batch_size`, `--max_prompts`, ...).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConfigArgs {
    /// Grid config (TOML). Default: the embedded demo (tiny synthetic models, CPU; `config/demo.toml`).
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Override the diffusion steps K (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "K", allow_negative_numbers = true, value_parser = parse_number)]
    pub steps: Vec<u32>,
    /// Override the LLaDA sampler series (comma-separated): reference, prefix, dual (K-driven), threshold,
    /// prefix+threshold, dual+threshold (threshold-driven).
    #[arg(long, value_delimiter = ',', value_name = "SERIES", value_parser = parse_variant)]
    pub samplers: Vec<SamplerVariant>,
    /// Override the confidence thresholds of the threshold series (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "T", allow_negative_numbers = true, value_parser = parse_fraction)]
    pub thresholds: Vec<f64>,
    /// Override the batch sizes B (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "B", allow_negative_numbers = true, value_parser = parse_number)]
    pub batch_size: Vec<u32>,
    /// Override the sequence lengths N, in tokens: prompt + output (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "N", allow_negative_numbers = true, value_parser = parse_number)]
    pub seq_len: Vec<u32>,
    /// Use at most this many prompts (1 or more).
    #[arg(long, value_name = "P", value_parser = parse_positive, allow_negative_numbers = true)]
    pub max_prompts: Option<u32>,
    /// Read the prompts from this file (relative to the current folder) instead of the config's source: JSONL,
    /// one {"prompt": ..., "reference": ...} per line, or plain text with prompts separated by blank lines. Sets
    /// prompts.source = "file"; the config's prompt count stays (the first that many of the file; --max-prompts
    /// for fewer).
    #[arg(long, value_name = "FILE")]
    pub prompt_file: Option<PathBuf>,
    /// Override the device: cpu, cuda or cuda:N.
    #[arg(long, value_name = "DEVICE")]
    pub device: Option<String>,
    /// Override the precision (any case: bf16, BF16).
    #[arg(long, value_enum, ignore_case = true)]
    pub dtype: Option<DtypeArg>,
    /// Override the number of warm-up runs per cell.
    #[arg(long, value_name = "W", allow_negative_numbers = true, value_parser = parse_number)]
    pub warmup: Option<u32>,
    /// Override the number of measured runs per cell.
    #[arg(long, value_name = "R", allow_negative_numbers = true, value_parser = parse_positive)]
    pub repetitions: Option<u32>,
    /// Refine S_parity by bisection between the grid's K values (needs a `[quality]` table; sets
    /// quality.parity_search).
    #[arg(long)]
    pub parity_search: bool,
    /// Also score BERTScore against each prompt's true continuation, with this BERT or RoBERTa encoder (default
    /// FacebookAI/roberta-large at the bert_score package's layer 17; needs a `[quality]` table; sets
    /// quality.bertscore). The encoder is read from the model cache like the models (`dllm-bench fetch`).
    #[arg(long, value_name = "ENCODER", num_args = 0..=1, default_missing_value = DEFAULT_BERTSCORE_ENCODER)]
    pub bertscore: Option<String>,
    /// Override the attention: ops (candle's matmul, softmax, matmul), fused (the CPU's kernel) or cudnn (cuDNN's
    /// fused attention on CUDA, bf16; a build with the `cudnn` feature). Sets run.attention.
    #[arg(long, value_name = "KIND", value_parser = AttentionKernel::parse)]
    pub attention: Option<AttentionKernel>,
    /// Replay Llama's decode steps as CUDA graphs (sets run.cuda_graphs; CUDA only; off by default until a GPU run
    /// has shown the eager decode's tokens and a speedup).
    #[arg(long)]
    pub cuda_graphs: bool,
    /// Run RMSNorm, RoPE and SwiGLU as one CUDA kernel each (sets run.cuda_fused_ops; CUDA only; off by default
    /// until a GPU run has shown the same tokens and a speedup).
    #[arg(long)]
    pub cuda_fused_ops: bool,
}

/// The encoder `--bertscore` uses when given no id: the `bert_score` package's default for English.
pub const DEFAULT_BERTSCORE_ENCODER: &str = "FacebookAI/roberta-large";

/// A sampler series by its config name.
/// One value of a comma-separated list of counts (`--steps 4,8` or `--steps "4, 8"`); its range is the config's to
/// check, with the field's own message.
fn parse_number(s: &str) -> Result<u32, String> {
    let t = s.trim();
    t.parse().map_err(|_| match t.parse::<i128>() {
        _ if t.is_empty() => "an empty value in the list (a comma too many?); give whole numbers such as 8,16".into(),
        Ok(v) if v < 0 => format!("{t} is negative; give a whole number (such as 8)"),
        Ok(_) => format!("{t} is too large (at most {})", u32::MAX),
        Err(_) => format!("\"{t}\" is not a whole number (such as 8)"),
    })
}

/// [`parse_number`], 1 or more.
fn parse_positive(s: &str) -> Result<u32, String> {
    match parse_number(s)? {
        0 => Err("0 is too few; give 1 or more".into()),
        n => Ok(n),
    }
}

/// One value of `--thresholds` (`0.9,0.5` or `"0.9, 0.5"`).
fn parse_fraction(s: &str) -> Result<f64, String> {
    let t = s.trim();
    t.parse().map_err(|_| format!("{t:?} is not a number (such as 0.9)"))
}

fn parse_variant(s: &str) -> Result<SamplerVariant, String> {
    let s = s.trim();
    SamplerVariant::ALL.into_iter().find(|v| v.name() == s).ok_or_else(|| {
        let names: Vec<&str> = SamplerVariant::ALL.iter().map(|v| v.name()).collect();
        format!("unknown sampler series {s:?}; use one of {}", names.join(", "))
    })
}

/// Precision on the command line.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum DtypeArg {
    /// 32-bit float.
    F32,
    /// bfloat16.
    Bf16,
    /// IEEE half.
    F16,
}

impl From<DtypeArg> for Precision {
    fn from(d: DtypeArg) -> Precision {
        match d {
            DtypeArg::F32 => Precision::F32,
            DtypeArg::Bf16 => Precision::Bf16,
            DtypeArg::F16 => Precision::F16,
        }
    }
}

/// A config with overrides applied and validated.
#[derive(Debug, Clone)]
pub struct ResolvedConfig {
    /// The config.
    pub config: GridConfig,
    /// Where it came from, with the overrides, for provenance.
    pub source: String,
    /// Folder that relative paths in the config are resolved against.
    pub dir: PathBuf,
    /// `run.device`, parsed once when the config was resolved (never a silent fallback).
    device: DeviceSpec,
}

impl ResolvedConfig {
    /// The prompt set the config names ([`crate::prompts::PromptSet::load`]), what it refuses (a missing or short
    /// prompt file, too few prompts) said with the config's name first.
    pub fn load_prompts(&self, hub_cache: &Path) -> Result<crate::prompts::PromptSet> {
        crate::prompts::PromptSet::load(&self.config.prompts, &self.dir, hub_cache).map_err(|e| {
            match e.downcast::<InputError>() {
                Ok(InputError(m)) => InputError(format!("{}: {m}", self.source)).into(),
                Err(e) => e,
            }
        })
    }

    /// The device the config asks for.
    pub fn device(&self) -> DeviceSpec {
        self.device
    }
}

/// Reads the config (or the embedded demo), applies the overrides, validates.
pub fn resolve(args: &ConfigArgs) -> Result<ResolvedConfig> {
    resolve_with_base(args, None, false)
}

/// Like [`resolve`], but without `--config` the base is `base` (text, label, folder) instead of the demo: a
/// resumed run's journal holds its resolved config. `resuming`: the run folder has a journal, so the config is one
/// a run already started with: [`GridConfig::check_used`]'s rules (fields that would drive nothing: a new run's
/// rules, some newer than the journal) are not applied to it; the rules every reader relies on still are.
pub fn resolve_with_base(
    args: &ConfigArgs,
    base: Option<(String, String, PathBuf)>,
    resuming: bool,
) -> Result<ResolvedConfig> {
    let (text, label, dir) = match (&args.config, base) {
        (None, Some(base)) => base,
        (Some(path), _) => {
            let text = crate::input::read_text_file(
                path,
                "config file",
                "pass a TOML grid config such as config/experiments.toml",
            )?;
            // Absolute: the journal keeps it, and a resume from another working folder reads the same files.
            let dir = std::path::absolute(path).unwrap_or_else(|_| path.clone());
            let dir = dir.parent().map(Path::to_path_buf).unwrap_or_default();
            (text, path.display().to_string(), dir)
        }
        (None, None) => (DEMO_TOML.to_string(), "embedded:config/demo.toml".to_string(), PathBuf::from(".")),
    };
    // The file's rules are checked below, once the overrides are applied (an override may mend them).
    let mut config = GridConfig::parse_toml(&text, &label)?;
    let mut overrides = Vec::new();
    let mut note = |flag: &str, value: String| overrides.push(format!("--{flag} {value}"));
    let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    if !args.steps.is_empty() {
        note("steps", list(&args.steps));
        config.grid.steps = args.steps.clone();
    }
    if !args.samplers.is_empty() {
        note("samplers", args.samplers.iter().map(|v| v.name()).collect::<Vec<_>>().join(","));
        config.grid.samplers = args.samplers.clone();
        // Threshold series alone run no K (the config's steps would be refused as driving nothing).
        if args.samplers.iter().all(|v| v.thresholded()) && args.steps.is_empty() {
            config.grid.steps.clear();
        }
        if !args.samplers.iter().any(|v| v.thresholded()) && args.thresholds.is_empty() {
            config.grid.thresholds.clear();
        }
    }
    if !args.thresholds.is_empty() {
        note("thresholds", args.thresholds.iter().map(f64::to_string).collect::<Vec<_>>().join(","));
        config.grid.thresholds = args.thresholds.clone();
    }
    if !args.batch_size.is_empty() {
        note("batch-size", list(&args.batch_size));
        config.grid.batch_sizes = args.batch_size.clone();
    }
    if !args.seq_len.is_empty() {
        note("seq-len", list(&args.seq_len));
        config.grid.seq_lengths = args.seq_len.clone();
    }
    if let Some(file) = &args.prompt_file {
        // Relative to where the command runs, as a user types it (a config's own `path` is relative to its file).
        let path = std::path::absolute(file).unwrap_or_else(|_| file.clone());
        note("prompt-file", file.display().to_string());
        config.prompts.count = config.prompts.prompt_count();
        config.prompts.preset = None;
        config.prompts.source = schema::grid::PromptSource::File;
        config.prompts.path = Some(path.display().to_string());
        // Wikitext's settings say nothing of a file.
        (config.prompts.dataset, config.prompts.revision, config.prompts.min_chars) = (None, None, None);
    }
    if let Some(p) = args.max_prompts {
        note("max-prompts", p.to_string());
        if p < config.prompts.prompt_count() {
            // A smaller set than the preset's: the count now says the size (the preset no longer applies).
            config.prompts.count = p;
            config.prompts.preset = None;
        }
    }
    if let Some(d) = &args.device {
        note("device", d.clone());
        config.run.device = d.clone();
    }
    if let Some(d) = args.dtype {
        let p = Precision::from(d);
        note("dtype", p.to_string());
        config.run.dtype = p;
    }
    if let Some(w) = args.warmup {
        note("warmup", w.to_string());
        config.run.warmup = w;
    }
    if let Some(r) = args.repetitions {
        note("repetitions", r.to_string());
        config.run.repetitions = r;
    }
    if let Some(a) = args.attention {
        note("attention", a.name().to_string());
        config.run.attention = a;
    }
    if args.cuda_graphs {
        overrides.push("--cuda-graphs".into());
        config.run.cuda_graphs = true;
    }
    if args.cuda_fused_ops {
        overrides.push("--cuda-fused-ops".into());
        config.run.cuda_fused_ops = true;
    }
    if args.parity_search {
        overrides.push("--parity-search".into());
        match config.quality.as_mut() {
            Some(q) => q.parity_search = true,
            None => {
                return Err(InputError(format!(
                    "--parity-search: {label} has no [quality] table, so there is no S_parity to refine; fix: add \
                     [quality] with an evaluator (see config/demo.toml), or drop --parity-search"
                ))
                .into());
            }
        }
    }
    if let Some(id) = &args.bertscore {
        overrides.push(format!("--bertscore {id}"));
        match config.quality.as_mut() {
            Some(q) => {
                let same = q.bertscore.as_ref().filter(|b| b.id == *id).cloned();
                q.bertscore = Some(same.unwrap_or(schema::grid::BertScoreSpec {
                    id: id.clone(),
                    revision: None,
                    layer: None,
                    synthetic: None,
                }));
            }
            None => {
                return Err(InputError(format!(
                    "--bertscore: {label} has no [quality] table, so no continuations are generated to score; fix: \
                     add [quality] (see config/demo.toml), or drop --bertscore"
                ))
                .into());
            }
        }
    }
    if let Some(q) = config.quality.as_mut() {
        // Stated, so that the bundle says in which precision its perplexities were computed.
        q.dtype = Some(q.evaluator_dtype());
    }
    let source = if overrides.is_empty() { label } else { format!("{label} {}", overrides.join(" ")) };
    // Errors now name the overrides too, since they may be the cause.
    config.validate(&source)?;
    if !resuming {
        config.check_used(&source)?;
    }
    // A preset is recorded as the count it stands for, so that every reader sees the number.
    config.prompts.count = config.prompts.prompt_count();
    // So is BERTScore's default layer (validated: there is one).
    if let Some(b) = config.quality.as_mut().and_then(|q| q.bertscore.as_mut()) {
        b.layer = b.layer();
    }
    check_synthetic(&config, &source)?;
    // The embedded set is known here (a file's or Wikitext's size only when it is read): `plan` refuses what `run`
    // would.
    let embedded = crate::prompts::embedded_count();
    if config.prompts.source == schema::grid::PromptSource::Embedded && config.prompts.prompt_count() > embedded {
        return Err(InputError(format!(
            "{source}: field `prompts.count`: {} prompts, but the embedded set has {embedded}\n  fix: prompts.count \
             (or --max-prompts) at most {embedded}, or prompts from a file or Wikitext",
            config.prompts.prompt_count()
        ))
        .into());
    }
    let device = DeviceSpec::parse(&config.run.device).ok_or_else(|| {
        InputError(format!(
            "{source}: field `run.device`: {:?} is not a device; fix: use \"cpu\", \"cuda\" or \"cuda:N\"",
            config.run.device
        ))
    })?;
    Ok(ResolvedConfig { config, source, dir, device })
}

/// Every synthetic checkpoint of a config can be built (e.g. `hidden` divides into the preset's heads).
fn check_synthetic(config: &GridConfig, source: &str) -> Result<()> {
    let evaluators = config.quality.iter().flat_map(|q| q.evaluators.iter().enumerate());
    let specs = config.models.iter().enumerate().map(|(i, m)| (format!("models[{i}].synthetic"), m.kind, &m.synthetic));
    let specs = specs
        .chain(evaluators.map(|(i, e)| (format!("quality.evaluators[{i}].synthetic"), ModelKind::Llama, &e.synthetic)));
    for (field, kind, synthetic) in specs {
        let Some(s) = synthetic else { continue };
        if let Err(e) =
            crate::synth::SynthSpec::from_config(s, config.run.dtype, config.prompts.chat_template).check(kind)
        {
            // The shards' and the layout's messages carry their fix; a shape the model cannot have gets this one.
            let fix = match e {
                crate::synth::SynthError::Spec(_) => "",
                _ => {
                    "\n  fix: remove hidden, layers and shards to use the preset's shapes, or choose a hidden size that \
                     the preset's head count divides into an even head size"
                }
            };
            return Err(InputError(format!(
                "{source}: field `{field}`: the runner cannot build this checkpoint: {e}{fix}"
            ))
            .into());
        }
    }
    Ok(())
}

impl ResolvedConfig {
    /// The resolved config as TOML: what the hash covers and a journal stores.
    pub fn toml(&self) -> String {
        self.config.to_toml()
    }

    /// SHA-256 (hex) of [`ResolvedConfig::toml`]: equal for every shard and resume of the same grid.
    pub fn sha256(&self) -> String {
        config_sha256(&self.config)
    }
}

/// SHA-256 (hex) of a config's resolved TOML.
pub fn config_sha256(config: &GridConfig) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(config.to_toml().as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// The lines that differ between two resolved configs, for messages: `- old` / `+ new` under their table.
pub fn config_diff(old: &str, new: &str) -> String {
    // Prefix each line with its [table] so that `steps = ...` says where it is, and each [[array]] entry with its
    // number, so that a field changed in one entry is not matched by the same line of another.
    fn keyed(text: &str) -> Vec<String> {
        let mut table = String::new();
        let mut entries: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        let mut out = Vec::new();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if line.starts_with("[[") {
                let n = entries.entry(line.to_string()).or_default();
                *n += 1;
                table = format!("{line} #{n}");
            } else if line.starts_with('[') {
                // A sub-table of an array entry ([models.synthetic]) belongs to the latest entry.
                let parent = line.trim_matches(['[', ']']).split('.').next().unwrap_or_default();
                let n = entries.get(&format!("[[{parent}]]")).copied();
                table = n.map_or_else(|| line.to_string(), |n| format!("{line} #{n}"));
            } else {
                out.push(format!("{table} {line}"));
            }
        }
        out
    }
    let (a, b) = (keyed(old), keyed(new));
    let mut lines: Vec<String> = a.iter().filter(|l| !b.contains(l)).map(|l| format!("  - {l}")).collect();
    lines.extend(b.iter().filter(|l| !a.contains(l)).map(|l| format!("  + {l}")));
    if lines.is_empty() { "  (the same fields in a different order)".to_string() } else { lines.join("\n") }
}

#[cfg(test)]
mod diff_tests {
    use super::config_diff;

    #[test]
    fn a_field_changed_in_one_array_entry_shows_both_lines() {
        let old = "[run]\nname = \"a\"\n\n[[models]]\nkind = \"llama\"\nid = \"x/l\"\n\n\
                   [[models]]\nkind = \"llada\"\nid = \"x/d\"\n";
        let new = old.replacen("kind = \"llama\"", "kind = \"llada\"", 1);
        let d = config_diff(old, &new);
        assert!(
            d.contains("- [[models]] #1 kind = \"llama\"") && d.contains("+ [[models]] #1 kind = \"llada\""),
            "{d}"
        );
        assert_eq!(d.lines().count(), 2, "{d}");
        assert_eq!(config_diff(old, old), "  (the same fields in a different order)");
    }
}

/// The shapes every model of a `plan --json` is counted with, instead of each model's own: the HF reference's
/// `--shapes` and `--layers`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ShapeOverride {
    /// A preset for every model (its `[models.synthetic]` hidden and layers apply only when it is the model's own).
    pub preset: Option<schema::grid::SynthPreset>,
    /// The number of layers of every model.
    pub layers: Option<u32>,
}

/// A model's shape as a plan counts it: its synthetic preset with the config's overrides (a model without a
/// `[models.synthetic]` table: the real preset, the shapes of the checkpoints the study uses), and the largest
/// position.
pub fn planned_shape(
    kind: ModelKind,
    synthetic: Option<&schema::grid::SyntheticWeights>,
    over: ShapeOverride,
    dtype: Precision,
) -> (schema::grid::SynthPreset, schema::ModelShape, u32) {
    use crate::synth::SynthSpec;
    use schema::grid::SynthPreset;
    let own = synthetic.map_or(SynthPreset::Real, |s| s.preset);
    let preset = over.preset.unwrap_or(own);
    let mut spec = match synthetic {
        Some(s) if preset == own => SynthSpec::from_config(s, dtype, false),
        Some(s) => SynthSpec::new(preset, s.seed),
        None => SynthSpec::new(preset, 0),
    };
    if let Some(l) = over.layers {
        spec.layers = Some(l as usize);
    }
    let (shape, max_positions) = resolved_shape(&spec.resolve(kind));
    (preset, shape, max_positions)
}

/// The shape and the largest position of a resolved synthetic spec.
fn resolved_shape(r: &crate::synth::Resolved) -> (schema::ModelShape, u32) {
    let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    let shape = schema::ModelShape {
        layers: n(r.layers),
        hidden: n(r.hidden),
        heads: n(r.heads),
        kv_heads: n(r.kv_heads),
        intermediate: n(r.intermediate),
        vocab: n(r.vocab),
    };
    (shape, n(r.max_positions))
}

/// The work of a cell as `metrics::roofline` counts it: the whole generation where the plan knows the forwards
/// (AR; a K-driven LLaDA sampler, K / blocks steps per block), and one full forward of a LLaDA cell without a
/// block cache (logits for the block, and for every position) for a threshold series, whose forwards are
/// measured.
pub fn cell_roofline(shape: &schema::ModelShape, key: &schema::CellKey, dtype: Precision) -> serde_json::Value {
    use metrics::roofline::{self as rl, Forward};
    use schema::key::Sampler;
    let bytes = rl::precision_bytes(dtype);
    let (b, prompt, n_out) = (u64::from(key.batch_size), u64::from(key.prompt_tokens), u64::from(key.output_tokens));
    let work = |w: rl::Work| {
        serde_json::json!({
            "forwards": w.forwards,
            "weights_read_bytes": rl::countable(w.weights_read_bytes),
            "flop_count": rl::countable(w.flops),
            "kv_cache_bytes": w.kv_cache_bytes.and_then(rl::countable),
        })
    };
    if key.sampler == Sampler::ArGreedy {
        return serde_json::json!({ "work": work(rl::autoregressive(shape, b, prompt, n_out, bytes)) });
    }
    let block = u64::from(key.block_length.unwrap_or(key.output_tokens)).max(1);
    let blocks = (n_out / block).max(1);
    let total = key.steps.map(|k| {
        let per_block = vec![u64::from(k) / blocks; blocks as usize];
        work(rl::diffusion_sampler(shape, b, prompt, block, &per_block, key.cache, bytes))
    });
    let len = prompt + n_out;
    let forward = |logits: u64| {
        let f = Forward { batch: b, tokens: len, context: len, logits };
        serde_json::json!({
            "weights_read_bytes": rl::countable(rl::forward_weight_bytes(shape, f, bytes)),
            "flop_count": rl::countable(rl::forward_flops(shape, f)),
        })
    };
    let mut out = serde_json::json!({ "work": total });
    if key.cache.is_none() {
        out["forward"] = forward(block);
        out["forward_all_logits"] = forward(len);
    }
    out
}

/// `dllm-bench plan --json`: the resolved config, its cells (keys as a bundle writes them) with their roofline
/// counts, each model's shape, and every synthetic preset's shapes: what `jobs/hf_reference.py` and
/// `runner/bench/torch_reference.py` read instead of resolving a config themselves.
pub fn plan_json(resolved: &ResolvedConfig, over: ShapeOverride) -> serde_json::Value {
    use schema::grid::SynthPreset;
    let cfg = &resolved.config;
    let dtype = cfg.run.dtype;
    let mut shapes = std::collections::HashMap::new();
    let models: Vec<serde_json::Value> = cfg
        .models
        .iter()
        .map(|m| {
            let (preset, shape, max_positions) = planned_shape(m.kind, m.synthetic.as_ref(), over, dtype);
            shapes.insert(m.id.clone(), shape.clone());
            serde_json::json!({
                "id": m.id,
                "kind": m.kind,
                "preset": preset,
                "shape": shape,
                "max_positions": max_positions,
                "parameters": metrics::roofline::parameters(&shape),
            })
        })
        .collect();
    let cells: Vec<serde_json::Value> = cfg
        .cells()
        .iter()
        .map(|key| {
            let roofline = shapes.get(&key.model).map(|s| cell_roofline(s, key, dtype));
            serde_json::json!({ "key": key, "label": key.to_string(), "roofline": roofline })
        })
        .collect();
    let mut presets = serde_json::Map::new();
    for preset in [SynthPreset::Tiny, SynthPreset::Small, SynthPreset::Real] {
        let mut kinds = serde_json::Map::new();
        for kind in [ModelKind::Llama, ModelKind::Llada, ModelKind::Dream] {
            let (shape, max_positions) = resolved_shape(&crate::synth::SynthSpec::new(preset, 0).resolve(kind));
            let name = serde_json::to_value(kind).ok().and_then(|v| v.as_str().map(str::to_string));
            kinds.insert(
                name.unwrap_or_default(),
                serde_json::json!({ "shape": shape, "max_positions": max_positions }),
            );
        }
        let name = serde_json::to_value(preset).ok().and_then(|v| v.as_str().map(str::to_string));
        presets.insert(name.unwrap_or_default(), serde_json::Value::Object(kinds));
    }
    serde_json::json!({
        "config_source": resolved.source,
        "config_sha256": resolved.sha256(),
        "config": cfg,
        "dtype_bytes": metrics::roofline::precision_bytes(dtype),
        "prompt_count": cfg.prompts.prompt_count(),
        "models": models,
        "cells": cells,
        "presets": presets,
    })
}
