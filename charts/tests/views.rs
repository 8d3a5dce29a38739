//! The charts of the explorer and of `dllm-bench figures`: fixture bundles -> views -> figures drawn into SVG,
//! checked against hand-computed values; loading errors; filters, table rows and CSV. (The page state in the
//! address and the bundle index: explorer/tests/page.rs.)

use charts::bundle::{LoadedBundle, load_bundle};
use charts::figure::{self, ChartStyle, Drawn, Figure, Plot, Style};
use charts::views::{self, Filters, Options, ViewKind, chart_view, parity_rows, rows};
use metrics::derive::MemoryMetric;
use plotters::prelude::*;

const DEMO: &str = include_str!("../../explorer/e2e/fixtures/demo.json");
const H200: &str = include_str!("../../explorer/e2e/fixtures/study-h200.json");
const A100: &str = include_str!("../../explorer/e2e/fixtures/study-a100.json");
const CPU_V1_0: &str = include_str!("../../schema/tests/fixtures/v1.0/demo.json");
const DRAFT_V0_1: &str = include_str!("../../schema/tests/fixtures/v0.1/cpu-draft.json");

fn svg(fig: &Figure) -> (String, Drawn) {
    let mut out = String::new();
    let drawn = {
        let root = SVGBackend::with_string(&mut out, (1000, fig.height(1000))).into_drawing_area();
        figure::draw(&root, fig, ChartStyle::default()).expect("chart draws")
    };
    (out, drawn)
}

fn fig(view: ViewKind, bundles: &[&LoadedBundle], f: &Filters, o: &Options) -> Figure {
    chart_view(view, bundles, f, o).figure.unwrap_or_else(|e| panic!("{view:?}: {e}"))
}

fn h200() -> LoadedBundle {
    load_bundle("study-h200.json", H200).expect("fixture loads")
}

