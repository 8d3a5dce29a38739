//! The result bundle, format 1.x: what one run measured, where, and with what.
//!
//! Format 1.1 added the optional provenance of cluster runs: the config's hash, the shard a bundle holds, the
//! cells a run planned (fewer cells: a partial bundle of an interrupted run), and one [`Execution`] per process
//! that measured cells (first run, each resume, each shard of a merged bundle), which each cell points to.
//!
//! Field names carry their units (`_ms`, `_bytes`). A metric that was not measured is absent (`None`,
//! omitted from the JSON), never 0. Raw per-repetition measurements are kept; summaries are derived in
//! the `metrics` crate, never stored.

use serde::{Deserialize, Serialize};

use crate::grid::GridConfig;
pub use crate::key::{CellKey, Direction, ModelKind, Precision, Sampler};
use crate::version::SchemaVersion;

/// One result bundle: a run of a grid on one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Bundle {
    /// Format version, first in the file.
    pub schema_version: SchemaVersion,
    /// Where, when and with what the bundle was made.
    pub provenance: Provenance,
    /// The models measured.
    pub models: Vec<ModelInfo>,
    /// Since 1.9: the encoders that scored BERTScore (`quality.bertscore`), as loaded. Not read by wasm32 builds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub encoders: Vec<EncoderInfo>,
    /// The prompts the cells used.
    pub prompt_set: PromptSetInfo,
    /// One entry per grid cell.
    pub cells: Vec<Cell>,
    /// Since 1.2: S_parity and the speedup at parity as the writer computed them with
    /// `metrics::parity::parity` from the cells (readers may recompute them; the explorer does). Builds for
    /// wasm32 (the explorer) skip them when reading: the explorer recomputes them from the cells, and their
    /// deserializers would cost its download about 6 KB gzipped. (It skips the executions' `slurm` likewise, and
    /// the texts of the cells' `generations`: it shows none of them, and `dllm-bench validate` and `report` still
    /// read them. It reads `quality_errors`, and which cells have continuations, for its partial test; and
    /// `committed_per_step`: an older runner's token count is corrected from it.)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub parity: Vec<crate::parity::ParityRecord>,
}

/// Where, when and with what a bundle was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Provenance {
    /// Name of the tool (`dllm-bench`, or another writer of this format).
    pub tool: String,
    /// Version of the tool.
    pub tool_version: String,
    /// Git commit of the tool's source, when known (`-dirty` appended for uncommitted changes: see `git_dirty`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_commit: Option<String>,
    /// Since 1.6: what was dirty: the compiled sources (paths from the repository's root) that differed from
    /// `git_commit` when the tool was built. Empty for a clean build, or when the writer did not record them. Not
    /// read by wasm32 builds (nor `missing_cells` and the cells' `stalled_prompts`; see [`Bundle::parity`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub git_dirty: Vec<String>,
    /// Creation time, RFC 3339 UTC.
    #[schemars(extend("format" = "date-time"))]
    pub created_at: String,
    /// Host name, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The device the cells ran on.
    pub device: DeviceInfo,
    /// True when any model's weights were synthetic (random): timing is real, quality is meaningless.
    pub synthetic_weights: bool,
    /// Where the config came from: a path, or `embedded:demo.toml`; overrides listed after it.
    pub config_source: String,
    /// The fully resolved grid config (overrides applied).
    pub config: GridConfig,
    /// Attention implementation used for both models (the study's fairness rule: identical for both).
    pub attention: String,
    /// Since 1.1: SHA-256 (hex) of the resolved config as TOML, equal for every shard and resume of a grid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_sha256: Option<String>,
    /// Since 1.1: the shard of the grid this bundle holds; absent for the whole grid and for merged bundles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardInfo>,
    /// Since 1.1: the cells the run planned (its shard's share of the grid). A bundle with fewer `cells` is the
    /// partial bundle of a run that was interrupted and can be resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_cells: Option<u32>,
    /// Since 1.1: every process that measured cells of this bundle (the first run, each resume, each shard of a
    /// merged bundle); [`Cell::execution`] points into this list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub executions: Vec<Execution>,
    /// Since 1.6: cells of the grid that no input of a merge had, when `dllm-bench merge --allow-missing` wrote
    /// the bundle anyway (a partial bundle; `validate` and `report` name them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub missing_cells: Vec<CellKey>,
}

