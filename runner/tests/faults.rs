//! What a cluster does to the runner (issue: reliable under bad input, shared folders and faults): duplicate
//! values, absurd sizes and unreadable files are refused before any work with exit status 2, the field and a
//! fix; two processes never run one run folder; a bundle readers would refuse is never written.

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::assert_exit;
use crate::util::{Sandbox, spawn, stderr, stdout};

/// `dllm-bench ARGS` must exit 2 before doing any work, and its message must contain every `want`.
fn refused(sb: &Sandbox, args: &[&str], want: &[&str]) {
    let start = Instant::now();
    let out = sb.cmd(args);
    assert_exit!(out, 2);
    let err = stderr(&out);
    for w in want {
        assert!(err.contains(w), "{args:?}: message lacks {w:?}:\n{err}");
    }
    assert!(err.contains("fix"), "{args:?}: no fix in the message:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{args:?} took {:?}: it worked before refusing",
        start.elapsed()
    );
}

const CONFIG: &str = r#"
[run]
name = "t"
dtype = "f32"
warmup = 0
repetitions = 1

[prompts]
source = "embedded"
count = 2

[grid]
seq_lengths = [40]
batch_sizes = [1]
steps = [4]
output_tokens = 32

[[models]]
kind = "llama"
id = "t/llama"
synthetic = { preset = "tiny" }

[[models]]
kind = "llada"
id = "t/llada"
synthetic = { preset = "tiny" }
"#;

#[test]
fn duplicate_grid_values_and_models_are_refused_before_they_make_an_invalid_bundle() {
    let sb = Sandbox::new();
    for (flag, value, field) in [
        ("--batch-size", "1,1", "grid.batch_sizes[1]"),
        ("--steps", "4,4", "grid.steps[1]"),
        ("--seq-len", "48,48", "grid.seq_lengths[1]"),
    ] {
        refused(&sb, &["run", flag, value, "-o", "out"], &[field, "listed twice"]);
        refused(&sb, &["plan", flag, value], &[field]);
    }
    let two_revisions = CONFIG.replace("id = \"t/llada\"", "id = \"t/llama\"\nrevision = \"v2\"");
    let path = sb.write("two.toml", &two_revisions);
    refused(&sb, &["run", "-c", path.to_str().expect("utf8"), "-o", "out"], &["two.toml", "models[1].id"]);
    assert!(!sb.path().join("out").exists(), "nothing was written");
}

#[test]
fn absurd_sizes_and_bad_names_are_refused_naming_the_field_and_the_limit() {
    let sb = Sandbox::new();
    refused(&sb, &["run", "--steps", "4294967295", "-o", "out"], &["grid.steps[0]", "at most"]);
    refused(&sb, &["run", "--seq-len", "4294967295", "-o", "out"], &["grid.seq_lengths[0]", "limit"]);
    refused(&sb, &["run", "--repetitions", "10000000", "-o", "out"], &["run.repetitions", "limit"]);
    refused(&sb, &["run", "--shard", "0/4294967295", "-o", "out"], &["shards is more than the limit"]);
    let cases: Vec<(String, &str)> = vec![
        (CONFIG.replace("name = \"t\"", &format!("name = \"{}\"", "n".repeat(300))), "run.name"),
        (CONFIG.replace("id = \"t/llama\"", "id = \"t/lla\\u0000ma\""), "models[0].id"),
        (CONFIG.replace("output_tokens = 32", "output_tokens = 32\ntemperature = 1e308"), "grid.temperature"),
        (
            CONFIG.replace("preset = \"tiny\" }", "preset = \"tiny\", hidden = 4000000000 }"),
            "models[0].synthetic.hidden",
        ),
        (CONFIG.replace("count = 2", "count = 4294967295"), "prompts.count"),
    ];
    for (i, (text, field)) in cases.iter().enumerate() {
        let path = sb.write(&format!("c{i}.toml"), text);
        refused(&sb, &["run", "-c", path.to_str().expect("utf8"), "-o", "out"], &[field]);
    }
    assert!(!sb.path().join("out").exists(), "nothing was written");
    assert!(!sb.cache().exists(), "no synthetic checkpoint was written");
}

#[test]
fn unreadable_configs_and_prompt_files_say_what_is_wrong() {
    let sb = Sandbox::new();
    std::fs::write(sb.path().join("latin1.toml"), b"[run]\nname = \"caf\xe9\"\n").expect("write");
    refused(&sb, &["plan", "-c", "latin1.toml"], &["latin1.toml", "not UTF-8", "offset 17"]);
    refused(&sb, &["plan", "-c", "missing.toml"], &["missing.toml", "no such file"]);
    std::fs::create_dir(sb.path().join("folder.toml")).expect("mkdir");
    refused(&sb, &["plan", "-c", "folder.toml"], &["folder.toml", "is a folder"]);
    // More prompts than the embedded set has: `plan` refuses it as `run` does.
    sb.write("nine.toml", &CONFIG.replace("count = 2", "count = 9"));
    refused(
        &sb,
        &["plan", "-c", "nine.toml"],
        &["nine.toml", "prompts.count", "the embedded set has 8", "fix: prompts.count (or --max-prompts) at most 8"],
    );
    // A config saved with a byte-order mark is read.
    sb.write("bom.toml", &format!("\u{feff}{CONFIG}"));
    assert_exit!(sb.cmd(&["plan", "-c", "bom.toml"]), 0);

    let with_file =
        |path: &str| CONFIG.replace("source = \"embedded\"", &format!("source = \"file\"\npath = \"{path}\""));
    std::fs::write(sb.path().join("binary.jsonl"), [0u8, 159, 146, 150, 0, 1]).expect("write");
    std::fs::create_dir(sb.path().join("prompts.d")).expect("mkdir");
    for (name, file, want) in [
        ("p1.toml", "absent.jsonl", "no such file"),
        ("p2.toml", "binary.jsonl", "not UTF-8"),
        ("p3.toml", "prompts.d", "is a folder"),
    ] {
        let path = sb.write(name, &with_file(file));
        refused(&sb, &["run", "-c", path.to_str().expect("utf8"), "-o", "out"], &["prompts.path", file, want]);
    }
}

