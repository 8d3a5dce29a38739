//! The committed JSON Schema (schema/bundle.schema.json) is the one the code generates.
//! Regenerate with `DLLM_BLESS=1 cargo test -p dllm-bench-schema json_schema`.

use std::path::PathBuf;

#[test]
fn committed_json_schema_is_current() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bundle.schema.json");
    let generated = schema::bundle_json_schema();
    if std::env::var_os("DLLM_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write schema");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "schema/bundle.schema.json is stale: run `DLLM_BLESS=1 cargo test -p dllm-bench-schema json_schema` and commit it"
    );
}

#[test]
fn json_schema_requires_version_and_cells() {
    let v: serde_json::Value = serde_json::from_str(&schema::bundle_json_schema()).expect("json");
    let required: Vec<&str> = v["required"].as_array().expect("required").iter().filter_map(|x| x.as_str()).collect();
    for field in ["schema_version", "provenance", "models", "prompt_set", "cells"] {
        assert!(required.contains(&field), "{field} must be required");
    }
}

/// What a validator other than ours relies on: integers bounded by their type, times and energies >= 0, batch
/// sizes and output lengths >= 1, RFC 3339 times, major 1, and descriptions in plain text.
#[test]
fn json_schema_states_the_bounds_other_validators_need() {
    let text = schema::bundle_json_schema();
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    let defs = &v["$defs"];
    let key = &defs["CellKey"]["properties"];
    assert_eq!(key["batch_size"]["maximum"], u32::MAX);
    assert_eq!(key["batch_size"]["minimum"], 1);
    assert_eq!(key["output_tokens"]["minimum"], 1);
    let rep = &defs["Repetition"]["properties"];
    for field in ["e2e_ms", "prefill_ms", "energy_j", "energy_window_ms"] {
        assert_eq!(rep[field]["minimum"], 0, "{field}");
    }
    assert_eq!(rep["step_ms"]["items"]["minimum"], 0);
    assert_eq!(rep["output_tokens"]["maximum"], u64::MAX);
    assert_eq!(defs["Provenance"]["properties"]["created_at"]["format"], "date-time");
    assert_eq!(defs["SchemaVersion"]["pattern"], "^1\\.[0-9]+$");
    assert!(!text.contains("[`"), "rustdoc link brackets left in a description");
}
