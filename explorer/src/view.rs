//! What the page shows, computed from a bundle without any browser API (so it is tested natively).
//!
//! Parsing and every derived number come from the `schema` crate; this module only turns them into
//! display rows and [`LatencyChart`]s, and validates what the page fetches (index entries, file names).

use schema::derive::{LatencySeries, latency_vs_steps};
use schema::{BundleIndex, IndexEntry};

use crate::chart::{ArReference, DiffusionLine, LatencyChart, StepPoint};

/// Text of an index entry in the bundle selector.
pub fn option_label(e: &IndexEntry) -> String {
    let mut s = if e.title.is_empty() { e.file.clone() } else { e.title.clone() };
    if !e.created_at.is_empty() {
        s.push_str(&format!(" ({})", e.created_at));
    }
    if e.synthetic_weights {
        s.push_str(" [synthetic weights]");
    }
    s
}

/// Parses `bundles/index.json`, dropping entries whose file name could escape `bundles/`.
pub fn parse_index(json: &str) -> Result<Vec<IndexEntry>, String> {
    let idx: BundleIndex =
        serde_json::from_str(json).map_err(|e| format!("bundles/index.json is not a valid bundle index: {e}"))?;
    Ok(idx.bundles.into_iter().filter(|e| is_plain_file_name(&e.file)).collect())
}

/// True for a bare file name (no path separators, no `..`, no URL syntax): safe to append to `bundles/`.
pub fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+'))
}

/// A bundle ready to show.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedBundle {
    /// Where it came from (file name).
    pub source: String,
    /// Label/value rows of the provenance panel, in display order.
    pub provenance: Vec<(&'static str, String)>,
    /// Timing is real, quality meaningless.
    pub synthetic_weights: bool,
    /// One chart per (batch size, sequence length), sorted by B then N.
    pub charts: Vec<LatencyChart>,
}

/// Parses a bundle and prepares everything the page shows; the error is a message for the user.
pub fn load_bundle(source: &str, json: &str) -> Result<LoadedBundle, String> {
    let read = schema::read_bundle_detailed(json).map_err(|e| format!("cannot read bundle {source}: {e}"))?;
    let b = &read.bundle;
    let p = &b.provenance;
    let d = &p.device;
    let unknown = || "unknown".to_string();
    let device = match (&d.name, d.memory_bytes) {
        (Some(n), Some(m)) => format!("{} {n} ({:.1} GiB)", d.kind, m as f64 / (1u64 << 30) as f64),
        (Some(n), None) => format!("{} {n}", d.kind),
        (None, _) => d.kind.clone(),
    };
    let format = if read.upgraded() {
        format!("{} (upgraded from {} on reading)", b.schema_version, read.file_version)
    } else if read.newer_minor() {
        format!("{} (newer than this explorer: fields it does not know are not shown)", read.file_version)
    } else {
        b.schema_version.to_string()
    };
    let provenance = vec![
        ("Tool", format!("{} {}", p.tool, p.tool_version)),
        ("Git commit", p.git_commit.clone().unwrap_or_else(unknown)),
        ("Created", p.created_at.clone()),
        ("Host", p.host.clone().unwrap_or_else(unknown)),
        ("Device", device),
        ("Driver", d.driver_version.clone().unwrap_or_else(|| "n/a".into())),
        ("CUDA", d.cuda_version.clone().unwrap_or_else(|| "n/a".into())),
        ("Attention", p.attention.clone()),
        ("Config", p.config_source.clone()),
        ("Format", format),
    ];
    Ok(LoadedBundle {
        source: source.to_string(),
        provenance,
        synthetic_weights: p.synthetic_weights,
        charts: group_by_shape(&latency_vs_steps(b)),
    })
}

/// Puts the series of `schema::derive::latency_vs_steps` of one (B, N) on one chart, keeping its
/// order (N, then B). No number is computed here: medians and spreads are the schema's.
pub fn group_by_shape(series: &[LatencySeries]) -> Vec<LatencyChart> {
    let mut charts: Vec<LatencyChart> = Vec::new();
    for s in series.iter().filter(|s| !s.points.is_empty()) {
        let line = DiffusionLine {
            label: format!("{} ({})", s.model, sampler_label(s.sampler)),
            points: s
                .points
                .iter()
                .map(|p| StepPoint {
                    steps: p.steps,
                    median_ms: p.e2e_ms.median,
                    min_ms: p.e2e_ms.min,
                    max_ms: p.e2e_ms.max,
                })
                .collect(),
        };
        let ar = s
            .ar_reference
            .as_ref()
            .map(|a| ArReference { label: format!("{} (autoregressive)", a.model), median_ms: a.e2e_ms.median });
        match charts.iter_mut().find(|c| (c.batch_size, c.seq_len) == (s.batch_size, s.seq_len)) {
            Some(c) => {
                c.lines.push(line);
                c.ar = c.ar.take().or(ar);
            }
            None => charts.push(LatencyChart { batch_size: s.batch_size, seq_len: s.seq_len, lines: vec![line], ar }),
        }
    }
    charts
}

fn sampler_label(s: schema::Sampler) -> &'static str {
    match s {
        schema::Sampler::ArGreedy => "greedy",
        schema::Sampler::LladaLowConfidence => "low-confidence remasking",
        schema::Sampler::LladaRandom => "random remasking",
    }
}
