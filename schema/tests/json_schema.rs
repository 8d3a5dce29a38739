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
