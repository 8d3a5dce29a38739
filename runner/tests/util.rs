//! Test harness: a temp dir and a command builder for the real `dllm-bench` binary, and the helpers several
//! modules share (a weight file rewritten, two tensors compared).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use candle_core::Tensor;

/// A scratch folder with a model cache and an output folder, removed on drop.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        Sandbox { dir: tempfile::tempdir().expect("temp dir") }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn cache(&self) -> PathBuf {
        self.path().join("hub")
    }

    pub fn results(&self) -> PathBuf {
        self.path().join("results")
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path().join(name);
        std::fs::write(&p, text).expect("write");
        p
    }

    /// `dllm-bench ARGS` with the sandbox's cache, from the sandbox folder.
    pub fn cmd(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run dllm-bench")
    }

    /// The command of [`Sandbox::cmd`], not started (its standard streams to choose).
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_dllm-bench"));
        c.args(args).current_dir(self.path()).env("HF_HUB_CACHE", self.cache()).env_remove("HF_HOME");
        c
    }
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Asserts the exit status and prints the output when it differs.
#[macro_export]
macro_rules! assert_exit {
    ($out:expr, $code:expr) => {{
        let out = &$out;
        assert_eq!(
            out.status.code(),
            Some($code),
            "exit status\n--- stdout\n{}\n--- stderr\n{}",
            $crate::util::stdout(out),
            $crate::util::stderr(out)
        );
    }};
}

/// `dllm-bench ARGS` started in the background with the sandbox's cache (stdout discarded, stderr piped).
pub fn spawn(sb: &Sandbox, args: &[&str]) -> Child {
    sb.command(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn dllm-bench")
}

/// The largest absolute difference between two f32 tensors of one shape.
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .expect("sub")
        .abs()
        .expect("abs")
        .flatten_all()
        .expect("flat")
        .max(0)
        .expect("max")
        .to_scalar::<f32>()
        .expect("scalar")
}

/// Overwrites the values of one f32 tensor in a safetensors file with NaN.
pub fn poison(file: &Path, tensor: &str) {
    rewrite(file, tensor, |_, _| f32::NAN);
}

/// Overwrites the values of one 2-D (or 1-D: one row) f32 tensor in a safetensors file with `value(row, column)`.
pub fn rewrite(file: &Path, tensor: &str, value: impl Fn(usize, usize) -> f32) {
    let mut bytes = std::fs::read(file).expect("weights");
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).expect("header");
    let info = &header[tensor];
    assert_eq!(info["dtype"], "F32", "{tensor}: {info}");
    let cols = info["shape"].as_array().and_then(|s| s.last()).and_then(|c| c.as_u64()).expect("shape") as usize;
    let at = |i: usize| info["data_offsets"][i].as_u64().expect("offset") as usize;
    for (i, chunk) in bytes[8 + n + at(0)..8 + n + at(1)].chunks_mut(4).enumerate() {
        chunk.copy_from_slice(&value(i / cols, i % cols).to_le_bytes());
    }
    std::fs::write(file, bytes).expect("write");
}

/// Every entry under `dir` that is not a folder (files and links, a dangling link too), in no order; none when
/// `dir` does not exist. Links to folders are not followed.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// Marks a cell of a bundle's JSON out of memory, as the runner records one: the status, and no repetitions.
pub fn mark_oom(cell: &mut serde_json::Value) {
    cell["status"] = serde_json::json!({"state": "oom", "message": "CUDA out of memory (test)"});
    cell["repetitions"] = serde_json::json!([]);
}

/// The demo-series fixture (`schema/tests/fixtures/v1.5/demo-series.json`, its largest B of 8 each group's quality
/// cell) written to `name` with the AR cells at N = 48 and the batch sizes `bs` out of memory, their quality values
/// dropped where `drop_quality` (no AR cell at that N finished to score them).
pub fn with_ar_oom(sb: &Sandbox, name: &str, bs: &[u64], drop_quality: bool) -> PathBuf {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../schema/tests/fixtures/v1.5/demo-series.json");
    let text = std::fs::read_to_string(&fixture).expect("the fixture");
    let mut json: serde_json::Value = serde_json::from_str(&text).expect("json");
    for c in json["cells"].as_array_mut().expect("cells").iter_mut() {
        let k = &c["key"];
        if k["sampler"] == "ar_greedy" && k["seq_len"] == 48 && bs.iter().any(|&b| k["batch_size"] == b) {
            mark_oom(c);
            if drop_quality {
                for field in ["quality", "generations"] {
                    c.as_object_mut().expect("a cell").remove(field);
                }
            }
        }
    }
    sb.write(name, &json.to_string())
}
