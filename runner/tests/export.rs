//! `dllm-bench export`: the demo's bundles as CSV, Parquet and JSON Lines, each read back by a reader of its own
//! (a CSV parser here, serde_json, the parquet crate's record reader); row counts against the bundle's (cell,
//! repetition) pairs, one value of each column family against the bundle and `metrics`, unmeasured values empty or
//! null; several bundles and older versions; the parity table; and the refusals (exit 2).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::assert_exit;
use crate::util::{Sandbox, mark_oom, stderr, stdout, with_ar_oom};

/// A row as read back: column name -> value (strings for CSV fields, JSON values otherwise; null when empty).
type Row = BTreeMap<String, Value>;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../schema/tests/fixtures").join(rel)
}

/// Copies a fixture bundle into the sandbox (the export's folder stays the sandbox's).
fn copy_fixture(sb: &Sandbox, rel: &str, name: &str) -> PathBuf {
    let to = sb.path().join(name);
    std::fs::copy(fixture(rel), &to).expect("copy fixture");
    to
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf8 path")
}

/// RFC 4180: fields separated by commas, quoted fields with doubled quotes, lines ending in `\n`.
fn parse_csv(text: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let mut records: Vec<Vec<String>> = Vec::new();
    let (mut record, mut field, mut quoted, mut in_quotes) = (Vec::new(), String::new(), false, false);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (in_quotes, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => in_quotes = false,
            (true, c) => field.push(c),
            (false, '"') => (in_quotes, quoted) = (true, true),
            (false, ',') => {
                record.push(std::mem::take(&mut field));
                quoted = false;
            }
            (false, '\n') => {
                record.push(std::mem::take(&mut field));
                records.push(std::mem::take(&mut record));
                quoted = false;
            }
            (false, c) => field.push(c),
        }
    }
    assert!(!in_quotes && field.is_empty() && record.is_empty() && !quoted, "CSV ends with a line end");
    let mut it = records.into_iter();
    let header = it.next().expect("a header line");
    (header, it.collect())
}

fn read_csv(path: &Path) -> (Vec<String>, Vec<Row>) {
    let (header, records) = parse_csv(&std::fs::read_to_string(path).expect("csv"));
    let rows = records
        .into_iter()
        .map(|r| {
            assert_eq!(r.len(), header.len(), "every line has every column");
            header
                .iter()
                .cloned()
                .zip(r.into_iter().map(|f| if f.is_empty() { Value::Null } else { Value::String(f) }))
                .collect()
        })
        .collect();
    (header, rows)
}

fn read_jsonl(path: &Path) -> (Vec<String>, Vec<Row>) {
    let text = std::fs::read_to_string(path).expect("jsonl");
    let mut header = Vec::new();
    let rows: Vec<Row> = text
        .lines()
        .map(|line| {
            let v: serde_json::Map<String, Value> = serde_json::from_str(line).expect("a JSON object per line");
            // The columns in the table's order (serde_json's map is sorted: read the keys off the line itself).
            if header.is_empty() {
                let mut de = serde_json::Deserializer::from_str(line);
                header = serde::Deserialize::deserialize(&mut de).map(|k: keys::InOrder| k.0).expect("object");
            }
            v.into_iter().collect()
        })
        .collect();
    (header, rows)
}

/// The keys of a JSON object in the order written (serde_json's map sorts them).
mod keys {
    pub struct InOrder(pub Vec<String>);

    impl<'de> serde::Deserialize<'de> for InOrder {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Keys;
            impl<'de> serde::de::Visitor<'de> for Keys {
                type Value = InOrder;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<InOrder, A::Error> {
                    let mut keys = Vec::new();
                    while let Some((k, _)) = map.next_entry::<String, serde::de::IgnoredAny>()? {
                        keys.push(k);
                    }
                    Ok(InOrder(keys))
                }
            }
            d.deserialize_map(Keys)
        }
    }
}

