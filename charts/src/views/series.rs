//! Series and their marks: names of samplers and models, series and point labels, legend tags of compared bundles,
//! the colours (palettes stable across bundles and facets), tooltips' texts.

use std::fmt::Write as _;

use metrics::derive::Summary;
use schema::grid::SamplerVariant;
use schema::key::Threshold;
use schema::{Cell, Sampler};

use crate::bundle::LoadedBundle;
use crate::figure::{self, Axis, Mark, Series, Style};

use super::options::Options;

/// The serde name of a sampler (`ar_greedy`, ...): [`Sampler::name`].
pub fn sampler_name(s: Sampler) -> &'static str {
    s.name()
}

pub(super) fn sampler_label(s: Sampler) -> &'static str {
    match s {
        Sampler::ArGreedy => "autoregressive",
        Sampler::LladaLowConfidence => "low-confidence remasking",
        Sampler::LladaRandom => "random remasking",
        Sampler::DreamOrigin => "origin",
        Sampler::DreamMaskgitPlus => "maskgit_plus",
        Sampler::DreamTopkMargin => "topk_margin",
        Sampler::DreamEntropy => "entropy",
    }
}

/// Tag of a loaded bundle in legends: `A` and `B` when two are compared, nothing otherwise.
pub(super) fn tag(bi: usize, n: usize) -> String {
    if n > 1 { format!("[{}] ", ["A", "B"].get(bi).copied().unwrap_or("?")) } else { String::new() }
}

/// A series' identity: model, sampler, block length (diffusion variants).
pub(super) fn series_label(c: &Cell) -> String {
    let k = &c.key;
    let mut s = format!("{} ({})", short_model(&k.model), sampler_label(k.sampler));
    if let Some(b) = k.block_length {
        let _ = write!(s, " block {b}");
    }
    if let Some(v) = k.variant().filter(|v| *v != SamplerVariant::Reference) {
        let _ = write!(s, " {v}");
    }
    s
}

/// A diffusion point's label: `K=8`, or `t=0.9` for a threshold cell.
pub(super) fn point_label(c: &Cell, steps: u32) -> String {
    match c.key.threshold {
        Some(t) => format!("t={t}"),
        None => format!("K={steps}"),
    }
}

/// The x axis of diffusion steps: K, and a threshold series' measured forwards when one is drawn.
pub(super) fn steps_axis(series: &[Series]) -> Axis {
    let thresholds =
        series.iter().flat_map(|s| &s.marks).any(|m| m.label.as_deref().is_some_and(|l| l.starts_with("t=")));
    let title = if thresholds { "diffusion steps K (thresholds: forwards measured)" } else { "diffusion steps K" };
    Axis { pow2: true, ..Axis::numeric(title, true) }
}

/// `v` to `digits` significant figures: fixed-point within 1e-6..1e6, exponent form outside (a count of FLOPs, an
/// absurd value from a hand-edited bundle), never hundreds of digits.
pub(super) fn sig(v: f64, digits: usize) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let digits = digits.max(1);
    let mag = v.abs().log10().floor() as i32;
    if !(-6..6).contains(&mag) {
        return format!("{:.*e}", digits - 1, v);
    }
    let decimals = (digits as i32 - 1 - mag).max(0) as usize;
    format!("{v:.decimals$}")
}

/// The model id without its organisation (`GSAI-ML/LLaDA-8B-Instruct` -> `LLaDA-8B-Instruct`).
pub fn short_model(id: &str) -> &str {
    id.rsplit('/').next().unwrap_or(id)
}

/// Colour index per series identity, stable across bundles (compared bundles share colours): the series are
/// numbered in the order the chart meets them, or for small multiples in the order the bundles' cells first show
/// them, so that a series keeps its colour in every facet. (One chart does without that pass over every cell: a
/// few milliseconds of each redraw on a 10,000-cell bundle.) A series is told by its model, sampler, block length
/// and variant (what [`series_label`] writes), compared without writing its label.
pub(super) struct Palette<'a>(Vec<(&'a str, Sampler, Option<u32>, Option<SamplerVariant>)>);

