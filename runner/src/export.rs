//! `dllm-bench export`: bundles as one tidy table for pandas, polars or R, in CSV, Parquet or JSON Lines.
//!
//! Two tables:
//! - `repetitions` (the default): one row per (cell, repetition) of every bundle; a cell without repetitions (out
//!   of memory, failed, skipped) is one row whose `repetition` is empty, so a failure is never silently left out.
//!   Columns: the bundle and its device, whether its weights were synthetic; the cell's key and status; every raw
//!   measurement of the repetition (lists as JSON arrays); what `metrics` derives per repetition (ITL, throughput,
//!   achieved rates, activation memory, joules per token and per sequence, mean power); what `metrics` derives per
//!   cell (the summaries of `cell_summary` and `energy::cell_energy` as `_median`, `_mean`, `_std` (empty for one
//!   repetition), `_min`, `_max`, tokens per forward, the largest peaks; empty for a cell that did not finish, whose
//!   raw repetitions a failure after some left: `report` and `compare` give it no timing either); the energy
//!   counter that measured the cell (`energy_source`) or why it has no energy (`energy_unavailable`); the cell's
//!   quality per metric and evaluator
//!   (`metrics::parity::cell_quality`: its own, else its group's).
//! - `parity`: one row per S_parity record and batch size (a record without speedup rows is one row with an empty
//!   `batch_size`): the record as `metrics::parity::parity` computes it from the cells with the options the bundle's
//!   config asks for, as `report` and the explorer do, or, for a bundle whose config names none, as it stores it
//!   (the `source` column says which).
//!
//! Nothing is derived here: every number is a bundle's or a `metrics` function's. A value that was not measured is
//! an empty CSV field and a null in Parquet and JSON Lines, never 0 (so are non-finite numbers, which no format
//! here holds). Integers are unsigned 64-bit (Parquet: INT64 annotated unsigned), floats 64-bit.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use metrics::derive::{CellSummary, Summary};
use metrics::energy::CellEnergy;
use metrics::parity::AtBatch;
use schema::bundle::{ModelInfo, QualityValue};
use schema::parity::{ParityRecord, SpeedupRow};
use schema::{Bundle, Cell, CellStatus, Repetition};

use crate::InputError;

/// `dllm-bench export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// Bundle files (read as `validate` reads them: older versions are upgraded). Each row names its bundle's file.
    #[arg(required = true, value_name = "BUNDLE")]
    pub bundles: Vec<PathBuf>,
    /// The file format [default: from the output's extension: .csv, .parquet or .pq, .jsonl or .ndjson].
    #[arg(long, value_enum)]
    pub format: Option<ExportFormat>,
    /// Which table: one row per (cell, repetition), or one per S_parity record and batch size.
    #[arg(long, value_enum, default_value = "repetitions")]
    pub table: ExportTable,
    /// The file to write (atomically: a temporary file in its folder, then renamed). Not one of the bundles.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
}

/// File formats of `export`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// Comma-separated values with a header line (RFC 4180 quoting); an unmeasured value is an empty field.
    Csv,
    /// Apache Parquet, one row group, snappy-compressed, every column optional (null: not measured).
    Parquet,
    /// JSON Lines: one object per row, every column in every object (null: not measured).
    Jsonl,
}

/// Tables of `export`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportTable {
    /// One row per (cell, repetition): key, raw measurements, derived per-repetition and per-cell numbers, quality.
    Repetitions,
    /// One row per S_parity record and batch size: S_parity with its interval, the speedup at parity, the verdict.
    Parity,
}

