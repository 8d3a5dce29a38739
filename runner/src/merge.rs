//! `dllm-bench merge`: the bundles of a grid's shards (a SLURM job array) into one bundle of the whole grid.
//!
//! Refused, with a message naming the files: shards of different configs (by the hash of the resolved config),
//! of different dllm-bench versions, of different prompt sets or model snapshots, on different device models
//! (unless `--allow-mixed-devices`: the study does not mix A100 and A6000 results), a cell present in two
//! shards, and cells of the grid that no shard has or whose continuations an evaluator has not scored (a run
//! stopped while scoring; unless `--allow-missing`, which writes a partial bundle).
//! The merged bundle lists every shard's executions, and each cell still points to the one that measured it; a
//! partial one (`--allow-missing`) lists the cells it lacks (`provenance.missing_cells`).
//!
//! The output (`-o FILE`) may not be one of the inputs (no command replaces a bundle it read:
//! [`crate::input::read_by_this_process`]); an existing file there is replaced (atomically: readers see the old
//! bundle or the whole new one).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;

use schema::{Bundle, Cell, CellKey, ModelInfo};

use crate::InputError;
use crate::plan::{config_diff, config_sha256};

/// What merging may tolerate.
#[derive(Debug, Clone, Copy, Default)]
pub struct MergeOptions {
    /// Allow shards measured on different device models.
    pub allow_mixed_devices: bool,
    /// Write the merged bundle even when cells of the grid are missing.
    pub allow_missing: bool,
    /// Allow shards written by different builds of the runner (`provenance.git_commit` and `git_dirty`).
    pub allow_mixed_builds: bool,
}

/// A merged bundle and what is worth telling the user.
#[derive(Debug)]
pub struct Merged {
    /// The bundle of the whole grid.
    pub bundle: Bundle,
    /// Cells of the grid no shard had (only with `allow_missing`).
    pub missing: Vec<CellKey>,
    /// Per input bundle with any, its cells whose continuations lack an evaluator's perplexity or BERTScore (only with
    /// `allow_missing`).
    pub unscored: Vec<String>,
    /// Device models seen, e.g. `cuda NVIDIA A100-SXM4-80GB`.
    pub devices: Vec<String>,
}

/// `items` a line each (indented), the first `limit` of them and how many more.
pub fn list<T: std::fmt::Display>(items: impl IntoIterator<Item = T>, limit: usize) -> String {
    let all: Vec<String> = items.into_iter().map(|x| format!("  {x}")).collect();
    let n = all.len();
    let mut out: Vec<String> = all.into_iter().take(limit).collect();
    if n > limit {
        out.push(format!("  ... and {} more", n - limit));
    }
    out.join("\n")
}

/// The known device models a bundle's cells ran on (`execution::device_model`): of the executions that measured
/// them, or of every execution (the provenance's device without any) when no cell names its execution.
fn devices(b: &Bundle) -> BTreeSet<String> {
    if b.cells.iter().any(|c| c.execution.is_some()) {
        return crate::execution::measured_on(&b.provenance.executions, &b.cells);
    }
    let mut all: Vec<&schema::DeviceInfo> = b.provenance.executions.iter().map(|e| &e.device).collect();
    if all.is_empty() {
        all.push(&b.provenance.device);
    }
    all.into_iter().filter_map(crate::execution::device_model).collect()
}