/// Reads a Parquet file with the parquet crate's own record reader.
fn read_parquet(path: &Path) -> (Vec<String>, Vec<Row>) {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;
    let reader = SerializedFileReader::new(std::fs::File::open(path).expect("open")).expect("a Parquet file");
    let schema = reader.metadata().file_metadata().schema_descr();
    let header: Vec<String> = schema.columns().iter().map(|c| c.name().to_string()).collect();
    let rows = reader
        .get_row_iter(None)
        .expect("rows")
        .map(|row| {
            row.expect("row")
                .get_column_iter()
                .map(|(name, field)| {
                    let v = match field {
                        Field::Null => Value::Null,
                        Field::Bool(b) => Value::Bool(*b),
                        Field::ULong(n) => Value::from(*n),
                        Field::Double(x) => Value::from(*x),
                        Field::Str(t) => Value::String(t.clone()),
                        other => panic!("{name}: unexpected Parquet field {other:?}"),
                    };
                    (name.clone(), v)
                })
                .collect()
        })
        .collect();
    (header, rows)
}

/// A number of a row (a JSON number, or a CSV field's text); `None` when null.
fn num(row: &Row, col: &str) -> Option<f64> {
    match row.get(col).unwrap_or_else(|| panic!("no column {col}")) {
        Value::Null => None,
        Value::Number(n) => n.as_f64(),
        Value::String(t) => Some(t.parse().unwrap_or_else(|_| panic!("{col}: {t} is not a number"))),
        other => panic!("{col}: {other} is not a number"),
    }
}

fn text(row: &Row, col: &str) -> Option<String> {
    match row.get(col).unwrap_or_else(|| panic!("no column {col}")) {
        Value::Null => None,
        Value::String(t) => Some(t.clone()),
        other => panic!("{col}: {other} is not text"),
    }
}

fn flag(row: &Row, col: &str) -> Option<bool> {
    match row.get(col).unwrap_or_else(|| panic!("no column {col}")) {
        Value::Null => None,
        Value::Bool(b) => Some(*b),
        Value::String(t) => Some(t.parse().unwrap_or_else(|_| panic!("{col}: {t} is not a boolean"))),
        other => panic!("{col}: {other} is not a boolean"),
    }
}

/// A list column: a JSON array (JSON Lines), or its text (CSV, Parquet).
fn list(row: &Row, col: &str) -> Option<Vec<f64>> {
    let v = match row.get(col).unwrap_or_else(|| panic!("no column {col}")) {
        Value::Null => return None,
        Value::String(t) => serde_json::from_str(t).expect("JSON text"),
        v => v.clone(),
    };
    Some(v.as_array().expect("an array").iter().map(|x| x.as_f64().expect("a number")).collect())
}

fn export(sb: &Sandbox, args: &[&str]) {
    let out = sb.cmd(&[&["export"], args].concat());
    assert_exit!(out, 0);
}

/// The (cell index, repetition index) of each row the repetitions table has for a bundle, in order.
fn expected_rows(b: &schema::Bundle) -> Vec<(usize, Option<usize>)> {
    b.cells
        .iter()
        .enumerate()
        .flat_map(|(i, c)| match c.repetitions.len() {
            0 => vec![(i, None)],
            n => (0..n).map(|r| (i, Some(r))).collect(),
        })
        .collect()
}

