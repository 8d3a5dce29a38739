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
/// text is lost and the run goes on (`eprintln!` would panic there and end the run). While a progress bar is on
/// the terminal the line goes above it (see [`stderr_line`]).
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        $crate::stderr_line(format!($($arg)*).as_bytes());
    }};
}

/// The progress bar on the terminal, if one is drawn: what is written to standard error meanwhile goes above it.
static BAR: std::sync::Mutex<Option<indicatif::ProgressBar>> = std::sync::Mutex::new(None);

/// Draws what is written to standard error (by [`say!`] and the log lines) above `bar` until [`release_bar`].
pub(crate) fn hold_bar(bar: &indicatif::ProgressBar) {
    *BAR.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(bar.clone());
}

/// Ends [`hold_bar`].
pub(crate) fn release_bar() {
    *BAR.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
}

/// Writes `text` and a new line to standard error, with the progress bar (if one is drawn) hidden meanwhile and
/// drawn again below the text: without this a line written while the bar is drawn is glued to its end. A closed
/// standard error loses the text, not the run.
pub fn stderr_line(text: &[u8]) {
    use std::io::Write as _;
    let write = || {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(text);
        if !text.ends_with(b"\n") {
            let _ = err.write_all(b"\n");
        }
        let _ = err.flush();
    };
    // The bar is cloned out so that the lock is not held while it draws.
    let bar = BAR.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    match bar {
        Some(bar) if !bar.is_finished() => bar.suspend(write),
        _ => write(),
    }
}

/// Standard error for the log lines: one event's text is collected and written by [`stderr_line`] when the
/// logger drops the writer, so that a warning during a run goes above its progress bar.
#[derive(Default)]
pub(crate) struct StderrEvent(Vec<u8>);

impl std::io::Write for StderrEvent {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for StderrEvent {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            stderr_line(&self.0);
        }
    }
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

    /// A terminal that records what a progress bar does to it.
    #[derive(Debug, Default, Clone)]
    struct Screen(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

    impl Screen {
        fn log(&self, what: String) -> std::io::Result<()> {
            self.0.lock().unwrap().push(what);
            Ok(())
        }
    }

    impl indicatif::TermLike for Screen {
        fn width(&self) -> u16 {
            80
        }
        fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
            self.log(format!("up {n}"))
        }
        fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
            self.log(format!("down {n}"))
        }
        fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
            self.log(format!("right {n}"))
        }
        fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
            self.log(format!("left {n}"))
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.log(format!("line {s}"))
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            self.log(format!("str {s}"))
        }
        fn clear_line(&self) -> std::io::Result<()> {
            self.log("clear".into())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_line_said_while_a_bar_is_drawn_goes_above_it() {
        let screen = Screen::default();
        let bar = indicatif::ProgressBar::with_draw_target(
            Some(10),
            indicatif::ProgressDrawTarget::term_like(Box::new(screen.clone())),
        );
        bar.tick();
        // The default style draws the count: each draw of the bar writes `0/10` once.
        let drawn = || screen.0.lock().unwrap().iter().filter(|l| l.contains("0/10")).count();
        let cleared = || screen.0.lock().unwrap().iter().filter(|l| *l == "clear").count();
        assert_eq!(drawn(), 1, "{:?}", screen.0.lock().unwrap());
        let before = cleared();
        hold_bar(&bar);
        // A log line (the logger's writer) and a said line: each hides the bar and draws it again below.
        let mut event = StderrEvent::default();
        std::io::Write::write_all(&mut event, b"warning: a log line\n").unwrap();
        drop(event);
        say!("loading a model");
        release_bar();
        assert!(cleared() >= before + 2, "the bar was not hidden: {:?}", screen.0.lock().unwrap());
        assert_eq!(drawn(), 3, "the bar was not drawn again: {:?}", screen.0.lock().unwrap());
        // Released: a line no longer touches the bar.
        say!("after the run");
        assert_eq!(drawn(), 3);
    }

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
