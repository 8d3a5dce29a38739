//! `dllm-bench`: see `dllm-bench --help`.

use std::process::ExitCode;

fn main() -> ExitCode {
    match runner::cli::main() {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(runner::exit_code(&err) as u8)
        }
    }
}