/// Runs `dllm-bench export`.
pub fn main(args: &ExportArgs) -> Result<ExitCode> {
    // An output that is one of the inputs would replace the bundle with its own export.
    if let Ok(out) = std::fs::canonicalize(&args.output)
        && let Some(same) = args.bundles.iter().find(|b| std::fs::canonicalize(b).is_ok_and(|b| b == out))
    {
        return Err(InputError(format!(
            "-o {}: is the bundle {} given as input; fix: write the export to another file",
            args.output.display(),
            same.display()
        ))
        .into());
    }
    if args.output.is_dir() {
        return Err(InputError(format!(
            "-o {}: is a folder; fix: name a file to write (e.g. {})",
            args.output.display(),
            args.output.join(format!("export.{}", extension(args.format.unwrap_or(ExportFormat::Csv)))).display()
        ))
        .into());
    }
    let format = match (args.format, format_of(&args.output).ok()) {
        // `-o x.csv --format parquet` would be a Parquet file that CSV readers take for text.
        (Some(f), Some(named)) if f != named => {
            return Err(InputError(format!(
                "-o {} names a .{} file and --format is {}; fix: name the file .{} (or leave --format out)",
                args.output.display(),
                extension(named),
                extension(f),
                extension(f)
            ))
            .into());
        }
        (Some(f), _) => f,
        (None, _) => format_of(&args.output)?,
    };
    let mut bundles = Vec::with_capacity(args.bundles.len());
    let mut seen = std::collections::HashSet::new();
    for path in &args.bundles {
        // One bundle twice would be every row twice.
        if !seen.insert(std::fs::canonicalize(path).unwrap_or_else(|_| path.clone())) {
            return Err(InputError(format!(
                "{}: given twice; fix: name each bundle once (its rows would be in the table twice)",
                path.display()
            ))
            .into());
        }
        let read = crate::input::read_bundle_file(path)?;
        crate::input::note_recounted(path, &read);
        // A copy of a bundle under another name is the same rows again.
        let same_run = |b: &Bundle| {
            b.provenance.created_at == read.bundle.provenance.created_at
                && b.provenance.host == read.bundle.provenance.host
                && b.cells.len() == read.bundle.cells.len()
                && b.cells.iter().zip(&read.bundle.cells).all(|(x, y)| x.key == y.key)
        };
        if let Some(i) = bundles.iter().position(same_run) {
            return Err(InputError(format!(
                "{} and {} hold the same run (written {} on {}, the same cells): a copy given twice; fix: name \
                 each bundle once (its rows would be in the table twice)",
                args.bundles[i].display(),
                path.display(),
                read.bundle.provenance.created_at,
                read.bundle.provenance.host.as_deref().unwrap_or("an unnamed host")
            ))
            .into());
        }
        bundles.push(read.bundle);
    }
    let names = bundle_names(&args.bundles);
    let named: Vec<(&str, &Bundle)> = names.iter().map(String::as_str).zip(&bundles).collect();
    let table = match args.table {
        ExportTable::Repetitions => repetitions_table(&named),
        ExportTable::Parity => parity_table(&named),
    };
    let bytes = match format {
        ExportFormat::Csv => table.to_csv().into_bytes(),
        ExportFormat::Jsonl => table.to_jsonl().into_bytes(),
        ExportFormat::Parquet => table.to_parquet().context("cannot encode the table as Parquet")?,
    };
    crate::output::write_atomic(&args.output, &bytes)?;
    let _ = std::io::Write::write_all(&mut std::io::stdout(), format!("{}\n", args.output.display()).as_bytes());
    let synthetic = bundles.iter().filter(|b| b.provenance.synthetic_weights).count();
    crate::say!(
        "{} rows x {} columns from {} bundle{}{}",
        table.rows.len(),
        table.columns.len(),
        bundles.len(),
        if bundles.len() == 1 { "" } else { "s" },
        match synthetic {
            0 => String::new(),
            n => format!(" ({n} with SYNTHETIC weights: column synthetic_weights; their quality is meaningless)"),
        }
    );
    for (path, b) in args.bundles.iter().zip(&bundles) {
        if let Some(x) = metrics::coverage::partial(b) {
            crate::say!(
                "warning: {} is a PARTIAL bundle ({}): its rows, S_parity and verdicts may change when the rest is \
                 measured ({})",
                path.display(),
                x.counts(),
                metrics::coverage::finish_hint(b)
            );
        }
    }
    if args.table == ExportTable::Parity && table.rows.is_empty() {
        crate::say!("note: no S_parity records (no quality values in the bundles): the table has its header only");
    }
    Ok(ExitCode::SUCCESS)
}

/// The format an output file's extension names.
fn format_of(path: &Path) -> Result<ExportFormat> {
    let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("csv") => Ok(ExportFormat::Csv),
        Some("parquet" | "pq") => Ok(ExportFormat::Parquet),
        Some("jsonl" | "ndjson") => Ok(ExportFormat::Jsonl),
        other => Err(InputError(format!(
            "-o {}: {}; fix: pass --format csv, parquet or jsonl (or name the file .csv, .parquet or .jsonl)",
            path.display(),
            match other {
                Some(e) => format!("the extension .{e} names no export format"),
                None => "no extension to tell the format by".to_string(),
            }
        ))
        .into()),
    }
}

fn extension(format: ExportFormat) -> &'static str {
    match format {
        ExportFormat::Csv => "csv",
        ExportFormat::Parquet => "parquet",
        ExportFormat::Jsonl => "jsonl",
    }
}

/// The `bundle` column of each input: its file name, or the path as given where two inputs share a file name
/// (the shards' `bundle.json` of several run folders).
fn bundle_names(paths: &[PathBuf]) -> Vec<String> {
    let file_name = |p: &PathBuf| p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into());
    let names: Vec<String> = paths.iter().map(file_name).collect();
    let unique = names.iter().enumerate().all(|(i, n)| !names[..i].contains(n));
    match unique {
        true => names,
        false => paths.iter().map(|p| p.display().to_string()).collect(),
    }
}

