//! The run folder: a new one, one to resume, or a job's `--run-dir`; its lock, its journal, and the check that a
//! resume is the same run (version, config, shard, prompts).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context, Result};
use schema::ShardInfo;
use schema::bundle::PromptSetInfo;
use schema::grid::{DeviceSpec, ModelSpec};

use super::{PARTIAL, RunFolder, SweepOptions};
use crate::InputError;
use crate::journal::{Header, JOURNAL, JOURNAL_FORMAT, Journal, LOCK, RunLock};
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
        build: crate::journal::BuildId::current(),
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
            if opts.progress {
                unfinished_runs_of(output_dir, resolved, opts);
            }
            let h = header(PathBuf::new(), true);
            let stamp: String = h.created_at.chars().filter(|c| !matches!(c, '-' | ':')).collect();
            // Two runs of one config in the same second get -2, -3, ...: checked when the folder is created. A
            // shard's bundle names its shard (`NAME-shard-0-of-4-STAMP.json`): the shards written into one folder
            // are told apart by name, as `merge` is given them.
            let base = match opts.shard {
                Some(s) => format!("{}-shard-{}-of-{}-{stamp}", cfg.run.name, s.index, s.count),
                None => format!("{}-{stamp}", cfg.run.name),
            };
            let dir = output_dir.join(format!("{base}.run"));
            let h = Header { bundle: PathBuf::from("..").join(format!("{base}.json")), ..h };
            return Ok(Opened { dir, journal: None, new_header: Some(h), lock: None });
        }
        RunFolder::At(dir) => {
            crate::output::create_folder_for(dir, "--run-dir")?;
            // A bundle no journal of this folder accounts for is not this run's to replace: refused before the
            // lock (which would leave its file in the user's folder), and again under it.
            let foreign = || -> Result<()> {
                let bundle = dir.join("bundle.json");
                if !Journal::exists(dir) && bundle.exists() {
                    return Err(InputError(format!(
                        "{} exists and {} has no journal of the run that wrote it, so it is not this run's to \
                         replace; fix: move the bundle away, or give another --run-dir",
                        bundle.display(),
                        dir.display()
                    ))
                    .into());
                }
                Ok(())
            };
            foreign()?;
            let lock =
                RunLock::acquire(dir).map_err(|e| unwritable(e, dir, "give --run-dir a folder you can write"))?;
            if !Journal::exists(dir) {
                foreign()?;
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
            let fix = "copy the run folder to a place you can write and resume the copy";
            (dir, RunLock::acquire(dir).map_err(|e| unwritable(e, dir, fix))?)
        }
    };
    let (resume_dir, lock) = resume_dir;
    remove_temporaries(resume_dir);
    let journal = Journal::open(resume_dir)?;
    check_same_run(&journal, resolved, opts, prompts)?;
    // Before anything is measured: the bundle the run will write must be its own to write.
    check_final_bundle(resume_dir, &journal)?;
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
    // Timings of two builds under one commit's name: refused unless asked for (a fix a resume should pick up).
    let here = crate::journal::BuildId::current();
    if let (Some(then), Some(now)) = (&h.build, &here)
        && then != now
        && !opts.allow_other_build
    {
        return refuse(format!(
            "it was started by the build of {then} and this binary is the build of {now}: its cells would be \
             measured by two builds, and the bundle names one; fix: finish it with a binary built from {} (or \
             rebuilt from the same changes), pass --allow-other-build to accept the mix (the bundle then names this \
             build), or start a new run folder",
            then.commit
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
        let fix = match h.shard {
            Some(s) => format!("pass --shard {s} to resume it"),
            None => "resume it without --shard".to_string(),
        };
        return refuse(format!(
            "it ran {} and this run asks for {}; fix: {fix} (or start a new run folder)",
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
        crate::output::create_folder_for(&parent, "--output-dir")?;
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
                Err(e) => {
                    let e =
                        anyhow::Error::new(e).context(format!("cannot create the run folder {}", candidate.display()));
                    return Err(unwritable(e, &parent, "choose an output folder you can write with -o (--output-dir)"));
                }
            }
        }
    } else {
        crate::output::create_folder(&dir)?;
    }
    let lock = match lock {
        Some(l) => l,
        None => RunLock::acquire(&dir).map_err(|e| unwritable(e, &dir, "choose a folder you can write"))?,
    };
    let journal = Journal::create(&dir, header)?;
    Ok((dir, journal, lock))
}

/// The final bundle's path for a run folder ([`Header::bundle_path`]).
pub(super) fn final_bundle_path(dir: &Path, header: &Header) -> PathBuf {
    header.bundle_path(dir)
}

/// Says which run folders in `output_dir` hold an unfinished run of this config and shard (a run stopped by a
/// signal, a crash): the same command starts a new run, and `--resume` would continue that one instead.
fn unfinished_runs_of(output_dir: &Path, resolved: &ResolvedConfig, opts: &SweepOptions) {
    let sha = resolved.sha256();
    for e in std::fs::read_dir(output_dir).into_iter().flatten().flatten() {
        let dir = e.path();
        if dir.extension().is_none_or(|x| x != "run") || !Journal::exists(&dir) {
            continue;
        }
        // The header line alone first (a journal may hold every cell's continuations: tens of MB).
        let first = std::fs::File::open(dir.join(JOURNAL)).ok().and_then(|f| {
            let mut line = String::new();
            std::io::BufRead::read_line(&mut std::io::BufReader::new(f), &mut line).ok()?;
            Some(line)
        });
        let same = match first.as_deref().map(serde_json::from_str::<crate::journal::Record>) {
            Some(Ok(crate::journal::Record::Header(h))) => h.config_sha256 == sha && h.shard == opts.shard,
            _ => false,
        };
        let Some((_, state, _)) = same.then(|| crate::journal::read(&dir.join(JOURNAL)).ok()).flatten() else {
            continue;
        };
        crate::say!(
            "note: {} holds a run of this config that has not finished (stopped, or still running; {} cells \
             done); this starts a new run (`dllm-bench run --resume {}` continues that one instead)",
            dir.display(),
            state.cells.len(),
            dir.display()
        );
    }
}

/// `err` (from creating or locking something in `dir`) as bad input (exit status 2) when an I/O error in its chain
/// says the folder cannot be written there (no permission, a read-only file system, a path through a file), with
/// `fix`; otherwise `err` as it is.
fn unwritable(err: anyhow::Error, dir: &Path, fix: &str) -> anyhow::Error {
    let denied = err
        .chain()
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .find(|e| crate::output::unwritable_here(e) || e.kind() == std::io::ErrorKind::NotFound);
    match denied {
        // The context already says what could not be created; the cause once, then the fix.
        Some(e) => InputError(format!("{err} (in the folder {}): {e}; fix: {fix}", dir.display())).into(),
        None => err,
    }
}

/// Whether `name` is a temporary file of [`crate::output::write_atomic`] for a file a run writes in its folder (its
/// journal, partial or final bundle, being written when a process was killed), or of the older unnamed form. Not
/// another program's: a `--run-dir` may be a folder others write in too.
fn is_temporary(name: &str) -> bool {
    [JOURNAL, PARTIAL, "bundle.json"].iter().any(|f| crate::output::is_temporary_of(name, Some(f)))
        || crate::output::is_temporary_of(name, None)
}

/// Removes the temporary files a killed attempt left in the run folder `dir` (the caller holds its lock: no writer
/// of this run is alive): those of the files a run writes there only, and the older unnamed form (a `--run-dir`
/// may be a folder other programs write in too).
fn remove_temporaries(dir: &Path) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if is_temporary(&e.file_name().to_string_lossy()) && e.file_type().is_ok_and(|t| t.is_file()) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Once a run's final bundle (`bundle`) is written elsewhere, removes what the run wrote in its folder `dir`: the
/// journal, the partial bundle, temporary files a killed attempt left, the lock (last); then the folder itself
/// when that emptied it. A folder holding anything else (a user's notes, a copy of a file) is kept, with a
/// warning naming what is left.
pub(super) fn remove_run_files(dir: &Path, bundle: &Path) -> Result<()> {
    let cannot = |what: &Path| format!("wrote {} but cannot remove {}", bundle.display(), what.display());
    let mut ours = Vec::new();
    let mut kept = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| cannot(dir))? {
        let entry = entry.with_context(|| cannot(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let file = entry.file_type().is_ok_and(|t| t.is_file());
        let rank = match name.as_str() {
            JOURNAL => 0,
            PARTIAL => 1,
            LOCK => 3,
            n if is_temporary(n) => 2,
            _ => 4,
        };
        if file && rank < 4 {
            ours.push((rank, entry.path()));
        } else {
            kept.push(name);
        }
    }
    ours.sort();
    for (_, path) in &ours {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| cannot(path)),
        }
    }
    if kept.is_empty() {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            // Something appeared meanwhile: kept, as below.
            Err(e) if e.kind() == std::io::ErrorKind::DirectoryNotEmpty => {
                kept.push("files written while the run ended".into());
            }
            Err(e) => return Err(e).with_context(|| cannot(dir)),
        }
    }
    kept.sort();
    tracing::warn!(
        "kept the run folder {}: it holds what the run did not write ({}); the run's own files in it (journal, \
         partial bundle, lock) are removed, its bundle is {}",
        dir.display(),
        kept.join(", "),
        bundle.display()
    );
    Ok(())
}