#[test]
fn resume_of_a_missing_or_empty_folder_is_bad_input() {
    let sb = Sandbox::new();
    refused(&sb, &["run", "--resume", "nowhere.run"], &["cannot resume nowhere.run", "does not exist"]);
    std::fs::create_dir(sb.path().join("empty.run")).expect("mkdir");
    refused(&sb, &["run", "--resume", "empty.run"], &["cannot resume empty.run", "no journal.jsonl"]);
}

fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < Duration::from_secs(120), "{what}: not within 120 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn two_processes_never_run_one_run_folder() {
    let sb = Sandbox::new();
    let dir = sb.path().join("job.run");
    let dir_s = dir.to_str().expect("utf8");
    // Long enough to still be measuring when the second process starts.
    let grid = ["--seq-len", "40", "--batch-size", "1", "--steps", "4", "--repetitions", "10000", "-q"];
    let mut args = vec!["run", "--run-dir", dir_s];
    args.extend_from_slice(&grid);
    let first = spawn(&sb, &args);
    let pid = first.id().to_string();
    wait_for("the first run's journal", || dir.join("journal.jsonl").is_file());
    let holder = std::fs::read_to_string(dir.join("run.lock")).expect("lock file");
    assert!(holder.contains(&format!("PID {pid}")), "the lock names its holder: {holder}");

    // The same command (a requeued job started twice), and a resume, are both refused naming the holder.
    let journal_before = std::fs::read(dir.join("journal.jsonl")).expect("journal");
    refused(&sb, &args, &["in use by dllm-bench PID", &pid, "--resume"]);
    refused(&sb, &["run", "--resume", dir_s], &["in use by dllm-bench PID", &pid]);
    let journal_after = std::fs::read(dir.join("journal.jsonl")).expect("journal");
    assert!(journal_after.starts_with(&journal_before), "the refused runs left the journal alone");

    Command::new("kill").args(["-TERM", &pid]).status().expect("kill");
    let out = first.wait_with_output().expect("wait");
    assert_exit!(out, 75);
    // Once the holder is gone, the folder is free again (the lock is the process's, not the file's).
    let check = sb.cmd(&["run", "--resume", dir_s, "--repetitions", "1"]);
    assert_exit!(check, 2);
    assert!(stderr(&check).contains("config changed"), "{}", stderr(&check));
}

#[test]
fn a_bundle_its_readers_would_refuse_is_never_written() {
    let sb = Sandbox::new();
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../schema/tests/fixtures/v1.2/demo-quality.json"),
    )
    .expect("fixture");
    let mut b = schema::read_bundle(&text).expect("fixture reads");
    let path = sb.path().join("out.json");
    runner::output::write_bundle(&path, &b).expect("a valid bundle is written");
    let good = std::fs::read(&path).expect("written");
    let dup = b.cells[0].clone();
    b.cells.push(dup);
    let err = runner::output::write_bundle(&path, &b).expect_err("two cells with one key");
    assert!(err.to_string().contains("repeats the key"), "{err:#}");
    assert_eq!(std::fs::read(&path).expect("still there"), good, "the earlier bundle is untouched");
}

/// Whether a reader that follows `refs/main` finds a whole checkpoint (or no ref yet).
fn snapshot_whole_or_absent(repo: &Path) -> Result<(), String> {
    let Ok(commit) = std::fs::read_to_string(repo.join("refs/main")) else { return Ok(()) };
    let snap = repo.join("snapshots").join(commit.trim());
    if commit.trim().is_empty() {
        return Err("refs/main is empty".into());
    }
    for f in ["config.json", "tokenizer.json", "model.safetensors.index.json"] {
        if !snap.join(f).is_file() {
            return Err(format!("refs/main names {} but {f} is missing", snap.display()));
        }
    }
    Ok(())
}

