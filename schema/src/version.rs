//! Bundle format versions and the policy that governs them.
//!
//! The policy follows Cargo's lockfile:
//! - Every bundle states `schema_version` as `"MAJOR.MINOR"`, first in the file.
//! - A new MINOR version only adds optional fields. Readers of an older minor ignore what they do not know,
//!   so a `1.4` bundle still reads in a `1.0` build; the explorer says that fields may be missing.
//! - A new MAJOR version changes or removes fields. Every build reads all older majors and upgrades them
//!   in code ([`crate::read_bundle`]); a bundle of a newer major is refused with a message naming its version
//!   and telling the user to upgrade dllm-bench.
//! - Writers always write [`SchemaVersion::CURRENT`].

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A bundle format version `MAJOR.MINOR`. The variants document what changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SchemaVersion {
    /// `0.1`: a pre-release draft, defined together with 1.0 so that the upgrade path is exercised from the first
    /// release (no released dllm-bench wrote it). Repetitions carried `latency_s` and `prefill_s` in seconds; the
    /// provenance had no `attention`; the prompt set had no `selection` or hash. Read and upgraded, never written.
    V0_1,
    /// `1.0`: the first stable format. Unit-suffixed millisecond and byte fields (`e2e_ms`, `prefill_ms`,
    /// `peak_allocated_bytes`), cells keyed by (model, sampler, K, B, N, prompt/output tokens, block length),
    /// cell status `ok`/`oom`/`error`/`skipped`, provenance with the resolved grid, prompt-set hash.
    V1_0,
    /// `1.1`: optional provenance of cluster runs. `provenance` gained `config_sha256` (SHA-256 of the resolved
    /// config as TOML), `shard` (`{index, count}`), `planned_cells` (fewer cells: a partial bundle of an
    /// interrupted run) and `executions` (host, device, shard and SLURM ids of each process that measured cells);
    /// each cell gained `execution`, its index into `executions`, and `quality` (`[{metric, direction, value}]`,
    /// absent when quality was not measured). A 1.0 file reads unchanged.
    V1_1,
    /// `1.2`: optional measurement detail. Quality per prompt with the evaluator that produced it, and the
    /// generated continuations a cell's quality was computed from; per-repetition memory split, device-wide
    /// memory and roofline context (weights bytes read, FLOPs). A 1.0 or 1.1 file reads unchanged.
    V1_2,
    /// `1.3`: nothing silent. A cell records the quality values that could not be scored (`quality_errors`:
    /// metric, evaluator, message), each continuation the positions a diffusion model left masked
    /// (`masked_tokens`, dropped from its text), and the prompt set's `sha256` may be absent (a 0.1 draft never had
    /// one; it was written as an empty string before). A 1.x file reads unchanged.
    V1_3,
    /// `1.4`: each execution may carry `device_peaks`, the copy bandwidth and matmul rate the runner measured on
    /// its device before its first cell (the roofline's ceilings). A 1.x file reads unchanged.
    V1_4,
    /// `1.5`: LLaDA sampler series. A cell key may name a block KV cache (`cache`: `prefix` or `dual`) and a
    /// confidence `threshold` (then it has no `steps`: its forwards are measured); each repetition may list the
    /// tokens committed at each step (`committed_per_step`), and `kv_cache_bytes` covers the block caches; a
    /// parity record names its series' cache and threshold decoding, and a curve point its threshold and measured
    /// forwards. Instruct models: `prompts.chat_template` in the config and `models[].chat_template` (the template's
    /// source, hash, rendering and frame tokens) when each prompt was wrapped in the model's chat template. A 1.x
    /// file reads unchanged: its cells are the reference sampler's, its prompts unwrapped.
    V1_5,
    /// `1.6`: nothing lost, nothing unsaid. `provenance.git_dirty` lists the compiled sources that differed from
    /// `git_commit` when the tool was built (`git_commit` then ends in `-dirty`); `provenance.missing_cells` the
    /// cells of the grid a merge with `--allow-missing` had in no input (a partial bundle); a cell's
    /// `stalled_prompts` the prompts whose quality continuation could not be finished (a threshold block that
    /// commits nothing): the other prompts' continuations are kept and scored. A 1.x file reads unchanged.
    V1_6,
    /// `1.7`: energy. Each execution may say how it measured energy (`energy`: the counter, NVML on CUDA or RAPL on
    /// the CPU, what it covers and the idle power; or why there was none), each repetition the joules its run used
    /// (`energy_j`) and the window they cover (`energy_window_ms`); joules per token and per sequence are derived in
    /// `metrics::energy`. A 1.x file reads unchanged: its energy is absent.
    V1_7,
    /// `1.8`: the run's conditions. Each execution may say the host's load and the GPU's clocks, power limit,
    /// compute mode and other processes when it started measuring (`conditions`), the study's hardware controls. A
    /// 1.x file reads unchanged: its conditions are absent.
    V1_8,
    /// `1.9`: BERTScore. The config's `quality.bertscore` names the BERT or RoBERTa encoder and its layer, the
    /// bundle's `encoders` what was loaded (its snapshot, shape and whether it was synthetic), and the quality
    /// values `bertscore_precision`, `bertscore_recall` and `bertscore_f1` carry the encoder's id as their
    /// evaluator. A 1.x file reads unchanged: it has no BERTScore.
    V1_9,
}