/// Checks a read-back repetitions table against the bundle it came from: one value per column family.
fn check_repetitions(rows: &[Row], b: &schema::Bundle, bundle_name: &str) {
    let want = expected_rows(b);
    assert_eq!(rows.len(), want.len(), "one row per (cell, repetition)");
    let summaries = metrics::derive::summaries(b);
    let quality = metrics::parity::cell_quality(b);
    let evaluator = "quality_perplexity[dllm-bench/synthetic-evaluator-tiny]";
    let (mut ar, mut diffusion, mut with_quality) = (0, 0, 0);
    for (row, &(ci, ri)) in rows.iter().zip(&want) {
        let cell = &b.cells[ci];
        let key = &cell.key;
        // The bundle, and its synthetic weights in every row.
        assert_eq!(text(row, "bundle").as_deref(), Some(bundle_name));
        assert_eq!(flag(row, "synthetic_weights"), Some(b.provenance.synthetic_weights));
        // The key.
        assert_eq!(num(row, "cell"), Some(ci as f64));
        assert_eq!(text(row, "model").as_deref(), Some(key.model.as_str()));
        assert_eq!(num(row, "batch_size"), Some(f64::from(key.batch_size)));
        assert_eq!(num(row, "seq_len"), Some(f64::from(key.seq_len)));
        assert_eq!(num(row, "steps"), key.steps.map(f64::from));
        assert_eq!(num(row, "threshold"), key.threshold.map(|t| t.value()));
        assert_eq!(text(row, "cache"), key.cache.map(|c| c.name().to_string()));
        assert_eq!(
            text(row, "status").as_deref(),
            Some(if cell.status == schema::CellStatus::Ok { "ok" } else { "oom" })
        );
        assert_eq!(num(row, "repetition"), ri.map(|r| r as f64));
        let rep = ri.map(|r| &cell.repetitions[r]);
        // Raw measurements, exactly as stored; absent ones null.
        assert_eq!(num(row, "e2e_ms"), rep.map(|r| r.e2e_ms));
        assert_eq!(num(row, "prefill_ms"), rep.and_then(|r| r.prefill_ms));
        assert_eq!(num(row, "first_block_ms"), rep.and_then(|r| r.first_block_ms));
        assert_eq!(num(row, "peak_rss_bytes"), rep.and_then(|r| r.peak_rss_bytes).map(|v| v as f64));
        assert_eq!(num(row, "peak_allocated_bytes"), None, "a CPU bundle has no device peaks");
        assert_eq!(num(row, "batch_output_tokens"), rep.map(|r| r.output_tokens as f64));
        assert_eq!(list(row, "step_ms"), rep.and_then(|r| r.step_ms.clone()));
        assert_eq!(list(row, "prompt_indices"), rep.map(|r| r.prompt_indices.iter().map(|&p| f64::from(p)).collect()));
        // Derived per repetition and per cell, by `metrics`.
        assert_eq!(num(row, "tokens_per_s"), rep.and_then(metrics::derive::tokens_per_s));
        assert_eq!(num(row, "itl_ms"), rep.and_then(|r| metrics::derive::itl_ms(r, key.output_tokens)));
        // (A cell that did not finish has no cell summary; its raw repetitions above stay.)
        let summary = &summaries[ci];
        assert_eq!(num(row, "e2e_ms_median"), summary.e2e_ms.map(|s| s.median));
        assert_eq!(num(row, "tokens_per_s_std"), summary.tokens_per_s.and_then(|s| s.std));
        assert_eq!(num(row, "step_ms_mean"), summary.step_ms.map(|s| s.mean));
        assert_eq!(num(row, "tokens_per_forward"), summary.tokens_per_forward);
        assert_eq!(num(row, "peak_rss_bytes_max"), summary.peak_rss_bytes.map(|v| v as f64));
        assert_eq!(num(row, "cell_steps"), metrics::derive::cell_steps(cell).map(f64::from));
        // Quality per evaluator: the cell's group's value.
        let q = quality[ci]
            .iter()
            .find(|q| q.metric == "perplexity" && q.evaluator.as_deref() == Some("dllm-bench/synthetic-evaluator-tiny"))
            .map(|q| q.value);
        assert_eq!(num(row, evaluator), q, "{key}");
        with_quality += usize::from(q.is_some());
        match key.sampler {
            schema::Sampler::ArGreedy => {
                ar += 1;
                assert!(rep.is_none() || num(row, "prefill_ms").is_some(), "AR: TTFT measured");
                assert_eq!(num(row, "first_block_ms"), None, "AR: no first block, empty, not 0");
                assert_eq!(num(row, "step_ms_median"), None, "AR: no diffusion steps");
            }
            _ => {
                diffusion += 1;
                assert_eq!(num(row, "prefill_ms"), None, "diffusion: no prefill, empty, not 0");
                assert_eq!(num(row, "itl_ms"), None);
            }
        }
    }
    assert!(ar > 0 && diffusion > 0 && with_quality > 0, "both kinds of rows and quality values were checked");
}

