//! `dllm-bench compare A B`: two bundles of one grid, cell by cell, matched by their [`CellKey`].
//!
//! Latency (the default): per cell the median L_e2e of each, the ratio A / B (below 1: A is faster; the direction
//! of `report BUNDLE --compare REFERENCE` and of the explorer's comparison, runner over reference), the median
//! ITL (AR) or step time (LLaDA) of each with its ratio, and the peak memory of each (CUDA: peak allocated bytes;
//! CPU: peak RSS), all through `metrics::compare` (which `report --compare` shares). A value a bundle does not
//! have is "-", never 0. A bundle whose weights are synthetic says so beside its description.
//!
//! Two bundles with no cell in common are a usage problem (bundles of different grids): exit 2, naming both files
//! and the fix, in either mode (as `report --compare`).
//!
//! Tokens (`--tokens`): do the two bundles generate the same thing (two devices, two precisions)? Per cell the
//! status, the continuations of every prompt (decoded text and masked positions), each repetition's prompt
//! indices, forward passes, committed tokens per step, output tokens and bytes, and the perplexities (relative
//! difference at most `--perplexity-rtol`). One line per cell and a summary; exit 1 on any difference (0 with
//! `--report-only`, which only counts: for a precision against f32, where greedy choices may flip).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use metrics::compare::cell_latency;
use schema::{Bundle, Cell, CellKey, CellStatus};

/// `dllm-bench compare`.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// The first bundle (for latency: the runner's; the ratios are A / B, below 1 where A is faster).
    #[arg(value_name = "A")]
    pub first: PathBuf,
    /// The second bundle (e.g. jobs/hf_reference.py's, or the same grid on another device).
    #[arg(value_name = "B")]
    pub second: PathBuf,
    /// Latency table as Markdown (default: aligned text; not with --tokens, whose report is text).
    #[arg(long, conflicts_with = "tokens")]
    pub markdown: bool,
    /// Compare what was generated instead of the timings: continuations, committed tokens per step, forward
    /// passes, output bytes, perplexities. Exit 1 on any difference, and when the bundles hold no continuations
    /// (a grid without `[quality]`): then the tokens are not shown equal.
    #[arg(long)]
    pub tokens: bool,
    /// With --tokens: count the differences and exit 0.
    #[arg(long, requires = "tokens")]
    pub report_only: bool,
    /// With --tokens: the largest relative difference of two perplexities that counts as equal [default: 1e-3].
    #[arg(long, value_name = "X", requires = "tokens", value_parser = tolerance, allow_negative_numbers = true)]
    pub perplexity_rtol: Option<f64>,
}

/// `--perplexity-rtol`'s default: perplexities equal to a thousandth count as equal.
pub const DEFAULT_PERPLEXITY_RTOL: f64 = 1e-3;

/// `--perplexity-rtol`: a finite number >= 0 (NaN would count every difference as equal).
fn tolerance(s: &str) -> std::result::Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "{s:?} is not a tolerance: give a finite number >= 0, the largest relative difference of two \
             perplexities that counts as equal (e.g. 1e-3)"
        )),
    }
}

