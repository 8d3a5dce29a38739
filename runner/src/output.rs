//! Writing files so that a crash never leaves half of one: temp file in the same folder, sync, rename.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

use crate::InputError;

/// Writes a bundle atomically, after checking the consistency rules every reader checks
/// ([`schema::check_bundle`]): a bundle that `validate`, `merge` or the explorer would refuse is never written.
pub fn write_bundle(path: &Path, bundle: &schema::Bundle) -> Result<()> {
    schema::check_bundle(bundle).map_err(|e| {
        anyhow::anyhow!("refusing to write {}: the bundle breaks a rule its readers check: {e}", path.display())
    })?;
    write_atomic(path, schema::write_bundle(bundle).as_bytes())
}

/// Whether `e` says a path cannot be written where it is (no permission, a read-only file system, a path through a
/// file): bad input (exit 2), fixed by choosing another folder, not a failure of the tool.
pub fn unwritable_here(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{NotADirectory, PermissionDenied, ReadOnlyFilesystem};
    matches!(e.kind(), PermissionDenied | ReadOnlyFilesystem | NotADirectory)
}

/// Creates the folder `dir` and its parents. A path through a file is bad input (exit 2), naming the file.
pub fn create_folder(dir: &Path) -> Result<()> {
    create_folder_for(dir, "")
}

/// [`create_folder`] for the folder a flag names (`--output-dir`), which its refusal names first.
pub fn create_folder_for(dir: &Path, flag: &str) -> Result<()> {
    let flag = if flag.is_empty() { String::new() } else { format!("{flag} ") };
    if let Some(file) = dir.ancestors().find(|a| !a.as_os_str().is_empty() && a.exists() && !a.is_dir()) {
        return Err(InputError(format!(
            "{flag}{}: {} is a file, not a folder; fix: pass {flag}a folder path that is not a file nor under one",
            dir.display(),
            file.display()
        ))
        .into());
    }
    match std::fs::create_dir_all(dir) {
        Err(e) if unwritable_here(&e) || e.kind() == std::io::ErrorKind::NotFound => Err(InputError(format!(
            "{flag}{}: cannot create the folder: {e}; fix: pass {flag}a folder you can write",
            dir.display()
        ))
        .into()),
        r => r.with_context(|| format!("cannot create the folder {}", dir.display())),
    }
}

