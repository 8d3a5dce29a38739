//! `dllm-bench serve`: the index of bundles, the bundles, the explorer's files, nothing else; it stays up
//! (FIFOs, huge files, stalled clients) and inside its folders (symlinks that lead out are refused).

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::util::Sandbox;

/// Longest wait for one answer: far above what a request takes, there only to turn a hang into a failure.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `dllm-bench serve` on a free port, its log (stderr) in `log`; returns the server and its address.
fn start(results: &Path, explorer: &Path, log: &Path) -> (Server, String) {
    start_with_threads(results, explorer, log, None)
}

/// [`start`] with `RAYON_NUM_THREADS` set to `threads`, or removed from its environment.
fn start_with_threads(results: &Path, explorer: &Path, log: &Path, threads: Option<&str>) -> (Server, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dllm-bench"));
    match threads {
        Some(n) => cmd.env("RAYON_NUM_THREADS", n),
        None => cmd.env_remove("RAYON_NUM_THREADS"),
    };
    let child = cmd
        .args(["serve", "--addr", "127.0.0.1:0", "--results"])
        .arg(results)
        .arg("--explorer")
        .arg(explorer)
        .stdout(Stdio::piped())
        .stderr(File::create(log).expect("log file"))
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
    (server, addr)
}

/// Status and body of `GET path`; fails when the whole answer has not come within [`ANSWER_WITHIN`].
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(ANSWER_WITHIN)).expect("read timeout");
    s.set_write_timeout(Some(ANSWER_WITHIN)).expect("write timeout");
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n").expect("send");
    let mut bytes = Vec::new();
    if let Err(e) = s.read_to_end(&mut bytes) {
        panic!("no answer to GET {path} within {ANSWER_WITHIN:?}, the server is stalled: {e}");
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// The files listed by `/bundles/index.json`, sorted.
fn index_files(addr: &str) -> Vec<String> {
    let (status, body) = get(addr, "/bundles/index.json");
    assert_eq!(status, 200, "{body}");
    let index: schema::BundleIndex = serde_json::from_str(&body).expect("index json");
    let mut files: Vec<String> = index.bundles.into_iter().map(|b| b.file).collect();
    files.sort();
    files
}

fn demo_fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../schema/tests/fixtures/v1.0/demo.json")
}

