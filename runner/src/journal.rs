//! The run journal: `journal.jsonl` in the run folder, one JSON record per line, appended and synced (written,
//! then `fsync`) before the next cell starts, so a killed run loses at most the cell it was measuring.
//!
//! Records: a [`Header`] first (the config, its hash, the shard, the prompt set: what a resume must match),
//! then in order of events an [`Execution`] per process that measured cells, a [`ModelInfo`] per model loaded,
//! and a [`Cell`] per finished cell (ok or failed). A last line cut short by a kill is ignored and cut off before
//! the next append; a bad line anywhere else is an error.
//!
//! One run per folder: a process takes an exclusive lock on the folder's `run.lock` ([`RunLock`]) before it
//! looks at anything else in it, and holds it until it exits. The lock file is never replaced (the journal is:
//! it is created by a rename), so two processes always contend for one inode; the file says who holds it (host,
//! PID, start time), for the message the second process gives.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use schema::bundle::{QualityError, QualityValue};
use schema::{Cell, CellKey, EncoderInfo, Execution, ModelInfo, PromptSetInfo, ShardInfo};
use serde::{Deserialize, Serialize};

use crate::{InputError, output};

/// File name of the lock in a run folder.
pub const LOCK: &str = "run.lock";

/// The exclusive lock of a run folder, held while this value lives (the OS drops it when the process ends,
/// even when killed).
#[derive(Debug)]
pub struct RunLock {
    _file: File,
}

impl RunLock {
    /// Locks `dir` (which must exist) for this process, or says who holds it: exit status 2 with the holder's
    /// host and PID and what to do.
    pub fn acquire(dir: &Path) -> Result<RunLock> {
        let path = dir.join(LOCK);
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .with_context(|| format!("cannot open the run folder's lock {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let holder = std::fs::read_to_string(&path).unwrap_or_default();
                let holder = holder.trim();
                let who = if holder.is_empty() { "another dllm-bench process".to_string() } else { holder.to_string() };
                return Err(InputError(format!(
                    "{} is in use by {who}; fix: wait for that run to finish, stop it (SIGTERM: it writes its \
                     partial bundle and exits 75, and `dllm-bench run --resume {}` continues it later), or use \
                     another run folder",
                    dir.display(),
                    dir.display()
                ))
                .into());
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("cannot lock {}", path.display()));
            }
        }
        let holder = format!(
            "dllm-bench PID {} on host {} (started {})\n",
            std::process::id(),
            crate::sysinfo::host().unwrap_or_else(|| "?".into()),
            humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        );
        // Best effort: the lock is what matters, the text only names the holder in messages.
        let _ = file.set_len(0).and_then(|()| file.write_all(holder.as_bytes())).and_then(|()| file.sync_data());
        Ok(RunLock { _file: file })
    }
}

/// File name of the journal in a run folder.
pub const JOURNAL: &str = "journal.jsonl";
/// Format of the journal's records.
pub const JOURNAL_FORMAT: u32 = 1;

/// What a run is: a resume must match all of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// [`JOURNAL_FORMAT`].
    pub journal_format: u32,
    /// dllm-bench version that started the run.
    pub tool_version: String,
    /// The commit of the build that started the run (`-dirty` with uncommitted changes) and the changed sources,
    /// when the binary knows them: a resume by another build is refused (`run --allow-other-build` accepts it).
    /// Absent in journals of earlier runners.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<BuildId>,
    /// When the run started (RFC 3339); the bundle's `created_at`.
    pub created_at: String,
    /// SHA-256 of `config_toml`.
    pub config_sha256: String,
    /// The resolved config as TOML (overrides applied).
    pub config_toml: String,
    /// Where the config came from (path and overrides).
    pub config_source: String,
    /// Folder that relative paths of the config resolve against.
    pub config_dir: PathBuf,
    /// The shard of the grid this run measures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardInfo>,
    /// The prompt set (its hash must not change between resumes).
    pub prompt_set: PromptSetInfo,
    /// The final bundle's path, relative to the run folder.
    pub bundle: PathBuf,
    /// Remove the run folder once the final bundle is written (runs started without `--run-dir`).
    pub remove_when_done: bool,
}

/// Which build of the runner: its commit and the sources that differed from it (see `crate::sysinfo`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildId {
    /// `git rev-parse HEAD` at build time, `-dirty` appended for uncommitted changes.
    pub commit: String,
    /// The changed sources, when dirty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dirty: Vec<String>,
}

impl BuildId {
    /// This binary's, when it was built from a git checkout.
    pub fn current() -> Option<BuildId> {
        crate::sysinfo::git_commit().map(|commit| BuildId { commit, dirty: crate::sysinfo::git_dirty() })
    }
}

