//! Progress of a sweep: a bar on a terminal, one line per cell otherwise (logs, SLURM output files).

use std::io::IsTerminal;
use std::time::Instant;

use metrics::derive;
use schema::bundle::{Cell, CellKey, CellStatus};

/// Progress: a bar on a terminal, one line per cell otherwise (logs, SLURM output files).
///
/// The estimate of the time left weighs the cells left by their cost (`shard::cost`: B x NFE x N), at the time per
/// unit of cost this process measured for cells of the same kind (autoregressive or diffusion: their kernels differ
/// too much for one rate), counting only the time inside cells (model loads and an earlier attempt's cells are not
/// a rate). The plan runs cheap cells first, so a count of cells left would say far too little; and until a kind
/// with cells left has run one, the estimate is said to be unknown (the other kind's rate is no guide: a tiny
/// model's AR cells gave a diffusion grid 1 s where 25 s were left). The scoring by the evaluators after the cells
/// is not in it.
pub(super) struct Progress {
    total: usize,
    done: usize,
    /// Cost left, and (cost done, seconds spent) in this process, per kind: [autoregressive, diffusion].
    left: [u64; 2],
    measured: [(u64, f64); 2],
    cell_started: Option<Instant>,
    bar: Option<indicatif::ProgressBar>,
    enabled: bool,
}

fn kind(key: &CellKey) -> usize {
    usize::from(key.sampler != schema::Sampler::ArGreedy)
}

impl Progress {
    /// `todo`: the cells this process is to measure; `total` and `done`: the plan's count and the cells done
    /// before it.
    pub(super) fn new(todo: &[CellKey], total: usize, done: usize, enabled: bool) -> Progress {
        let bar = (enabled && std::io::stderr().is_terminal()).then(|| {
            // The time left is ours (`eta_text`, by cost), not the bar's count of cells. The style is set before
            // the first draw (`set_position` draws).
            let style =
                indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} cells, {msg}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            let bar = indicatif::ProgressBar::new(total as u64).with_style(style);
            bar.set_position(done as u64);
            crate::hold_bar(&bar);
            bar
        });
        let mut left = [0u64; 2];
        for k in todo {
            left[kind(k)] += crate::shard::cost(k);
        }
        Progress { total, done, left, measured: [(0, 0.0); 2], cell_started: None, bar, enabled }
    }

    pub(super) fn start(&mut self, key: &CellKey) {
        self.cell_started = Some(Instant::now());
        if let Some(bar) = &self.bar {
            bar.set_message(format!("{}  {key}", self.eta_text()));
        }
    }

    /// Seconds left: each kind's cost left at its measured rate; `None` while a kind with cost left has none.
    fn eta(&self) -> Option<f64> {
        let rate = |(cost, secs): (u64, f64)| (cost > 0).then(|| secs / cost as f64);
        (0..2)
            .map(|k| if self.left[k] == 0 { Some(0.0) } else { Some(self.left[k] as f64 * rate(self.measured[k])?) })
            .sum()
    }

    /// [`Self::eta`] as the progress lines say it: `eta 43 s`, `eta 12 min`, `eta 2.5 h`, or why not yet.
    fn eta_text(&self) -> String {
        match self.eta() {
            None => "eta not known yet: not every kind of cell has run".into(),
            Some(s) if s < 120.0 => format!("eta {s:.0} s"),
            Some(s) if s < 7200.0 => format!("eta {:.0} min", s / 60.0),
            Some(s) => format!("eta {:.1} h", s / 3600.0),
        }
    }

    pub(super) fn finish(&mut self, cell: &Cell) {
        self.done += 1;
        let k = kind(&cell.key);
        let cost = crate::shard::cost(&cell.key);
        self.left[k] = self.left[k].saturating_sub(cost);
        if let Some(t) = self.cell_started.take() {
            self.measured[k].0 += cost;
            self.measured[k].1 += t.elapsed().as_secs_f64();
        }
        if !self.enabled {
            return;
        }
        let what = match (&cell.status, derive::cell_summary(cell).e2e_ms) {
            (CellStatus::Ok, Some(s)) => format!("median {:.1} ms over {}", s.median, crate::counted(s.n, "run")),
            (CellStatus::Ok, None) => "ok, no timing".to_string(),
            // The runner's message starts "out of memory at B=...": said once, in capitals.
            (CellStatus::Oom { message }, _) => match message.strip_prefix("out of memory") {
                Some(rest) => format!("OUT OF MEMORY{rest}"),
                None => format!("OUT OF MEMORY: {message}"),
            },
            (CellStatus::Error { message }, _) => format!("FAILED: {message}"),
            (CellStatus::Skipped { reason }, _) => format!("skipped: {reason}"),
        };
        let line = format!("[{}/{}] {}: {what} ({})", self.done, self.total, cell.key, self.eta_text());
        match &self.bar {
            // On a terminal the bar counts the cells; a cell that did not measure is said above it, once.
            Some(bar) => {
                bar.inc(1);
                if cell.status != CellStatus::Ok {
                    bar.println(line);
                }
            }
            None => crate::say!("{line}"),
        }
    }

    pub(super) fn done(&self) {
        // The bar stays held until the drop releases it: a line said meanwhile no longer draws a finished bar.
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    /// Releases the bar (`crate::hold_bar`); a sweep that ends in an error leaves it where it stopped, and later
    /// lines below it.
    fn drop(&mut self) {
        if let Some(bar) = self.bar.take() {
            crate::release_bar();
            if !bar.is_finished() {
                bar.abandon();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use schema::Sampler;

    fn key(sampler: Sampler, steps: Option<u32>, n: u32) -> CellKey {
        CellKey {
            model: "m".into(),
            sampler,
            steps,
            batch_size: 1,
            seq_len: n,
            prompt_tokens: n - 32,
            output_tokens: 32,
            block_length: steps.map(|_| 32),
            cache: None,
            threshold: None,
        }
    }

    #[test]
    fn the_time_left_weighs_each_kind_of_cell_left_at_its_own_rate() {
        let ar = key(Sampler::ArGreedy, None, 64);
        let small = key(Sampler::LladaLowConfidence, Some(8), 64);
        let big = key(Sampler::LladaLowConfidence, Some(32), 128);
        let mut p = Progress::new(&[ar.clone(), small.clone(), big.clone()], 3, 0, false);
        // Nothing measured yet: no rate, no estimate.
        assert_eq!(p.eta(), None);
        // The AR cell took 1 s: the diffusion cells, not measured yet, have no rate of their own (the AR one is no
        // guide), so the time left is not known yet.
        p.left[0] -= crate::shard::cost(&ar);
        p.measured[0] = (crate::shard::cost(&ar), 1.0);
        assert_eq!(p.eta(), None);
        assert!(p.eta_text().starts_with("eta not known yet"), "{}", p.eta_text());
        // The small diffusion cell took 2 s: the big one (8x its cost) is estimated at the diffusion rate, 16 s,
        // where a count of cells left would say the mean so far, 1.5 s.
        p.left[1] -= crate::shard::cost(&small);
        p.measured[1] = (crate::shard::cost(&small), 2.0);
        assert_eq!(crate::shard::cost(&big), 8 * crate::shard::cost(&small));
        assert!((p.eta().expect("both kinds measured") - 16.0).abs() < 1e-9, "{:?}", p.eta());
        assert_eq!(p.eta_text(), "eta 16 s");
        // Nothing left: 0, whatever was measured.
        p.left[1] = 0;
        assert_eq!(p.eta(), Some(0.0));
    }
}
