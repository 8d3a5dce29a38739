//! `dllm-bench serve`: the explorer and the bundles of a results folder on a local address.
//!
//! Layout served (all relative, as on a static host): `/` the explorer's built files, `/bundles/index.json`
//! generated from the results folder on each request, `/bundles/FILE.json` the bundles themselves.
//!
//! What it refuses (404, and in the index: left out with a warning), so that it stays up and inside its two
//! folders whatever they hold:
//! - anything but a regular file (or a symlink to one): opening a FIFO for reading blocks until a writer
//!   comes, a device or socket may never end; these are never opened;
//! - a file whose real path (symlinks resolved) is outside the folder it is served from: a symlink to
//!   elsewhere would publish a file nobody put in the folder. Symlinks that stay inside are served;
//! - paths that climb out (`..`, a `/` or `\` inside a component, empty components); the URL is not
//!   percent-decoded, so `%2e%2e` is just a name;
//! - in the index, files larger than [`MAX_BUNDLE_BYTES`] (they are not read into memory).
//!
//! Requests are answered concurrently, each on its own thread, at most [`MAX_IN_FLIGHT`] at once (more get
//! 503 at once rather than waiting), so a slow file or a slow client only holds its own request. Files are
//! streamed, not read whole. tiny_http reads each connection's requests on a thread of its own, so a client
//! that sends nothing or half a request stalls no one; it does not give access to the socket, so there is no
//! write timeout: a client that stops reading its answer holds one of the [`MAX_IN_FLIGHT`] slots until it
//! disconnects.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result};
use schema::{BundleIndex, IndexEntry};

use crate::InputError;

/// Larger files are left out of the index unread: far above any bundle (the study fixtures are tens of KB).
pub const MAX_BUNDLE_BYTES: u64 = 512 << 20;

/// Requests answered at once; more are answered 503 straight away.
pub const MAX_IN_FLIGHT: usize = 32;

/// Why a path is not served.
#[derive(Debug)]
enum Refused {
    /// Missing, unreadable, or a dangling symlink.
    Io(std::io::Error),
    /// Its real path is not inside the served folder.
    Outside(PathBuf),
    /// A FIFO, a device, a socket or a folder.
    NotRegular,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Io(e) => write!(f, "{e}"),
            Refused::Outside(real) => write!(f, "it leads out of the folder (to {})", real.display()),
            Refused::NotRegular => write!(f, "not a regular file"),
        }
    }
}

/// `path` opened for reading, with its length, when its real path is inside `root` (canonical) and a regular
/// file. Nothing else is opened: the real path's metadata is checked first (a FIFO would block the open),
/// and the opened file's again.
fn open_inside(root: &Path, path: &Path) -> std::result::Result<(File, u64), Refused> {
    let real = std::fs::canonicalize(path).map_err(Refused::Io)?;
    if !real.starts_with(root) {
        return Err(Refused::Outside(real));
    }
    if !std::fs::symlink_metadata(&real).map_err(Refused::Io)?.file_type().is_file() {
        return Err(Refused::NotRegular);
    }
    let file = File::open(&real).map_err(Refused::Io)?;
    let meta = file.metadata().map_err(Refused::Io)?;
    if !meta.file_type().is_file() {
        return Err(Refused::NotRegular);
    }
    Ok((file, meta.len()))
}

fn canonical(dir: &Path) -> Result<PathBuf> {
    std::fs::canonicalize(dir).with_context(|| format!("cannot resolve {}", dir.display()))
}

/// The index of the bundles in `dir`, newest first. Files that are not readable bundles are left out with
/// a warning (the explorer would show their error if asked for them directly), and so is whatever the module
/// docs say is refused.
pub fn bundle_index(dir: &Path) -> Result<BundleIndex> {
    let (index, skipped) = read_index(dir)?;
    for (path, e) in skipped {
        tracing::warn!("skipping {}: {e}", path.display());
    }
    Ok(index)
}

