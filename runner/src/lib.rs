//! dllm-bench's runner: loads both models, sweeps the grid, measures, and writes result bundles.
//!
//! The data flow is config -> [`plan`] (cells) -> [`sweep`] (measurements, through [`model`] and
//! [`generate`]) -> bundle (the `schema` crate) -> [`serve`] (the explorer). [`synth`] writes synthetic
//! checkpoints in the real on-disk layouts, so everything runs without downloads.
//!
//! At cluster scale: [`journal`] makes runs resumable, [`signals`] stops them cleanly, [`shard`] splits a grid
//! across a SLURM job array, [`merge`] joins the shards' bundles, [`execution`] records where each cell ran, and
//! [`fetch`] fills (or checks) the model cache for offline compute nodes.

/// `eprintln!` for a run's progress and messages: when standard error is a closed pipe (`2>&1 | head`), the
/// text is lost and the run goes on (`eprintln!` would panic there and end the run).
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `println!` for what a long command reports as it goes (`fetch`'s files): a closed standard output loses the
/// line, not the rest of the work.
#[macro_export]
macro_rules! tell {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// `n` and `noun`, the noun in the plural unless `n` is 1 (`1 cell`, `2 cells`; nouns whose plural adds `s`).
pub fn counted(n: usize, noun: &str) -> String {
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

/// Says `line` on standard error (as [`say!`]) unless this process has said it already: a file read twice (a
/// journal, by `run --resume` and then by the sweep) warns of what it found once.
pub fn say_once(line: String) {
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if !said.contains(&line) {
        say!("{line}");
        said.push(line);
    }
}

pub mod bench;
pub mod cli;
pub mod commands;
pub mod compare;
pub mod device;
pub mod execution;
pub mod export;
pub mod fetch;
pub mod figures;
pub mod generate;
pub mod input;
pub mod journal;
pub mod merge;
pub mod model;
pub mod output;
pub mod plan;
pub mod prompts;
pub mod quality;
pub mod report;
pub mod serve;
pub mod shard;
pub mod signals;
pub mod site;
pub mod sweep;
pub mod synth;
pub mod sysinfo;

/// An error the user fixes by changing their input (config, flags, a file): exit status 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InputError(pub String);

/// Exit status of a run stopped early by a signal, resumable: see [`signals::EXIT_INTERRUPTED`] (75).
pub use signals::EXIT_INTERRUPTED;

/// Exit status for an error: 2 when the input was bad (a config, a flag, a bundle, an unloadable checkpoint), 75
/// when a stop signal ended the writing of a synthetic checkpoint, 1 otherwise.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    // A stop signal during the writing of a synthetic checkpoint: the command can be run again (75, as a run).
    if err.chain().any(|c| matches!(c.downcast_ref::<synth::SynthError>(), Some(synth::SynthError::Stopped { .. }))) {
        return i32::from(EXIT_INTERRUPTED);
    }
    // `downcast_ref` also finds an `InputError` attached with `.context(..)`, which `chain` does not expose.
    let bad_input = err.downcast_ref::<InputError>().is_some()
        || err.chain().any(|c| {
            c.is::<InputError>()
                || c.is::<schema::ConfigError>()
                || c.is::<schema::BundleError>()
                || c.is::<clap::Error>()
                // A checkpoint that cannot be loaded is bad input (its message says which file and what to do);
                // only a failure to read a file that is there is an I/O error.
                || c.downcast_ref::<model::ModelError>().is_some_and(|e| !matches!(e, model::ModelError::Io { .. }))
                // Synthetic weights refused over a real checkpoint: the config's id is the problem.
                || matches!(c.downcast_ref::<synth::SynthError>(), Some(synth::SynthError::RealCheckpoint { .. }))
        });
    if bad_input { 2 } else { 1 }
}

/// An error's text as `{err:#}` writes it (the causes joined by ": "), without the backtraces candle attaches to
/// its errors when `RUST_BACKTRACE` or `RUST_LIB_BACKTRACE` is set: a cell's status message or an error line
/// holds what went wrong, not twenty frame lines.
pub fn error_text(err: &anyhow::Error) -> String {
    // candle's own wrappers, written as candle writes them, with each backtrace left out wherever it is nested
    // (a path or a context around an error that carries one).
    fn bare(e: &candle_core::Error) -> String {
        use candle_core::Error as E;
        match e {
            E::WithBacktrace { inner, .. } => bare(inner),
            E::WithPath { inner, path } => format!("path: {path:?} {}", bare(inner)),
            E::Context { inner, context } => format!("{context}: {}", bare(inner)),
            e => e.to_string(),
        }
    }
    err.chain()
        .map(|c| match c.downcast_ref::<candle_core::Error>() {
            Some(e) => bare(e),
            None => c.to_string(),
        })
        .collect::<Vec<_>>()
        .join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_text_leaves_out_candles_backtraces_wherever_they_are_nested() {
        let with_bt = |inner: candle_core::Error| candle_core::Error::WithBacktrace {
            inner: Box::new(inner),
            backtrace: Box::new(std::backtrace::Backtrace::force_capture()),
        };
        let index = || candle_core::Error::Msg("index-select invalid index 128585 with dim size 128256".into());
        let cases: Vec<anyhow::Error> = vec![
            with_bt(index()).into(),
            with_bt(index()).with_path("model.safetensors").into(),
            anyhow::Error::from(with_bt(index())).context("cell failed"),
            candle_core::Error::Context { inner: Box::new(with_bt(index())), context: Box::new("forward") }.into(),
            with_bt(with_bt(index())).into(),
        ];
        for e in &cases {
            let text = error_text(e);
            assert!(text.contains("index-select invalid index 128585"), "{text}");
            assert!(!text.contains('\n'), "a backtrace in {text:?}");
        }
    }
}
