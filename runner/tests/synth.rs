//! Writing a synthetic checkpoint stopped by a signal: a SLURM time limit (USR1, then TERM) or a preemption may
//! come while a run writes a real-size checkpoint (16 GB, minutes). The writing ends at its next chunk, removes
//! what it wrote, and the run exits 75 so that the job script requeues it.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::assert_exit;
use crate::util::{Sandbox, files_under, spawn, stderr};

/// One Llama of the real shapes cut to 1 layer and hidden size 1024 (about 0.6 GB in bf16, four weight files):
/// long enough to write that a signal comes in the middle.
const BIG: &str = r#"
[run]
name = "stop"
device = "cpu"
dtype = "f32"
warmup = 0
repetitions = 1
seed = 0

[prompts]
source = "embedded"
count = 2

[grid]
seq_lengths = [48]
batch_sizes = [1]
output_tokens = 16

[[models]]
kind = "llama"
id = "t/big-llama"

[models.synthetic]
preset = "real"
layers = 1
hidden = 1024
dtype = "bf16"
"#;

#[test]
fn a_stop_signal_while_weights_are_written_leaves_nothing_of_them() {
    let sb = Sandbox::new();
    let config = sb.write("big.toml", BIG);
    let results = sb.results();
    let args = ["run", "--config", config.to_str().expect("utf8"), "--output-dir", results.to_str().expect("utf8")];
    let child = spawn(&sb, &args);
    let repo = sb.cache().join("models--t--big-llama");
    // A weight file's temporary blob with some of its bytes written.
    let start = Instant::now();
    let partial = loop {
        assert!(start.elapsed() < Duration::from_secs(120), "no weight file being written in 120 s");
        let writing = files_under(&repo.join("blobs")).into_iter().find(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            name.starts_with(".model") && name.ends_with(".partial") && p.metadata().is_ok_and(|m| m.len() > 1 << 20)
        });
        if let Some(p) = writing {
            break p;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let ok = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill").success();
    assert!(ok, "kill -TERM");
    let stopped = Instant::now();
    let out = child.wait_with_output().expect("wait");
    assert_exit!(out, 75);
    assert!(stopped.elapsed() < Duration::from_secs(20), "the stop took {:?}", stopped.elapsed());
    let err = stderr(&out);
    assert!(err.contains("stopped by SIGTERM while writing the synthetic checkpoint"), "{err}");
    assert!(err.contains("fix: run the same command again"), "{err}");
    assert!(!partial.exists(), "{} is left", partial.display());
    // Nothing of the checkpoint: no blob (the config and tokenizer written before it are removed too), no staging
    // snapshot, no ref; the repository's lock file alone. No run folder: models come before it.
    let left: Vec<PathBuf> = files_under(&repo).into_iter().filter(|p| !p.ends_with(".dllm-bench.lock")).collect();
    assert!(left.is_empty(), "left in the cache: {left:?}");
    assert!(files_under(&results).is_empty(), "a run folder was made: {:?}", files_under(&results));
}

#[test]
fn a_weights_file_cut_short_is_written_again_by_the_next_synth() {
    // A blob cut short (a full disk, a copy interrupted) is refused by every run, naming the file; the fix it
    // gives (write the synthetic checkpoint again) must then work: synth takes the snapshot for incomplete.
    let sb = Sandbox::new();
    let args = ["synth", "--kind", "llada", "--repo-id", "t/cut", "--seed", "3"];
    let out = sb.cmd(&args);
    assert_exit!(out, 0);
    let snapshot = PathBuf::from(crate::util::stdout(&out).trim());
    let weights = std::fs::canonicalize(snapshot.join("model.safetensors")).expect("the blob");
    let whole = std::fs::read(&weights).expect("weights");
    std::fs::write(&weights, &whole[..whole.len() / 2]).expect("cut short");
    assert_exit!(sb.cmd(&args), 0);
    let again = std::fs::read(std::fs::canonicalize(snapshot.join("model.safetensors")).expect("blob")).expect("read");
    assert_eq!(again, whole, "the same weights, whole again");
}