/// Runs `compare`.
pub fn run(args: &CompareArgs) -> Result<ExitCode> {
    let read = |p: &PathBuf| crate::input::read_bundle_file(p).map(|r| r.bundle);
    let (a, b) = (read(&args.first)?, read(&args.second)?);
    if metrics::compare::paired_cells(&a, &b).is_empty() {
        return Err(no_common_cell(&args.first, &args.second).into());
    }
    let (text, ok) = if args.tokens {
        let (text, bad) = tokens(&a, &b, args.perplexity_rtol.unwrap_or(DEFAULT_PERPLEXITY_RTOL), &names(args));
        (text, bad == 0 || args.report_only)
    } else {
        latency(&a, &b, args.markdown)
    };
    print!("{text}");
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// The error of two bundles with no cell in common (`compare`, `report --compare`): exit 2.
pub fn no_common_cell(first: &std::path::Path, second: &std::path::Path) -> crate::InputError {
    crate::InputError(format!(
        "{} and {} have no cell in common (no cell key is in both: different models, N, B or K), so there is nothing \
         to compare; fix: give two bundles of the same grid (the same config and overrides; `dllm-bench plan` lists \
         a config's cells)",
        first.display(),
        second.display()
    ))
}

fn names(args: &CompareArgs) -> [String; 2] {
    [args.first.display().to_string(), args.second.display().to_string()]
}

/// The bundle in one line: tool, version, attention, precision, device.
pub fn describe(b: &Bundle) -> String {
    let p = &b.provenance;
    let d = &p.device;
    let mut dev = [Some(d.kind.as_str()), d.name.as_deref()].into_iter().flatten().collect::<Vec<_>>().join(" ");
    if let Some(t) = d.threads {
        let _ = write!(dev, ", {t} threads");
    }
    // The attention's first clause: the rest describes the implementation at length.
    let attention = p.attention.split(';').next().unwrap_or_default();
    let weights = if crate::report::synthetic_weights(b) {
        "; SYNTHETIC weights: timing is real, quality is meaningless"
    } else {
        ""
    };
    format!("{} {} ({attention}; {}; {dev}){weights}", p.tool, p.tool_version, p.config.run.dtype)
}

fn state(s: &CellStatus) -> &'static str {
    match s {
        CellStatus::Ok => "ok",
        CellStatus::Oom { .. } => "oom",
        CellStatus::Error { .. } => "error",
        CellStatus::Skipped { .. } => "skipped",
    }
}

fn ms(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        // Past 11 days (a hand edit, or a unit slip): in exponent form, not hundreds of digits.
        Some(v) if v >= 1e9 => format!("{v:.3e}"),
        Some(v) if v < 10.0 => format!("{v:.3}"),
        Some(v) => format!("{v:.1}"),
    }
}

fn ratio(first: Option<f64>, second: Option<f64>) -> String {
    metrics::compare::ratio(first, second)
        .map_or_else(|| "-".into(), |r| if (1e-3..1e6).contains(&r) { format!("{r:.2}") } else { format!("{r:.2e}") })
}

fn mib(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{:.1}", v as f64 / f64::from(1u32 << 20)))
}

