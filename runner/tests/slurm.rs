//! The job scripts of jobs/, submitted unchanged to a real one-node SLURM on 127.0.0.1 (scripts/slurm-up.sh,
//! fake GPUs so `--gres=gpu:1` is accepted), running config/experiments_slurm_test.toml on the CPU:
//! - the array + merge jobs (jobs/submit.sh) give one bundle equal, cell for cell, to a single-process run;
//! - one shard resubmitted alone (`submit.sh --tasks 1`) runs that shard again and its merge gives the same bundle;
//! - the USR1 warning checkpoints, the job requeues itself and the rerun resumes to a complete bundle;
//! - a preemption-like `scontrol requeue` (SIGTERM) resumes the same way;
//! - a user's `scancel` stops the job (not requeued), its log saying how to resume;
//! - the time limit itself, with no warning, on an array task: the task requeues itself and resumes, and the merge
//!   (afterany) waits for it instead of being cancelled (about 3 minutes).
//!
//! Skipped with a loud message when SLURM is not installed, unless DLLM_BENCH_REQUIRE_SLURM=1 (scripts/test.sh
//! sets it), which turns the skip into a failure. One test function: the cluster is shared.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use schema::{Bundle, CellStatus};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().expect("repo root")
}

struct Cluster {
    conf: String,
    dir: PathBuf,
    work: PathBuf,
}

