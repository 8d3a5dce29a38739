//! Wikitext-103 validation prompts from the hub cache: finding the parquet shards, reading their `text` column,
//! cutting the lines into documents, and the seeded choice among them.
//!
//! Layout (as `huggingface_hub` and hf-hub write it, in the same cache as the models):
//! `{cache}/datasets--{org}--{name}/refs/{revision}` holds a commit hash, and
//! `snapshots/{commit}/wikitext-103-v1/validation-*.parquet` are the split's shards, read in name order (the
//! dataset's main branch has one, `validation-00000-of-00001.parquet`; the hub's `refs/convert/parquet` branch
//! puts them in `wikitext-103-v1/validation/*.parquet`, also accepted).
//!
//! Each row of the column `text` is one line of an article: `""`, a heading (` = Title = `, ` = = Section = = `)
//! or a paragraph. A *document* starts at a paragraph and runs to the end of its article (the next top-level
//! ` = Title = ` heading); its lines are trimmed, empty ones dropped, section headings kept as they are, and
//! joined with `\n`. Every paragraph of the split starts a candidate, so two documents of one article share
//! their ending; those with at least `min_chars` characters are kept, and `count` of them are drawn.

use std::path::{Path, PathBuf};

use hf_hub::{Repo, RepoType};
use parquet::basic::{ConvertedType, LogicalType, Type as PhysicalType};
use parquet::column::reader::ColumnReader;
use parquet::file::reader::{FileReader, SerializedFileReader};

use crate::synth::rng::{SplitMix64, stream_seed};

/// The dataset configuration the study uses (word-level tokenized text, `<unk>` kept).
pub const CONFIG: &str = "wikitext-103-v1";
/// The split prompts come from.
pub const SPLIT: &str = "validation";
/// The column of the parquet files that holds the lines.
pub const COLUMN: &str = "text";

/// A missing or unusable dataset, with the path and the fix.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// A piece of the cache layout is not there.
    #[error("the Wikitext-103 validation split is not in the hub cache: {} is missing ({what}); fix: {fix}", path.display())]
    Missing {
        /// The path looked for.
        path: PathBuf,
        /// What it would be.
        what: String,
        /// What to do.
        fix: String,
    },
    /// A file is there but is not the dataset's layout.
    #[error("{}: {problem}; expected a parquet file with a string column `text` (one line of an article per row); fix: {fix}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
        /// What to do.
        fix: String,
    },
}

/// The fix for a missing dataset: fetch it where there is network.
fn fetch_fix(dataset: &str, revision: &str) -> String {
    format!(
        "download it where there is network with `dllm-bench fetch --config CONFIG` (this config; it writes into the \
         same cache as the models), or `huggingface-cli download --repo-type dataset --revision {revision} {dataset} \
         --include '{CONFIG}/{SPLIT}-*'` with HF_HUB_CACHE pointing at this cache; or point --model-cache-dir at a \
         cache that has it"
    )
}

/// `datasets--{org}--{name}` under the cache root.
pub fn dataset_dir(cache: &Path, dataset: &str) -> PathBuf {
    cache.join(Repo::new(dataset.to_string(), RepoType::Dataset).folder_name())
}

/// Whether a file of the dataset's repository (path relative to the snapshot, `/`-separated) is a shard of the
/// split: `{CONFIG}/{SPLIT}-*.parquet` or `{CONFIG}/{SPLIT}/*.parquet`.
pub fn is_shard(rel: &str) -> bool {
    let Some(rest) = rel.strip_prefix(CONFIG).and_then(|r| r.strip_prefix('/')) else { return false };
    let Some(name) = rest.strip_suffix(".parquet") else { return false };
    match name.strip_prefix(SPLIT) {
        Some(tail) if tail.starts_with('-') => !tail.contains('/'),
        Some(tail) => tail.strip_prefix('/').is_some_and(|file| !file.is_empty() && !file.contains('/')),
        None => false,
    }
}

/// The split's shards in a snapshot of the dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetFiles {
    /// The snapshot's commit.
    pub commit: String,
    /// The snapshot folder.
    pub snapshot_dir: PathBuf,
    /// The parquet shards, in name order.
    pub shards: Vec<PathBuf>,
}

