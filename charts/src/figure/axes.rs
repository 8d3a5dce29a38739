//! The axes: linear, log (decades or powers of two) and categorical scales, their ticks and tick labels, numbers
//! written compactly.

use std::ops::Range;

use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ReversibleRanged, ValueFormatter};

use super::{Axis, ChartStyle};

/// A numeric range in drawing space (log10 of the value on a log axis) with explicit ticks.
#[derive(Debug, Clone)]
pub(super) struct Scaled {
    pub(super) range: Range<f64>,
    pub(super) ticks: Vec<f64>,
}

impl Ranged for Scaled {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = self.range.end - self.range.start;
        let t = if span > 0.0 { (value - self.range.start) / span } else { 0.5 };
        limit.0 + (t * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        let max = hint.max_num_points().max(1);
        let stride = self.ticks.len().div_ceil(max).max(1);
        self.ticks.iter().copied().step_by(stride).collect()
    }

    fn range(&self) -> Range<f64> {
        self.range.clone()
    }
}

impl ReversibleRanged for Scaled {
    fn unmap(&self, input: i32, limit: (i32, i32)) -> Option<f64> {
        if limit.0 == limit.1 {
            return None;
        }
        let t = f64::from(input - limit.0) / f64::from(limit.1 - limit.0);
        Some(self.range.start + t * (self.range.end - self.range.start))
    }
}

impl ValueFormatter<f64> for Scaled {
    fn format(value: &f64) -> String {
        fmt_num(*value)
    }
}

/// A number as an axis label: no trailing zeros, exponent form for very large or small values.
pub fn fmt_num(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let a = v.abs();
    if !(1e-3..1e6).contains(&a) {
        return format!("{v:.0e}");
    }
    let s = if a >= 100.0 { format!("{v:.0}") } else { format!("{v:.3}") };
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s }
}

/// A value in drawing space: log10 on a log axis; `None` when it cannot be drawn there.
pub(super) fn to_space(axis: &Axis, v: f64) -> Option<f64> {
    if !v.is_finite() {
        return None;
    }
    if axis.log { (v > 0.0).then(|| v.log10()) } else { Some(v) }
}

/// "Nice" linear ticks (1, 2, 5 x 10^k steps) covering `lo..hi`.
pub(super) fn nice_ticks(lo: f64, hi: f64, want: usize) -> Vec<f64> {
    let span = (hi - lo).max(f64::MIN_POSITIVE);
    let raw = span / want.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

/// Drawing-space range and ticks of an axis over drawing-space values `vals`.
pub(super) fn scaled(axis: &Axis, vals: &[f64], from_zero: bool) -> Scaled {
    if !axis.categories.is_empty() {
        let n = axis.categories.len();
        return Scaled { range: -0.5..n as f64 - 0.5, ticks: (0..n).map(|i| i as f64).collect() };
    }
    let (mut lo, mut hi) = vals.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(*v), b.max(*v)));
    if !lo.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    if from_zero && !axis.log {
        lo = lo.min(0.0);
    }
    let pad = if hi > lo {
        (hi - lo) * 0.08
    } else if axis.log {
        0.5
    } else {
        hi.abs().max(1.0) * 0.1
    };
    let (lo, hi) = (if from_zero && !axis.log && lo >= 0.0 { 0.0 } else { lo - pad }, hi + pad);
    let ticks = if axis.log {
        let (a, b) = (lo.ceil() as i32, hi.floor() as i32);
        let mut t: Vec<f64> = Vec::new();
        if axis.pow2 {
            let (p, q) = ((lo / 2f64.log10()).ceil() as i32, (hi / 2f64.log10()).floor() as i32);
            t.extend((p..=q).map(|e| f64::from(e) * 2f64.log10()));
        } else if b - a >= 2 {
            t.extend((a..=b).map(f64::from));
        } else {
            for d in (a - 1)..=b {
                for m in [1.0f64, 2.0, 5.0] {
                    let v = f64::from(d) + m.log10();
                    if v >= lo && v <= hi {
                        t.push(v);
                    }
                }
            }
        }
        t
    } else if axis.pow2 {
        // No batch size of 1.5.
        nice_ticks(lo, hi, 8).into_iter().filter(|t| (t - t.round()).abs() < 1e-9).map(f64::round).collect()
    } else {
        nice_ticks(lo, hi, 8)
    };
    Scaled { range: lo..hi, ticks }
}

/// Label of drawing-space tick `v` on `axis`.
pub(super) fn tick_label(axis: &Axis, v: f64) -> String {
    if !axis.categories.is_empty() {
        let i = v.round();
        return if i >= 0.0 { axis.categories.get(i as usize).cloned().unwrap_or_default() } else { String::new() };
    }
    if axis.log {
        let x = 10f64.powf(v);
        // Snap float noise (10^log10(64) = 63.99999...).
        let r = x.round();
        return fmt_num(if (x - r).abs() < 1e-6 * x.max(1.0) { r } else { x });
    }
    fmt_num(v)
}

/// The smallest size (CSS pixels) an axis' title shrinks to from its 14 px where it does not fit: 70%, or the
/// style's smallest text.
pub(super) fn axis_title_least(style: ChartStyle) -> f64 {
    (if style.min_text > 0.0 { style.min_text } else { 14.0 * 0.7 }).min(14.0)
}

/// An axis' title as drawn.
pub(super) fn axis_title(a: &Axis) -> String {
    if a.log { format!("{} (log scale)", a.label) } else { a.label.clone() }
}

#[cfg(test)]
mod tests {
    use super::super::Axis;
    use super::{fmt_num, nice_ticks, scaled, tick_label};

    #[test]
    fn numbers_format_compactly() {
        assert_eq!(fmt_num(1000.0), "1000");
        assert_eq!(fmt_num(2.5), "2.5");
        assert_eq!(fmt_num(0.125), "0.125");
        assert_eq!(fmt_num(2e7), "2e7");
        assert_eq!(nice_ticks(0.0, 10.0, 5), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
    }

    #[test]
    fn log_axes_tick_at_decades_or_powers_of_two() {
        let ax = Axis { pow2: true, ..Axis::numeric("K", true) };
        let sc = scaled(&ax, &[8f64.log10(), 64f64.log10()], false);
        let labels: Vec<String> = sc.ticks.iter().map(|t| tick_label(&ax, *t)).collect();
        assert_eq!(labels, ["8", "16", "32", "64"]);
        let ax = Axis::numeric("ms", true);
        let sc = scaled(&ax, &[0.0, 4.0], false);
        let labels: Vec<String> = sc.ticks.iter().map(|t| tick_label(&ax, *t)).collect();
        assert_eq!(labels, ["1", "10", "100", "1000", "10000"]);
    }

    #[test]
    fn linear_count_axes_tick_at_whole_numbers() {
        // Batch sizes 1 and 4 on a linear axis: 1, 2, 3, 4, not 1, 1.5, 2, ...
        let ax = Axis { pow2: true, ..Axis::numeric("B", false) };
        let labels: Vec<String> = scaled(&ax, &[1.0, 4.0], false).ticks.iter().map(|t| tick_label(&ax, *t)).collect();
        assert_eq!(labels, ["1", "2", "3", "4"]);
        let sc = scaled(&ax, &[1.0], false);
        assert_eq!(sc.ticks, [1.0]);
    }
}
