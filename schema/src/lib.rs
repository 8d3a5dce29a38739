//! The on-disk formats of dllm-bench, shared by the runner (native) and the explorer (wasm): what is written,
//! never what is derived from it (every derived number is in the `metrics` crate).
//!
//! Modules, each depending only on those above it:
//! - [`key`]: the shared vocabulary (model kinds, precisions, samplers, cell keys, metric directions);
//! - [`version`]: the versioning policy;
//! - [`grid`]: the grid configs (`config/*.toml`) with validation and their expansion into cell keys;
//! - [`parity`]: the parity records a bundle stores (their computation is `metrics::parity`);
//! - [`bundle`]: the result bundle (what a run measured), format 1.x;
//! - [`read`]: reading any supported version (upgrading older files, refusing newer ones) and the consistency
//!   rules every reader and writer checks;
//! - [`index`]: the list of bundles a site serves.
//!
//! This crate has no runner logic and no I/O beyond parsing strings, so it compiles to wasm.
#![warn(missing_docs)]

pub mod bundle;
pub mod grid;
pub mod index;
pub mod key;
pub mod parity;
pub mod read;
mod strict;
pub mod version;

pub use bundle::{
    Bundle, Cell, CellKey, CellStatus, ChatTemplateInfo, DeviceInfo, EncoderInfo, Execution, ModelInfo, ModelShape,
    PromptSetInfo, Provenance, Repetition, RunConditions, Sampler, ShardInfo, SlurmInfo, TokenizerInfo,
};
pub use grid::{ConfigError, GridConfig, ModelKind};
pub use index::{BundleIndex, IndexEntry};
pub use read::{BundleError, ReadBundle, check_bundle, read_bundle, read_bundle_detailed, recount_note, write_bundle};
#[cfg(not(target_arch = "wasm32"))]
pub use read::{unknown_field_hint, unknown_fields};
pub use version::{SchemaVersion, VersionNumber};

/// The JSON Schema of the current bundle format, for third-party readers (`schema/bundle.schema.json`).
pub fn bundle_json_schema() -> String {
    let mut schema = schemars::schema_for!(Bundle);
    // Through the map, so that the schema still writes its keywords in their usual order.
    schema.as_object_mut().into_iter().flat_map(|m| m.values_mut()).for_each(for_other_readers);
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
}

/// What a validator other than ours needs of the generated schema: each unsigned integer's largest value (schemars
/// writes `format: uint32`, which validators ignore: a batch size of 2^32 would pass), and descriptions without
/// rustdoc's link brackets (``[`Execution::energy`]`` reads `Execution::energy`).
fn for_other_readers(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            let max = match m.get("format").and_then(Value::as_str) {
                Some("uint8") => Some(u64::from(u8::MAX)),
                Some("uint16") => Some(u64::from(u16::MAX)),
                Some("uint32") => Some(u64::from(u32::MAX)),
                Some("uint64") => Some(u64::MAX),
                _ => None,
            };
            if let Some(max) = max {
                m.entry("maximum").or_insert(max.into());
            }
            if let Some(Value::String(d)) = m.get_mut("description") {
                *d = d.replace("[`", "`").replace("`]", "`");
            }
            m.values_mut().for_each(for_other_readers);
        }
        Value::Array(a) => a.iter_mut().for_each(for_other_readers),
        _ => {}
    }
}
