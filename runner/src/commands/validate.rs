//! `dllm-bench validate`: bundles read (upgrading older versions) and reported.
//!
//! It refuses (exit 2, naming the field and the fix) what every reader refuses (`schema::check_bundle`: among them
//! what a hand edit can make inconsistent, such as a model with synthetic weights in a bundle whose
//! `provenance.synthetic_weights` is false, or a 0 where no measurement can be 0). It says when a bundle is
//! partial ([`partial`]: fewer cells than the run planned, a merge with missing cells, or continuations not every
//! evaluator has scored: a run stopped while scoring): a valid file (exit 0, the line says PARTIAL) unless
//! `--complete` asks for a whole grid (then exit 2).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use schema::{Bundle, CellKey};

use crate::InputError;

/// `dllm-bench validate`.
#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// Bundle files.
    #[arg(required = true, value_name = "BUNDLE")]
    pub bundles: Vec<PathBuf>,
    /// Also refuse (exit 2) a partial bundle: one with fewer cells than its run planned (an interrupted run's
    /// `partial.json`), a merge with missing cells, or continuations not every evaluator has scored (a run stopped
    /// while scoring). Without it a partial bundle is valid and said PARTIAL.
    #[arg(long)]
    pub complete: bool,
}

/// What a partial bundle lacks, from its own fields ([`metrics::coverage::partial`] says whether it is partial, and
/// names the continuations an evaluator has not scored): `provenance.planned_cells` against its cells, and
/// `provenance.missing_cells` (a merge with `--allow-missing`).
#[derive(Debug, Clone, PartialEq)]
pub struct Partial {
    /// The shortfall as every reader counts it: cells held, cells planned.
    pub shortfall: metrics::coverage::Partial,
    /// The planned cells the bundle does not hold, when they can be named: `provenance.missing_cells`, else the
    /// cells of the embedded config (the bundle's shard of it) that are not in the bundle, when their number is the
    /// one missing (a parity search adds cells the config does not list: then they are not named).
    pub not_measured: Vec<CellKey>,
    /// Groups of cells (a model, sampler, N and K: quality is measured once per group) of the planned grid with
    /// no quality value in the bundle yet, each named by the cell that measures it (its largest B); empty without a
    /// `[quality]` table.
    pub unscored: Vec<CellKey>,
}

impl Partial {
    /// `16 of 48 planned cells`, or `16 cells, 4 of the grid missing` without a planned count.
    pub fn counts(&self) -> String {
        self.shortfall.counts()
    }
}

/// The partial state of a bundle; `None` when it holds every cell it planned and every evaluator has scored its
/// continuations.
pub fn partial(b: &Bundle) -> Option<Partial> {
    let p = &b.provenance;
    let shortfall = metrics::coverage::partial(b)?;
    let present: BTreeSet<&CellKey> = b.cells.iter().map(|c| &c.key).collect();
    let planned_keys = crate::shard::select(&p.config.cells(), p.shard);
    let from_config: Vec<CellKey> = planned_keys.iter().filter(|k| !present.contains(k)).cloned().collect();
    let missing = p.planned_cells.map(|n| (n as usize).saturating_sub(b.cells.len()));
    let not_measured = if !p.missing_cells.is_empty() {
        p.missing_cells.clone()
    } else if missing == Some(from_config.len()) {
        from_config
    } else {
        Vec::new()
    };
    let mut unscored = Vec::new();
    if p.config.quality.is_some() {
        // Per group (the key without B), the cell that measures its quality (the largest B), over every cell
        // the bundle holds or lacks.
        let mut groups: BTreeMap<metrics::parity::GroupKey, &CellKey> = BTreeMap::new();
        for k in b.cells.iter().map(|c| &c.key).chain(&not_measured) {
            let g = groups.entry(metrics::parity::GroupKey::of(k)).or_insert(k);
            if k.batch_size > g.batch_size {
                *g = k;
            }
        }
        let scored: BTreeSet<metrics::parity::GroupKey> = b
            .cells
            .iter()
            .filter(|c| !c.quality.is_empty() || !c.quality_errors.is_empty())
            .map(|c| metrics::parity::GroupKey::of(&c.key))
            .collect();
        unscored = groups.into_iter().filter(|(g, _)| !scored.contains(g)).map(|(_, k)| k.clone()).collect();
    }
    Some(Partial { shortfall, not_measured, unscored })
}

