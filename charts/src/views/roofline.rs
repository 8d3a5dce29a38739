//! The roofline: the achieved FLOP rate against arithmetic intensity, with the device's ceilings.

use std::fmt::Write as _;

use crate::bundle::LoadedBundle;
use crate::figure::{self, Axis, CellId, Figure, Mark, Plot, Series, Style};

use super::choices::kept;
use super::options::{Filters, Options};
use super::series::{Palette, key_text, push_mark, series_label, sig, sort_marks, tag};

/// The message of the roofline view for bundles without the work counts.
pub const NO_ROOFLINE: &str = "No roofline data in this bundle: its repetitions do not record the weights read and \
     the FLOP count (schema 1.2 and later do), so the achieved bandwidth and FLOP rate cannot be shown.";

pub(super) fn roofline(
    bundles: &[&LoadedBundle],
    f: &Filters,
    o: &Options,
    notes: &mut Vec<String>,
) -> Result<Figure, String> {
    if !bundles.iter().any(|lb| metrics::roofline::has_roofline(&lb.bundle)) {
        return Err(NO_ROOFLINE.into());
    }
    // Ceilings: what the user entered, else what the (first) bundle's run measured on its device.
    let recorded: Vec<(usize, &schema::bundle::DevicePeaks)> =
        bundles.first().map(|lb| metrics::roofline::recorded_peaks(&lb.bundle)).unwrap_or_default();
    let measured = recorded.first().map(|&(_, p)| p);
    let peak_bw = o.peak_bw_tbs.map(|v| v * 1e12).or(measured.map(|p| p.copy_bytes_per_s));
    let peak_flops = o.peak_tflops.map(|v| v * 1e12).or(measured.map(|p| p.matmul_flops_per_s));
    // Every successful cell is a point: the others are named, as every view names what it leaves out.
    notes.extend(super::not_drawn(bundles, f, "every shape", &|_: &schema::Cell| true, (true, true)));
    let mut pal = Palette::of(bundles, o);
    let mut series = Vec::new();
    let (mut x_lo, mut x_hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for (bi, lb) in bundles.iter().enumerate() {
        let t = tag(bi, bundles.len());
        for p in metrics::roofline::roofline_points(&kept(lb, f)) {
            let c = &lb.bundle.cells[p.cell];
            x_lo = x_lo.min(p.intensity);
            x_hi = x_hi.max(p.intensity);
            // Four significant figures, rates in the legend's units (TFLOP/s, TB/s), counts in exponent form.
            let mut tip = format!(
                "{}\narithmetic intensity {} FLOP/byte\nachieved {} TFLOP/s, {} TB/s of weights\n{} FLOPs, {} bytes \
                 of weights read, L_e2e median {} ms",
                key_text(&t, c),
                sig(p.intensity, 4),
                sig(p.flops_per_s / 1e12, 4),
                sig(p.bytes_per_s / 1e12, 4),
                sig(p.flop_count as f64, 4),
                sig(p.weights_read_bytes as f64, 4),
                sig(p.e2e_ms, 4)
            );
            if let Some(roof) = metrics::roofline::attainable_flops_per_s(p.intensity, peak_bw, peak_flops) {
                let _ = write!(
                    tip,
                    "\n{:.1}% of the roofline ({} TFLOP/s)",
                    100.0 * p.flops_per_s / roof,
                    sig(roof / 1e12, 4)
                );
            }
            let mark = Mark {
                x: p.intensity,
                y: p.flops_per_s / 1e12,
                lo: None,
                hi: None,
                tip,
                cell: Some(CellId { bundle: bi, cell: p.cell }),
                label: None,
            };
            push_mark(&mut series, format!("{t}{}", series_label(c)), pal.colour(c), Style::Points, bi > 0, mark);
        }
    }
    if series.is_empty() {
        return Err("no successful cell with recorded work (weights read, FLOPs) matches the filters".into());
    }
    sort_marks(&mut series);
    if peak_bw.is_some() || peak_flops.is_some() {
        // The ceiling over the points' intensities (a factor 2 beyond them), through the ridge point.
        let (a, b) = (x_lo / 2.0, x_hi * 2.0);
        let mut xs = vec![a, b];
        if let (Some(bw), Some(fl)) = (peak_bw, peak_flops)
            && let Some(r) = metrics::roofline::ridge_intensity(bw, fl)
            && r > a
            && r < b
        {
            xs.insert(1, r);
        }
        let marks = xs
            .into_iter()
            .filter_map(|x| {
                let y = metrics::roofline::attainable_flops_per_s(x, peak_bw, peak_flops)? / 1e12;
                Some(Mark { x, y, lo: None, hi: None, tip: String::new(), cell: None, label: None })
            })
            .collect();
        let source = |entered: bool| if entered { "entered" } else { "measured" };
        let mut what = Vec::new();
        what.extend(peak_bw.map(|v| format!("{} TB/s {}", figure::fmt_num(v / 1e12), source(o.peak_bw_tbs.is_some()))));
        what.extend(
            peak_flops.map(|v| format!("{} TFLOP/s {}", figure::fmt_num(v / 1e12), source(o.peak_tflops.is_some()))),
        );
        series.insert(
            0,
            Series {
                label: format!("roofline ({})", what.join(", ")),
                colour: figure::FRONTIER,
                style: Style::Frontier,
                alt: false,
                marks,
                facet: 0,
            },
        );
        if let Some(p) = measured.filter(|_| o.peak_bw_tbs.is_none() || o.peak_tflops.is_none()) {
            let (i, _) = recorded[0];
            let device = &bundles[0].bundle.provenance.executions[i].device;
            notes.push(format!(
                "Ceilings measured by the run on its device ({}) before its first cell: copy bandwidth {} TB/s (read + \
                 write, a {} MiB device-to-device copy) and matmul rate {} TFLOP/s ({n}x{n}x{n}, {}), medians of {}; \
                 enter peaks above to override them.",
                device.name.as_deref().unwrap_or(&device.kind),
                figure::fmt_num(p.copy_bytes_per_s / 1e12),
                p.copy_bytes >> 20,
                figure::fmt_num(p.matmul_flops_per_s / 1e12),
                p.dtype,
                p.repetitions,
                n = p.matmul_size,
            ));
            // Other executions, or a compared bundle's run, may have measured other ceilings: only one roofline
            // is drawn.
            let others = bundles.iter().flat_map(|lb| metrics::roofline::recorded_peaks(&lb.bundle));
            if others.map(|(_, q)| q).any(|q| q != p) {
                notes.push(
                    "Other executions or bundles measured other ceilings; the main bundle's first are drawn (enter \
                     peaks above to compare every point with the same roofline)."
                        .into(),
                );
            }
        }
        if o.peak_bw_tbs.is_some() || o.peak_tflops.is_some() {
            notes.push("Ceilings you entered replace the measured ones.".into());
        }
    } else {
        // Why: another tool (a reference run) measures none; the runner before 1.4 did not; a runner's run whose
        // probes failed, or that did not run them, none either.
        let p = &bundles[0].bundle.provenance;
        let why = if !p.by_runner() {
            format!("{} does not measure them", p.tool)
        } else if bundles[0].bundle.schema_version < schema::SchemaVersion::V1_4 {
            "runners before format 1.4 did not measure them".to_string()
        } else {
            "its run did not measure them, or its probes failed".to_string()
        };
        notes.push(format!(
            "Achieved rates without ceilings: this bundle does not record its device's peaks ({why}). Enter the peak \
             bandwidth (TB/s) and peak FLOP rate (TFLOP/s) above to draw the roofline."
        ));
    }
    notes.push(
        "One point per successful cell kept by the filters (all B, N and K): analytic FLOPs and bytes of weights \
         read (metrics::roofline) over the median end-to-end latency."
            .into(),
    );
    Ok(Figure {
        title: "Roofline: achieved FLOP rate against arithmetic intensity".into(),
        plot: Plot::Xy {
            x: Axis::numeric("arithmetic intensity (FLOP/byte of weights read)", true),
            y: Axis::numeric("achieved FLOP rate (TFLOP/s)", true),
            series,
            refs: Vec::new(),
            grid: None,
        },
    })
}