/// Finds `dataset` at `revision` (a branch/tag with a `refs/` entry, or a commit hash) in `cache`. Every missing
/// piece is reported by its exact path.
pub fn locate(cache: &Path, dataset: &str, revision: &str) -> Result<DatasetFiles, DatasetError> {
    let missing = |path: PathBuf, what: &str| DatasetError::Missing {
        path,
        what: what.to_string(),
        fix: fetch_fix(dataset, revision),
    };
    let repo = dataset_dir(cache, dataset);
    if !repo.is_dir() {
        return Err(missing(repo, &format!("the folder of the dataset {dataset}")));
    }
    let ref_path = repo.join("refs").join(revision);
    let commit = match std::fs::read_to_string(&ref_path) {
        Ok(c) => c.trim().to_string(),
        Err(_) if revision.len() == 40 && revision.chars().all(|c| c.is_ascii_hexdigit()) => revision.to_string(),
        Err(_) => return Err(missing(ref_path, &format!("the commit of revision {revision}"))),
    };
    let snapshot_dir = repo.join("snapshots").join(&commit);
    if !snapshot_dir.is_dir() {
        return Err(missing(snapshot_dir, &format!("the snapshot of revision {revision}")));
    }
    let config_dir = snapshot_dir.join(CONFIG);
    let mut rels = Vec::new();
    for (dir, prefix) in
        [(config_dir.clone(), CONFIG.to_string()), (config_dir.join(SPLIT), format!("{CONFIG}/{SPLIT}"))]
    {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            if let Some(name) = e.file_name().to_str() {
                let rel = format!("{prefix}/{name}");
                if is_shard(&rel) && snapshot_dir.join(&rel).is_file() {
                    rels.push(rel);
                }
            }
        }
    }
    if rels.is_empty() {
        return Err(missing(
            config_dir.join(format!("{SPLIT}-00000-of-00001.parquet")),
            &format!("no {CONFIG}/{SPLIT}-*.parquet shard in the snapshot"),
        ));
    }
    rels.sort();
    let shards = rels.iter().map(|r| snapshot_dir.join(r)).collect();
    Ok(DatasetFiles { commit, snapshot_dir, shards })
}

/// The rows of the string column `text` of one parquet file, in order (a null row reads as `""`).
pub fn read_lines(path: &Path) -> Result<Vec<String>, DatasetError> {
    let unreadable = |problem: String| DatasetError::Unreadable {
        path: path.to_path_buf(),
        problem,
        fix: "delete the file and download it again (`dllm-bench fetch --config CONFIG`), or check prompts.dataset \
              and prompts.revision"
            .into(),
    };
    let file = std::fs::File::open(path).map_err(|e| unreadable(format!("cannot open it ({e})")))?;
    let reader =
        SerializedFileReader::new(file).map_err(|e| unreadable(format!("not a readable parquet file ({e})")))?;
    let schema = reader.metadata().file_metadata().schema_descr_ptr();
    let columns = schema.columns();
    let Some(index) = columns.iter().position(|c| c.path().parts() == [COLUMN]) else {
        let names: Vec<String> = columns.iter().map(|c| format!("`{}`", c.path().string())).collect();
        return Err(unreadable(format!("no column `{COLUMN}` (its columns: {})", names.join(", "))));
    };
    let col = &columns[index];
    let is_string = col.physical_type() == PhysicalType::BYTE_ARRAY
        && col.max_rep_level() == 0
        && match col.logical_type_ref() {
            Some(LogicalType::String) => true,
            Some(_) => false,
            None => matches!(col.converted_type(), ConvertedType::UTF8 | ConvertedType::NONE),
        };
    if !is_string {
        let logical = col.logical_type_ref().map_or("none".to_string(), |t| format!("{t:?}"));
        return Err(unreadable(format!(
            "column `{COLUMN}` is not a string column (physical type {}, logical type {logical}{})",
            col.physical_type(),
            if col.max_rep_level() > 0 { ", repeated" } else { "" }
        )));
    }
    let max_def = col.max_def_level();
    // Sized from the footer's row count only within what a real file holds (Wikitext-103's validation split has
    // about 4,000 rows): a damaged footer claiming 2^63 rows must not allocate before the rows are read.
    let claimed = usize::try_from(reader.metadata().file_metadata().num_rows()).unwrap_or(0);
    let mut lines = Vec::with_capacity(claimed.min(1 << 20));
    let corrupt = |e: parquet::errors::ParquetError| unreadable(format!("corrupt data in column `{COLUMN}` ({e})"));
    for g in 0..reader.num_row_groups() {
        let group = reader.get_row_group(g).map_err(corrupt)?;
        let ColumnReader::ByteArrayColumnReader(mut r) = group.get_column_reader(index).map_err(corrupt)? else {
            return Err(unreadable(format!("column `{COLUMN}` did not read as byte arrays")));
        };
        let (mut defs, mut values) = (Vec::new(), Vec::new());
        loop {
            defs.clear();
            values.clear();
            let (records, _, levels) = r.read_records(4096, Some(&mut defs), None, &mut values).map_err(corrupt)?;
            if records == 0 {
                break;
            }
            let mut next = values.iter();
            let rows: Vec<bool> =
                if max_def == 0 { vec![true; records] } else { defs[..levels].iter().map(|&d| d == max_def).collect() };
            for present in rows {
                if !present {
                    lines.push(String::new());
                    continue;
                }
                let row = lines.len();
                let v = next.next().ok_or_else(|| unreadable(format!("column `{COLUMN}`: fewer values than rows")))?;
                let s = v.as_utf8().map_err(|_| unreadable(format!("column `{COLUMN}`: row {row} is not UTF-8")))?;
                lines.push(s.to_string());
            }
        }
    }
    Ok(lines)
}

/// What a line of the split is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineKind {
    /// Empty (or only whitespace).
    Empty,
    /// ` = Title = `: an article starts.
    Title,
    /// ` = = Section = = ` and deeper.
    Section,
    /// Anything else: a paragraph.
    Paragraph,
}

