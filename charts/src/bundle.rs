//! Loading: a bundle's text -> a [`LoadedBundle`] (parsed, upgraded and checked by `schema`) and its provenance
//! rows; each cell's summary (`metrics::derive`) and quality values are derived when a view first asks for them.
//! No browser API, so it is tested natively.

use std::sync::OnceLock;

use metrics::derive::{CellSummary, cell_summary};
use metrics::parity::ParityRecord;
use schema::{Bundle, ReadBundle};

pub use schema::bundle::QualityValue;

/// A bundle ready to show.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedBundle {
    /// Where it came from (file name).
    pub source: String,
    /// Label/value rows of the provenance panel, in display order.
    pub provenance: Vec<(&'static str, String)>,
    /// Timing is real, quality meaningless.
    pub synthetic_weights: bool,
    /// For a partial bundle (`metrics::coverage::partial`), the counts (`8 of 12 planned cells`, with the
    /// continuations not yet scored by every evaluator where some are not): its S_parity and speedups may change
    /// when the rest is measured.
    pub partial: Option<String>,
    /// Repetitions whose token counts the reader corrected (`schema::ReadBundle::recounted_repetitions`).
    pub recounted_repetitions: usize,
    /// The bundle in the current format.
    pub bundle: Bundle,
    /// `metrics::derive::cell_summary` of each cell, in bundle order, computed on first use ([`Self::summary`]):
    /// the first chart of a 10,000-cell bundle needs a few dozen of them.
    summaries: Derived<Vec<OnceLock<CellSummary>>>,
    /// Quality values per cell (empty when the bundle has none), computed on first use ([`Self::quality`]).
    quality: Derived<OnceLock<Vec<Vec<QualityValue>>>>,
    /// The values each filter can take in this bundle, computed on first use (`views::filter_choices`: every
    /// redraw asks for them).
    pub(crate) choices: Derived<OnceLock<crate::views::FilterChoices>>,
    /// S_parity records per metric label, computed on first use (the bootstrap does not depend on the filters).
    pub parity_cache: ParityCache,
}

/// S_parity records by metric label (see [`LoadedBundle::parity_cache`]); a cache, so clones start empty and
/// any two compare equal.
#[derive(Debug, Default)]
pub struct ParityCache(std::sync::Mutex<Vec<(String, std::sync::Arc<Vec<ParityRecord>>)>>);

impl ParityCache {
    /// The records of `label`, computed by `compute` the first time.
    pub fn get_or(
        &self,
        label: &str,
        compute: impl FnOnce() -> Vec<ParityRecord>,
    ) -> std::sync::Arc<Vec<ParityRecord>> {
        let mut cache = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, r)) = cache.iter().find(|(l, _)| l == label) {
            return r.clone();
        }
        let r = std::sync::Arc::new(compute());
        cache.push((label.to_string(), r.clone()));
        r
    }
}

/// What a [`LoadedBundle`] derives from its bundle: compared through the bundle (any two compare equal here, as
/// [`ParityCache`]s do), cloned with what was computed so far.
#[derive(Debug, Clone, Default)]
pub(crate) struct Derived<T>(pub(crate) T);

impl<T> PartialEq for Derived<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl LoadedBundle {
    /// A read bundle ready to show, from `source` (a file name).
    pub fn new(source: &str, read: ReadBundle) -> LoadedBundle {
        let provenance = provenance_rows(&read);
        let cells = read.bundle.cells.len();
        LoadedBundle {
            source: source.to_string(),
            provenance,
            synthetic_weights: read.bundle.provenance.synthetic_weights,
            partial: metrics::coverage::partial(&read.bundle).map(|p| p.counts()),
            recounted_repetitions: read.recounted_repetitions,
            summaries: Derived((0..cells).map(|_| OnceLock::new()).collect()),
            quality: Derived(OnceLock::new()),
            choices: Derived(OnceLock::new()),
            bundle: read.bundle,
            parity_cache: ParityCache::default(),
        }
    }

    /// `metrics::derive::cell_summary` of cell `cell` (an index into `bundle.cells`).
    pub fn summary(&self, cell: usize) -> &CellSummary {
        self.summaries.0[cell].get_or_init(|| cell_summary(&self.bundle.cells[cell]))
    }

