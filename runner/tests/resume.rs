//! Runs that never lose work: the journal survives SIGKILL at random moments, SIGTERM writes a valid partial
//! bundle and exits 75, a resume with a changed config is refused, a failing cell is recorded while the rest
//! complete, and shards merge into the single run's cells (merge refusing what does not belong together).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use schema::{Bundle, CellKey, CellStatus};

use crate::assert_exit;
use crate::util::{Sandbox, poison, spawn, stderr, stdout};

/// 12 cells (4 AR, 8 LLaDA) of the demo models; about 5 s in a debug build.
const GRID: &[&str] = &["--seq-len", "40,48", "--batch-size", "1,2", "--steps", "4,8", "--repetitions", "6", "-q"];

fn read_bundle(path: &Path) -> Bundle {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    schema::read_bundle(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The journal's finished cells, serialized, by key.
fn journal_cells(dir: &Path) -> BTreeMap<CellKey, String> {
    let (_, state, _) = runner::journal::read(&dir.join("journal.jsonl")).expect("journal reads");
    // Perplexity is scored after the cells (journal `quality` records): a cell as measured is the rest.
    let measured = |c: &schema::Cell| {
        let mut c = c.clone();
        c.quality.retain(|q| q.evaluator.is_none());
        serde_json::to_string(&c).expect("json")
    };
    state.cells.iter().map(|c| (c.key.clone(), measured(c))).collect()
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill").args([sig, &child.id().to_string()]).status().expect("kill").success();
    assert!(ok, "kill {sig}");
}

#[test]
fn sigkill_at_random_moments_loses_no_finished_cell() {
    let sb = Sandbox::new();
    let dir = sb.path().join("run");
    let dir_s = dir.to_str().expect("utf8");
    let seed = std::env::var("DLLM_KILL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    eprintln!("kill moments from seed {seed} (DLLM_KILL_SEED={seed} repeats them)");
    let mut rng = metrics::rng::SplitMix64::new(seed);
    // 27 cells of 12 repetitions: enough for 12 kills with work left between them (a few seconds of work).
    let args = [
        "run",
        "--run-dir",
        dir_s,
        "--seq-len",
        "48,64,96",
        "--batch-size",
        "1,2,4",
        "--steps",
        "4,8",
        "--repetitions",
        "12",
        "-q",
    ];
    let mut before: BTreeMap<CellKey, String> = BTreeMap::new();
    let mut kills = 0;
    for attempt in 0..20 {
        let mut child = spawn(&sb, &args);
        let wait = Duration::from_millis(100 + rng.next_u64() % 600);
        let start = Instant::now();
        let mut finished = None;
        while start.elapsed() < wait {
            if let Some(status) = child.try_wait().expect("try_wait") {
                finished = Some(status);
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if finished.is_none() {
            child.kill().expect("SIGKILL");
            kills += 1;
        }
        let _ = child.wait();
        if !runner::journal::Journal::exists(&dir) {
            continue;
        }
        let now = journal_cells(&dir);
        for (key, cell) in &before {
            assert_eq!(now.get(key), Some(cell), "attempt {attempt}: finished cell {key} lost or changed by a kill");
        }
        if dir.join("partial.json").exists() {
            let partial = read_bundle(&dir.join("partial.json"));
            assert!(partial.cells.len() <= now.len(), "the partial bundle never runs ahead of the journal");
        }
        let what = if finished.is_some() { "finished before" } else { "killed after" };
        eprintln!("attempt {attempt}: {what} {wait:?}: {} cells in the journal", now.len());
        before = now;
        if finished.is_some() || kills == 12 {
            break;
        }
    }
    assert!(kills >= 10, "only {kills} kills landed: the grid is too quick for this test");
    let out = sb.cmd(&["run", "--resume", dir_s, "-q"]);
    assert_exit!(out, 0);
    let b = read_bundle(&dir.join("bundle.json"));
    assert_eq!(b.cells.len(), 54, "complete");
    assert_eq!(b.provenance.planned_cells, Some(54));
    assert!(b.cells.iter().all(|c| c.status == CellStatus::Ok));
    let last = journal_cells(&dir);
    for (key, cell) in &before {
        assert_eq!(last.get(key), Some(cell), "cell {key} measured again on resume");
    }
    for c in &b.cells {
        let e = c.execution.expect("each cell names its execution") as usize;
        assert!(e < b.provenance.executions.len());
    }
    assert!(!dir.join("partial.json").exists(), "the partial bundle goes once the final one is written");
}

#[test]
fn sigterm_writes_a_partial_bundle_and_exits_75_then_resume_completes() {
    let sb = Sandbox::new();
    let results = sb.results();
    // Stopped once the first cell has finished (its partial bundle written).
    let (run_dir, out) = interrupted_run(&sb, "partial.json");
    let err = stderr(&out);
    assert!(err.contains("interrupted by SIGTERM") && err.contains("--resume"), "{err}");
    assert!(run_dir.extension().is_some_and(|e| e == "run"), "{run_dir:?}");
    let partial = read_bundle(&run_dir.join("partial.json"));
    assert!(!partial.cells.is_empty() && partial.cells.len() < 24, "{} cells", partial.cells.len());
    assert_eq!(partial.provenance.planned_cells, Some(24));

    // A resume with a different grid is refused, naming the field.
    let dir_s = run_dir.to_str().expect("utf8");
    let refused = sb.cmd(&["run", "--resume", dir_s, "--steps", "4,16"]);
    assert_exit!(refused, 2);
    let err = stderr(&refused);
    assert!(err.contains("config changed") && err.contains("[grid] steps = [4, 8]"), "{err}");
    assert!(err.contains("[grid] steps = [4, 16]"), "{err}");

    // The same command again starts a new run, and says where the unfinished one is.
    let mut again = vec!["run", "--output-dir", results.to_str().expect("utf8")];
    again.extend(GRID.iter().filter(|a| **a != "-q"));
    let out = sb.cmd(&again);
    assert_exit!(out, 0);
    let note = format!("note: {} holds a run of this config that has not finished", run_dir.display());
    assert!(stderr(&out).contains(&note) && stderr(&out).contains(&format!("--resume {dir_s}")), "{}", stderr(&out));

    let out = sb.cmd(&["run", "--resume", dir_s]);
    assert_exit!(out, 0);
    let path = PathBuf::from(stdout(&out).trim());
    assert_eq!(path.parent(), Some(results.as_path()), "the bundle goes beside the run folder");
    let b = read_bundle(&path);
    assert_eq!(b.cells.len(), 24);
    assert_eq!(b.provenance.executions.len(), 2, "first run and resume");
    assert_eq!(b.provenance.config_source, partial.provenance.config_source);
    for c in &partial.cells {
        let done = b.cells.iter().find(|x| x.key == c.key).expect("kept");
        assert_eq!(done, c, "a cell of the first attempt is kept as it was");
    }
    assert!(!run_dir.exists(), "the .run folder is removed once the bundle is written");
}

/// The demo config with its AR model replaced by `id`, a checkpoint this test wrote into the cache (no synthetic
/// table: read as it is), and no `[quality]` (its second evaluator is the AR model replaced), written as `file`.
fn demo_with_llama(sb: &Sandbox, id: &str, file: &str) -> PathBuf {
    let demo =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../config/demo.toml")).expect("demo");
    let cfg = demo.replacen(
        "id = \"dllm-bench/synthetic-llama-tiny\"\n\n[models.synthetic]\npreset = \"tiny\"\nseed = 1\n",
        &format!("id = \"{id}\"\n"),
        1,
    );
    assert!(cfg.contains(id), "config edit applied");
    let cfg = cfg.split("\n[quality]").next().expect("config").to_string();
    sb.write(file, &cfg)
}

#[test]
fn nan_weights_fail_their_cells_and_the_rest_complete() {
    let sb = Sandbox::new();
    let synth = sb.cmd(&["synth", "--kind", "llama", "--repo-id", "test/nan-llama", "--seed", "5"]);
    assert_exit!(synth, 0);
    let snapshot = PathBuf::from(stdout(&synth).trim());
    let weights = snapshot.join("model.safetensors");
    let sound = std::fs::read(&weights).expect("weights");
    poison(&weights, "model.norm.weight");
    // The llama entry becomes the poisoned checkpoint.
    let path = demo_with_llama(&sb, "test/nan-llama", "nan.toml");
    let run_dir = sb.path().join("nan-run");
    let dir = run_dir.to_str().expect("utf8");
    let out = sb.cmd(&[
        "run",
        "--config",
        path.to_str().expect("utf8"),
        "--run-dir",
        dir,
        "--seq-len",
        "40",
        "--batch-size",
        "1,2",
        "--steps",
        "4",
        "--samplers",
        "reference",
        "--repetitions",
        "1",
    ]);
    assert_exit!(out, 1);
    assert!(stderr(&out).contains("2 of 4 cells failed"), "{}", stderr(&out));
    let b = read_bundle(Path::new(stdout(&out).trim()));
    assert_eq!(b.cells.len(), 4);
    for c in &b.cells {
        match (&c.status, c.key.model.as_str()) {
            (CellStatus::Error { message }, "test/nan-llama") => {
                assert!(message.contains("non-finite values (NaN or inf)"), "{message}");
                assert!(c.repetitions.is_empty());
            }
            (CellStatus::Ok, "dllm-bench/synthetic-llada-tiny") => assert_eq!(c.repetitions.len(), 1),
            (status, model) => panic!("{model}: unexpected {status:?}"),
        }
    }

    // The checkpoint mended (a node's fault gone, say): --retry-oom leaves errors alone, --retry-failed measures
    // the failed cells again in a new execution and keeps the others as they were.
    std::fs::write(&weights, sound).expect("the sound weights");
    let out = sb.cmd(&["run", "--resume", dir, "--retry-oom"]);
    assert_exit!(out, 1);
    assert!(!stderr(&out).contains("measuring again"), "{}", stderr(&out));
    let out = sb.cmd(&["run", "--resume", dir, "--retry-failed"]);
    assert_exit!(out, 0);
    let said = "measuring again 2 recorded cells that failed (--retry-failed): test/nan-llama";
    assert!(stderr(&out).contains(said), "{}", stderr(&out));
    let again = read_bundle(Path::new(stdout(&out).trim()));
    assert_eq!(again.cells.len(), 4);
    assert_eq!(again.provenance.executions.len(), 2, "one more execution");
    for c in &again.cells {
        assert_eq!(c.status, CellStatus::Ok, "{}", c.key);
        assert_eq!(c.repetitions.len(), 1, "{}", c.key);
        let kept = b.cells.iter().find(|x| x.key == c.key).expect("the same cell before");
        match c.key.model.as_str() {
            "test/nan-llama" => assert_eq!(c.execution, Some(1), "{}: measured again", c.key),
            _ => assert_eq!(c, kept, "{}: kept as it was", c.key),
        }
    }
    // The journal holds both records of each retried cell; read back, the later one holds.
    let (_, state, _) = runner::journal::read(&run_dir.join("journal.jsonl")).expect("journal reads");
    assert_eq!(state.cells.len(), 4);
    assert!(state.cells.iter().all(|c| c.status == CellStatus::Ok));
}

fn run_to_bundle(sb: &Sandbox, extra: &[&str]) -> (std::process::Output, Bundle) {
    let mut args = vec!["run", "--run-dir"];
    let dir = sb.path().join(format!("run-{}", extra.join("_").replace('/', "of")));
    args.push(dir.to_str().expect("utf8"));
    args.extend_from_slice(&[
        "--seq-len",
        "40,48",
        "--batch-size",
        "1,2",
        "--steps",
        "4,8",
        "--repetitions",
        "1",
        "-q",
    ]);
    args.extend_from_slice(extra);
    let out = sb.cmd(&args);
    let b = read_bundle(&dir.join("bundle.json"));
    (out, b)
}

fn keys_and_statuses(b: &Bundle) -> Vec<(CellKey, String)> {
    b.cells.iter().map(|c| (c.key.clone(), format!("{:?}", c.status))).collect()
}

#[test]
fn shards_merge_into_the_single_runs_cells_and_mismatches_are_refused() {
    let sb = Sandbox::new();
    let (out, single) = run_to_bundle(&sb, &[]);
    assert_exit!(out, 0);
    let mut shard_paths = Vec::new();
    for i in 0..3 {
        let shard = format!("{i}/3");
        let (out, b) = run_to_bundle(&sb, &["--shard", &shard]);
        assert_exit!(out, 0);
        assert_eq!(b.provenance.shard.map(|s| s.to_string()), Some(shard.clone()));
        assert!(!b.cells.is_empty(), "12 cells over 3 shards: none is empty");
        shard_paths.push(sb.path().join(format!("run---shard_{i}of3/bundle.json")));
    }
    let paths: Vec<&str> = shard_paths.iter().map(|p| p.to_str().expect("utf8")).collect();
    let merged_path = sb.path().join("merged.json");
    let mut args = vec!["merge", "-o", merged_path.to_str().expect("utf8")];
    args.extend_from_slice(&paths);
    let out = sb.cmd(&args);
    assert_exit!(out, 0);
    let merged = read_bundle(&merged_path);
    assert_eq!(keys_and_statuses(&merged), keys_and_statuses(&single), "cell for cell, in grid order");
    // The models as the single run lists them, the evaluators whose values the cells hold included.
    let ids = |b: &Bundle| b.models.iter().map(|m| (m.id.clone(), m.commit.clone())).collect::<Vec<_>>();
    assert_eq!(ids(&merged), ids(&single));
    assert!(ids(&single).iter().any(|(id, _)| id.contains("evaluator")), "{:?}", ids(&single));
    // A shard stopped while its evaluators scored: all its cells, not all their values.
    let mut unscored = read_bundle(&shard_paths[0]);
    let cell = unscored.cells.iter_mut().find(|c| !c.generations.is_empty()).expect("a cell with continuations");
    cell.quality.retain(|q| q.metric != "perplexity");
    let unscored_path = sb.write("unscored.json", &schema::write_bundle(&unscored));
    let unscored_path = unscored_path.to_str().expect("utf8");
    let out = sb.cmd(&["merge", "-o", "x.json", unscored_path, paths[1], paths[2]]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("unscored.json: 1 cells") && stderr(&out).contains("perplexity"), "{}", stderr(&out));
    let out = sb.cmd(&["merge", "-o", "x.json", "--allow-missing", unscored_path, paths[1], paths[2]]);
    assert_exit!(out, 0);
    assert!(stderr(&out).contains("warning: continuations lack"), "said so: {}", stderr(&out));
    assert_eq!(merged.provenance.executions.len(), 3);
    assert_eq!(merged.provenance.config_sha256, single.provenance.config_sha256);
    assert!(merged.provenance.shard.is_none());

    // Missing shard.
    let out = sb.cmd(&["merge", "-o", "x.json", paths[0], paths[1]]);
    assert_exit!(out, 2);
    let err = stderr(&out);
    assert!(err.contains("cells are in no bundle") && err.contains("shards not given: 2/3"), "{err}");
    // A shard stopped while measuring: cells missing, and its continuations unscored (the evaluators score after
    // the cells). The missing cells are the cause named, with the partial shard to resume.
    let mut stopped = read_bundle(&shard_paths[2]);
    let unscored_cell = stopped.cells.iter().position(|c| !c.generations.is_empty()).expect("continuations");
    stopped.cells[unscored_cell].quality.retain(|q| q.metric != "perplexity");
    let last = stopped.cells.iter().rposition(|c| c.generations.is_empty()).expect("a cell without continuations");
    stopped.cells.remove(last);
    let stopped_path = sb.write("stopped.json", &schema::write_bundle(&stopped));
    let out = sb.cmd(&["merge", "-o", "x.json", paths[0], paths[1], stopped_path.to_str().expect("utf8")]);
    assert_exit!(out, 2);
    let err = stderr(&out);
    assert!(
        err.contains("1 of the grid's 24 cells are in no bundle") && err.contains("stopped.json is partial"),
        "{err}"
    );
    // Written anyway with --allow-missing: the missing cells are named, and recorded in the bundle for its readers.
    let out = sb.cmd(&["merge", "-o", "partial.json", "--allow-missing", paths[0], paths[1]]);
    assert_exit!(out, 0);
    let third = read_bundle(&shard_paths[2]);
    let partial = read_bundle(&sb.path().join("partial.json"));
    let missing: Vec<&CellKey> = third.cells.iter().map(|c| &c.key).collect();
    assert_eq!(partial.provenance.missing_cells.iter().collect::<Vec<_>>(), missing, "in grid order");
    assert!(stderr(&out).contains(&missing[0].to_string()), "the warning names them: {}", stderr(&out));
    let report = sb.cmd(&["report", sb.path().join("partial.json").to_str().expect("utf8")]);
    assert_exit!(report, 0);
    assert!(stdout(&report).contains("A partial bundle") && stdout(&report).contains(&missing[0].to_string()));
    // One shard's bundle named twice, and a copy of it under another name.
    let out = sb.cmd(&["merge", "-o", "x.json", paths[0], paths[1], paths[2], paths[1]]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("given twice"), "{}", stderr(&out));
    let copy = sb.path().join("copy.json");
    std::fs::copy(paths[1], &copy).expect("copy");
    let out = sb.cmd(&["merge", "-o", "x.json", paths[0], paths[1], paths[2], copy.to_str().expect("utf8")]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("in more than one bundle"), "{}", stderr(&out));
    // Another config.
    let (out, other) = run_to_bundle(&sb, &["--shard", "2/3", "--warmup", "0"]);
    assert_exit!(out, 0);
    assert_ne!(other.provenance.config_sha256, single.provenance.config_sha256);
    let other_path = sb.path().join("run---shard_2of3_--warmup_0/bundle.json");
    let out = sb.cmd(&["merge", "-o", "x.json", paths[0], paths[1], other_path.to_str().expect("utf8")]);
    assert_exit!(out, 2);
    let err = stderr(&out);
    assert!(err.contains("different configs") && err.contains("[run] warmup = 0"), "{err}");
    // Another GPU model in one shard: refused unless allowed.
    let mut odd = read_bundle(&shard_paths[2]);
    for e in &mut odd.provenance.executions {
        e.device.kind = "cuda".into();
        e.device.name = Some("NVIDIA RTX A6000".into());
    }
    let odd_path = sb.write("odd.json", &schema::write_bundle(&odd));
    let odd_s = odd_path.to_str().expect("utf8");
    let out = sb.cmd(&["merge", "-o", "x.json", paths[0], paths[1], odd_s]);
    assert_exit!(out, 2);
    let err = stderr(&out);
    assert!(err.contains("different device models") && err.contains("cuda RTX A6000"), "{err}");
    let out = sb.cmd(&["merge", "--allow-mixed-devices", "-o", "x.json", paths[0], paths[1], odd_s]);
    assert_exit!(out, 0);
    assert!(!sb.path().join("x.json.tmp").exists());
    // Another build of the runner in one shard: refused unless allowed.
    let other_commit = "0123456789abcdef0123456789abcdef01234567";
    let mut built = read_bundle(&shard_paths[2]);
    built.provenance.git_commit = Some(other_commit.into());
    built.provenance.git_dirty.clear();
    let built_path = sb.write("built.json", &schema::write_bundle(&built));
    let built_s = built_path.to_str().expect("utf8");
    let out = sb.cmd(&["merge", "-o", "x.json", paths[0], paths[1], built_s]);
    assert_exit!(out, 2);
    let err = stderr(&out);
    assert!(err.contains(&format!("by the build of {other_commit}")) && err.contains("--allow-mixed-builds"), "{err}");
    assert_exit!(sb.cmd(&["merge", "--allow-mixed-builds", "-o", "x.json", paths[0], paths[1], built_s]), 0);
    // A run folder another build started: its resume is refused unless allowed (when this binary knows its own
    // commit; a build outside git has none to compare).
    let dir = sb.path().join("run---shard_2of3");
    let journal = dir.join("journal.jsonl");
    let text = std::fs::read_to_string(&journal).expect("journal");
    let (first, rest) = text.split_once('\n').expect("a header line");
    let mut header: serde_json::Value = serde_json::from_str(first).expect("header json");
    let ours = header["header"].get("build").cloned();
    header["header"]["build"] = serde_json::json!({ "commit": other_commit });
    std::fs::write(&journal, format!("{header}\n{rest}")).expect("journal");
    let out = sb.cmd(&["run", "--resume", dir.to_str().expect("utf8"), "-q"]);
    match ours {
        Some(_) => {
            assert_exit!(out, 2);
            let err = stderr(&out);
            assert!(err.contains(&format!("started by the build of {other_commit}")), "{err}");
            assert!(err.contains("--allow-other-build"), "{err}");
        }
        None => assert_exit!(out, 0),
    }
    assert_exit!(sb.cmd(&["run", "--resume", dir.to_str().expect("utf8"), "-q", "--allow-other-build"]), 0);
}

#[test]
fn a_run_folder_holding_a_bundle_without_its_journal_is_refused_and_left_alone() {
    // A bundle.json that no journal of the folder accounts for (copied there, or its journal deleted) is not the
    // run's to replace.
    let sb = Sandbox::new();
    let dir = sb.path().join("rd");
    std::fs::create_dir(&dir).expect("mkdir");
    let theirs = "{\"not\": \"ours\"}";
    std::fs::write(dir.join("bundle.json"), theirs).expect("bundle");
    let out = sb.cmd(&["run", "--run-dir", dir.to_str().expect("utf8"), "--seq-len", "40", "--batch-size", "1", "-q"]);
    assert_exit!(out, 2);
    let err = stderr(&out);
    assert!(err.contains("bundle.json exists") && err.contains("no journal") && err.contains("fix"), "{err}");
    assert_eq!(std::fs::read_to_string(dir.join("bundle.json")).expect("bundle"), theirs, "left as it was");
    let names: Vec<_> = std::fs::read_dir(&dir).expect("dir").flatten().map(|e| e.file_name()).collect();
    assert_eq!(names, ["bundle.json"], "nothing added to the folder (no run.lock)");
}

/// A new run in `sb.results()` of [`GRID`], stopped by SIGTERM as soon as its run folder holds the file `file`
/// (exit 75): its run folder and its output.
fn interrupted_run(sb: &Sandbox, file: &str) -> (PathBuf, Output) {
    let results = sb.results();
    let mut args = vec!["run", "--output-dir", results.to_str().expect("utf8")];
    args.extend_from_slice(GRID);
    let child = spawn(sb, &args);
    let start = Instant::now();
    let run_dir = loop {
        assert!(start.elapsed() < Duration::from_secs(60), "no {file} in 60 s");
        let dirs: Vec<PathBuf> = std::fs::read_dir(&results)
            .map(|r| r.flatten().map(|e| e.path()).filter(|p| p.join(file).is_file()).collect())
            .unwrap_or_default();
        if let Some(d) = dirs.into_iter().next() {
            break d;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    signal(&child, "-TERM");
    let out = child.wait_with_output().expect("wait");
    assert_exit!(out, 75);
    (run_dir, out)
}

#[test]
fn a_resume_removes_only_what_the_run_wrote_in_its_folder() {
    let sb = Sandbox::new();
    let (run_dir, _) = interrupted_run(&sb, "journal.jsonl");
    // The run folder copied elsewhere by hand, with a file of the user's in it.
    let mine = sb.path().join("sub/myrun");
    std::fs::create_dir_all(&mine).expect("mkdir");
    for e in std::fs::read_dir(&run_dir).expect("run folder").flatten() {
        std::fs::copy(e.path(), mine.join(e.file_name())).expect("copy");
    }
    std::fs::write(mine.join("notes.txt"), "keep\n").expect("notes");
    let mine_s = mine.to_str().expect("utf8");
    let out = sb.cmd(&["run", "--resume", mine_s, "-q"]);
    assert_exit!(out, 0);
    let bundle = PathBuf::from(stdout(&out).trim());
    let name = run_dir.file_stem().and_then(|n| n.to_str()).expect("name");
    assert_eq!(bundle, sb.path().join(format!("sub/{name}.json")), "the bundle beside the copy");
    assert_eq!(read_bundle(&bundle).cells.len(), 24);
    assert_eq!(std::fs::read_to_string(mine.join("notes.txt")).expect("the user's file is kept"), "keep\n");
    let left: Vec<String> =
        std::fs::read_dir(&mine).expect("kept").flatten().map(|e| e.file_name().to_string_lossy().into()).collect();
    assert_eq!(left, ["notes.txt"], "the run's own files (journal, partial bundle, lock) are removed");
    let err = stderr(&out);
    assert!(err.contains(&format!("kept the run folder {mine_s}")) && err.contains("notes.txt"), "said: {err}");
    // The original folder, which holds only what the run wrote, goes whole; so do the temporary files a killed
    // attempt left in it (the old `.tmp-XXXXXX` form too) and beside its final bundle (named after that bundle).
    std::fs::write(run_dir.join(".partial.json.tmp-AbC123"), "half").expect("temporary");
    std::fs::write(run_dir.join(".tmp-XyZ789"), "half").expect("temporary");
    let beside = run_dir.with_file_name(format!(".{name}.json.tmp-Qw3rty"));
    std::fs::write(&beside, "half").expect("temporary");
    let others = run_dir.with_file_name(".someone-else.json.tmp-Qw3rty");
    std::fs::write(&others, "theirs").expect("another file's temporary");
    let out = sb.cmd(&["run", "--resume", run_dir.to_str().expect("utf8"), "-q"]);
    assert_exit!(out, 0);
    assert!(!run_dir.exists(), "the .run folder is removed once the bundle is written");
    assert!(!beside.exists(), "the final bundle's leftover temporary is removed");
    assert!(others.exists(), "another file's temporary is not this run's");
    assert!(!stderr(&out).contains("kept"), "{}", stderr(&out));
}

#[test]
fn a_resume_never_replaces_a_bundle_that_is_not_its_own() {
    let sb = Sandbox::new();
    let (run_dir, _) = interrupted_run(&sb, "journal.jsonl");
    let dir_s = run_dir.to_str().expect("utf8");
    let bundle = run_dir.with_extension("json");
    std::fs::write(&bundle, "precious").expect("write");
    let journal = run_dir.join("journal.jsonl");
    let before = std::fs::read(&journal).expect("journal");
    let mut run_dir_args = vec!["run", "--run-dir", dir_s];
    run_dir_args.extend_from_slice(GRID);
    for args in [&["run", "--resume", dir_s, "-q"][..], &run_dir_args] {
        let start = Instant::now();
        let out = sb.cmd(args);
        assert_exit!(out, 2);
        let err = stderr(&out);
        assert!(err.contains(&format!("{} exists", bundle.display())), "{args:?}: {err}");
        assert!(err.contains("not this run's to replace") && err.contains("fix: move that file away"), "{err}");
        assert!(start.elapsed() < Duration::from_secs(20), "{args:?} measured before refusing");
        assert_eq!(std::fs::read_to_string(&bundle).expect("bundle"), "precious", "left as it was");
        assert_eq!(std::fs::read(&journal).expect("journal"), before, "nothing measured");
    }
    // Moved away, the resume completes.
    std::fs::rename(&bundle, sb.path().join("precious.json")).expect("move");
    let kept = sb.path().join("journal-link.jsonl");
    std::fs::hard_link(&journal, &kept).expect("link: the journal is appended in place");
    let out = sb.cmd(&["run", "--resume", dir_s, "-q"]);
    assert_exit!(out, 0);
    let first = read_bundle(&bundle);
    assert_eq!(first.cells.len(), 24);
    assert!(!run_dir.exists());
    // Stopped after writing its bundle and before removing its folder: the bundle is its own, rewritten.
    std::fs::create_dir(&run_dir).expect("mkdir");
    std::fs::copy(&kept, &journal).expect("journal as the run ended");
    let out = sb.cmd(&["run", "--resume", dir_s, "-q"]);
    assert_exit!(out, 0);
    assert_eq!(PathBuf::from(stdout(&out).trim()), bundle);
    let again = read_bundle(&bundle);
    assert_eq!(again.cells, first.cells, "nothing measured again");
    assert_eq!(again.provenance.executions, first.provenance.executions);
    assert!(!run_dir.exists());
}

#[test]
fn a_resume_from_another_working_folder_reads_the_configs_own_files() {
    // The journal keeps the config's folder as an absolute path: a prompt file named relative to the config is
    // found again whichever folder `--resume` runs from (a job resubmitted from elsewhere, a user in another shell).
    let sb = Sandbox::new();
    let demo = include_str!("../../config/demo.toml")
        .replace("source = \"embedded\"\ncount = 8", "source = \"file\"\npath = \"prompts.txt\"\ncount = 2");
    assert!(demo.contains("path = \"prompts.txt\""), "the demo's [prompts] changed: adapt this test");
    std::fs::create_dir_all(sb.path().join("cfg")).expect("cfg");
    std::fs::write(sb.path().join("cfg/grid.toml"), demo).expect("config");
    let prompts = "The history of the river begins in the hills.\n\nA short account of the early years of the town.\n";
    std::fs::write(sb.path().join("cfg/prompts.txt"), prompts).expect("prompts");
    let args = ["run", "--config", "cfg/grid.toml", "--run-dir", "run", "--seq-len", "48", "--batch-size", "1"];
    let out = sb.cmd(&[&args[..], &["--steps", "4", "--repetitions", "1", "-q"]].concat());
    assert_exit!(out, 0);
    let elsewhere = sb.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("folder");
    let run_dir = sb.path().join("run");
    let out = sb
        .command(&["run", "--resume", run_dir.to_str().expect("utf8"), "-q"])
        .current_dir(&elsewhere)
        .output()
        .expect("resume");
    assert_exit!(out, 0);
    assert_eq!(read_bundle(&run_dir.join("bundle.json")).prompt_set.count, 2);
}

#[test]
fn a_run_started_before_a_new_config_rule_still_resumes() {
    // A journal written by an older runner may hold a config a newer rule refuses for new runs (a field that
    // drives nothing): a requeued job, its runner rebuilt meanwhile, must resume it, not fail.
    let sb = Sandbox::new();
    let dir = sb.path().join("rd");
    let dir_s = dir.to_str().expect("utf8");
    let grid = ["--seq-len", "48", "--batch-size", "1", "--steps", "4", "--repetitions", "1", "-q"];
    let out = sb.cmd(&[&["run", "--run-dir", dir_s][..], &grid].concat());
    assert_exit!(out, 0);
    std::fs::remove_file(dir.join("bundle.json")).expect("the bundle, as if the run had stopped before writing it");
    // The journal's config as an older runner could have written it: Dream's top_p on a grid without Dream.
    let path = dir.join("journal.jsonl");
    let text = std::fs::read_to_string(&path).expect("journal");
    let (first, rest) = text.split_once('\n').expect("lines");
    let mut header: serde_json::Value = serde_json::from_str(first).expect("header");
    let toml = header["header"]["config_toml"].as_str().expect("config").replace("[grid]\n", "[grid]\ntop_p = 0.9\n");
    let config = schema::GridConfig::parse_toml(&toml, "journal").expect("parses");
    header["header"]["config_toml"] = toml.clone().into();
    header["header"]["config_sha256"] = runner::plan::config_sha256(&config).into();
    std::fs::write(&path, format!("{header}\n{rest}")).expect("journal");
    // A new run of that config is refused; the run it belongs to resumes.
    sb.write("old.toml", &toml);
    let refused = sb.cmd(&["run", "--config", "old.toml", "-q"]);
    assert_exit!(refused, 2);
    assert!(stderr(&refused).contains("grid.top_p"), "{}", stderr(&refused));
    let out = sb.cmd(&["run", "--resume", dir_s, "-q"]);
    assert_exit!(out, 0);
    assert!(dir.join("bundle.json").is_file());
}

#[test]
fn a_tokenizer_json_s_own_padding_and_truncation_are_ignored() {
    let sb = Sandbox::new();
    let synth = sb.cmd(&["synth", "--kind", "llama", "--repo-id", "test/padded-llama", "--seed", "5"]);
    assert_exit!(synth, 0);
    let tok = PathBuf::from(stdout(&synth).trim()).join("tokenizer.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&tok).expect("tokenizer")).expect("json");
    // A fixed padding of 2000 pad tokens on the left, and a cut at 2 tokens: the prompts would be padding, or too
    // short for the cell's prompt length, were they applied.
    v["padding"] = serde_json::json!({
        "strategy": { "Fixed": 2000 }, "direction": "Left", "pad_to_multiple_of": null,
        "pad_id": 0, "pad_type_id": 0, "pad_token": "<|end_of_text|>"
    });
    v["truncation"] =
        serde_json::json!({ "direction": "Right", "max_length": 2, "strategy": "LongestFirst", "stride": 0 });
    std::fs::write(&tok, v.to_string()).expect("tokenizer");
    let path = demo_with_llama(&sb, "test/padded-llama", "padded.toml");
    let out = sb.cmd(&[
        "run",
        "--config",
        path.to_str().expect("utf8"),
        "--run-dir",
        sb.path().join("padded").to_str().expect("utf8"),
        "--seq-len",
        "40",
        "--batch-size",
        "1",
        "--steps",
        "4",
        "--samplers",
        "reference",
        "--repetitions",
        "1",
    ]);
    assert_exit!(out, 0);
    assert!(stderr(&out).contains("sets padding and truncation: ignored"), "{}", stderr(&out));
    let b = read_bundle(Path::new(stdout(&out).trim()));
    let ar = b.cells.iter().find(|c| c.key.model == "test/padded-llama").expect("the AR cell");
    assert!(ar.key.prompt_tokens > 2, "{}", ar.key);
    assert_eq!(ar.status, CellStatus::Ok);
    assert_eq!(ar.repetitions[0].output_tokens, u64::from(ar.key.output_tokens), "one row of N_out tokens");
}

#[test]
fn a_journal_cell_that_breaks_a_bundle_rule_is_refused_before_more_is_measured() {
    let sb = Sandbox::new();
    let (out, _) = run_to_bundle(&sb, &["--shard", "0/3"]);
    assert_exit!(out, 0);
    let dir = sb.path().join("run---shard_0of3");
    let journal = dir.join("journal.jsonl");
    let text = std::fs::read_to_string(&journal).expect("journal");
    // The first cell's first repetition made negative, as a hand edit would.
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let at = lines.iter().position(|l| l.starts_with("{\"cell\"")).expect("a cell line");
    let mut cell: serde_json::Value = serde_json::from_str(&lines[at]).expect("json");
    let key = cell["cell"]["key"].clone();
    cell["cell"]["repetitions"][0]["e2e_ms"] = serde_json::json!(-1.0);
    lines[at] = cell.to_string();
    std::fs::write(&journal, lines.join("\n") + "\n").expect("journal");
    let out = sb.cmd(&["run", "--resume", dir.to_str().expect("utf8"), "-q"]);
    assert_exit!(out, 2);
    let err = stderr(&out);
    assert!(err.contains("breaks a rule of the bundle format (the cell ") && err.contains("e2e_ms"), "{err}");
    assert!(err.contains("delete that cell's `cell` line from the journal"), "{err}");
    let model = key["model"].as_str().expect("model");
    assert!(err.contains(model), "names the cell: {err}");
    assert_eq!(std::fs::read_to_string(&journal).expect("journal"), lines.join("\n") + "\n", "nothing appended");
}
