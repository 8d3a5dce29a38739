//! Loading: a bundle's text -> a [`LoadedBundle`] (parsed, upgraded and checked by `schema`, every cell
//! summarized by `metrics::derive`) and its provenance rows. No browser API, so it is tested natively.

use metrics::derive::{CellSummary, summaries};
use metrics::parity::ParityRecord;
use schema::Bundle;

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
    /// The bundle in the current format.
    pub bundle: Bundle,
    /// `metrics::derive::cell_summary` of every cell, in bundle order.
    pub summaries: Vec<CellSummary>,
    /// Quality values per cell (empty when the bundle has none).
    pub quality: Vec<Vec<QualityValue>>,
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

/// Parses a bundle and prepares everything the page shows; the error is a message for the user.
pub fn load_bundle(source: &str, json: &str) -> Result<LoadedBundle, String> {
    let read = schema::read_bundle_detailed(json).map_err(|e| format!("cannot read bundle {source}: {e}"))?;
    // Each cell shows its group's quality (measured once per group, in its largest batch); a metric scored by an
    // evaluator is named with it, so that two evaluators' perplexities are two metrics to choose from. The
    // per-prompt values stay in the bundle's own cells (S_parity's bootstrap reads them there), not in every
    // cell's copy.
    let quality = metrics::parity::cell_quality(&read.bundle)
        .into_iter()
        .map(|qs| {
            qs.into_iter()
                .map(|q| QualityValue { metric: q.label(), evaluator: None, per_prompt: Vec::new(), ..q })
                .collect()
        })
        .collect();
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
        ("Weights", weights_text(b)),
        ("Prompts", prompts_text(b)),
        ("Cells", cells_text(b)),
    ];
    let summaries = summaries(b);
    Ok(LoadedBundle {
        source: source.to_string(),
        provenance,
        synthetic_weights: p.synthetic_weights,
        summaries,
        quality,
        bundle: read.bundle,
        parity_cache: ParityCache::default(),
    })
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
