//! The index of bundles a site serves next to them (`bundles/index.json`).

use serde::{Deserialize, Serialize};

/// `bundles/index.json`: the bundles a site offers, newest first.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BundleIndex {
    /// The bundles.
    pub bundles: Vec<IndexEntry>,
}

/// One bundle of the index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IndexEntry {
    /// File name, relative to the index.
    pub file: String,
    /// Human title (run name, device).
    pub title: String,
    /// Creation time, RFC 3339.
    pub created_at: String,
    /// Whether the bundle's weights were synthetic.
    pub synthetic_weights: bool,
    /// Whether the bundle is partial (`metrics::coverage::partial`: fewer cells than its run planned, as an
    /// interrupted run's `partial.json`; a merge with cells missing; or continuations an evaluator has not scored):
    /// its S_parity and speedups may change. Absent: false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub partial: bool,
    /// Whether another implementation wrote the bundle (`provenance.tool` is not dllm-bench: the HF transformers
    /// reference), a bundle to compare the runner's with rather than the study's own. Absent: false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub reference: bool,
}

fn is_false(v: &bool) -> bool {
    !*v
}
