//! The run folder: a new one, one to resume, or a job's `--run-dir`; its lock, its journal, and the check that a
//! resume is the same run (version, config, shard, prompts).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context, Result};
use schema::ShardInfo;
use schema::bundle::PromptSetInfo;
use schema::grid::{DeviceSpec, ModelSpec};

use super::{RunFolder, SweepOptions};
use crate::InputError;
use crate::journal::{Header, JOURNAL_FORMAT, Journal, RunLock};
use crate::model::ModelFiles;
use crate::plan::{ResolvedConfig, config_diff};

/// A run folder opened for this process.
pub(super) struct Opened {
    /// The folder.
    pub(super) dir: PathBuf,
    /// Its journal, when the run resumes.
    pub(super) journal: Option<Journal>,
    /// For a new run: the header to create the journal with, once the models are found.
    new_header: Option<Header>,
    /// The folder's lock, taken before anything in it was read (a new run's folder is locked when created).
    pub(super) lock: Option<RunLock>,
}

impl Opened {
    pub(super) fn header(&self) -> &Header {
        match (&self.journal, &self.new_header) {
            (Some(j), _) => &j.header,
            (None, Some(h)) => h,
            // `open_folder` always sets one of them.
            (None, None) => unreachable!("a run folder has a journal or a header to create"),
        }
    }
}

/// Opens (resume) or plans (new run) the run folder, checking that a resumed run is the same run.
pub(super) fn open_folder(resolved: &ResolvedConfig, opts: &SweepOptions, prompts: &PromptSetInfo) -> Result<Opened> {
    let cfg = &resolved.config;
    let header = |bundle: PathBuf, remove_when_done: bool| Header {
        journal_format: JOURNAL_FORMAT,
        tool_version: env!("CARGO_PKG_VERSION").into(),
        created_at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        config_sha256: resolved.sha256(),
        config_toml: resolved.toml(),
        config_source: resolved.source.clone(),
        config_dir: resolved.dir.clone(),
        shard: opts.shard,
        prompt_set: prompts.clone(),
        bundle,
        remove_when_done,
    };
    let resume_dir = match &opts.folder {
        RunFolder::New { output_dir } => {
            let h = header(PathBuf::new(), true);
            let stamp: String = h.created_at.chars().filter(|c| !matches!(c, '-' | ':')).collect();
            // Two runs of one config in the same second get -2, -3, ...: checked when the folder is created.
            let base = format!("{}-{stamp}", cfg.run.name);
            let dir = output_dir.join(format!("{base}.run"));
            let h = Header { bundle: PathBuf::from("..").join(format!("{base}.json")), ..h };
            return Ok(Opened { dir, journal: None, new_header: Some(h), lock: None });
        }
        RunFolder::At(dir) => {
            crate::output::create_folder(dir)?;
            let lock = RunLock::acquire(dir)?;
            if !Journal::exists(dir) {
                // A bundle no journal of this folder accounts for is not this run's to replace.
                let bundle = dir.join("bundle.json");
                if bundle.exists() {
                    return Err(InputError(format!(
                        "{} exists and {} has no journal of the run that wrote it, so it is not this run's to \
                         replace; fix: move the bundle away, or give another --run-dir",
                        bundle.display(),
                        dir.display()
                    ))
                    .into());
                }
                return Ok(Opened {
                    dir: dir.clone(),
                    journal: None,
                    new_header: Some(header(PathBuf::from("bundle.json"), false)),
                    lock: Some(lock),
                });
            }
            (dir, lock)
        }
        RunFolder::Resume(dir) => {
            Journal::require(dir)?;
            (dir, RunLock::acquire(dir)?)
        }
    };
    let (resume_dir, lock) = resume_dir;
    let journal = Journal::open(resume_dir)?;
    check_same_run(&journal, resolved, opts, prompts)?;
    Ok(Opened { dir: resume_dir.clone(), journal: Some(journal), new_header: None, lock: Some(lock) })
}

