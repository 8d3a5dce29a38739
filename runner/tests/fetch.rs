//! Assets for offline nodes: `fetch --local-files-only` names exactly the missing files, an offline run with a
//! missing file fails before any measurement naming it, and `HF_TOKEN` ends up in no output, file or log.
//! No network here: downloads are only tested against a closed local port.

use std::path::PathBuf;
use std::process::{Command, Output};

use crate::assert_exit;
use crate::util::{Sandbox, stderr, stdout};

const TOKEN: &str = "hf_dllmBenchSecretTokenNeverWritten0123";

fn cmd_env(sb: &Sandbox, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dllm-bench"));
    c.args(args).current_dir(sb.path()).env("HF_HUB_CACHE", sb.cache()).env_remove("HF_HOME");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run dllm-bench")
}

/// A config of two real-looking checkpoints (no synthetic tables) written by `synth`: a sharded LLaDA and a
/// single-file Llama. Returns (config path, llada snapshot, llama snapshot).
fn cached_models(sb: &Sandbox) -> (PathBuf, PathBuf, PathBuf) {
    let llada = sb.cmd(&["synth", "--kind", "llada", "--repo-id", "org/llada", "--shards", "3"]);
    assert_exit!(llada, 0);
    let llama = sb.cmd(&["synth", "--kind", "llama", "--repo-id", "org/llama"]);
    assert_exit!(llama, 0);
    let demo =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../config/demo.toml")).expect("demo");
    let cfg = demo
        .replacen(
            "id = \"dllm-bench/synthetic-llama-tiny\"\n\n[models.synthetic]\npreset = \"tiny\"\nseed = 1\n",
            "id = \"org/llama\"\n",
            1,
        )
        .replacen(
            "id = \"dllm-bench/synthetic-llada-tiny\"\n\n[models.synthetic]\npreset = \"tiny\"\nseed = 2\n",
            "id = \"org/llada\"\n",
            1,
        );
    // Without quality: the demo's second evaluator is the llama this config replaces.
    let cfg = cfg.split("\n[quality]").next().expect("config").to_string();
    assert!(!cfg.contains("synthetic]"), "both models come from the cache");
    let path = sb.write("cached.toml", &cfg);
    (path, PathBuf::from(stdout(&llada).trim()), PathBuf::from(stdout(&llama).trim()))
}

fn missing_lines(out: &Output) -> Vec<String> {
    stdout(out)
        .lines()
        .filter_map(|l| l.strip_prefix("missing  "))
        .map(|l| l.split("  (").next().unwrap_or(l).to_string())
        .collect()
}

#[test]
fn local_files_only_reports_exactly_the_missing_files() {
    let sb = Sandbox::new();
    let (cfg, llada, llama) = cached_models(&sb);
    let cfg_s = cfg.to_str().expect("utf8");
    let out = sb.cmd(&["fetch", "--config", cfg_s, "--local-files-only"]);
    assert_exit!(out, 0);
    assert_eq!(stdout(&out).lines().filter(|l| l.starts_with("ok ")).count(), 2 + 1 + 3 + 2 + 1, "{}", stdout(&out));

    // Break the cache: a shard, the tokenizer of the other model, and a blob behind a symlink.
    std::fs::remove_file(llada.join("model-00002-of-00003.safetensors")).expect("rm shard");
    std::fs::remove_file(llama.join("tokenizer.json")).expect("rm tokenizer");
    let blob = std::fs::canonicalize(llada.join("config.json")).expect("blob");
    std::fs::remove_file(&blob).expect("rm blob");
    let out = sb.cmd(&["fetch", "--config", cfg_s, "--local-files-only", "--extra-model-id", "org/absent"]);
    assert_exit!(out, 1);
    let mut got = missing_lines(&out);
    got.sort();
    let absent_ref = sb.cache().join("models--org--absent/refs/main");
    let mut want: Vec<String> = [
        llada.join("config.json"),
        llada.join("model-00002-of-00003.safetensors"),
        llama.join("tokenizer.json"),
        absent_ref,
    ]
    .iter()
    .map(|p| p.display().to_string())
    .collect();
    want.sort();
    assert_eq!(got, want, "{}", stdout(&out));
    assert!(stderr(&out).contains("4 files missing"), "{}", stderr(&out));

    // HF_HUB_OFFLINE=1 means the same as --local-files-only.
    let out = cmd_env(&sb, &["fetch", "--config", cfg_s], &[("HF_HUB_OFFLINE", "1")]);
    assert_exit!(out, 1);
    assert!(stderr(&out).contains("HF_HUB_OFFLINE"), "{}", stderr(&out));
    assert_eq!(missing_lines(&out).len(), 3);
}