/// Keys as a list, at most `n` named.
fn list(keys: &[CellKey], n: usize) -> String {
    let mut s = keys.iter().take(n).map(|k| k.to_string()).collect::<Vec<_>>().join("; ");
    if keys.len() > n {
        s.push_str(&format!("; ... and {} more", keys.len() - n));
    }
    s
}

pub fn main(args: ValidateArgs) -> Result<ExitCode> {
    let mut bad = 0;
    let mut incomplete = Vec::new();
    for path in &args.bundles {
        match crate::input::read_bundle_file_text(path) {
            Ok((r, text)) => {
                let b = &r.bundle;
                let ok = b.cells.iter().filter(|c| c.status == schema::CellStatus::Ok).count();
                let mut note = if r.upgraded() {
                    format!(" (schema {} upgraded to {})", r.file_version, schema::SchemaVersion::CURRENT)
                } else if r.newer_minor() {
                    format!(" (schema {}: newer minor version, unknown fields ignored)", r.file_version)
                } else {
                    String::new()
                };
                if r.recounted_repetitions > 0 {
                    note += &format!(" ({})", schema::recount_note(r.recounted_repetitions));
                }
                let part = partial(b);
                match &part {
                    None => println!(
                        "{}: ok, {} ({ok} ok), {}{note}",
                        path.display(),
                        crate::counted(b.cells.len(), "cell"),
                        crate::counted(b.models.len(), "model")
                    ),
                    Some(x) => {
                        println!(
                            "{}: valid but PARTIAL: {} ({ok} ok), {}{note}; S_parity, speedups and verdicts \
                             from it may change when the rest is measured",
                            path.display(),
                            x.counts(),
                            crate::counted(b.models.len(), "model")
                        );
                        incomplete.push((path, x.counts()));
                    }
                }
                // What a partial bundle lacks, said where a user checks it.
                if let Some(shard) = part.as_ref().and_then(|x| x.shortfall.shard) {
                    println!(
                        "  partial: shard {shard} of a grid split in {}: its S_parity and speedups are this shard's \
                         cells alone; fix: merge every shard's bundle (dllm-bench merge SHARD_BUNDLES -o BUNDLE)",
                        shard.count
                    );
                }
                if !b.provenance.missing_cells.is_empty() {
                    println!(
                        "  partial: {} cells of the grid are in no shard (merged with --allow-missing): {}",
                        b.provenance.missing_cells.len(),
                        b.provenance.missing_cells.iter().map(|k| k.to_string()).collect::<Vec<_>>().join("; ")
                    );
                } else if let Some(x) =
                    part.as_ref().filter(|x| x.shortfall.planned.is_some_and(|p| (p as usize) > x.shortfall.present))
                {
                    let what = match x.not_measured.is_empty() {
                        true => String::new(),
                        false => format!(": {}", list(&x.not_measured, 10)),
                    };
                    println!(
                        "  partial: {} planned cells not measured yet (an interrupted run: {}){what}",
                        x.shortfall.planned.map_or(0, |p| (p as usize).saturating_sub(x.shortfall.present)),
                        metrics::coverage::finish_hint(b)
                    );
                }
                if let Some(x) = part.as_ref().filter(|x| !x.unscored.is_empty()) {
                    println!(
                        "  partial: {} quality groups have no quality value yet (S_parity leaves their K out), each \
                         measured in: {}",
                        x.unscored.len(),
                        list(&x.unscored, 10)
                    );
                }
                if let Some(x) = part.as_ref().filter(|x| !x.shortfall.unscored.is_empty()) {
                    println!(
                        "  partial: the continuations of {} cells are not yet scored by every evaluator (a run stopped \
                         while scoring: {}; a value S_parity needs may be among them): {}",
                        x.shortfall.unscored.len(),
                        metrics::coverage::finish_hint(b),
                        list(&x.shortfall.unscored, 10)
                    );
                }
                // A field no reader knows, in a file of this major version and no newer minor (minors only add
                // fields): misspelled (`prefil_ms`), its value lost to every reader. (An older major's fields are
                // upgraded; a newer minor's are said above.)
                let current = schema::SchemaVersion::CURRENT.number();
                if r.file_version.major == current.major && r.file_version.minor <= current.minor {
                    for field in schema::unknown_fields(&text) {
                        let hint = schema::unknown_field_hint(&field).map_or(String::new(), |h| format!(" {h}"));
                        println!(
                            "  warning: {field} is not a field of schema {}: every reader ignores it (misspelled?{hint} \
                             its value is lost to them; `dllm-bench schema` lists the fields)",
                            schema::SchemaVersion::CURRENT
                        );
                    }
                }
                if let Some(opts) = metrics::parity::ParityOptions::from_config(b)
                    && !b.parity.is_empty()
                {
                    let given = metrics::parity::parity(b, &opts);
                    if given != b.parity {
                        println!(
                            "  stale: the stored S_parity records (`parity`) are not those its cells give ({}; the \
                             bundle was edited, or written by an older version); `report`, `export` and the explorer \
                             use the cells'",
                            stale_parity(&b.parity, &given)
                        );
                    }
                }
                for c in b.cells.iter().filter(|c| !c.stalled_prompts.is_empty()) {
                    println!(
                        "  {}: {} prompts stalled (no continuation, not scored): {:?}",
                        c.key,
                        c.stalled_prompts.len(),
                        c.stalled_prompts
                    );
                }
            }
            Err(e) => {
                bad += 1;
                eprintln!("{e:#}");
            }
        }
    }
    if bad > 0 {
        let said = match (bad, args.bundles.len()) {
            (_, 1) => "the bundle is invalid".to_string(),
            (2, 2) => "both bundles are invalid".to_string(),
            (1, n) => format!("1 of {n} bundles is invalid"),
            (bad, n) if bad == n => format!("all {n} bundles are invalid"),
            (bad, n) => format!("{bad} of {n} bundles are invalid"),
        };
        return Err(InputError(said).into());
    }
    if args.complete && !incomplete.is_empty() {
        let names: Vec<String> = incomplete.iter().map(|(p, c)| format!("{} ({c})", p.display())).collect();
        return Err(InputError(format!(
            "--complete: {} of {} bundles are partial: {}; fix: finish each (a run: dllm-bench run --resume DIR, or \
             merge every shard's bundle; jobs/hf_reference.py: measure the cells left into another bundle), or leave \
             out --complete to accept a partial bundle",
            incomplete.len(),
            args.bundles.len(),
            names.join(", ")
        ))
        .into());
    }
    Ok(ExitCode::SUCCESS)
}

/// Where the stored S_parity records first differ from those the cells give: the record and its fields that differ,
/// or how many there are of each.
fn stale_parity(stored: &[schema::parity::ParityRecord], given: &[schema::parity::ParityRecord]) -> String {
    let Some(i) = stored.iter().zip(given).position(|(s, g)| s != g) else {
        return format!("{} stored, {} from the cells", stored.len(), given.len());
    };
    let (s, g) = (&stored[i], &given[i]);
    let fields = match (serde_json::to_value(s), serde_json::to_value(g)) {
        (Ok(serde_json::Value::Object(x)), Ok(serde_json::Value::Object(y))) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().filter(|k| x.get(*k) != y.get(*k)).map(|k| k.as_str()).collect::<Vec<_>>().join(", ")
        }
        _ => String::new(),
    };
    format!(
        "parity[{i}], {} at N = {} for {} {}, differs in {}",
        s.metric,
        s.seq_len,
        s.diffusion_model,
        s.sampler.name(),
        if fields.is_empty() { "its values" } else { &fields }
    )
}
