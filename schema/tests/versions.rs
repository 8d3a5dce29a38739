//! Round trips, upgrades of older versions, and refusal of newer ones.

use schema::{BundleError, SchemaVersion, VersionNumber, read_bundle, read_bundle_detailed, write_bundle};

use crate::util::{fixture, sample_bundle};

#[test]
fn bundle_round_trips_through_json() {
    let b = sample_bundle();
    let text = write_bundle(&b);
    assert!(text.trim_start().starts_with("{\n  \"schema_version\": \"1.0\""), "schema_version must come first");
    assert_eq!(read_bundle(&text).expect("reads back"), b);
}

#[test]
fn absent_metrics_are_omitted_not_zero() {
    let text = write_bundle(&sample_bundle());
    assert!(!text.contains("peak_allocated_bytes"), "a CPU bundle has no device memory figures");
    assert!(!text.contains("\"first_block_ms\": 0"), "unmeasured values must be absent");
}

#[test]
fn every_v1_fixture_reads_without_upgrade() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1.0");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).expect("fixtures/v1.0") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("read");
        let r = read_bundle_detailed(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(!r.upgraded(), "{}", path.display());
        assert!(!r.bundle.cells.is_empty());
        n += 1;
    }
    assert!(n >= 1, "keep at least one v1.0 fixture");
}

#[test]
fn v0_1_draft_upgrades_seconds_to_milliseconds() {
    let r = read_bundle_detailed(&fixture("v0.1/cpu-draft.json")).expect("0.1 is still readable");
    assert!(r.upgraded());
    assert_eq!(r.file_version, VersionNumber { major: 0, minor: 1 });
    let b = r.bundle;
    assert_eq!(b.schema_version, SchemaVersion::CURRENT);
    let reps = &b.cells[0].repetitions;
    assert!((reps[0].e2e_ms - 12.5).abs() < 1e-9, "latency_s 0.0125 -> 12.5 ms, got {}", reps[0].e2e_ms);
    assert_eq!(reps[1].prefill_ms, Some(2.1));
    assert_eq!(b.cells[1].repetitions[0].prefill_ms, None, "absent stays absent");
    assert_eq!(b.provenance.attention, "unrecorded (schema 0.1)");
    // Upgraded bundles are written in the current version.
    assert!(write_bundle(&b).contains("\"schema_version\": \"1.0\""));
}

#[test]
fn newer_major_is_refused_with_upgrade_advice() {
    let text = write_bundle(&sample_bundle()).replacen("\"1.0\"", "\"2.0\"", 1);
    let err = read_bundle(&text).expect_err("2.0 is newer");
    assert!(matches!(err, BundleError::NewerVersion { .. }));
    let msg = err.to_string();
    assert!(msg.contains("schema version 2.0") && msg.contains("upgrade dllm-bench"), "{msg}");
}

#[test]
fn newer_minor_is_read_ignoring_unknown_fields() {
    let text = write_bundle(&sample_bundle()).replacen("\"1.0\"", "\"1.7\"", 1).replacen(
        "\"provenance\": {",
        "\"provenance\": {\n \"future_field\": [1, 2],",
        1,
    );
    let r = read_bundle_detailed(&text).expect("1.7 reads");
    assert!(r.newer_minor());
    assert_eq!(r.bundle.cells.len(), sample_bundle().cells.len());
}
