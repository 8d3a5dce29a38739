//! Test harness: a temp dir and a command builder for the real `dllm-bench` binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
        Command::new(env!("CARGO_BIN_EXE_dllm-bench"))
            .args(args)
            .current_dir(self.path())
            .env("HF_HUB_CACHE", self.cache())
            .env_remove("HF_HOME")
            .output()
            .expect("run dllm-bench")
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