impl<'a> Palette<'a> {
    pub(super) fn of(bundles: &[&'a LoadedBundle], o: &Options) -> Self {
        let mut p = Palette(Vec::new());
        for lb in bundles.iter().filter(|_| o.multiples) {
            lb.bundle.cells.iter().for_each(|c| {
                p.colour(c);
            });
        }
        p
    }

    pub(super) fn colour(&mut self, c: &'a Cell) -> usize {
        if c.key.sampler == Sampler::ArGreedy {
            return figure::AR;
        }
        let k = &c.key;
        let id = (k.model.as_str(), k.sampler, k.block_length, k.variant());
        match self.0.iter().position(|x| *x == id) {
            Some(i) => i,
            None => {
                self.0.push(id);
                self.0.len() - 1
            }
        }
    }
}

pub(super) fn ms(s: &Summary) -> String {
    format!("median {:.2} ms (min {:.2}, max {:.2}, n = {})", s.median, s.min, s.max, s.n)
}

pub(super) fn key_text(tag: &str, c: &Cell) -> String {
    format!("{tag}{}", c.key)
}

pub(super) fn push_mark(series: &mut Vec<Series>, label: String, colour: usize, style: Style, alt: bool, mark: Mark) {
    match series.iter_mut().find(|s| s.label == label) {
        Some(s) => s.marks.push(mark),
        None => series.push(Series { label, colour, style, alt, marks: vec![mark], facet: 0 }),
    }
}

pub(super) fn sort_marks(series: &mut [Series]) {
    for s in series {
        s.marks.sort_by(|a, b| a.x.total_cmp(&b.x));
    }
}

/// Colour index per (series, K or threshold) for the throughput charts, where each K and each threshold of a series
/// is a series of its own (the legend names each): numbered in the order met, or for small multiples over every cell
/// first, as [`Palette`] numbers the series; black for the AR model.
pub(super) struct PointPalette<'a>(Palette<'a>, Vec<(usize, Option<u32>, Option<Threshold>)>);

impl<'a> PointPalette<'a> {
    pub(super) fn of(bundles: &[&'a LoadedBundle], o: &Options) -> Self {
        let mut p = PointPalette(Palette(Vec::new()), Vec::new());
        for lb in bundles.iter().filter(|_| o.multiples) {
            lb.bundle.cells.iter().for_each(|c| {
                p.colour(c);
            });
        }
        p
    }

    pub(super) fn colour(&mut self, c: &'a Cell) -> usize {
        let series = self.0.colour(c);
        if series == figure::AR {
            return figure::AR;
        }
        let id = (series, c.key.steps, c.key.threshold);
        match self.1.iter().position(|x| *x == id) {
            Some(i) => i,
            None => {
                self.1.push(id);
                self.1.len() - 1
            }
        }
    }
}

/// What tells a throughput series' cells apart within a sampler series: ` K=64`, ` t=0.9`, nothing for AR.
pub(super) fn point_suffix(steps: Option<u32>, threshold: Option<Threshold>) -> String {
    match (steps, threshold) {
        (Some(k), _) => format!(" K={k}"),
        (None, Some(t)) => format!(" t={t}"),
        (None, None) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::sig;

    #[test]
    fn significant_figures_never_print_hundreds_of_digits() {
        assert_eq!(sig(6.19904, 4), "6.199");
        assert_eq!(sig(1615.0104, 4), "1615");
        assert_eq!(sig(0.0123, 4), "0.01230");
        assert_eq!(sig(7_374_492_401_664.0, 4), "7.374e12");
        assert_eq!(sig(1e300, 4), "1.000e300");
        assert_eq!(sig(0.0, 4), "0");
    }
}
