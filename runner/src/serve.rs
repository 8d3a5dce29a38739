//! `dllm-bench serve`: the explorer and the bundles of a results folder on a local address.
//!
//! Layout served (all relative, as on a static host): `/` the explorer's built files, `/bundles/index.json`
//! generated from the results folder on each request, `/bundles/FILE.json` the bundles themselves.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use schema::{BundleIndex, IndexEntry};

use crate::InputError;

/// The index of the bundles in `dir`, newest first. Files that are not readable bundles are left out with
/// a warning (the explorer would show their error if asked for them directly).
pub fn bundle_index(dir: &Path) -> Result<BundleIndex> {
    let mut entries = Vec::new();
    let listing = std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))?;
    for entry in listing.flatten() {
        let path = entry.path();
        let Some(file) = path.file_name().and_then(|f| f.to_str()).map(str::to_string) else { continue };
        if !file.ends_with(".json") || file == "index.json" || file.starts_with('.') {
            continue;
        }
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!("skipping {}: {e}", path.display());
                continue;
            }
        };
        match schema::read_bundle(&text) {
            Ok(b) => entries.push(IndexEntry {
                title: format!("{} on {}", b.provenance.config.run.name, device_label(&b)),
                created_at: b.provenance.created_at.clone(),
                synthetic_weights: b.provenance.synthetic_weights,
                file,
            }),
            Err(e) => tracing::warn!("skipping {}: {e}", path.display()),
        }
    }
    entries.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.file.cmp(&b.file)));
    Ok(BundleIndex { bundles: entries })
}

fn device_label(b: &schema::Bundle) -> String {
    let d = &b.provenance.device;
    d.name.clone().unwrap_or_else(|| d.kind.clone())
}

/// Serves until the process is stopped. Prints the address (with the real port when `addr` asks for 0).
pub fn serve(results: &Path, explorer: &Path, addr: &str) -> Result<()> {
    if !explorer.join("index.html").is_file() {
        return Err(InputError(format!(
            "{} has no index.html: the explorer is not built; fix: run `scripts/demo.sh` (builds it) or \
             `trunk build --release` in explorer/, or pass --explorer DIR",
            explorer.display()
        ))
        .into());
    }
    if !results.is_dir() {
        return Err(
            InputError(format!("{} is not a folder of bundles; fix: pass --results DIR", results.display())).into()
        );
    }
    let server = tiny_http::Server::http(addr).map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let local = server.server_addr().to_ip().map(|a| a.to_string()).unwrap_or_else(|| addr.to_string());
    println!("explorer: http://{local}/  (bundles from {}; Ctrl-C stops)", results.display());
    for request in server.incoming_requests() {
        let url = request.url().split(['?', '#']).next().unwrap_or("/").to_string();
        let response = respond(results, explorer, &url);
        let (status, body, mime) = match response {
            Ok((body, mime)) => (200, body, mime),
            Err(status) => (status, format!("{status}").into_bytes(), "text/plain; charset=utf-8"),
        };
        let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], mime.as_bytes()).ok();
        let mut resp = tiny_http::Response::from_data(body).with_status_code(status);
        if let Some(h) = header {
            resp.add_header(h);
        }
        if let Ok(h) = tiny_http::Header::from_bytes(&b"Cache-Control"[..], &b"no-cache"[..]) {
            resp.add_header(h);
        }
        let _ = request.respond(resp);
    }
    Ok(())
}

fn respond(results: &Path, explorer: &Path, url: &str) -> std::result::Result<(Vec<u8>, &'static str), u16> {
    let rel = url.trim_start_matches('/');
    if rel == "bundles/index.json" {
        let index = bundle_index(results).map_err(|_| 500u16)?;
        return Ok((serde_json::to_vec_pretty(&index).map_err(|_| 500u16)?, "application/json"));
    }
    let path: PathBuf = match rel.strip_prefix("bundles/") {
        Some(file) => results.join(safe_name(file).ok_or(404u16)?),
        None => {
            let rel = if rel.is_empty() { "index.html" } else { rel };
            let mut p = explorer.to_path_buf();
            for part in rel.split('/') {
                p.push(safe_name(part).ok_or(404u16)?);
            }
            p
        }
    };
    let body = std::fs::read(&path).map_err(|_| 404u16)?;
    Ok((body, mime(&path)))
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