/// The latency table and whether the bundles have a cell in common.
pub fn latency(a: &Bundle, b: &Bundle, markdown: bool) -> (String, bool) {
    let mut out = String::new();
    let _ = writeln!(out, "A: {}", describe(a));
    let _ = writeln!(out, "B: {}", describe(b));
    for w in metrics::compare::mismatches(a, b, ["A", "B"]) {
        let _ = writeln!(out, "warning: {w}");
    }
    let cells_b: BTreeMap<&CellKey, &Cell> = b.cells.iter().map(|c| (&c.key, c)).collect();
    let keys_a: std::collections::BTreeSet<&CellKey> = a.cells.iter().map(|c| &c.key).collect();
    let alloc = a.cells.iter().chain(&b.cells).flat_map(|c| &c.repetitions).any(|r| r.peak_allocated_bytes.is_some());
    let mem = if alloc { "peak alloc" } else { "peak RSS" };
    let header: Vec<String> = [
        "cell",
        "A e2e ms",
        "B e2e ms",
        "A/B",
        "A ITL/step ms",
        "B ITL/step ms",
        "A/B",
        &format!("A {mem} MiB"),
        &format!("B {mem} MiB"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut rows = Vec::new();
    for (ca, cb) in metrics::compare::paired_cells(a, b) {
        let label = ca.key.to_string();
        if ca.status != CellStatus::Ok || cb.status != CellStatus::Ok {
            let side = |c: &Cell| {
                if c.status == CellStatus::Ok { ms(cell_latency(c).e2e_ms) } else { state(&c.status).into() }
            };
            let mut row = vec![label, side(ca), side(cb)];
            row.resize(header.len(), "-".into());
            rows.push(row);
            continue;
        }
        let (x, y) = (cell_latency(ca), cell_latency(cb));
        rows.push(vec![
            label,
            ms(x.e2e_ms),
            ms(y.e2e_ms),
            ratio(x.e2e_ms, y.e2e_ms),
            ms(x.unit_ms),
            ms(y.unit_ms),
            ratio(x.unit_ms, y.unit_ms),
            mib(x.peak_bytes),
            mib(y.peak_bytes),
        ]);
    }
    out.push('\n');
    if markdown {
        let _ = writeln!(out, "| {} |", header.join(" | "));
        let _ = writeln!(out, "|{}|", vec![" --- "; header.len()].join("|"));
        for r in &rows {
            let _ = writeln!(out, "| {} |", r.join(" | "));
        }
    } else {
        let widths: Vec<usize> =
            (0..header.len()).map(|i| rows.iter().chain([&header]).map(|r| r[i].len()).max().unwrap_or(0)).collect();
        for r in [&header].into_iter().chain(&rows) {
            let line: Vec<String> = r
                .iter()
                .enumerate()
                .map(
                    |(i, v)| if i == 0 { format!("{v:<w$}", w = widths[i]) } else { format!("{v:>w$}", w = widths[i]) },
                )
                .collect();
            let _ = writeln!(out, "{}", line.join("  ").trim_end());
        }
    }
    let only = |cells: &[Cell], other: &dyn Fn(&CellKey) -> bool| {
        cells.iter().filter(|c| !other(&c.key)).map(|c| c.key.to_string()).collect::<Vec<_>>()
    };
    let only_a = only(&a.cells, &|k| cells_b.contains_key(k));
    let only_b = only(&b.cells, &|k| keys_a.contains(k));
    if !only_a.is_empty() {
        let _ = writeln!(out, "\nonly in A: {}", only_a.join(", "));
    }
    if !only_b.is_empty() {
        let _ = writeln!(out, "\nonly in B: {}", only_b.join(", "));
    }
    let common = rows.len();
    if common == 0 {
        let _ = writeln!(out, "\nno cell in common: compare bundles of the same config and overrides");
    }
    (out, common > 0)
}

/// Counts for the summary of [`tokens`].
#[derive(Default)]
struct Counts {
    generations: usize,
    generations_equal: usize,
    repetitions: usize,
    perplexities: usize,
    max_ppl_rel: f64,
}

fn perplexities(c: &Cell) -> BTreeMap<Option<&str>, f64> {
    c.quality.iter().filter(|q| q.metric == "perplexity").map(|q| (q.evaluator.as_deref(), q.value)).collect()
}

/// What differs between two cells of one key.
fn cell_diffs(a: &Cell, b: &Cell, rtol: f64, counts: &mut Counts) -> Vec<String> {
    let mut diffs = Vec::new();
    if a.status != b.status || a.status != CellStatus::Ok {
        diffs.push(format!("status {} vs {}", state(&a.status), state(&b.status)));
    }
    let ga: BTreeMap<_, _> = a.generations.iter().map(|g| ((g.prompt, g.prompt_bytes), g)).collect();
    let gb: BTreeMap<_, _> = b.generations.iter().map(|g| ((g.prompt, g.prompt_bytes), g)).collect();
    if ga.keys().ne(gb.keys()) {
        let prompts = |g: &BTreeMap<(u32, u32), _>| g.keys().map(|k| k.0.to_string()).collect::<Vec<_>>().join(",");
        diffs.push(format!("generated for different prompts: [{}] vs [{}]", prompts(&ga), prompts(&gb)));
    }
    for (k, x) in &ga {
        let Some(y) = gb.get(k) else { continue };
        counts.generations += 1;
        if x.text == y.text && x.masked_tokens == y.masked_tokens {
            counts.generations_equal += 1;
        } else {
            let at = x.text.bytes().zip(y.text.bytes()).position(|(p, q)| p != q);
            let at = at.unwrap_or(x.text.len().min(y.text.len()));
            // The positions each left masked, where either bundle records them.
            let masked = match (x.masked_tokens, y.masked_tokens) {
                (None, None) => String::new(),
                (p, q) => {
                    let n = |m: Option<u32>| m.map_or("not recorded".into(), |m| m.to_string());
                    format!(" (positions left masked: {} vs {})", n(p), n(q))
                }
            };
            diffs.push(format!("prompt {}: continuations differ from byte {at}{masked}", k.0));
        }
    }
    if a.repetitions.len() != b.repetitions.len() {
        diffs.push(format!("{} vs {} repetitions", a.repetitions.len(), b.repetitions.len()));
    }
    for (i, (x, y)) in a.repetitions.iter().zip(&b.repetitions).enumerate() {
        counts.repetitions += 1;
        // As the bundle writes them: a list in brackets, a field the writer left out "not recorded".
        let given = |v: Option<String>| v.unwrap_or_else(|| "not recorded".into());
        let forwards = |r: &schema::Repetition| given(r.forward_passes.map(|f| f.to_string()));
        let commits = |r: &schema::Repetition| given(r.committed_per_step.as_ref().map(|c| format!("{c:?}")));
        let fields: [(&str, String, String); 5] = [
            ("prompt_indices", format!("{:?}", x.prompt_indices), format!("{:?}", y.prompt_indices)),
            ("forward_passes", forwards(x), forwards(y)),
            ("committed_per_step", commits(x), commits(y)),
            ("output_tokens", x.output_tokens.to_string(), y.output_tokens.to_string()),
            ("output_bytes", x.output_bytes.to_string(), y.output_bytes.to_string()),
        ];
        for (field, p, q) in fields {
            if p != q {
                diffs.push(format!("repetition {i}: {field} {p} vs {q}"));
            }
        }
    }
    let (pa, pb) = (perplexities(a), perplexities(b));
    for (ev, x) in &pa {
        let Some(y) = pb.get(ev) else { continue };
        let rel = (x - y).abs() / x.abs().max(f64::MIN_POSITIVE);
        counts.perplexities += 1;
        counts.max_ppl_rel = counts.max_ppl_rel.max(rel);
        if rel > rtol {
            diffs.push(format!("perplexity ({}) {x:.6} vs {y:.6} (relative {rel:.2e} > {rtol})", ev.unwrap_or("-")));
        }
    }
    diffs
}

/// The token-for-token report and the number of cells with a difference (a missing cell counts; so does a
/// comparison with no continuations at all).
pub fn tokens(a: &Bundle, b: &Bundle, rtol: f64, names: &[String; 2]) -> (String, usize) {
    let mut out = String::new();
    let mut cells_b: BTreeMap<&CellKey, &Cell> = b.cells.iter().map(|c| (&c.key, c)).collect();
    let mut counts = Counts::default();
    let mut bad = 0;
    for ca in &a.cells {
        let label = ca.key.to_string();
        let Some(cb) = cells_b.remove(&ca.key) else {
            let _ = writeln!(out, "{label:<40} missing from {}", names[1]);
            bad += 1;
            continue;
        };
        let diffs = cell_diffs(ca, cb, rtol, &mut counts);
        if diffs.is_empty() && ca.generations.is_empty() {
            // Nothing to say "same" of: the tokens are the continuations, and this cell kept none.
            let _ = writeln!(out, "{label:<40} no continuations (forward passes, commits and output bytes equal)");
        } else if diffs.is_empty() {
            let _ = writeln!(out, "{label:<40} same");
        } else {
            let _ = writeln!(out, "{label:<40} DIFFERS: {}", diffs.join("; "));
            bad += 1;
        }
    }
    for cb in cells_b.values() {
        let _ = writeln!(out, "{:<40} missing from {}", cb.key.to_string(), names[0]);
        bad += 1;
    }
    let perplexities = match counts.perplexities {
        0 => "no perplexity in both to compare".to_string(),
        n => format!("largest perplexity difference {:.2e} (relative, {n} compared)", counts.max_ppl_rel),
    };
    let _ = writeln!(
        out,
        "summary: {} cells, {bad} with a difference; continuations equal {}/{}; repetitions compared {}; \
         {perplexities}",
        a.cells.len(),
        counts.generations_equal,
        counts.generations,
        counts.repetitions,
    );
    if counts.generations == 0 {
        let _ = writeln!(
            out,
            "note: no continuations to compare (the grid needs a [quality] section), so the tokens are not shown \
             equal (exit 1; 0 with --report-only)"
        );
        bad += 1;
    }
    (out, bad)
}