#[test]
fn runs_sharing_a_model_cache_write_each_checkpoint_once_and_atomically() {
    use std::os::unix::fs::MetadataExt;
    let sb = Sandbox::new();
    let repo = sb.cache().join("models--t--shared");
    let args = ["synth", "--kind", "llada", "--repo-id", "t/shared", "--preset", "small", "--shards", "3"];
    let writers: Vec<Child> = (0..6).map(|_| spawn(&sb, &args)).collect();
    // A reader looks at the cache the whole time the writers run.
    let mut pending = writers;
    while !pending.is_empty() {
        if let Err(e) = snapshot_whole_or_absent(&repo) {
            panic!("a reader saw a partial checkpoint: {e}");
        }
        pending.retain_mut(|c| c.try_wait().expect("wait").is_none());
    }
    snapshot_whole_or_absent(&repo).expect("complete at the end");
    let snapshots: Vec<_> = std::fs::read_dir(repo.join("snapshots")).expect("snapshots").flatten().collect();
    assert_eq!(snapshots.len(), 1, "one snapshot, no staging leftovers: {snapshots:?}");
    let blobs = std::fs::read_dir(repo.join("blobs")).expect("blobs").flatten().count();
    assert_eq!(blobs, 3 + 3, "config, tokenizer, index and 3 shards, no partial blobs");
    // A ref that is already right is not rewritten (readers of a shared cache never see it change).
    let stamp = || {
        let m = std::fs::metadata(repo.join("refs/main")).expect("ref");
        (m.ino(), m.modified().expect("mtime"))
    };
    let before = stamp();
    std::thread::sleep(Duration::from_millis(20));
    assert_exit!(sb.cmd(&args), 0);
    assert_eq!(stamp(), before, "refs/main was rewritten");
    // What a writer killed mid-way leaves (a staging snapshot, a partial blob), untouched for hours, is removed by
    // the next writer; a recent one (a live writer where the lock is not honoured) is left alone.
    let old = std::time::SystemTime::now() - Duration::from_secs(7 * 3600);
    let age = |p: &Path| std::fs::File::open(p).and_then(|f| f.set_modified(old)).expect("set mtime");
    std::fs::create_dir_all(repo.join("snapshots/.0123abcd.killed/x")).expect("staging");
    std::fs::create_dir_all(repo.join("snapshots/.4567cdef.live")).expect("staging");
    age(&repo.join("snapshots/.0123abcd.killed"));
    std::fs::write(repo.join("blobs/.model.safetensors.killed.partial"), "x").expect("partial");
    age(&repo.join("blobs/.model.safetensors.killed.partial"));
    // A writer of this host that was killed a moment ago (SIGKILL, a second Ctrl-C): its marks name a process
    // that is gone, so its leftovers go at once, however recent (gigabytes at the real shapes).
    let host: String = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' })
        .collect();
    let gone = 2_000_000_000u32; // above any pid_max
    std::fs::create_dir_all(repo.join(format!("snapshots/.89abcdef.{host}-{gone}.AbC123/x"))).expect("staging");
    std::fs::write(repo.join(format!("blobs/.model.safetensors.{host}-{gone}.XyZ789.partial")), "x").expect("partial");
    let mut seed = args.to_vec();
    seed.extend(["--seed", "9"]);
    assert_exit!(sb.cmd(&seed), 0);
    let snapshots: Vec<String> = std::fs::read_dir(repo.join("snapshots"))
        .expect("snapshots")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert_eq!(snapshots, [".4567cdef.live"], "the dead writer's staging removed, the recent one kept");
    let partial = std::fs::read_dir(repo.join("blobs")).expect("blobs").flatten();
    assert!(!partial.into_iter().any(|e| e.file_name().to_string_lossy().ends_with(".partial")), "no partial blobs");
}

/// A one-model LLaDA grid with its own long prompts.
fn llada_config(preset: &str, grid: &str) -> String {
    format!(
        r#"
[run]
name = "big"
dtype = "f32"
warmup = 0
repetitions = 1000

[prompts]
source = "file"
path = "long.txt"
count = 2

[grid]
{grid}

[[models]]
kind = "llada"
id = "t/llada-{preset}"
synthetic = {{ preset = "{preset}" }}
"#
    )
}

fn long_prompts(sb: &Sandbox) {
    let words: Vec<String> = (0..6000).map(|i| format!("word{}", i % 97)).collect();
    let text = words.join(" ");
    sb.write("long.txt", &format!("{text}\n\n{text}\n"));
}

#[test]
fn sigterm_interrupts_a_long_repetition_and_the_journal_stays_consistent() {
    let sb = Sandbox::new();
    long_prompts(&sb);
    // One repetition is 512 full passes over 512 x 96 tokens: minutes on a CPU.
    let cfg = sb.write(
        "long.toml",
        &llada_config("tiny", "seq_lengths = [96]\nbatch_sizes = [512]\nsteps = [512]\noutput_tokens = 32"),
    );
    let dir = sb.path().join("long.run");
    let child = spawn(&sb, &["run", "-c", cfg.to_str().expect("utf8"), "--run-dir", dir.to_str().expect("utf8")]);
    wait_for("the journal", || dir.join("journal.jsonl").is_file());
    std::thread::sleep(Duration::from_millis(1500));
    let signalled = Instant::now();
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill");
    let out = child.wait_with_output().expect("wait");
    let took = signalled.elapsed();
    assert_exit!(out, 75);
    // About 1.5 s on an idle machine (a step ends first), 10 s seen on a loaded one; the repetition takes minutes.
    assert!(took < Duration::from_secs(30), "SIGTERM took {took:?} to stop the run: it waited for the repetition");
    let (_, state, _) = runner::journal::read(&dir.join("journal.jsonl")).expect("the journal reads");
    assert!(state.cells.is_empty(), "the interrupted cell is not recorded: {} cells", state.cells.len());
    let partial = std::fs::read_to_string(dir.join("partial.json")).expect("partial bundle");
    schema::read_bundle(&partial).expect("a valid partial bundle");
}

#[test]
fn lengths_past_the_model_s_positions_are_refused_before_anything_is_measured() {
    let sb = Sandbox::new();
    long_prompts(&sb);
    // The tiny LLaDA has 1024 positions: N = 1100 could only fail, cell after cell, with exit 1.
    let cfg = sb.write(
        "long-n.toml",
        &llada_config("tiny", "seq_lengths = [64, 1100]\nbatch_sizes = [1]\nsteps = [4]\noutput_tokens = 32"),
    );
    let start = Instant::now();
    let out = sb.cmd(&["run", "-c", cfg.to_str().expect("utf8"), "-o", "out"]);
    assert_exit!(out, 2);
    let err = stderr(&out);
    assert!(
        err.contains("model t/llada-tiny: N = 1100 (prompt + output tokens) is more than its 1024 positions"),
        "{err}"
    );
    assert!(err.contains("config.json") && err.contains("fix: leave those lengths out of grid.seq_lengths"), "{err}");
    assert!(start.elapsed() < Duration::from_secs(30), "it measured before refusing");
    let written: Vec<_> = std::fs::read_dir(sb.path().join("out")).map(|d| d.flatten().collect()).unwrap_or_default();
    assert!(written.is_empty(), "nothing written: {written:?}");
}