/// The index of the bundles in `dir`, and each `.json` file that is not one with why (`site` refuses to publish
/// without them; `serve`, [`bundle_index`], warns and goes on).
pub fn read_index(dir: &Path) -> Result<(BundleIndex, Vec<(PathBuf, String)>)> {
    let root = canonical(dir)?;
    let mut entries = Vec::new();
    let mut skipped = Vec::new();
    let listing = std::fs::read_dir(&root).with_context(|| format!("cannot list {}", dir.display()))?;
    for entry in listing.flatten() {
        let path = entry.path();
        let Some(file) = path.file_name().and_then(|f| f.to_str()).map(str::to_string) else { continue };
        if !file.ends_with(".json") || file == "index.json" || file.starts_with('.') {
            continue;
        }
        let text = match read_bundle_text(&root, &path) {
            Ok(t) => t,
            Err(e) => {
                skipped.push((path, e));
                continue;
            }
        };
        match schema::read_bundle(&text) {
            Ok(b) => entries.push(IndexEntry {
                title: title(&b),
                created_at: b.provenance.created_at.clone(),
                synthetic_weights: b.provenance.synthetic_weights,
                // The same test as `validate`'s and the explorer's PARTIAL.
                partial: metrics::coverage::partial(&b).is_some(),
                reference: !b.provenance.by_runner(),
                file,
            }),
            Err(e) => skipped.push((path, e.to_string())),
        }
    }
    entries.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.file.cmp(&b.file)));
    skipped.sort();
    Ok((BundleIndex { bundles: entries }, skipped))
}

/// The text of `path` when [`open_inside`] `root` allows it and it is at most [`MAX_BUNDLE_BYTES`] (also
/// while it is being read, should it grow).
fn read_bundle_text(root: &Path, path: &Path) -> std::result::Result<String, String> {
    let too_large = || format!("larger than {} MiB, too large for a bundle", MAX_BUNDLE_BYTES >> 20);
    let (file, len) = open_inside(root, path).map_err(|e| e.to_string())?;
    if len > MAX_BUNDLE_BYTES {
        return Err(too_large());
    }
    let mut text = String::new();
    file.take(MAX_BUNDLE_BYTES + 1).read_to_string(&mut text).map_err(|e| e.to_string())?;
    if text.len() as u64 > MAX_BUNDLE_BYTES {
        return Err(too_large());
    }
    Ok(text)
}

/// `NAME on DEVICE`, with the tool when another wrote the bundle (`jobs/hf_reference.py`'s
/// `hf-transformers-reference`): the selector must tell the runner's bundle from the reference's of one grid.
fn title(b: &schema::Bundle) -> String {
    let p = &b.provenance;
    let by = if p.by_runner() { String::new() } else { format!(" by {}", p.tool) };
    format!("{}{by} on {}", p.config.run.name, device_label(b))
}

fn device_label(b: &schema::Bundle) -> String {
    let d = &b.provenance.device;
    d.name.clone().unwrap_or_else(|| d.kind.clone())
}

/// Serves until the process is stopped. Prints the address (with the real port when `addr` asks for 0).
/// That `dir` (`--explorer`) holds a built explorer (its `index.html`), as `serve` and `site` require.
pub fn check_explorer_built(dir: &Path) -> Result<()> {
    if dir.join("index.html").is_file() {
        return Ok(());
    }
    Err(InputError(format!(
        "--explorer {}: no index.html, the explorer is not built; fix: build it (`trunk build index.html \
         --offline=true --release` in explorer/, or `scripts/demo.sh`), or pass --explorer DIR",
        dir.display()
    ))
    .into())
}

pub fn serve(results: &Path, explorer: &Path, addr: &str) -> Result<()> {
    // The flags first, then the build they serve: a bad --addr is said as such wherever the explorer is.
    if !results.is_dir() {
        return Err(
            InputError(format!("{} is not a folder of bundles; fix: pass --results DIR", results.display())).into()
        );
    }
    let server = listen(addr)?;
    check_explorer_built(explorer)?;
    let roots = Arc::new(Roots { results: canonical(results)?, explorer: canonical(explorer)? });
    let local = server.server_addr().to_ip().map(|a| a.to_string()).unwrap_or_else(|| addr.to_string());
    println!("explorer: http://{local}/  (bundles from {}; Ctrl-C stops)", results.display());
    let in_flight = Arc::new(AtomicUsize::new(0));
    for request in server.incoming_requests() {
        if in_flight.fetch_add(1, Ordering::SeqCst) >= MAX_IN_FLIGHT {
            in_flight.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!("{MAX_IN_FLIGHT} requests in flight: answering 503 to {}", request.url());
            // A few bytes: they fit in the socket's buffer even when the client reads nothing.
            let _ = request.respond(text_response(503));
            continue;
        }
        let slot = Slot(Arc::clone(&in_flight));
        let roots = Arc::clone(&roots);
        // On failure the closure, the request with it, is dropped: tiny_http then answers 500.
        let spawned = std::thread::Builder::new().name("serve-request".into()).spawn(move || {
            let _slot = slot;
            answer(request, &roots);
        });
        if let Err(e) = spawned {
            tracing::warn!("cannot start a thread for a request: {e}");
        }
    }
    Ok(())
}

