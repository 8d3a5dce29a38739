//! The figures' layout as a journal prints them (issue 30, item 5), drawn from the committed H200 bundles (the runner's
//! and the HF reference's, compared): small multiples across the whole width with their legend under them, point
//! labels that never overprint each other, the markers or a legend, at a printed single column's width (3.5 in,
//! 336 SVG pixels), a double column's (7 in, 672) and a screen's (1000 px).

use charts::bundle::{LoadedBundle, load_bundle};
use charts::figure::{
    self, Axis, CellId, ChartStyle, Drawn, Figure, MIN_PLOT_HEIGHT, Mark, Plot, RefLine, Series, Style, TextBox,
};
use charts::views::{Filters, Options, ViewKind, chart_view};
use plotters::prelude::*;

const RUNNER: &str = include_str!("../../results/gpu_primary-h200-runner-20261126.json");
const REFERENCE: &str = include_str!("../../results/gpu_primary-h200-hf-eager-20261126.json");

/// `dllm-bench figures`' style (the runner's `print_style`): SVG text widths corrected, no text under 7 pt.
fn print() -> ChartStyle {
    ChartStyle { text_width: 1.3, min_text: 7.0 / 72.0 * 96.0 * 1.24, ..ChartStyle::default() }
}

fn bundles() -> (LoadedBundle, LoadedBundle) {
    (
        load_bundle("gpu_primary-h200-runner-20261126.json", RUNNER).expect("the runner's bundle loads"),
        load_bundle("gpu_primary-h200-hf-eager-20261126.json", REFERENCE).expect("the reference's bundle loads"),
    )
}

fn draw(fig: &Figure, width: u32, style: ChartStyle) -> (String, Drawn, u32) {
    let height = fig.height_for(width, style);
    let mut out = String::new();
    let drawn = {
        let root = SVGBackend::with_string(&mut out, (width, height)).into_drawing_area();
        figure::draw(&root, fig, style).expect("draws")
    };
    (out, drawn, height)
}

/// No two of `boxes` share a pixel.
fn apart(what: &str, boxes: &[TextBox]) {
    for (i, a) in boxes.iter().enumerate() {
        for b in &boxes[i + 1..] {
            assert!(!a.overlaps(b), "{what}: {:?} at {:?} overprints {:?} at {:?}", a.text, a.rect, b.text, b.rect);
        }
    }
}

/// The points of an x/y figure labelled `text` (any label: "").
fn labelled(fig: &Figure, text: &str) -> usize {
    let Plot::Xy { series, .. } = &fig.plot else { return 0 };
    let is = |l: &String| text.is_empty() || l == text;
    series.iter().flat_map(|s| &s.marks).filter(|m| m.label.as_ref().is_some_and(is)).count()
}

#[test]
fn point_labels_never_overprint_and_the_k32_labels_of_a_and_b_both_show() {
    let (a, b) = bundles();
    let both = [&a, &b];
    for multiples in [false, true] {
        let options = Options { multiples, ..Options::default() };
        let cv = chart_view(ViewKind::Latency, &both, &Filters::default(), &options);
        let fig = cv.figure.expect("latency vs steps draws");
        for (width, style) in [(336, print()), (672, print()), (1000, ChartStyle::default())] {
            let (_, d, _) = draw(&fig, width, style);
            let what = format!("multiples {multiples}, {width} px");
            apart(&what, &d.labels);
            // Nor over a legend, nor past the figure.
            for l in &d.labels {
                for g in &d.legends {
                    assert!(!l.overlaps(g), "{what}: {:?} at {:?} under the legend {:?}", l.text, l.rect, g.rect);
                }
                assert!(l.rect[0] >= 0 && l.rect[2] <= width as i32, "{what}: {:?} at {:?}", l.text, l.rect);
            }
            // Both K = 32 labels ([A] and [B] at nearly the same point) find room in every chart; of the others
            // nearly all (a label with no free place is left out).
            let k32 = d.labels.iter().filter(|l| l.text == "K=32").count();
            assert_eq!(k32, labelled(&fig, "K=32"), "{what}: {:?}", d.labels);
            assert!(d.labels.len() * 10 >= labelled(&fig, "") * 9, "{what}: {:?}", d.labels);
        }
    }
}