#[test]
fn a_cell_that_cannot_fit_in_host_memory_is_oom_not_an_abort() {
    let sb = Sandbox::new();
    long_prompts(&sb);
    // B = 4096 at N = 2048: the attention scores alone are 4096 x 8 heads x 2048^2 x 4 bytes = 550 GB.
    let cfg = sb.write(
        "big.toml",
        &llada_config("small", "seq_lengths = [2048]\nbatch_sizes = [1, 4096]\nsteps = [1]\noutput_tokens = 32")
            .replace("repetitions = 1000", "repetitions = 1"),
    );
    let out = sb.cmd(&["run", "-c", cfg.to_str().expect("utf8"), "-o", "out", "-q"]);
    assert_exit!(out, 1);
    let path = sb.path().join(crate::util::stdout(&out).trim());
    let b = schema::read_bundle(&std::fs::read_to_string(&path).expect("bundle")).expect("valid bundle");
    let status = |batch: u32| &b.cells.iter().find(|c| c.key.batch_size == batch).expect("cell").status;
    assert_eq!(*status(1), schema::CellStatus::Ok);
    match status(4096) {
        schema::CellStatus::Oom { message } => {
            assert!(message.contains("checked before allocating") && message.contains("B=4096"), "{message}")
        }
        other => panic!("B = 4096 should be oom: {other:?}"),
    }
}

#[test]
fn bundles_passed_around_by_hand_are_read_or_refused_with_the_file_and_a_fix() {
    let sb = Sandbox::new();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../schema/tests/fixtures/v1.2/demo-quality.json");
    let text = std::fs::read_to_string(fixture).expect("fixture");
    // Saved by an editor that writes a byte-order mark: read like any other.
    sb.write("bom.json", &format!("\u{feff}{text}"));
    assert_exit!(sb.cmd(&["validate", "bom.json"]), 0);
    assert_exit!(sb.cmd(&["report", "bom.json"]), 0);
    // Read from a pipe, as `-c <(...)` passes it.
    let piped = Command::new(env!("CARGO_BIN_EXE_dllm-bench"))
        .args(["validate", "/dev/stdin"])
        .stdin(std::fs::File::open(sb.path().join("bom.json")).expect("open"))
        .output()
        .expect("run");
    assert_exit!(piped, 0);
    std::fs::create_dir(sb.path().join("dir.json")).expect("mkdir");
    refused(&sb, &["validate", "dir.json"], &["dir.json", "is a folder"]);
    // Absurd values on the command line are bounded too.
    let out = sb.cmd(&["report", "bom.json", "--resamples", "4000000000"]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("--resamples"), "{}", stderr(&out));
    refused(&sb, &["synth", "--kind", "llama", "--repo-id", "../../x"], &["--repo-id", "ORG/NAME"]);
    refused(&sb, &["synth", "--kind", "llama", "--repo-id", "a/x", "--shards", "4000000000"], &["--shards"]);
    refused(&sb, &["synth", "--kind", "llada", "--repo-id", "a/x", "--layout", "qwen2"], &["--layout", "--kind llada"]);
    // The fix is the one for what was asked: the shards' range, not another layout.
    let out = sb.cmd(&["synth", "--kind", "llada", "--repo-id", "a/x", "--shards", "0"]);
    assert_exit!(out, 2);
    assert!(
        stderr(&out).contains("0 shards for the") && stderr(&out).contains("model; fix: use 1 to "),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("layout with"), "{}", stderr(&out));
}