fn shape(b: u32, n: u32) -> Filters {
    Filters { batch: Some(b), seq: Some(n), ..Filters::default() }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

fn xy(f: &Figure) -> (&Vec<figure::Series>, &Vec<figure::RefLine>) {
    match &f.plot {
        Plot::Xy { series, refs, .. } => (series, refs),
        _ => panic!("not an xy plot"),
    }
}

/// Every hoverable mark was drawn: one hit per mark, inside the plot.
fn check_hits(f: &Figure, d: &Drawn) {
    assert_eq!(d.hits.len(), f.mark_count(), "{}", f.title);
    for h in &d.hits {
        assert!((0..1000).contains(&h.x) && (0..560).contains(&h.y), "{h:?}");
        assert_eq!(d.at(h.x, h.y, 3).map(|x| (x.series, x.mark)), Some((h.series, h.mark)));
    }
}

#[test]
fn latency_vs_steps_has_the_bundle_medians_and_the_ar_line() {
    let b = h200();
    let f = fig(ViewKind::Latency, &[&b], &shape(1, 128), &Options::default());
    let (series, refs) = xy(&f);
    assert_eq!(series.len(), 1);
    let pts: Vec<(f64, f64)> = series[0].marks.iter().map(|m| (m.x, m.y)).collect();
    // Medians of the fixture's repetitions, computed by hand.
    let want = [(8.0, 140.95), (16.0, 283.152), (32.0, 591.854), (64.0, 1214.772)];
    for ((x, y), (wx, wy)) in pts.iter().zip(want) {
        assert!(*x == wx && close(*y, wy), "{pts:?}");
    }
    assert_eq!(series[0].marks[0].lo, Some(140.558));
    assert_eq!(refs.len(), 1);
    assert!(close(refs[0].value, 1178.732));
    let (out, d) = svg(&f);
    check_hits(&f, &d);
    // The four marks, and the series' marker in the legend.
    assert_eq!(out.matches("<circle").count(), 4 + 1);
    for t in ["diffusion steps K (log scale)", "median end-to-end latency L_e2e (ms)", "B = 1, N = 128"] {
        assert!(out.contains(t), "missing {t:?}");
    }
    for k in ["8", "16", "32", "64"] {
        assert!(out.contains(&format!(">\n{k}\n</text>")), "missing tick {k}");
    }
    assert!(out.contains(r##"stroke="#000000""##), "no black AR line");
    // Hovering a point gives its exact values and key.
    let h = d.hits[1];
    let (tip, cell) = f.hit_info(&h).expect("hit");
    assert!(tip.contains("K=16") && tip.contains("median 283.15 ms (min 282.35"), "{tip}");
    assert_eq!(cell.map(|c| b.bundle.cells[c.cell].key.steps), Some(Some(16)));
}

#[test]
fn shape_defaults_to_the_smallest_and_says_so() {
    let b = h200();
    let v = chart_view(ViewKind::Latency, &[&b], &Filters::default(), &Options::default());
    assert!(v.notes.iter().any(|n| n.contains("B = 1, N = 128")), "{:?}", v.notes);
    // The OOM cell (B=4 N=256 K=64) is not plotted.
    let f = fig(ViewKind::Latency, &[&b], &shape(4, 256), &Options::default());
    assert_eq!(xy(&f).0[0].marks.len(), 3);
}

#[test]
fn throughput_bars_put_ar_beside_llada_with_error_bars() {
    let b = h200();
    let f = fig(ViewKind::Throughput, &[&b], &Filters { seq: Some(128), ..Filters::default() }, &Options::default());
    let (series, _) = xy(&f);
    // AR + LLaDA at K 8, 16, 32, 64; each with a bar at B=1 and B=4.
    assert_eq!(series.len(), 5);
    assert_eq!(series[0].colour, figure::AR, "AR first");
    assert!(series.iter().all(|s| matches!(s.style, Style::Bars { .. }) && s.marks.len() == 2));
    let k8 = series.iter().find(|s| s.label.ends_with("K=8")).expect("K=8 bars");
    assert!(close(k8.marks[0].y, 454.0617240156084), "{}", k8.marks[0].y);
    assert!(k8.marks[0].lo.expect("lo") <= k8.marks[0].y && k8.marks[0].y <= k8.marks[0].hi.expect("hi"));
    // Category 0 (B=1): the AR bar left of the LLaDA bars.
    assert!(series[0].marks[0].x < k8.marks[0].x && k8.marks[0].x < 0.5);
    let (out, d) = svg(&f);
    check_hits(&f, &d);
    assert!(out.contains("B=1") && out.contains("B=4") && out.contains("generation throughput (tokens/s)"));
    let o = Options { bytes: true, ..Options::default() };
    let bytes = fig(ViewKind::Throughput, &[&b], &Filters { seq: Some(128), ..Filters::default() }, &o);
    assert!(bytes.title.contains("bytes/s"));
    // Bars of 0 (continuations with no bytes) on a log axis: said in a note.
    let mut v: serde_json::Value = serde_json::from_str(H200).expect("json");
    for c in v["cells"].as_array_mut().expect("cells") {
        for r in c["repetitions"].as_array_mut().into_iter().flatten() {
            r["output_bytes"] = 0.into();
        }
    }
    let zero = load_bundle("zero.json", &v.to_string()).expect("loads");
    let f = Filters { seq: Some(128), ..Filters::default() };
    let log = Options { bytes: true, log_y: true, ..Options::default() };
    let notes = chart_view(ViewKind::Throughput, &[&zero], &f, &log).notes;
    assert!(notes.iter().any(|n| n.contains("bars of 0 bytes/s are not drawn on the log axis")), "{notes:?}");
    let notes = chart_view(ViewKind::Throughput, &[&zero], &f, &Options { log_y: false, ..log }).notes;
    assert!(!notes.iter().any(|n| n.contains("not drawn on the log axis")), "{notes:?}");
}

#[test]
fn a_memory_view_of_cells_that_recorded_no_peak_says_so_and_no_colour_bar() {
    let mut v: serde_json::Value = serde_json::from_str(H200).expect("json");
    for c in v["cells"].as_array_mut().expect("cells") {
        for r in c["repetitions"].as_array_mut().into_iter().flatten() {
            for k in ["peak_allocated_bytes", "peak_reserved_bytes", "peak_rss_bytes"] {
                r.as_object_mut().expect("a repetition").remove(k);
            }
        }
    }
    let none = load_bundle("none.json", &v.to_string()).expect("loads");
    let notes = chart_view(ViewKind::Memory, &[&none], &Filters::default(), &Options::default()).notes;
    assert!(notes.iter().any(|n| n.starts_with("No cell here recorded its peak memory")), "{notes:?}");
    assert!(!notes.iter().any(|n| n.contains("colour bar")), "{notes:?}");
    // Measured: the colour bar's note, and K's only without a K filter.
    let b = h200();
    let notes = chart_view(ViewKind::Memory, &[&b], &Filters::default(), &Options::default()).notes;
    assert!(notes.iter().any(|n| n.contains("colour bar") && n.starts_with("Largest peak over")), "{notes:?}");
    let k = Filters { steps: Some(64), ..Filters::default() };
    let notes = chart_view(ViewKind::Memory, &[&b], &k, &Options::default()).notes;
    assert!(notes.iter().any(|n| n.contains("colour bar") && !n.contains("Largest peak over")), "{notes:?}");
}

#[test]
fn memory_heatmaps_label_gb_and_mark_oom() {
    let b = h200();
    let f = fig(ViewKind::Memory, &[&b], &Filters::default(), &Options::default());
    let Plot::Heat { panels, x, y, unit, .. } = &f.plot else { panic!("heatmap") };
    assert_eq!(unit, "GB", "peaks above 1 GB are in GB");
    assert_eq!(
        (x.categories.clone(), y.categories.clone()),
        (vec!["1".into(), "4".into()], vec!["128".into(), "256".into()])
    );
    assert_eq!(panels.len(), 2, "one per model");
    let llada = panels.iter().find(|p| p.title.contains("llada")).expect("llada panel");
    // N=256 B=4: K = 64 ran out of memory, K = 8, 16 and 32 ran: their largest peak, in the scale, with the count of
    // cells that did not fit (the tooltip names them), not a bare OOM over the peak that was measured.
    let partial = llada.cells.iter().find(|c| (c.row, c.col) == (1, 1)).expect("N=256 B=4");
    assert_eq!(partial.text, "28.39 GB, 1 OOM");
    assert!(!partial.oom && partial.value.is_some_and(|v| (v - 28.388).abs() < 1e-3), "{partial:?}");
    assert!(
        partial.tip.contains("largest peak 28.388 GB") && partial.tip.contains("out of memory: "),
        "{}",
        partial.tip
    );
    assert!(partial.tip.contains(", at K=8\n") && partial.tip.ends_with("out of memory: K=64"), "{}", partial.tip);
    let notes = chart_view(ViewKind::Memory, &[&b], &Filters::default(), &Options::default()).notes;
    assert!(notes.iter().any(|n| n.contains("followed by \"n OOM\" is the peak of the cells that ran")), "{notes:?}");
    // N=128 B=1: largest allocated peak over K is 17636000002 bytes.
    let c = llada.cells.iter().find(|c| (c.row, c.col) == (0, 0)).expect("cell");
    assert_eq!(c.text, "17.64 GB");
    let (out, d) = svg(&f);
    check_hits(&f, &d);
    assert!(out.contains("28.39 GB, 1 OOM") && out.contains("17.64 GB") && out.contains("allocated"));
    // Every cell of a shape out of memory: drawn as such, outside the scale.
    let mut v: serde_json::Value = serde_json::from_str(H200).expect("json");
    for c in v["cells"].as_array_mut().expect("cells") {
        let k = &c["key"];
        if k["model"].as_str().is_some_and(|m| m.contains("llada")) && k["seq_len"] == 256 && k["batch_size"] == 4 {
            c["status"] = serde_json::json!({"state": "oom", "message": "CUDA out of memory (test)"});
            c["repetitions"] = serde_json::json!([]);
        }
    }
    let all = load_bundle("all-oom.json", &v.to_string()).expect("loads");
    let f = fig(ViewKind::Memory, &[&all], &Filters::default(), &Options::default());
    let Plot::Heat { panels, .. } = &f.plot else { panic!("heatmap") };
    let llada = panels.iter().find(|p| p.title.contains("llada")).expect("llada panel");
    let oom = llada.cells.iter().find(|c| (c.row, c.col) == (1, 1)).expect("N=256 B=4");
    assert!(oom.oom && oom.value.is_none() && oom.text == "OOM", "{oom:?}");
    assert!(svg(&f).0.contains(">\nOOM\n</text>"));
    let reserved = fig(
        ViewKind::Memory,
        &[&b],
        &Filters::default(),
        &Options { memory: MemoryMetric::Reserved, ..Options::default() },
    );
    assert!(reserved.title.contains("reserved"));

    // A CPU bundle has no device memory: the process RSS, said so.
    let cpu = load_bundle("cpu.json", CPU_V1_0).expect("loads");
    let f = fig(
        ViewKind::Memory,
        &[&cpu],
        &Filters::default(),
        &Options { memory: MemoryMetric::Reserved, ..Options::default() },
    );
    assert!(f.title.contains("resident set size") && f.title.contains("CPU run"), "{}", f.title);
    // Its peaks are all below 1 GB: the labels are in MB (not "0.05 GB" everywhere), the colour bar says so.
    let Plot::Heat { panels, unit, .. } = &f.plot else { panic!("heatmap") };
    assert_eq!(unit, "MB");
    let largest =
        (0..cpu.bundle.cells.len()).filter_map(|i| cpu.summary(i).peak_rss_bytes).max().expect("RSS measured");
    assert!(largest < 1_000_000_000);
    let texts: Vec<&str> = panels.iter().flat_map(|p| p.cells.iter().map(|c| c.text.as_str())).collect();
    assert!(texts.iter().all(|t| t.ends_with(" MB") || *t == "OOM" || *t == "n/a"), "{texts:?}");
    assert!(texts.contains(&format!("{:.2} MB", largest as f64 / 1e6).as_str()), "{texts:?}");
    let (out, _) = svg(&f);
    assert!(out.contains(">\nMB\n</text>") || out.contains(">MB</text>"), "the colour bar names the unit");
}

#[test]
fn ttft_itl_and_step_time() {
    let b = h200();
    let f = fig(ViewKind::ArTiming, &[&b], &Filters::default(), &Options::default());
    let (series, _) = xy(&f);
    assert_eq!(series.len(), 4, "TTFT and ITL per N");
    let ttft = series.iter().find(|s| s.label.contains("TTFT, N=128")).expect("ttft");
    assert_eq!(ttft.marks.iter().map(|m| m.x).collect::<Vec<_>>(), [1.0, 4.0]);
    // B is a count: its linear axis ticks at 1, 2, 3, 4, never at a batch size of 1.5.
    assert!(matches!(&f.plot, Plot::Xy { x, .. } if x.pow2 && !x.log));
    let (out, d) = svg(&f);
    assert!(out.contains("\n3\n</text>") || out.contains(">3</text>"), "a tick at B = 3");
    assert!(!out.contains("1.5"), "no tick at B = 1.5");
    check_hits(&f, &d);

    let f = fig(ViewKind::StepTime, &[&b], &Filters::default(), &Options::default());
    let (series, _) = xy(&f);
    assert_eq!(series.len(), 2, "one per B at N=128");
    // K=8, B=1, N=128 (cells[1]): the median of all 24 step times of the fixture, computed here.
    let v: serde_json::Value = serde_json::from_str(H200).expect("json");
    let mut steps: Vec<f64> = v["cells"][1]["repetitions"]
        .as_array()
        .expect("reps")
        .iter()
        .flat_map(|r| r["step_ms"].as_array().expect("steps").iter().map(|x| x.as_f64().expect("f64")))
        .collect();
    steps.sort_by(f64::total_cmp);
    assert_eq!(steps.len(), 24);
    assert!(close(series[0].marks[0].y, (steps[11] + steps[12]) / 2.0), "{}", series[0].marks[0].y);
    check_hits(&f, &svg(&f).1);
}

#[test]
fn pareto_frontier_over_both_models() {
    let b = h200();
    let f = fig(ViewKind::Pareto, &[&b], &shape(1, 256), &Options::default());
    let (series, _) = xy(&f);
    let front = series.iter().find(|s| s.style == Style::Frontier).expect("frontier");
    // N=256 B=1: LLaDA K=32 (829 ms, 10.2) dominates LLaMA (1425 ms, 10.5): the frontier is LLaDA's 4 points.
    let fx: Vec<f64> = front.marks.iter().map(|m| m.y).collect();
    assert_eq!(fx, [70.0, 25.0, 10.2, 9.5]);
    let ar = series.iter().find(|s| s.colour == figure::AR).expect("AR point");
    assert_eq!(ar.marks.len(), 1);
    assert!(ar.marks[0].tip.contains("dominated"), "{}", ar.marks[0].tip);
    let (out, d) = svg(&f);
    check_hits(&f, &d);
    assert!(out.contains("Pareto frontier (4 points)") && out.contains("perplexity (lower is better)"));
    // At N=128 the AR point is on the frontier.
    let f = fig(ViewKind::Pareto, &[&b], &shape(1, 128), &Options::default());
    assert!(xy(&f).0.iter().any(|s| s.label.contains("Pareto frontier (5 points)")));
}

#[test]
fn quality_vs_steps_marks_s_parity() {
    let b = h200();
    let f = fig(ViewKind::QualitySteps, &[&b], &shape(1, 256), &Options::default());
    let (series, refs) = xy(&f);
    assert_eq!(series[0].marks.iter().map(|m| m.y).collect::<Vec<_>>(), [70.0, 25.0, 10.2, 9.5]);
    assert!(refs.iter().any(|r| !r.vertical && r.value == 10.5));
    assert!(refs.iter().any(|r| r.vertical && r.value == 32.0 && r.label.contains("S_parity = 32")));
    // The S_parity line is its series': its colour, and its label names the series.
    let line = refs.iter().find(|r| r.vertical).expect("an S_parity line");
    assert_eq!(line.colour, series[0].colour);
    assert!(line.label.ends_with(&format!("of {}", series[0].label)), "{}", line.label);
    let (out, _) = svg(&f);
    assert!(out.contains("S_parity = 32"));
}

#[test]
fn quality_vs_steps_draws_each_points_bootstrap_interval_and_the_baselines_band() {
    let text = include_str!("../../schema/tests/fixtures/v1.2/demo-quality.json");
    let b = load_bundle("demo-quality.json", text).expect("1.2 fixture loads");
    let f = fig(ViewKind::QualitySteps, &[&b], &Filters::default(), &Options::default());
    assert!(f.title.contains("(bars: 95% bootstrap intervals over prompts)"), "{}", f.title);
    let (series, refs) = xy(&f);
    // The records every reader computes (report's f(K) [95%] column): each point's bars are its K's interval.
    let q = b.bundle.cells.iter().flat_map(|c| &c.quality).find(|q| f.title.starts_with(&q.label())).expect("metric");
    let opts = metrics::parity::ParityOptions::for_metric(&b.bundle, q.metric.clone(), q.evaluator.clone());
    let records = metrics::parity::parity(&b.bundle, &opts);
    let mut checked = 0;
    for m in series.iter().flat_map(|s| &s.marks) {
        let key = &b.bundle.cells[m.cell.expect("a cell").cell].key;
        let r = records
            .iter()
            .find(|r| r.seq_len == key.seq_len && r.diffusion_model == key.model && r.variant() == key.variant())
            .expect("the point's record");
        let p = r.curve.iter().find(|p| Some(p.steps) == key.steps).expect("the point's K");
        assert_eq!((m.y, m.lo, m.hi), (p.quality.value, p.quality.low, p.quality.high), "{key}");
        assert!(m.lo.is_some_and(|lo| lo <= m.y) && m.hi.is_some_and(|hi| hi >= m.y), "{key}");
        assert!(m.tip.contains("(95% bootstrap ["), "{}", m.tip);
        checked += 1;
    }
    assert!(checked > 1, "points checked: {checked}");
    // Q_llama's interval shaded behind its line, said in its legend entry.
    let ar = refs.iter().find(|r| !r.vertical).expect("the AR line");
    let base = records.iter().find(|r| r.baseline.value == ar.value).expect("the line's record").baseline;
    assert_eq!(ar.band, Some((base.low.expect("low"), base.high.expect("high"))));
    assert!(ar.label.contains("95% [") && ar.label.ends_with("shaded"), "{}", ar.label);
    let (out, d) = svg(&f);
    check_hits(&f, &d);
    assert!(out.contains("bootstrap intervals"));

    // The Pareto frontier draws the same intervals on its points, Q_llama's on the AR point.
    let f = fig(ViewKind::Pareto, &[&b], &Filters::default(), &Options::default());
    assert!(f.title.contains("(bars: quality's 95% interval)"), "{}", f.title);
    let (series, _) = xy(&f);
    let ar_point = series.iter().find(|s| s.label.contains("autoregressive")).expect("the AR point").marks[0].clone();
    assert_eq!((ar_point.lo, ar_point.hi), (base.low, base.high));
    for s in series.iter().filter(|s| s.style == Style::Line) {
        assert!(s.marks.iter().all(|m| m.lo.is_some_and(|lo| lo <= m.y) && m.hi.is_some_and(|hi| hi >= m.y)));
    }

    // A threshold series' points (their x the forwards measured) take their threshold's interval.
    let text = include_str!("../../schema/tests/fixtures/v1.7/demo.json");
    let d = load_bundle("demo-1.7.json", text).expect("1.7 fixture loads");
    let q = d.bundle.cells.iter().flat_map(|c| &c.quality).find(|q| !q.per_prompt.is_empty()).expect("values");
    let opts = metrics::parity::ParityOptions::for_metric(&d.bundle, q.metric.clone(), q.evaluator.clone());
    let records = metrics::parity::parity(&d.bundle, &opts);
    let f =
        fig(ViewKind::QualitySteps, &[&d], &shape(1, 48), &Options { metric: Some(q.label()), ..Options::default() });
    let mut thresholds = 0;
    for m in xy(&f).0.iter().flat_map(|s| &s.marks) {
        let key = &d.bundle.cells[m.cell.expect("a cell").cell].key;
        let Some(t) = key.threshold else { continue };
        let r = records.iter().find(|r| r.thresholded && r.diffusion_model == key.model).expect("its record");
        let p = r.curve.iter().find(|p| p.threshold == Some(t)).expect("its threshold's point");
        assert_eq!((m.y, m.lo, m.hi), (p.quality.value, p.quality.low, p.quality.high), "{key}");
        assert!(m.lo.is_some(), "{key}: an interval");
        thresholds += 1;
    }
    assert!(thresholds > 0, "the fixture's threshold points are drawn");

    // Without per-prompt values there is no interval: no bars, no band, nothing said of them.
    let h = h200();
    let f = fig(ViewKind::QualitySteps, &[&h], &shape(1, 256), &Options::default());
    let (series, refs) = xy(&f);
    assert!(series.iter().flat_map(|s| &s.marks).all(|m| m.lo.is_none() && m.hi.is_none()));
    assert!(refs.iter().all(|r| r.band.is_none()));
    assert!(!f.title.contains("bars"), "{}", f.title);
    let f = fig(ViewKind::Pareto, &[&h], &shape(1, 256), &Options::default());
    assert!(xy(&f).0.iter().flat_map(|s| &s.marks).all(|m| m.lo.is_none()) && !f.title.contains("bars"));
}

/// The vertical error bars an SVG draws in `stroke` (`#RRGGBB`): each as (x, top, bottom) in pixels.
fn error_bars(svg: &str, stroke: &str) -> Vec<(i64, i64, i64)> {
    let attr = |line: &str, name: &str| -> Option<String> {
        let rest = &line[line.find(&format!(" {name}=\""))? + name.len() + 3..];
        Some(rest[..rest.find('"')?].to_string())
    };
    let mut bars = Vec::new();
    for line in svg.lines().filter(|l| l.contains("<polyline")) {
        let (Some(colour), Some(points)) = (attr(line, "stroke"), attr(line, "points")) else { continue };
        let xy: Vec<(i64, i64)> = points
            .split_whitespace()
            .filter_map(|p| p.split_once(','))
            .filter_map(|(x, y)| Some((x.parse().ok()?, y.parse().ok()?)))
            .collect();
        if let [(x0, y0), (x1, y1)] = xy[..]
            && colour.eq_ignore_ascii_case(stroke)
            && x0 == x1
            && y0 != y1
        {
            bars.push((x0, y0.min(y1), y0.max(y1)));
        }
    }
    bars
}

#[test]
fn a_compared_bundles_error_bars_are_drawn_beside_the_firsts_not_over_them() {
    let text = include_str!("../../schema/tests/fixtures/v1.2/demo-quality.json");
    let (a, b) = (load_bundle("a.json", text).expect("loads"), load_bundle("b.json", text).expect("loads"));
    let mut f = fig(ViewKind::QualitySteps, &[&a, &b], &shape(8, 96), &Options::default());
    // S_parity's dashed lines are vertical strokes in the series' colour too: left out, so only error bars count.
    if let Plot::Xy { refs, .. } = &mut f.plot {
        refs.retain(|r| !r.vertical);
    }
    let (series, _) = xy(&f);
    let llada = series.iter().find(|s| !s.alt && s.marks.iter().all(|m| m.lo.is_some())).expect("a series with bars");
    let RGBColor(r, g, bl) = figure::colour(llada.colour);
    // (The same points twice: their hits coincide, so `check_hits` does not apply.)
    let (out, _) = svg(&f);
    let bars = error_bars(&out, &format!("#{r:02X}{g:02X}{bl:02X}"));
    // The same bundle twice: the same intervals, so each of [A]'s bars has [B]'s at the same heights, 6 px to its
    // right, and no bar covers another.
    assert_eq!(bars.len(), 2 * llada.marks.len(), "{bars:?}");
    for &(x, top, bottom) in &bars {
        let twins = bars.iter().filter(|&&(x2, t, b)| (t, b) == (top, bottom) && (x2 - x).abs() == 6).count();
        assert_eq!(twins, 1, "the bar at x = {x} has its twin 6 px away: {bars:?}");
        assert_eq!(bars.iter().filter(|&&o| o == (x, top, bottom)).count(), 1, "a bar drawn over another: {bars:?}");
    }
    // One bundle: its bars at its points' x, where its hits are.
    let mut f = fig(ViewKind::QualitySteps, &[&a], &shape(8, 96), &Options::default());
    if let Plot::Xy { refs, .. } = &mut f.plot {
        refs.retain(|r| !r.vertical);
    }
    let (out, d) = svg(&f);
    let bars = error_bars(&out, &format!("#{r:02X}{g:02X}{bl:02X}"));
    assert!(!bars.is_empty());
    for (x, _, _) in bars {
        assert!(d.hits.iter().any(|h| i64::from(h.x) == x), "a bar at x = {x} without its point");
    }
}

#[test]
fn a_compared_bundles_bars_are_outlined_in_their_series_colour() {
    let (a, b) = (h200(), load_bundle("b.json", H200).expect("fixture loads"));
    let f =
        fig(ViewKind::Throughput, &[&a, &b], &Filters { seq: Some(128), ..Filters::default() }, &Options::default());
    let (series, _) = xy(&f);
    let (out, _) = svg(&f);
    // An outline: a rectangle with no fill, stroked in the colour, opaque (the legend's box is a pale black).
    let outline = |colour: &str| format!("opacity=\"1\" fill=\"none\" stroke=\"{colour}\"");
    let outlined =
        |svg: &str, colour: &str| svg.lines().filter(|l| l.contains("<rect") && l.contains(&outline(colour))).count();
    let mut alt = 0;
    for s in series {
        let RGBColor(r, g, bl) = figure::colour(s.colour);
        let colour = format!("#{r:02X}{g:02X}{bl:02X}");
        if s.alt {
            // Each of [B]'s bars and its legend key.
            assert_eq!(outlined(&out, &colour), s.marks.len() + 1, "{}: {out}", s.label);
            alt += 1;
        }
    }
    assert!(alt > 0, "the compared bundle has bar series");
    // One bundle: no bar outlined in any series' colour.
    let f = fig(ViewKind::Throughput, &[&a], &Filters { seq: Some(128), ..Filters::default() }, &Options::default());
    let (out1, _) = svg(&f);
    for s in xy(&f).0 {
        let RGBColor(r, g, bl) = figure::colour(s.colour);
        assert_eq!(outlined(&out1, &format!("#{r:02X}{g:02X}{bl:02X}")), 0, "{}", s.label);
    }
}

#[test]
fn the_s_parity_line_is_half_tone_so_that_the_error_bar_at_its_k_shows() {
    let text = include_str!("../../schema/tests/fixtures/v1.2/demo-quality.json");
    let a = load_bundle("a.json", text).expect("loads");
    let f = fig(ViewKind::QualitySteps, &[&a], &shape(8, 96), &Options::default());
    let (series, refs) = xy(&f);
    let line = refs.iter().find(|r| r.vertical).expect("an S_parity line");
    let llada = series.iter().find(|s| s.colour == line.colour).expect("its series");
    assert!(llada.marks.iter().any(|m| m.x == line.value && m.lo.is_some()), "an error bar at S_parity's K");
    let RGBColor(r, g, bl) = figure::colour(line.colour);
    let (out, _) = svg(&f);
    let stroke = format!("stroke=\"#{r:02X}{g:02X}{bl:02X}\"");
    let opacity = |l: &str| l.split(" opacity=\"").nth(1).and_then(|r| r.split('"').next()).map(str::to_string);
    // The colour's vertical strokes that do not end in a cap: the error bars' stems (opaque) and the line's dashes.
    let verticals: Vec<(i64, String)> = out
        .lines()
        .filter(|l| l.contains("<polyline") && l.contains(&stroke))
        .filter_map(|l| {
            let points = l.split(" points=\"").nth(1)?.split('"').next()?;
            let xy: Vec<(i64, i64)> = points
                .split_whitespace()
                .filter_map(|p| p.split_once(','))
                .filter_map(|(x, y)| Some((x.parse().ok()?, y.parse().ok()?)))
                .collect();
            match xy[..] {
                [(x0, y0), (x1, y1)] if x0 == x1 && y0 != y1 => Some((x0, opacity(l)?)),
                _ => None,
            }
        })
        .collect();
    let dashes: Vec<i64> = verticals.iter().filter(|(_, o)| o == "0.5").map(|(x, _)| *x).collect();
    assert!(dashes.len() > 3 && dashes.iter().all(|&x| x == dashes[0]), "the line's dashes, half tone: {verticals:?}");
    // The error bar's stem at that x is drawn opaque, over the dashes.
    assert!(verticals.iter().any(|(x, o)| (x - dashes[0]).abs() <= 1 && o == "1"), "{verticals:?}");
}

#[test]
fn small_multiples_say_what_their_bars_are_when_only_a_later_facet_has_them() {
    // The demo's N = 48 cells without per-prompt values: the first facets (N = 48) have no bars, N = 96's do.
    let mut v: serde_json::Value =
        serde_json::from_str(include_str!("../../schema/tests/fixtures/v1.2/demo-quality.json")).expect("json");
    for c in v["cells"].as_array_mut().expect("cells").iter_mut().filter(|c| c["key"]["seq_len"] == 48) {
        for q in c.get_mut("quality").and_then(|q| q.as_array_mut()).into_iter().flatten() {
            q.as_object_mut().expect("a value").remove("per_prompt");
        }
    }
    let b = load_bundle("stripped.json", &v.to_string()).expect("loads");
    let one = fig(ViewKind::QualitySteps, &[&b], &shape(8, 48), &Options::default());
    assert!(!one.title.contains("bars"), "N = 48 alone has no bars: {}", one.title);
    let o = Options { multiples: true, ..Options::default() };
    for view in [ViewKind::QualitySteps, ViewKind::Pareto] {
        let f = fig(view, &[&b], &Filters::default(), &o);
        assert!(f.title.contains("(bars: "), "{view:?}: {}", f.title);
        let with_bars = xy(&f).0.iter().flat_map(|s| &s.marks).filter(|m| m.lo.is_some()).count();
        assert!(with_bars > 0, "{view:?}: a later facet draws bars");
    }
}

#[test]
fn s_parity_panel_per_batch_size() {
    let b = h200();
    let (metric, rows) = parity_rows(&[&b], &Filters::default(), &Options::default()).expect("rows");
    assert!(metric.starts_with("perplexity"));
    assert_eq!(rows.len(), 4, "(N, B) in {{128, 256}} x {{1, 4}}");
    let r = |n, bs| rows.iter().find(|r| r.seq == n && r.batch == bs).expect("row");
    let a = r(256, 1);
    assert_eq!((a.s_parity.as_str(), a.interval_text().as_str()), ("K = 32", "(16, 32]"));
    assert_eq!(a.speedup_text(), format!("{:.2}x", 1424.587 / 829.175));
    assert_eq!(a.verdict(), "viable (speedup > 1)");
    assert!(!a.entropy_warning);
    let w = r(128, 1);
    assert_eq!((w.s_parity.as_str(), w.verdict().as_str()), ("K = 64", "not viable (slower at parity)"));
    assert!(w.entropy_warning, "LLaDA's entropy 3.5 vs LLaMA's 5.0");
    assert!(w.matched_key.as_deref().is_some_and(|k| k.contains("K=64")));
}

#[test]
fn bundles_without_quality_say_so() {
    let b = load_bundle("demo.json", DEMO).expect("loads");
    for v in [ViewKind::Pareto, ViewKind::QualitySteps] {
        for multiples in [false, true] {
            let o = Options { multiples, ..Options::default() };
            assert_eq!(chart_view(v, &[&b], &Filters::default(), &o).figure, Err(views::NO_QUALITY.into()));
        }
    }
    assert_eq!(parity_rows(&[&b], &Filters::default(), &Options::default()).map(|_| ()), Err(views::NO_QUALITY.into()));
}

#[test]
fn compare_overlays_two_bundles_with_a_legend() {
    let (a, b) = (h200(), load_bundle("study-a100.json", A100).expect("loads"));
    let f = fig(ViewKind::Latency, &[&a, &b], &shape(1, 128), &Options::default());
    let (series, refs) = xy(&f);
    assert_eq!(series.len(), 2);
    assert!(series[0].label.starts_with("[A] ") && series[1].label.starts_with("[B] ") && series[1].alt);
    assert_eq!(series[0].colour, series[1].colour, "same model, same colour; the style tells bundles apart");
    // The A100 fixture's LLaDA latencies are the H200's times 1.6 (make-fixtures.py): [B]'s first median is
    // [A]'s scaled, so a mix-up of the bundles (or of their marks) shows.
    let (ya, yb) = (series[0].marks[0].y, series[1].marks[0].y);
    assert!(close(ya, 140.95), "[A] (H200) median {ya}");
    assert!(close(yb, 140.95 * 1.6), "[B] (A100) median {yb}");
    assert_eq!(refs.len(), 2);
    let (out, d) = svg(&f);
    check_hits(&f, &d);
    assert!(out.contains("[A] synthetic-llada-tiny") && out.contains("[B] synthetic-llada-tiny"));
    let mem = fig(ViewKind::Memory, &[&a, &b], &Filters::default(), &Options::default());
    let Plot::Heat { panels, .. } = &mem.plot else { panic!() };
    assert_eq!(panels.len(), 4);
    // A bundle compared with itself: every [B] point sits on its [A] point, and the spot names both.
    let f = fig(ViewKind::Latency, &[&a, &a], &shape(1, 128), &Options::default());
    let (_, d) = svg(&f);
    let first = d.hits.iter().find(|h| h.series == 0).expect("an [A] point");
    let both: Vec<usize> = d.all_at(first.x, first.y, 3).iter().map(|h| h.series).collect();
    assert_eq!(both, [0, 1], "[A] first, then the [B] point under it");
    let tips: Vec<&str> = d.all_at(first.x, first.y, 3).iter().filter_map(|h| f.hit_info(h)).map(|t| t.0).collect();
    assert!(tips[0].starts_with("[A] ") && tips[1].starts_with("[B] "), "{tips:?}");
    // A lone point is only itself.
    let lone = fig(ViewKind::Latency, &[&a], &shape(1, 128), &Options::default());
    let (_, d) = svg(&lone);
    assert!(d.hits.iter().all(|h| d.all_at(h.x, h.y, 3).len() == 1));
}

#[test]
fn an_autoregressive_cell_that_ran_out_of_memory_is_named_under_the_s_parity_rows_it_leaves_out() {
    let whole = h200();
    assert!(views::parity_not_drawn(&[&whole], &Filters::default()).is_none(), "every cell ran");
    let mut v: serde_json::Value = serde_json::from_str(H200).expect("json");
    let cells = v["cells"].as_array_mut().expect("cells");
    let ar = cells
        .iter_mut()
        .find(|c| c["key"]["sampler"] == "ar_greedy" && c["key"]["batch_size"] == 4 && c["key"]["seq_len"] == 128)
        .expect("the AR cell at B = 4, N = 128");
    ar["status"] = serde_json::json!({"state": "oom", "message": "CUDA out of memory"});
    ar["repetitions"] = serde_json::json!([]);
    let b = load_bundle("oom.json", &v.to_string()).expect("loads");
    let (_, rows) = parity_rows(&[&b], &Filters::default(), &Options::default()).expect("rows");
    assert!(!rows.iter().any(|r| (r.batch, r.seq) == (4, 128)), "no baseline latency, no row");
    assert!(rows.iter().any(|r| (r.batch, r.seq) == (1, 128)), "the other B keeps its row");
    let note = views::parity_not_drawn(&[&b], &Filters::default()).expect("a note");
    assert!(note.contains("no S_parity row") && note.contains("B=4 N=128 (out of memory)"), "{note}");
    // A filter that leaves the cell out leaves the note out.
    let n256 = Filters { seq: Some(256), ..Filters::default() };
    assert!(views::parity_not_drawn(&[&b], &n256).is_none());
    // The answer keeps the shape in its heat map, says why, and counts it apart from those judged.
    let view = chart_view(ViewKind::Answer, &[&b], &Filters::default(), &Options::default());
    let (_, heat) = views::answer(&[&b], &Options::default()).expect("the answer");
    let Plot::Heat { panels, .. } = &heat.plot else { panic!("a heat map") };
    let at = |p: &figure::Panel| p.cells.iter().find(|c| (c.row, c.col) == (0, 1)).map(|c| c.text.clone());
    let texts: Vec<Option<String>> = panels.iter().map(at).collect();
    assert!(texts.iter().all(|t| t.is_some()), "every series keeps N = 128, B = 4: {texts:?}");
    let baseline = panels.iter().flat_map(|p| &p.cells).filter(|c| c.text == "no baseline").count();
    let sentence = &view.notes[0];
    // The fixture's series reach parity at N = 128 (no verdict there without the baseline) or not (not viable).
    assert!(baseline > 0 && texts.iter().flatten().all(|t| t == "no baseline" || t == "no parity"), "{texts:?}");
    assert!(sentence.contains(&format!("{baseline} more whose autoregressive cell at that B did not finish")));
    assert!(view.notes[1].contains("or no baseline (the autoregressive cell at that B did not finish)"));
    assert!(view.notes[1].contains("n/p (no parity), n/m (not measured) and n/b (no baseline)"), "{}", view.notes[1]);
    let tip = panels.iter().flat_map(|p| &p.cells).find(|c| (c.row, c.col) == (0, 1)).expect("the cell").tip.clone();
    assert!(tip.contains("the autoregressive cell ran out of memory (no baseline latency)"), "{tip}");
    let whole_view = chart_view(ViewKind::Answer, &[&whole], &Filters::default(), &Options::default());
    assert!(!whole_view.notes[1].contains("no baseline"), "said only where a cell is so");
    // The roofline (every successful cell a point) names such a cell too.
    let mut v: serde_json::Value =
        serde_json::from_str(include_str!("../../schema/tests/fixtures/v1.7/demo.json")).expect("json");
    let c = &mut v["cells"][0];
    c["status"] = serde_json::json!({"state": "oom", "message": "CUDA out of memory"});
    c["repetitions"] = serde_json::json!([]);
    let d = load_bundle("oom-1.7.json", &v.to_string()).expect("loads");
    let roof = chart_view(ViewKind::Roofline, &[&d], &Filters::default(), &Options::default());
    assert!(roof.figure.is_ok(), "{:?}", roof.figure);
    let named = roof.notes.iter().any(|n| n.starts_with("Not drawn (every shape)") && n.contains("(out of memory)"));
    assert!(named, "{:?}", roof.notes);
}

#[test]
fn filters_keep_the_ar_reference_and_change_the_chart() {
    let b = h200();
    let all = fig(ViewKind::Throughput, &[&b], &Filters::default(), &Options::default());
    let k16 = Filters { steps: Some(16), ..Filters::default() };
    let some = fig(ViewKind::Throughput, &[&b], &k16, &Options::default());
    assert_eq!(xy(&all).0.len(), 5);
    assert_eq!(xy(&some).0.len(), 2, "AR and K=16");
    let llada = Filters { model: Some("dllm-bench/synthetic-llada-tiny".into()), ..Filters::default() };
    assert_eq!(rows(&[&b], &llada).len(), 16);
    let prec = Filters { precision: Some("bf16".into()), ..Filters::default() };
    assert!(rows(&[&b], &prec).is_empty());
    let sampler = Filters { sampler: Some("ar_greedy".into()), ..Filters::default() };
    assert_eq!(rows(&[&b], &sampler).len(), 4);
    let ch = views::filter_choices(&[&b]);
    assert_eq!(
        (ch.steps, ch.batches, ch.seqs, ch.precisions),
        (vec![8, 16, 32, 64], vec![1, 4], vec![128, 256], vec!["f32".into()])
    );
    // A log y axis draws the same marks.
    let log = fig(ViewKind::Throughput, &[&b], &Filters::default(), &Options { log_y: true, ..Options::default() });
    check_hits(&log, &svg(&log).1);
}

#[test]
fn the_choices_of_several_bundles_are_the_union_of_each_ones_sorted() {
    let (h, a, d) =
        (h200(), load_bundle("demo.json", CPU_V1_0).unwrap(), load_bundle("draft.json", DRAFT_V0_1).unwrap());
    let each = [&h, &a, &d].map(|b| views::filter_choices(&[b]));
    let all = views::filter_choices(&[&d, &h, &a]);
    fn union<T: Ord + Clone>(parts: [&Vec<T>; 3]) -> Vec<T> {
        let mut v: Vec<T> = parts.into_iter().flatten().cloned().collect();
        v.sort();
        v.dedup();
        v
    }
    assert_eq!(all.models, union([&each[0].models, &each[1].models, &each[2].models]));
    assert_eq!(all.samplers, union([&each[0].samplers, &each[1].samplers, &each[2].samplers]));
    assert_eq!(all.steps, union([&each[0].steps, &each[1].steps, &each[2].steps]));
    assert_eq!(all.batches, union([&each[0].batches, &each[1].batches, &each[2].batches]));
    assert_eq!(all.seqs, union([&each[0].seqs, &each[1].seqs, &each[2].seqs]));
    assert_eq!(all.precisions, union([&each[0].precisions, &each[1].precisions, &each[2].precisions]));
    // The bundles differ, so the union is more than any one of them.
    assert!(each.iter().all(|c| c != &all), "{each:?}");
    assert_eq!(views::filter_choices(&[&a, &h, &d]), all, "the order of the bundles does not matter");
    // Filters keep only the values the bundles have.
    let f = Filters { batch: Some(3), seq: all.seqs.first().copied(), model: Some("x/y".into()), ..Filters::default() };
    let kept = f.within(&all);
    assert_eq!((kept.batch, kept.seq, kept.model), (None, all.seqs.first().copied(), None));
    assert_eq!(Filters::default().within(&all), Filters::default());
}

#[test]
fn table_rows_sort_and_export_as_csv() {
    let b = h200();
    let mut r = rows(&[&b], &Filters { seq: Some(256), batch: Some(4), ..Filters::default() });
    assert_eq!(r.len(), 5);
    views::sort_rows(&mut r, 7, true);
    assert_eq!(r[0].text[7], "1931.141", "slowest first");
    assert_eq!(r.last().map(|x| x.state), Some("oom"), "no latency sorts last");
    let csv = views::csv(&[&b], &r);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 6);
    assert_eq!(lines[0], format!("{},synthetic_weights,device", views::COLUMNS.join(",")));
    // Each row says whether its numbers come from synthetic weights, and on what device.
    let device = b.provenance.iter().find(|(k, _)| *k == "Device").map(|(_, v)| v.clone()).expect("device");
    assert!(b.synthetic_weights && device.contains("H200"), "{device}");
    for line in &lines[1..] {
        assert!(line.ends_with(&format!(",true,{device}")), "{line}");
    }
    assert_eq!(views::download_name(&[&b], "cells.csv"), "study-h200-cells.csv");
    // Two bundles compared: both named, A first.
    let mut other = b.clone();
    other.source = "hf eager/run.json".into();
    assert_eq!(views::download_name(&[&b, &other], "latency.png"), "study-h200-vs-hf_eager_run-latency.png");
    assert_eq!(views::download_name(&[], "cells.csv"), "dllm-bench-cells.csv");
    assert!(
        lines[1]
            .starts_with("study-h200.json,dllm-bench/synthetic-llada-tiny,llada_low_confidence,32,4,256,ok,1931.141,")
    );
    assert!(lines[5].contains(",oom: "), "{}", lines[5]);
    // Commas and quotes in bundle strings are quoted.
    let mut v: serde_json::Value = serde_json::from_str(H200).expect("json");
    v["cells"][0]["status"] = serde_json::json!({"state": "error", "message": "boom, \"bad\""});
    v["cells"][0]["repetitions"] = serde_json::json!([]);
    let e = load_bundle("e.json", &v.to_string()).expect("loads");
    let csv = views::csv(&[&e], &rows(&[&e], &Filters::default()));
    assert!(csv.contains(r#","error: boom, ""bad""","#), "{csv}");
}

#[test]
fn cell_details_show_every_summary() {
    let b = h200();
    let d = views::cell_details(&b, 1);
    let get = |k: &str| d.iter().find(|(l, _)| l == k).map(|(_, v)| v.clone()).unwrap_or_default();
    assert!(get("cell").contains("K=8"));
    assert!(get("L_e2e").starts_with("median 140.95 ms"));
    assert!(get("peak allocated").starts_with("17.636 GB"));
    assert_eq!(get("quality: perplexity"), "80 (lower is better)");
    assert_eq!(get("no summary"), "", "a finished cell has its summary");
    // Out of memory after its repetitions: no summary, and it says so.
    let mut v: serde_json::Value = serde_json::from_str(H200).expect("json");
    v["cells"][1]["status"] = serde_json::json!({"state": "oom", "message": "CUDA out of memory (test)"});
    let oom = load_bundle("oom.json", &v.to_string()).expect("loads");
    let d = views::cell_details(&oom, 1);
    let get = |k: &str| d.iter().find(|(l, _)| l == k).map(|(_, v)| v.clone());
    assert!(get("L_e2e").is_none() && get("peak allocated").is_none(), "{d:?}");
    assert!(get("no summary").is_some_and(|v| v.starts_with("the cell did not finish")), "{d:?}");
}

#[test]
fn provenance_and_old_formats() {
    let b = load_bundle("demo.json", DEMO).expect("loads");
    assert!(b.synthetic_weights);
    let row = |b: &LoadedBundle, k: &str| b.provenance.iter().find(|(l, _)| *l == k).map(|(_, v)| v.clone());
    assert_eq!(row(&b, "CUDA").as_deref(), Some("12.8"));
    assert_eq!(row(&b, "Git commit").as_deref(), Some("0123abc4567def"));
    assert!(row(&b, "Weights").is_some_and(|w| w.contains("SYNTHETIC weights")));
    assert!(row(&b, "Cells").is_some_and(|w| w.contains("20 (19 ok, 1 out of memory")));
    assert!(row(&b, "Prompts").is_some_and(|p| !p.contains("chat template")));
    let mut wrapped: serde_json::Value = serde_json::from_str(DEMO).expect("json");
    wrapped["models"][0]["chat_template"] = serde_json::json!({
        "source": "tokenizer_config.json chat_template", "sha256": "ab", "rendered": "<s>{prompt}", "frame_tokens": 9
    });
    let id = wrapped["models"][0]["id"].as_str().expect("id").to_string();
    let w = load_bundle("wrapped.json", &wrapped.to_string()).expect("loads");
    let want = format!("; wrapped in the chat template of {id} (9 tokens each)");
    assert!(row(&w, "Prompts").is_some_and(|p| p.ends_with(&want)), "{:?}", row(&w, "Prompts"));
    let old = load_bundle("cpu-draft.json", DRAFT_V0_1).expect("loads");
    assert!(row(&old, "Format").is_some_and(|f| f.contains("upgraded from 0.1")));
    assert!(chart_view(ViewKind::Latency, &[&old], &Filters::default(), &Options::default()).figure.is_ok());
}

#[test]
fn broken_bundles_give_user_messages() {
    let not_json = load_bundle("x.json", "{\"schema_version\": ").unwrap_err();
    assert!(not_json.contains("x.json") && not_json.contains("not a valid JSON"), "{not_json}");
    let newer = DEMO.replacen("\"schema_version\": \"1.0\"", "\"schema_version\": \"7.2\"", 1);
    let newer = load_bundle("new.json", &newer).unwrap_err();
    assert!(newer.contains("7.2") && newer.contains("upgrade"), "{newer}");
    let mut v: serde_json::Value = serde_json::from_str(DEMO).expect("json");
    v["cells"][2]["key"].as_object_mut().expect("key").remove("seq_len");
    let missing = load_bundle("m.json", &v.to_string()).unwrap_err();
    assert!(missing.contains("cells[2].key") && missing.contains("seq_len"), "{missing}");
    let bad_quality = H200.replacen("\"value\": 80.0", "\"value\": \"high\"", 1);
    let e = load_bundle("q.json", &bad_quality).unwrap_err();
    assert!(e.contains("quality"), "{e}");
    // Each says what to do, as `dllm-bench validate` does (`BundleError::fix`); a newer format's own fix once.
    assert!(not_json.contains("; fix: repair the JSON at that line and column"), "{not_json}");
    assert!(missing.contains("; fix: give that field"), "{missing}");
    assert_eq!(newer.matches("fix:").count(), 1, "{newer}");
    let not_bundle = load_bundle("n.json", "[1, 2]").unwrap_err();
    assert!(not_bundle.contains("fix: pass a result bundle"), "{not_bundle}");
}

/// Like [`check_hits`], for charts whose points may coincide (the roofline: LLaDA's intensity does not depend
/// on K): one hit per mark, inside the plot.
fn check_hits_in_plot(f: &Figure, d: &Drawn) {
    assert_eq!(d.hits.len(), f.mark_count(), "{}", f.title);
    assert!(d.hits.iter().all(|h| (0..1000).contains(&h.x) && (0..560).contains(&h.y)), "{:?}", d.hits);
}

const DEMO_V1_2: &str = include_str!("../../schema/tests/fixtures/v1.2/demo-quality.json");

#[test]
fn roofline_plots_intensity_and_achieved_rate_with_ceilings_when_given() {
    let b = load_bundle("demo-quality.json", DEMO_V1_2).expect("1.2 fixture loads");
    let cv = chart_view(ViewKind::Roofline, &[&b], &Filters::default(), &Options::default());
    let f = cv.figure.expect("roofline figure");
    assert!(cv.notes.iter().any(|n| n.contains("without ceilings")), "{:?}", cv.notes);
    let (series, _) = xy(&f);
    // AR and LLaDA series, one point per successful cell with recorded work.
    assert_eq!(series.len(), 2, "{:?}", series.iter().map(|s| &s.label).collect::<Vec<_>>());
    let ok = b.bundle.cells.iter().filter(|c| c.status == schema::CellStatus::Ok).count();
    assert_eq!(f.mark_count(), ok);
    // Hand-computed for cell 0 (AR, B=1, N=48): FLOPs and bytes of the repetitions over their median latency.
    let c0 = &b.bundle.cells[0];
    let mut e2e: Vec<f64> = c0.repetitions.iter().map(|r| r.e2e_ms).collect();
    e2e.sort_by(f64::total_cmp);
    let median =
        if e2e.len() % 2 == 1 { e2e[e2e.len() / 2] } else { (e2e[e2e.len() / 2 - 1] + e2e[e2e.len() / 2]) / 2.0 };
    let flops = c0.repetitions[0].flop_count.expect("1.2 records FLOPs") as f64;
    let bytes = c0.repetitions[0].weights_read_bytes.expect("1.2 records bytes") as f64;
    let m0 =
        series.iter().flat_map(|s| &s.marks).find(|m| m.cell.is_some_and(|id| id.cell == 0)).expect("cell 0 plotted");
    assert!(close(m0.x, flops / bytes), "{} vs {}", m0.x, flops / bytes);
    assert!(close(m0.y, flops / (median / 1e3) / 1e12), "{}", m0.y);
    assert!(m0.tip.contains(&c0.key.to_string()) && m0.tip.contains("TB/s of weights"), "{}", m0.tip);
    let (out, d) = svg(&f);
    check_hits_in_plot(&f, &d);
    // A marker per point and one per legend entry.
    assert_eq!(out.matches("<circle").count(), ok + series.len());
    for t in
        ["arithmetic intensity (FLOP/byte of weights read) (log scale)", "achieved FLOP rate (TFLOP/s) (log scale)"]
    {
        assert!(out.contains(t), "missing {t:?}");
    }

    // With the peaks entered: a roofline through the ridge point, not hoverable; tooltips give the share of it.
    let o = Options { peak_bw_tbs: Some(0.01), peak_tflops: Some(0.02), ..Options::default() };
    let f = fig(ViewKind::Roofline, &[&b], &Filters::default(), &o);
    let (series, _) = xy(&f);
    let roof = series.iter().find(|s| s.style == Style::Frontier).expect("roofline series");
    assert!(roof.label.contains("0.01 TB/s") && roof.label.contains("0.02 TFLOP/s"), "{}", roof.label);
    assert_eq!(roof.marks.len(), 3);
    assert!(close(roof.marks[1].x, 2.0) && close(roof.marks[1].y, 0.02), "{:?}", roof.marks[1]);
    assert!(close(roof.marks[0].y, roof.marks[0].x * 0.01));
    assert!(
        series.iter().flat_map(|s| &s.marks).filter(|m| m.cell.is_some()).all(|m| m.tip.contains("% of the roofline"))
    );
    let (_, d) = svg(&f);
    check_hits_in_plot(&f, &d);
    // Filters apply: B = 1 only.
    let f1 = fig(ViewKind::Roofline, &[&b], &Filters { batch: Some(1), ..Filters::default() }, &o);
    assert!(f1.mark_count() < ok);

    // A 1.4 bundle carries the ceilings its run measured: drawn without typing, named in the label and a note;
    // peaks entered replace them.
    let text = include_str!("../../schema/tests/fixtures/v1.4/demo-peaks.json");
    let measured = load_bundle("demo-peaks.json", text).expect("1.4 fixture loads");
    let p = measured.bundle.provenance.executions[0].device_peaks.clone().expect("measured peaks");
    let cv = chart_view(ViewKind::Roofline, &[&measured], &Filters::default(), &Options::default());
    let f = cv.figure.expect("roofline");
    let (series, _) = xy(&f);
    let roof = series.iter().find(|s| s.style == Style::Frontier).expect("the measured ceilings are drawn");
    assert!(roof.label.contains("measured"), "{}", roof.label);
    let ridge = p.matmul_flops_per_s / p.copy_bytes_per_s;
    let at = |x: f64| roof.marks.iter().find(|m| close(m.x, x)).map(|m| m.y);
    if let Some(y) = at(ridge) {
        assert!(close(y, p.matmul_flops_per_s / 1e12), "the ridge is at the measured matmul rate: {y}");
    }
    let first = &roof.marks[0];
    let want = (first.x * p.copy_bytes_per_s).min(p.matmul_flops_per_s) / 1e12;
    assert!(close(first.y, want), "{} vs {want}", first.y);
    assert!(cv.notes.iter().any(|n| n.contains("Ceilings measured by the run")), "{:?}", cv.notes);
    let cv = chart_view(ViewKind::Roofline, &[&measured], &Filters::default(), &o);
    let (series, _) = xy(cv.figure.as_ref().expect("roofline"));
    let roof = series.iter().find(|s| s.style == Style::Frontier).expect("ceilings");
    assert!(roof.label.contains("0.01 TB/s entered") && roof.label.contains("0.02 TFLOP/s entered"), "{}", roof.label);

    // Older bundles say why there is nothing to show.
    let old = h200();
    let e = chart_view(ViewKind::Roofline, &[&old], &Filters::default(), &Options::default()).figure.unwrap_err();
    assert_eq!(e, views::NO_ROOFLINE);

    // The peaks live in the deep link: explorer/tests/page.rs.
}

#[test]
fn a_real_1_2_bundle_gives_every_cell_its_groups_quality_and_bootstrap_intervals() {
    let text = include_str!("../../schema/tests/fixtures/v1.2/demo-quality.json");
    let b = load_bundle("demo-quality.json", text).expect("1.2 fixture loads");
    // Quality is measured in each group's B = 8 cell; every cell of the group shows it.
    assert!(b.quality().iter().all(|q| !q.is_empty()), "every demo cell belongs to a group with quality");
    let labels = views::quality_metrics(&[&b]);
    assert!(labels.iter().any(|l| l == "perplexity [dllm-bench/synthetic-evaluator-tiny]"), "{labels:?}");
    assert!(labels.iter().any(|l| l == "perplexity [dllm-bench/synthetic-llama-tiny]"), "{labels:?}");
    // By default the metric the run defines S_parity with: perplexity under the primary evaluator.
    let (metric, rows) = parity_rows(&[&b], &Filters::default(), &Options::default()).expect("rows");
    assert!(metric.starts_with("perplexity [dllm-bench/synthetic-evaluator-tiny]"), "{metric}");
    assert!(!rows.is_empty());
    for r in &rows {
        let t = r.bootstrap.as_deref().unwrap_or_else(|| panic!("no bootstrap text for B = {}", r.batch));
        assert!(t.starts_with("S_parity [") && t.contains("% of resamples"), "{t}");
    }
    // The same S_parity as the record the runner stored.
    let stored = &b.bundle.parity;
    for r in rows.iter().filter(|r| r.batch == 8) {
        let rec = stored.iter().find(|p| p.seq_len == r.seq).expect("stored record");
        assert_eq!(r.panel.parity, rec.outcome, "N = {}", r.seq);
    }
}

#[test]
fn s_parity_rows_agree_with_the_parity_records_when_cells_failed() {
    // The diffusion cell at S_parity at B = 1, N = 256 ran out of memory (its group's quality, measured in the
    // B = 4 cell, stands). The explorer once searched S_parity again over the ok cells of each B and found
    // another K; it now reads the one computation `report` and the stored bundle.parity use.
    let b = h200_unmeasured();
    let (metric, rows) = parity_rows(&[&b], &Filters::default(), &Options::default()).expect("rows");
    let q =
        b.bundle.cells.iter().flat_map(|c| &c.quality).find(|q| q.label() == metric.split(" (").next().unwrap_or(""));
    let q = q.expect("the metric's values");
    let opts = metrics::parity::ParityOptions::for_metric(&b.bundle, q.metric.clone(), q.evaluator.clone());
    let records = metrics::parity::parity(&b.bundle, &opts);
    assert!(!rows.is_empty());
    for row in &rows {
        let r = records.iter().find(|r| r.seq_len == row.seq).expect("a record per N");
        let s = r.speedups.iter().find(|s| s.batch_size == row.batch).expect("a speedup row per B");
        assert_eq!(row.panel.parity, r.outcome, "N = {}, B = {}", row.seq, row.batch);
        assert_eq!(row.panel.speedup, s.speedup.map(|e| e.value), "N = {}, B = {}", row.seq, row.batch);
    }
    let hit = rows.iter().find(|r| r.seq == 256 && r.batch == 1).expect("the row of the failed cell");
    assert_eq!(hit.s_parity, "K = 32", "S_parity is the group's, not a search over B = 1's ok cells");
    // Parity was reached; what has no timing is the cell to judge by: no verdict, not "parity not reached".
    assert_eq!(
        (hit.speedup_text(), hit.verdict()),
        ("-".to_string(), "no verdict (the diffusion cell at S_parity was not measured)".to_string())
    );
    let (_, f) = views::answer(&[&b], &Options::default()).expect("an answer");
    let Plot::Heat { panels, .. } = &f.plot else { panic!("a heat map") };
    let cell = panels
        .iter()
        .flat_map(|p| &p.cells)
        .find(|c| c.tip.contains("N = 256, B = 1") && c.tip.contains("K = 32"))
        .expect("the answer's cell of the failed one");
    assert_eq!((cell.text.as_str(), cell.value), ("not measured", None));
    assert!(cell.tip.contains("no ok diffusion cell at K = 32, B = 1"), "{}", cell.tip);
}

#[test]
fn diffusion_points_carry_their_k_beside_them_in_latency_and_pareto() {
    let text = include_str!("../../schema/tests/fixtures/v1.4/demo-peaks.json");
    let b = load_bundle("demo-peaks.json", text).expect("1.4 fixture loads");
    let at = Filters { batch: Some(1), seq: Some(96), ..Filters::default() };
    for view in [ViewKind::Latency, ViewKind::Pareto] {
        let f = fig(view, &[&b], &at, &Options::default());
        let (series, _) = xy(&f);
        let mut labelled = 0;
        for m in series.iter().flat_map(|s| &s.marks) {
            let Some(id) = m.cell else { continue };
            let k = b.bundle.cells[id.cell].key.steps;
            assert_eq!(
                m.label,
                k.map(|k| format!("K={k}")),
                "{view:?}: a diffusion point says its K, an AR one nothing"
            );
            labelled += usize::from(k.is_some());
        }
        assert!(labelled >= 2, "{view:?}: {labelled} labelled points");
        let (out, _) = svg(&f);
        assert!(out.matches("K=").count() >= labelled, "{view:?}: the labels are drawn");
    }
}

#[test]
fn sampler_series_get_their_own_legend_labels_parity_rows_and_cost_axes() {
    let text = include_str!("../../schema/tests/fixtures/v1.5/demo-series.json");
    let b = load_bundle("demo-series.json", text).expect("1.5 fixture loads");
    let f = Filters { batch: Some(1), seq: Some(48), ..Filters::default() };
    // Latency: the fast series is a series of its own, its points labelled by threshold at their forwards.
    let lat = fig(ViewKind::Latency, &[&b], &f, &Options::default());
    let (series, _) = xy(&lat);
    let fast = series.iter().find(|s| s.label.contains("prefix+threshold")).expect("the fast series");
    assert_eq!(fast.marks.len(), 3);
    for m in &fast.marks {
        let cell = &b.bundle.cells[m.cell.expect("cell").cell];
        let t = cell.key.threshold.expect("threshold");
        assert_eq!(m.label.as_deref(), Some(format!("t={t}").as_str()));
        assert_eq!(m.x, f64::from(metrics::derive::cell_steps(cell).expect("forwards")));
    }
    assert!(series.iter().any(|s| !s.label.contains("threshold") && s.marks.len() == 4), "the reference's 4 K");
    // Pareto over forwards and tokens per forward: x is the cell's own summary.
    for (px, what) in
        [(views::ParetoX::Forwards, "forward passes"), (views::ParetoX::TokensPerForward, "tokens per forward")]
    {
        let o = Options { pareto_x: px, ..Options::default() };
        let p = fig(ViewKind::Pareto, &[&b], &f, &o);
        assert!(p.title.contains(what), "{}", p.title);
        let (series, _) = xy(&p);
        for m in series.iter().flat_map(|s| &s.marks).filter(|m| m.cell.is_some()) {
            let s = b.summary(m.cell.expect("cell").cell);
            let want = match px {
                views::ParetoX::Forwards => s.forward_passes.expect("forwards").median,
                _ => s.tokens_per_forward.expect("tokens per forward"),
            };
            assert!(close(m.x, want), "{} vs {want}", m.x);
        }
        let (svg_text, _) = svg(&p);
        assert!(svg_text.contains(what), "the axis says {what}");
        // The frontier is the plotted points' own: none of its points is beaten by a point on the chart (fewer
        // forwards, or more tokens per forward, and better quality).
        let (_, dir) = views::quality_metric(&[&b], &o).expect("a metric");
        let better_q = |a: f64, c: f64| match dir {
            metrics::derive::Direction::LowerIsBetter => a < c,
            metrics::derive::Direction::HigherIsBetter => a > c,
        };
        let cheaper = |a: f64, c: f64| if px == views::ParetoX::Forwards { a <= c } else { a >= c };
        let points: Vec<&figure::Mark> = series.iter().flat_map(|s| &s.marks).filter(|m| m.cell.is_some()).collect();
        let front = series.iter().find(|s| s.label.contains("Pareto frontier")).expect("a frontier");
        for fm in &front.marks {
            let beaten = points.iter().find(|m| cheaper(m.x, fm.x) && better_q(m.y, fm.y));
            assert!(beaten.is_none(), "{what}: the frontier's ({}, {}) is beaten by {beaten:?}", fm.x, fm.y);
        }
    }
    // S_parity: one row per series at each (B, N), the threshold series' in its own words.
    let (_, rows) =
        parity_rows(&[&b], &Filters { seq: Some(48), ..Filters::default() }, &Options::default()).expect("parity rows");
    let batches = 3;
    assert_eq!(rows.len(), 2 * batches, "{rows:#?}");
    assert_eq!(rows.iter().filter(|r| r.diffusion.contains("prefix+threshold")).count(), batches);
    let records = metrics::parity::parity(
        &b.bundle,
        &metrics::parity::ParityOptions::from_config(&b.bundle).expect("the demo's [quality]"),
    );
    // Every row words S_parity as the metrics crate (and `report`) does, reference and threshold series alike.
    for r in &rows {
        let rec = records
            .iter()
            .find(|x| x.thresholded == r.diffusion.contains("threshold") && x.seq_len == 48)
            .expect("record");
        assert_eq!(r.s_parity, metrics::parity::s_parity_text(rec), "{}", r.diffusion);
    }
    // The table names the series and the threshold.
    let table = rows_of(&b);
    assert!(table.iter().any(|r| r.text[2] == "llada_low_confidence prefix+threshold" && r.text[3] == "t=0.9"));
}

fn rows_of(b: &LoadedBundle) -> Vec<views::Row> {
    rows(&[b], &Filters::default())
}

#[test]
fn the_answer_comes_first_with_the_report_s_numbers() {
    // The landing view: no `view=` in the address; its verdict cells are the speedups of the bundle's parity
    // records (what `report` prints), one panel per series, coloured on a scale diverging at 1x.
    // (The page opens on it: explorer/tests/page.rs.)
    assert_eq!(ViewKind::ALL[0], ViewKind::Answer);
    let text = include_str!("../../schema/tests/fixtures/v1.5/demo-series.json");
    let b = load_bundle("demo-series.json", text).expect("1.5 fixture loads");
    let (sentence, f) = views::answer(&[&b], &Options::default()).expect("an answer");
    let records = metrics::parity::parity(
        &b.bundle,
        &metrics::parity::ParityOptions::from_config(&b.bundle).expect("the demo's [quality]"),
    );
    let Plot::Heat { panels, center, .. } = &f.plot else { panic!("a heat map") };
    assert_eq!(*center, Some(0.0));
    assert_eq!(panels.len(), 2, "one panel per series");
    let cells: usize = panels.iter().map(|p| p.cells.len()).sum();
    assert_eq!(cells, records.iter().map(|r| r.speedups.len()).sum::<usize>());
    let mut faster = 0;
    for r in &records {
        for row in &r.speedups {
            let want = row.speedup.map(|e| e.value);
            faster += usize::from(want.is_some_and(|v| v > 1.0));
            let hit = panels.iter().flat_map(|p| &p.cells).any(|c| {
                c.tip.contains(&format!("N = {}, B = {}", r.seq_len, row.batch_size))
                    && c.tip.contains(&metrics::parity::s_parity_text(r))
                    // S_parity's own interval, as `report` writes it, where the record has a bootstrap.
                    && metrics::parity::s_parity_interval_text(r).is_none_or(|i| c.tip.contains(&i))
                    // What the grid's steps say of it, as `report` writes it.
                    && metrics::parity::s_parity_bracket_text(r).is_none_or(|i| c.tip.contains(&i))
                    && match want {
                        Some(v) => c.value.is_some_and(|x| close(x, v.log2())) && c.text.trim_end_matches(['*', '?']) == format!("{v:.2}x"),
                        None => c.value.is_none() && c.text == metrics::parity::no_speedup_label(r),
                    }
            });
            assert!(hit, "no verdict cell for N = {} B = {} ({want:?})", r.seq_len, row.batch_size);
        }
    }
    assert!(sentence.contains(&format!("faster in {faster} of the {cells}")), "{sentence}");
    // The demo's primary evaluator is independent: no caution. Its second is the AR model itself: scored by it,
    // the answer says that the baseline scores its own text.
    assert!(!sentence.contains("Caution"), "{sentence}");
    let own = Options { metric: Some("perplexity [dllm-bench/synthetic-llama-tiny]".into()), ..Options::default() };
    let (sentence, _) = views::answer(&[&b], &own).expect("an answer under the AR model's scoring");
    assert!(
        sentence.contains(
            "Caution: perplexity is scored by dllm-bench/synthetic-llama-tiny, which is also the autoregressive model \
             compared: a model scoring its own greedy text favours it"
        ),
        "{sentence}"
    );
    assert!(records.iter().any(|r| metrics::parity::s_parity_interval_text(r).is_some()), "a bootstrap to show");
    // A K series reached at K: the largest K tried below it brackets the true fewest steps; none below: K is the
    // fewest tried. Threshold series and misses have no bracket.
    let mut bracketed = 0;
    for r in &records {
        let text = metrics::parity::s_parity_bracket_text(r);
        match (r.outcome, r.thresholded) {
            (metrics::parity::Parity::Reached { steps }, false) => {
                let text = text.expect("a bracket");
                let want = match r.curve.iter().map(|c| c.steps).filter(|&k| k < steps).max() {
                    Some(below) if below + 1 == steps => format!("{steps} is the fewest steps"),
                    Some(below) => format!("lie in ({below}, {steps}]"),
                    None => format!("{steps} is the fewest steps tried"),
                };
                assert!(text.contains(&want), "{text} / {want}");
                bracketed += 1;
            }
            _ => assert!(text.is_none(), "{text:?}"),
        }
    }
    assert!(bracketed > 0, "the fixture has a K series that reached parity");
    // Drawn as SVG: the cells' texts are there.
    let (svg_text, _) = svg(&f);
    assert!(svg_text.contains("x<") || svg_text.contains("no parity"), "verdict texts drawn");
    // The landing view draws the Pareto frontier beside the verdict: the Pareto tab's figure at the same shape.
    let cv = chart_view(ViewKind::Answer, &[&b], &Filters::default(), &Options::default());
    let pair = cv.figure.expect("the answer");
    let Plot::Pair { first, second } = &pair.plot else { panic!("verdict and Pareto frontier") };
    // Both halves, and the pair, say that the weights were synthetic, once.
    assert!(b.synthetic_weights, "the fixture is a synthetic run");
    for t in [&pair.title, &first.title, &second.title] {
        assert!(t.ends_with("[SYNTHETIC weights]") && t.matches("SYNTHETIC").count() == 1, "{t}");
    }
    let mut labelled = f.clone();
    labelled.label_synthetic();
    assert_eq!(**first, labelled);
    assert_eq!(**second, fig(ViewKind::Pareto, &[&b], &Filters::default(), &Options::default()));
    assert!(cv.notes.iter().any(|n| n.starts_with("Showing B = 1")), "the Pareto's shape is named: {:?}", cv.notes);
    assert_eq!(pair.mark_count(), first.mark_count() + second.mark_count());
    // Drawn side by side on a wide canvas, stacked on a narrow one; every mark is hit where it was drawn, and a
    // hit names its own part's tooltip.
    for width in [1000, 390] {
        let height = pair.height(width);
        assert_eq!(height > width * 56 / 100, width < figure::PAIR_SIDE_BY_SIDE, "{width}: {height}");
        let mut out = String::new();
        let d = {
            let root = SVGBackend::with_string(&mut out, (width, height)).into_drawing_area();
            figure::draw(&root, &pair, ChartStyle::default()).expect("draws")
        };
        assert_eq!(d.hits.len(), pair.mark_count());
        let panels = match &first.plot {
            Plot::Heat { panels, .. } => panels.len(),
            _ => unreachable!(),
        };
        let (verdict, frontier): (Vec<&figure::Hit>, Vec<&figure::Hit>) =
            d.hits.iter().partition(|h| h.series < panels);
        assert_eq!((verdict.len(), frontier.len()), (first.mark_count(), second.mark_count()));
        let (vx, fx) = (verdict.iter().map(|h| h.x).max(), frontier.iter().map(|h| h.x).min());
        let (vy, fy) = (verdict.iter().map(|h| h.y).max(), frontier.iter().map(|h| h.y).min());
        match width >= figure::PAIR_SIDE_BY_SIDE {
            true => assert!(vx < fx, "{width}: the frontier is right of the verdict"),
            false => assert!(vy < fy, "{width}: the frontier is below the verdict"),
        }
        let h = frontier[0];
        let (tip, _) = pair.hit_info(h).expect("a frontier mark");
        assert!(tip.contains("on the Pareto frontier") || tip.contains("dominated"), "{tip}");
        let (tip, _) = pair.hit_info(verdict[0]).expect("a verdict cell");
        assert!(tip.contains("S_parity"), "{tip}");
    }
    // Without quality the answer says so and the view falls back to the latencies.
    let old = load_bundle("demo.json", include_str!("../../schema/tests/fixtures/v1.0/demo.json")).expect("1.0");
    assert_eq!(views::answer(&[&old], &Options::default()).unwrap_err(), views::NO_QUALITY);
    // A bundle of one kind of model says which kind it lacks.
    for (ar, lacks) in [(true, "only autoregressive cells"), (false, "only diffusion cells")] {
        let series = include_str!("../../schema/tests/fixtures/v1.5/demo-series.json");
        let mut v: serde_json::Value = serde_json::from_str(series).expect("json");
        v["cells"].as_array_mut().expect("cells").retain(|c| (c["key"]["sampler"] == "ar_greedy") == ar);
        v.as_object_mut().expect("bundle").remove("parity");
        let one = load_bundle("one.json", &v.to_string()).expect("loads");
        let err = views::answer(&[&one], &Options::default()).unwrap_err();
        assert!(err.contains(lacks), "{err}");
    }
    let cv = chart_view(ViewKind::Answer, &[&old], &Filters::default(), &Options::default());
    assert!(cv.figure.expect("latency").title.starts_with("Latency"));
    assert!(cv.notes.iter().any(|n| n == views::NO_QUALITY));
}

/// (cell, y) of every mark of the series `keep` selects, sorted.
fn marks_of<'a>(series: impl Iterator<Item = &'a figure::Series>) -> Vec<(Option<figure::CellId>, u64)> {
    let mut v: Vec<_> = series
        .filter(|s| s.style != Style::Frontier)
        .flat_map(|s| s.marks.iter().map(|m| (m.cell, m.y.to_bits())))
        .collect();
    v.sort_by_key(|(c, y)| (c.map(|c| (c.bundle, c.cell)), *y));
    v
}

#[test]
fn small_multiples_show_every_shape_with_shared_axes() {
    let (b, a100) = (h200(), load_bundle("study-a100.json", A100).expect("loads"));
    let multiples = Options { multiples: true, ..Options::default() };
    let ch = views::filter_choices(&[&b]);
    assert!(ch.batches.len() > 1 && ch.seqs.len() > 1, "the fixture has several shapes");
    for view in [ViewKind::Latency, ViewKind::Pareto, ViewKind::QualitySteps, ViewKind::Throughput] {
        let cv = chart_view(view, &[&b], &Filters::default(), &multiples);
        let f = cv.figure.unwrap_or_else(|e| panic!("{view:?}: {e}"));
        let Plot::Xy { x, y, series, refs, grid: Some(g) } = &f.plot else { panic!("{view:?}: not small multiples") };
        // Facets: rows N, columns B (throughput, whose x axis is B: one per N).
        let shapes: Vec<(u32, Option<u32>)> = match view {
            ViewKind::Throughput => ch.seqs.iter().map(|&n| (n, None)).collect(),
            _ => ch.seqs.iter().flat_map(|&n| ch.batches.iter().map(move |&b| (n, Some(b)))).collect(),
        };
        let titles: Vec<String> =
            shapes.iter().map(|(n, b)| b.map_or(format!("N = {n}"), |b| format!("N = {n}, B = {b}"))).collect();
        assert_eq!(g.titles, titles, "{view:?}");
        if view != ViewKind::Throughput {
            assert_eq!(g.cols, ch.batches.len());
        }
        assert!(cv.notes.iter().any(|n| n.starts_with("Every shape at once")), "{:?}", cv.notes);
        // Each facet holds what the single chart of its shape holds: the same cells at the same values, the same
        // reference values, on the same axes.
        for (k, (n, bs)) in shapes.iter().enumerate() {
            let at = Filters { seq: Some(*n), batch: *bs, ..Filters::default() };
            let single = chart_view(view, &[&b], &at, &Options::default()).figure;
            let facet = marks_of(series.iter().filter(|s| s.facet == k));
            let facet_refs: Vec<u64> = refs.iter().filter(|r| r.facet == k).map(|r| r.value.to_bits()).collect();
            match &single {
                Ok(one) => {
                    let (ss, sr) = xy(one);
                    assert_eq!(facet, marks_of(ss.iter()), "{view:?} at {}", g.titles[k]);
                    assert_eq!(facet_refs, sr.iter().map(|r| r.value.to_bits()).collect::<Vec<_>>());
                    let Plot::Xy { x: x1, y: y1, .. } = &one.plot else { unreachable!() };
                    assert_eq!((&x.label, &y.label, x.log, y.log), (&x1.label, &y1.label, x1.log, y1.log));
                }
                Err(_) => assert!(facet.is_empty() && facet_refs.is_empty(), "{view:?} at {}", g.titles[k]),
            }
        }
        assert_eq!(marks_of(series.iter()).len(), f.mark_count(), "every mark is in a facet");
        // A series keeps its colour in every facet.
        for s in series {
            assert!(series.iter().filter(|t| t.label == s.label).all(|t| t.colour == s.colour), "{}", s.label);
        }
        // Drawn: one hit per mark, each facet's marks in its own cell of the grid (left of the next column's,
        // above the next row's).
        let (_, d) = svg(&f);
        assert_eq!(d.hits.len(), f.mark_count(), "{view:?}");
        let cols = g.cols.max(1);
        let span = |k: usize| {
            let hs: Vec<_> = d.hits.iter().filter(|h| series[h.series].facet == k).collect();
            let (x0, x1) = (hs.iter().map(|h| h.x).min(), hs.iter().map(|h| h.x).max());
            let (y0, y1) = (hs.iter().map(|h| h.y).min(), hs.iter().map(|h| h.y).max());
            (x0.zip(x1), y0.zip(y1))
        };
        for k in 0..g.titles.len() {
            for j in 0..g.titles.len() {
                let ((Some(xk), Some(yk)), (Some(xj), Some(yj))) = (span(k), span(j)) else { continue };
                if k / cols == j / cols && k % cols < j % cols {
                    assert!(xk.1 < xj.0, "{view:?}: facet {k} reaches past facet {j}");
                }
                if k % cols == j % cols && k / cols < j / cols {
                    assert!(yk.1 < yj.0, "{view:?}: facet {k} reaches below facet {j}");
                }
            }
        }
        assert!(f.height(1000) > 560 || g.titles.len() <= cols, "several rows are drawn taller");
    }
    // Filters narrow the grid: B = 1 leaves one column.
    let one_b = Filters { batch: Some(1), ..Filters::default() };
    let f = fig(ViewKind::Latency, &[&b], &one_b, &multiples);
    let Plot::Xy { grid: Some(g), .. } = &f.plot else { panic!("small multiples") };
    assert_eq!((g.cols, g.titles.len()), (1, ch.seqs.len()));
    // Two bundles: both in every facet, each series once in the legend's labels.
    let f = fig(ViewKind::Latency, &[&b, &a100], &Filters::default(), &multiples);
    let (series, _) = xy(&f);
    assert!(series.iter().any(|s| s.alt) && series.iter().any(|s| !s.alt));
    let (_, d) = svg(&f);
    assert_eq!(d.hits.len(), f.mark_count());
}

#[test]
fn small_multiples_refuse_more_shapes_than_fit_and_say_how_to_narrow() {
    // A bundle with 25 sequence lengths: 25 facets at one B are more than MAX_FACETS.
    let mut bundle = h200().bundle;
    let cell = bundle.cells[0].clone();
    for n in 0..=views::MAX_FACETS as u32 {
        let mut c = cell.clone();
        c.key.seq_len = 10_000 + n;
        bundle.cells.push(c);
    }
    let read =
        schema::ReadBundle { bundle, file_version: schema::SchemaVersion::CURRENT.number(), recounted_repetitions: 0 };
    let b = LoadedBundle::new("many-shapes.json", read);
    let o = Options { multiples: true, ..Options::default() };
    let e = chart_view(ViewKind::Throughput, &[&b], &Filters::default(), &o).figure.expect_err("too many");
    assert!(e.contains("too many") && e.contains("choose an N or a B"), "{e}");
    // Narrowed by the filters, it draws.
    let one_n = Filters { seq: Some(10_000), ..Filters::default() };
    assert!(chart_view(ViewKind::Latency, &[&b], &one_n, &o).figure.is_ok());
}

#[test]
fn throughput_scaling_draws_the_bars_numbers_as_lines_over_b() {
    let b = h200();
    for n in views::filter_choices(&[&b]).seqs {
        let lines = views::throughput_scaling(&[&b], n, &Options::default()).expect("a figure");
        let bars =
            fig(ViewKind::Throughput, &[&b], &Filters { seq: Some(n), ..Filters::default() }, &Options::default());
        let (ls, _) = xy(&lines);
        assert_eq!(marks_of(ls.iter()), marks_of(xy(&bars).0.iter()), "N = {n}: the same cells and values");
        for s in ls {
            assert!(s.marks.windows(2).all(|w| w[0].x < w[1].x), "{}: one point per B, in order", s.label);
            for m in &s.marks {
                let c = &b.bundle.cells[m.cell.expect("a cell").cell];
                assert_eq!((m.x, c.key.seq_len), (f64::from(c.key.batch_size), n));
            }
        }
        let (_, d) = svg(&lines);
        check_hits(&lines, &d);
    }
    assert!(views::throughput_scaling(&[&b], 7, &Options::default()).is_err(), "no cell at N = 7");
}

#[test]
fn throughput_bars_keep_each_threshold_apart_from_the_ar_model_and_from_each_other() {
    // The 1.5 fixture: AR, the reference sampler at 4 K and the prefix+threshold series at 3 thresholds, 3 B.
    let text = include_str!("../../schema/tests/fixtures/v1.5/demo-series.json");
    let b = load_bundle("demo-series.json", text).expect("1.5 fixture loads");
    let f = fig(ViewKind::Throughput, &[&b], &Filters { seq: Some(48), ..Filters::default() }, &Options::default());
    let (series, _) = xy(&f);
    assert_eq!(series.len(), 1 + 4 + 3, "{:?}", series.iter().map(|s| &s.label).collect::<Vec<_>>());
    for s in series {
        let keys: Vec<&schema::CellKey> =
            s.marks.iter().map(|m| &b.bundle.cells[m.cell.expect("a cell").cell].key).collect();
        assert_eq!(keys.len(), 3, "{}: a bar per B", s.label);
        let first = keys[0];
        assert!(
            keys.iter().all(|k| (k.sampler, k.steps, k.threshold, k.cache)
                == (first.sampler, first.steps, first.threshold, first.cache)),
            "{}: one sampler, K and threshold per series",
            s.label
        );
        let ar = first.sampler == schema::Sampler::ArGreedy;
        assert_eq!(s.colour == figure::AR, ar, "{}: only the AR model is black", s.label);
        if let Some(t) = first.threshold {
            assert!(s.label.ends_with(&format!(" t={t}")), "{}", s.label);
        }
    }
    // AR first; every diffusion series a colour of its own.
    assert_eq!(series[0].colour, figure::AR);
    let colours: std::collections::BTreeSet<usize> = series[1..].iter().map(|s| s.colour).collect();
    assert_eq!(colours.len(), series.len() - 1, "each K and threshold has its colour");
    // Each bar in a B group has an offset of its own.
    let xs: std::collections::BTreeSet<u64> = series.iter().map(|s| s.marks[0].x.to_bits()).collect();
    assert_eq!(xs.len(), series.len());
    // The scaling figure groups the same cells under the same labels.
    let lines = views::throughput_scaling(&[&b], 48, &Options::default()).expect("a figure");
    let by_label = |s: &Vec<figure::Series>| {
        let mut v: Vec<_> = s.iter().map(|s| (s.label.clone(), marks_of(std::iter::once(s)))).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    assert_eq!(by_label(xy(&lines).0), by_label(series));
}

/// The study fixture with energy (format 1.7's `energy_j`) in every repetition but those of the first cell: a
/// repetition's joules are its output tokens times (1 + its index in the cell) times 0.01.
fn h200_with_energy() -> LoadedBundle {
    let mut v: serde_json::Value = serde_json::from_str(H200).expect("json");
    for (ci, c) in v["cells"].as_array_mut().expect("cells").iter_mut().enumerate().skip(1) {
        for (ri, r) in c["repetitions"].as_array_mut().expect("repetitions").iter_mut().enumerate() {
            let tokens = r["output_tokens"].as_f64().expect("tokens");
            r["energy_j"] = serde_json::json!(tokens * (1 + ri + ci % 3) as f64 * 0.01);
            r["energy_window_ms"] = r["e2e_ms"].clone();
        }
    }
    load_bundle("study-energy.json", &v.to_string()).expect("the fixture with energy loads")
}

#[test]
fn energy_replaces_latency_where_a_bundle_measured_it_and_is_absent_otherwise() {
    let b = h200_with_energy();
    assert!(views::has_energy(&[&b]) && !views::has_energy(&[&h200()]));
    let o = Options { energy: true, ..Options::default() };
    let f = shape(1, 256);
    let jpt = |cell: usize| metrics::energy::cell_energy(&b.bundle.cells[cell]).joules_per_token;
    // Latency vs steps: y is the cell's median joules per token, with min..max; the AR line too.
    let l = chart_view(ViewKind::Latency, &[&b], &f, &o);
    let lf = l.figure.expect("energy figure");
    assert!(lf.title.starts_with("Energy per token vs diffusion steps"), "{}", lf.title);
    let (series, refs) = xy(&lf);
    let marks: Vec<&figure::Mark> = series.iter().flat_map(|s| &s.marks).collect();
    assert!(!marks.is_empty());
    for m in &marks {
        let e = jpt(m.cell.expect("cell").cell).expect("only cells with energy are drawn");
        assert!(close(m.y, e.median) && m.lo == Some(e.min) && m.hi == Some(e.max), "{m:?}");
        assert!(m.tip.contains("J per token"), "{}", m.tip);
    }
    assert!(refs.iter().all(|r| r.label.contains("J/token")), "{refs:?}");
    assert!(l.notes.iter().any(|n| n.starts_with("Energy: joules per generated token")), "{:?}", l.notes);
    let (text, _) = svg(&lf);
    assert!(text.contains("energy per generated token (J, median)"));
    // The Pareto frontier over energy: x is the joules per token; the frontier over them.
    let p = fig(ViewKind::Pareto, &[&b], &f, &o);
    assert!(p.title.starts_with("Pareto frontier: energy vs"), "{}", p.title);
    let (series, _) = xy(&p);
    let points: Vec<&figure::Mark> = series.iter().flat_map(|s| &s.marks).filter(|m| m.cell.is_some()).collect();
    assert!(!points.is_empty());
    for m in &points {
        assert!(close(m.x, jpt(m.cell.expect("cell").cell).expect("energy").median), "{m:?}");
    }
    let front = series.iter().find(|s| s.style == Style::Frontier).expect("a frontier");
    assert!(front.marks.iter().all(|m| points.iter().any(|p| close(p.x, m.x) && close(p.y, m.y))));
    // A bundle without energy: the option changes nothing (never a 0).
    let plain = h200();
    for view in [ViewKind::Latency, ViewKind::Pareto, ViewKind::Answer] {
        assert_eq!(
            chart_view(view, &[&plain], &f, &o),
            chart_view(view, &[&plain], &f, &Options::default()),
            "{view:?}"
        );
    }
    // The first cell has no energy: it is left out of the latency view, not drawn at 0.
    let c0 = &b.bundle.cells[0].key;
    let at0 = shape(c0.batch_size, c0.seq_len);
    let l0 = chart_view(ViewKind::Latency, &[&b], &at0, &o);
    if let Ok(f0) = &l0.figure {
        let (series, refs) = xy(f0);
        assert!(series.iter().flat_map(|s| &s.marks).all(|m| m.cell.is_none_or(|c| c.cell != 0) && m.y > 0.0));
        assert!(refs.iter().all(|r| r.value > 0.0));
    }
}

#[test]
fn no_line_is_drawn_through_a_single_point() {
    // A frontier or line of one point (a Dream run's Pareto frontier) is its marker only: a one-point polyline
    // draws nothing and makes SVG renderers warn (usvg: "Polyline '' has less than 2 points").
    let one_point_polylines = |f: &Figure| {
        let (out, _) = svg(f);
        let points =
            out.split("<polyline").skip(1).map(|l| l.split("points=\"").nth(1).and_then(|p| p.split('"').next()));
        points.map(|p| p.unwrap_or("").split_whitespace().count()).filter(|n| *n < 2).count()
    };
    let mut f = fig(ViewKind::Pareto, &[&h200()], &shape(1, 128), &Options::default());
    assert_eq!(one_point_polylines(&f), 0);
    let Plot::Xy { series, .. } = &mut f.plot else { panic!("not an xy plot") };
    let styles: Vec<Style> = series.iter().map(|s| s.style).collect();
    assert!(styles.contains(&Style::Frontier) && styles.contains(&Style::Line), "{styles:?}");
    for s in series.iter_mut() {
        s.marks.truncate(1);
    }
    assert_eq!(one_point_polylines(&f), 0);
}

#[test]
fn a_bundle_with_fewer_cells_than_planned_is_partial() {
    let whole = load_bundle("demo-series.json", include_str!("../../schema/tests/fixtures/v1.5/demo-series.json"))
        .expect("fixture loads");
    assert_eq!(whole.partial, None, "every planned cell is there");
    let mut json: serde_json::Value =
        serde_json::from_str(include_str!("../../schema/tests/fixtures/v1.5/demo-series.json")).expect("json");
    let planned = json["cells"].as_array().expect("cells").len();
    json["provenance"]["planned_cells"] = planned.into();
    json["cells"].as_array_mut().expect("cells").truncate(5);
    let cut = load_bundle("partial.json", &json.to_string()).expect("a partial bundle loads");
    assert_eq!(cut.partial.as_deref(), Some(format!("5 of {planned} planned cells").as_str()));
}

#[test]
fn s_parity_rows_warn_where_parity_was_reached_in_only_some_resamples() {
    // `report`'s bold warning, on its test (a reached S_parity, reached in fewer than every bootstrap resample):
    // in the real 1.2 demo run, N = 96 reached parity in 67% of the resamples, N = 48 in all of them.
    let b =
        load_bundle("v1.2.json", include_str!("../../schema/tests/fixtures/v1.2/demo-quality.json")).expect("loads");
    let (_, rows) = parity_rows(&[&b], &Filters::default(), &Options::default()).expect("rows");
    assert!(rows.iter().any(|r| r.seq == 48) && rows.iter().any(|r| r.seq == 96));
    for r in &rows {
        let want =
            (r.seq == 96).then_some("parity was reached in only 67% of the bootstrap resamples: S_parity is uncertain");
        assert_eq!(
            r.uncertain.as_deref().map(|w| &w[..want.map_or(0, str::len)]),
            want,
            "N = {} B = {}",
            r.seq,
            r.batch
        );
        if let Some(w) = &r.uncertain {
            assert_eq!(r.warnings().first(), Some(w), "first in the warning column");
        }
    }
    // Not reached at all: no such warning (the verdict says it), even where some resamples reached it.
    let b =
        load_bundle("v1.3.json", include_str!("../../schema/tests/fixtures/v1.3/demo-quality.json")).expect("loads");
    let (_, rows) = parity_rows(&[&b], &Filters::default(), &Options::default()).expect("rows");
    assert!(!rows.is_empty() && rows.iter().all(|r| r.uncertain.is_none() && r.s_parity.starts_with("not reached")));
}

#[test]
fn the_answer_of_a_partial_bundle_says_its_quality_is_not_measured_yet() {
    // The diffusion cells' quality not measured yet (a group's quality comes with its largest B, not run yet).
    let text = include_str!("../../schema/tests/fixtures/v1.2/demo-quality.json");
    let mut json: serde_json::Value = serde_json::from_str(text).expect("json");
    let cells = json["cells"].as_array_mut().expect("cells");
    for c in cells.iter_mut().filter(|c| c["key"]["sampler"] != "ar_greedy") {
        c["quality"] = serde_json::json!([]);
        // Without their continuations too: continuations no evaluator scored are a run stopped while scoring.
        c.as_object_mut().expect("a cell").remove("generations");
    }
    let whole = load_bundle("whole.json", &json.to_string()).expect("loads");
    let e = views::answer(&[&whole], &Options::default()).expect_err("nothing to judge");
    assert_eq!(e, "no diffusion series against an AR model has quality values");
    let planned = json["cells"].as_array().expect("cells").len() + 6;
    json["provenance"]["planned_cells"] = planned.into();
    let partial = load_bundle("partial.json", &json.to_string()).expect("loads");
    let e = views::answer(&[&partial], &Options::default()).expect_err("nothing to judge yet");
    assert!(e.contains("PARTIAL bundle") && e.contains("not measured yet"), "{e}");
}

#[test]
fn charts_name_the_cells_they_leave_out() {
    // study-h200's LLaDA cell at K = 64, B = 4, N = 256 ran out of memory: the charts of that shape say so.
    let b = h200();
    let note = |view: ViewKind, f: &Filters| {
        let cv = chart_view(view, &[&b], f, &Options::default());
        cv.notes.into_iter().filter(|n| n.starts_with("Not drawn")).collect::<Vec<_>>()
    };
    let oom = "synthetic-llada-tiny (low-confidence remasking) block 32 K=64";
    for view in [ViewKind::Latency, ViewKind::Pareto, ViewKind::QualitySteps] {
        let notes = note(view, &shape(4, 256));
        assert_eq!(notes.len(), 1, "{view:?}: {notes:?}");
        assert!(notes[0].contains("(B = 4, N = 256)") && notes[0].contains(&format!("{oom} (out of memory)")));
        assert!(note(view, &shape(1, 256)).is_empty(), "{view:?}: every cell of B = 1 ran");
    }
    // Over every B: the throughput and time per step at N = 256 name its B.
    for view in [ViewKind::Throughput, ViewKind::StepTime] {
        let notes = note(view, &Filters { seq: Some(256), ..Filters::default() });
        assert!(notes.len() == 1 && notes[0].contains(&format!("{oom} B=4 (out of memory)")), "{view:?}: {notes:?}");
        assert!(note(view, &Filters { seq: Some(128), ..Filters::default() }).is_empty(), "{view:?}");
    }
    // The AR timings: the AR model's own failures, none here; a failed AR cell is named with its B and N.
    assert!(note(ViewKind::ArTiming, &Filters::default()).is_empty());
    let mut v: serde_json::Value = serde_json::from_str(H200).expect("json");
    let ar = v["cells"].as_array_mut().expect("cells").iter_mut().find(|c| c["key"]["sampler"] == "ar_greedy");
    let ar = ar.expect("an AR cell");
    let (bs, n) = (ar["key"]["batch_size"].clone(), ar["key"]["seq_len"].clone());
    ar["status"] = serde_json::json!({"state": "error", "message": "boom"});
    ar["repetitions"] = serde_json::json!([]);
    let e = load_bundle("e.json", &v.to_string()).expect("loads");
    let cv = chart_view(ViewKind::ArTiming, &[&e], &Filters::default(), &Options::default());
    let want = format!("synthetic-llama-tiny (autoregressive) B={bs} N={n} (failed)");
    assert!(cv.notes.iter().any(|n| n.starts_with("Not drawn") && n.contains(&want)), "{:?}", cv.notes);
}

/// The H200 fixture with the diffusion cell at S_parity at B = 1, N = 256 out of memory: parity reached there,
/// but not measured.
fn h200_unmeasured() -> LoadedBundle {
    let mut v: serde_json::Value = serde_json::from_str(H200).expect("json");
    let cells = v["cells"].as_array_mut().expect("cells");
    let failed = cells
        .iter_mut()
        .find(|c| c["key"]["steps"] == 32 && c["key"]["batch_size"] == 1 && c["key"]["seq_len"] == 256)
        .expect("the K = 32, B = 1, N = 256 cell");
    failed["status"] = serde_json::json!({"state": "oom", "message": "out of memory (test)"});
    failed["repetitions"] = serde_json::json!([]);
    load_bundle("failed.json", &v.to_string()).expect("loads")
}

#[test]
fn the_answer_counts_only_rows_with_a_verdict_and_says_the_unmeasured_apart() {
    let b = h200_unmeasured();
    let (sentence, f) = views::answer(&[&b], &Options::default()).expect("an answer");
    let Plot::Heat { panels, .. } = &f.plot else { panic!("a heat map") };
    let cells: Vec<_> = panels.iter().flat_map(|p| &p.cells).collect();
    let unmeasured = cells.iter().filter(|c| c.text == "not measured").count();
    let judged = cells.len() - unmeasured - cells.iter().filter(|c| c.text == "no data").count();
    assert_eq!(unmeasured, 1);
    assert!(sentence.contains(&format!("of the {judged} (series, N, B) judged")), "{sentence}");
    assert!(
        sentence
            .contains("Not judged: 1 more where parity was reached but the diffusion cell at S_parity has no timing"),
        "{sentence}"
    );
    // The caption says what grey means and the short forms.
    let notes = chart_view(ViewKind::Answer, &[&b], &Filters::default(), &Options::default()).notes;
    let caption = notes.iter().find(|n| n.contains("grey")).expect("the heat map's caption");
    assert!(
        caption.contains(
            "no parity (not reached) or not measured (reached, but the diffusion cell at S_parity has no timing)"
        ),
        "{caption}"
    );
    assert!(caption.contains("n/p (no parity) and n/m (not measured)"), "{caption}");
}

#[test]
fn a_heat_cell_without_a_value_is_hatched_and_written_short_where_its_words_do_not_fit() {
    let b = h200_unmeasured();
    let (_, f) = views::answer(&[&b], &Options::default()).expect("an answer");
    let draw = |width: u32| {
        let mut out = String::new();
        {
            let root = SVGBackend::with_string(&mut out, (width, f.height(width))).into_drawing_area();
            let style = ChartStyle { min_text: 11.0, ..ChartStyle::default() };
            figure::draw(&root, &f, style).expect("chart draws");
        }
        out
    };
    // Wide: the words; narrow: the short form, never a bare grey cell.
    let has = |svg: &str, text: &str| svg.lines().any(|l| l.trim() == text);
    assert!(has(&draw(1600), "not measured"));
    let narrow = draw(260);
    assert!(!has(&narrow, "not measured") && has(&narrow, "n/m"), "the short form is drawn");
    // Hatched, in a grey far from the diverging scale's neutral.
    let hex = |c: RGBColor| format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2);
    assert!(narrow.contains(&hex(figure::NA_HATCH)), "hatched");
    let neutral = figure::diverging(0.0);
    assert!(i32::from(neutral.0) - i32::from(figure::NA_FILL.0) >= 40, "darker than the neutral");
}

#[test]
fn quality_vs_steps_marks_a_threshold_series_s_parity_at_its_point() {
    let text = include_str!("../../schema/tests/fixtures/v1.5/demo-series.json");
    let b = load_bundle("demo-series.json", text).expect("1.5 fixture loads");
    let (metric, _) = views::quality_metric(&[&b], &Options::default()).expect("quality");
    let q = b.bundle.cells.iter().flat_map(|c| &c.quality).find(|q| q.label() == metric).expect("values");
    let opts = metrics::parity::ParityOptions::for_metric(&b.bundle, q.metric.clone(), q.evaluator.clone());
    let records = metrics::parity::parity(&b.bundle, &opts);
    let mut checked = 0;
    for r in records.iter().filter(|r| r.thresholded) {
        let Some(th) = r.parity_threshold else { continue };
        for bs in r.speedups.iter().map(|s| s.batch_size) {
            let f = fig(ViewKind::QualitySteps, &[&b], &shape(bs, r.seq_len), &Options::default());
            let (series, refs) = xy(&f);
            let point = series
                .iter()
                .flat_map(|s| &s.marks)
                .find(|m| m.cell.is_some_and(|id| b.bundle.cells[id.cell].key.threshold == Some(th)))
                .expect("the point at the parity threshold");
            let line = refs
                .iter()
                .find(|l| l.vertical && l.label.contains("threshold"))
                .unwrap_or_else(|| panic!("B = {bs}: no S_parity line of the threshold series: {refs:#?}"));
            assert_eq!(line.value, point.x, "B = {bs}: at the point's plotted x");
            checked += 1;
        }
    }
    assert!(checked > 0, "the fixture has a threshold series at parity");
}

#[test]
fn a_bundle_stopped_while_its_evaluators_scored_is_partial_in_the_explorer() {
    // Every cell there, but the evaluator's perplexity of the diffusion cells' continuations not scored yet.
    let text = include_str!("../../schema/tests/fixtures/v1.2/demo-quality.json");
    let whole = load_bundle("whole.json", text).expect("loads");
    assert_eq!(whole.partial, None);
    let mut json: serde_json::Value = serde_json::from_str(text).expect("json");
    let mut cut = 0;
    for c in json["cells"].as_array_mut().expect("cells").iter_mut() {
        if c["key"]["sampler"] != "ar_greedy" && c["generations"].as_array().is_some_and(|g| !g.is_empty()) {
            c["quality"].as_array_mut().expect("quality").retain(|q| q["evaluator"].is_null());
            cut += 1;
        }
    }
    assert!(cut > 0);
    let b = load_bundle("scoring.json", &json.to_string()).expect("loads");
    let planned = json["cells"].as_array().expect("cells").len();
    let want =
        format!("{planned} of {planned} planned cells, the continuations of {cut} not yet scored by every evaluator");
    assert_eq!(b.partial.as_deref(), Some(want.as_str()));
}

#[test]
fn compared_bundles_of_other_shapes_show_the_main_bundles_smallest_and_say_so() {
    // [B] (the demo, N = 48 and 96) shares no shape with [A] (the study, N = 128 and 256): the default shape is
    // [A]'s, so that its series are drawn, and the note says [B] has no cell there.
    let (a, b) = (
        h200(),
        load_bundle("demo.json", include_str!("../../schema/tests/fixtures/v1.5/demo-series.json")).expect("loads"),
    );
    let v = chart_view(ViewKind::Latency, &[&a, &b], &Filters::default(), &Options::default());
    assert!(
        v.notes.iter().any(|n| n.contains("Showing B = 1, N = 128 (the smallest of [A]'s: the bundles share no shape")),
        "{:?}",
        v.notes
    );
    let f = v.figure.expect("a figure");
    assert!(xy(&f).0.iter().any(|s| !s.alt && !s.marks.is_empty()), "[A]'s series are drawn");
    // Sharing shapes: the smallest they share, worded as for one bundle.
    let v = chart_view(ViewKind::Latency, &[&a, &a], &Filters::default(), &Options::default());
    assert!(v.notes.iter().any(|n| n.starts_with("Showing B = 1, N = 128 (the smallest;")), "{:?}", v.notes);
}

#[test]
fn the_answer_says_degenerate_text_at_parity_and_timing_views_say_single_repetitions() {
    // The study fixture's LLaDA output at S_parity has far less entropy than Llama's at N = 128: the answer's
    // sentence and its cells' tooltips say so, as `report` does.
    let b = h200();
    let cv = chart_view(ViewKind::Answer, &[&b], &Filters::default(), &Options::default());
    let note = &cv.notes[1];
    assert!(note.contains("Warning: a speedup marked * may owe its parity to repetitive text"), "{note}");
    let Plot::Pair { first, .. } = &cv.figure.expect("the answer draws").plot else { panic!("a pair") };
    let Plot::Heat { panels, .. } = &first.plot else { panic!("a heat map") };
    let cells: Vec<&figure::HeatCell> = panels.iter().flat_map(|p| &p.cells).collect();
    let low = "\nWarning: at S_parity the diffusion output's unigram";
    let warned: Vec<&&figure::HeatCell> = cells.iter().filter(|c| c.tip.contains(low)).collect();
    assert!(!warned.is_empty(), "the cells' tooltips");
    // Marked in the cell where it has a speedup, and only there.
    assert!(warned.iter().any(|c| c.text.ends_with("x*")), "{warned:?}");
    assert!(cells.iter().filter(|c| c.text.ends_with('*')).all(|c| c.tip.contains(low)));
    // The committed runner bundle measured one repetition per cell: the timing views say so under the chart.
    let runner =
        load_bundle("runner.json", include_str!("../../results/gpu_primary-h200-runner-20261126.json")).expect("loads");
    for view in [ViewKind::Latency, ViewKind::Throughput, ViewKind::ArTiming, ViewKind::StepTime] {
        let notes = chart_view(view, &[&runner], &Filters::default(), &Options::default()).notes;
        assert!(notes.iter().any(|n| n.contains("measured cells have one repetition")), "{view:?}: {notes:?}");
    }
    let notes = chart_view(ViewKind::Latency, &[&b], &Filters::default(), &Options::default()).notes;
    assert!(!notes.iter().any(|n| n.contains("one repetition")), "the fixture has three: {notes:?}");
    // Only the AR model kept: latency vs steps says why it draws nothing.
    let ar = Filters { sampler: Some("ar_greedy".into()), ..Filters::default() };
    let e = chart_view(ViewKind::Latency, &[&runner], &ar, &Options::default()).figure.expect_err("nothing to draw");
    assert!(e.contains("the filters keep no diffusion cell"), "{e}");
}

#[test]
fn the_answer_judges_degenerate_text_per_batch_size_and_marks_an_uncertain_s_parity() {
    // study-h200 at N = 128: S_parity K = 64, whose cell at B = 1 has entropy 3.5 bits (the AR model's 5.0: below
    // 80%), at B = 4 4.8 (not): the B = 1 speedup is marked, the B = 4 one not, as the S_parity table has it.
    let b = h200();
    let (_, verdict) = charts::views::answer(&[&b], &Options::default()).expect("an answer");
    let Plot::Heat { panels, y, x, .. } = &verdict.plot else { panic!("heat map") };
    let at = |n: &str, bs: &str| {
        let (row, col) = (y.categories.iter().position(|c| c == n), x.categories.iter().position(|c| c == bs));
        panels[0].cells.iter().find(|c| Some(c.row) == row && Some(c.col) == col).expect("the cell").clone()
    };
    let (one, four) = (at("128", "1"), at("128", "4"));
    assert!(one.text.ends_with('*') && one.tip.contains("unigram entropy (3.50 bits)"), "{one:?}");
    assert!(!four.text.ends_with('*') && !four.tip.contains("unigram entropy"), "{four:?}");
    let (_, rows) = charts::views::parity_rows(&[&b], &Filters::default(), &Options::default()).expect("rows");
    let rows128: Vec<_> = rows.iter().filter(|r| r.seq == 128).map(|r| (r.batch, r.entropy_warning)).collect();
    assert!(rows128.contains(&(1, true)) && rows128.contains(&(4, false)), "{rows128:?}");
    // An S_parity reached in fewer than all resamples (the v1.7 demo's, 70%): each of its speedups marked ?, the
    // tooltip and the notes say why (the S_parity table's warning column has it too).
    let unsure = load_bundle("demo.json", include_str!("../../schema/tests/fixtures/v1.7/demo.json")).expect("loads");
    let opts = metrics::parity::ParityOptions::from_config(&unsure.bundle).expect("options");
    let records = metrics::parity::parity(&unsure.bundle, &opts);
    assert!(
        records.iter().any(|r| metrics::parity::uncertain_text(r).is_some()),
        "the fixture has an uncertain S_parity"
    );
    let view = chart_view(ViewKind::Answer, &[&unsure], &Filters::default(), &Options::default());
    let (_, verdict) = charts::views::answer(&[&unsure], &Options::default()).expect("an answer");
    let Plot::Heat { panels, .. } = &verdict.plot else { panic!("heat map") };
    let marked: Vec<_> = panels.iter().flat_map(|p| &p.cells).filter(|c| c.text.contains('?')).collect();
    assert!(!marked.is_empty() && marked.iter().all(|c| c.tip.contains("bootstrap resamples")), "{marked:?}");
    assert!(view.notes.iter().any(|n| n.contains("a speedup marked ? has an uncertain S_parity")), "{:?}", view.notes);
}

#[test]
fn a_bundle_without_cells_is_said_to_have_none() {
    let mut v: serde_json::Value = serde_json::from_str(H200).expect("json");
    v["cells"] = serde_json::json!([]);
    v.as_object_mut().expect("object").remove("parity");
    let empty = load_bundle("empty.json", &v.to_string()).expect("loads");
    // Beside a bundle with quality (a compared one), the empty one's answer says why it has none.
    let other = load_bundle("study-a100.json", A100).expect("loads");
    let err = charts::views::answer(&[&empty, &other], &Options::default()).map(|_| ()).expect_err("no answer");
    assert!(err.contains("this bundle has none"), "{err}");
}

#[test]
fn the_speedup_colour_bar_is_labelled_at_the_figures_values_and_1x_not_at_its_mirrored_end() {
    // demo-series: every speedup below 1x (0.08x to 0.62x); the scale diverges at 1x, so its blue end is 1/0.08.
    let b = load_bundle("demo-series.json", include_str!("../../schema/tests/fixtures/v1.5/demo-series.json"))
        .expect("loads");
    let (_, verdict) = charts::views::answer(&[&b], &Options::default()).expect("an answer");
    let Plot::Heat { panels, .. } = &verdict.plot else { panic!("heat map") };
    let values: Vec<f64> = panels.iter().flat_map(|p| &p.cells).filter_map(|c| c.value).map(f64::exp2).collect();
    let (lo, hi) = values.iter().fold((f64::INFINITY, 0f64), |(a, b), &v| (a.min(v), b.max(v)));
    assert!(hi < 1.0, "the fixture's diffusion model is never faster: {hi}");
    let (out, _) = svg(&verdict);
    let label = |v: f64| format!("{v:.2}x");
    for want in [label(lo), label(hi), "1.00x".to_string()] {
        assert!(
            out.contains(&format!(">\n{want}\n</text>")) || out.contains(&format!(">{want}</text>")),
            "{want} drawn"
        );
    }
    assert!(!out.contains(&label(1.0 / lo)), "no label at the mirrored end {}", label(1.0 / lo));
}

#[test]
fn throughput_as_lines_over_b_draws_the_bars_numbers_as_one_line_per_series() {
    let b = h200();
    let lines = Options { throughput_lines: true, ..Options::default() };
    let f = fig(ViewKind::Throughput, &[&b], &Filters::default(), &lines);
    let Plot::Xy { x, series, .. } = &f.plot else { panic!("lines") };
    assert_eq!(x.label, "batch size B");
    assert!(series.iter().all(|s| s.style == charts::figure::Style::Line), "{series:?}");
    // The same numbers as the bars: the N = 128 AR series' marks at B = 1 and 4.
    let bars = fig(ViewKind::Throughput, &[&b], &Filters::default(), &Options::default());
    let Plot::Xy { series: bar_series, .. } = &bars.plot else { panic!("bars") };
    let ar_line = series.iter().find(|s| s.label.contains("llama")).expect("the AR line");
    let ar_bars = bar_series.iter().find(|s| s.label.contains("llama")).expect("the AR bars");
    let medians = |s: &charts::figure::Series| s.marks.iter().map(|m| m.y).collect::<Vec<_>>();
    assert_eq!(medians(ar_line), medians(ar_bars));
    // Small multiples (a chart per N) and a filtered B work too.
    let multiples = Options { multiples: true, ..lines.clone() };
    chart_view(ViewKind::Throughput, &[&b], &Filters::default(), &multiples).figure.expect("per N");
    let one = chart_view(ViewKind::Throughput, &[&b], &Filters { batch: Some(4), ..Filters::default() }, &lines);
    assert!(one.figure.is_ok() && one.notes.iter().any(|n| n.contains("each line is a point")), "{:?}", one.notes);
}