#[test]
fn a_bundle_exports_to_each_format_and_reads_back_with_the_same_rows_and_values() {
    let sb = Sandbox::new();
    let bundle = copy_fixture(&sb, "v1.5/demo-series.json", "demo.json");
    let b = schema::read_bundle(&std::fs::read_to_string(&bundle).expect("bundle")).expect("valid");
    let mut headers = Vec::new();
    for (file, format) in [("out.csv", "csv"), ("out.jsonl", "jsonl"), ("out.parquet", "parquet")] {
        let out = sb.path().join(file);
        // The format named, and inferred from the extension: the same bytes.
        export(&sb, &[s(&bundle), "--format", format, "-o", s(&out)]);
        let named = std::fs::read(&out).expect("export");
        export(&sb, &[s(&bundle), "-o", s(&out)]);
        assert_eq!(std::fs::read(&out).expect("export"), named, "{format}: --format and the extension agree");
        let (header, rows) = match format {
            "csv" => read_csv(&out),
            "jsonl" => read_jsonl(&out),
            _ => read_parquet(&out),
        };
        check_repetitions(&rows, &b, "demo.json");
        headers.push(header);
    }
    assert!(headers.windows(2).all(|w| w[0] == w[1]), "every format has the same columns in the same order");
    // Written atomically: nothing but the bundle and the three exports in the folder.
    let mut names: Vec<String> = std::fs::read_dir(sb.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf8"))
        .collect();
    names.sort();
    assert_eq!(names, ["demo.json", "out.csv", "out.jsonl", "out.parquet"]);
}

#[test]
fn several_bundles_of_several_versions_are_told_apart_by_the_bundle_column() {
    let sb = Sandbox::new();
    let old = copy_fixture(&sb, "v1.0/demo.json", "old.json");
    let new = copy_fixture(&sb, "v1.5/demo-series.json", "new.json");
    let out = sb.path().join("both.csv");
    let run = sb.cmd(&["export", s(&old), s(&new), "-o", s(&out)]);
    assert_exit!(run, 0);
    assert_eq!(stdout(&run).trim(), s(&out));
    assert!(stderr(&run).contains("SYNTHETIC"), "{}", stderr(&run));
    let (_, rows) = read_csv(&out);
    let read = |p: &Path| schema::read_bundle(&std::fs::read_to_string(p).expect("bundle")).expect("valid");
    let (b_old, b_new) = (read(&old), read(&new));
    let n_old = expected_rows(&b_old).len();
    assert_eq!(rows.len(), n_old + expected_rows(&b_new).len());
    // The 1.0 bundle (upgraded on reading) has neither quality nor analytic counts: empty, not 0.
    check_repetitions(&rows[n_old..], &b_new, "new.json");
    for row in &rows[..n_old] {
        assert_eq!(text(row, "bundle").as_deref(), Some("old.json"));
        assert_eq!(num(row, "kv_cache_bytes"), None);
        assert_eq!(num(row, "flop_count"), None);
        assert_eq!(num(row, "quality_perplexity[dllm-bench/synthetic-evaluator-tiny]"), None);
    }
    assert!(rows[..n_old].iter().all(|r| num(r, "e2e_ms").is_some()));
    // Two bundles of one file name (two run folders' bundle.json): the paths tell them apart. (Two runs: the second
    // written a second later; a copy of one run is refused.)
    for (dir, second) in [("a", "0"), ("b", "1")] {
        std::fs::create_dir(sb.path().join(dir)).expect("mkdir");
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&new).expect("new")).expect("json");
        let at = v["provenance"]["created_at"].as_str().expect("created_at").to_string();
        v["provenance"]["created_at"] = format!("{}{second}Z", &at[..at.len() - 2]).into();
        std::fs::write(sb.path().join(dir).join("bundle.json"), v.to_string()).expect("write");
    }
    let out = sb.path().join("shards.jsonl");
    let (a, b) = (sb.path().join("a/bundle.json"), sb.path().join("b/bundle.json"));
    export(&sb, &[s(&a), s(&b), "-o", s(&out)]);
    let (_, rows) = read_jsonl(&out);
    let names: std::collections::BTreeSet<String> = rows.iter().filter_map(|r| text(r, "bundle")).collect();
    assert_eq!(names.into_iter().collect::<Vec<_>>(), [s(&a), s(&b)]);
}

