//! The table of cells, its sorting and its CSV, and a clicked cell's details.

use metrics::derive::{Summary, gigabytes};
use schema::CellStatus;
use schema::grid::SamplerVariant;

use crate::bundle::LoadedBundle;
use crate::figure::CellId;

use super::choices::kept;
use super::options::Filters;
use super::quality::direction_text;
use super::series::{ms, sampler_name};

/// Columns of the cell table and the CSV.
pub const COLUMNS: [&str; 14] = [
    "bundle",
    "model",
    "sampler",
    "K",
    "B",
    "N",
    "status",
    "e2e_ms_median",
    "tokens_per_s_median",
    "bytes_per_s_median",
    "ttft_ms_median",
    "itl_ms_median",
    "step_ms_median",
    "peak_memory_gb",
];

/// One row of the cell table: display text per column and a sort key per column.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Which cell.
    pub id: CellId,
    /// Text per column ([`COLUMNS`]).
    pub text: Vec<String>,
    /// Number per numeric column (NaN when absent), for sorting.
    pub num: Vec<f64>,
    /// Status state (`ok`, `oom`, ...), for styling.
    pub state: &'static str,
}

pub(super) fn status_text(s: &CellStatus) -> (&'static str, String) {
    match s {
        CellStatus::Ok => ("ok", "ok".into()),
        CellStatus::Oom { message } => ("oom", format!("oom: {message}")),
        CellStatus::Error { message } => ("error", format!("error: {message}")),
        CellStatus::Skipped { reason } => ("skipped", format!("skipped: {reason}")),
    }
}

/// The rows of the kept cells of every loaded bundle.
pub fn rows(bundles: &[&LoadedBundle], f: &Filters) -> Vec<Row> {
    let mut out = Vec::new();
    for (bi, lb) in bundles.iter().enumerate() {
        let name = lb.source.clone();
        for c in kept(lb, f) {
            let k = &c.cell.key;
            let s = c.summary;
            let med = |x: Option<Summary>| x.map_or(f64::NAN, |v| v.median);
            let mem = s.peak_allocated_bytes.or(s.peak_rss_bytes).map_or(f64::NAN, gigabytes);
            let nums = [
                f64::NAN,
                f64::NAN,
                f64::NAN,
                k.steps.map_or(f64::NAN, f64::from),
                f64::from(k.batch_size),
                f64::from(k.seq_len),
                f64::NAN,
                med(s.e2e_ms),
                med(s.tokens_per_s),
                med(s.bytes_per_s),
                med(s.prefill_ms),
                med(s.itl_ms),
                med(s.step_ms),
                mem,
            ];
            let (state, status) = status_text(&c.cell.status);
            let num_text = |v: f64, digits: usize| if v.is_nan() { String::new() } else { format!("{v:.digits$}") };
            let text = vec![
                name.clone(),
                k.model.clone(),
                match k.variant().filter(|v| *v != SamplerVariant::Reference) {
                    Some(v) => format!("{} {v}", sampler_name(k.sampler)),
                    None => sampler_name(k.sampler).to_string(),
                },
                match (k.steps, k.threshold) {
                    (None, Some(t)) => format!("t={t}"),
                    (k, _) => k.map(|v| v.to_string()).unwrap_or_default(),
                },
                k.batch_size.to_string(),
                k.seq_len.to_string(),
                status,
                num_text(nums[7], 3),
                num_text(nums[8], 2),
                num_text(nums[9], 2),
                num_text(nums[10], 3),
                num_text(nums[11], 4),
                num_text(nums[12], 4),
                num_text(nums[13], 3),
            ];
            out.push(Row { id: CellId { bundle: bi, cell: c.index }, text, num: nums.to_vec(), state });
        }
    }
    out
}

/// Sorts rows by column `col` (numbers numerically, absent last; text lexically).
pub fn sort_rows(rows: &mut [Row], col: usize, descending: bool) {
    rows.sort_by(|a, b| {
        let (x, y) = (a.num[col], b.num[col]);
        let ord = if x.is_nan() && y.is_nan() {
            a.text[col].cmp(&b.text[col])
        } else if x.is_nan() {
            return std::cmp::Ordering::Greater;
        } else if y.is_nan() {
            return std::cmp::Ordering::Less;
        } else {
            x.total_cmp(&y)
        };
        if descending { ord.reverse() } else { ord }
    });
}

/// The columns the CSV adds after [`COLUMNS`]: whether the cell's model had synthetic weights (its numbers'
/// quality is then meaningless; the explorer's badge does not travel with a downloaded file) and the device.
pub const CSV_EXTRA_COLUMNS: [&str; 2] = ["synthetic_weights", "device"];