impl Provenance {
    /// The runner's name in `tool` (every other writer of the format, such as `hf-transformers-reference`, is a
    /// reference implementation).
    pub const RUNNER: &'static str = "dllm-bench";

    /// Whether the runner wrote the bundle (not a reference implementation).
    pub fn by_runner(&self) -> bool {
        self.tool == Self::RUNNER
    }
}

/// A shard of a grid: cells assigned to shard `index` of `count` (see `dllm-bench run --shard`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ShardInfo {
    /// 0-based shard index, below `count`.
    pub index: u32,
    /// Number of shards the grid was split into.
    pub count: u32,
}

impl std::fmt::Display for ShardInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// One process that measured cells: where it ran and under which SLURM job. Unknown facts are absent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Execution {
    /// When the process started measuring, RFC 3339 UTC.
    #[schemars(extend("format" = "date-time"))]
    pub started_at: String,
    /// Host name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The device, with GPU name and driver when known.
    pub device: DeviceInfo,
    /// The shard it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardInfo>,
    /// The SLURM job, when it ran under SLURM. Not read by wasm32 builds (the explorer does not show it; see
    /// [`Bundle::parity`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub slurm: Option<SlurmInfo>,
    /// Since 1.4: the device's ceilings, measured by this process before its first cell. Absent when they were
    /// not measured (older runners, or a probe that failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_peaks: Option<DevicePeaks>,
    /// Since 1.7: how this process measured energy: the counter it read around each measured run (the
    /// repetitions' `energy_j`), or why it could read none. Absent in bundles of older runners. Not read by wasm32
    /// builds (the explorer reads the repetitions' energy only; see [`Bundle::parity`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub energy: Option<EnergyMeter>,
    /// Since 1.8: the state of the host and the device when this process started measuring (the study's hardware
    /// controls, section 4.2.1: exclusive access, the GPU's clocks and power limit), so that a reader can tell a
    /// shared or throttled node. Absent in bundles of older runners. Not read by wasm32 builds (`report` says it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub conditions: Option<Box<RunConditions>>,
}

/// Since 1.8: the host's and the device's state when an [`Execution`] started measuring, before its first model
/// loaded. Each fact is absent where it could not be read (no `/proc/loadavg`, no `nvidia-smi`, a field the driver
/// does not report), never guessed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunConditions {
    /// The host's 1-minute load average (`/proc/loadavg`): near 0 on an exclusive, idle node; the run itself has
    /// not started its work yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_average_1m: Option<f64>,
    /// The logical CPUs this process may use (the scale of the load average).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logical_cpus: Option<u32>,
    /// CUDA: the GPU's performance state as `nvidia-smi` reports it (`P0` the highest; an idle GPU reports a low
    /// one such as `P8` until work arrives).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_performance_state: Option<String>,
    /// CUDA: the SM clock's maximum, MHz (`clocks.max.sm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_max_sm_clock_mhz: Option<u32>,
    /// CUDA: the clock the application clocks set for the SMs, MHz (`clocks.applications.graphics`; a lowered one
    /// slows every kernel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_application_sm_clock_mhz: Option<u32>,
    /// CUDA: the power limit in force, W (`power.limit`), and the board's default, W (`power.default_limit`): a
    /// limit below the default throttles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_power_limit_w: Option<f64>,
    /// See [`Self::gpu_power_limit_w`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_default_power_limit_w: Option<f64>,
    /// CUDA: the compute mode (`Default`: other processes may share the GPU; `Exclusive_Process`: one at a time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_compute_mode: Option<String>,
    /// CUDA: the compute processes on the GPU other than this one, and the device memory they held, bytes: time on
    /// a shared GPU is not the model's alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_other_processes: Option<u32>,
    /// See [`Self::gpu_other_processes`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_other_processes_memory_bytes: Option<u64>,
}

