//! Reading the files a user names (configs, prompt files, bundles): every way a path can be wrong (missing, a
//! folder, binary, not UTF-8, too large) is an input error (exit 2) that names
//! the file and says what to do.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Result;

use crate::InputError;

/// The largest bundle read (a 10,000-cell bundle with every per-prompt value is tens of MB).
pub const MAX_BUNDLE_BYTES: u64 = 2 << 30;

/// Reads a text file the user named (`what`: "config file", "prompt file"), with errors that name the file and
/// say what to do (`fix`): missing, a folder, not a regular file, or not UTF-8 (with the byte where it stops).
pub fn read_text_file(path: &Path, what: &str, fix: &str) -> Result<String> {
    let bad = |problem: String| -> anyhow::Error {
        InputError(format!("{what} {}: {problem}; fix: {fix}", path.display())).into()
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(bad("no such file".into())),
        Err(e) => return Err(bad(format!("cannot read it ({e})"))),
    };
    if meta.is_dir() {
        return Err(bad("is a folder, not a file".into()));
    }
    // Pipes are read (`-c <(generate-config)`, `/dev/stdin`): the user named them and writes them.
    if meta.len() > MAX_BUNDLE_BYTES {
        return Err(bad(format!("is {} bytes, more than the {MAX_BUNDLE_BYTES} this reads", meta.len())));
    }
    // Read through the limit, not past it: a pipe or device reports no length (`/dev/zero` never ends).
    let mut bytes = Vec::new();
    let file = std::fs::File::open(path).map_err(|e| bad(format!("cannot read it ({e})")))?;
    std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_BUNDLE_BYTES + 1), &mut bytes)
        .map_err(|e| bad(format!("cannot read it ({e})")))?;
    if bytes.len() as u64 > MAX_BUNDLE_BYTES {
        return Err(bad(format!(
            "has more than the {MAX_BUNDLE_BYTES} bytes this reads (a pipe or device that does not end?)"
        )));
    }
    match String::from_utf8(bytes) {
        Ok(text) if text.contains('\0') => Err(bad("contains NUL bytes: a binary file, not text".into())),
        Ok(text) => Ok(text),
        Err(e) => Err(bad(format!(
            "is not UTF-8 text (invalid byte at offset {}): a binary file, or text in another encoding",
            e.utf8_error().valid_up_to()
        ))),
    }
}

/// The bundle files this process read, by device and inode (and the name they were read by): no command replaces a
/// bundle it read ([`crate::output::write_atomic`] refuses), so `merge a.json b.json -o a.json` cannot replace the
/// shard `a.json` with the merge, whatever name (a link, `./a.json`) the output is given.
static READ_BUNDLES: Mutex<Vec<(u64, u64, PathBuf)>> = Mutex::new(Vec::new());

/// The name a bundle this process read was read by, when `path` is that file.
pub fn read_by_this_process(path: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    let read = READ_BUNDLES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    read.iter().find(|(dev, ino, _)| (*dev, *ino) == (m.dev(), m.ino())).map(|(.., p)| p.clone())
}

/// Reads and checks a bundle file (upgrading older versions): errors name the file and, for bad content, the field.
pub fn read_bundle_file(path: &Path) -> Result<schema::ReadBundle> {
    read_bundle_file_text(path).map(|(r, _)| r)
}

/// Says on standard error that `read` (of `path`) had an older runner's token counts, corrected on reading, for a
/// command whose output keeps the corrected counts but not the note (`merge`, `export`).
pub fn note_recounted(path: &Path, read: &schema::ReadBundle) {
    if read.recounted_repetitions > 0 {
        eprintln!(
            "note: {}: {}; the output has the valid counts",
            path.display(),
            schema::recount_note(read.recounted_repetitions)
        );
    }
}

/// [`read_bundle_file`], with the file's text (`validate` looks at it again for fields no reader knows).
pub fn read_bundle_file_text(path: &Path) -> Result<(schema::ReadBundle, String)> {
    if let Some(m) = std::fs::metadata(path).ok().filter(|m| m.is_file()) {
        use std::os::unix::fs::MetadataExt;
        let mut read = READ_BUNDLES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        read.push((m.dev(), m.ino(), path.to_path_buf()));
    }
    const FIX: &str = "pass a result bundle (a .json file that `dllm-bench run` or `merge` wrote)";
    let bad = |problem: String| -> anyhow::Error {
        InputError(format!("bundle {}: {problem}; fix: {FIX}", path.display())).into()
    };
    // `-` is no file here (standard input is not read): said, not "no such file".
    if path.as_os_str() == "-" && !path.exists() {
        return Err(bad("`-` names no file: bundles are read from files, not from standard input".into()));
    }
    // A run folder holds its bundle: named.
    if path.is_dir() {
        let inside: Vec<String> = ["bundle.json", "partial.json"]
            .iter()
            .map(|f| path.join(f))
            .filter(|f| f.is_file())
            .map(|f| f.display().to_string())
            .collect();
        if !inside.is_empty() || path.join("journal.jsonl").is_file() {
            return Err(InputError(format!(
                "bundle {}: is a run folder, not a bundle; fix: pass {}",
                path.display(),
                match inside.is_empty() {
                    true => format!(
                        "the bundle its run writes (none there yet: `dllm-bench run --resume {}` writes it)",
                        path.display()
                    ),
                    false => inside.join(" or "),
                }
            ))
            .into());
        }
    }
    let text = read_text_file(path, "bundle", FIX)?;
    let read = schema::read_bundle_detailed(&text).map_err(|e| {
        // Only a text that is no bundle is looked at again: another file of the tool given where a bundle goes.
        if let Some(what) = not_a_bundle(path, &text) {
            return bad(what);
        }
        // A message that names its own fix (a newer format: upgrade) keeps it alone; the others get the fix of
        // their kind (`BundleError::fix`, which the explorer shows too).
        let message = e.to_string();
        let fix = match e.fix() {
            "" => String::new(),
            _ if message.contains("fix:") => String::new(),
            fix => format!("\n  fix: {fix}"),
        };
        anyhow::Error::new(InputError(format!("{}: {message}{fix}", path.display())))
    })?;
    Ok((read, text))
}

/// What a text that does not read as a bundle is instead, when it is another file of the tool: empty, a run's
/// journal (whose first line is its header, naming the run's bundle), or a grid config (TOML).
fn not_a_bundle(path: &Path, text: &str) -> Option<String> {
    if text.trim().is_empty() {
        return Some("is empty (no bundle in it: a write that did not finish?)".into());
    }
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or_default();
    if let Ok(crate::journal::Record::Header(h)) = serde_json::from_str(first) {
        let dir = path.parent().unwrap_or(Path::new("."));
        return Some(format!(
            "is a run's journal, not a bundle (its run's bundle: {} once finished, {} until then)",
            h.bundle_path(dir).display(),
            dir.join("partial.json").display()
        ));
    }
    toml::from_str::<toml::Table>(text).is_ok().then(|| {
        "is TOML (a grid config?), not a bundle: `dllm-bench run --config` runs a config and writes its bundle".into()
    })
}