#[test]
fn small_multiples_span_the_width_with_the_legend_under_them() {
    let (a, b) = bundles();
    let options = Options { multiples: true, ..Options::default() };
    let fig = chart_view(ViewKind::Latency, &[&a, &b], &Filters::default(), &options).figure.expect("draws");
    for (width, style) in [(336, print()), (672, print()), (1000, ChartStyle::default()), (1400, ChartStyle::default())]
    {
        let (_, d, height) = draw(&fig, width, style);
        let w = width as i32;
        // The right column's points reach into the right fifth of the figure (they took the left half before).
        let right = d.hits.iter().map(|h| h.x).max().expect("points");
        assert!(right > w * 4 / 5, "{width} px: the rightmost point at {right}");
        // One legend, across the width under every facet, inside the figure.
        let [legend] = d.legends.as_slice() else { panic!("{width} px: legends {:?}", d.legends) };
        let lowest = d.hits.iter().map(|h| h.y1).max().expect("points");
        assert!(legend.rect[1] > lowest, "{width} px: the legend {:?} is not under the points", legend.rect);
        assert!(legend.rect[0] >= 0 && legend.rect[2] <= w, "{width} px: legend {:?}", legend.rect);
        assert!(legend.rect[3] <= height as i32, "{width} px: legend {:?} below the figure", legend.rect);
    }
}

#[test]
fn printed_text_is_never_under_7_points() {
    let (a, b) = bundles();
    let both = [&a, &b];
    for view in [ViewKind::Latency, ViewKind::Throughput, ViewKind::Memory, ViewKind::StepTime, ViewKind::Roofline] {
        for multiples in [false, true] {
            let options = Options { multiples, ..Options::default() };
            let Ok(fig) = chart_view(view, &both, &Filters::default(), &options).figure else { continue };
            for width in [336, 672] {
                let (svg, _, _) = draw(&fig, width, print());
                // The SVG's pixels are 96 an inch: 7 pt is 9.33 of them.
                let sizes: Vec<f64> = svg
                    .split("font-size=\"")
                    .skip(1)
                    .map(|t| t.split('"').next().and_then(|v| v.parse().ok()).expect("a font size"))
                    .collect();
                assert!(!sizes.is_empty(), "{view:?}: no text");
                let least = sizes.iter().copied().fold(f64::INFINITY, f64::min);
                assert!(least * 72.0 / 96.0 >= 6.99, "{view:?} at {width} px: a text of {least} px");
            }
        }
    }
}

#[test]
fn screen_text_is_never_under_9_pixels_on_a_phone() {
    // The explorer's canvas on a 390 px phone (372 CSS pixels wide), every view of the two H200 bundles compared:
    // legends wrap rather than shrink to 7 px. SVG widths corrected as for print, so that labels do not fit here
    // where a canvas, which measures them, would find they do not.
    let (a, b) = bundles();
    let both = [&a, &b];
    let style = ChartStyle { text_width: 1.3, ..ChartStyle::screen(1.0) };
    for view in ViewKind::ALL.into_iter().filter(|v| v.is_chart()) {
        for multiples in [false, true] {
            let options = Options { multiples, ..Options::default() };
            let Ok(fig) = chart_view(view, &both, &Filters::default(), &options).figure else { continue };
            let (svg, _, _) = draw(&fig, 372, style);
            let least = svg
                .split("font-size=\"")
                .skip(1)
                .map(|t| t.split('"').next().and_then(|v| v.parse().ok()).expect("a font size"))
                .fold(f64::INFINITY, f64::min);
            // plotters writes an SVG font size as the size drawn / 1.24.
            let px = least * 1.24;
            assert!(px >= 8.99, "{view:?} (multiples: {multiples}) at 372 px: a text of {px} px");
        }
    }
}

/// The explorer's canvas on a 390 px phone (372 CSS pixels): every chart view of the H200 bundles, alone and
/// compared, gives each plot at least [`MIN_PLOT_HEIGHT`] (less a few pixels of estimate): the compared TTFT /
/// ITL chart's eight legend rows under its plot once left it 15 px, or none.
#[test]
fn plots_keep_their_height_on_a_phone() {
    let (a, b) = bundles();
    // Two demo runs (N in {48, 96}: compared, eight TTFT / ITL legend rows).
    let c = load_bundle("q.json", include_str!("../../schema/tests/fixtures/v1.2/demo-quality.json")).expect("loads");
    let d = load_bundle("p.json", include_str!("../../schema/tests/fixtures/v1.4/demo-peaks.json")).expect("loads");
    // Text widths as the SVG backend guesses them (narrower than a canvas measures): legends that fit the plot's
    // width, too tall for its height.
    let style = ChartStyle::screen(1.0);
    for bundles in [vec![&a], vec![&a, &b], vec![&c], vec![&c, &d]] {
        for view in ViewKind::ALL.into_iter().filter(|v| v.is_chart()) {
            let Ok(fig) = chart_view(view, &bundles, &Default::default(), &Options::default()).figure else { continue };
            let (_, d, height) = draw(&fig, 372, style);
            assert!(!d.plots.is_empty(), "{view:?}: no plot recorded");
            for p in &d.plots {
                let h = p[3] - p[1];
                // Heat map panels and the answer's halves are sized otherwise; each keeps a plot.
                let least = if matches!(fig.plot, Plot::Xy { .. }) { MIN_PLOT_HEIGHT - 12.0 } else { 60.0 };
                assert!(
                    f64::from(h) >= least,
                    "{view:?} ({} bundles): a plot {h} px tall in a {height} px figure",
                    bundles.len()
                );
            }
        }
    }
}