/// CSV (RFC 4180) of the rows of `bundles` (as [`rows`] numbers them), with a header line: the table's columns,
/// then [`CSV_EXTRA_COLUMNS`].
pub fn csv(bundles: &[&LoadedBundle], rows: &[Row]) -> String {
    let field = |s: &str| {
        if s.contains([',', '"', '\n', '\r']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() }
    };
    let mut out = COLUMNS.iter().chain(&CSV_EXTRA_COLUMNS).copied().collect::<Vec<_>>().join(",");
    out.push('\n');
    for r in rows {
        let lb = bundles.get(r.id.bundle);
        let cell = lb.and_then(|lb| lb.bundle.cells.get(r.id.cell));
        // The cell's model's flag (a bundle may mix real and synthetic models), else the bundle's.
        let synthetic = lb.map(|lb| {
            let model = cell.and_then(|c| lb.bundle.models.iter().find(|m| m.id == c.key.model));
            model.map_or(lb.synthetic_weights, |m| m.synthetic)
        });
        let device = lb.and_then(|lb| lb.provenance.iter().find(|(k, _)| *k == "Device")).map(|(_, v)| v.as_str());
        let extra = [synthetic.map(|s| s.to_string()).unwrap_or_default(), device.unwrap_or_default().to_string()];
        out.push_str(&r.text.iter().chain(&extra).map(|t| field(t)).collect::<Vec<_>>().join(","));
        out.push('\n');
    }
    out
}

/// The name of a download of what `bundles` show: each one's file name without `.json`, joined by `-vs-` when two
/// are compared, then `-what` (`cells.csv`, `latency.png`): a file saved from the explorer names its bundles.
pub fn download_name(bundles: &[&LoadedBundle], what: &str) -> String {
    let stems: Vec<String> = bundles
        .iter()
        .map(|lb| {
            let stem = lb.source.strip_suffix(".json").unwrap_or(&lb.source);
            // A local file's name may hold anything; the download keeps it to what every file system takes.
            stem.chars()
                .map(|c| if c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | '+') { c } else { '_' })
                .collect()
        })
        .filter(|s: &String| !s.is_empty())
        .collect();
    match stems.is_empty() {
        true => format!("dllm-bench-{what}"),
        false => format!("{}-{what}", stems.join("-vs-")),
    }
}

/// The details of one cell (shown when a point or a row is clicked): label/value rows.
pub fn cell_details(lb: &LoadedBundle, cell: usize) -> Vec<(String, String)> {
    let Some(c) = lb.bundle.cells.get(cell) else { return Vec::new() };
    let s = lb.summary(cell);
    let k = &c.key;
    let mut out = vec![
        ("bundle".to_string(), lb.source.clone()),
        ("cell".into(), format!("#{cell}: {k}")),
        ("sampler".into(), sampler_name(k.sampler).into()),
        ("prompt / output tokens".into(), format!("{} / {}", k.prompt_tokens, k.output_tokens)),
        ("status".into(), status_text(&c.status).1),
        ("repetitions (warm-up)".into(), format!("{} ({})", c.repetitions.len(), c.warmup_runs)),
    ];
    // A cell that did not finish has no summary (`metrics::derive::cell_summary`): said, not left blank.
    if c.status != CellStatus::Ok && !c.repetitions.is_empty() {
        out.push((
            "no summary".into(),
            "the cell did not finish: its repetitions are in the bundle (and `dllm-bench export`), not summarized"
                .into(),
        ));
    }
    let mut sum = |name: &str, v: Option<Summary>| {
        if let Some(v) = v {
            let std = v.std.map_or_else(|| "no std: one repetition".to_string(), |s| format!("std {s:.3}"));
            out.push((name.to_string(), format!("{} (mean {:.3}, {std})", ms(&v), v.mean)));
        }
    };
    sum("L_e2e", s.e2e_ms);
    sum("TTFT (prefill)", s.prefill_ms);
    sum("ITL", s.itl_ms);
    sum("first block", s.first_block_ms);
    sum("time per step", s.step_ms);
    if let Some(t) = s.tokens_per_s {
        out.push(("tokens/s".into(), format!("median {:.2} (min {:.2}, max {:.2})", t.median, t.min, t.max)));
    }
    if let Some(t) = s.bytes_per_s {
        out.push(("bytes/s".into(), format!("median {:.2} (min {:.2}, max {:.2})", t.median, t.min, t.max)));
    }
    if let Some(t) = s.tokens_per_forward {
        out.push(("tokens per forward".into(), format!("{t:.3}")));
    }
    for (name, v) in [
        ("peak allocated", s.peak_allocated_bytes),
        ("peak reserved", s.peak_reserved_bytes),
        ("peak RSS (process)", s.peak_rss_bytes),
    ] {
        if let Some(v) = v {
            out.push((name.into(), format!("{:.3} GB ({v} bytes)", gigabytes(v))));
        }
    }
    for q in lb.quality().get(cell).into_iter().flatten() {
        out.push((format!("quality: {}", q.metric), format!("{} ({})", q.value, direction_text(q.direction))));
    }
    out
}