// ---- The table ---------------------------------------------------------------------------------------------

/// A column's type, the same in every format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    /// A JSON array or object: text in CSV and Parquet, the value itself in JSON Lines.
    Json,
    /// Unsigned 64-bit.
    Int,
    Float,
    Bool,
}

/// One field. `Null`: not measured (or not applicable to the row).
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Null,
    Text(String),
    Json(String),
    Int(u64),
    Float(f64),
    Bool(bool),
}

/// A table: named, typed columns and rows of one value per column.
#[derive(Debug, Default)]
struct Table {
    columns: Vec<(String, Kind)>,
    rows: Vec<Vec<Value>>,
}

/// A column of a table of `R` rows: its name, its type and how a row gives its value.
struct Col<'a, R> {
    name: String,
    kind: Kind,
    get: Box<dyn Fn(&R) -> Value + 'a>,
}

fn text<'a, R>(name: impl Into<String>, f: impl Fn(&R) -> Option<String> + 'a) -> Col<'a, R> {
    Col { name: name.into(), kind: Kind::Text, get: Box::new(move |r| f(r).map_or(Value::Null, Value::Text)) }
}

/// A JSON column from any serializable value.
fn json<'a, R, T: serde::Serialize>(name: impl Into<String>, f: impl Fn(&R) -> Option<T> + 'a) -> Col<'a, R> {
    let get = move |r: &R| f(r).and_then(|v| serde_json::to_string(&v).ok()).map_or(Value::Null, Value::Json);
    Col { name: name.into(), kind: Kind::Json, get: Box::new(get) }
}

fn int<'a, R>(name: impl Into<String>, f: impl Fn(&R) -> Option<u64> + 'a) -> Col<'a, R> {
    Col { name: name.into(), kind: Kind::Int, get: Box::new(move |r| f(r).map_or(Value::Null, Value::Int)) }
}

fn float<'a, R>(name: impl Into<String>, f: impl Fn(&R) -> Option<f64> + 'a) -> Col<'a, R> {
    let get = move |r: &R| f(r).filter(|v| v.is_finite()).map_or(Value::Null, Value::Float);
    Col { name: name.into(), kind: Kind::Float, get: Box::new(get) }
}

fn boolean<'a, R>(name: impl Into<String>, f: impl Fn(&R) -> Option<bool> + 'a) -> Col<'a, R> {
    Col { name: name.into(), kind: Kind::Bool, get: Box::new(move |r| f(r).map_or(Value::Null, Value::Bool)) }
}