impl std::fmt::Display for BuildId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.commit)?;
        match self.dirty.len() {
            0 => Ok(()),
            n => write!(f, " ({n} changed sources: {})", self.dirty.join(", ")),
        }
    }
}

impl Header {
    /// Where the run in folder `dir` writes its bundle: `bundle` relative to the folder (`../NAME.json`: beside it).
    pub fn bundle_path(&self, dir: &Path) -> PathBuf {
        match self.bundle.strip_prefix("..") {
            // The folder's real parent: `--resume .` (or a link to the folder) has none of its own in its name.
            Ok(rest) => {
                let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
                dir.parent().map(Path::to_path_buf).unwrap_or_default().join(rest)
            }
            Err(_) => dir.join(&self.bundle),
        }
    }
}

/// One line of the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Record {
    /// First line.
    Header(Header),
    /// A process started measuring.
    Execution(Execution),
    /// A model was loaded.
    Model(ModelInfo),
    /// A BERTScore encoder was loaded.
    Encoder(EncoderInfo),
    /// A cell finished (any status).
    Cell(Cell),
    /// An evaluator scored a finished cell's generations.
    Quality {
        /// The cell.
        key: CellKey,
        /// The value (replaces one of the same metric and evaluator).
        value: QualityValue,
    },
    /// An evaluator could not score a finished cell's generations.
    QualityError {
        /// The cell.
        key: CellKey,
        /// What failed (replaces an error of the same metric and evaluator).
        error: QualityError,
    },
}

/// What a journal holds.
#[derive(Debug, Clone, Default)]
pub struct State {
    /// The executions, in order.
    pub executions: Vec<Execution>,
    /// The models, in order of first load.
    pub models: Vec<ModelInfo>,
    /// The BERTScore encoders, in order of first load.
    pub encoders: Vec<EncoderInfo>,
    /// The finished cells, in order.
    pub cells: Vec<Cell>,
}

impl State {
    /// Adds a finished cell, or replaces the record of the same cell (`run --retry-failed` measures a failed cell
    /// again: its later record holds, quality and all).
    fn add_cell(&mut self, cell: Cell) {
        match self.cells.iter_mut().find(|c| c.key == cell.key) {
            Some(old) => *old = cell,
            None => self.cells.push(cell),
        }
    }

    /// Adds (or replaces) a quality value of a finished cell; a value for an unknown cell is ignored.
    fn add_quality(&mut self, key: &CellKey, value: QualityValue) {
        if let Some(c) = self.cells.iter_mut().rev().find(|c| c.key == *key) {
            c.quality.retain(|q| !(q.metric == value.metric && q.evaluator == value.evaluator));
            c.quality_errors.retain(|q| !(q.metric == value.metric && q.evaluator == value.evaluator));
            c.quality.push(value);
        }
    }

    /// Records a quality value that could not be computed (replacing an error of the same metric and evaluator).
    fn add_quality_error(&mut self, key: &CellKey, error: QualityError) {
        if let Some(c) = self.cells.iter_mut().rev().find(|c| c.key == *key) {
            c.quality_errors.retain(|q| !(q.metric == error.metric && q.evaluator == error.evaluator));
            c.quality_errors.push(error);
        }
    }
}

/// An open journal, locked for this process.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    /// The header.
    pub header: Header,
    /// Everything recorded so far, including this process's appends.
    pub state: State,
}

