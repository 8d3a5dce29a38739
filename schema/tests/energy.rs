//! Format 1.7: energy. An execution names its counter (or why it had none), each repetition its joules and the
//! window they cover; unmeasured energy is absent, never 0; an older file reads with its energy absent.

use schema::bundle::{EnergyMeter, EnergySource, Execution};
use schema::{DeviceInfo, SchemaVersion, read_bundle, read_bundle_detailed, write_bundle};

use crate::util::{fixture, sample_bundle};

fn execution(energy: Option<EnergyMeter>) -> Execution {
    Execution {
        started_at: "2026-11-21T00:00:00Z".into(),
        host: None,
        device: DeviceInfo { kind: "cpu".into(), ..DeviceInfo::default() },
        shard: None,
        slurm: None,
        device_peaks: None,
        energy,
        conditions: None,
    }
}

fn rapl() -> EnergyMeter {
    EnergyMeter {
        source: Some(EnergySource::Rapl),
        scope: Some("RAPL package-0: the whole CPU package".into()),
        unavailable: None,
        idle_energy_j: Some(12.5),
        idle_window_ms: Some(1000.0),
    }
}

fn unavailable(reason: &str) -> EnergyMeter {
    EnergyMeter {
        source: None,
        scope: None,
        unavailable: Some(reason.into()),
        idle_energy_j: None,
        idle_window_ms: None,
    }
}

#[test]
fn energy_round_trips_and_unmeasured_energy_is_absent() {
    assert!(SchemaVersion::CURRENT >= SchemaVersion::V1_7, "energy came with 1.7");
    let mut b = sample_bundle();
    b.provenance.executions = vec![execution(Some(rapl())), execution(Some(unavailable("no RAPL here")))];
    for (i, c) in b.cells.iter_mut().enumerate() {
        let measured = i % 2 == 0;
        c.execution = Some(if measured { 0 } else { 1 });
        for r in c.repetitions.iter_mut().filter(|_| measured) {
            r.energy_j = Some(r.e2e_ms * 0.05);
            r.energy_window_ms = Some(r.e2e_ms + 0.5);
        }
    }
    let text = write_bundle(&b);
    assert_eq!(read_bundle(&text).expect("reads back"), b);
    let json: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(json["provenance"]["executions"][0]["energy"]["source"], "rapl");
    assert_eq!(json["provenance"]["executions"][1]["energy"]["unavailable"], "no RAPL here");
    assert!(json["provenance"]["executions"][1]["energy"].get("source").is_none());
    let (mut with, mut without) = (0, 0);
    for cell in json["cells"].as_array().expect("cells") {
        for r in cell["repetitions"].as_array().expect("repetitions") {
            match r.get("energy_j") {
                Some(e) => {
                    assert!(e.as_f64().is_some_and(|e| e > 0.0), "{r}");
                    assert!(r.get("energy_window_ms").is_some(), "{r}");
                    with += 1;
                }
                None => {
                    assert!(r.get("energy_window_ms").is_none(), "{r}");
                    without += 1;
                }
            }
        }
    }
    assert!(with > 0 && without > 0, "{with} {without}");
}

#[test]
fn older_bundles_read_with_their_energy_absent() {
    let r = read_bundle_detailed(&fixture("v1.5/demo-series.json")).expect("1.5 fixture");
    assert!(r.upgraded());
    assert!(r.bundle.provenance.executions.iter().all(|e| e.energy.is_none()));
    assert!(r.bundle.cells.iter().flat_map(|c| &c.repetitions).all(|r| r.energy_j.is_none()));
    assert!(!write_bundle(&r.bundle).contains("energy"), "nothing written for what was not measured");
}

#[test]
fn impossible_energy_is_refused() {
    let refuse = |edit: &dyn Fn(&mut serde_json::Value), expect: &str| {
        let mut b = sample_bundle();
        b.provenance.executions = vec![execution(Some(rapl()))];
        let mut v: serde_json::Value = serde_json::from_str(&write_bundle(&b)).expect("json");
        edit(&mut v);
        let err = read_bundle(&v.to_string()).expect_err("must be refused").to_string();
        assert!(err.contains(expect), "{err:?} should mention {expect:?}");
    };
    refuse(
        &|v| v["cells"][0]["repetitions"][1]["energy_j"] = (-1.5).into(),
        "cells[0].repetitions[1]: energy_j is -1.5",
    );
    refuse(&|v| v["cells"][2]["repetitions"][0]["energy_window_ms"] = (-3.0).into(), "energy_window_ms is -3");
    refuse(
        &|v| v["provenance"]["executions"][0]["energy"]["unavailable"] = "both".into(),
        "provenance.executions[0].energy: names either",
    );
    refuse(
        &|v| v["provenance"]["executions"][0]["energy"] = serde_json::json!({}),
        "provenance.executions[0].energy: names either",
    );
    refuse(&|v| v["provenance"]["executions"][0]["energy"]["idle_energy_j"] = (-2.0).into(), "idle_energy_j is -2:");
    refuse(&|v| v["provenance"]["executions"][0]["energy"]["source"] = "smi".into(), "unknown variant `smi`");
    refuse(
        &|v| drop(v["provenance"]["executions"][0]["energy"].as_object_mut().map(|m| m.remove("idle_window_ms"))),
        "idle_energy_j and idle_window_ms come together",
    );
    refuse(
        &|v| v["provenance"]["executions"][0]["shard"] = serde_json::json!({"index": 2, "count": 2}),
        "executions[0].shard is 2/2",
    );
}

#[test]
fn energy_from_an_execution_without_a_counter_is_refused() {
    let mut b = sample_bundle();
    b.provenance.executions = vec![execution(Some(unavailable("no RAPL")))];
    b.cells[0].execution = Some(0);
    read_bundle(&write_bundle(&b)).expect("no energy where there was no counter: reads");
    b.cells[0].repetitions[0].energy_j = Some(1.5);
    let err = read_bundle(&write_bundle(&b)).expect_err("must be refused").to_string();
    let want = "cells[0].repetitions[0].energy_j is 1.5 but provenance.executions[0].energy says energy was \
                unavailable (no RAPL); fix: remove energy_j";
    assert!(err.contains(want), "{err:?}");
}
