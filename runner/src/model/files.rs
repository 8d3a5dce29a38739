//! Finding a checkpoint in the hf-hub cache layout, offline.
//!
//! Layout (as `huggingface_hub` and hf-hub write it): `{cache}/models--{org}--{name}/refs/{revision}` holds a
//! commit hash, and `snapshots/{commit}/` holds `config.json`, `tokenizer.json` and the weights (often symlinks
//! into `blobs/`). hf-hub 0.4's `CacheRepo::get` works offline but answers only `Option` (no reason, and it does
//! not trim the ref file); we use hf-hub for the folder name and read the layout ourselves so that every missing
//! piece is reported by its exact path.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use hf_hub::{Repo, RepoType};

use super::ModelError;

/// The files of one checkpoint snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelFiles {
    pub repo_id: String,
    pub revision: String,
    /// The snapshot's commit hash (what `refs/{revision}` points to).
    pub commit: String,
    pub snapshot_dir: PathBuf,
    pub config: PathBuf,
    pub tokenizer: PathBuf,
    /// `model.safetensors`, or the shards named by the index, sorted.
    pub weights: Vec<PathBuf>,
    /// `model.safetensors.index.json` when the checkpoint is sharded.
    pub index: Option<PathBuf>,
    /// The `dllm_bench_synthetic` object of `config.json`, when the checkpoint is synthetic.
    pub synthetic: Option<serde_json::Value>,
}

/// The fix for a missing piece of `repo_id`. `synthetic`: the snapshot's `config.json` carries the
/// `dllm_bench_synthetic` marker, so `dllm-bench synth` writes it again. Otherwise (a real checkpoint, or nothing on
/// disk says which) a download: this function does not see the run's config, whose `[models.synthetic]` table is
/// the caller's to suggest.
fn fix_for(repo_id: &str, synthetic: bool) -> String {
    if synthetic {
        "write the synthetic checkpoint again with `dllm-bench synth` (the config's [models.synthetic] table)".into()
    } else {
        format!(
            "download the checkpoint with `huggingface-cli download {repo_id}` into this cache, or with \
             `dllm-bench fetch` where there is network"
        )
    }
}

/// The `dllm_bench_synthetic` object of a snapshot's `config.json` (`None` when it has none or cannot be read).
fn synthetic_marker(config: &Path) -> Option<serde_json::Value> {
    std::fs::read_to_string(config)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v.get("dllm_bench_synthetic").cloned())
}

/// A folder of the checkpoint (the repository, a snapshot) that is not there, or is not a folder.
fn missing(path: PathBuf, repo_id: &str) -> ModelError {
    if path.symlink_metadata().is_ok() && !path.is_dir() {
        let what = if path.is_file() { "a file, not a folder" } else { "a link to nothing (a dangling link)" };
        return ModelError::Corrupt { path, message: format!("is {what}; fix: {}", fix_for(repo_id, false)) };
    }
    ModelError::MissingFile { path, fix: fix_for(repo_id, false) }
}

/// A file of the checkpoint that is not there, or is not a file (a folder; a link whose blob is gone).
fn missing_file(path: PathBuf, repo_id: &str, synthetic: bool) -> ModelError {
    if path.symlink_metadata().is_ok() {
        let what = if path.is_dir() { "a folder, not a file" } else { "a link to nothing (its blob is gone)" };
        return ModelError::Corrupt { path, message: format!("is {what}; fix: {}", fix_for(repo_id, synthetic)) };
    }
    ModelError::MissingFile { path, fix: fix_for(repo_id, synthetic) }
}

/// The PyTorch weight files of a snapshot (`pytorch_model.bin`, its shards and index), sorted.
fn pytorch_weights(snapshot: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(snapshot)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("pytorch_model") && (n.ends_with(".bin") || n.ends_with(".bin.index.json")))
        .collect();
    names.sort();
    names
}

/// `models--{org}--{name}` under the cache root.
pub fn repo_dir(cache_dir: &Path, repo_id: &str) -> PathBuf {
    cache_dir.join(Repo::new(repo_id.to_string(), RepoType::Model).folder_name())
}

/// Takes the exclusive lock of a repository folder of the cache (created if needed), waiting for another
/// writer of the same repository (`synth`, `fetch`, a run writing synthetic weights) to finish. Released when the
/// file is dropped or the process ends.
pub fn lock_repo(repo: &Path) -> std::io::Result<std::fs::File> {
    std::fs::create_dir_all(repo)?;
    let lock =
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(repo.join(".dllm-bench.lock"))?;
    lock.lock()?;
    Ok(lock)
}