#[test]
fn a_cell_without_repetitions_is_one_row_with_its_status_and_nothing_measured() {
    let sb = Sandbox::new();
    let mut json: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("v1.5/demo-series.json")).expect("fixture"))
            .expect("json");
    // A diffusion cell of the smallest batch (not its group's quality cell) ran out of memory.
    let cells = json["cells"].as_array_mut().expect("cells");
    let i = cells
        .iter()
        .position(|c| c["key"]["sampler"] != "ar_greedy" && c["key"]["batch_size"] == 1)
        .expect("a diffusion cell at B = 1");
    mark_oom(&mut cells[i]);
    let bundle = sb.write("oom.json", &json.to_string());
    let b = schema::read_bundle(&std::fs::read_to_string(&bundle).expect("bundle")).expect("still valid");
    let out = sb.path().join("oom.parquet");
    export(&sb, &[s(&bundle), "-o", s(&out)]);
    let (_, rows) = read_parquet(&out);
    check_repetitions(&rows, &b, "oom.json");
    let failed: Vec<&Row> = rows.iter().filter(|r| num(r, "cell") == Some(i as f64)).collect();
    assert_eq!(failed.len(), 1);
    let row = failed[0];
    assert_eq!(text(row, "status").as_deref(), Some("oom"));
    assert_eq!(text(row, "status_message").as_deref(), Some("CUDA out of memory (test)"));
    for col in ["repetition", "e2e_ms", "tokens_per_s", "e2e_ms_median", "forward_passes", "tokens_per_forward"] {
        assert_eq!(num(row, col), None, "{col}: nothing measured is null, not 0");
    }
    // Out of memory after two repetitions (the runner keeps the finished ones): they are exported as measured,
    // but the cell has no summary, as `report` and `compare` give it no timing.
    let cells = json["cells"].as_array_mut().expect("cells");
    let j = cells
        .iter()
        .position(|c| c["key"]["sampler"] == "ar_greedy" && c["repetitions"].as_array().is_some_and(|r| r.len() >= 2))
        .expect("an AR cell with repetitions");
    cells[j]["status"] = serde_json::json!({"state": "oom", "message": "CUDA out of memory (test)"});
    let kept = cells[j]["repetitions"].as_array().expect("reps").len();
    let bundle = sb.write("oom-late.json", &json.to_string());
    let b = schema::read_bundle(&std::fs::read_to_string(&bundle).expect("bundle")).expect("still valid");
    let out = sb.path().join("oom-late.csv");
    export(&sb, &[s(&bundle), "-o", s(&out)]);
    let (_, rows) = read_csv(&out);
    check_repetitions(&rows, &b, "oom-late.json");
    let late: Vec<&Row> = rows.iter().filter(|r| num(r, "cell") == Some(j as f64)).collect();
    assert_eq!(late.len(), kept);
    for row in late {
        assert_eq!(text(row, "status").as_deref(), Some("oom"));
        assert!(num(row, "e2e_ms").is_some() && num(row, "tokens_per_s").is_some(), "the repetition as measured");
        for col in ["e2e_ms_median", "tokens_per_s_median", "itl_ms_median", "peak_rss_bytes_max"] {
            assert_eq!(num(row, col), None, "{col}: no summary of a cell that did not finish");
        }
    }
    let report = sb.cmd(&["report", s(&bundle)]);
    assert!(stdout(&report).contains("have no timing"), "{}", stdout(&report));
}

