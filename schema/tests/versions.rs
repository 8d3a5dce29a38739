//! Round trips, upgrades of older versions, and refusal of newer ones.

use schema::{BundleError, SchemaVersion, VersionNumber, read_bundle, read_bundle_detailed, write_bundle};

use crate::util::{fixture, sample_bundle};

#[test]
fn bundle_round_trips_through_json() {
    let b = sample_bundle();
    let text = write_bundle(&b);
    let first = format!("{{\n  \"schema_version\": \"{}\"", SchemaVersion::CURRENT);
    assert!(text.trim_start().starts_with(&first), "schema_version must come first");
    assert_eq!(read_bundle(&text).expect("reads back"), b);
}

#[test]
fn absent_metrics_are_omitted_not_zero() {
    // The LLaDA cells measure the first block, the AR cells cannot: the key must be written where it was
    // measured and be absent (not null, not 0) where it was not.
    let mut b = sample_bundle();
    for c in b.cells.iter_mut().filter(|c| c.key.steps.is_some()) {
        for r in &mut c.repetitions {
            r.first_block_ms = Some(r.e2e_ms / 2.0);
        }
    }
    let text = write_bundle(&b);
    assert!(!text.contains("peak_allocated_bytes"), "a CPU bundle has no device memory figures");
    let json: serde_json::Value = serde_json::from_str(&text).expect("json");
    let (mut measured, mut unmeasured) = (0, 0);
    for (cell, written) in b.cells.iter().zip(json["cells"].as_array().expect("cells")) {
        for (r, w) in cell.repetitions.iter().zip(written["repetitions"].as_array().expect("repetitions")) {
            match r.first_block_ms {
                Some(ms) => {
                    assert_eq!(w["first_block_ms"].as_f64(), Some(ms), "{w}");
                    measured += 1;
                }
                None => {
                    assert!(w.get("first_block_ms").is_none(), "unmeasured values must be absent: {w}");
                    unmeasured += 1;
                }
            }
        }
    }
    assert!(measured > 0 && unmeasured > 0, "the demo grid has LLaDA and AR cells: {measured}, {unmeasured}");
    assert_eq!(read_bundle(&text).expect("reads back"), b);
}