impl Table {
    fn build<R>(cols: &[Col<'_, R>], rows: &[R]) -> Table {
        Table {
            columns: cols.iter().map(|c| (c.name.clone(), c.kind)).collect(),
            rows: rows.iter().map(|r| cols.iter().map(|c| (c.get)(r)).collect()).collect(),
        }
    }

    /// RFC 4180: a header line, then one line per row; fields with a comma, a quote, a line break or surrounding
    /// spaces quoted. Line ends are `\n`.
    fn to_csv(&self) -> String {
        fn field(out: &mut String, s: &str) {
            let quote = s.contains([',', '"', '\n', '\r']) || s.starts_with(' ') || s.ends_with(' ');
            match quote {
                true => {
                    out.push('"');
                    out.push_str(&s.replace('"', "\"\""));
                    out.push('"');
                }
                false => out.push_str(s),
            }
        }
        let mut out = String::new();
        for (i, (name, _)) in self.columns.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            field(&mut out, name);
        }
        out.push('\n');
        for row in &self.rows {
            for (i, v) in row.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                match v {
                    Value::Null => {}
                    Value::Text(s) | Value::Json(s) => field(&mut out, s),
                    Value::Int(n) => {
                        let _ = write!(out, "{n}");
                    }
                    Value::Float(x) => out.push_str(&float_text(*x)),
                    Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
                }
            }
            out.push('\n');
        }
        out
    }

    /// One JSON object per line, the columns in the table's order.
    fn to_jsonl(&self) -> String {
        let names: Vec<String> =
            self.columns.iter().map(|(n, _)| serde_json::to_string(n).unwrap_or_else(|_| "\"\"".into())).collect();
        let mut out = String::new();
        for row in &self.rows {
            out.push('{');
            for (i, (name, v)) in names.iter().zip(row).enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(name);
                out.push(':');
                match v {
                    Value::Null => out.push_str("null"),
                    Value::Text(s) => out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| "null".into())),
                    Value::Json(s) => out.push_str(s),
                    Value::Int(n) => {
                        let _ = write!(out, "{n}");
                    }
                    Value::Float(x) => out.push_str(&float_text(*x)),
                    Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
                }
            }
            out.push_str("}\n");
        }
        out
    }

    /// One row group, every column optional (definition level 0: null), snappy pages; strings and JSON text as
    /// UTF-8 byte arrays, integers as INT64 annotated unsigned, floats as DOUBLE.
    fn to_parquet(&self) -> parquet::errors::Result<Vec<u8>> {
        use parquet::basic::{Compression, LogicalType, Repetition as Rep, Type as Physical};
        use parquet::column::writer::ColumnWriter;
        use parquet::data_type::ByteArray;
        use parquet::file::properties::WriterProperties;
        use parquet::file::writer::SerializedFileWriter;
        use parquet::schema::types::Type;

        let mut fields = Vec::with_capacity(self.columns.len());
        for (name, kind) in &self.columns {
            let (physical, logical) = match kind {
                Kind::Text | Kind::Json => (Physical::BYTE_ARRAY, Some(LogicalType::String)),
                Kind::Int => (Physical::INT64, Some(LogicalType::integer(64, false))),
                Kind::Float => (Physical::DOUBLE, None),
                Kind::Bool => (Physical::BOOLEAN, None),
            };
            let field = Type::primitive_type_builder(name, physical)
                .with_repetition(Rep::OPTIONAL)
                .with_logical_type(logical)
                .build()?;
            fields.push(Arc::new(field));
        }
        let schema = Arc::new(Type::group_type_builder("schema").with_fields(fields).build()?);
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_created_by(format!("dllm-bench {} export", env!("CARGO_PKG_VERSION")))
            .build();
        let mut writer = SerializedFileWriter::new(Vec::new(), schema, Arc::new(props))?;
        if !self.rows.is_empty() {
            let mut group = writer.next_row_group()?;
            let mut index = 0;
            while let Some(mut column) = group.next_column()? {
                let values = self.rows.iter().map(|r| r.get(index).unwrap_or(&Value::Null));
                let defs: Vec<i16> = values.clone().map(|v| i16::from(*v != Value::Null)).collect();
                match column.untyped() {
                    ColumnWriter::ByteArrayColumnWriter(w) => {
                        let v: Vec<ByteArray> = values
                            .filter_map(|v| match v {
                                Value::Text(s) | Value::Json(s) => Some(ByteArray::from(s.as_str())),
                                _ => None,
                            })
                            .collect();
                        w.write_batch(&v, Some(&defs), None)?;
                    }
                    ColumnWriter::Int64ColumnWriter(w) => {
                        // Unsigned values in INT64's bits, as the annotation says.
                        let v: Vec<i64> = values
                            .filter_map(|v| match v {
                                Value::Int(n) => Some(i64::from_ne_bytes(n.to_ne_bytes())),
                                _ => None,
                            })
                            .collect();
                        w.write_batch(&v, Some(&defs), None)?;
                    }
                    ColumnWriter::DoubleColumnWriter(w) => {
                        let v: Vec<f64> = values
                            .filter_map(|v| match v {
                                Value::Float(x) => Some(*x),
                                _ => None,
                            })
                            .collect();
                        w.write_batch(&v, Some(&defs), None)?;
                    }
                    ColumnWriter::BoolColumnWriter(w) => {
                        let v: Vec<bool> = values
                            .filter_map(|v| match v {
                                Value::Bool(b) => Some(*b),
                                _ => None,
                            })
                            .collect();
                        w.write_batch(&v, Some(&defs), None)?;
                    }
                    _ => return Err(parquet::errors::ParquetError::General("unexpected column type".into())),
                }
                column.close()?;
                index += 1;
            }
            group.close()?;
        }
        writer.into_inner()
    }
}

/// A finite float as JSON writes it (the shortest text that reads back to the same number).
fn float_text(x: f64) -> String {
    serde_json::Number::from_f64(x).map_or_else(String::new, |n| n.to_string())
}

/// A value's name as bundles write it (`llada_low_confidence`, `oom`), not Rust's.
fn name_of(value: impl serde::Serialize) -> Option<String> {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => Some(s),
        _ => None,
    }
}

// ---- The repetitions table ---------------------------------------------------------------------------------

/// One row of the repetitions table: a repetition of a cell (or a cell without any), with what `metrics` derives.
struct RepRow<'a> {
    bundle_name: &'a str,
    bundle: &'a Bundle,
    index: usize,
    cell: &'a Cell,
    model: Option<&'a ModelInfo>,
    rep: Option<(usize, &'a Repetition)>,
    summary: &'a CellSummary,
    energy: CellEnergy,
    steps: Option<u32>,
    quality: &'a [QualityValue],
}

