//! `dllm-bench serve`: the index of bundles, the bundles, the explorer's files, nothing else.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use crate::util::Sandbox;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n").expect("send");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

#[test]
fn serves_index_bundles_and_explorer_without_traversal() {
    let sb = Sandbox::new();
    let results = sb.results();
    let explorer = sb.path().join("dist");
    std::fs::create_dir_all(&results).expect("results");
    std::fs::create_dir_all(&explorer).expect("dist");
    std::fs::write(explorer.join("index.html"), "<html>explorer</html>").expect("index");
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../schema/tests/fixtures/v1.0/demo.json");
    std::fs::copy(&fixture, results.join("demo.json")).expect("copy");
    std::fs::write(results.join("broken.json"), "{ not json").expect("broken");
    std::fs::write(sb.path().join("secret.txt"), "secret").expect("secret");

    let child = Command::new(env!("CARGO_BIN_EXE_dllm-bench"))
        .args(["serve", "--addr", "127.0.0.1:0", "--results"])
        .arg(&results)
        .arg("--explorer")
        .arg(&explorer)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut server = Server(child);
    let mut line = String::new();
    BufReader::new(server.0.stdout.take().expect("stdout")).read_line(&mut line).expect("address line");
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();

    let (status, body) = get(&addr, "/");
    assert_eq!((status, body.as_str()), (200, "<html>explorer</html>"));
    let (status, body) = get(&addr, "/bundles/index.json");
    assert_eq!(status, 200);
    let index: schema::BundleIndex = serde_json::from_str(&body).expect("index json");
    assert_eq!(index.bundles.len(), 1, "the broken file is left out: {body}");
    assert_eq!(index.bundles[0].file, "demo.json");
    assert!(index.bundles[0].synthetic_weights);
    let (status, body) = get(&addr, "/bundles/demo.json?x=1");
    assert_eq!(status, 200);
    schema::read_bundle(&body).expect("bundle served intact");
    assert_eq!(get(&addr, "/bundles/../secret.txt").0, 404);
    assert_eq!(get(&addr, "/../secret.txt").0, 404);
    assert_eq!(get(&addr, "/missing.js").0, 404);
}

#[test]
fn site_holds_the_explorer_the_bundles_and_their_index() {
    let sb = Sandbox::new();
    let results = sb.results();
    let explorer = sb.path().join("dist");
    std::fs::create_dir_all(explorer.join("assets")).expect("dist");
    std::fs::create_dir_all(&results).expect("results");
    std::fs::write(explorer.join("index.html"), "<html></html>").expect("index");
    std::fs::write(explorer.join("assets/app.wasm"), b"\0asm").expect("wasm");
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../schema/tests/fixtures/v1.0/demo.json");
    std::fs::copy(&fixture, results.join("run-a.json")).expect("copy");
    std::fs::write(results.join("broken.json"), "[]").expect("broken");
    let out = sb.path().join("site");
    let o = sb.cmd(&[
        "site",
        "--results",
        results.to_str().expect("utf8"),
        "--explorer",
        explorer.to_str().expect("utf8"),
        "--out",
        out.to_str().expect("utf8"),
    ]);
    crate::assert_exit!(o, 0);
    assert!(out.join("index.html").is_file() && out.join("assets/app.wasm").is_file());
    let index: schema::BundleIndex =
        serde_json::from_str(&std::fs::read_to_string(out.join("bundles/index.json")).expect("index")).expect("json");
    assert_eq!(index.bundles.iter().map(|b| b.file.as_str()).collect::<Vec<_>>(), ["run-a.json"]);
    schema::read_bundle(&std::fs::read_to_string(out.join("bundles/run-a.json")).expect("bundle")).expect("valid");
    assert!(!out.join("bundles/broken.json").exists(), "only readable bundles are published");
}
