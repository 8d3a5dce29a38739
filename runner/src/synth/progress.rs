//! Progress of writing a checkpoint's weights: a real-size one is 16 GB, minutes of writing. A bar on a terminal,
//! otherwise a line per weight file (and one every [`LINE_EVERY`] within a long file), as the sweep's progress;
//! nothing for checkpoints under [`Report::min_bytes`] (a tiny one is written in milliseconds).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use indicatif::HumanBytes;

/// Weights of fewer bytes are written without a word (the `small` preset is a few MB).
pub const PROGRESS_MIN_BYTES: u64 = 256 << 20;

/// Within a long weight file, a progress line at most this often (where there is no bar).
const LINE_EVERY: Duration = Duration::from_secs(30);

/// How writing a synthetic checkpoint reports its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// Report at all (off: `--quiet`).
    pub enabled: bool,
    /// Checkpoints whose weight files hold fewer bytes are written without a word.
    pub min_bytes: u64,
}

impl Report {
    /// No progress output.
    pub const QUIET: Report = Report { enabled: false, min_bytes: u64::MAX };

    /// Progress on standard error (when `enabled`) for checkpoints of [`PROGRESS_MIN_BYTES`] or more.
    pub fn stderr(enabled: bool) -> Report {
        Report { enabled, min_bytes: PROGRESS_MIN_BYTES }
    }
}

impl Default for Report {
    fn default() -> Report {
        Report::stderr(true)
    }
}

/// Where a [`Meter`] reports.
enum Out<'a> {
    Off,
    Bar(indicatif::ProgressBar),
    /// Lines on standard error.
    Stderr,
    /// Lines to a test's buffer.
    Sink(&'a mut dyn FnMut(String)),
}

/// The progress of one checkpoint's weight files.
pub(super) struct Meter<'a> {
    total: u64,
    files: usize,
    file: usize,
    done: u64,
    started: Instant,
    last_line: Instant,
    out: Out<'a>,
}

impl<'a> Meter<'a> {
    /// Starts reporting `files` weight files of `total` bytes for `repo_id` (nothing when `report` says so), on
    /// standard error, or to `sink` (no bar then).
    pub(super) fn start(
        report: Report,
        repo_id: &str,
        total: u64,
        files: usize,
        sink: Option<&'a mut dyn FnMut(String)>,
    ) -> Meter<'a> {
        let now = Instant::now();
        let out = if !report.enabled || total < report.min_bytes {
            Out::Off
        } else if let Some(sink) = sink {
            Out::Sink(sink)
        } else if std::io::stderr().is_terminal() {
            let bar = indicatif::ProgressBar::new(total);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}, eta {eta}  {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            Out::Bar(bar)
        } else {
            Out::Stderr
        };
        let mut meter = Meter { total, files, file: 0, done: 0, started: now, last_line: now, out };
        let plural = if files == 1 { "" } else { "s" };
        meter.line(format!(
            "writing synthetic weights for {repo_id}: {} in {files} file{plural} (random values, the real layout)",
            HumanBytes(total)
        ));
        meter
    }

    fn line(&mut self, text: String) {
        self.last_line = Instant::now();
        match &mut self.out {
            Out::Off => {}
            Out::Bar(bar) => bar.println(text),
            Out::Stderr => crate::say!("{text}"),
            Out::Sink(sink) => sink(text),
        }
    }

    /// "X of Y (Z%), R/s, eta E s".
    fn so_far(&self) -> String {
        let secs = self.started.elapsed().as_secs_f64();
        let rate = self.done as f64 / secs.max(1e-3);
        let eta = self.total.saturating_sub(self.done) as f64 / rate.max(1.0);
        format!(
            "{} of {} ({:.0}%), {}/s, eta {eta:.0} s",
            HumanBytes(self.done),
            HumanBytes(self.total),
            100.0 * self.done as f64 / self.total.max(1) as f64,
            HumanBytes(rate as u64)
        )
    }

    /// A weight file begins.
    pub(super) fn begin_file(&mut self, name: &str) {
        self.file += 1;
        if let Out::Bar(bar) = &self.out {
            bar.set_message(format!("[{}/{}] {name}", self.file, self.files));
        }
    }

    /// `n` more bytes are written.
    fn add(&mut self, n: usize) {
        self.done += n as u64;
        match &self.out {
            Out::Off => {}
            Out::Bar(bar) => bar.set_position(self.done),
            Out::Stderr | Out::Sink(_) => {
                if self.last_line.elapsed() >= LINE_EVERY {
                    let text = format!("  [{}/{}] {}", self.file, self.files, self.so_far());
                    self.line(text);
                }
            }
        }
    }

    /// A weight file of `bytes` is written (synced and in the cache's blobs).
    pub(super) fn end_file(&mut self, name: &str, bytes: u64) {
        if matches!(self.out, Out::Off | Out::Bar(_)) {
            return;
        }
        let text = format!("  [{}/{}] {name}: {} written; {}", self.file, self.files, HumanBytes(bytes), self.so_far());
        self.line(text);
    }

    /// The checkpoint is complete.
    pub(super) fn finish(&mut self, snapshot: &std::path::Path) {
        if let Out::Bar(bar) = &self.out {
            bar.finish_and_clear();
        }
        let text = format!(
            "wrote {} of synthetic weights in {:.0} s: {}",
            HumanBytes(self.done),
            self.started.elapsed().as_secs_f64(),
            snapshot.display()
        );
        self.line(text);
    }

    /// A writer that counts what passes through `inner` into this meter.
    pub(super) fn counting<'m, W: Write + ?Sized>(&'m mut self, inner: &'m mut W) -> Counting<'m, 'a, W> {
        Counting { inner, meter: self }
    }
}

impl Drop for Meter<'_> {
    fn drop(&mut self) {
        // An error mid-way: the bar goes, the error says the rest.
        if let Out::Bar(bar) = &self.out
            && !bar.is_finished()
        {
            bar.finish_and_clear();
        }
    }
}

/// See [`Meter::counting`].
pub(super) struct Counting<'m, 'a, W: Write + ?Sized> {
    inner: &'m mut W,
    meter: &'m mut Meter<'a>,
}

impl<W: Write + ?Sized> Write for Counting<'_, '_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.meter.add(n);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