/// Since 1.7: the energy counter of an [`Execution`], or why there is none.
///
/// Exactly one of `source` and `unavailable` is present. With a `source`, each measured repetition of the
/// execution's cells carries `energy_j` (absent only where a reading failed, which the run logs); without one, no
/// repetition does, and `unavailable` says why: an unmeasured energy is absent, never 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EnergyMeter {
    /// The counter read: `nvml` (CUDA) or `rapl` (CPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<EnergySource>,
    /// What the counter covers, e.g. `NVIDIA H200 GPU-5c1e...: the whole board` or `RAPL package-0 + package-1:
    /// whole CPU packages, every process on them`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Why no counter was read, e.g. `no RAPL domain under /sys/class/powercap` or `cannot read
    /// .../energy_uj: permission denied`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// Joules the idle device used over `idle_window_ms`, read before the first cell (no model loaded): the
    /// baseline of the repetitions' mean power (`metrics::energy::idle_power_w`). Absent without a `source` or
    /// when that reading failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub idle_energy_j: Option<f64>,
    /// The idle window, ms (host monotonic clock between the two readings). Present with `idle_energy_j`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub idle_window_ms: Option<f64>,
}

/// Since 1.7: an energy counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EnergySource {
    /// NVML's `nvmlDeviceGetTotalEnergyConsumption` (millijoules since the driver loaded; Volta and later): the
    /// whole GPU board.
    Nvml,
    /// Linux powercap RAPL, `/sys/class/powercap/intel-rapl:N/energy_uj` (microjoules, wrapping at
    /// `max_energy_range_uj`), summed over the CPU packages: the whole packages, every process on them.
    Rapl,
}

/// The device's ceilings as the runner measures them at its start (`bench-kernels`' copy and matmul probes,
/// median of the repetitions): the roofline view's defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DevicePeaks {
    /// Device-to-device copy into an existing buffer: bytes read + written per second.
    pub copy_bytes_per_s: f64,
    /// Bytes copied by one probe.
    pub copy_bytes: u64,
    /// A square matmul in `dtype`: FLOP/s (2 n^3 per product).
    pub matmul_flops_per_s: f64,
    /// Side n of the square matmul.
    pub matmul_size: u32,
    /// The matmul's precision: the run's.
    pub dtype: crate::grid::Precision,
    /// Measured repetitions each figure is the median of.
    pub repetitions: u32,
}

/// SLURM facts of an [`Execution`], from the job's environment.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SlurmInfo {
    /// `SLURM_JOB_ID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// `SLURM_ARRAY_JOB_ID`: the array's job id (array tasks only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_job_id: Option<String>,
    /// `SLURM_ARRAY_TASK_ID` (array tasks only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_task_id: Option<String>,
    /// `SLURM_RESTART_COUNT`: how often the job was requeued before this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_count: Option<u32>,
    /// `SLURMD_NODENAME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// `SLURM_CLUSTER_NAME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
}

/// The device the cells ran on. Unknown facts are absent.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceInfo {
    /// `cpu` or `cuda`.
    pub kind: String,
    /// Ordinal of the CUDA device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordinal: Option<u32>,
    /// Marketing name, e.g. `NVIDIA H200` or the CPU model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Total device memory (or system memory for the CPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Driver version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    /// CUDA runtime version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_version: Option<String>,
    /// Compute capability, e.g. `9.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_capability: Option<String>,
    /// CPU threads used (CPU runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
}