impl RepRow<'_> {
    fn device(&self) -> &schema::DeviceInfo {
        let execution = self.cell.execution.and_then(|i| self.bundle.provenance.executions.get(i as usize));
        execution.map_or(&self.bundle.provenance.device, |e| &e.device)
    }

    fn rep(&self) -> Option<&Repetition> {
        self.rep.map(|(_, r)| r)
    }
}

/// The per-cell summaries exported, each as `_median`, `_mean`, `_std`, `_min` and `_max`.
type SummaryOf = fn(&CellSummary) -> Option<Summary>;

/// The per-cell energy summaries exported, likewise.
type EnergyOf = fn(&CellEnergy) -> Option<Summary>;

/// A statistic of a summary (`median`, `std`, ...).
type StatOf = fn(&Summary) -> Option<f64>;

fn repetitions_table(bundles: &[(&str, &Bundle)]) -> Table {
    // Derived once per cell, in bundle order.
    let derived: Vec<(Vec<CellSummary>, Vec<Vec<QualityValue>>)> =
        bundles.iter().map(|(_, b)| (metrics::derive::summaries(b), metrics::parity::cell_quality(b))).collect();
    let mut rows = Vec::new();
    for ((name, b), (summaries, quality)) in bundles.iter().zip(&derived) {
        for (index, ((cell, summary), quality)) in b.cells.iter().zip(summaries).zip(quality).enumerate() {
            let energy = metrics::energy::cell_energy(cell);
            let row = |rep| RepRow {
                bundle_name: name,
                bundle: b,
                index,
                cell,
                model: b.model(&cell.key.model),
                rep,
                summary,
                energy,
                steps: metrics::derive::cell_steps(cell),
                quality,
            };
            match cell.repetitions.is_empty() {
                true => rows.push(row(None)),
                false => rows.extend(cell.repetitions.iter().enumerate().map(|r| row(Some(r)))),
            }
        }
    }
    // Quality columns: every (metric, evaluator) of any bundle, sorted.
    let mut labels: Vec<(String, Option<String>)> =
        derived.iter().flat_map(|(_, q)| q.iter().flatten().map(|v| (v.metric.clone(), v.evaluator.clone()))).collect();
    labels.sort();
    labels.dedup();

    let mut cols: Vec<Col<'_, RepRow<'_>>> = vec![
        text("bundle", |r: &RepRow| Some(r.bundle_name.to_string())),
        boolean("synthetic_weights", |r: &RepRow| Some(r.bundle.provenance.synthetic_weights)),
        text("device_kind", |r: &RepRow| Some(r.device().kind.clone())),
        text("device", |r: &RepRow| Some(r.device().name.clone().unwrap_or_else(|| r.device().kind.clone()))),
        int("cell", |r: &RepRow| Some(r.index as u64)),
        text("model", |r: &RepRow| Some(r.cell.key.model.clone())),
        text("model_kind", |r: &RepRow| r.model.and_then(|m| name_of(m.kind))),
        text("generation", |r: &RepRow| r.model.map(|m| m.generation.clone())),
        text("dtype", |r: &RepRow| r.model.map(|m| m.dtype.to_string())),
        text("sampler", |r: &RepRow| name_of(r.cell.key.sampler)),
        text("series", |r: &RepRow| r.cell.key.variant().map(|v| v.name().to_string())),
        int("steps", |r: &RepRow| r.cell.key.steps.map(u64::from)),
        float("threshold", |r: &RepRow| r.cell.key.threshold.map(|t| t.value())),
        int("block_length", |r: &RepRow| r.cell.key.block_length.map(u64::from)),
        text("cache", |r: &RepRow| r.cell.key.cache.map(|c| c.name().to_string())),
        int("batch_size", |r: &RepRow| Some(u64::from(r.cell.key.batch_size))),
        int("seq_len", |r: &RepRow| Some(u64::from(r.cell.key.seq_len))),
        int("prompt_tokens", |r: &RepRow| Some(u64::from(r.cell.key.prompt_tokens))),
        int("output_tokens", |r: &RepRow| Some(u64::from(r.cell.key.output_tokens))),
        text("status", |r: &RepRow| Some(status_name(&r.cell.status).to_string())),
        text("status_message", |r: &RepRow| match &r.cell.status {
            CellStatus::Ok => None,
            CellStatus::Oom { message } | CellStatus::Error { message } => Some(message.clone()),
            CellStatus::Skipped { reason } => Some(reason.clone()),
        }),
        int("warmup_runs", |r: &RepRow| Some(u64::from(r.cell.warmup_runs))),
        int("repetition", |r: &RepRow| r.rep.map(|(i, _)| i as u64)),
        // The repetition's raw measurements, named as in the bundle (the batch's totals renamed apart from the
        // key's per-sequence `output_tokens`).
        json("prompt_indices", |r: &RepRow| r.rep().map(|x| x.prompt_indices.clone())),
        float("e2e_ms", |r: &RepRow| r.rep().map(|x| x.e2e_ms)),
        float("prefill_ms", |r: &RepRow| r.rep().and_then(|x| x.prefill_ms)),
        float("first_block_ms", |r: &RepRow| r.rep().and_then(|x| x.first_block_ms)),
        int("forward_passes", |r: &RepRow| r.rep().and_then(|x| x.forward_passes).map(u64::from)),
        int("batch_output_tokens", |r: &RepRow| r.rep().map(|x| x.output_tokens)),
        int("batch_output_bytes", |r: &RepRow| r.rep().map(|x| x.output_bytes)),
        json("step_ms", |r: &RepRow| r.rep().and_then(|x| x.step_ms.clone())),
        json("committed_per_step", |r: &RepRow| r.rep().and_then(|x| x.committed_per_step.clone())),
        int("peak_allocated_bytes", |r: &RepRow| r.rep().and_then(|x| x.peak_allocated_bytes)),
        int("peak_reserved_bytes", |r: &RepRow| r.rep().and_then(|x| x.peak_reserved_bytes)),
        int("peak_rss_bytes", |r: &RepRow| r.rep().and_then(|x| x.peak_rss_bytes)),
        int("device_used_bytes", |r: &RepRow| r.rep().and_then(|x| x.device_used_bytes)),
        int("kv_cache_bytes", |r: &RepRow| r.rep().and_then(|x| x.kv_cache_bytes)),
        int("weights_read_bytes", |r: &RepRow| r.rep().and_then(|x| x.weights_read_bytes)),
        int("flop_count", |r: &RepRow| r.rep().and_then(|x| x.flop_count)),
        float("energy_j", |r: &RepRow| r.rep().and_then(|x| x.energy_j)),
        float("energy_window_ms", |r: &RepRow| r.rep().and_then(|x| x.energy_window_ms)),
        // Derived per repetition (`metrics`).
        float("itl_ms", |r: &RepRow| r.rep().and_then(|x| metrics::derive::itl_ms(x, r.cell.key.output_tokens))),
        float("tokens_per_s", |r: &RepRow| r.rep().and_then(metrics::derive::tokens_per_s)),
        float("bytes_per_s", |r: &RepRow| r.rep().and_then(metrics::derive::bytes_per_s)),
        float("achieved_bytes_per_s", |r: &RepRow| r.rep().and_then(metrics::roofline::achieved_bytes_per_s)),
        float("achieved_flops_per_s", |r: &RepRow| r.rep().and_then(metrics::roofline::achieved_flops_per_s)),
        int("activation_bytes", |r: &RepRow| {
            r.rep().and_then(|x| metrics::roofline::activation_bytes(x, r.model.and_then(|m| m.weights_bytes)))
        }),
        float("joules_per_token", |r: &RepRow| r.rep().and_then(metrics::energy::joules_per_token)),
        float("joules_per_sequence", |r: &RepRow| {
            r.rep().and_then(|x| metrics::energy::joules_per_sequence(x, r.cell.key.batch_size))
        }),
        float("mean_power_w", |r: &RepRow| r.rep().and_then(metrics::energy::mean_power_w)),
        // Derived per cell (`metrics`): the same value on each of the cell's rows.
        int("cell_steps", |r: &RepRow| r.steps.map(u64::from)),
        float("tokens_per_forward", |r: &RepRow| r.summary.tokens_per_forward),
    ];
    let summaries: [(&str, SummaryOf); 8] = [
        ("e2e_ms", |s| s.e2e_ms),
        ("prefill_ms", |s| s.prefill_ms),
        ("itl_ms", |s| s.itl_ms),
        ("first_block_ms", |s| s.first_block_ms),
        ("step_ms", |s| s.step_ms),
        ("tokens_per_s", |s| s.tokens_per_s),
        ("bytes_per_s", |s| s.bytes_per_s),
        ("forward_passes", |s| s.forward_passes),
    ];
    let stats: [(&str, StatOf); 5] = [
        ("median", |s| Some(s.median)),
        ("mean", |s| Some(s.mean)),
        ("std", |s| s.std),
        ("min", |s| Some(s.min)),
        ("max", |s| Some(s.max)),
    ];
    for (base, of) in summaries {
        for (stat, pick) in stats {
            cols.push(float(format!("{base}_{stat}"), move |r: &RepRow| of(r.summary).as_ref().and_then(pick)));
        }
    }
    cols.push(int("peak_allocated_bytes_max", |r: &RepRow| r.summary.peak_allocated_bytes));
    cols.push(int("peak_reserved_bytes_max", |r: &RepRow| r.summary.peak_reserved_bytes));
    cols.push(int("peak_rss_bytes_max", |r: &RepRow| r.summary.peak_rss_bytes));
    let energies: [(&str, EnergyOf); 4] = [
        ("energy_j", |e| e.energy_j),
        ("joules_per_token", |e| e.joules_per_token),
        ("joules_per_sequence", |e| e.joules_per_sequence),
        ("mean_power_w", |e| e.mean_power_w),
    ];
    for (base, of) in energies {
        for (stat, pick) in stats {
            cols.push(float(format!("{base}_{stat}"), move |r: &RepRow| of(&r.energy).as_ref().and_then(pick)));
        }
    }
    // The counter that measured the cell, its idle power, or why the cell has no energy.
    cols.push(text("energy_source", |r: &RepRow| {
        metrics::energy::meter(r.bundle, r.cell).and_then(|m| m.source).and_then(name_of)
    }));
    cols.push(float("idle_power_w", |r: &RepRow| {
        metrics::energy::meter(r.bundle, r.cell).and_then(metrics::energy::idle_power_w)
    }));
    cols.push(text("energy_unavailable", |r: &RepRow| metrics::energy::unavailable_reason(r.bundle, r.cell)));
    for (metric, evaluator) in labels {
        let name = match &evaluator {
            Some(e) => format!("quality_{metric}[{e}]"),
            None => format!("quality_{metric}"),
        };
        cols.push(float(name, move |r: &RepRow| {
            r.quality.iter().find(|q| q.metric == metric && q.evaluator == evaluator).map(|q| q.value)
        }));
    }
    Table::build(&cols, &rows)
}