    /// Quality values per cell, in bundle order (each empty when the bundle has none).
    ///
    /// Each cell shows its group's quality (measured once per group, in its largest batch); a metric scored by an
    /// evaluator is named with it, so that two evaluators' perplexities are two metrics to choose from. The
    /// per-prompt values stay in the bundle's own cells (S_parity's bootstrap reads them there), not in every
    /// cell's copy.
    pub fn quality(&self) -> &[Vec<QualityValue>] {
        self.quality.0.get_or_init(|| {
            metrics::parity::cell_quality(&self.bundle)
                .into_iter()
                .map(|qs| {
                    qs.into_iter()
                        .map(|q| QualityValue { metric: q.label(), evaluator: None, per_prompt: Vec::new(), ..q })
                        .collect()
                })
                .collect()
        })
    }

    /// The quality metrics of the cells (named as [`Self::quality`] names them), each once, in no order: those of
    /// the cells' own values, which are the values every cell shows (a cell without its own shows its group's),
    /// without deriving every cell's.
    pub fn quality_labels(&self) -> Vec<String> {
        let mut seen: Vec<(&str, Option<&str>)> = Vec::new();
        for q in self.bundle.cells.iter().flat_map(|c| &c.quality) {
            let k = (q.metric.as_str(), q.evaluator.as_deref());
            if !seen.contains(&k) {
                seen.push(k);
            }
        }
        seen.into_iter()
            .map(|(m, e)| match e {
                Some(e) => format!("{m} [{e}]"),
                None => m.to_string(),
            })
            .collect()
    }
}

impl Clone for ParityCache {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for ParityCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// Parses a bundle and prepares what the page shows first; the error is a message for the user.
pub fn load_bundle(source: &str, json: &str) -> Result<LoadedBundle, String> {
    let read = schema::read_bundle_detailed(json).map_err(|e| {
        // The fix `dllm-bench validate` prints for this kind of error, unless the message names its own.
        let message = e.to_string();
        match e.fix() {
            fix if fix.is_empty() || message.contains("fix:") => format!("cannot read bundle {source}: {message}"),
            fix => format!("cannot read bundle {source}: {message}; fix: {fix}"),
        }
    })?;
    Ok(LoadedBundle::new(source, read))
}

/// Label/value rows of the provenance panel.
fn provenance_rows(read: &ReadBundle) -> Vec<(&'static str, String)> {
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
    let format = match read.recounted_repetitions {
        0 => format,
        n => format!("{format}; {}", schema::recount_note(n)),
    };
    vec![
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
        ("Weights", weights_text(b)),
        ("Prompts", prompts_text(b)),
        ("Cells", cells_text(b)),
    ]
}

/// The models and whether their weights are real.
fn weights_text(b: &Bundle) -> String {
    let models: Vec<String> = b
        .models
        .iter()
        .map(|m| {
            let w = if m.synthetic { "SYNTHETIC weights" } else { "real weights" };
            let commit = m.commit.as_deref().map(|c| format!(" @ {c}")).unwrap_or_default();
            format!("{} {}{commit} ({}, {w})", m.id, m.revision, m.dtype)
        })
        .collect();
    models.join("; ")
}

/// The prompt set, and the models whose prompts were wrapped in their chat template (since 1.5).
fn prompts_text(b: &Bundle) -> String {
    let set = format!("{} ({}, {} prompts)", b.prompt_set.source, b.prompt_set.selection, b.prompt_set.count);
    let wrapped: Vec<String> = b
        .models
        .iter()
        .filter_map(|m| m.chat_template.as_ref().map(|c| format!("{} ({} tokens each)", m.id, c.frame_tokens)))
        .collect();
    match wrapped.is_empty() {
        true => set,
        false => format!("{set}; wrapped in the chat template of {}", wrapped.join(", ")),
    }
}

/// Cells by status.
fn cells_text(b: &Bundle) -> String {
    let mut counts = [0usize; 4];
    for c in &b.cells {
        counts[match c.status {
            schema::CellStatus::Ok => 0,
            schema::CellStatus::Oom { .. } => 1,
            schema::CellStatus::Error { .. } => 2,
            schema::CellStatus::Skipped { .. } => 3,
        }] += 1;
    }
    format!(
        "{} ({} ok, {} out of memory, {} failed, {} skipped)",
        b.cells.len(),
        counts[0],
        counts[1],
        counts[2],
        counts[3]
    )
}