/// The fix of a bad `--addr`.
const ADDR_FIX: &str = "fix: HOST:PORT such as 127.0.0.1:8080 (port 0: any free port)";

/// A server listening on `addr` (`--addr`). An address that is not HOST:PORT (no port, a port over 65535, a
/// host that does not resolve), one in use or one this user may not bind is bad input (exit 2) with its fix.
fn listen(addr: &str) -> Result<tiny_http::Server> {
    use std::net::ToSocketAddrs;
    let bad = |why: String| -> anyhow::Error { InputError(format!("--addr {addr}: {why}")).into() };
    match addr.to_socket_addrs().map(|mut a| a.next()) {
        Ok(Some(_)) => {}
        Ok(None) => return Err(bad(format!("no address to listen on; {ADDR_FIX}"))),
        Err(e) => return Err(bad(format!("not a HOST:PORT address ({e}); {ADDR_FIX}"))),
    }
    tiny_http::Server::http(addr).map_err(|e| {
        let kind = e.downcast_ref::<std::io::Error>().map(std::io::Error::kind);
        match kind {
            Some(std::io::ErrorKind::AddrInUse) => bad("the address is in use (another server on that port?); fix: \
                 pass another port (e.g. --addr 127.0.0.1:8081), or port 0 for any free port (--addr 127.0.0.1:0: the \
                 address is printed)"
                .into()),
            Some(std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::AddrNotAvailable) => bad(format!(
                "cannot listen there ({e}): a port under 1024 needs privileges, and the host must be an address \
                 of this machine; {ADDR_FIX}"
            )),
            _ => anyhow::anyhow!("cannot listen on {addr}: {e}"),
        }
    })
}

/// The served folders, canonical.
struct Roots {
    results: PathBuf,
    explorer: PathBuf,
}

/// One of the [`MAX_IN_FLIGHT`] requests; freed on drop.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn answer(request: tiny_http::Request, roots: &Roots) {
    let url = request.url().split(['?', '#']).next().unwrap_or("/").to_string();
    let (mut resp, mime) = match respond(roots, &url) {
        Ok((Body::Bytes(bytes), mime)) => (tiny_http::Response::from_data(bytes).boxed(), mime),
        Ok((Body::File(file), mime)) => (tiny_http::Response::from_file(file).boxed(), mime),
        Err(status) => (text_response(status), "text/plain; charset=utf-8"),
    };
    if let Ok(h) = tiny_http::Header::from_bytes(&b"Content-Type"[..], mime.as_bytes()) {
        resp.add_header(h);
    }
    if let Ok(h) = tiny_http::Header::from_bytes(&b"Cache-Control"[..], &b"no-cache"[..]) {
        resp.add_header(h);
    }
    let _ = request.respond(resp);
}

fn text_response(status: u16) -> tiny_http::ResponseBox {
    tiny_http::Response::from_string(format!("{status}")).with_status_code(status).boxed()
}

enum Body {
    Bytes(Vec<u8>),
    File(File),
}

fn respond(roots: &Roots, url: &str) -> std::result::Result<(Body, &'static str), u16> {
    let rel = url.trim_start_matches('/');
    if rel == "bundles/index.json" {
        let index = bundle_index(&roots.results).map_err(|_| 500u16)?;
        return Ok((Body::Bytes(serde_json::to_vec_pretty(&index).map_err(|_| 500u16)?), "application/json"));
    }
    let (root, path): (&Path, PathBuf) = match rel.strip_prefix("bundles/") {
        Some(file) => (&roots.results, roots.results.join(safe_name(file).ok_or(404u16)?)),
        None => {
            let rel = if rel.is_empty() { "index.html" } else { rel };
            let mut p = roots.explorer.clone();
            for part in rel.split('/') {
                p.push(safe_name(part).ok_or(404u16)?);
            }
            (&roots.explorer, p)
        }
    };
    let (file, _) = open_inside(root, &path).map_err(|_| 404u16)?;
    Ok((Body::File(file), mime(&path)))
}

/// A single path component without traversal.
fn safe_name(part: &str) -> Option<&str> {
    (!part.is_empty() && part != "." && part != ".." && !part.contains(['/', '\\'])).then_some(part)
}

fn mime(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" => "text/javascript",
        "wasm" => "application/wasm",
        "css" => "text/css",
        "json" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        _ => "application/octet-stream",
    }
}