#[test]
fn offline_run_with_a_missing_file_fails_before_measuring_and_names_it() {
    let sb = Sandbox::new();
    let (cfg, llada, _) = cached_models(&sb);
    // The second model's file: a run that measured the first model before loading the second would be wrong.
    std::fs::remove_file(llada.join("model-00003-of-00003.safetensors")).expect("rm shard");
    let results = sb.results();
    let out = cmd_env(
        &sb,
        &["run", "--offline", "--config", cfg.to_str().expect("utf8"), "-o", results.to_str().expect("utf8")],
        &[("HF_HUB_OFFLINE", "1")],
    );
    assert_exit!(out, 2);
    let err = stderr(&out);
    assert!(err.contains(&llada.join("model-00003-of-00003.safetensors").display().to_string()), "{err}");
    // One fix, the snapshot's: it was written by `dllm-bench synth` (its config.json says so), so synth again.
    assert!(err.contains("fix: write the synthetic checkpoint again with `dllm-bench synth`"), "{err}");
    assert_eq!(err.matches("fix:").count(), 1, "{err}");
    assert!(!err.contains("[1/"), "nothing was measured: {err}");
    assert!(!results.exists(), "no run folder, no bundle");
    // A model in no folder of the cache: the cache may be the wrong one, or the model meant to be synthetic.
    let absent = std::fs::read_to_string(&cfg).expect("config").replace("id = \"org/llada\"", "id = \"nobody/absent\"");
    let absent = sb.write("absent.toml", &absent);
    let out = sb.cmd(&["run", "--config", absent.to_str().expect("utf8"), "-o", results.to_str().expect("utf8")]);
    assert_exit!(out, 2);
    let err = stderr(&out);
    assert!(err.contains("huggingface-cli download nobody/absent"), "{err}");
    assert!(err.contains("nobody/absent is not in the cache") && err.contains("a `synthetic` table"), "{err}");
}

#[test]
fn hf_token_is_in_no_output_file_or_log() {
    let sb = Sandbox::new();
    let env = [("HF_TOKEN", TOKEN), ("DLLM_BENCH_LOG", "trace")];
    let (cfg, _, _) = cached_models(&sb);
    let results = sb.results();
    let mut outputs = vec![
        cmd_env(
            &sb,
            &[
                "run",
                "--config",
                cfg.to_str().expect("utf8"),
                "-o",
                results.to_str().expect("utf8"),
                "--seq-len",
                "40",
                "--batch-size",
                "1",
                "--steps",
                "4",
                "--repetitions",
                "1",
            ],
            &env,
        ),
        cmd_env(&sb, &["fetch", "--config", cfg.to_str().expect("utf8"), "--local-files-only"], &env),
        // The download path, against a closed local port: fails, naming the file, not the token.
        cmd_env(
            &sb,
            &["fetch", "--config", cfg.to_str().expect("utf8"), "--extra-model-id", "org/absent", "-q"],
            &[("HF_TOKEN", TOKEN), ("DLLM_BENCH_LOG", "trace"), ("HF_ENDPOINT", "http://127.0.0.1:9")],
        ),
    ];
    assert_exit!(outputs[0], 0);
    assert_exit!(outputs[1], 0);
    let download = outputs.pop().expect("download");
    assert_exit!(download, 1);
    assert!(stderr(&download).contains("cannot download config.json of org/absent"), "{}", stderr(&download));
    outputs.push(download);
    for o in &outputs {
        assert!(!stdout(o).contains(TOKEN) && !stderr(o).contains(TOKEN), "token printed");
    }
    let files: Vec<PathBuf> = crate::util::files_under(sb.path()).into_iter().filter(|p| p.is_file()).collect();
    assert!(files.iter().any(|p| p.extension().is_some_and(|e| e == "json")), "a bundle was written");
    for f in files {
        let bytes = std::fs::read(&f).expect("read");
        assert!(!bytes.windows(TOKEN.len()).any(|w| w == TOKEN.as_bytes()), "token written into {}", f.display());
    }
}

#[test]
fn fetch_takes_a_config_and_none_of_the_runs_grid_overrides() {
    let sb = Sandbox::new();
    let help = sb.cmd(&["fetch", "--help"]);
    assert_exit!(help, 0);
    let text = stdout(&help);
    assert!(text.contains("--config <FILE>") && text.contains("--local-files-only"), "{text}");
    // What is fetched follows the config's models and dataset only: no K, B or N to override.
    for flag in ["--steps", "--batch-size", "--seq-len", "--repetitions", "--cuda-graphs"] {
        assert!(!text.contains(flag), "fetch --help lists {flag}:\n{text}");
    }
    let out = sb.cmd(&["fetch", "--steps", "8", "--local-files-only"]);
    assert_exit!(out, 2);
    assert!(stderr(&out).contains("--steps"), "{}", stderr(&out));
    // The embedded demo's models are synthetic: nothing to fetch, nothing missing.
    let demo = sb.cmd(&["fetch", "--local-files-only"]);
    assert_exit!(demo, 0);
    assert!(stderr(&demo).contains("synthetic") || stdout(&demo).contains("synthetic"), "{}", stderr(&demo));
}