/// `results/` holding `demo.json` and `dist/` holding `index.html`, in the sandbox.
fn folders(sb: &Sandbox) -> (PathBuf, PathBuf) {
    let results = sb.results();
    let explorer = sb.path().join("dist");
    std::fs::create_dir_all(&results).expect("results");
    std::fs::create_dir_all(&explorer).expect("dist");
    std::fs::write(explorer.join("index.html"), "<html>explorer</html>").expect("index");
    std::fs::copy(demo_fixture(), results.join("demo.json")).expect("copy");
    (results, explorer)
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().expect("run mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// A file of `len` zero bytes that takes no room on disk.
fn sparse(path: &Path, len: u64) {
    File::create(path).expect("create").set_len(len).expect("set_len");
}

#[test]
fn serves_index_bundles_and_explorer_without_traversal() {
    let sb = Sandbox::new();
    let (results, explorer) = folders(&sb);
    std::fs::write(results.join("broken.json"), "{ not json").expect("broken");
    std::fs::write(sb.path().join("secret.txt"), "secret").expect("secret");
    let (_server, addr) = start(&results, &explorer, &sb.path().join("serve.log"));

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
    for path in [
        "/bundles/../secret.txt",
        "/../secret.txt",
        "/bundles/%2e%2e/secret.txt",
        "/bundles/..%2fsecret.txt",
        "/bundles/..\\secret.txt",
        "/%2e%2e/secret.txt",
        "//etc/hostname",
        "/missing.js",
    ] {
        assert_eq!(get(&addr, path).0, 404, "{path}");
    }
}

/// The selector's titles tell the runner's bundle from HF transformers' of the same grid (the committed GPU
/// bundles: both `gpu_primary on NVIDIA H200` before).
#[test]
fn index_titles_name_a_reference_tool() {
    let sb = Sandbox::new();
    let results = sb.results();
    std::fs::create_dir_all(&results).expect("results");
    let mut b: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(demo_fixture()).expect("fixture")).expect("json");
    std::fs::write(results.join("runner.json"), b.to_string()).expect("write");
    b["provenance"]["tool"] = "hf-transformers-reference".into();
    std::fs::write(results.join("hf.json"), b.to_string()).expect("write");
    let index = runner::serve::bundle_index(&results).expect("index");
    let title = |f: &str| index.bundles.iter().find(|e| e.file == f).map(|e| e.title.clone()).expect("listed");
    assert!(title("hf.json").contains(" by hf-transformers-reference on "), "{}", title("hf.json"));
    assert!(!title("runner.json").contains(" by "), "{}", title("runner.json"));
}

/// A FIFO named like a bundle (or an explorer file) would block whoever opens it for reading until a writer
/// comes: it is neither listed nor served, and everything else still is.
#[test]
fn fifos_are_neither_listed_nor_served_and_block_nothing() {
    let sb = Sandbox::new();
    let (results, explorer) = folders(&sb);
    mkfifo(&results.join("x.json"));
    mkfifo(&explorer.join("pipe.js"));
    let (_server, addr) = start(&results, &explorer, &sb.path().join("serve.log"));

    assert_eq!(index_files(&addr), ["demo.json"]);
    assert_eq!(get(&addr, "/bundles/x.json").0, 404);
    assert_eq!(get(&addr, "/pipe.js").0, 404);
    let (status, body) = get(&addr, "/bundles/demo.json");
    assert_eq!(status, 200);
    schema::read_bundle(&body).expect("bundle served intact");
    assert_eq!(get(&addr, "/").0, 200);
    assert_eq!(index_files(&addr), ["demo.json"], "still answering after the FIFO requests");
}

/// A symlink whose real target is outside the served folder is refused (and left out of the index); one that
/// stays inside is served like the file it names, and folders given as symlinks work.
#[test]
fn symlinks_out_of_the_folders_are_refused_and_inside_ones_served() {
    let sb = Sandbox::new();
    let (results, explorer) = folders(&sb);
    let outside = sb.path().join("outside");
    std::fs::create_dir_all(&outside).expect("outside");
    std::fs::copy(demo_fixture(), outside.join("other.json")).expect("copy");
    std::fs::write(outside.join("app.js"), "outside").expect("app.js");
    std::fs::write(sb.path().join("secret.txt"), "secret").expect("secret");
    symlink(outside.join("other.json"), results.join("leak.json")).expect("absolute link out");
    symlink("../outside/other.json", results.join("up.json")).expect("relative link out");
    symlink("demo.json", results.join("alias.json")).expect("link inside");
    symlink("../secret.txt", explorer.join("leak.txt")).expect("explorer link out");
    symlink(&outside, explorer.join("assets")).expect("explorer folder link out");
    std::fs::create_dir_all(explorer.join("real")).expect("real");
    std::fs::write(explorer.join("real/app.js"), "inside").expect("app.js");
    symlink("real", explorer.join("same")).expect("explorer folder link inside");
    symlink("index.html", explorer.join("home.html")).expect("explorer link inside");
    let (results_link, explorer_link) = (sb.path().join("results-link"), sb.path().join("dist-link"));
    symlink(&results, &results_link).expect("results link");
    symlink(&explorer, &explorer_link).expect("explorer link");
    let (_server, addr) = start(&results_link, &explorer_link, &sb.path().join("serve.log"));

    assert_eq!(index_files(&addr), ["alias.json", "demo.json"], "links out are left out of the index");
    assert_eq!(get(&addr, "/bundles/leak.json").0, 404);
    assert_eq!(get(&addr, "/bundles/up.json").0, 404);
    let (status, body) = get(&addr, "/bundles/alias.json");
    assert_eq!(status, 200);
    schema::read_bundle(&body).expect("bundle served through the link inside");
    assert_eq!(get(&addr, "/leak.txt").0, 404);
    assert_eq!(get(&addr, "/assets/app.js").0, 404);
    assert_eq!(get(&addr, "/same/app.js"), (200, "inside".to_string()));
    assert_eq!(get(&addr, "/home.html"), (200, "<html>explorer</html>".to_string()));
    assert_eq!(get(&addr, "/"), (200, "<html>explorer</html>".to_string()));
}

/// Clients that send nothing, half a request, or never read their (large) answer do not keep the server from
/// answering another client.
#[test]
fn stalled_clients_do_not_block_other_requests() {
    let sb = Sandbox::new();
    let (results, explorer) = folders(&sb);
    // Far more than the kernel buffers of a loopback connection hold, so answering it blocks until read.
    sparse(&explorer.join("big.wasm"), 64 << 20);
    let (_server, addr) = start(&results, &explorer, &sb.path().join("serve.log"));

    let idle = TcpStream::connect(&addr).expect("connect");
    let mut partial = TcpStream::connect(&addr).expect("connect");
    write!(partial, "GET /index.html HTTP/1.1\r\nHost: {addr}\r\n").expect("send");
    let mut hog = TcpStream::connect(&addr).expect("connect");
    write!(hog, "GET /big.wasm HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("send");
    // Lets the server take up the hog's request before the others (it never reads its answer).
    std::thread::sleep(Duration::from_millis(500));

    assert_eq!(get(&addr, "/"), (200, "<html>explorer</html>".to_string()));
    assert_eq!(index_files(&addr), ["demo.json"]);
    assert_eq!(get(&addr, "/bundles/demo.json").0, 200);
    drop((idle, partial, hog));
}

/// With every request slot held by a client that does not read, another request is answered 503 rather than
/// left waiting, and the slots come back once those clients go.
#[test]
fn requests_over_the_cap_get_503_until_slots_free() {
    let sb = Sandbox::new();
    let (results, explorer) = folders(&sb);
    sparse(&explorer.join("big.wasm"), 64 << 20);
    let (_server, addr) = start(&results, &explorer, &sb.path().join("serve.log"));

    let hogs: Vec<TcpStream> = (0..runner::serve::MAX_IN_FLIGHT)
        .map(|_| {
            let mut hog = TcpStream::connect(&addr).expect("connect");
            write!(hog, "GET /big.wasm HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("send");
            hog
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(get(&addr, "/").0, 503);
    drop(hogs);
    let deadline = std::time::Instant::now() + ANSWER_WITHIN;
    loop {
        match get(&addr, "/") {
            (200, _) => break,
            (status, _) => assert!(std::time::Instant::now() < deadline, "still {status} after the hogs left"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A "bundle" too large to be one is left out of the index without being read into memory.
#[test]
fn bundles_over_the_size_limit_are_left_out_of_the_index_unread() {
    let sb = Sandbox::new();
    let (results, explorer) = folders(&sb);
    sparse(&results.join("huge.json"), (512 << 20) + 1);
    let log = sb.path().join("serve.log");
    let (_server, addr) = start(&results, &explorer, &log);

    assert_eq!(index_files(&addr), ["demo.json"]);
    let log = std::fs::read_to_string(&log).expect("log");
    assert!(log.contains("huge.json") && log.contains("larger than"), "the warning names the limit: {log}");
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
    std::fs::copy(demo_fixture(), results.join("run-a.json")).expect("copy");
    std::fs::write(results.join("broken.json"), "[]").expect("broken");
    let out = sb.path().join("site");
    let site = |more: &[&str]| {
        let args = ["site", "--results", results.to_str().expect("utf8"), "--explorer"];
        let args = [&args[..], &[explorer.to_str().expect("utf8"), "--out", out.to_str().expect("utf8")], more];
        sb.cmd(&args.concat())
    };
    // A .json file that is not a bundle stops the site (it would be left out unseen), naming it.
    let o = site(&[]);
    crate::assert_exit!(o, 2);
    let err = crate::util::stderr(&o);
    assert!(err.contains("broken.json") && err.contains("--skip-invalid") && !out.exists(), "{err}");
    // --skip-invalid publishes the rest and names what it left out.
    let o = site(&["--skip-invalid"]);
    crate::assert_exit!(o, 0);
    assert!(crate::util::stderr(&o).contains("leaving out") && crate::util::stderr(&o).contains("broken.json"));
    assert!(out.join("index.html").is_file() && out.join("assets/app.wasm").is_file());
    let index: schema::BundleIndex =
        serde_json::from_str(&std::fs::read_to_string(out.join("bundles/index.json")).expect("index")).expect("json");
    assert_eq!(index.bundles.iter().map(|b| b.file.as_str()).collect::<Vec<_>>(), ["run-a.json"]);
    schema::read_bundle(&std::fs::read_to_string(out.join("bundles/run-a.json")).expect("bundle")).expect("valid");
    assert!(!out.join("bundles/broken.json").exists(), "only readable bundles are published");
}

#[test]
fn site_replaces_only_an_earlier_site_and_never_what_holds_its_inputs() {
    // Relative paths from the sandbox folder, as a user types them.
    let sb = Sandbox::new();
    std::fs::create_dir_all(sb.path().join("res")).expect("results");
    std::fs::create_dir_all(sb.path().join("exp")).expect("explorer");
    std::fs::write(sb.path().join("exp/index.html"), "<html></html>").expect("index");
    std::fs::copy(demo_fixture(), sb.path().join("res/a.json")).expect("copy");
    std::fs::write(sb.path().join("thesis.tex"), "keep me").expect("a user's file");
    std::fs::create_dir_all(sb.path().join("notes")).expect("notes");
    std::fs::write(sb.path().join("notes/n.txt"), "keep me too").expect("a user's file");
    std::fs::write(sb.path().join("afile"), "a file").expect("a file");
    let site = |out: &str, results: &str, explorer: &str| {
        sb.cmd(&["site", "--results", results, "--explorer", explorer, "--out", out])
    };
    for (out, results, explorer, why) in [
        (".", "res", "exp", "holds the current folder"),
        ("res", "res", "exp", "holds the results folder"),
        ("exp", "res", "exp", "holds the explorer build"),
        ("exp/site", "res", "exp", "inside the explorer build"),
        ("missing/../res", "res", "exp", "the results folder, through a folder that does not exist"),
        ("missing/../notes", "res", "exp", "not a site, through a folder that does not exist"),
        ("notes", "res", "exp", "not a site"),
        ("afile", "res", "exp", "is a file"),
    ] {
        let o = site(out, results, explorer);
        crate::assert_exit!(o, 2);
        let err = crate::util::stderr(&o);
        assert!(err.contains(&format!("--out {out}")) && err.contains("fix:"), "{out} ({why}): {err}");
    }
    // Nothing was touched.
    for (file, text) in [("thesis.tex", "keep me"), ("notes/n.txt", "keep me too"), ("afile", "a file")] {
        assert_eq!(std::fs::read_to_string(sb.path().join(file)).expect(file), text);
    }
    assert!(sb.path().join("res/a.json").is_file() && sb.path().join("exp/index.html").is_file());
    // A new folder, then the same folder again (an earlier site is replaced), an empty one.
    crate::assert_exit!(site("out/site", "res", "exp"), 0);
    std::fs::write(sb.path().join("out/site/stale.txt"), "from an earlier site").expect("stale");
    crate::assert_exit!(site("out/site", "res", "exp"), 0);
    assert!(sb.path().join("out/site/bundles/a.json").is_file() && !sb.path().join("out/site/stale.txt").exists());
    std::fs::create_dir_all(sb.path().join("empty")).expect("empty");
    crate::assert_exit!(site("empty", "res", "exp"), 0);
    // A results folder with no bundle: no site of nothing.
    std::fs::create_dir_all(sb.path().join("nothing")).expect("nothing");
    let o = site("out/none", "nothing", "exp");
    crate::assert_exit!(o, 2);
    assert!(crate::util::stderr(&o).contains("--results nothing: no bundle in it"), "{}", crate::util::stderr(&o));
    let left: Vec<String> = std::fs::read_dir(sb.path().join("out"))
        .expect("out")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["site"], "no temporary folder is left beside the site");
}

#[test]
fn the_process_fixes_candles_thread_count_once_at_its_start() {
    // Without RAYON_NUM_THREADS candle's CPU matmul re-reads /proc/cpuinfo at every call, inside the timed
    // forwards: the binary replaces itself at its start (same PID) with the variable set to candle's own count,
    // and keeps a value the user set.
    let sb = Sandbox::new();
    let (results, explorer) = folders(&sb);
    let environ = |server: &Server| {
        let raw = std::fs::read(format!("/proc/{}/environ", server.0.id())).expect("the server's environment");
        raw.split(|&b| b == 0).map(|v| String::from_utf8_lossy(v).into_owned()).collect::<Vec<_>>()
    };
    let (server, _) = start_with_threads(&results, &explorer, &sb.path().join("unset.log"), None);
    let set: Vec<String> = environ(&server).into_iter().filter(|v| v.starts_with("RAYON_NUM_THREADS=")).collect();
    let n: Vec<usize> = set.iter().filter_map(|v| v["RAYON_NUM_THREADS=".len()..].parse().ok()).collect();
    assert!(n.len() == 1 && n[0] >= 1, "the running server's RAYON_NUM_THREADS: {set:?}");
    drop(server);
    let (server, _) = start_with_threads(&results, &explorer, &sb.path().join("set.log"), Some("1"));
    assert!(environ(&server).contains(&"RAYON_NUM_THREADS=1".to_string()), "the user's value is kept");
}

/// The index marks a bundle with fewer cells than its run planned (the explorer's selector says PARTIAL and does
/// not open it first); a whole one has no `partial` in its entry.
#[test]
fn the_index_marks_partial_bundles() {
    let sb = Sandbox::new();
    let results = sb.results();
    std::fs::create_dir_all(&results).expect("results");
    let mut b: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(demo_fixture()).expect("fixture")).expect("json");
    let cells = b["cells"].as_array().expect("cells").len();
    b["provenance"]["planned_cells"] = cells.into();
    std::fs::write(results.join("whole.json"), b.to_string()).expect("write");
    b["provenance"]["planned_cells"] = (cells + 4).into();
    std::fs::write(results.join("partial.json"), b.to_string()).expect("write");
    let index = runner::serve::bundle_index(&results).expect("index");
    let partial = |f: &str| index.bundles.iter().find(|e| e.file == f).map(|e| e.partial).expect("listed");
    assert!(partial("partial.json") && !partial("whole.json"));
    let json = serde_json::to_string(&index).expect("json");
    assert_eq!(json.matches("\"partial\"").count(), 1, "only the partial entry says so: {json}");
}

/// Bad flags of `serve` and `site` are bad input (exit 2), each naming the flag and its fix.
#[test]
fn serve_and_site_refuse_bad_flags_with_a_fix() {
    let sb = Sandbox::new();
    let (results, explorer) = folders(&sb);
    let (r, e) = (results.to_str().expect("utf8"), explorer.to_str().expect("utf8"));
    let expect = |o: &std::process::Output, flag: &str, fix: &str| {
        crate::assert_exit!(o, 2);
        let err = crate::util::stderr(o);
        assert!(err.contains(flag) && err.contains("fix:") && err.contains(fix), "{flag}: {err}");
    };
    for addr in ["nonsense", "127.0.0.1:99999", "127.0.0.1"] {
        let o = sb.cmd(&["serve", "--results", r, "--explorer", e, "--addr", addr]);
        expect(&o, &format!("--addr {addr}: "), "HOST:PORT such as 127.0.0.1:8080 (port 0: any free port)");
        // Said as such where the explorer is not built too; the build is named when the flags are good.
        let o = sb.cmd(&["serve", "--results", r, "--explorer", "unbuilt", "--addr", addr]);
        expect(&o, &format!("--addr {addr}: "), "HOST:PORT");
    }
    for cmd in [&["serve", "--results", r, "--addr", "127.0.0.1:0"][..], &["site", "--results", r, "--out", "out2"]] {
        let o = sb.cmd(&[cmd, &["--explorer", "unbuilt"]].concat());
        expect(&o, "--explorer unbuilt: no index.html, the explorer is not built", "trunk build index.html");
    }
    // An address in use: another port, or port 0.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let addr = taken.local_addr().expect("addr").to_string();
    let o = sb.cmd(&["serve", "--results", r, "--explorer", e, "--addr", &addr]);
    expect(&o, &format!("--addr {addr}: the address is in use"), "port 0");
    let o = sb.cmd(&["site", "--results", "nope", "--explorer", e, "--out", "out"]);
    expect(&o, "--results nope: not a folder of bundles", "pass --results DIR");
    // A folder nothing can be created in.
    let o = sb.cmd(&["site", "--results", r, "--explorer", e, "--out", "/proc/dllm-bench-site"]);
    expect(&o, "--out /proc/dllm-bench-site: cannot create a folder in /proc", "a folder you can write");
}
