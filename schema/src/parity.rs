//! The parity records a bundle stores (`bundle.parity`): S_parity, its interval and the speedup at parity per
//! batch size, as the writer computed them. Only the format lives here; the computation is
//! `metrics::parity::parity`, the one function every reader (report, explorer, writers) uses.

use serde::{Deserialize, Serialize};

use crate::key::{BlockCache, CellKey, Direction, Sampler, SamplerVariant, Threshold};

/// The outcome of the S_parity search.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Parity {
    /// The fewest steps of the grid at which the diffusion model is at least as good as the AR baseline.
    Reached {
        /// S_parity.
        steps: u32,
    },
    /// No step count of the grid reached parity; `max_steps` is the largest tried.
    NotReached {
        /// K_max of the grid.
        max_steps: u32,
    },
    /// No diffusion quality values at all.
    NoData,
}

/// Reads what the derived internally tagged form writes (`{"outcome": "reached", "steps": 8}`), with the same
/// error messages, without serde's buffering into an intermediate tree (as `CellStatus` does).
impl<'de> Deserialize<'de> for Parity {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "snake_case")]
        enum Outcome {
            Reached,
            NotReached,
            NoData,
        }
        #[derive(Deserialize)]
        #[serde(expecting = "an S_parity outcome: an object with `outcome` (reached, not_reached or no_data) and its \
                             `steps` (reached) or `max_steps` (not_reached)")]
        struct Repr {
            outcome: Outcome,
            #[serde(default)]
            steps: Option<u32>,
            #[serde(default)]
            max_steps: Option<u32>,
        }
        let r = Repr::deserialize(d)?;
        let field = |v: Option<u32>, name| v.ok_or_else(|| serde::de::Error::missing_field(name));
        Ok(match r.outcome {
            Outcome::Reached => Parity::Reached { steps: field(r.steps, "steps")? },
            Outcome::NotReached => Parity::NotReached { max_steps: field(r.max_steps, "max_steps")? },
            Outcome::NoData => Parity::NoData,
        })
    }
}

/// A value with its 95% bootstrap interval (absent without per-prompt values).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Estimate {
    /// The point estimate (from all prompts).
    pub value: f64,
    /// 2.5th percentile over the bootstrap resamples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low: Option<f64>,
    /// 97.5th percentile over the bootstrap resamples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high: Option<f64>,
}

impl Estimate {
    /// A point estimate without an interval.
    pub fn point(value: f64) -> Estimate {
        Estimate { value, low: None, high: None }
    }
}

/// f(k) at one K (a K-driven series), or at one threshold (a threshold series).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepQuality {
    /// Diffusion steps K; a threshold series: the forward passes measured at `threshold` (the median over the
    /// repetitions of its cell with the smallest batch size, rounded up), which is what S_parity minimises.
    pub steps: u32,
    /// Since 1.5: the threshold of this point of a threshold series.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<Threshold>,
    /// The metric's value at K.
    pub quality: Estimate,
}

/// The 95% bootstrap interval of S_parity; a bound of `None` means "not reached up to K_max".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepsInterval {
    /// 2.5th percentile.
    pub low: Option<u32>,
    /// 97.5th percentile.
    pub high: Option<u32>,
}

/// The speedup at S_parity for one batch size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SpeedupRow {
    /// Batch size B.
    pub batch_size: u32,
    /// The AR cell.
    pub ar_cell: CellKey,
    /// Its median L_e2e.
    pub ar_e2e_ms: f64,
    /// The diffusion cell at S_parity and B, when there is an ok one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diffusion_cell: Option<CellKey>,
    /// Its median L_e2e.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diffusion_e2e_ms: Option<f64>,
    /// L_e2e(AR) / L_e2e(diffusion at S_parity), with the interval from S_parity's resamples (those that reached
    /// parity at a K with an ok cell at this B).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup: Option<Estimate>,
    /// Speedup > 1: the diffusion model is faster at equal quality.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub viable: Option<bool>,
    /// Why there is no speedup, when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// How the intervals were made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BootstrapInfo {
    /// Resamples.
    pub resamples: u32,
    /// Seed of the resampling.
    pub seed: u64,
    /// Prompts drawn per resample (the prompt set's size).
    pub prompts: u32,
}

/// S_parity of one diffusion series against one AR model at one N, with the speedup per batch size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ParityRecord {
    /// The quality metric.
    pub metric: String,
    /// The model that scored it (perplexity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluator: Option<String>,
    /// Which way is better.
    pub direction: Direction,
    /// Sequence length N.
    pub seq_len: u32,
    /// The AR model.
    pub ar_model: String,
    /// The diffusion model.
    pub diffusion_model: String,
    /// The diffusion sampler.
    pub sampler: Sampler,
    /// The diffusion block length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_length: Option<u32>,
    /// Since 1.5: the series' block cache (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<BlockCache>,
    /// Since 1.5: a threshold series: its points are thresholds, `steps` their measured forwards, and S_parity
    /// the fewest forwards at parity, reached at `parity_threshold`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub thresholded: bool,
    /// Since 1.5: a threshold series that reached parity: the threshold of the cheapest point at parity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parity_threshold: Option<Threshold>,
    /// Q_llama: the AR model's quality.
    pub baseline: Estimate,
    /// f(k) for every K with a value, ascending.
    pub curve: Vec<StepQuality>,
    /// S_parity, or not reached up to K_max.
    pub outcome: Parity,
    /// 95% interval of S_parity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s_parity_interval: Option<StepsInterval>,
    /// Fraction of the resamples in which parity was reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reached_fraction: Option<f64>,
    /// Speedup at S_parity per batch size.
    pub speedups: Vec<SpeedupRow>,
    /// The bootstrap's settings (absent when the values have no per-prompt detail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<BootstrapInfo>,
}

impl ParityRecord {
    /// The record's LLaDA sampler series (`None` for other samplers: Dream's are series by their `sampler`).
    pub fn variant(&self) -> Option<SamplerVariant> {
        (self.sampler.kind() == crate::key::ModelKind::Llada).then(|| SamplerVariant::of(self.cache, self.thresholded))
    }
}