#[test]
fn a_bundle_without_a_quality_table_exports_the_records_report_prints() {
    // Format 1.0 with quality values but no [quality] table and no stored records: `report` finds the metric in
    // the cells; the export's parity table has those records, not none.
    let sb = Sandbox::new();
    let bundle = sb.path().join("study.json");
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../explorer/e2e/fixtures/study-h200.json");
    std::fs::copy(fixture, &bundle).expect("copy");
    let b = runner::input::read_bundle_file(&bundle).expect("reads").bundle;
    assert!(b.parity.is_empty() && b.provenance.config.quality.is_none(), "the fixture is that bundle");
    let opts = runner::report::resolve(&b, &runner::report::ReportOptions::default()).expect("quality in the cells");
    let records = metrics::parity::parity(&b, &opts);
    assert!(!records.is_empty());
    let out = sb.path().join("parity.jsonl");
    export(&sb, &[s(&bundle), "--table", "parity", "-o", s(&out)]);
    let (_, rows) = read_jsonl(&out);
    let rows_per_record: usize = records.iter().map(|r| r.speedups.len().max(1)).sum();
    assert_eq!(rows.len(), rows_per_record);
    for (row, record) in rows.iter().zip(records.iter().flat_map(|r| std::iter::repeat_n(r, r.speedups.len().max(1)))) {
        assert_eq!(text(row, "source").as_deref(), Some("recomputed"));
        assert_eq!(text(row, "s_parity_text"), Some(metrics::parity::s_parity_text(record)));
    }
    let report = stdout(&sb.cmd(&["report", s(&bundle)]));
    for r in &records {
        assert!(report.contains(&metrics::parity::s_parity_text(r)), "{report}");
    }
}

#[test]
fn the_parity_table_has_a_row_per_record_and_batch_size() {
    let sb = Sandbox::new();
    let bundle = copy_fixture(&sb, "v1.5/demo-series.json", "demo.json");
    let b = schema::read_bundle(&std::fs::read_to_string(&bundle).expect("bundle")).expect("valid");
    assert!(!b.parity.is_empty(), "the fixture stores S_parity records");
    let opts = metrics::parity::ParityOptions::from_config(&b).expect("the fixture's config has a [quality] table");
    let records = metrics::parity::parity(&b, &opts);
    assert_eq!(records, b.parity, "the fixture's stored records are those its cells give");
    let want: Vec<(&schema::parity::ParityRecord, Option<&schema::parity::SpeedupRow>)> = records
        .iter()
        .flat_map(|r| match r.speedups.is_empty() {
            true => vec![(r, None)],
            false => r.speedups.iter().map(|s| (r, Some(s))).collect(),
        })
        .collect();
    for file in ["parity.jsonl", "parity.csv", "parity.parquet"] {
        let out = sb.path().join(file);
        export(&sb, &[s(&bundle), "--table", "parity", "-o", s(&out)]);
        let (_, rows) = match file {
            "parity.jsonl" => read_jsonl(&out),
            "parity.csv" => read_csv(&out),
            _ => read_parquet(&out),
        };
        assert_eq!(rows.len(), want.len(), "{file}");
        for (row, (record, speedup)) in rows.iter().zip(&want) {
            assert_eq!(text(row, "source").as_deref(), Some("recomputed"));
            assert_eq!(flag(row, "synthetic_weights"), Some(true));
            assert_eq!(text(row, "metric").as_deref(), Some(record.metric.as_str()));
            assert_eq!(text(row, "evaluator"), record.evaluator.clone());
            assert_eq!(num(row, "seq_len"), Some(f64::from(record.seq_len)));
            assert_eq!(flag(row, "thresholded"), Some(record.thresholded));
            assert_eq!(num(row, "baseline"), Some(record.baseline.value));
            assert_eq!(text(row, "s_parity_text"), Some(metrics::parity::s_parity_text(record)));
            let reached = match record.outcome {
                schema::parity::Parity::Reached { steps } => Some(f64::from(steps)),
                _ => None,
            };
            assert_eq!(num(row, "s_parity"), reached);
            // Each bound of the interval, and whether it was reached (an empty bound alone reads as unmeasured).
            let interval = record.s_parity_interval;
            assert_eq!(num(row, "s_parity_high"), interval.and_then(|i| i.high).map(f64::from));
            assert_eq!(flag(row, "s_parity_low_reached"), interval.map(|i| i.low.is_some()));
            assert_eq!(flag(row, "s_parity_high_reached"), interval.map(|i| i.high.is_some()));
            assert_eq!(num(row, "batch_size"), speedup.map(|s| f64::from(s.batch_size)));
            assert_eq!(num(row, "ar_e2e_ms"), speedup.map(|s| s.ar_e2e_ms));
            assert_eq!(num(row, "speedup"), speedup.and_then(|s| s.speedup).map(|e| e.value));
            // The verdict's: the speedup's, and not viable where parity was not reached (no speedup needed).
            let not_reached = matches!(record.outcome, schema::parity::Parity::NotReached { .. });
            assert_eq!(flag(row, "viable"), speedup.and_then(|s| s.viable).or(not_reached.then_some(false)));
        }
        let not_reached: Vec<&Row> =
            rows.iter().filter(|r| text(r, "outcome").as_deref() == Some("not_reached")).collect();
        assert!(!not_reached.is_empty() && not_reached.iter().all(|r| flag(r, "viable") == Some(false)), "{file}");
    }
    // A stale stored record (the bundle edited after it was written): the table, like `report` and the explorer,
    // gives what the cells give, and `validate` says the stored records are stale.
    let mut json: serde_json::Value = serde_json::from_slice(&std::fs::read(&bundle).expect("bundle")).expect("json");
    json["parity"][0]["baseline"]["value"] = serde_json::json!(12345.0);
    let stale = sb.write("stale.json", &json.to_string());
    let out = sb.path().join("stale.csv");
    export(&sb, &[s(&stale), "--table", "parity", "-o", s(&out)]);
    let (_, rows) = read_csv(&out);
    assert_eq!(rows.len(), want.len());
    assert!(rows.iter().all(|r| num(r, "baseline") != Some(12345.0)), "the stale value is not exported");
    assert_eq!(num(&rows[0], "baseline"), Some(want[0].0.baseline.value));
    let v = sb.cmd(&["validate", s(&stale)]);
    assert_exit!(v, 0);
    assert!(
        stdout(&v).contains("stale")
            && stdout(&v).contains("parity[0], ")
            && stdout(&v).contains("differs in baseline;"),
        "{}",
        stdout(&v)
    );
    let v = sb.cmd(&["validate", s(&bundle)]);
    assert!(!stdout(&v).contains("stale"), "{}", stdout(&v));
    // A bundle without quality: the header only, and a note.
    let old = copy_fixture(&sb, "v1.0/demo.json", "old.json");
    let out = sb.path().join("none.csv");
    let run = sb.cmd(&["export", s(&old), "--table", "parity", "-o", s(&out)]);
    assert_exit!(run, 0);
    assert!(stderr(&run).contains("no S_parity records"), "{}", stderr(&run));
    let (header, rows) = read_csv(&out);
    assert!(rows.is_empty() && header.contains(&"speedup".to_string()), "{header:?}");
}