/// A version as written in a file: may be newer than any variant this build knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VersionNumber {
    /// Incompatible changes bump this.
    pub major: u32,
    /// Additive changes bump this.
    pub minor: u32,
}

impl SchemaVersion {
    /// The version this build writes.
    pub const CURRENT: SchemaVersion = SchemaVersion::V1_9;

    /// Every known version, oldest first.
    pub const ALL: [SchemaVersion; 11] = [
        SchemaVersion::V0_1,
        SchemaVersion::V1_0,
        SchemaVersion::V1_1,
        SchemaVersion::V1_2,
        SchemaVersion::V1_3,
        SchemaVersion::V1_4,
        SchemaVersion::V1_5,
        SchemaVersion::V1_6,
        SchemaVersion::V1_7,
        SchemaVersion::V1_8,
        SchemaVersion::V1_9,
    ];

    /// The number written in files.
    pub fn number(self) -> VersionNumber {
        match self {
            SchemaVersion::V0_1 => VersionNumber { major: 0, minor: 1 },
            SchemaVersion::V1_0 => VersionNumber { major: 1, minor: 0 },
            SchemaVersion::V1_1 => VersionNumber { major: 1, minor: 1 },
            SchemaVersion::V1_2 => VersionNumber { major: 1, minor: 2 },
            SchemaVersion::V1_3 => VersionNumber { major: 1, minor: 3 },
            SchemaVersion::V1_4 => VersionNumber { major: 1, minor: 4 },
            SchemaVersion::V1_5 => VersionNumber { major: 1, minor: 5 },
            SchemaVersion::V1_6 => VersionNumber { major: 1, minor: 6 },
            SchemaVersion::V1_7 => VersionNumber { major: 1, minor: 7 },
            SchemaVersion::V1_8 => VersionNumber { major: 1, minor: 8 },
            SchemaVersion::V1_9 => VersionNumber { major: 1, minor: 9 },
        }
    }

    /// The newest known version of a major series, if this build knows the major.
    pub fn latest_of_major(major: u32) -> Option<SchemaVersion> {
        Self::ALL.iter().rev().copied().find(|v| v.number().major == major)
    }
}

impl VersionNumber {
    /// Parses `"MAJOR.MINOR"`.
    pub fn parse(s: &str) -> Option<VersionNumber> {
        let (major, minor) = s.split_once('.')?;
        let ok = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
        if !ok(major) || !ok(minor) {
            return None;
        }
        Some(VersionNumber { major: major.parse().ok()?, minor: minor.parse().ok()? })
    }
}

impl fmt::Display for VersionNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl fmt::Display for SchemaVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.number().fmt(f)
    }
}

impl Serialize for SchemaVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SchemaVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let n = VersionNumber::parse(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("schema_version {s:?} is not MAJOR.MINOR")))?;
        // A newer minor of a known major reads as the newest minor we know (additive changes only).
        SchemaVersion::latest_of_major(n.major)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown schema_version {s}")))
    }
}

impl schemars::JsonSchema for SchemaVersion {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SchemaVersion".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^1\\.[0-9]+$",
            "description": "Bundle format version MAJOR.MINOR; this schema describes major 1 (readers upgrade 0.1 \
                            files, and refuse a newer major)."
        })
    }
}