/// A model as measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ModelInfo {
    /// Hub repository id; cells refer to it.
    pub id: String,
    /// Requested revision (branch, tag or commit).
    pub revision: String,
    /// The snapshot commit actually loaded, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Architecture family.
    pub kind: ModelKind,
    /// `autoregressive` or `diffusion`.
    pub generation: String,
    /// Number of parameters.
    pub parameters: u64,
    /// Bytes of the weights in memory at the run's precision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights_bytes: Option<u64>,
    /// Precision of the run.
    pub dtype: Precision,
    /// Tokenizer facts. Not read by wasm32 builds, nor is `shape`: the explorer does not show them.
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub tokenizer: TokenizerInfo,
    /// True when the weights are synthetic (random).
    pub synthetic: bool,
    /// Shape summary: layers, hidden size, heads, KV heads, FFN size, vocabulary.
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub shape: ModelShape,
    /// Since 1.5: the chat template this model's prompts were wrapped in (`prompts.chat_template`); absent when
    /// the prompts were used as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_template: Option<ChatTemplateInfo>,
}

/// Since 1.9: a BERT or RoBERTa encoder that scored BERTScore, as loaded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EncoderInfo {
    /// Hub repository id: the `evaluator` of its quality values.
    pub id: String,
    /// Requested revision.
    pub revision: String,
    /// The snapshot commit loaded.
    pub commit: String,
    /// `model_type` of its `config.json`: `bert` or `roberta`.
    pub architecture: String,
    /// Its number of layers.
    pub layers: u32,
    /// The layer whose output was compared (0: the embeddings).
    pub layer: u32,
    /// Hidden size.
    pub hidden: u32,
    /// Number of parameters.
    pub parameters: u64,
    /// Precision it ran in.
    pub dtype: Precision,
    /// SHA-256 (hex) of its `tokenizer.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer_sha256: Option<String>,
    /// True when the weights are synthetic (random): its scores mean nothing.
    pub synthetic: bool,
}

/// Since 1.5: the chat template a model's prompts were wrapped in.
///
/// Each prompt became one user message whose content is the cell's cut of the prompt text, followed by the
/// generation prompt. The template's tokens (BOS included) count in the cell's `prompt_tokens`: the prompt text
/// contributes `prompt_tokens - frame_tokens` of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ChatTemplateInfo {
    /// Where the template was read, e.g. `tokenizer_config.json chat_template` (or `chat_template["default"]`
    /// for the list form).
    pub source: String,
    /// SHA-256 (hex) of the template's text.
    pub sha256: String,
    /// The template rendered around the message content `{prompt}`: what every prompt became, as text.
    pub rendered: String,
    /// Tokens of each prompt that are the template's (BOS included), not the prompt text's.
    pub frame_tokens: u32,
}

/// Shape summary of a transformer.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ModelShape {
    /// Transformer blocks.
    pub layers: u32,
    /// Hidden size.
    pub hidden: u32,
    /// Attention heads.
    pub heads: u32,
    /// Key/value heads (fewer than `heads` with GQA).
    pub kv_heads: u32,
    /// FFN inner size.
    pub intermediate: u32,
    /// Vocabulary (rows of the embedding).
    pub vocab: u32,
}