/// Refuses (bad input, exit 2) a `path` that [`write_atomic`] could not replace with a file: one of the bundles this
/// command read, or a folder. A command that writes several files checks them all first, so that it writes all
/// or none.
pub fn check_target(path: &Path) -> Result<()> {
    // `-o -` means standard output to many tools; here it would be a file named `-`.
    if path.as_os_str() == "-" {
        return Err(InputError(
            "-o -: the output goes to a file, and `-` would make one named `-`; fix: name a file (`report` \
             prints to standard output when -o is left out)"
                .into(),
        )
        .into());
    }
    if let Some(input) = crate::input::read_by_this_process(path) {
        return Err(InputError(format!(
            "{}: refusing to replace {}, a bundle this command read (the output is one of the inputs); fix: name \
             another output file",
            path.display(),
            input.display()
        ))
        .into());
    }
    if path.is_dir() {
        return Err(InputError(format!(
            "{} is a folder where a file is to be written; fix: remove or rename that folder, or write the output \
             elsewhere",
            path.display()
        ))
        .into());
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically: readers see the old file or the whole new one, never a part. A `path`
/// that is a folder, or lies under a file, is bad input (exit 2).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    check_target(path)?;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    create_folder(dir)?;
    // A folder the user may not write is bad input (exit 2), like a path through a file.
    let unwritable = |e: &std::io::Error| -> anyhow::Error {
        // The system's words (`Permission denied (os error 13)`), not tempfile's, which quote the temporary's path.
        let why =
            e.raw_os_error().map_or_else(|| e.kind().to_string(), |c| std::io::Error::from_raw_os_error(c).to_string());
        InputError(format!(
            "cannot write {}: {why} (in the folder {}); fix: name an output in a folder you can write",
            path.display(),
            dir.display()
        ))
        .into()
    };
    // Named after its target (`.bundle.json.tmp-XXXXXX`): a killed writer's leftover says whose it is, and the
    // next writer of that file, owning the name, removes it (`remove_temporaries_of`).
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut tmp = match tempfile::Builder::new().prefix(&temporary_prefix(&name)).tempfile_in(dir) {
        Ok(t) => t,
        Err(e) if unwritable_here(&e) => return Err(unwritable(&e)),
        Err(e) => return Err(e).with_context(|| format!("cannot create a temporary file in {}", dir.display())),
    };
    // A full disk or quota is bad input too (exit 2): the fix is the user's, and the temporary goes with `tmp`.
    let tmp_path = tmp.path().to_path_buf();
    let full = |e: std::io::Error| -> anyhow::Error {
        use std::io::ErrorKind::{QuotaExceeded, StorageFull};
        let why = match e.kind() {
            StorageFull => "no space is left on the disk of",
            QuotaExceeded => "the disk quota is exceeded for",
            _ => return anyhow::Error::new(e).context(format!("cannot write {}", tmp_path.display())),
        };
        InputError(format!(
            "cannot write {}: {why} its folder {} (nothing was replaced); fix: free space there, or name an output \
             on another disk",
            path.display(),
            dir.display()
        ))
        .into()
    };

    tmp.write_all(bytes).map_err(full)?;
    // tempfile creates 0600; a bundle is a normal file for its owner's group and the web server to read.
    set_readable(tmp.as_file());
    tmp.as_file().sync_all().map_err(full)?;
    match tmp.persist(path) {
        Ok(_) => {}
        Err(e) if unwritable_here(&e.error) => return Err(unwritable(&e.error)),
        Err(e) => return Err(e).with_context(|| format!("cannot rename the temporary file to {}", path.display())),
    }
    // Make the rename itself durable.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// The prefix of [`write_atomic`]'s temporary files for a file named `name` (six random letters or digits follow).
/// The name is cut to 200 bytes (at a character's boundary): the temporary's name stays within the 255 bytes a
/// file name may have wherever the target's does.
fn temporary_prefix(name: &str) -> String {
    let mut end = name.len().min(200);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!(".{}.tmp-", &name[..end])
}

/// Whether `entry` (a file name) is a temporary file of [`write_atomic`] for a file named `name` (`None`: the
/// `.tmp-XXXXXX` of runners before the named form, whose target is unknown), left by a killed process.
pub(crate) fn is_temporary_of(entry: &str, name: Option<&str>) -> bool {
    let random = |r: &str| r.len() == 6 && r.chars().all(|c| c.is_ascii_alphanumeric());
    match name {
        Some(n) => entry.strip_prefix(&temporary_prefix(n)).is_some_and(random),
        None => entry.strip_prefix(".tmp-").is_some_and(random),
    }
}

/// Removes the temporary files a killed [`write_atomic`] of `path` left beside it. For a writer that owns `path`'s
/// name (under its run's lock): another process writing the same file would be a conflict anyway.
pub(crate) fn remove_temporaries_of(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else { return };
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if is_temporary_of(&e.file_name().to_string_lossy(), Some(name)) && e.file_type().is_ok_and(|t| t.is_file()) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Makes a temporary file (created 0600) readable by all, as a file written in place would be (0644): bundles and
/// the shared model cache's files are read by other users.
#[cfg(unix)]
pub(crate) fn set_readable(f: &std::fs::File) {
    use std::os::unix::fs::PermissionsExt;
    let _ = f.set_permissions(std::fs::Permissions::from_mode(0o644));
}

#[cfg(not(unix))]
pub(crate) fn set_readable(_: &std::fs::File) {}