/// Small multiples on a phone: the facets' titles are shortened (`N=48, B=4`) where the full ones would run into
/// each other, and kept whole on a wide screen.
#[test]
fn facet_titles_fit_their_facets_on_a_phone() {
    // A demo run: B in {1, 4, 8}, three facets across a phone.
    let text = include_str!("../../schema/tests/fixtures/v1.2/demo-quality.json");
    let a = load_bundle("demo-quality.json", text).expect("loads");
    let options = Options { multiples: true, ..Options::default() };
    let fig = chart_view(ViewKind::Latency, &[&a], &Default::default(), &options).figure.expect("draws");
    let Plot::Xy { grid: Some(g), .. } = &fig.plot else { panic!("small multiples") };
    assert_eq!(g.cols, 3, "three columns: {g:?}");
    let style = ChartStyle { text_width: 1.3, ..ChartStyle::screen(1.0) };
    let (narrow, _, _) = draw(&fig, 372, style);
    let (wide, _, _) = draw(&fig, 1400, ChartStyle::default());
    for t in &g.titles {
        let short = t.replace(" = ", "=");
        assert!(narrow.contains(&format!(">{short}<")) || narrow.contains(&format!(">\n{short}\n<")), "{short}");
        assert!(wide.contains(&format!(">{t}<")) || wide.contains(&format!(">\n{t}\n<")), "{t}");
    }
}

#[test]
fn a_single_chart_s_legend_keeps_clear_of_the_s_parity_line() {
    // Quality falling with K: the upper left holds the most marks, so by the marks alone the legend would take the
    // upper right, over the S_parity line at K = 16. It takes the upper left instead.
    let mark = |i: usize, k: f64| Mark {
        x: k,
        y: 10.0 - k.log2(),
        lo: None,
        hi: None,
        tip: format!("K={k}"),
        cell: Some(CellId { bundle: 0, cell: i }),
        label: None,
    };
    let ks = [2.0, 4.0, 8.0, 16.0];
    let series = vec![Series {
        label: "LLaDA-8B-Base (low-confidence remasking)".into(),
        colour: 0,
        style: Style::Line,
        alt: false,
        marks: ks.iter().enumerate().map(|(i, &k)| mark(i, k)).collect(),
        facet: 0,
    }];
    let line = |value: f64, vertical: bool, label: &str| RefLine {
        label: label.into(),
        value,
        vertical,
        colour: 0,
        alt: false,
        facet: 0,
        band: None,
    };
    let axis = |t: &str, log: bool| Axis { pow2: log, ..Axis::numeric(t, log) };
    for (s_parity, want_left) in [(16.0, true), (2.0, false)] {
        let refs = vec![line(6.5, false, "Meta-Llama-3-8B (autoregressive)"), line(s_parity, true, "S_parity")];
        let plot =
            Plot::Xy { x: axis("K", true), y: axis("perplexity", false), series: series.clone(), refs, grid: None };
        let fig = Figure { title: "quality vs steps".into(), plot };
        let (_, d, _) = draw(&fig, 900, ChartStyle::default());
        let [legend] = d.legends.as_slice() else { panic!("legends {:?}", d.legends) };
        let at = d.hits.iter().find(|h| h.mark == ks.iter().position(|&k| k == s_parity).expect("a K")).expect("hit");
        let [l, _, r, _] = legend.rect;
        assert!(!(l..=r).contains(&at.x), "S_parity {s_parity} at x = {} under the legend {:?}", at.x, legend.rect);
        let mid = d.plots[0][0] + (d.plots[0][2] - d.plots[0][0]) / 2;
        assert_eq!(r < mid, want_left, "S_parity {s_parity}: legend {:?}", legend.rect);
    }
}