/// Tokenizer facts.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TokenizerInfo {
    /// Vocabulary size of the tokenizer (may differ from the embedding rows).
    pub vocab_size: u32,
    /// BOS id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bos_id: Option<u32>,
    /// EOS id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eos_id: Option<u32>,
    /// Mask id (diffusion models).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mask_id: Option<u32>,
    /// Since 1.4: where each special id came from (`config.json`, `generation_config.json`, `tokenizer_config.json`
    /// or the layout's token in `tokenizer.json`), e.g. `bos 128000 (config.json bos_token_id); eos ...; pad ...`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub special_sources: Option<String>,
    /// SHA-256 of `tokenizer.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// The prompts the cells used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PromptSetInfo {
    /// `embedded:demo`, `wikitext:wikitext-103-v1:validation`, or `file:PATH`.
    pub source: String,
    /// How prompts were picked, e.g. `first 8` or `seeded sample of 32, seed 0`.
    pub selection: String,
    /// Number of prompts.
    pub count: u32,
    /// SHA-256 over the prompt texts (each followed by a 0 byte), hex. Absent (since 1.3) when nothing hashed
    /// them: a 0.1 draft.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// Outcome of a cell.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum CellStatus {
    /// Every repetition ran.
    Ok,
    /// The device ran out of memory.
    Oom {
        /// The error as reported.
        message: String,
    },
    /// Another failure (kernel error, NaN logits, ...).
    Error {
        /// The error as reported.
        message: String,
    },
    /// Not run.
    Skipped {
        /// Why.
        reason: String,
    },
}

/// Reads the same JSON as a derived internally tagged enum would (`{"state": "oom", "message": ...}`, the
/// same error messages), without serde's buffering of each status into an intermediate tree: a 10,000-cell
/// bundle loads faster and the explorer's wasm is smaller.
impl<'de> Deserialize<'de> for CellStatus {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "snake_case")]
        enum State {
            Ok,
            Oom,
            Error,
            Skipped,
        }
        #[derive(Deserialize)]
        #[serde(expecting = "an object with a `state` (\"ok\"; \"oom\" or \"error\" with a `message`; \"skipped\" \
                             with a `reason`), e.g. {\"state\": \"ok\"}")]
        struct Repr {
            state: State,
            #[serde(default)]
            message: Option<String>,
            #[serde(default)]
            reason: Option<String>,
        }
        let r = Repr::deserialize(d)?;
        let field = |v: Option<String>, name| v.ok_or_else(|| serde::de::Error::missing_field(name));
        Ok(match r.state {
            State::Ok => CellStatus::Ok,
            State::Oom => CellStatus::Oom { message: field(r.message, "message")? },
            State::Error => CellStatus::Error { message: field(r.message, "message")? },
            State::Skipped => CellStatus::Skipped { reason: field(r.reason, "reason")? },
        })
    }
}

/// One grid cell: its key, outcome and raw measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Cell {
    /// What the cell is.
    pub key: CellKey,
    /// How it went.
    pub status: CellStatus,
    /// Unmeasured warm-up runs done before the repetitions.
    pub warmup_runs: u32,
    /// Raw measurements, one per measured run.
    #[serde(default)]
    pub repetitions: Vec<Repetition>,
    /// Since 1.1: index into [`Provenance::executions`] of the process that measured this cell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<u32>,
    /// Since 1.1: quality of the cell's generations, one value per metric (absent when not measured).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quality: Vec<QualityValue>,
    /// Since 1.2: the continuations the cell's quality was computed from, one per prompt of the set (only the
    /// group's quality cell has them: see `metrics::parity::quality_cells`). wasm32 builds read each one without
    /// its texts (`text` and `reference` empty: the explorer shows no text, see [`Bundle::parity`]), so that they
    /// know which cells have continuations to score (`metrics::coverage::unscored_cells`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(target_arch = "wasm32", serde(deserialize_with = "textless::generations"))]
    pub generations: Vec<Generation>,
    /// Since 1.3: quality values that could not be computed (an evaluator failed, or no continuation had a token),
    /// each with its reason: a missing value is said, never silent (by `report`, `validate` and, through
    /// `metrics::coverage`, every reader's partial test).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quality_errors: Vec<QualityError>,
    /// Since 1.6: the prompts (indices into the prompt set) whose quality continuation could not be finished: the
    /// sampler stalled on them (a threshold block whose steps commit nothing). Their continuations are absent from
    /// `generations` and from the per-prompt quality values; the other prompts' are kept and scored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub stalled_prompts: Vec<u32>,
}

