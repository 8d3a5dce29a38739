//! Malformed bundles are refused with messages that say what is wrong.

use schema::{BundleError, read_bundle, write_bundle};

use crate::util::sample_bundle;

fn valid() -> serde_json::Value {
    serde_json::from_str(&write_bundle(&sample_bundle())).expect("json")
}

fn refuse(text: &str, expect: &str) {
    let err = read_bundle(text).expect_err("must be refused");
    let msg = err.to_string();
    assert!(msg.contains(expect), "message {msg:?} should mention {expect:?}");
}

fn refuse_value(edit: impl FnOnce(&mut serde_json::Value), expect: &str) {
    let mut v = valid();
    edit(&mut v);
    refuse(&v.to_string(), expect);
}

#[test]
fn not_json() {
    refuse("{\"schema_version\": \"1.0\", ", "not a valid JSON file");
    refuse("", "not a valid JSON file");
}

#[test]
fn top_level_not_an_object() {
    refuse("[1, 2, 3]", "top level is not a JSON object");
}

#[test]
fn missing_version() {
    refuse_value(|v| drop(v.as_object_mut().map(|o| o.remove("schema_version"))), "`schema_version` is missing");
}

#[test]
fn version_of_wrong_type_or_shape() {
    refuse_value(|v| v["schema_version"] = serde_json::json!(1), "must be a string");
    refuse_value(|v| v["schema_version"] = serde_json::json!("one"), "is not MAJOR.MINOR");
}

#[test]
fn newer_major() {
    let up_to = format!("reads versions up to {}", schema::SchemaVersion::CURRENT);
    refuse_value(|v| v["schema_version"] = serde_json::json!("3.1"), &up_to);
}

#[test]
fn missing_provenance() {
    refuse_value(|v| drop(v.as_object_mut().map(|o| o.remove("provenance"))), "missing field `provenance`");
}

