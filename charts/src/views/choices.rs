//! The choices over the loaded bundles: the values each filter can take, the cells the filters keep, the shape a
//! per-shape view shows.

use std::collections::BTreeSet;

use metrics::derive::CellRef;
use schema::Cell;

use crate::bundle::LoadedBundle;

use super::options::Filters;
use super::series::sampler_name;

/// The values each filter can take over the loaded bundles (sorted), for the filter selects.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FilterChoices {
    /// Model ids.
    pub models: Vec<String>,
    /// Sampler names.
    pub samplers: Vec<String>,
    /// K values.
    pub steps: Vec<u32>,
    /// B values.
    pub batches: Vec<u32>,
    /// N values.
    pub seqs: Vec<u32>,
    /// Precisions.
    pub precisions: Vec<String>,
}

impl Filters {
    /// The filters without the values the loaded bundles do not have (a bundle switched under the filters, or an
    /// address naming a B another bundle had): such a value would keep no cell and empty every view, unseen in the
    /// selects that only list the bundles' values.
    pub fn within(&self, ch: &FilterChoices) -> Filters {
        let has = |all: &[String], v: &Option<String>| v.clone().filter(|v| all.contains(v));
        let has_n = |all: &[u32], v: Option<u32>| v.filter(|v| all.contains(v));
        Filters {
            model: has(&ch.models, &self.model),
            sampler: has(&ch.samplers, &self.sampler),
            steps: has_n(&ch.steps, self.steps),
            batch: has_n(&ch.batches, self.batch),
            seq: has_n(&ch.seqs, self.seq),
            precision: has(&ch.precisions, &self.precision),
        }
    }
}

/// The filter choices of the loaded bundles (each bundle's are computed once).
pub fn filter_choices(bundles: &[&LoadedBundle]) -> FilterChoices {
    if let [lb] = bundles {
        return own(lb).clone();
    }
    let mut all = Sets::default();
    for lb in bundles {
        let c = own(lb);
        all.models.extend(c.models.iter().map(String::as_str));
        all.samplers.extend(c.samplers.iter().map(String::as_str));
        all.steps.extend(c.steps.iter().copied());
        all.batches.extend(c.batches.iter().copied());
        all.seqs.extend(c.seqs.iter().copied());
        all.precisions.extend(c.precisions.iter().map(String::as_str));
    }
    all.choices()
}

/// The filter choices of one bundle, computed once.
fn own(lb: &LoadedBundle) -> &FilterChoices {
    lb.choices.0.get_or_init(|| own_choices(lb))
}

/// The filter choices of one bundle.
fn own_choices(lb: &LoadedBundle) -> FilterChoices {
    let mut own = Sets::default();
    for c in &lb.bundle.cells {
        own.models.insert(c.key.model.as_str());
        own.samplers.insert(sampler_name(c.key.sampler));
        own.steps.extend(c.key.steps);
        own.batches.insert(c.key.batch_size);
        own.seqs.insert(c.key.seq_len);
    }
    let dtypes: Vec<String> = lb.bundle.models.iter().map(|x| x.dtype.to_string()).collect();
    own.precisions.extend(dtypes.iter().map(String::as_str));
    own.choices()
}

/// The distinct values of each filter, being collected.
#[derive(Default)]
struct Sets<'a> {
    models: BTreeSet<&'a str>,
    samplers: BTreeSet<&'a str>,
    steps: BTreeSet<u32>,
    batches: BTreeSet<u32>,
    seqs: BTreeSet<u32>,
    precisions: BTreeSet<&'a str>,
}

impl Sets<'_> {
    /// The sorted choices.
    fn choices(&self) -> FilterChoices {
        let strings = |s: &BTreeSet<&str>| s.iter().map(|x| x.to_string()).collect();
        FilterChoices {
            models: strings(&self.models),
            samplers: strings(&self.samplers),
            steps: self.steps.iter().copied().collect(),
            batches: self.batches.iter().copied().collect(),
            seqs: self.seqs.iter().copied().collect(),
            precisions: strings(&self.precisions),
        }
    }
}

/// The cells of `lb` the filters keep.
pub fn kept<'a>(lb: &'a LoadedBundle, f: &Filters) -> Vec<CellRef<'a>> {
    kept_where(lb, f, &|_| true)
}

/// The cells of `lb` the filters keep and `also` accepts (e.g. one shape's): only those are summarized (a cell is
/// summarized when a view first needs it).
pub(super) fn kept_where<'a>(lb: &'a LoadedBundle, f: &Filters, also: &dyn Fn(&Cell) -> bool) -> Vec<CellRef<'a>> {
    lb.bundle
        .cells
        .iter()
        .enumerate()
        .filter(|(_, c)| f.keeps(&lb.bundle, c) && also(c))
        .map(|(index, cell)| CellRef { index, cell, summary: lb.summary(index) })
        .collect()
}

/// The distinct values, in order. (Inserting, where `collect` would sort: a collect instantiates a whole stable
/// sort per element type, about 2 KB of wasm each.)
pub(super) fn set<T: Ord>(values: impl IntoIterator<Item = T>) -> BTreeSet<T> {
    let mut s = BTreeSet::new();
    values.into_iter().for_each(|v| {
        s.insert(v);
    });
    s
}

/// The (B, N) a per-shape view shows: the filters', else the smallest (B first) that every loaded bundle has a
/// cell at, else the smallest of the main bundle's (the first), else of any; and a note saying which was chosen.
pub fn shape(bundles: &[&LoadedBundle], f: &Filters) -> Option<((u32, u32), Option<String>)> {
    if let (Some(b), Some(n)) = (f.batch, f.seq) {
        return Some(((b, n), None));
    }
    let shapes = |lb: &LoadedBundle| -> BTreeSet<(u32, u32)> {
        let mut s = BTreeSet::new();
        lb.bundle
            .cells
            .iter()
            .map(|c| (c.key.batch_size, c.key.seq_len))
            .filter(|&(b, n)| f.batch.is_none_or(|x| x == b) && f.seq.is_none_or(|x| x == n))
            .for_each(|k| {
                s.insert(k);
            });
        s
    };
    let each: Vec<BTreeSet<(u32, u32)>> = bundles.iter().map(|lb| shapes(lb)).collect();
    let first = each.first()?;
    let common = first.iter().find(|k| each.iter().all(|s| s.contains(k)));
    let (&(b, n), which) = match (common, first.first()) {
        (Some(k), _) => (k, "the smallest"),
        (None, Some(k)) => (k, "the smallest of [A]'s: the bundles share no shape, so [B] has no cell at it"),
        (None, None) => (each.iter().flatten().min()?, "the smallest"),
    };
    let note = format!("Showing B = {b}, N = {n} ({which}; choose B and N in the filters for another shape).");
    Some(((b, n), Some(note)))
}

/// The N a view drawn over every B (throughput, time per step) shows: the filters', else the smallest the bundles
/// have, said in `notes`.
pub(super) fn seq_len(ch: &FilterChoices, f: &Filters, notes: &mut Vec<String>) -> Option<u32> {
    let n = f.seq.or_else(|| ch.seqs.first().copied())?;
    if f.seq.is_none() {
        notes.push(format!("Showing N = {n} (the smallest; choose N in the filters for another length)."));
    }
    Some(n)
}