impl Cluster {
    fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.current_dir(repo())
            .env("SLURM_CONF", &self.conf)
            .env("HF_HUB_CACHE", self.work.join("hub"))
            .env_remove("HF_HOME")
            .env("DLLM_BENCH_BIN", env!("CARGO_BIN_EXE_dllm-bench"))
            .env("SBATCH_OUTPUT", self.work.join("%x-%j.out"))
            // Never into the job's output: the test checks that.
            .env("HF_TOKEN", "hf_slurmTestTokenNeverWritten42");
        c
    }

    fn run(&self, program: &str, args: &[&str]) -> String {
        let out = self.cmd(program).args(args).output().unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn field(&self, id: &str, name: &str) -> String {
        let text = self.run("scontrol", &["show", "job", id]);
        text.split_whitespace().find_map(|w| w.strip_prefix(&format!("{name}="))).unwrap_or_default().to_string()
    }

    /// Waits for a final state; a requeued job waiting for its BeginTime is started at once (after 2 s: a
    /// restart in the same second as the requeue has its credential revoked).
    fn wait(&self, id: &str, timeout: Duration) -> String {
        let start = Instant::now();
        let mut begin_seen: Option<Instant> = None;
        loop {
            let state = self.field(id, "JobState");
            if matches!(
                state.as_str(),
                "COMPLETED" | "FAILED" | "CANCELLED" | "TIMEOUT" | "NODE_FAIL" | "OUT_OF_MEMORY"
            ) {
                return state;
            }
            if state == "PENDING" && self.field(id, "Reason") == "BeginTime" {
                let t = *begin_seen.get_or_insert_with(Instant::now);
                if t.elapsed() > Duration::from_secs(2) {
                    self.run("scontrol", &["update", &format!("JobId={id}"), "StartTime=now"]);
                    begin_seen = None;
                }
            }
            assert!(
                start.elapsed() < timeout,
                "job {id} still {state} after {timeout:?}; logs in {}",
                self.dir.display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until the job's run folder has at least one finished cell.
    fn wait_for_cell(&self, run_dir: &Path) {
        let start = Instant::now();
        while !run_dir.join("partial.json").exists() {
            assert!(start.elapsed() < Duration::from_secs(120), "no cell finished in {}", run_dir.display());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("scripts/slurm-down.sh")).arg(&self.dir).status();
    }
}

fn read(path: &Path) -> Bundle {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    schema::read_bundle(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn keys_and_statuses(b: &Bundle) -> Vec<(schema::CellKey, String)> {
    b.cells.iter().map(|c| (c.key.clone(), format!("{:?}", c.status))).collect()
}

fn up() -> Option<Cluster> {
    let installed = Command::new("sh")
        .args(["-c", "command -v sbatch && command -v slurmctld && command -v munged"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !installed {
        let msg = "SLURM IS NOT INSTALLED: the SLURM job tests did NOT run (scripts/install-deps.sh installs it)";
        assert!(std::env::var_os("DLLM_BENCH_REQUIRE_SLURM").is_none(), "{msg}, and DLLM_BENCH_REQUIRE_SLURM is set");
        eprintln!("\n!!!!!!!!!! {msg} !!!!!!!!!!\n");
        return None;
    }
    let dir = repo().join("target/slurm-test");
    let work = dir.join("work");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).expect("work dir");
    let out = Command::new(repo().join("scripts/slurm-up.sh")).arg(&dir).output().expect("slurm-up");
    assert!(out.status.success(), "slurm-up: {}", String::from_utf8_lossy(&out.stderr));
    Some(Cluster { conf: dir.join("slurm.conf").display().to_string(), dir, work })
}

#[test]
fn job_scripts_on_a_real_slurm() {
    let Some(c) = up() else { return };
    let started = Instant::now();
    let config = "config/experiments_slurm_test.toml";
    let w = |p: &str| c.work.join(p).display().to_string();

    // 1. Array + merge through jobs/submit.sh; meanwhile a single-process run of the same config.
    let ids =
        c.run("jobs/submit.sh", &["--shards", "3", "--config", config, "--results", &w("array"), "--name", "grid"]);
    let (array, merge) = ids.split_once(' ').expect("two job ids");
    let single = c
        .cmd(env!("CARGO_BIN_EXE_dllm-bench"))
        .args(["run", "--config", config, "--run-dir", &w("single"), "-q"])
        .output()
        .expect("single run");
    assert!(single.status.success(), "{}", String::from_utf8_lossy(&single.stderr));
    assert_eq!(c.wait(merge, Duration::from_secs(300)), "COMPLETED", "merge job");
    for task in 0..3 {
        assert_eq!(c.field(&format!("{array}_{task}"), "JobState"), "COMPLETED", "array task {task}");
    }
    let merged = read(&c.work.join("array/grid.json"));
    let single = read(&c.work.join("single/bundle.json"));
    assert_eq!(keys_and_statuses(&merged), keys_and_statuses(&single), "array + merge == single run, cell for cell");
    assert_eq!(merged.provenance.config_sha256, single.provenance.config_sha256);
    assert_eq!(merged.provenance.executions.len(), 3);
    for e in &merged.provenance.executions {
        let s = e.slurm.as_ref().expect("SLURM ids recorded");
        assert_eq!(s.array_job_id.as_deref(), Some(array));
        assert_eq!(s.node.as_deref(), Some("localhost"));
    }
    eprintln!("array + merge: {:.1} s", started.elapsed().as_secs_f64());

    // 1b. One shard resubmitted alone (`--tasks 1`, as after a shard lost on a bad node): it runs shard 1 of 3
    //     again, not shard 0 of a one-task array, and its merge gives the same bundle. A resubmission with another
    //     shard count, or of a shard the grid does not have, is refused before anything is submitted.
    let t = Instant::now();
    std::fs::remove_dir_all(c.work.join("array/runs/grid/shard-1")).expect("shard 1's folder");
    let resubmit = |args: &[&str]| {
        c.cmd("jobs/submit.sh")
            .args(["--config", config, "--results", &w("array"), "--name", "grid"])
            .args(args)
            .output()
            .expect("submit")
    };
    for (args, says) in [
        (&["--shards", "2"][..], "was submitted with --shards 3"),
        (&["--shards", "3", "--tasks", "3"], "shard 3 does not exist"),
        // `plan --check`: what would stop every task before it measures (this binary has no CUDA); the flags that
        // are `run`'s alone are not handed to it.
        (&["--shards", "3", "--", "--offline", "-q", "--allow-other-build", "--device", "cuda"], "built without CUDA"),
        // What the job scripts set themselves.
        (&["--shards", "3", "--", "--run-dir", "elsewhere"], "choose each shard's run folder"),
    ] {
        let out = resubmit(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    let out = resubmit(&["--shards", "3", "--tasks", "1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ids = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let (again, merge) = ids.split_once(' ').expect("two job ids");
    assert_eq!(c.wait(merge, Duration::from_secs(300)), "COMPLETED", "the resubmitted shard's merge");
    assert_eq!(c.field(&format!("{again}_1"), "JobState"), "COMPLETED", "array task 1 resubmitted");
    let shard = read(&c.work.join("array/runs/grid/shard-1/bundle.json"));
    let info = shard.provenance.shard.expect("a shard");
    assert_eq!((info.index, info.count), (1, 3), "the resubmitted task runs shard 1 of 3");
    let merged = read(&c.work.join("array/grid.json"));
    assert_eq!(keys_and_statuses(&merged), keys_and_statuses(&single), "resubmitted shard + merge == single run");
    eprintln!("one shard resubmitted and merged: {:.1} s", t.elapsed().as_secs_f64());

    // 1c. A merge that starts once SLURM has purged its array's record (`squeue` refuses the id: "Invalid job id"):
    //     no task is left, so it merges instead of failing.
    let out = w("array/purged.json");
    let id = c.run("sbatch", &["--parsable", "jobs/merge.sbatch", &w("array/runs/grid"), &out, "4000000"]);
    assert_eq!(c.wait(&id, Duration::from_secs(120)), "COMPLETED", "a merge whose array is no longer known");
    assert_eq!(keys_and_statuses(&read(Path::new(&out))), keys_and_statuses(&single), "merged after the purge");

    // 2. The time-limit warning (USR1 to the batch shell, as --signal=B:USR1@120 sends it): checkpoint,
    //    requeue, resume. 3. A preemption-like requeue from outside (SIGTERM to the job): the same.
    for (case, how) in [("usr1", "warning"), ("term", "requeue")] {
        let t = Instant::now();
        // The first under a `runs` folder, as the default run folder is: its bundle is published beside it.
        let run_dir = match case {
            "usr1" => c.work.join("runs/gpu-usr1"),
            _ => c.work.join(format!("gpu-{case}")),
        };
        let id = c.run(
            "sbatch",
            &[
                "--parsable",
                "jobs/benchmark_gpu.sbatch",
                config,
                run_dir.to_str().expect("utf8"),
                "--repetitions",
                "25",
            ],
        );
        c.wait_for_cell(&run_dir);
        match how {
            "warning" => c.run("scancel", &["--signal=USR1", "--batch", &id]),
            _ => c.run("scontrol", &["requeue", &id]),
        };
        assert_eq!(c.wait(&id, Duration::from_secs(300)), "COMPLETED", "{case} job");
        assert_eq!(c.field(&id, "Restarts"), "1", "{case}: requeued once");
        let b = read(&run_dir.join("bundle.json"));
        assert_eq!(b.cells.len(), 12, "{case}");
        let published = c.work.join(format!("gpu-{case}.json"));
        assert_eq!(published.exists(), case == "usr1", "{case}: {}", published.display());
        if case == "usr1" {
            let same = std::fs::read(&published).ok() == std::fs::read(run_dir.join("bundle.json")).ok();
            assert!(same, "the published bundle is the run's");
        }
        assert!(b.cells.iter().all(|x| x.status == CellStatus::Ok), "{case}");
        let restarts: Vec<Option<u32>> =
            b.provenance.executions.iter().map(|e| e.slurm.as_ref().and_then(|s| s.restart_count)).collect();
        assert_eq!(restarts, [None, Some(1)], "{case}: the first run and the resumed one");
        let log = std::fs::read_to_string(c.work.join(format!("dllm-bench-{id}.out"))).expect("job output");
        assert!(log.contains("interrupted by SIG") && log.contains("cells already done"), "{case}: {log}");
        eprintln!("{case}: requeued and completed in {:.1} s", t.elapsed().as_secs_f64());
    }

    // 4. A user's scancel: the job stops (it is not requeued) and its log says how to resume.
    let run_dir = c.work.join("gpu-scancel");
    let id = c.run(
        "sbatch",
        &["--parsable", "jobs/benchmark_gpu.sbatch", config, run_dir.to_str().expect("utf8"), "--repetitions", "25"],
    );
    c.wait_for_cell(&run_dir);
    c.run("scancel", &[&id]);
    assert_eq!(c.wait(&id, Duration::from_secs(120)), "CANCELLED", "scancel");
    assert_eq!(c.field(&id, "Restarts"), "0", "scancel: not requeued");
    let log = std::fs::read_to_string(c.work.join(format!("dllm-bench-{id}.out"))).expect("job output");
    assert!(log.contains("is not requeued") && log.contains("resubmit the same command"), "scancel: {log}");
    // The command names the run folder, whose default would be a new job's.
    let again = format!("sbatch jobs/benchmark_gpu.sbatch {config} {} --repetitions 25", run_dir.display());
    assert!(log.contains(&again), "scancel: the log gives the command that resumes ({again}): {log}");

    // 5. The time limit itself with no warning (SLURM's TERM at the limit) on an array task: the task requeues
    //    itself (it ends TIMEOUT first, which must not cancel the merge), resumes, and the merge runs after it.
    let t = Instant::now();
    let ids = c
        .cmd("jobs/submit.sh")
        .args(["--shards", "1", "--config", config, "--results", &w("timeout"), "--name", "tl", "--"])
        .args(["--repetitions", "1000"])
        // A one-minute limit, and no USR1 warning (signal 23 is ignored; the scripts' B:USR1@120 would come at once).
        .env("SBATCH_TIMELIMIT", "1")
        .env("SBATCH_SIGNAL", "B:23@5")
        .output()
        .expect("submit");
    assert!(ids.status.success(), "{}", String::from_utf8_lossy(&ids.stderr));
    let ids = String::from_utf8_lossy(&ids.stdout).trim().to_string();
    let (array, merge) = ids.split_once(' ').expect("two job ids");
    let task = format!("{array}_0");
    let start = Instant::now();
    while c.field(&task, "Restarts") == "0" {
        let state = c.field(&task, "JobState");
        assert!(!matches!(state.as_str(), "COMPLETED" | "FAILED" | "CANCELLED" | "TIMEOUT"), "task ended {state}");
        assert!(start.elapsed() < Duration::from_secs(300), "no time limit reached");
        std::thread::sleep(Duration::from_millis(500));
    }
    // Requeued: the rerun gets the time to finish.
    c.run("scontrol", &["update", &format!("JobId={task}"), "TimeLimit=30"]);
    assert_eq!(c.field(merge, "JobState"), "PENDING", "the merge waits for the requeued task");
    assert_eq!(c.wait(&task, Duration::from_secs(600)), "COMPLETED", "the task after its requeue");
    assert_eq!(c.wait(merge, Duration::from_secs(300)), "COMPLETED", "the merge after the requeued task");
    let merged = read(&c.work.join("timeout/tl.json"));
    assert_eq!(merged.cells.len(), 12);
    assert!(merged.cells.iter().all(|x| x.status == CellStatus::Ok));
    assert!(merged.provenance.executions.len() >= 2, "the timed-out run and the resumed one");
    let log = std::fs::read_to_string(c.work.join(format!("dllm-bench-shard-{array}.out"))).unwrap_or_default();
    assert!(log.contains("DUE TO TIME LIMIT") && log.contains("requeueing job"), "{log}");
    eprintln!("time limit: requeued, resumed and merged in {:.1} s", t.elapsed().as_secs_f64());

    // The token of the submitting shell reached the jobs' environment, and no file.
    for f in std::fs::read_dir(&c.work).expect("work").flatten() {
        if f.path().is_file() {
            let text = std::fs::read_to_string(f.path()).unwrap_or_default();
            assert!(!text.contains("hf_slurmTestTokenNeverWritten42"), "token in {}", f.path().display());
        }
    }
    eprintln!("SLURM job tests: {:.1} s", started.elapsed().as_secs_f64());
}