/// Classifies one line. Headings are `=` runs around a title, the same number on both sides.
pub fn line_kind(line: &str) -> LineKind {
    let t = line.trim();
    if t.is_empty() {
        return LineKind::Empty;
    }
    let level = |s: &str| s.split(' ').take_while(|w| *w == "=").count();
    let (open, close) = (level(t), level(&t.chars().rev().collect::<String>()));
    let words = t.split(' ').filter(|w| !w.is_empty()).count();
    match open {
        n if n == 0 || n != close || words <= 2 * n => LineKind::Paragraph,
        1 => LineKind::Title,
        _ => LineKind::Section,
    }
}

/// The candidate documents of a split: a paragraph line to the end of its article.
#[derive(Debug, Clone)]
pub struct Documents {
    /// The non-empty lines, trimmed.
    lines: Vec<String>,
    /// Per candidate: the index of its first line and one past its article's last line.
    candidates: Vec<(usize, usize)>,
    /// Per non-empty line: the length of its document from there (characters, `\n` joins included).
    suffix_chars: Vec<usize>,
}

impl Documents {
    /// Cuts the split's lines into articles and candidates.
    pub fn new(raw: &[String]) -> Documents {
        let mut lines = Vec::new();
        let mut kinds = Vec::new();
        for l in raw {
            let kind = line_kind(l);
            if kind != LineKind::Empty {
                lines.push(l.trim().to_string());
                kinds.push(kind);
            }
        }
        let mut candidates = Vec::new();
        let mut suffix_chars = vec![0; lines.len()];
        let mut end = lines.len();
        for i in (0..lines.len()).rev() {
            let after = if i + 1 < end { suffix_chars[i + 1] + 1 } else { 0 };
            suffix_chars[i] = lines[i].chars().count() + after;
            match kinds[i] {
                LineKind::Title => end = i,
                LineKind::Paragraph => candidates.push((i, end)),
                LineKind::Section | LineKind::Empty => {}
            }
        }
        candidates.reverse();
        Documents { lines, candidates, suffix_chars }
    }

    /// All candidates, in file order.
    pub fn len(&self) -> usize {
        self.candidates.len()
    }

    /// Whether there is no candidate at all.
    pub fn is_empty(&self) -> bool {
        self.candidates.is_empty()
    }

    /// The candidates of at least `min_chars` characters, by index, in file order.
    pub fn long_enough(&self, min_chars: usize) -> Vec<usize> {
        (0..self.candidates.len()).filter(|&c| self.chars(c) >= min_chars).collect()
    }

    /// The length of candidate `c` in characters.
    pub fn chars(&self, c: usize) -> usize {
        self.suffix_chars[self.candidates[c].0]
    }

    /// The text of candidate `c`.
    pub fn text(&self, c: usize) -> String {
        let (start, end) = self.candidates[c];
        self.lines[start..end].join("\n")
    }
}

/// `count` distinct indices below `n`, drawn by a partial Fisher-Yates shuffle under `seed`: deterministic on
/// every platform, in draw order, and a prefix of the draw for any larger count (small is in medium is in large).
pub fn sample(n: usize, count: usize, seed: u64) -> Vec<usize> {
    let mut rng = SplitMix64::new(stream_seed(seed, "prompts:wikitext"));
    let mut pool: Vec<usize> = (0..n).collect();
    let count = count.min(n);
    for i in 0..count {
        // Documents number far below 2^32.
        let j = i + rng.below((n - i) as u32) as usize;
        pool.swap(i, j);
    }
    pool.truncate(count);
    pool
}

/// The drawn documents of the split in `cache`: (texts, source, selection).
pub fn load(
    cache: &Path,
    dataset: &str,
    revision: &str,
    count: usize,
    min_chars: usize,
    seed: u64,
) -> Result<(Vec<String>, String, String), DatasetError> {
    let files = locate(cache, dataset, revision)?;
    let mut raw = Vec::new();
    for shard in &files.shards {
        raw.extend(read_lines(shard)?);
    }
    let docs = Documents::new(&raw);
    let kept = docs.long_enough(min_chars);
    let source = format!("wikitext:{dataset}:{CONFIG}:{SPLIT}@{}", files.commit);
    if kept.len() < count {
        let shards: Vec<String> = files.shards.iter().map(|p| p.display().to_string()).collect();
        return Err(DatasetError::Unreadable {
            path: files.shards[0].clone(),
            problem: format!(
                "{count} prompts asked, but only {} of its {} documents have at least {min_chars} characters \
                 (read from {})",
                kept.len(),
                docs.len(),
                shards.join(", ")
            ),
            fix: "lower prompts.min_chars, or ask for fewer prompts (prompts.preset / prompts.count, --max-prompts)"
                .into(),
        });
    }
    let picked = sample(kept.len(), count, seed);
    let texts = picked.iter().map(|&k| docs.text(kept[k])).collect();
    let selection = format!(
        "seeded sample of {count} of {} documents (a paragraph to the end of its article, >= {min_chars} chars), \
         seed {seed}",
        kept.len()
    );
    Ok((texts, source, selection))
}