/// A status's `state` (`ok`, `oom`, `error`, `skipped`), as the bundle writes it.
fn status_name(status: &CellStatus) -> &'static str {
    match status {
        CellStatus::Ok => "ok",
        CellStatus::Oom { .. } => "oom",
        CellStatus::Error { .. } => "error",
        CellStatus::Skipped { .. } => "skipped",
    }
}

// ---- The parity table --------------------------------------------------------------------------------------

/// One row of the parity table: a record at one batch size ([`metrics::parity::rows_by_batch`]: a speedup row, or
/// an autoregressive cell that did not finish there, with nothing measured), or a record without either (`at`
/// `None`).
struct ParityRow<'a> {
    bundle_name: &'a str,
    bundle: &'a Bundle,
    source: &'static str,
    record: &'a ParityRecord,
    at: Option<AtBatch<'a>>,
}

impl<'a> ParityRow<'a> {
    /// The speedup row, where there is one.
    fn speedup(&self) -> Option<&'a SpeedupRow> {
        match self.at {
            Some(AtBatch::Row(row)) => Some(row),
            _ => None,
        }
    }
}

fn parity_table(bundles: &[(&str, &Bundle)]) -> Table {
    // The records `report` gives by default, computed from the cells as it and the explorer compute them (its
    // config's options; without a `[quality]` table, the metric its cells hold): a stored record that its cells no
    // longer give is stale (`validate` says so). The stored ones only for a bundle without quality values.
    let records: Vec<(Cow<'_, [ParityRecord]>, &'static str)> = bundles
        .iter()
        .map(|(_, b)| match crate::report::resolve(b, &crate::report::ReportOptions::default()) {
            Some(opts) => (Cow::Owned(metrics::parity::parity(b, &opts)), "recomputed"),
            None => (Cow::Borrowed(b.parity.as_slice()), "stored"),
        })
        .collect();
    let mut rows = Vec::new();
    for ((name, b), (list, source)) in bundles.iter().zip(&records) {
        for record in list.iter() {
            let at = metrics::parity::rows_by_batch(b, record);
            let row = |at| ParityRow { bundle_name: name, bundle: b, source, record, at };
            match at.is_empty() {
                true => rows.push(row(None)),
                false => rows.extend(at.into_iter().map(|a| row(Some(a)))),
            }
        }
    }
    let cols: Vec<Col<'_, ParityRow<'_>>> = vec![
        text("bundle", |r: &ParityRow| Some(r.bundle_name.to_string())),
        boolean("synthetic_weights", |r: &ParityRow| Some(r.bundle.provenance.synthetic_weights)),
        text("device", |r: &ParityRow| {
            let d = &r.bundle.provenance.device;
            Some(d.name.clone().unwrap_or_else(|| d.kind.clone()))
        }),
        text("source", |r: &ParityRow| Some(r.source.to_string())),
        text("metric", |r: &ParityRow| Some(r.record.metric.clone())),
        text("evaluator", |r: &ParityRow| r.record.evaluator.clone()),
        text("direction", |r: &ParityRow| name_of(r.record.direction)),
        int("seq_len", |r: &ParityRow| Some(u64::from(r.record.seq_len))),
        text("ar_model", |r: &ParityRow| Some(r.record.ar_model.clone())),
        text("diffusion_model", |r: &ParityRow| Some(r.record.diffusion_model.clone())),
        text("sampler", |r: &ParityRow| name_of(r.record.sampler)),
        text("series", |r: &ParityRow| r.record.variant().map(|v| v.name().to_string())),
        int("block_length", |r: &ParityRow| r.record.block_length.map(u64::from)),
        text("cache", |r: &ParityRow| r.record.cache.map(|c| c.name().to_string())),
        boolean("thresholded", |r: &ParityRow| Some(r.record.thresholded)),
        float("baseline", |r: &ParityRow| Some(r.record.baseline.value)),
        float("baseline_low", |r: &ParityRow| r.record.baseline.low),
        float("baseline_high", |r: &ParityRow| r.record.baseline.high),
        text("outcome", |r: &ParityRow| {
            Some(
                match r.record.outcome {
                    schema::parity::Parity::Reached { .. } => "reached",
                    schema::parity::Parity::NotReached { .. } => "not_reached",
                    schema::parity::Parity::NoData => "no_data",
                }
                .to_string(),
            )
        }),
        int("s_parity", |r: &ParityRow| match r.record.outcome {
            schema::parity::Parity::Reached { steps } => Some(u64::from(steps)),
            _ => None,
        }),
        float("parity_threshold", |r: &ParityRow| r.record.parity_threshold.map(|t| t.value())),
        int("max_steps", |r: &ParityRow| match r.record.outcome {
            schema::parity::Parity::NotReached { max_steps } => Some(u64::from(max_steps)),
            _ => None,
        }),
        text("s_parity_text", |r: &ParityRow| Some(metrics::parity::s_parity_text(r.record))),
        int("s_parity_low", |r: &ParityRow| r.record.s_parity_interval.and_then(|i| i.low).map(u64::from)),
        int("s_parity_high", |r: &ParityRow| r.record.s_parity_interval.and_then(|i| i.high).map(u64::from)),
        // An empty bound is "not reached up to K_max" where the record has an interval: said, since an empty
        // field elsewhere means "not measured".
        boolean("s_parity_low_reached", |r: &ParityRow| r.record.s_parity_interval.map(|i| i.low.is_some())),
        boolean("s_parity_high_reached", |r: &ParityRow| r.record.s_parity_interval.map(|i| i.high.is_some())),
        float("reached_fraction", |r: &ParityRow| r.record.reached_fraction),
        json("curve", |r: &ParityRow| Some(&r.record.curve)),
        int("batch_size", |r: &ParityRow| r.at.map(|a| u64::from(a.batch_size()))),
        text("ar_cell", |r: &ParityRow| match r.at? {
            AtBatch::Row(row) => Some(row.ar_cell.to_string()),
            AtBatch::Unfinished { ar_cell, .. } => Some(ar_cell.to_string()),
        }),
        float("ar_e2e_ms", |r: &ParityRow| r.speedup().map(|s| s.ar_e2e_ms)),
        text("diffusion_cell", |r: &ParityRow| {
            r.speedup().and_then(|s| s.diffusion_cell.as_ref()).map(|k| k.to_string())
        }),
        float("diffusion_e2e_ms", |r: &ParityRow| r.speedup().and_then(|s| s.diffusion_e2e_ms)),
        float("speedup", |r: &ParityRow| r.speedup().and_then(|s| s.speedup).map(|e| e.value)),
        float("speedup_low", |r: &ParityRow| r.speedup().and_then(|s| s.speedup).and_then(|e| e.low)),
        float("speedup_high", |r: &ParityRow| r.speedup().and_then(|s| s.speedup).and_then(|e| e.high)),
        boolean("viable", |r: &ParityRow| metrics::parity::viable(r.record, r.at.as_ref()?)),
        text("note", |r: &ParityRow| match r.at? {
            AtBatch::Row(row) => row.note.clone(),
            AtBatch::Unfinished { what, .. } => Some(metrics::parity::unfinished_baseline_text(what)),
        }),
        int("bootstrap_resamples", |r: &ParityRow| r.record.bootstrap.map(|b| u64::from(b.resamples))),
        int("bootstrap_seed", |r: &ParityRow| r.record.bootstrap.map(|b| b.seed)),
        int("bootstrap_prompts", |r: &ParityRow| r.record.bootstrap.map(|b| u64::from(b.prompts))),
    ];
    Table::build(&cols, &rows)
}
