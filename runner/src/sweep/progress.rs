//! Progress of a sweep: a bar on a terminal, one line per cell otherwise (logs, SLURM output files).

use std::io::IsTerminal;
use std::time::Instant;

use metrics::derive;
use schema::bundle::{Cell, CellKey, CellStatus};

/// Progress: a bar on a terminal, one line per cell otherwise (logs, SLURM output files).
pub(super) struct Progress {
    total: usize,
    done: usize,
    /// Cells done by earlier attempts: not part of this process's rate.
    resumed: usize,
    started: Instant,
    bar: Option<indicatif::ProgressBar>,
    enabled: bool,
}

impl Progress {
    pub(super) fn new(total: usize, done: usize, enabled: bool) -> Progress {
        let bar = (enabled && std::io::stderr().is_terminal()).then(|| {
            let bar = indicatif::ProgressBar::new(total as u64);
            bar.set_position(done as u64);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:30}] {pos}/{len} cells, eta {eta}  {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar
        });
        Progress { total, done, resumed: done, started: Instant::now(), bar, enabled }
    }

    pub(super) fn start(&mut self, key: &CellKey) {
        if let Some(bar) = &self.bar {
            bar.set_message(key.to_string());
        }
    }

    pub(super) fn finish(&mut self, cell: &Cell) {
        self.done += 1;
        if let Some(bar) = &self.bar {
            bar.inc(1);
            return;
        }
        if !self.enabled {
            return;
        }
        let elapsed = self.started.elapsed().as_secs_f64();
        let eta = elapsed / (self.done - self.resumed).max(1) as f64 * (self.total - self.done) as f64;
        let what = match (&cell.status, derive::cell_summary(cell).e2e_ms) {
            (CellStatus::Ok, Some(s)) => format!("median {:.1} ms over {} runs", s.median, s.n),
            (CellStatus::Ok, None) => "ok, no timing".to_string(),
            (CellStatus::Oom { message }, _) => format!("OUT OF MEMORY: {message}"),
            (CellStatus::Error { message }, _) => format!("FAILED: {message}"),
            (CellStatus::Skipped { reason }, _) => format!("skipped: {reason}"),
        };
        crate::say!("[{}/{}] {}: {what} (eta {:.0} s)", self.done, self.total, cell.key, eta);
    }

    pub(super) fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