#[test]
fn every_v1_fixture_reads() {
    for (minor, version) in [
        ("v1.0", VersionNumber { major: 1, minor: 0 }),
        ("v1.1", SchemaVersion::V1_1.number()),
        ("v1.2", SchemaVersion::V1_2.number()),
        ("v1.3", SchemaVersion::V1_3.number()),
        ("v1.4", SchemaVersion::V1_4.number()),
        ("v1.5", SchemaVersion::V1_5.number()),
        ("v1.7", SchemaVersion::V1_7.number()),
        ("v1.8", SchemaVersion::V1_8.number()),
        ("v1.9", SchemaVersion::V1_9.number()),
    ] {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(minor);
        let mut n = 0;
        for entry in std::fs::read_dir(dir).expect("fixtures") {
            let path = entry.expect("entry").path();
            let text = std::fs::read_to_string(&path).expect("read");
            let r = read_bundle_detailed(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(r.file_version, version, "{}", path.display());
            assert_eq!(r.upgraded(), version < SchemaVersion::CURRENT.number(), "{}", path.display());
            assert!(!r.bundle.cells.is_empty());
            // Read, written in the current version, read again: nothing lost.
            assert_eq!(read_bundle(&write_bundle(&r.bundle)).expect("round trip"), r.bundle, "{}", path.display());
            n += 1;
        }
        assert!(n >= 1, "keep at least one {minor} fixture");
    }
}

#[test]
fn v1_0_reads_as_current_with_the_cluster_provenance_absent() {
    let r = read_bundle_detailed(&fixture("v1.0/demo.json")).expect("1.0 is readable");
    assert_eq!(r.bundle.schema_version, SchemaVersion::CURRENT);
    let p = &r.bundle.provenance;
    assert!(p.config_sha256.is_none() && p.shard.is_none() && p.planned_cells.is_none() && p.executions.is_empty());
    assert!(r.bundle.cells.iter().all(|c| c.execution.is_none()));
}

#[test]
fn v1_1_fixture_says_where_each_cell_ran() {
    let b = read_bundle(&fixture("v1.1/demo-sharded.json")).expect("1.1 fixture");
    let p = &b.provenance;
    assert_eq!(p.config_sha256.as_deref().map(str::len), Some(64));
    assert!(!p.executions.is_empty());
    for c in &b.cells {
        let e = c.execution.expect("each cell names its execution") as usize;
        assert!(e < p.executions.len());
    }
}

#[test]
fn a_cell_pointing_past_the_executions_is_refused() {
    let mut b = read_bundle(&fixture("v1.1/demo-sharded.json")).expect("1.1 fixture");
    b.cells[0].execution = Some(99);
    let err = read_bundle(&write_bundle(&b)).expect_err("dangling execution");
    assert!(err.to_string().contains("cells[0].execution is 99"), "{err}");
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
    assert!(write_bundle(&b).contains(&format!("\"schema_version\": \"{}\"", SchemaVersion::CURRENT)));
}

#[test]
fn newer_major_is_refused_with_upgrade_advice() {
    let text = write_bundle(&sample_bundle()).replacen(&format!("\"{}\"", SchemaVersion::CURRENT), "\"2.0\"", 1);
    let err = read_bundle(&text).expect_err("2.0 is newer");
    assert!(matches!(err, BundleError::NewerVersion { .. }));
    let msg = err.to_string();
    assert!(msg.contains("schema version 2.0") && msg.contains("upgrade dllm-bench"), "{msg}");
}

#[test]
fn newer_minor_is_read_ignoring_unknown_fields() {
    let text = write_bundle(&sample_bundle())
        .replacen(&format!("\"{}\"", SchemaVersion::CURRENT), "\"1.10\"", 1)
        .replacen("\"provenance\": {", "\"provenance\": {\n \"future_field\": [1, 2],", 1);
    let r = read_bundle_detailed(&text).expect("1.10 reads");
    assert!(r.newer_minor());
    assert_eq!(r.bundle.cells.len(), sample_bundle().cells.len());
}

#[test]
fn quality_values_round_trip_and_absent_quality_is_omitted() {
    use schema::bundle::{Direction, QualityValue};
    let mut b = sample_bundle();
    let q = QualityValue {
        metric: "perplexity".into(),
        direction: Direction::LowerIsBetter,
        value: 10.47,
        ..QualityValue::default()
    };
    b.cells[0].quality = vec![q.clone()];
    let text = write_bundle(&b);
    let json: serde_json::Value = serde_json::from_str(&text).expect("json");
    let cells = json["cells"].as_array().expect("cells");
    assert!(cells[0].get("quality").is_some());
    assert!(cells[1..].iter().all(|c| c.get("quality").is_none()), "cells without quality carry no quality field");
    assert_eq!(read_bundle(&text).expect("reads").cells[0].quality, vec![q]);
}

/// Every float of `v` moved by `f(index, value)`, in document order.
fn map_floats(v: &mut serde_json::Value, next: &mut impl FnMut(f64) -> f64) {
    match v {
        serde_json::Value::Number(n) if n.is_f64() => {
            let x = n.as_f64().expect("f64");
            if let Some(m) = serde_json::Number::from_f64(next(x)) {
                *n = m;
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(|x| map_floats(x, next)),
        serde_json::Value::Object(o) => o.values_mut().for_each(|x| map_floats(x, next)),
        _ => {}
    }
}

fn float_bits(v: &serde_json::Value, out: &mut Vec<u64>) {
    match v {
        serde_json::Value::Number(n) if n.is_f64() => out.push(n.as_f64().expect("f64").to_bits()),
        serde_json::Value::Array(a) => a.iter().for_each(|x| float_bits(x, out)),
        serde_json::Value::Object(o) => o.values().for_each(|x| float_bits(x, out)),
        _ => {}
    }
}

#[test]
fn raw_numbers_are_bit_identical_after_a_read_and_a_write() {
    // Every float field of a real 1.2 bundle (timings, step times, quality values and their per-prompt values,
    // the config's temperature) moved by a few ulps: the values whose shortest decimal form has 17 digits
    // (`28.801619000000002`) are the ones a fast float parser rounds to the neighbouring double.
    let mut v: serde_json::Value = serde_json::from_str(&fixture("v1.2/demo-quality.json")).expect("json");
    let mut state = 7u64;
    let mut moved = 0;
    map_floats(&mut v, &mut |x| {
        moved += 1;
        // A few ulps, from a plain linear congruential sequence (this crate has no generator of its own).
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        f64::from_bits(x.to_bits().wrapping_add((state >> 61) % 7))
    });
    assert!(moved > 500, "the fixture has many floats: {moved}");
    // The parity records are derived (recomputed on write): compare the stored raw values only.
    let raw = |v: &serde_json::Value| {
        let mut v = v.clone();
        v.as_object_mut().expect("object").remove("parity");
        let mut bits = Vec::new();
        float_bits(&v, &mut bits);
        bits
    };
    let text = v.to_string();
    let b = read_bundle(&text).expect("reads");
    let again: serde_json::Value = serde_json::from_str(&write_bundle(&b)).expect("json");
    let (before, after) = (raw(&v), raw(&again));
    assert_eq!(before.len(), after.len());
    let changed = before.iter().zip(&after).filter(|(a, b)| a != b).count();
    assert_eq!(changed, 0, "{changed} of {} floats changed in a read and a write", before.len());
}

#[test]
fn newer_minor_with_unknown_fields_in_the_embedded_config_is_read() {
    // A newer writer may add config fields (a new `[quality]` option, a sampler axis); the config a bundle embeds is
    // provenance, so an older reader ignores what it does not know instead of refusing the bundle.
    let mut v: serde_json::Value = serde_json::from_str(&write_bundle(&sample_bundle())).expect("json");
    v["schema_version"] = "1.10".into();
    let config = &mut v["provenance"]["config"];
    config["future_table"] = serde_json::json!({"x": 1});
    config["grid"]["sampler_variants"] = serde_json::json!(["reference", "dual"]);
    config["run"]["future_flag"] = true.into();
    config["models"][0]["future_field"] = "x".into();
    let r = read_bundle_detailed(&v.to_string()).expect("a newer minor with unknown config fields reads");
    assert!(r.newer_minor());
    assert_eq!(r.bundle.provenance.config, sample_bundle().provenance.config);
}

#[test]
fn v1_4_records_the_device_peaks_and_refuses_impossible_ones() {
    let b = read_bundle(&fixture("v1.4/demo-peaks.json")).expect("1.4 fixture");
    let peaks = b.provenance.executions[0].device_peaks.as_ref().expect("a 1.4 run measures its device");
    assert!(peaks.copy_bytes_per_s > 0.0 && peaks.matmul_flops_per_s > 0.0 && peaks.repetitions >= 1, "{peaks:?}");
    // Older bundles have none: absent, not zero.
    let old = read_bundle(&fixture("v1.3/demo-quality.json")).expect("1.3 fixture");
    assert!(old.provenance.executions.iter().all(|e| e.device_peaks.is_none()));
    for (what, edit) in [
        ("zero rate", Box::new(|p: &mut schema::bundle::DevicePeaks| p.copy_bytes_per_s = 0.0) as Box<dyn Fn(&mut _)>),
        ("infinite rate", Box::new(|p: &mut schema::bundle::DevicePeaks| p.matmul_flops_per_s = f64::INFINITY)),
        ("no repetitions", Box::new(|p: &mut schema::bundle::DevicePeaks| p.repetitions = 0)),
    ] {
        let mut bad = b.clone();
        edit(bad.provenance.executions[0].device_peaks.as_mut().expect("peaks"));
        let err = schema::check_bundle(&bad).expect_err(what).to_string();
        assert!(err.contains("provenance.executions[0].device_peaks"), "{what}: {err}");
    }
}

#[test]
fn bundles_before_1_4_read_with_the_ranking_their_runners_used() {
    // Runners before 1.4 ranked in f64 and drew Gumbel noise on the host; their configs have no such fields, and
    // today's defaults (f32, device) would misstate them.
    use schema::grid::{Confidence, GumbelNoise};
    for old in ["v1.0/demo.json", "v1.2/demo-quality.json", "v1.3/demo-quality.json"] {
        let g = read_bundle(&fixture(old)).expect("reads").provenance.config.grid;
        assert_eq!((g.confidence, g.gumbel_noise), (Confidence::F64, GumbelNoise::Host), "{old}");
    }
    let g = read_bundle(&fixture("v1.4/demo-peaks.json")).expect("1.4").provenance.config.grid;
    assert_eq!((g.confidence, g.gumbel_noise), (Confidence::F32, GumbelNoise::Device), "a 1.4 run's own record");
}

#[test]
fn v1_5_keys_name_the_series_and_repetitions_what_each_step_committed() {
    use schema::grid::{BlockCache, SamplerVariant};
    // A real run of the demo: the reference series and prefix+threshold at three thresholds.
    let b = read_bundle(&fixture("v1.5/demo-series.json")).expect("1.5 fixture");
    let fast: Vec<_> = b.cells.iter().filter(|c| c.key.variant() == Some(SamplerVariant::PrefixThreshold)).collect();
    assert_eq!(fast.len(), 2 * 3 * 3, "2 N x 3 B x 3 thresholds");
    for c in &fast {
        assert_eq!((c.key.steps, c.key.cache), (None, Some(BlockCache::Prefix)), "{}", c.key);
        for r in &c.repetitions {
            let committed = r.committed_per_step.as_ref().expect("committed per step");
            assert_eq!(Some(committed.len() as u32), r.forward_passes, "{}", c.key);
            assert!(r.kv_cache_bytes.is_some(), "{}: the cache's bytes", c.key);
        }
    }
    // A contradiction is refused, naming the cell: committed tokens that do not add up, both K and a threshold.
    let i = b.cells.iter().position(|c| c.key.threshold.is_some()).expect("a threshold cell");
    let mut bad = b.clone();
    bad.cells[i].repetitions[0].committed_per_step.as_mut().expect("committed")[0] += 1;
    let err = schema::check_bundle(&bad).expect_err("sum").to_string();
    assert!(err.contains(&format!("cells[{i}].repetitions[0]")) && err.contains("committed_per_step"), "{err}");
    let mut bad = b.clone();
    bad.cells[i].key.steps = Some(4);
    let err = schema::check_bundle(&bad).expect_err("both").to_string();
    assert!(err.contains("both steps and threshold"), "{err}");
    // Older bundles are the reference sampler's: no cache, no threshold.
    let old = read_bundle(&fixture("v1.4/demo-peaks.json")).expect("1.4");
    assert!(old.cells.iter().all(|c| c.key.cache.is_none() && c.key.threshold.is_none()));
    assert!(old.cells.iter().filter_map(|c| c.key.variant()).all(|v| v == SamplerVariant::Reference));
}

#[test]
fn a_bundle_whose_config_has_fields_that_drive_nothing_stays_readable() {
    // A 1.5 run of a Llama-only grid that listed diffusion steps (accepted then, they ran nothing): a config given
    // now is refused for it, the bundle it wrote still reads.
    let b = read_bundle(&fixture("v1.5/ar-only-steps.json")).expect("the bundle reads");
    assert_eq!(b.provenance.config.grid.steps, [4, 8]);
    let err = schema::GridConfig::from_toml(&b.provenance.config.to_toml(), "again.toml").expect_err("refused now");
    assert!(err.to_string().contains("grid.steps") && err.to_string().contains("add a diffusion model"), "{err}");
}

/// The current version's sample (a demo run of this version: both sampler series, quality with BERTScore, energy
/// unavailable) is written back byte for byte: a change to how 1.9 is written fails here, and needs a new minor
/// version.
#[test]
fn the_current_versions_sample_writes_back_unchanged() {
    let text = fixture("v1.9/demo.json");
    let r = read_bundle_detailed(&text).expect("1.9 fixture");
    assert!(!r.upgraded() && !r.newer_minor());
    assert_eq!(write_bundle(&r.bundle), text.trim_end(), "the bytes a 1.9 bundle is written as");
    // 1.9: the encoder that scored BERTScore, and its values under its id.
    let e = r.bundle.encoders.first().expect("1.9 lists the BERTScore encoder");
    assert!(e.synthetic && e.layer == 2 && e.architecture == "roberta", "{e:?}");
    let scored = r.bundle.cells.iter().flat_map(|c| &c.quality).filter(|q| q.metric == "bertscore_f1");
    assert!(scored.clone().count() > 0 && scored.clone().all(|q| q.evaluator.as_deref() == Some(e.id.as_str())));
    let bs = r.bundle.provenance.config.quality.as_ref().and_then(|q| q.bertscore.as_ref()).expect("the config's");
    assert_eq!(bs.layer, Some(2));
    // A 1.8 bundle reads with none.
    let old = read_bundle(&fixture("v1.8/demo.json")).expect("1.8 fixture");
    assert!(old.encoders.is_empty() && old.provenance.config.quality.as_ref().is_some_and(|q| q.bertscore.is_none()));
    let p = &r.bundle.provenance;
    assert!(p.synthetic_weights && p.planned_cells == Some(r.bundle.cells.len() as u32));
    assert!(p.executions.iter().all(|e| e.energy.as_ref().is_some_and(|m| m.unavailable.is_some())));
    // The host's state when measuring started (a CPU run: no GPU facts).
    let c = p.executions[0].conditions.as_ref().expect("1.8 records the conditions");
    assert!(c.load_average_1m.is_some() && c.logical_cpus.is_some() && c.gpu_performance_state.is_none(), "{c:?}");
    // A 1.7 bundle reads with none.
    let old = read_bundle(&fixture("v1.7/demo.json")).expect("1.7 fixture");
    assert!(old.provenance.executions.iter().all(|e| e.conditions.is_none()));
    assert!(!r.bundle.parity.is_empty() && r.bundle.cells.iter().any(|c| c.key.threshold.is_some()));
}

#[test]
fn an_older_runners_count_of_masked_positions_is_read_as_the_valid_tokens() {
    // Runners before the valid-token count wrote B x N_out in `output_tokens` although positions stayed masked;
    // `committed_per_step` says how many were generated. Every reader gets that sum (T_gen counts valid tokens).
    let text = fixture("v1.7/demo.json");
    let b = read_bundle(&text).expect("1.7 fixture");
    let (i, j) = b
        .cells
        .iter()
        .enumerate()
        .find_map(|(i, c)| (c.repetitions.first()?.committed_per_step.is_some()).then_some((i, 0)))
        .expect("a diffusion repetition");
    let valid = b.cells[i].repetitions[j].output_tokens;
    assert_eq!(read_bundle_detailed(&text).expect("ok").recounted_repetitions, 0, "a current runner's count");
    let mut v: serde_json::Value = serde_json::from_str(&text).expect("json");
    v["cells"][i]["repetitions"][j]["output_tokens"] = serde_json::json!(valid + 3);
    let r = read_bundle_detailed(&v.to_string()).expect("an older runner's bundle reads");
    assert_eq!(r.recounted_repetitions, 1);
    assert_eq!(r.bundle.cells[i].repetitions[j].output_tokens, valid, "read as the committed tokens");
    assert!(schema::recount_note(1).contains("1 repetition"));
}

#[test]
fn a_samplers_name_is_the_one_bundles_write() {
    use schema::Sampler::*;
    for s in [ArGreedy, LladaLowConfidence, LladaRandom, DreamOrigin, DreamMaskgitPlus, DreamTopkMargin, DreamEntropy] {
        assert_eq!(serde_json::to_value(s).expect("json"), serde_json::json!(s.name()));
    }
}