#[test]
fn wrong_type_names_the_path() {
    let err = {
        let mut v = valid();
        v["cells"][2]["key"]["batch_size"] = serde_json::json!("four");
        read_bundle(&v.to_string()).expect_err("refused")
    };
    match &err {
        BundleError::Invalid { path, .. } => assert_eq!(path, "cells[2].key.batch_size"),
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn unknown_status_state() {
    refuse_value(|v| v["cells"][0]["status"] = serde_json::json!({"state": "exploded"}), "cells[0].status");
}

#[test]
fn unknown_sampler() {
    refuse_value(|v| v["cells"][0]["key"]["sampler"] = serde_json::json!("beam"), "unknown variant `beam`");
}

#[test]
fn cell_of_unknown_model() {
    refuse_value(|v| v["cells"][0]["key"]["model"] = serde_json::json!("nobody/nothing"), "not in `models`");
}

#[test]
fn sampler_of_the_wrong_architecture() {
    refuse_value(|v| v["cells"][0]["key"]["sampler"] = serde_json::json!("llada_random"), "runs sampler");
}

#[test]
fn duplicate_cells() {
    refuse_value(
        |v| {
            let first = v["cells"][0].clone();
            v["cells"].as_array_mut().expect("cells").push(first);
        },
        "repeats the key",
    );
}

#[test]
fn ok_cell_without_measurements() {
    refuse_value(|v| v["cells"][0]["repetitions"] = serde_json::json!([]), "has no repetitions");
}

#[test]
fn negative_latency() {
    refuse_value(|v| v["cells"][0]["repetitions"][0]["e2e_ms"] = serde_json::json!(-3.0), "must be finite and >= 0");
}

#[test]
fn missing_latency() {
    refuse_value(
        |v| drop(v["cells"][0]["repetitions"][0].as_object_mut().map(|o| o.remove("e2e_ms"))),
        "missing field `e2e_ms`",
    );
}

#[test]
fn a_cell_status_is_read_as_written_and_a_bad_one_is_named() {
    use schema::CellStatus;
    // Every form round-trips (the status is read by hand, not by serde's derive: they must agree).
    for status in [
        CellStatus::Ok,
        CellStatus::Oom { message: "out of memory at B=8".into() },
        CellStatus::Error { message: "NaN logits".into() },
        CellStatus::Skipped { reason: "interrupted".into() },
    ] {
        let text = serde_json::to_string(&status).expect("serialize");
        assert_eq!(serde_json::from_str::<CellStatus>(&text).expect("read back"), status, "{text}");
    }
    refuse_value(
        |v| v["cells"][0]["status"] = serde_json::json!({"state": "lost"}),
        "unknown variant `lost`, expected one of `ok`, `oom`, `error`, `skipped`",
    );
    refuse_value(|v| v["cells"][0]["status"] = serde_json::json!({"state": "oom"}), "missing field `message`");
    refuse_value(|v| v["cells"][0]["status"] = serde_json::json!({"message": "x"}), "missing field `state`");
    refuse_value(|v| v["cells"][0]["status"] = serde_json::json!("ok"), "cells[0].status");
}

#[test]
fn a_parity_outcome_is_read_as_written() {
    use schema::parity::Parity;
    for p in [Parity::Reached { steps: 8 }, Parity::NotReached { max_steps: 64 }, Parity::NoData] {
        let text = serde_json::to_string(&p).expect("serialize");
        assert_eq!(serde_json::from_str::<Parity>(&text).expect("read back"), p, "{text}");
    }
    let e = serde_json::from_str::<Parity>(r#"{"outcome": "reached"}"#).expect_err("no steps");
    assert!(e.to_string().contains("missing field `steps`"), "{e}");
    let e = serde_json::from_str::<Parity>(r#"{"outcome": "maybe"}"#).expect_err("unknown outcome");
    assert!(e.to_string().contains("unknown variant `maybe`"), "{e}");
}

#[test]
fn a_byte_order_mark_is_not_part_of_the_json() {
    let text = format!("\u{feff}{}", write_bundle(&sample_bundle()));
    read_bundle(&text).expect("a bundle saved with a BOM reads");
}

/// The first repetition of the first AR cell (it has a prefill time).
fn ar_rep(v: &mut serde_json::Value) -> &mut serde_json::Value {
    let cells = v["cells"].as_array_mut().expect("cells");
    let cell = cells.iter_mut().find(|c| c["key"].get("steps").is_none()).expect("an AR cell");
    &mut cell["repetitions"][0]
}

/// The first repetition of a diffusion cell with step times (K = its key's steps).
fn diffusion_rep(v: &mut serde_json::Value) -> (&mut serde_json::Value, u64) {
    let cells = v["cells"].as_array_mut().expect("cells");
    let cell = cells
        .iter_mut()
        .find(|c| c["key"]["steps"].is_u64() && c["repetitions"][0]["step_ms"].is_array())
        .expect("a diffusion cell with step times");
    let k = cell["key"]["steps"].as_u64().expect("K");
    (&mut cell["repetitions"][0], k)
}

#[test]
fn forwards_that_contradict_the_steps_are_refused() {
    let series = include_str!("fixtures/v1.5/demo-series.json");
    let refuse_in = |edit: &dyn Fn(&mut serde_json::Value), expect: &str| {
        let mut v: serde_json::Value = serde_json::from_str(series).expect("fixture");
        read_bundle(&v.to_string()).expect("the fixture reads");
        edit(&mut v);
        refuse(&v.to_string(), expect);
    };
    refuse_in(&|v| diffusion_rep(v).0["forward_passes"] = serde_json::json!(0), "forward_passes is 0");
    refuse_in(&|v| diffusion_rep(v).0["forward_passes"] = serde_json::json!(1_000_000), "forward_passes 1000000 but");
    refuse_in(
        &|v| {
            let (rep, k) = diffusion_rep(v);
            rep["step_ms"] = serde_json::json!(vec![1e-3; k as usize + 1]);
            rep["forward_passes"] = serde_json::json!(k + 1);
            rep.as_object_mut().expect("rep").remove("committed_per_step");
        },
        "more than the cell's K",
    );
}

#[test]
fn numbers_that_contradict_each_other_are_refused() {
    refuse_value(|v| ar_rep(v)["prefill_ms"] = serde_json::json!(1e6), "prefill_ms 1000000 is more than e2e_ms");
    refuse_value(|v| ar_rep(v)["prompt_indices"] = serde_json::json!([8]), "prompt index 8 is outside the prompt set");
    refuse_value(|v| ar_rep(v)["output_tokens"] = serde_json::json!(1), "output_tokens 1 is not between");
    refuse_value(|v| ar_rep(v)["output_tokens"] = serde_json::json!(1_000_000), "output_tokens 1000000 is not between");
    refuse_value(
        |v| {
            ar_rep(v)["peak_allocated_bytes"] = serde_json::json!(10);
            ar_rep(v)["peak_reserved_bytes"] = serde_json::json!(5);
        },
        "peak_allocated_bytes",
    );
    refuse_value(|v| v["provenance"]["config"]["run"]["repetitions"] = serde_json::json!(0), "run.repetitions");
    refuse_value(|v| v["provenance"]["config"]["grid"]["temperature"] = serde_json::json!(1e308), "grid.temperature");
    refuse_value(|v| v["prompt_set"]["count"] = serde_json::json!(4_294_967_295u32), "prompt_set.count");
    refuse_value(|v| v["provenance"]["shard"] = serde_json::json!({"index": 3, "count": 2}), "provenance.shard");
    refuse_value(|v| v["cells"][0]["key"]["prompt_tokens"] = serde_json::json!(1), "is not seq_len");
}

#[test]
fn impossible_quality_values_are_refused() {
    let set = |metric: &str, value: f64, per_prompt: &[f64]| {
        let metric = metric.to_string();
        let per: Vec<serde_json::Value> =
            per_prompt.iter().enumerate().map(|(i, v)| serde_json::json!({"prompt": i, "value": v})).collect();
        move |v: &mut serde_json::Value| {
            v["cells"][0]["quality"] = serde_json::json!([
                {"metric": metric, "direction": "lower_is_better", "value": value, "per_prompt": per}
            ]);
        }
    };
    refuse_value(set("perplexity", -1.0, &[]), "at least 1");
    refuse_value(set("perplexity", 0.0, &[]), "at least 1");
    refuse_value(set("perplexity", 5.0, &[4.0, 0.5]), "0.5 is not a possible value");
    refuse_value(set("distinct_1", 2.0, &[]), "between 0 and 1");
    refuse_value(set("unigram_entropy", -0.1, &[]), "at least 0");
    refuse_value(set("rouge_l_f1", 0.9, &[0.2, 0.4]), "outside its per-prompt values");
    refuse_value(
        |v| {
            let q = serde_json::json!({"metric": "token_f1", "direction": "higher_is_better", "value": 0.5});
            v["cells"][0]["quality"] = serde_json::json!([q.clone(), q]);
        },
        "token_f1 is listed twice",
    );
    // Possible values read, a metric this reader does not know is not range-checked.
    for (metric, value) in [("perplexity", 1.0), ("rouge_l_f1", 0.0), ("rouge_l_f1", 1.0), ("bleu_like", -3.0)] {
        let mut v = valid();
        set(metric, value, &[value])(&mut v);
        read_bundle(&v.to_string()).unwrap_or_else(|e| panic!("{metric} {value}: {e}"));
    }
}

#[test]
fn cells_that_contradict_the_bundles_own_config_are_refused() {
    refuse_value(
        |v| {
            let out = v["cells"][0]["key"]["output_tokens"].as_u64().expect("N_out");
            v["cells"][0]["key"]["seq_len"] = serde_json::json!(4096);
            v["cells"][0]["key"]["prompt_tokens"] = serde_json::json!(4096 - out);
        },
        "which provenance.config's grid",
    );
    // A diffusion cell at a K, or with a block length, that the grid does not give.
    let diffusion = |v: &serde_json::Value| {
        v["cells"].as_array().expect("cells").iter().position(|c| c["key"]["steps"].is_u64()).expect("a LLaDA cell")
    };
    refuse_value(
        |v| {
            let i = diffusion(v);
            v["cells"][i]["key"]["steps"] = serde_json::json!(4093);
        },
        "is at K = 4093, which provenance.config's grid (steps",
    );
    refuse_value(
        |v| {
            let i = diffusion(v);
            let block = v["cells"][i]["key"]["block_length"].as_u64().expect("block_length");
            v["cells"][i]["key"]["block_length"] = serde_json::json!(block / 2);
        },
        "where provenance.config's grid gives",
    );
    refuse_value(|v| v["cells"][0]["warmup_runs"] = serde_json::json!(99), "warm-ups, more than");
    refuse_value(
        |v| {
            let r = v["cells"][0]["repetitions"][0].clone();
            let reps = v["cells"][0]["repetitions"].as_array_mut().expect("repetitions");
            reps.extend(std::iter::repeat_n(r, 50));
        },
        "repetitions and",
    );
    refuse_value(
        |v| v["cells"][0]["repetitions"][0]["prompt_indices"] = serde_json::json!([0, 1, 2, 3, 4, 5, 6]),
        "prompt indices for B",
    );
    refuse_value(
        |v| {
            let cell = v["cells"]
                .as_array()
                .expect("cells")
                .iter()
                .position(|c| c["key"]["steps"].is_u64())
                .expect("diffusion");
            let r = &mut v["cells"][cell]["repetitions"][0];
            let e2e = r["e2e_ms"].as_f64().expect("e2e");
            r["step_ms"] = serde_json::json!([e2e, e2e]);
            r.as_object_mut().expect("rep").remove("committed_per_step");
        },
        "step times add up to",
    );
    refuse_value(
        |v| {
            let m = v["models"][0].clone();
            v["models"].as_array_mut().expect("models").push(m);
        },
        "is listed twice",
    );
    refuse_value(|v| v["provenance"]["planned_cells"] = serde_json::json!(1), "fewer than the");
}

#[test]
fn times_are_rfc_3339_and_a_status_is_an_object() {
    for good in ["2025-01-31T12:00:00Z", "2024-02-29T23:59:60.123z", "2025-01-31t00:00:00+05:30"] {
        assert!(schema::read::is_rfc3339(good), "{good}");
    }
    for bad in ["yesterday", "2025-01-31", "2025-01-31 12:00:00Z", "2025-02-29T00:00:00Z", "2025-13-01T00:00:00Z"] {
        assert!(!schema::read::is_rfc3339(bad), "{bad}");
    }
    for bad in ["2025-01-31T24:00:00Z", "2025-01-31T12:00:00", "2025-01-31T12:00:00.Z", "2025-01-31T12:00:00+5:30"] {
        assert!(!schema::read::is_rfc3339(bad), "{bad}");
    }
    refuse_value(
        |v| v["provenance"]["created_at"] = "last Tuesday".into(),
        "provenance.created_at is \"last Tuesday\"",
    );
    refuse_value(|v| v["provenance"]["created_at"] = "1.5".into(), "not an RFC 3339 date-time");
    refuse_value(|v| v["cells"][0]["status"] = "ok".into(), "cells[0].status");
    refuse_value(|v| v["cells"][0]["status"] = "ok".into(), "an object with a `state`");
    // A stalled prompt is one of the set; a missing cell is not one the bundle holds.
    refuse_value(|v| v["cells"][0]["stalled_prompts"] = serde_json::json!([99]), "stalled_prompts names prompt 99");
    refuse_value(
        |v| v["provenance"]["missing_cells"] = serde_json::json!([v["cells"][1]["key"].clone()]),
        "provenance.missing_cells[0]",
    );
}

#[test]
fn what_a_hand_edit_can_contradict_is_refused_by_every_reader() {
    // A synthetic model in a bundle not labelled synthetic: every reader would show its numbers unlabelled.
    refuse_value(
        |v| v["provenance"]["synthetic_weights"] = serde_json::json!(false),
        "provenance.synthetic_weights is false but models[0]",
    );
    // Zeros where no measurement is 0.
    for field in ["peak_rss_bytes", "kv_cache_bytes", "weights_read_bytes"] {
        refuse_value(|v| ar_rep(v)[field] = serde_json::json!(0), &format!("{field} is 0"));
        refuse_value(|v| ar_rep(v)[field] = serde_json::json!(0), "never 0");
    }
    // The same fields when measured read.
    let mut v = valid();
    ar_rep(&mut v)["peak_rss_bytes"] = serde_json::json!(1 << 20);
    read_bundle(&v.to_string()).expect("a measured resident set reads");
}

#[test]
fn a_missing_top_level_field_and_a_parity_outcome_of_the_wrong_shape_say_what_they_are() {
    refuse_value(|v| drop(v.as_object_mut().map(|o| o.remove("cells"))), "at the top level: missing field `cells`");
    let mut v: serde_json::Value = serde_json::from_str(include_str!("fixtures/v1.7/demo.json")).expect("fixture");
    v["parity"][0]["outcome"] = serde_json::json!(3);
    refuse(&v.to_string(), "expected an S_parity outcome: an object with `outcome`");
}

#[test]
fn a_value_of_the_wrong_type_where_a_name_goes_names_the_field() {
    // serde_json calls a non-string enum value a syntax error; the file is JSON, and the field is named.
    for bad in [serde_json::json!(null), serde_json::json!(3), serde_json::json!([])] {
        let mut v = valid();
        v["cells"][0]["key"]["sampler"] = bad.clone();
        let err = read_bundle(&v.to_string()).expect_err("must be refused");
        // (Inside an array the parser stops at its first element.)
        let named = matches!(err, BundleError::Invalid { ref path, .. } if path.starts_with("cells[0].key.sampler"));
        assert!(named, "{bad}: {err}");
        assert!(err.to_string().contains("one of the names in quotes"), "{err}");
    }
}

#[test]
fn nan_and_infinity_are_named_as_such_with_their_field() {
    let text = valid().to_string();
    let e2e = text.find("\"e2e_ms\":").expect("a time") + "\"e2e_ms\":".len();
    let end = e2e + text[e2e..].find([',', '}']).expect("its end");
    for bad in ["NaN", "Infinity", "-Infinity"] {
        let err = read_bundle(&format!("{}{bad}{}", &text[..e2e], &text[end..])).expect_err("not JSON");
        // The fix is the error's own (what every reader prints after the message), not the JSON repair's.
        assert!(err.fix().contains("leave the field out where nothing was measured (absent, never NaN)"), "{err}");
        let err = err.to_string();
        assert!(err.starts_with("not a valid JSON file"), "{err}");
        assert!(
            err.contains("`cells[0].repetitions[0].e2e_ms` holds NaN or Infinity at line 1, column "),
            "{bad}: {err}"
        );
        assert!(!err.contains("fix"), "the message names no fix of its own: {err}");
    }
}

#[test]
fn fields_that_come_together_or_agree_with_each_other_are_checked() {
    refuse_value(|v| v["models"][0]["generation"] = serde_json::json!("diffusion"), "models[0].generation is");
    refuse_value(|v| ar_rep(v)["energy_window_ms"] = serde_json::json!(12.0), "energy_j and energy_window_ms come");
    refuse_value(|v| ar_rep(v)["peak_reserved_bytes"] = serde_json::json!(0), "peak_reserved_bytes is 0");
    refuse_value(|v| ar_rep(v)["prefill_ms"] = serde_json::json!(-1e300), "prefill_ms is -1e300 ms");
    refuse_value(
        |v| {
            let k = v["cells"][0]["key"].clone();
            v["cells"].as_array_mut().expect("cells").remove(0);
            v["provenance"]["missing_cells"] = serde_json::json!([k, k]);
        },
        "provenance.missing_cells[1]",
    );
}

#[test]
fn an_object_written_as_an_array_is_refused_naming_it() {
    // serde reads a struct from an array of its fields in declaration order: the cell's key as [model, sampler,
    // steps, B, N, prompt, output] would be read by position. No writer writes one; the reader refuses it, naming the
    // field (and where the types do not line up, the type error names the element).
    let v = valid();
    let key = &v["cells"][0]["key"];
    let fields = ["model", "sampler", "steps", "batch_size", "seq_len", "prompt_tokens", "output_tokens"];
    let positional: Vec<serde_json::Value> = fields.iter().map(|f| key.get(*f).cloned().unwrap_or_default()).collect();
    let mut edited = v.clone();
    edited["cells"][0]["key"] = serde_json::Value::Array(positional);
    let err = read_bundle(&edited.to_string()).expect_err("refused");
    assert!(matches!(&err, BundleError::Invalid { path, .. } if path == "cells[0].key"), "{err}");
    assert!(err.to_string().contains("an array where an object goes (a CellKey)"), "{err}");
    assert!(err.fix().contains("the type the format has"), "{}", err.fix());
    // Deeper, and in a struct with a custom reader (a cell's status).
    let mut edited = v.clone();
    edited["cells"][1]["status"] = serde_json::json!(["ok"]);
    let err = read_bundle(&edited.to_string()).expect_err("refused");
    assert!(matches!(&err, BundleError::Invalid { path, .. } if path == "cells[1].status"), "{err}");
    // The same values as an object read as before.
    read_bundle(&v.to_string()).expect("valid");
}

#[test]
fn a_number_past_f64_is_named_as_one() {
    let mut v = valid();
    v["cells"][0]["repetitions"][0]["e2e_ms"] = serde_json::json!(12345.5);
    let text = v.to_string().replace("12345.5", "1e999");
    let err = read_bundle(&text).expect_err("must be refused").to_string();
    assert!(err.contains("cells[0].repetitions[0].e2e_ms") && err.contains("outside f64's range"), "{err}");
}