/// A final bundle outside the run folder (`../NAME.json`: a run started with `-o`) that is already there is only
/// this run's to replace when it is the bundle this journal's run wrote (its start, config and executions are the
/// journal's: the run completed, then stopped before removing its folder). Anything else there (a user's file,
/// another run's bundle, a copy of this run folder finished elsewhere) is not, as with a `--run-dir`'s
/// `bundle.json` no journal accounts for: exit status 2, naming the file and the fix.
pub(super) fn check_final_bundle(dir: &Path, journal: &Journal) -> Result<()> {
    let h = &journal.header;
    if !h.bundle.starts_with("..") {
        // `bundle.json` inside the folder: the journal accounts for it (see `open_folder`).
        return Ok(());
    }
    let path = final_bundle_path(dir, h);
    if path.symlink_metadata().is_err() || is_own_bundle(&path, journal) {
        return Ok(());
    }
    Err(InputError(format!(
        "{} exists and is not the bundle of the run in {} (its journal did not write it), so it is not this run's \
         to replace; fix: move that file away (or rename it), then resume again: the journal keeps every finished \
         cell",
        path.display(),
        dir.display()
    ))
    .into())
}

/// Whether the bundle at `path` is the one the run of `journal` wrote when it completed.
fn is_own_bundle(path: &Path, journal: &Journal) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else { return false };
    let Ok(bundle) = schema::read_bundle(&text) else { return false };
    let (p, h) = (&bundle.provenance, &journal.header);
    p.created_at == h.created_at
        && p.config_sha256.as_deref() == Some(h.config_sha256.as_str())
        && p.executions == journal.state.executions
}