/// Merges shard bundles (path, bundle).
pub fn merge(inputs: &[(PathBuf, Bundle)], opts: MergeOptions) -> Result<Merged, InputError> {
    let Some((first_path, first)) = inputs.first() else {
        return Err(InputError("merge: no bundles given".into()));
    };
    let refuse = |msg: String| Err(InputError(format!("merge refused: {msg}")));
    let show = |p: &PathBuf| p.display().to_string();

    // Same config (by the hash of its resolved TOML, which overrides are part of).
    let hash0 = config_sha256(&first.provenance.config);
    for (path, b) in &inputs[1..] {
        let h = config_sha256(&b.provenance.config);
        if h != hash0 {
            return refuse(format!(
                "{} and {} come from different configs (sha256 {} from {:?}, and {} from {:?}).\n\
                 These fields differ (- {}, + {}):\n{}\n  fix: merge only the shards of one grid (one job array)",
                show(first_path),
                show(path),
                &hash0[..12],
                first.provenance.config_source,
                &h[..12],
                b.provenance.config_source,
                show(first_path),
                show(path),
                config_diff(&first.provenance.config.to_toml(), &b.provenance.config.to_toml())
            ));
        }
    }
    for (path, b) in &inputs[1..] {
        let build = |p: &schema::bundle::Provenance| (p.git_commit.clone(), p.git_dirty.clone());
        if build(&b.provenance) != build(&first.provenance) && !opts.allow_mixed_builds {
            let show_build = |p: &schema::bundle::Provenance| match p.git_dirty.len() {
                0 => p.git_commit.clone().unwrap_or_else(|| "an unknown commit".into()),
                n => format!("{} ({n} changed sources)", p.git_commit.as_deref().unwrap_or("an unknown commit")),
            };
            return refuse(format!(
                "{} was written by the build of {} and {} by the build of {}: the merged bundle would name one \
                 build for both; fix: rerun the shards with one build (a resumed shard refuses another build too), \
                 or pass --allow-mixed-builds to merge anyway",
                show(first_path),
                show_build(&first.provenance),
                show(path),
                show_build(&b.provenance)
            ));
        }
        if b.provenance.tool_version != first.provenance.tool_version {
            return refuse(format!(
                "{} was written by dllm-bench {} and {} by {}; fix: rerun the shards with one version",
                show(first_path),
                first.provenance.tool_version,
                show(path),
                b.provenance.tool_version
            ));
        }
        if b.prompt_set.sha256 != first.prompt_set.sha256 {
            return refuse(format!(
                "{} and {} used different prompt sets (sha256 {} and {}); fix: rerun the shards on the same prompts",
                show(first_path),
                show(path),
                first.prompt_set.sha256.as_deref().unwrap_or("absent"),
                b.prompt_set.sha256.as_deref().unwrap_or("absent")
            ));
        }
    }
    // Same device model everywhere, unless asked.
    let mut by_device: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (path, b) in inputs {
        for d in devices(b) {
            by_device.entry(d).or_default().push(show(path));
        }
    }
    if by_device.len() > 1 && !opts.allow_mixed_devices {
        let lines = by_device.iter().map(|(d, files)| format!("{d}: {}", files.join(", ")));
        return refuse(format!(
            "the shards ran on different device models:\n{}\n  fix: rerun the odd shards on the same GPU model \
             (e.g. sbatch --constraint), or pass --allow-mixed-devices to merge anyway",
            list(lines, 20)
        ));
    }
    // Same model snapshots.
    let mut models: Vec<ModelInfo> = Vec::new();
    for (path, b) in inputs {
        for m in &b.models {
            match models.iter().find(|x| x.id == m.id) {
                Some(x) if x.commit != m.commit => {
                    return refuse(format!(
                        "model {} is snapshot {} in one shard and {} in {}; fix: rerun with one snapshot",
                        m.id,
                        x.commit.as_deref().unwrap_or("?"),
                        m.commit.as_deref().unwrap_or("?"),
                        show(path)
                    ));
                }
                Some(_) => {}
                None => models.push(m.clone()),
            }
        }
    }
    // Shard counts must agree.
    let counts: BTreeSet<u32> = inputs.iter().filter_map(|(_, b)| b.provenance.shard.map(|s| s.count)).collect();
    if counts.len() > 1 {
        return refuse(format!(
            "the bundles come from splits into different numbers of shards ({counts:?}); fix: merge the shards of one \
             job array"
        ));
    }

    // Cells: each at most once, each of the grid.
    let grid = first.provenance.config.cells();
    let order: HashMap<&CellKey, usize> = grid.iter().enumerate().map(|(i, k)| (k, i)).collect();
    let mut seen: HashMap<CellKey, String> = HashMap::new();
    let mut duplicates = Vec::new();
    let mut foreign = Vec::new();
    let mut cells: Vec<Cell> = Vec::new();
    let mut executions = Vec::new();
    for (path, b) in inputs {
        let offset = executions.len() as u32;
        executions.extend(b.provenance.executions.iter().cloned());
        for c in &b.cells {
            if !order.contains_key(&c.key) {
                foreign.push(format!("{} (in {})", c.key, show(path)));
                continue;
            }
            if let Some(other) = seen.get(&c.key) {
                duplicates.push(format!("{} (in {other} and {})", c.key, show(path)));
                continue;
            }
            seen.insert(c.key.clone(), show(path));
            let mut c = c.clone();
            c.execution = c.execution.map(|e| e + offset);
            cells.push(c);
        }
    }
    if !foreign.is_empty() {
        return refuse(format!("cells that are not in the grid of the config:\n{}", list(foreign, 10)));
    }
    if !duplicates.is_empty() {
        return refuse(format!(
            "{} cells are in more than one bundle:\n{}\n  fix: merge each shard once (the shards of one job array are \
             disjoint)",
            duplicates.len(),
            list(duplicates, 10)
        ));
    }
    // Every continuation scored by every evaluator (a value, or the error that prevented it): a run stopped while
    // its evaluators scored leaves a partial bundle whose cells are all there, and its verdicts would change.
    let mut unscored = Vec::new();
    for (path, b) in inputs {
        let n = metrics::coverage::unscored_cells(b).len();
        if n > 0 {
            unscored.push(format!("{}: {n} cells", show(path)));
        }
    }
    // Missing cells first: a shard stopped while measuring lacks cells, and its measured cells' continuations are
    // unscored too (the evaluators score after the cells); the missing cells and the partial shard are the cause.
    let missing: Vec<CellKey> = grid.iter().filter(|k| !seen.contains_key(*k)).cloned().collect();
    if !missing.is_empty() && !opts.allow_missing {
        let mut hint = String::new();
        if let Some(&count) = counts.iter().next() {
            let have: BTreeSet<u32> = inputs.iter().filter_map(|(_, b)| b.provenance.shard.map(|s| s.index)).collect();
            let absent: Vec<String> =
                (0..count).filter(|i| !have.contains(i)).map(|i| format!("{i}/{count}")).collect();
            if !absent.is_empty() {
                hint.push_str(&format!("\n  shards not given: {}", absent.join(", ")));
            }
        }
        for (path, b) in inputs {
            if let Some(p) = b.provenance.planned_cells
                && (b.cells.len() as u32) < p
            {
                hint.push_str(&format!(
                    "\n  {} is partial: {} of {p} cells (an interrupted run; resume it)",
                    show(path),
                    b.cells.len()
                ));
            }
        }
        return refuse(format!(
            "{} of the grid's {} cells are in no bundle:\n{}{hint}\n  fix: give every shard's bundle, finish the \
             interrupted ones (dllm-bench run --resume DIR), or pass --allow-missing to write a partial bundle",
            missing.len(),
            grid.len(),
            list(missing.iter(), 10)
        ));
    }
    if !unscored.is_empty() && !opts.allow_missing {
        return refuse(format!(
            "continuations lack an evaluator's perplexity or the encoder's BERTScore (a run stopped while scoring):\n{}\n  fix: resume those \
             runs to the end (`dllm-bench run --resume` their run folders), or pass --allow-missing to merge \
             without those values",
            list(unscored, 10)
        ));
    }
    cells.sort_by_key(|c| order.get(&c.key).copied().unwrap_or(usize::MAX));
    // As a single run lists them: measured models and evaluators, in config order, those with cells or values.
    let models = crate::sweep::bundle_models(&first.provenance.config, &models, &cells);
    let known: Vec<schema::EncoderInfo> = inputs.iter().flat_map(|(_, b)| b.encoders.iter().cloned()).collect();
    let encoders = crate::sweep::bundle_encoders(&known, &cells);
    let mut provenance = first.provenance.clone();
    provenance.created_at =
        inputs.iter().map(|(_, b)| b.provenance.created_at.clone()).min().unwrap_or(provenance.created_at);
    provenance.synthetic_weights = models.iter().any(|m| m.synthetic) || encoders.iter().any(|e| e.synthetic);
    provenance.config_sha256 = Some(hash0);
    provenance.shard = None;
    provenance.planned_cells = Some(grid.len() as u32);
    provenance.executions = executions;
    // A partial merge records which cells it lacks (`merge` says so; `validate` and `report` name them).
    provenance.missing_cells = missing.clone();
    let mut bundle = Bundle {
        schema_version: schema::SchemaVersion::CURRENT,
        provenance,
        models,
        encoders,
        prompt_set: first.prompt_set.clone(),
        cells,
        parity: Vec::new(),
    };
    metrics::parity::recompute(&mut bundle);
    Ok(Merged { bundle, missing, unscored, devices: by_device.into_keys().collect() })
}
