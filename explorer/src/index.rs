//! The bundles the page offers: `bundles/index.json`, read and checked (a file name that could escape `bundles/`
//! is dropped), the text of each entry in the bundle selector, and the entry the page opens first.

use schema::{BundleIndex, IndexEntry};

/// Text of an index entry among `all` in the bundle selector: its title, with its file name where another entry has
/// the same title (two runs of one config on one device read the same, and a closed selector cuts the date off).
pub fn option_label(e: &IndexEntry, all: &[IndexEntry]) -> String {
    let mut s = if e.title.is_empty() { e.file.clone() } else { e.title.clone() };
    if !e.title.is_empty() && all.iter().any(|o| o.title == e.title && o.file != e.file) {
        s.push_str(&format!(": {}", e.file));
    }
    if !e.created_at.is_empty() {
        s.push_str(&format!(" ({})", e.created_at));
    }
    if e.synthetic_weights {
        s.push_str(" [synthetic weights]");
    }
    if e.partial {
        s.push_str(" [PARTIAL]");
    }
    s
}

/// The bundle the page opens without `?bundle=`: the newest (the index is newest first) of the runner's own that
/// holds every cell its run planned, else the newest whole one, else the newest. An interrupted run's
/// `partial.json` is newer than the last whole run, and its verdicts may change; a reference implementation's
/// bundle (HF transformers, written after the runner's to compare with it) is not the study's answer.
pub fn default_entry(entries: &[IndexEntry]) -> Option<&IndexEntry> {
    let whole = || entries.iter().filter(|e| !e.partial);
    whole().find(|e| !e.reference).or_else(|| whole().next()).or_else(|| entries.first())
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