/// Since 1.3: a quality value of a cell that could not be computed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QualityError {
    /// The metric (`perplexity`), or `generations` when the continuations themselves could not be generated (the
    /// cell then has no quality value; its timings stand).
    pub metric: String,
    /// The evaluator that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluator: Option<String>,
    /// What went wrong.
    pub message: String,
}

/// The continuations as wasm32 builds read them: each without its texts, which the explorer never shows (the bundle's
/// largest part: reading them would slow its first chart).
#[cfg(target_arch = "wasm32")]
mod textless {
    use serde::{Deserialize, Deserializer};

    use super::Generation;

    /// [`Generation`] less `text` and `reference` (skipped unread, as any field not named here).
    #[derive(Deserialize)]
    struct Textless {
        prompt: u32,
        prompt_bytes: u32,
        #[serde(default)]
        masked_tokens: Option<u32>,
    }

    pub(super) fn generations<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Generation>, D::Error> {
        let all: Vec<Textless> = Vec::deserialize(d)?;
        Ok(all
            .into_iter()
            .map(|g| Generation {
                prompt: g.prompt,
                prompt_bytes: g.prompt_bytes,
                text: String::new(),
                reference: None,
                masked_tokens: g.masked_tokens,
            })
            .collect())
    }
}

/// Since 1.2: one generated continuation, kept so that quality can be recomputed and read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Generation {
    /// Index into the prompt set.
    pub prompt: u32,
    /// Bytes of the prompt text the model was given (the cell's prompt cut, after BOS): the prompt is the first
    /// `prompt_bytes` bytes of the prompt set's text `prompt`.
    pub prompt_bytes: u32,
    /// The continuation, decoded without special tokens.
    pub text: String,
    /// The true continuation of the prompt (the text after the cut, as many tokens as were generated), when the
    /// prompt set has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// Since 1.3: diffusion models: positions of the continuation the model filled with the mask token (they
    /// decode to nothing, so `text` and its perplexity cover fewer than N_out tokens). Absent for AR models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub masked_tokens: Option<u32>,
}

/// One quality value of a cell: `{"metric": "perplexity", "direction": "lower_is_better", "value": 10.4}`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QualityValue {
    /// Metric name (`perplexity`, `unigram_entropy`, `rouge_l_f1`, ...; see the runner's README).
    pub metric: String,
    /// Which way is better.
    pub direction: Direction,
    /// The value (finite): `per_prompt` pooled as `pooling` says.
    pub value: f64,
    /// Since 1.2: the model that scored the text (perplexity); absent for text statistics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluator: Option<String>,
    /// Since 1.2: how `value` pools the per-prompt values; absent: their mean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooling: Option<Pooling>,
    /// Since 1.2: the value of each prompt (what bootstrap intervals resample).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_prompt: Vec<PromptValue>,
}

impl QualityValue {
    /// A metric's name with its evaluator, e.g. `perplexity` or `perplexity [meta-llama/Meta-Llama-3-8B]`.
    pub fn label(&self) -> String {
        match &self.evaluator {
            Some(e) => format!("{} [{e}]", self.metric),
            None => self.metric.clone(),
        }
    }
}

/// Since 1.2: how per-prompt values pool into a cell's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Pooling {
    /// The plain mean over prompts.
    Mean,
    /// Perplexity over all tokens: `exp(sum(tokens_i * ln value_i) / sum(tokens_i))`, i.e. the exponential of
    /// the mean negative log-likelihood per token over every prompt's tokens.
    TokenPerplexity,
}

/// Since 1.2: the value of one prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PromptValue {
    /// Index into the prompt set.
    pub prompt: u32,
    /// The value (finite).
    pub value: f64,
    /// Tokens the value is over (the weight of [`Pooling::TokenPerplexity`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
}

