//! The bundle of what a journal holds: the planned cells done so far, in grid order, with the models they used.

use std::collections::{HashMap, HashSet};

use schema::SchemaVersion;
use schema::bundle::{Bundle, Cell, CellKey, EncoderInfo, ModelInfo, Provenance};
use schema::grid::{DeviceSpec, GridConfig};

use super::attention;
use crate::journal::Journal;
use crate::plan::ResolvedConfig;
use crate::{execution, sysinfo};

/// The models a bundle of `cells` lists, from those `known` (loaded): in config order (measured models, then
/// evaluators), each once, and only those with cells or quality values (a model loaded just before a stop has
/// none). The sweep's bundles and `merge` both list them so.
pub(crate) fn bundle_models(config: &GridConfig, known: &[ModelInfo], cells: &[Cell]) -> Vec<ModelInfo> {
    let mut used: HashSet<&str> = cells.iter().map(|c| c.key.model.as_str()).collect();
    used.extend(cells.iter().flat_map(|c| c.quality.iter().filter_map(|q| q.evaluator.as_deref())));
    let mut models: Vec<ModelInfo> = Vec::new();
    for m in config.models.iter().chain(&config.evaluators()) {
        if let Some(x) = known.iter().find(|x| x.id == m.id && used.contains(x.id.as_str()))
            && !models.iter().any(|y| y.id == x.id)
        {
            models.push(x.clone());
        }
    }
    models
}

/// The encoders a bundle of `cells` lists, from those `known` (loaded): each once, in load order, and only those
/// whose id is the evaluator of a quality value or error of `cells`.
pub(crate) fn bundle_encoders(known: &[EncoderInfo], cells: &[Cell]) -> Vec<EncoderInfo> {
    let scored = |id: &str| {
        cells.iter().any(|c| {
            c.quality.iter().any(|q| q.evaluator.as_deref() == Some(id))
                || c.quality_errors.iter().any(|q| q.evaluator.as_deref() == Some(id))
        })
    };
    let mut out: Vec<EncoderInfo> = Vec::new();
    for e in known.iter().filter(|e| scored(&e.id)) {
        if !out.iter().any(|x| x.id == e.id) {
            out.push(e.clone());
        }
    }
    out
}

/// The bundle of what the journal holds: the planned cells done so far, in grid order.
pub(super) fn assemble(resolved: &ResolvedConfig, journal: &Journal, planned: &[CellKey], spec: DeviceSpec) -> Bundle {
    let h = &journal.header;
    let by_key: HashMap<&CellKey, &Cell> = journal.state.cells.iter().map(|c| (&c.key, c)).collect();
    let cells: Vec<Cell> = planned.iter().filter_map(|k| by_key.get(k).map(|c| (*c).clone())).collect();
    let models = bundle_models(&resolved.config, &journal.state.models, &cells);
    let encoders = bundle_encoders(&journal.state.encoders, &cells);
    Bundle {
        schema_version: SchemaVersion::CURRENT,
        provenance: Provenance {
            tool: schema::Provenance::RUNNER.into(),
            tool_version: env!("CARGO_PKG_VERSION").into(),
            git_commit: sysinfo::git_commit(),
            git_dirty: sysinfo::git_dirty(),
            created_at: h.created_at.clone(),
            host: sysinfo::host(),
            device: journal.state.executions.last().map_or_else(|| execution::device_info(spec), |e| e.device.clone()),
            synthetic_weights: models.iter().any(|m| m.synthetic) || encoders.iter().any(|e| e.synthetic),
            config_source: h.config_source.clone(),
            config: resolved.config.clone(),
            attention: attention(&resolved.config),
            config_sha256: Some(h.config_sha256.clone()),
            shard: h.shard,
            planned_cells: Some(planned.len() as u32),
            executions: journal.state.executions.clone(),
            missing_cells: Vec::new(),
        },
        models,
        encoders,
        prompt_set: h.prompt_set.clone(),
        cells,
        parity: Vec::new(),
    }
}