#[test]
fn bad_exports_exit_2_naming_the_file_and_the_fix() {
    let sb = Sandbox::new();
    let bundle = copy_fixture(&sb, "v1.5/demo-series.json", "demo.json");
    let before = std::fs::read(&bundle).expect("bundle");
    let folder = sb.path().join("folder");
    std::fs::create_dir(&folder).expect("mkdir");
    let not_json = sb.write("notjson.json", "{ nope");
    let dotted = format!("./{}", "demo.json");
    let copy = sb.path().join("copy of demo.json");
    std::fs::copy(&bundle, &copy).expect("a copy");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        // The output is one of the inputs, by the same name or another.
        (vec![s(&bundle), "--format", "jsonl", "-o", s(&bundle)], "demo.json given as input"),
        (vec![s(&bundle), "--format", "csv", "-o", &dotted], "given as input"),
        (vec![s(&bundle), "-o", s(&bundle)], "given as input"),
        (vec![s(&bundle), "--format", "xlsx", "-o", "out.xlsx"], "xlsx"),
        (vec![s(&bundle), "-o", "out.xlsx"], "the extension .xlsx names no export format"),
        (vec![s(&bundle), "-o", "out"], "no extension"),
        (vec![s(&bundle), "--format", "csv", "-o", s(&folder)], "is a folder"),
        (vec![s(&bundle), "-o", "out.csv", "--table", "cells"], "cells"),
        (vec!["missing.json", "-o", "out.csv"], "missing.json: no such file"),
        (vec![s(&bundle), &dotted, "-o", "out.csv"], "given twice"),
        (vec![s(&bundle), s(&copy), "-o", "out.csv"], "hold the same run"),
        (vec![s(&bundle), "--format", "parquet", "-o", "out.csv"], "names a .csv file and --format is parquet"),
        (vec![s(&not_json), "-o", "out.csv"], "notjson.json"),
        // `-` is neither standard output nor standard input here, and says so.
        (vec![s(&bundle), "--format", "csv", "-o", "-"], "`-` would make one named `-`"),
        (vec!["-", "-o", "out.csv"], "`-` names no file"),
    ];
    for (args, expect) in cases {
        let out = sb.cmd(&[&["export"], args.as_slice()].concat());
        assert_exit!(out, 2);
        let err = stderr(&out);
        assert!(err.contains(expect), "{args:?}: {err}");
        if !expect.contains("xlsx") && expect != "cells" {
            assert!(err.contains("fix"), "{args:?}: says the fix: {err}");
        }
    }
    assert_eq!(std::fs::read(&bundle).expect("bundle"), before, "the bundle is untouched");
    assert!(!sb.path().join("out.csv").exists(), "nothing written on a refusal");
}