impl ModelFiles {
    /// The fix for weights that cannot be loaded as they are (cut short, or not of `config.json`'s model): a real
    /// checkpoint is downloaded again; a synthetic one (its `config.json` carries the `dllm_bench_synthetic` marker)
    /// cannot be downloaded, so the fix deletes the snapshot and names the `dllm-bench synth` command that writes it
    /// again, with what the marker records (in the cache it was found in).
    pub(super) fn redo_fix(&self, kind: schema::grid::ModelKind) -> String {
        let Some(marker) = &self.synthetic else { return "download the checkpoint again".into() };
        let mut cmd = format!("dllm-bench synth --kind {} --repo-id {}", kind.name(), self.repo_id);
        for flag in ["preset", "seed", "dtype", "shards"] {
            if let Some(v) = marker.get(flag).filter(|v| !v.is_null()) {
                let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                cmd.push_str(&format!(" --{flag} {v}"));
            }
        }
        if marker.get("chat_template").and_then(|v| v.as_bool()) == Some(true) {
            cmd.push_str(" --chat-template");
        }
        // `<cache>/models--org--name/snapshots/<commit>`: the cache is three levels up.
        if let Some(cache) = self.snapshot_dir.ancestors().nth(3) {
            cmd.push_str(&format!(" --model-cache-dir {}", cache.display()));
        }
        format!(
            "this is a synthetic checkpoint (there is nothing to download): delete {} and write it again with `{cmd}` \
             (add the --layout it was written with, which the marker does not record), or, where a run's \
             [models.synthetic] table wrote it, run that config again: it writes the snapshot itself",
            self.snapshot_dir.display()
        )
    }

    /// Resolves `repo_id` at `revision` (a branch/tag with a `refs/` entry, or a commit hash) in `cache_dir`.
    pub fn from_hf_cache(cache_dir: &Path, repo_id: &str, revision: &str) -> Result<Self, ModelError> {
        let repo = repo_dir(cache_dir, repo_id);
        if !repo.is_dir() {
            return Err(missing(repo, repo_id));
        }
        let ref_path = repo.join("refs").join(revision);
        let commit = if ref_path.is_file() {
            std::fs::read_to_string(&ref_path)
                .map_err(|error| ModelError::Io { path: ref_path.clone(), error })?
                .trim()
                .to_string()
        } else if revision.len() == 40 && revision.chars().all(|c| c.is_ascii_hexdigit()) {
            revision.to_string()
        } else {
            return Err(missing_file(ref_path, repo_id, false));
        };
        // A ref must name one snapshot: an empty one (or one with a path in it) would resolve elsewhere.
        if commit.is_empty() || commit.contains(['/', '\\']) || commit.starts_with('.') {
            return Err(ModelError::Corrupt {
                path: ref_path,
                message: format!("holds {commit:?}, not a commit hash; fix: {}", fix_for(repo_id, false)),
            });
        }
        let snapshot_dir = repo.join("snapshots").join(&commit);
        if !snapshot_dir.is_dir() {
            return Err(missing(snapshot_dir, repo_id));
        }
        let synthetic = synthetic_marker(&snapshot_dir.join("config.json"));
        let need = |name: &str| {
            let p = snapshot_dir.join(name);
            if p.is_file() { Ok(p) } else { Err(missing_file(p, repo_id, synthetic.is_some())) }
        };
        let config = need("config.json")?;
        let tokenizer = need("tokenizer.json")?;
        let index_path = snapshot_dir.join("model.safetensors.index.json");
        let single = snapshot_dir.join("model.safetensors");
        // transformers' order: a single model.safetensors first, then the sharded index.
        let (weights, index) = if single.is_file() {
            (vec![single], None)
        } else if index_path.is_file() {
            let text = std::fs::read_to_string(&index_path)
                .map_err(|error| ModelError::Io { path: index_path.clone(), error })?;
            let json: serde_json::Value =
                serde_json::from_str(&text).map_err(|error| ModelError::Json { path: index_path.clone(), error })?;
            let map = json.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| ModelError::MissingField {
                path: index_path.clone(),
                field: "weight_map".into(),
                fix: "the index must map tensor names to shard files".into(),
            })?;
            let mut shards = BTreeSet::new();
            for v in map.values() {
                let name = v.as_str().ok_or_else(|| ModelError::Unsupported {
                    path: index_path.clone(),
                    field: "weight_map".into(),
                    value: v.to_string(),
                    fix: "shard names must be strings".into(),
                })?;
                shards.insert(name.to_string());
            }
            let weights = shards.iter().map(|s| need(s)).collect::<Result<Vec<_>, _>>()?;
            (weights, Some(index_path))
        } else if single.symlink_metadata().is_ok() {
            return Err(missing_file(single, repo_id, synthetic.is_some()));
        } else if !pytorch_weights(&snapshot_dir).is_empty() {
            // Downloading again would fetch the same files: the revision has no safetensors weights to load.
            return Err(ModelError::NotSafetensors {
                found: pytorch_weights(&snapshot_dir).join(", "),
                path: snapshot_dir,
                repo_id: repo_id.to_string(),
            });
        } else {
            return Err(ModelError::MissingFile {
                path: single,
                fix: format!(
                    "{} (the snapshot has neither model.safetensors nor model.safetensors.index.json)",
                    fix_for(repo_id, synthetic.is_some())
                ),
            });
        };
        Ok(Self {
            repo_id: repo_id.to_string(),
            revision: revision.to_string(),
            commit,
            snapshot_dir,
            config,
            tokenizer,
            weights,
            index,
            synthetic,
        })
    }

    /// Whether `config.json` carries the `dllm_bench_synthetic` marker.
    pub fn is_synthetic(&self) -> bool {
        self.synthetic.is_some()
    }

    /// Bytes of the weight files on disk (symlinks followed).
    pub fn weights_file_bytes(&self) -> Result<u64, ModelError> {
        self.weights
            .iter()
            .map(|p| std::fs::metadata(p).map(|m| m.len()).map_err(|error| ModelError::Io { path: p.clone(), error }))
            .sum()
    }
}
