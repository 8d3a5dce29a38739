//! The on-disk formats of dllm-bench, shared by the runner (native) and the explorer (wasm).
//!
//! - [`bundle`]: the result bundle (what a run measured), format 1.x; [`version`] states the
//!   versioning policy and [`read`] upgrades older files and refuses newer ones.
//! - [`grid`]: the grid configs (`config/*.toml`) with validation.
//! - [`derive`](mod@derive): every derived number (statistics, throughput, Pareto front, S_parity, speedup).
//! - [`parity`]: quality per cell group, S_parity and the speedup at parity with bootstrap intervals.
//! - [`index`]: the list of bundles a site serves.
//! - [`roofline`]: the analytic work of a generation (weights read, FLOPs, KV cache) from the model's shape.
//!
//! This crate has no runner logic and no I/O beyond parsing strings, so it compiles to wasm.
#![warn(missing_docs)]

pub mod bundle;
pub mod derive;
pub mod grid;
pub mod index;
pub mod parity;
pub mod read;
pub mod rng;
pub mod roofline;
pub mod version;

pub use bundle::{
    Bundle, Cell, CellKey, CellStatus, DeviceInfo, Execution, ModelInfo, ModelShape, PromptSetInfo, Provenance,
    Repetition, Sampler, ShardInfo, SlurmInfo, TokenizerInfo,
};
pub use grid::{ConfigError, GridConfig, ModelKind};
pub use index::{BundleIndex, IndexEntry};
pub use read::{BundleError, ReadBundle, check_bundle, read_bundle, read_bundle_detailed, write_bundle};
pub use version::{SchemaVersion, VersionNumber};

/// The JSON Schema of the current bundle format, for third-party readers (`schema/bundle.schema.json`).
pub fn bundle_json_schema() -> String {
    let schema = schemars::schema_for!(Bundle);
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
}