/// One measured run of a cell: a batch of B prompts generated once.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Repetition {
    /// Indices into the prompt set of the B prompts of this run.
    pub prompt_indices: Vec<u32>,
    /// End-to-end latency: token ids on the device to the last token / last diffusion step.
    #[schemars(range(min = 0))]
    pub e2e_ms: f64,
    /// AR prompt pass that yields the first token (TTFT).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub prefill_ms: Option<f64>,
    /// Diffusion: time until the first block is fully committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub first_block_ms: Option<f64>,
    /// Diffusion: time of each step (forward + commit), in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(inner(range(min = 0)))]
    pub step_ms: Option<Vec<f64>>,
    /// Forward evaluations of the network (AR: 1 prefill + N_out - 1 decodes; diffusion: the steps run, K for a
    /// K-driven sampler, measured for a threshold sampler; twice that with classifier-free guidance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub forward_passes: Option<u32>,
    /// Since 1.5: diffusion: tokens committed over the whole batch at each step, in order. They sum to
    /// `output_tokens` (in older bundles to less, by the positions left masked at the end): a position whose
    /// predicted token is the mask id itself stays masked when chosen (the reference samplers' behaviour; a trained
    /// model practically never predicts it, a random synthetic one can).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committed_per_step: Option<Vec<u32>>,
    /// Tokens generated over the whole batch: B x N_out, less the positions a diffusion model left masked (the
    /// study's valid output tokens, which T_gen counts; `committed_per_step` sums to it). Earlier runners counted
    /// those positions too (in their bundles `committed_per_step` then sums to less): every reader reads such a
    /// repetition with that sum.
    pub output_tokens: u64,
    /// UTF-8 bytes of the decoded continuations over the whole batch.
    pub output_bytes: u64,
    /// Peak bytes allocated on the device during the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_allocated_bytes: Option<u64>,
    /// Peak bytes reserved by the device's memory pool during the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_reserved_bytes: Option<u64>,
    /// CPU runs: peak resident set size of the process (a high-water mark over the process's life).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rss_bytes: Option<u64>,
    /// Since 1.2: CUDA runs: device-wide used memory (total - free, from the driver) right after the run, every
    /// process, the CUDA context and the cuBLAS workspaces included: a cross-check of `peak_reserved_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_used_bytes: Option<u64>,
    /// Since 1.2: AR: bytes of the KV cache at the last decode step (K and V of every layer for the padded prompt
    /// and the N_out - 1 tokens fed back), analytic from the model's shape; since 1.5 also a diffusion sampler's
    /// block cache (its preallocated buffers: K and V of every layer for the whole sequence). Activations at the peak are derived:
    /// `metrics::roofline::activation_bytes` (peak allocated - weights - KV cache).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache_bytes: Option<u64>,
    /// Since 1.2: bytes of weights the run's forward passes read, analytic (see `metrics::roofline`): with
    /// `e2e_ms`, the achieved bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights_read_bytes: Option<u64>,
    /// Since 1.2: floating-point operations of the run's forward passes (a count, not a rate), analytic (see
    /// `metrics::roofline`): with `e2e_ms`, the achieved FLOP rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flop_count: Option<u64>,
    /// Since 1.7: energy the device used during the run, joules (finite, >= 0): the execution's energy counter
    /// ([`Execution::energy`]) read once the device was idle before the run and again after its last token.
    /// Derived per token, per sequence and as mean power by `metrics::energy`. Absent when no counter was
    /// readable (the execution's `energy.unavailable` says why), never 0 for "unknown".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub energy_j: Option<f64>,
    /// Since 1.7: the window `energy_j` covers, ms (host monotonic clock between the two readings: `e2e_ms` and
    /// the synchronisations around it). Present with `energy_j`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub energy_window_ms: Option<f64>,
}

impl Bundle {
    /// The model a cell refers to.
    pub fn model(&self, id: &str) -> Option<&ModelInfo> {
        self.models.iter().find(|m| m.id == id)
    }
}