#[test]
fn synthetic_weights_never_replace_a_real_checkpoint_in_the_cache() {
    // A real download stands in as a snapshot whose config.json lacks the synthetic marker: neither `synth` nor a
    // run whose config asks for synthetic weights under that id may point refs/main elsewhere.
    let sb = Sandbox::new();
    let id = "dllm-bench/synthetic-llada-tiny";
    assert_exit!(sb.cmd(&["synth", "--kind", "llada", "--repo-id", id]), 0);
    let repo = sb.cache().join("models--dllm-bench--synthetic-llada-tiny");
    let commit = std::fs::read_to_string(repo.join("refs/main")).expect("refs/main");
    let config = repo.join("snapshots").join(commit.trim()).join("config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config).expect("config")).expect("json");
    cfg.as_object_mut().expect("object").remove("dllm_bench_synthetic");
    std::fs::remove_file(&config).expect("unlink");
    std::fs::write(&config, cfg.to_string()).expect("a real config");
    refused(
        &sb,
        &["synth", "--kind", "llada", "--repo-id", id, "--seed", "7"],
        &[id, "real checkpoint", commit.trim()],
    );
    // The demo's config gives this id a [models.synthetic] table.
    refused(&sb, &["run", "-o", "out"], &[id, "real checkpoint"]);
    assert_eq!(std::fs::read_to_string(repo.join("refs/main")).expect("refs/main"), commit, "refs/main untouched");
    assert!(!sb.path().join("out").exists() || std::fs::read_dir(sb.path().join("out")).expect("out").next().is_none());
}

#[test]
fn a_resume_with_another_snapshot_or_device_model_is_refused() {
    let sb = Sandbox::new();
    // The evaluator: a checkpoint the config names without a synthetic table, as a download would be.
    let synth =
        |seed: &str| assert_exit!(sb.cmd(&["synth", "--kind", "llama", "--repo-id", "t/eval", "--seed", seed]), 0);
    synth("3");
    let quality = "\n[quality]\nparity_metric = \"perplexity\"\nbootstrap_resamples = 10\n\n[[quality.evaluators]]\nid = \"t/eval\"\n";
    sb.write("q.toml", &format!("{CONFIG}{quality}"));
    let run = ["run", "-c", "q.toml", "--run-dir", "rd"];
    assert_exit!(sb.cmd(&run), 0);
    // The evaluator's ref moved to other weights: the cells were scored with the first ones, and a resume would
    // score the rest with these under the first commit's name.
    synth("4");
    refused(&sb, &run, &["t/eval", "changed since the run started"]);
    synth("3");
    assert_exit!(sb.cmd(&run), 0);
    // A requeue onto another device model with cells left to measure: the journal says its cells ran elsewhere.
    let journal = sb.path().join("rd/journal.jsonl");
    let text = std::fs::read_to_string(&journal).expect("journal");
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let exec = lines.iter().position(|l| l.starts_with("{\"execution\"")).expect("an execution record");
    let mut e: serde_json::Value = serde_json::from_str(&lines[exec]).expect("json");
    e["execution"]["device"]["name"] = "Another CPU 9000".into();
    lines[exec] = e.to_string();
    let last_cell = lines.iter().rposition(|l| l.starts_with("{\"cell\"")).expect("a cell record");
    lines.remove(last_cell);
    std::fs::write(&journal, lines.join("\n") + "\n").expect("journal");
    refused(&sb, &run, &["Another CPU 9000", "two devices' timings"]);
    // One model whichever way a driver prints its name; a name nvidia-smi could not give is compared with none.
    use runner::execution::device_model;
    let gpu = |name: Option<&str>| schema::DeviceInfo {
        kind: "cuda".into(),
        name: name.map(str::to_string),
        ..schema::DeviceInfo::default()
    };
    assert_eq!(device_model(&gpu(Some("NVIDIA A100-SXM4-80GB"))).as_deref(), Some("cuda A100-SXM4-80GB"));
    assert_eq!(device_model(&gpu(Some("A100-SXM4-80GB"))), device_model(&gpu(Some("NVIDIA A100-SXM4-80GB"))));
    assert_eq!(device_model(&gpu(None)), None);
}

#[test]
fn a_new_run_never_replaces_a_bundle_already_in_its_output_folder() {
    // Bundles under the names this run could take (NAME-STAMP.json, the stamp its start's second): a run of the
    // same second that finished, or a file of the user's.
    let sb = Sandbox::new();
    sb.write("t.toml", CONFIG);
    std::fs::create_dir(sb.path().join("out")).expect("out");
    let now = std::time::SystemTime::now();
    let mut precious = Vec::new();
    for s in 0..20 {
        let at = humantime::format_rfc3339_seconds(now + Duration::from_secs(s)).to_string();
        let stamp: String = at.chars().filter(|c| !matches!(c, '-' | ':')).collect();
        let path = sb.path().join(format!("out/t-{stamp}.json"));
        std::fs::write(&path, "precious").expect("write");
        precious.push(path);
    }
    assert_exit!(sb.cmd(&["run", "-c", "t.toml", "-o", "out", "-q"]), 0);
    for p in &precious {
        assert_eq!(std::fs::read_to_string(p).expect("still there"), "precious", "{}", p.display());
    }
    let files = std::fs::read_dir(sb.path().join("out")).expect("out").count();
    assert_eq!(files, precious.len() + 1, "the run's bundle beside them");
}

#[test]
fn merge_refuses_a_newer_minor_bundle_whose_fields_it_would_drop() {
    let sb = Sandbox::new();
    let text = std::fs::read_to_string(format!(
        "{}/../schema/tests/fixtures/v1.5/demo-series.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("fixture");
    let newer = text.replacen("\"schema_version\": \"1.5\"", "\"schema_version\": \"1.99\"", 1);
    assert_ne!(newer, text);
    std::fs::write(sb.path().join("newer.json"), newer).expect("write");
    // It reads (a newer minor is additive), but merging would write it as 1.5 without what it added.
    assert_exit!(sb.cmd(&["validate", "newer.json"]), 0);
    refused(&sb, &["merge", "-o", "merged.json", "newer.json"], &["newer.json", "1.99", "newer than"]);
    assert!(!sb.path().join("merged.json").exists());
}

#[test]
fn report_refuses_a_metric_or_evaluator_the_bundle_has_no_value_of() {
    let sb = Sandbox::new();
    let bundle = format!("{}/../schema/tests/fixtures/v1.5/demo-series.json", env!("CARGO_MANIFEST_DIR"));
    refused(&sb, &["report", &bundle, "--metric", "bleu"], &["--metric bleu", "rouge_l_f1", "perplexity"]);
    refused(
        &sb,
        &["report", &bundle, "--metric", "perplexity", "--evaluator", "org/none"],
        &["--evaluator org/none", "dllm-bench/synthetic-evaluator-tiny", "dllm-bench/synthetic-llama-tiny"],
    );
    // What the bundle has is reported.
    let out = sb.cmd(&["report", &bundle, "--metric", "perplexity", "--evaluator", "dllm-bench/synthetic-llama-tiny"]);
    assert_exit!(out, 0);
    assert!(stdout(&out).contains("S_parity"), "{}", stdout(&out));
}

#[test]
fn outputs_through_a_file_or_onto_a_folder_are_refused_naming_the_path() {
    let sb = Sandbox::new();
    std::fs::write(sb.path().join("afile"), "a user's file").expect("write");
    std::fs::create_dir(sb.path().join("adir")).expect("mkdir");
    let bundle = format!("{}/../schema/tests/fixtures/v1.5/demo-series.json", env!("CARGO_MANIFEST_DIR"));
    refused(&sb, &["run", "-o", "afile"], &["--output-dir afile: afile is a file, not a folder"]);
    refused(&sb, &["run", "-o", "afile/sub"], &["--output-dir afile/sub: afile is a file, not a folder"]);
    refused(&sb, &["run", "--run-dir", "afile"], &["--run-dir afile: afile is a file, not a folder"]);
    // An output folder the run would not use: its --run-dir (or --resume folder) says where the bundle goes.
    let out = sb.cmd(&["run", "--run-dir", "adir/run", "-o", "elsewhere"]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("--output-dir") && stderr(&out).contains("--run-dir"), "{}", stderr(&out));
    let out = sb.cmd(&["run", "--resume", "adir", "-o", "elsewhere"]);
    assert_exit!(out, 2);
    refused(&sb, &["figures", &bundle, "-o", "afile"], &["-o afile: afile is a file, not a folder"]);
    refused(&sb, &["report", &bundle, "-o", "afile/r.md"], &["afile is a file, not a folder"]);
    refused(&sb, &["report", &bundle, "-o", "adir"], &["adir is a folder"]);
    refused(&sb, &["merge", &bundle, "-o", "adir"], &["adir is a folder"]);
    assert_eq!(std::fs::read_to_string(sb.path().join("afile")).expect("read"), "a user's file");
    assert!(std::fs::read_dir(sb.path().join("adir")).expect("adir").next().is_none(), "nothing written in adir");
    // A folder where one of the figures' files goes (the last written): refused before any is written, with a fix
    // that fits a name the user did not choose.
    for name in ["captions.md", "latency_vs_steps_N48_B1.svg"] {
        let figs = sb.path().join(format!("figs-{name}"));
        std::fs::create_dir_all(figs.join(name)).expect("mkdir");
        let figs = figs.to_str().expect("utf8");
        refused(&sb, &["figures", &bundle, "-o", figs, "--format", "svg"], &[name, "is a folder", "remove or rename"]);
        let left: Vec<_> = std::fs::read_dir(figs).expect("figs").flatten().map(|e| e.file_name()).collect();
        assert_eq!(left, [std::ffi::OsString::from(name)], "nothing written beside the folder");
    }
}

#[test]
fn a_broken_checkpoint_is_refused_before_the_first_cell_and_by_fetch() {
    // Llama first, then a LLaDA checkpoint broken in one way at a time: the run refuses it before measuring any
    // cell (no folder, no bundle), naming the file; `fetch --local-files-only` reports it.
    let sb = Sandbox::new();
    assert_exit!(sb.cmd(&["synth", "--kind", "llama", "--repo-id", "org/l"]), 0);
    let config = sb.write(
        "c.toml",
        "[run]\nname = \"c\"\ndtype = \"f32\"\nwarmup = 0\nrepetitions = 1\n\n[prompts]\nsource = \"embedded\"\n\
         count = 2\n\n[grid]\nseq_lengths = [48]\nbatch_sizes = [1]\nsteps = [4]\noutput_tokens = 16\n\n\
         [[models]]\nkind = \"llama\"\nid = \"org/l\"\n\n[[models]]\nkind = \"llada\"\nid = \"org/c\"\n",
    );
    let config = config.to_str().expect("utf8");
    type Break = fn(&std::path::Path);
    let cases: [(&str, Break, &str); 3] = [
        (
            "truncated",
            |snap| {
                let w = snap.join("model.safetensors");
                let bytes = std::fs::read(&w).expect("weights");
                std::fs::remove_file(&w).expect("unlink");
                std::fs::write(&w, &bytes[..bytes.len() / 2]).expect("half");
            },
            "truncated",
        ),
        (
            "empty",
            |snap| {
                let w = snap.join("model.safetensors");
                std::fs::remove_file(&w).expect("unlink");
                std::fs::write(&w, b"").expect("empty");
            },
            "0 bytes",
        ),
        (
            "fewer layers",
            |snap| {
                let c = snap.join("config.json");
                let mut cfg: serde_json::Value =
                    serde_json::from_str(&std::fs::read_to_string(&c).expect("config")).expect("json");
                cfg["n_layers"] = serde_json::json!(1);
                std::fs::remove_file(&c).expect("unlink");
                std::fs::write(&c, cfg.to_string()).expect("config");
            },
            "holds layer 1 but",
        ),
    ];
    for (what, break_it, want) in cases {
        let _ = std::fs::remove_dir_all(sb.cache().join("models--org--c"));
        assert_exit!(sb.cmd(&["synth", "--kind", "llada", "--repo-id", "org/c"]), 0);
        let repo = sb.cache().join("models--org--c");
        let commit = std::fs::read_to_string(repo.join("refs/main")).expect("ref");
        break_it(&repo.join("snapshots").join(commit.trim()));
        let out_dir = format!("out-{}", what.replace(' ', "-"));
        let out = sb.cmd(&["run", "--config", config, "-o", &out_dir]);
        assert_exit!(out, 2);
        let err = stderr(&out);
        assert!(err.contains("model org/c") && err.contains(want) && err.contains("fix"), "{what}: {err}");
        assert!(!sb.path().join(&out_dir).exists(), "{what}: nothing was created");
        let fetch = sb.cmd(&["fetch", "--config", config, "--local-files-only"]);
        assert_exit!(fetch, 1);
        assert!(stdout(&fetch).contains("broken   org/c") && stdout(&fetch).contains(want), "{}", stdout(&fetch));
    }
}

#[test]
fn an_empty_ref_is_named_as_such() {
    let sb = Sandbox::new();
    assert_exit!(sb.cmd(&["synth", "--kind", "llama", "--repo-id", "org/l"]), 0);
    let refs = sb.cache().join("models--org--l/refs/main");
    std::fs::write(&refs, "\n").expect("empty the ref");
    let out = sb.cmd(&[
        "fetch",
        "--local-files-only",
        "--config",
        &sb.write("l.toml", &{
            "[run]\nname = \"l\"\ndtype = \"f32\"\nwarmup = 0\nrepetitions = 1\n\n[prompts]\nsource = \"embedded\"\n\
         count = 2\n\n[grid]\nseq_lengths = [48]\nbatch_sizes = [1]\noutput_tokens = 16\n\n[[models]]\n\
         kind = \"llama\"\nid = \"org/l\"\n"
                .to_string()
        })
        .display()
        .to_string(),
    ]);
    assert_exit!(out, 1);
    let run = sb.cmd(&["run", "--config", "l.toml", "-o", "out"]);
    assert_exit!(run, 2);
    assert!(stderr(&run).contains("refs/main") && stderr(&run).contains("not a commit hash"), "{}", stderr(&run));
}

#[test]
fn the_last_bad_inputs_are_refused_with_the_file_the_field_and_a_fix() {
    let sb = Sandbox::new();
    let fixture = format!("{}/../schema/tests/fixtures/v1.5/demo-series.json", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&fixture).expect("fixture");
    // A creation time that is not RFC 3339: validate, report and merge refuse it.
    let created = text.find("\"created_at\": \"").expect("created_at") + "\"created_at\": \"".len();
    let end = created + text[created..].find('"').expect("end");
    let bad_time = format!("{}yesterday{}", &text[..created], &text[end..]);
    sb.write("time.json", &bad_time);
    for cmd in [&["validate", "time.json"][..], &["report", "time.json"], &["merge", "time.json", "-o", "m.json"]] {
        refused(&sb, cmd, &["time.json", "provenance.created_at", "\"yesterday\"", "RFC 3339"]);
    }
    assert!(!sb.path().join("m.json").exists());
    // A cell status as a bare string: the field and the shape it needs, no internal type name.
    let status = text.find("\"status\": {").expect("a status object");
    let close = status + text[status..].find('}').expect("end of status") + 1;
    sb.write("status.json", &format!("{}\"status\": \"ok\"{}", &text[..status], &text[close..]));
    let out = sb.cmd(&["validate", "status.json"]);
    assert_exit!(out, 2);
    let err = stderr(&out);
    assert!(err.contains("cells[0].status") && err.contains("\"state\"") && !err.contains("Repr"), "{err}");
    // `[models]` for `[[models]]`: blamed on its own line.
    let config = CONFIG.replacen("[[models]]", "[models]", 1);
    let line = config.lines().position(|l| l == "[models]").expect("the slip") + 1;
    sb.write("models.toml", &config);
    let at = format!("line {line}: `[models]`");
    refused(&sb, &["plan", "-c", "models.toml"], &[at.as_str(), "[[models]]"]);
    // A model cache that is a file: said once, with the fix.
    sb.write("config.toml", CONFIG);
    sb.write("cache-file", "not a folder");
    let out = sb.cmd(&["run", "-c", "config.toml", "-o", "out", "-q", "--model-cache-dir", "cache-file"]);
    assert_exit!(out, 2);
    let err = stderr(&out);
    assert!(err.contains("cache-file is a file") && err.contains("--model-cache-dir"), "{err}");
    assert_eq!(err.matches("cache-file").count(), 2, "one message: {err}");
}

#[test]
fn merge_never_replaces_one_of_its_inputs_and_an_unwritable_output_is_bad_input() {
    let sb = Sandbox::new();
    let fixture = format!("{}/../schema/tests/fixtures/v1.5/demo-series.json", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&fixture).expect("fixture");
    sb.write("a.json", &text);
    std::fs::create_dir(sb.path().join("sub")).expect("mkdir");
    for output in ["a.json", "./a.json", "sub/../a.json"] {
        refused(&sb, &["merge", "a.json", "-o", output], &[output, "a.json", "one of the inputs"]);
        assert_eq!(std::fs::read_to_string(sb.path().join("a.json")).expect("a.json"), text, "a.json is unchanged");
    }
    // By another name: a hard link.
    std::fs::hard_link(sb.path().join("a.json"), sb.path().join("link.json")).expect("link");
    refused(&sb, &["merge", "a.json", "-o", "link.json"], &["link.json", "one of the inputs"]);
    // An existing output that is not an input is replaced.
    sb.write("old.json", "an old merge");
    assert_exit!(sb.cmd(&["merge", "a.json", "-o", "old.json"]), 0);
    schema::read_bundle(&std::fs::read_to_string(sb.path().join("old.json")).expect("old.json")).expect("replaced");
    // A folder the user may not write: exit 2, like a path through a file. Root writes a 0500 folder; /sys then.
    let locked = sb.path().join("locked");
    std::fs::create_dir(&locked).expect("mkdir");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o500)).expect("chmod");
    let denied = |dir: &Path| {
        std::fs::write(dir.join("dllm-bench-probe"), "x")
            .is_err_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied)
    };
    let unwritable = [locked.clone(), Path::new("/sys").to_path_buf()].into_iter().find(|d| denied(d));
    match unwritable {
        Some(dir) => {
            let out = dir.join("m.json").display().to_string();
            refused(&sb, &["merge", "a.json", "-o", &out], &[out.as_str(), "a folder you can write"]);
            let nested = dir.join("sub/m.json").display().to_string();
            refused(&sb, &["merge", "a.json", "-o", &nested], &["sub", "a folder you can write"]);
        }
        None => eprintln!("no folder this user cannot write: the unwritable-output case is not tested"),
    }
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).expect("chmod back");
}