#[test]
fn a_fresh_demo_run_exports_every_cell_and_repetition() {
    // The CLI tests' small demo grid: the bundle the current runner writes, not a stored fixture.
    let sb = Sandbox::new();
    let results = sb.results();
    let quick = ["--seq-len", "40", "--batch-size", "1,2", "--steps", "4,8", "--repetitions", "2"];
    let run = sb.cmd(&[&["run", "-q", "--output-dir", s(&results)], quick.as_slice()].concat());
    assert_exit!(run, 0);
    let bundle = PathBuf::from(stdout(&run).trim());
    let b = schema::read_bundle(&std::fs::read_to_string(&bundle).expect("bundle")).expect("valid");
    let out = sb.path().join("demo.parquet");
    export(&sb, &[s(&bundle), "-o", s(&out)]);
    let (_, rows) = read_parquet(&out);
    let name = bundle.file_name().and_then(|n| n.to_str()).expect("file name");
    check_repetitions(&rows, &b, name);
}

#[test]
fn the_parity_table_keeps_a_batch_size_whose_autoregressive_cell_ran_out_of_memory_as_a_row_with_nothing_measured() {
    let sb = Sandbox::new();
    // The AR cell at B = 1, N = 48 (not its group's quality cell) ran out of memory.
    let bundle = with_ar_oom(&sb, "oom.json", &[1], false);
    let out = sb.path().join("parity.jsonl");
    export(&sb, &[s(&bundle), "--table", "parity", "-o", s(&out)]);
    let (_, rows) = read_jsonl(&out);
    let at = |n: f64, b: f64| -> Vec<&Row> {
        rows.iter().filter(|r| num(r, "seq_len") == Some(n) && num(r, "batch_size") == Some(b)).collect()
    };
    let oom = at(48.0, 1.0);
    assert!(!oom.is_empty(), "each N = 48 record keeps B = 1");
    for row in oom {
        assert_eq!(text(row, "ar_cell").as_deref(), Some("dllm-bench/synthetic-llama-tiny N=48 B=1"));
        for col in ["ar_e2e_ms", "diffusion_e2e_ms", "speedup"] {
            assert_eq!(num(row, col), None, "{col}: nothing measured is null");
        }
        // No verdict without the baseline's latency, but not viable where parity was not reached, as `report`.
        let not_reached = text(row, "outcome").as_deref() == Some("not_reached");
        assert_eq!(flag(row, "viable"), not_reached.then_some(false));
        let note = text(row, "note").expect("why");
        assert_eq!(note, metrics::parity::unfinished_baseline_text("ran out of memory"));
    }
    // The other rows are as before: N = 96 keeps its measured B = 1, and each record's rows go by B.
    assert!(at(96.0, 1.0).iter().all(|r| num(r, "ar_e2e_ms").is_some()));
    let bs: Vec<f64> = rows.iter().filter_map(|r| num(r, "batch_size")).collect();
    assert_eq!(bs, [1.0, 4.0, 8.0].repeat(rows.len() / 3), "{bs:?}");
}
