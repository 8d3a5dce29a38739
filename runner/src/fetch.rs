//! `dllm-bench fetch`: every file a config needs in the HF hub cache, for compute nodes without internet.
//!
//! Per model: `config.json`, `tokenizer.json`, `generation_config.json` and `tokenizer_config.json` when the
//! repository has them, and the weights (`model.safetensors`, or
//! `model.safetensors.index.json` and every shard it names), at the config's revision. A measured model of a config
//! with `prompts.chat_template` needs `tokenizer_config.json` (its chat template): it is then required, checked and
//! reported like the weights. With
//! `--local-files-only` (or `HF_HUB_OFFLINE=1`) the cache is only checked and each missing file is reported by
//! its exact path; otherwise missing files are downloaded with hf-hub's blocking client into the same layout
//! `dllm-bench run` reads. The token comes from `HF_TOKEN` (or hf-hub's token file) and is only ever put in
//! the request header: never printed, logged or written.
//!
//! Models with a `[models.synthetic]` table are written by `run` itself and need nothing. A config with
//! `prompts.source = "wikitext"` also needs the dataset's validation shards (`wikitext-103-v1/validation-*.parquet`
//! of `prompts.dataset` at `prompts.revision`), fetched the same way into the same cache (`datasets--ORG--NAME`),
//! where [`crate::prompts::wikitext`] reads them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use hf_hub::{Repo, RepoType};

use crate::model::files::repo_dir;
use crate::prompts::wikitext::{self, DatasetError};

/// Something a config needs from the hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asset {
    /// A checkpoint: config, tokenizer, weights.
    Model {
        /// Hub id.
        id: String,
        /// Branch, tag or commit.
        revision: String,
        /// Its prompts are wrapped in its chat template: `tokenizer_config.json` is required.
        chat_template: bool,
    },
    /// The Wikitext dataset's validation shards.
    Dataset {
        /// Hub id (e.g. `Salesforce/wikitext`).
        id: String,
        /// Branch, tag or commit.
        revision: String,
    },
}

impl Asset {
    /// Its hub id, for messages.
    pub fn id(&self) -> &str {
        match self {
            Asset::Model { id, .. } | Asset::Dataset { id, .. } => id,
        }
    }

    /// Its files in `cache`, each present or missing.
    pub fn check(&self, cache: &Path) -> Vec<CacheFile> {
        match self {
            Asset::Model { id, revision, chat_template } => check_model(cache, id, revision, *chat_template),
            Asset::Dataset { id, revision } => check_dataset(cache, id, revision),
        }
    }

    /// Downloads what is missing, then checks.
    pub fn download(&self, cache: &Path, progress: bool) -> Result<Vec<CacheFile>> {
        match self {
            Asset::Model { id, revision, chat_template } => {
                download_model(cache, id, revision, *chat_template, progress)
            }
            Asset::Dataset { id, revision } => download_dataset(cache, id, revision, progress),
        }
    }
}

/// One file of the cache and whether it is there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheFile {
    /// Its path in the cache (the snapshot's path; the blob behind a symlink must exist too).
    pub path: PathBuf,
    /// Present (a dangling symlink is not).
    pub present: bool,
    /// What the file is, when the path alone does not say (e.g. an unknown snapshot).
    pub note: Option<String>,
}

fn file(path: PathBuf, note: Option<String>) -> CacheFile {
    CacheFile { present: path.is_file(), path, note }
}

/// The files `repo_id` at `revision` needs in `cache`, each present or missing (`tokenizer_config.json` too with
/// `chat_template`). When the revision's ref or the snapshot is missing, the rest cannot be named by path, and the
/// ref (or snapshot folder) is what is reported.
pub fn check_model(cache: &Path, repo_id: &str, revision: &str, chat_template: bool) -> Vec<CacheFile> {
    let repo = repo_dir(cache, repo_id);
    let is_commit = revision.len() == 40 && revision.chars().all(|c| c.is_ascii_hexdigit());
    let ref_path = repo.join("refs").join(revision);
    let commit = match std::fs::read_to_string(&ref_path) {
        Ok(c) => c.trim().to_string(),
        Err(_) if is_commit => revision.to_string(),
        Err(_) => {
            let note = "no snapshot of this revision: config.json, tokenizer.json and the weights are all missing";
            return vec![CacheFile { path: ref_path, present: false, note: Some(note.into()) }];
        }
    };
    let snap = repo.join("snapshots").join(&commit);
    if !snap.is_dir() {
        let note = "the snapshot folder is missing: config.json, tokenizer.json and the weights with it";
        return vec![CacheFile { path: snap, present: false, note: Some(note.into()) }];
    }
    let mut out = vec![file(snap.join("config.json"), None), file(snap.join("tokenizer.json"), None)];
    if chat_template {
        out.push(file(snap.join("tokenizer_config.json"), Some("its chat_template (prompts.chat_template)".into())));
    }
    let index = snap.join("model.safetensors.index.json");
    match shard_names(&index) {
        Some(shards) => {
            out.push(file(index, None));
            out.extend(shards.into_iter().map(|s| file(snap.join(s), None)));
        }
        None if snap.join("model.safetensors").is_file() => out.push(file(snap.join("model.safetensors"), None)),
        None => out.push(CacheFile {
            path: snap.join("model.safetensors"),
            present: false,
            note: Some("or model.safetensors.index.json and the shards it names".into()),
        }),
    }
    out
}