#[test]
fn an_output_folder_or_model_cache_that_cannot_be_written_is_bad_input_with_the_fix() {
    let sb = Sandbox::new();
    sb.write("t.toml", CONFIG);
    sb.write("afile", "a user's file");
    // A cache that is a file, or lies under one (what root cannot write either).
    for cache in ["afile", "afile/hub"] {
        let synth = ["synth", "--kind", "llama", "--repo-id", "t/x", "--model-cache-dir", cache];
        refused(&sb, &synth, &["the model cache", "afile is a file", "--model-cache-dir"]);
    }
    // A synthetic checkpoint of a tiny preset is written without a progress word.
    let out = sb.cmd(&["synth", "--kind", "llada", "--repo-id", "t/tiny"]);
    assert_exit!(out, 0);
    assert_eq!(stderr(&out), "", "nothing said for a tiny checkpoint");
    // A folder the user may not write. Root writes a 0500 folder; /sys then.
    use std::os::unix::fs::PermissionsExt;
    let locked = sb.path().join("locked");
    std::fs::create_dir(&locked).expect("mkdir");
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o500)).expect("chmod");
    let denied = |dir: &Path| {
        std::fs::create_dir(dir.join("dllm-bench-probe"))
            .is_err_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied)
    };
    let unwritable = [locked.clone(), Path::new("/sys").to_path_buf()].into_iter().find(|d| denied(d));
    match unwritable {
        Some(dir) => {
            let d = dir.to_str().expect("utf8");
            let out = sb.cmd(&["run", "-c", "t.toml", "-o", d, "-q"]);
            assert_exit!(out, 2);
            let err = stderr(&out);
            assert!(err.contains(&format!("cannot create the run folder {d}/t-")), "{err}");
            assert!(err.contains("fix: choose an output folder you can write with -o"), "{err}");
            let cache = dir.join("hub");
            let c = cache.to_str().expect("utf8");
            for args in [
                &["synth", "--kind", "llada", "--repo-id", "t/y", "--model-cache-dir", c][..],
                &["run", "-c", "t.toml", "-o", "out", "-q", "--model-cache-dir", c],
            ] {
                let out = sb.cmd(args);
                assert_exit!(out, 2);
                let err = stderr(&out);
                assert!(err.contains(&format!("into the model cache {c}")), "{args:?}: {err}");
                assert!(err.contains("fix: pass --model-cache-dir a folder you can write"), "{err}");
                assert_eq!(err.matches("(os error").count(), 1, "the cause once: {err}");
            }
            assert!(!sb.path().join("out").exists(), "nothing run");
        }
        None => eprintln!("no folder this user cannot write: the unwritable-folder cases are not tested"),
    }
    // A cache where no folder can be made (under /proc, even for root): bad input with the fix as well.
    if Path::new("/proc/self").exists() {
        let out =
            sb.cmd(&["synth", "--kind", "llama", "--repo-id", "t/z", "--model-cache-dir", "/proc/dllm-bench-hub"]);
        assert_exit!(out, 2);
        assert!(stderr(&out).contains("fix: pass --model-cache-dir a folder you can write"), "{}", stderr(&out));
    }
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).expect("chmod back");
}