/// Reads a journal without opening it for writing: the header, the state, and the byte length of the
/// complete lines (a torn last line is left out).
pub fn read(path: &Path) -> Result<(Header, State, u64)> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read the journal {}", path.display()))?;
    let mut header = None;
    let mut state = State::default();
    let mut good = 0u64;
    let mut start = 0usize;
    let mut lineno = 0;
    while start < bytes.len() {
        lineno += 1;
        let Some(nl) = bytes[start..].iter().position(|&b| b == b'\n') else {
            crate::say_once(format!(
                "warning: {}: ignoring the unfinished last line {lineno} (the run was killed, or its disk was full): what it \
                 recorded is done again",
                path.display()
            ));
            break;
        };
        let line = &bytes[start..start + nl];
        let next = start + nl + 1;
        let record = match serde_json::from_slice::<Record>(line) {
            Ok(r) => r,
            Err(_) if next >= bytes.len() && header.is_some() => {
                crate::say_once(format!(
                    "warning: {}: ignoring the damaged last line {lineno} (the run was killed, or its disk was full): what \
                     it recorded is done again",
                    path.display()
                ));
                break;
            }
            Err(e) => {
                return Err(InputError(format!(
                    "{}: line {lineno} is not a journal record ({e}); fix: if it is a `cell` or `quality` record \
                     damaged by hand, delete it (what it recorded is done again); otherwise start a new run folder",
                    path.display()
                ))
                .into());
            }
        };
        match (record, header.is_some()) {
            (Record::Header(h), false) => header = Some(h),
            (_, false) | (Record::Header(_), true) => {
                return Err(InputError(format!(
                    "{}: line {lineno}: the header must be the first line and only there; fix: start a new run folder",
                    path.display()
                ))
                .into());
            }
            (Record::Execution(e), true) => state.executions.push(e),
            (Record::Model(m), true) => state.models.push(m),
            (Record::Encoder(e), true) => state.encoders.push(e),
            (Record::Cell(c), true) => state.add_cell(c),
            (Record::Quality { key, value }, true) => state.add_quality(&key, value),
            (Record::QualityError { key, error }, true) => state.add_quality_error(&key, error),
        }
        start = next;
        good = next as u64;
    }
    let header = header.ok_or_else(|| {
        InputError(format!("{} has no header: not a dllm-bench journal; fix: start a new run folder", path.display()))
    })?;
    if header.journal_format != JOURNAL_FORMAT {
        return Err(InputError(format!(
            "{}: journal format {} is not the {JOURNAL_FORMAT} this dllm-bench writes; fix: finish the run with the \
             dllm-bench version {} that started it, or start a new run folder",
            path.display(),
            header.journal_format,
            header.tool_version
        ))
        .into());
    }
    Ok((header, state, good))
}

impl Journal {
    /// Whether `dir` holds a journal.
    pub fn exists(dir: &Path) -> bool {
        dir.join(JOURNAL).is_file()
    }

    /// The path of `dir`'s journal, or an input error (exit 2) saying that `dir` is not a run folder.
    pub fn require(dir: &Path) -> Result<PathBuf> {
        let path = dir.join(JOURNAL);
        if path.is_file() {
            return Ok(path);
        }
        let what = if !dir.exists() {
            "does not exist"
        } else if !dir.is_dir() {
            "is not a folder"
        } else {
            "has no journal.jsonl: not a run folder (or a run that never started measuring)"
        };
        Err(InputError(format!(
            "cannot resume {}: it {what}; fix: pass the folder a run printed (…/NAME-STAMP.run) or the --run-dir of \
             the job, or start a new run without --resume",
            dir.display()
        ))
        .into())
    }

    /// Starts a journal in `dir` (created if needed) with `header`, written atomically.
    pub fn create(dir: &Path, header: Header) -> Result<Journal> {
        let path = dir.join(JOURNAL);
        if path.exists() {
            return Err(InputError(format!("{} already exists; fix: resume it with --resume", path.display())).into());
        }
        let mut line = serde_json::to_vec(&Record::Header(header.clone()))?;
        line.push(b'\n');
        output::write_atomic(&path, &line)?;
        let file = Self::open_append(&path)?;
        Ok(Journal { path, file, header, state: State::default() })
    }

    /// Opens the journal in `dir` to continue it: reads it, cuts off a torn last line. The caller holds the
    /// folder's [`RunLock`].
    pub fn open(dir: &Path) -> Result<Journal> {
        let path = Self::require(dir)?;
        let file = Self::open_append(&path)?;
        let (header, state, good) = read(&path)?;
        if file.metadata()?.len() > good {
            file.set_len(good).with_context(|| format!("cannot cut the torn last line of {}", path.display()))?;
            file.sync_all()?;
        }
        Ok(Journal { path, file, header, state })
    }

    fn open_append(path: &Path) -> Result<File> {
        OpenOptions::new()
            .append(true)
            .read(true)
            .open(path)
            .with_context(|| format!("cannot open the journal {}", path.display()))
    }

    /// The journal's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends a record and syncs it to disk before returning.
    pub fn append(&mut self, record: Record) -> Result<()> {
        let mut line = serde_json::to_vec(&record)?;
        line.push(b'\n');
        self.file.write_all(&line).with_context(|| format!("cannot append to {}", self.path.display()))?;
        self.file.sync_data().with_context(|| format!("cannot sync {}", self.path.display()))?;
        match record {
            Record::Header(_) => {}
            Record::Execution(e) => self.state.executions.push(e),
            Record::Model(m) => self.state.models.push(m),
            Record::Encoder(e) => self.state.encoders.push(e),
            Record::Cell(c) => self.state.add_cell(c),
            Record::Quality { key, value } => self.state.add_quality(&key, value),
            Record::QualityError { key, error } => self.state.add_quality_error(&key, error),
        }
        Ok(())
    }
}