/// The shard files an index names; `None` when the index is missing or unreadable.
fn shard_names(index: &Path) -> Option<BTreeSet<String>> {
    let text = std::fs::read_to_string(index).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    let map = json.get("weight_map")?.as_object()?;
    Some(map.values().filter_map(|v| v.as_str().map(str::to_string)).collect())
}

/// The files of the Wikitext validation split of `dataset` at `revision` in `cache`: its shards, or the first
/// missing piece of the layout when they cannot be named.
pub fn check_dataset(cache: &Path, dataset: &str, revision: &str) -> Vec<CacheFile> {
    match wikitext::locate(cache, dataset, revision) {
        Ok(files) => files.shards.into_iter().map(|p| file(p, None)).collect(),
        Err(DatasetError::Missing { path, what, .. }) => vec![CacheFile { path, present: false, note: Some(what) }],
        Err(DatasetError::Unreadable { path, problem, .. }) => {
            vec![CacheFile { path, present: false, note: Some(problem) }]
        }
    }
}

/// hf-hub's blocking client on `cache`, with `HF_TOKEN` when set.
fn client(cache: &Path, progress: bool) -> Result<hf_hub::api::sync::Api> {
    let mut builder =
        hf_hub::api::sync::ApiBuilder::from_env().with_cache_dir(cache.to_path_buf()).with_progress(progress);
    if let Some(token) = std::env::var("HF_TOKEN").ok().filter(|t| !t.trim().is_empty()) {
        builder = builder.with_token(Some(token.trim().to_string()));
    }
    builder.build().context("cannot set up the hub client")
}

/// Downloads the Wikitext validation shards of `dataset` at `revision` into `cache` (listed through the hub's
/// repository info, so that every shard comes), then checks the cache.
pub fn download_dataset(cache: &Path, dataset: &str, revision: &str, progress: bool) -> Result<Vec<CacheFile>> {
    let api = client(cache, progress)?;
    let repo = api.repo(Repo::with_revision(dataset.to_string(), RepoType::Dataset, revision.to_string()));
    let info = repo.info().map_err(|e| {
        anyhow::anyhow!(
            "cannot list the files of the dataset {dataset} (revision {revision}): {e}; fix: check the network, and \
             prompts.dataset (the study's is {}) and prompts.revision",
            schema::grid::PromptConfig::DEFAULT_DATASET
        )
    })?;
    let shards: Vec<String> =
        info.siblings.into_iter().map(|s| s.rfilename).filter(|name| wikitext::is_shard(name)).collect();
    if shards.is_empty() {
        anyhow::bail!(
            "the dataset {dataset} (revision {revision}) has no {}/{}-*.parquet files; fix: check prompts.dataset (the \
             study's is {}) and prompts.revision",
            wikitext::CONFIG,
            wikitext::SPLIT,
            schema::grid::PromptConfig::DEFAULT_DATASET
        );
    }
    for name in &shards {
        repo.get(name).map_err(|e| {
            anyhow::anyhow!(
                "cannot download {name} of the dataset {dataset} (revision {revision}): {e}; fix: check the network"
            )
        })?;
    }
    Ok(check_dataset(cache, dataset, revision))
}

/// Downloads what `repo_id` at `revision` needs into `cache` (files already there are not fetched again), then
/// checks the cache. Errors name the file that failed; the token never appears in them.
pub fn download_model(
    cache: &Path,
    repo_id: &str,
    revision: &str,
    chat_template: bool,
    progress: bool,
) -> Result<Vec<CacheFile>> {
    // One writer per repository of a shared cache at a time (another fetch, or a run writing synthetic weights).
    let repo_folder = repo_dir(cache, repo_id);
    let _lock = crate::model::files::lock_repo(&repo_folder)
        .with_context(|| format!("cannot lock {} in the cache", repo_folder.display()))?;
    let api = client(cache, progress)?;
    let repo = api.repo(Repo::with_revision(repo_id.to_string(), RepoType::Model, revision.to_string()));
    let get = |name: &str| {
        repo.get(name).map_err(|e| {
            anyhow::anyhow!(
                "cannot download {name} of {repo_id} (revision {revision}): {e}; fix: check the network and, for \
                 gated models such as meta-llama/Meta-Llama-3-8B, that HF_TOKEN is set and has been granted access"
            )
        })
    };
    get("config.json")?;
    get("tokenizer.json")?;
    // The chat template's file, when the prompts are wrapped in it.
    if chat_template {
        get("tokenizer_config.json")?;
    }
    // Optional: where the loader reads special tokens the config does not state (not every repository has them).
    for name in ["generation_config.json", "tokenizer_config.json"] {
        if let Err(e) = repo.get(name) {
            tracing::info!("{repo_id}: no {name} ({e}); the special tokens come from config.json and tokenizer.json");
        }
    }
    match get("model.safetensors.index.json") {
        Ok(index) => {
            let shards =
                shard_names(&index).with_context(|| format!("{} has no readable weight_map", index.display()))?;
            for s in shards {
                get(&s)?;
            }
        }
        Err(index_err) => {
            get("model.safetensors").map_err(|e| anyhow::anyhow!("{e}\n(and {index_err})"))?;
        }
    }
    Ok(check_model(cache, repo_id, revision, chat_template))
}