#[test]
fn a_damaged_synthetic_snapshot_named_without_its_table_is_told_the_synth_command_that_writes_it_again() {
    // A synthetic checkpoint written once with `synth`, then named by a config without a [models.synthetic]
    // table (a grid pointed at it by hand): its weights cut short cannot be downloaded again.
    let sb = Sandbox::new();
    let repo = "test-org/hand-synth";
    let out = sb.cmd(&["synth", "--kind", "llama", "--repo-id", repo, "--preset", "tiny", "--seed", "4"]);
    assert_exit!(out, 0);
    let config = sb.write(
        "plain.toml",
        &format!(
            "[run]\nname = \"plain\"\ndevice = \"cpu\"\ndtype = \"f32\"\nwarmup = 0\nrepetitions = 1\n\n\
             [prompts]\nsource = \"embedded\"\ncount = 1\n\n[grid]\nseq_lengths = [40]\nbatch_sizes = [1]\n\
             output_tokens = 8\n\n[[models]]\nkind = \"llama\"\nid = \"{repo}\"\n"
        ),
    );
    let run = ["run", "-q", "--config", config.to_str().expect("utf8"), "--output-dir", "out"];
    let weights = sb.cache().join("models--test-org--hand-synth/snapshots");
    let snapshot = std::fs::read_dir(&weights).expect("snapshots").next().expect("one").expect("entry").path();
    let blob = std::fs::canonicalize(snapshot.join("model.safetensors")).expect("weights");
    let bytes = std::fs::read(&blob).expect("read");
    std::fs::write(&blob, &bytes[..bytes.len() / 2]).expect("cut short");
    let out = sb.cmd(&run);
    assert_exit!(out, 2);
    let err = stderr(&out);
    assert!(
        err.contains("truncated") && err.contains("synthetic checkpoint") && !err.contains("download the"),
        "{err}"
    );
    assert!(err.contains(&format!("delete {}", snapshot.display())), "{err}");
    // The command it names writes the same checkpoint again: the run then goes through.
    let cmd = err.split('`').find(|s| s.starts_with("dllm-bench synth")).expect("a command in backticks");
    assert_eq!(
        cmd,
        format!(
            "dllm-bench synth --kind llama --repo-id {repo} --preset tiny --seed 4 --dtype f32 --shards 1 \
             --model-cache-dir {}",
            sb.cache().display()
        )
    );
    std::fs::remove_dir_all(&snapshot).expect("delete the snapshot as the fix says");
    let args: Vec<&str> = cmd.split(' ').skip(1).collect();
    assert_exit!(sb.cmd(&args), 0);
    assert_eq!(std::fs::read(&blob).expect("written again"), bytes, "the same weights (its seed)");
    assert_exit!(sb.cmd(&run), 0);
}