/// A resume must be the same run: same tool version, config, shard and prompts.
pub(super) fn check_same_run(
    journal: &Journal,
    resolved: &ResolvedConfig,
    opts: &SweepOptions,
    prompts: &PromptSetInfo,
) -> Result<()> {
    let h = &journal.header;
    let path = journal.path().display();
    let refuse = |what: String| -> Result<()> { Err(InputError(format!("cannot resume {path}: {what}")).into()) };
    if h.tool_version != env!("CARGO_PKG_VERSION") {
        return refuse(format!(
            "it was started by dllm-bench {} and this is {}; fix: finish it with the version that started it, \
             or start a new run folder",
            h.tool_version,
            env!("CARGO_PKG_VERSION")
        ));
    }
    if h.config_sha256 != resolved.sha256() {
        return refuse(format!(
            "the config changed since the run started (config sha256 {} then, {} now; started from {}, now {}).\n\
             These fields differ (- then, + now):\n{}\n  fix: resume with the same config and overrides (or \
             `--resume DIR` with no --config: the journal has it), or start a new run folder",
            short(&h.config_sha256),
            short(&resolved.sha256()),
            h.config_source,
            resolved.source,
            config_diff(&h.config_toml, &resolved.toml())
        ));
    }
    if h.shard != opts.shard {
        let show = |s: Option<ShardInfo>| s.map_or("the whole grid".to_string(), |s| format!("shard {s}"));
        return refuse(format!(
            "it ran {} and this run asks for {}; fix: pass the same --shard (or none)",
            show(h.shard),
            show(opts.shard)
        ));
    }
    if h.prompt_set.sha256 != prompts.sha256 {
        return refuse(format!(
            "the prompt set changed (sha256 {} then, {} now, from {}); fix: restore the prompts, or start a new \
             run folder",
            short(h.prompt_set.sha256.as_deref().unwrap_or("absent")),
            short(prompts.sha256.as_deref().unwrap_or("absent")),
            prompts.source
        ));
    }
    Ok(())
}

/// The rest of "a resume is the same run", once the models are found: every model and evaluator it will load is
/// the snapshot the journal recorded for it (a changed evaluator would score the rest of the cells with other
/// weights under the old commit's name), and when cells remain to be measured, this device is the model the
/// journal's cells were measured on (a requeue onto another GPU model would mix two devices' timings in one
/// bundle; `merge` refuses such shards too, unless `--allow-mixed-devices`).
pub(super) fn check_same_sources<'a>(
    journal: &Journal,
    models: impl IntoIterator<Item = (&'a ModelSpec, &'a ModelFiles)>,
    device: Option<DeviceSpec>,
) -> Result<()> {
    let path = journal.path().display();
    for (m, files) in models {
        if let Some(old) = journal.state.models.iter().find(|x| x.id == m.id)
            && old.commit.as_deref().is_some_and(|c| c != files.commit)
        {
            return Err(InputError(format!(
                "cannot resume {path}: model {} changed since the run started (snapshot {} then, {} now); fix: \
                 restore that snapshot (refs/{} in the model cache), or start a new run folder",
                m.id,
                old.commit.as_deref().unwrap_or("?"),
                files.commit,
                m.revision
            ))
            .into());
        }
    }
    // An unknown model (nvidia-smi absent or failing here or then) is compared with none.
    let Some(spec) = device else { return Ok(()) };
    let Some(here) = crate::execution::device_model(&crate::execution::device_info(spec)) else { return Ok(()) };
    let before = crate::execution::measured_on(&journal.state.executions, &journal.state.cells);
    if let Some(other) = before.into_iter().find(|d| *d != here) {
        return Err(InputError(format!(
            "cannot resume {path}: its cells were measured on {other} and this process runs on {here}: one bundle \
             would hold two devices' timings; fix: resume on a node with the same device (e.g. a SLURM \
             --constraint), or start a new run folder here"
        ))
        .into());
    }
    Ok(())
}

pub(super) fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

/// Creates a new run's folder (a fresh name if a run of the same second has it), locks it unless `lock` is
/// its lock already, and creates its journal.
pub(super) fn create_journal(
    dir: &Path,
    header: &Header,
    unique: bool,
    lock: Option<RunLock>,
) -> Result<(PathBuf, Journal, RunLock)> {
    let mut dir = dir.to_path_buf();
    let mut header = header.clone();
    if unique {
        let parent = dir.parent().map(Path::to_path_buf).unwrap_or_default();
        crate::output::create_folder(&parent)?;
        let base = dir.file_name().and_then(|n| n.to_str()).unwrap_or("run.run").trim_end_matches(".run").to_string();
        for n in 1.. {
            let name = if n == 1 { base.clone() } else { format!("{base}-{n}") };
            let candidate = parent.join(format!("{name}.run"));
            // Nor the name of a bundle already there (a run of the same second that finished, or a file put
            // there): the final bundle would replace it.
            if parent.join(format!("{name}.json")).exists() {
                continue;
            }
            match std::fs::create_dir(&candidate) {
                Ok(()) => {
                    dir = candidate;
                    header.bundle = PathBuf::from("..").join(format!("{name}.json"));
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e).with_context(|| format!("cannot create the folder {}", candidate.display())),
            }
        }
    } else {
        crate::output::create_folder(&dir)?;
    }
    let lock = match lock {
        Some(l) => l,
        None => RunLock::acquire(&dir)?,
    };
    let journal = Journal::create(&dir, header)?;
    Ok((dir, journal, lock))
}

/// The final bundle's path for a run folder.
pub(super) fn final_bundle_path(dir: &Path, header: &Header) -> PathBuf {
    match header.bundle.strip_prefix("..") {
        Ok(rest) => dir.parent().map(Path::to_path_buf).unwrap_or_default().join(rest),
        Err(_) => dir.join(&header.bundle),
    }
}
