//! `dllm-bench figures`: the study's figures as files, headless (a compute node with no browser and no network).
//!
//! Every figure is the explorer's own: the same view code (`charts::views::chart_view`, whose numbers come from
//! `metrics`) drawn by the same plotters function (`charts::figure::draw`), here into SVG; PNG (resvg) and PDF
//! (svg2pdf) are made from that SVG with the system's fonts. Per (N, B) shape of the bundle: latency against K,
//! quality against K, the Pareto frontier; per N: throughput by batch size (bars) and its scaling with the batch
//! size (lines); per shape, when the bundle measured energy and quality, the Pareto frontier of quality against joules
//! per generated token (`energy_pareto_frontier_*`; otherwise captions.md says why not); the same four at every shape
//! at once (`*_all_shapes`: small multiples with shared axes); once: the
//! speedup at parity per series and (N, B) (the explorer's landing view, with quality), the memory heatmap of the
//! allocated peaks (and, for a device's bundle, of the memory pool's reserved peaks: the study's M_peak) and the
//! roofline; per N: the step times. Titles of figures from synthetic weights say so. The S_parity table comes from
//! `report` (Markdown) and the same `metrics::parity` records (LaTeX). `captions.md` says, per file, what it shows:
//! the cells drawn, the explorer's notes, the device and whether the weights were synthetic; a view the bundle
//! cannot fill (no quality, no roofline counts) is listed there with the reason instead of being drawn empty.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use charts::bundle::LoadedBundle;
use charts::figure::{self, ChartStyle};
use charts::views::{ChartView, Filters, Options, ViewKind, chart_view, throughput_scaling};
use metrics::derive::MemoryMetric;
use plotters::prelude::{IntoDrawingArea, SVGBackend};

use crate::InputError;
use crate::report::{ReportOptions, render, resolve};

/// Output formats of `figures`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FigureFormat {
    /// Scalable vector graphics (text as text; needs no font here).
    Svg,
    /// PNG, the SVG rendered at `--dpi` (resvg) with the system's fonts (or `--font`).
    Png,
    /// PDF, vector, of the figure's size: the SVG converted (svg2pdf), the text in subsets of the system's fonts (or
    /// `--font`).
    Pdf,
}

impl FigureFormat {
    /// The extension of its files.
    fn extension(self) -> &'static str {
        match self {
            FigureFormat::Svg => "svg",
            FigureFormat::Png => "png",
            FigureFormat::Pdf => "pdf",
        }
    }
}

/// SVG pixels per inch (CSS's): a figure `--width` inches wide is drawn this many pixels an inch.
pub const SVG_PX_PER_INCH: f64 = 96.0;
/// The smallest text of a figure, in points at its printed size (`--width`): a journal's usual minimum.
pub const MIN_TEXT_PT: f64 = 7.0;
/// plotters' SVG backend writes a font `size` as `size / 1.24` pixels (its canvas draws it at `size`).
const SVG_FONT_SHRINK: f64 = 1.24;
/// The widest PNG drawn, in pixels (`--width` times `--dpi`).
const MAX_PNG_WIDTH: f64 = 16_000.0;

/// `--width` and `--height`: a number of inches from 1 to 40 (below an inch a chart's 7 pt text leaves no plot,
/// and plotters' dashed lines degenerate into millions of dashes).
fn inches(s: &str) -> std::result::Result<f64, String> {
    let fix = "give the figure's width or height in inches, a number from 1 to 40 (a journal's single column is \
               about 3.5, a double column 7)";
    match s.trim().parse::<f64>() {
        Ok(v) if (1.0..=40.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?} is not a size: {fix}")),
    }
}

/// `dllm-bench figures`.
#[derive(Debug, Clone, clap::Args)]
pub struct FiguresArgs {
    /// The bundle.
    #[arg(value_name = "BUNDLE")]
    pub bundle: PathBuf,
    /// A second bundle drawn beside the first (as the explorer's compare mode: its series dashed).
    #[arg(long, value_name = "BUNDLE")]
    pub compare: Option<PathBuf>,
    /// Folder the figures go to (created if missing; files of the same names are replaced atomically).
    #[arg(long, short, value_name = "DIR", default_value = "results/figures")]
    pub output: PathBuf,
    /// Formats, comma-separated: svg, png, pdf. PNG and PDF are drawn from the SVG and need a font for their text
    /// (the system's, e.g. Debian's fonts-dejavu-core, or `--font`).
    #[arg(long, value_delimiter = ',', default_value = "svg")]
    pub format: Vec<FigureFormat>,
    /// A font file (TTF/OTF) for the text of PNG and PDF figures, instead of the system's fonts; repeatable. SVG
    /// names its font family and leaves the font to the viewer: refused with `--format svg` alone.
    #[arg(long, value_name = "FILE")]
    pub font: Vec<PathBuf>,
    /// Width of each figure in inches, as printed: 3.5 for a journal's single column, 7 for a double one. The text
    /// is at least 7 pt at this size; the SVG is drawn at 96 pixels an inch, the PNG at `--dpi`, the PDF's page is
    /// this wide. From 1 to 40.
    #[arg(long, value_name = "INCHES", default_value = "7", value_parser = inches, allow_negative_numbers = true)]
    pub width: f64,
    /// Height of each single chart in inches (default: as the chart needs at the width, 56% of it or more for a
    /// narrow one); the small multiples, `*_all_shapes`, are always as tall as their rows of charts need. From 1
    /// to 40.
    #[arg(long, value_name = "INCHES", value_parser = inches, allow_negative_numbers = true)]
    pub height: Option<f64>,
    /// Resolution of the PNG figures, in pixels per inch (recorded in the file), from 72 to 1200.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u32).range(72..=1200))]
    pub dpi: u32,
}

/// The drawing style of a printed figure: the SVG backend's text widths corrected, no text below
/// [`MIN_TEXT_PT`] (in the figure's own pixels, which plotters' SVG backend shrinks by 1.24).
pub fn print_style() -> ChartStyle {
    ChartStyle {
        // The SVG backend guesses text widths about a quarter narrower than DejaVu Sans draws them (the legend
        // boxes and titles make room for the text as drawn).
        text_width: 1.3,
        min_text: MIN_TEXT_PT / 72.0 * SVG_PX_PER_INCH * SVG_FONT_SHRINK,
        ..ChartStyle::default()
    }
}

/// One figure to draw: file stem, view, filters, small multiples; `scaling`: instead of the view, the throughput
/// scaling with B at this N (`charts::views::throughput_scaling`).
struct Spec {
    stem: String,
    view: ViewKind,
    filters: Filters,
    multiples: bool,
    scaling: Option<u32>,
    /// The memory heatmap's peak (allocated by default).
    memory: MemoryMetric,
    /// Energy per token where latency is an axis (the energy-vs-quality Pareto frontier).
    energy: bool,
    /// Why this figure is not drawn (listed in the captions instead).
    skip: Option<String>,
}

/// The figures of `b`, in the order of the captions.
fn specs(b: &LoadedBundle) -> Vec<Spec> {
    let mut shapes: Vec<(u32, u32)> = b.bundle.cells.iter().map(|c| (c.key.seq_len, c.key.batch_size)).collect();
    shapes.sort_unstable();
    shapes.dedup();
    let mut lengths: Vec<u32> = shapes.iter().map(|s| s.0).collect();
    lengths.dedup();
    let at = |n: u32, bs: u32| Filters { seq: Some(n), batch: Some(bs), ..Filters::default() };
    // A figure of `view` at `filters`: one chart, the allocated memory peaks.
    let one = |stem: String, view, filters| Spec {
        stem,
        view,
        filters,
        multiples: false,
        scaling: None,
        memory: MemoryMetric::Allocated,
        energy: false,
        skip: None,
    };
    let mut out = Vec::new();
    // The answer first: the verdict per series and (N, B), when the bundle measured quality (the explorer's landing
    // view falls back to the latencies otherwise, which have their own files).
    if charts::views::answer(&[b], &Options::default()).is_ok() {
        out.push(one("speedup_at_parity".into(), ViewKind::Answer, Filters::default()));
    }
    for (stem, view) in [
        ("latency_vs_steps", ViewKind::Latency),
        ("quality_vs_steps", ViewKind::QualitySteps),
        ("pareto_frontier", ViewKind::Pareto),
    ] {
        for &(n, bs) in &shapes {
            out.push(one(format!("{stem}_N{n}_B{bs}"), view, at(n, bs)));
        }
    }
    // Energy against quality, per shape: when the bundle measured both; otherwise one entry saying why not.
    let energy_why = match (charts::views::has_energy(&[b]), charts::views::quality_metric(&[b], &Options::default())) {
        (true, Some(_)) => None,
        (false, _) => {
            let reasons: Vec<String> = metrics::energy::unavailable_reasons(&b.bundle)
                .into_iter()
                .map(|(why, cells)| format!("{why} ({cells} cells)"))
                .collect();
            Some(format!("No energy measured in this bundle: {}.", reasons.join("; ")))
        }
        (true, None) => Some("The bundle has no quality values.".into()),
    };
    match energy_why {
        None => {
            for &(n, bs) in &shapes {
                let spec = one(format!("energy_pareto_frontier_N{n}_B{bs}"), ViewKind::Pareto, at(n, bs));
                out.push(Spec { energy: true, ..spec });
            }
        }
        Some(why) => {
            let spec = one("energy_pareto_frontier".into(), ViewKind::Pareto, Filters::default());
            out.push(Spec { skip: Some(why), ..spec });
        }
    }
    let at_n = |n: u32| Filters { seq: Some(n), ..Filters::default() };
    for &n in &lengths {
        out.push(one(format!("throughput_by_batch_size_N{n}"), ViewKind::Throughput, at_n(n)));
        let scaling = one(format!("throughput_vs_batch_size_N{n}"), ViewKind::Throughput, Filters::default());
        out.push(Spec { scaling: Some(n), ..scaling });
    }
    // Every shape at once: the same views as small multiples with shared axes.
    for (stem, view) in [
        ("latency_vs_steps", ViewKind::Latency),
        ("quality_vs_steps", ViewKind::QualitySteps),
        ("pareto_frontier", ViewKind::Pareto),
        ("throughput_by_batch_size", ViewKind::Throughput),
    ] {
        out.push(Spec { multiples: true, ..one(format!("{stem}_all_shapes"), view, Filters::default()) });
    }
    for &n in &lengths {
        out.push(one(format!("step_time_N{n}"), ViewKind::StepTime, at_n(n)));
    }
    out.push(one("memory_heatmap".into(), ViewKind::Memory, Filters::default()));
    // A device's memory pool: its reserved peak too (the study's M_peak); a CPU run has only the process's RSS.
    let pool = b.bundle.cells.iter().flat_map(|c| &c.repetitions).any(|r| r.peak_reserved_bytes.is_some());
    if pool && b.bundle.provenance.device.kind != "cpu" {
        let reserved = one("memory_heatmap_reserved".into(), ViewKind::Memory, Filters::default());
        out.push(Spec { memory: MemoryMetric::Reserved, ..reserved });
    }
    out.push(one("roofline".into(), ViewKind::Roofline, Filters::default()));
    out
}

/// A bundle read as every other command reads one (`input::read_bundle_file`: the same checks and messages), named
/// by its file name in the figures.
fn load(path: &Path) -> Result<LoadedBundle> {
    let read = crate::input::read_bundle_file(path)?;
    let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    Ok(LoadedBundle::new(&name, read))
}

/// The SVG text of `fig`; the inner error says why a figure has nothing to draw (a part of it without a cell that
/// can be drawn: say a model whose cells all failed), which is not a failure of the command.
fn svg(fig: &figure::Figure, width: u32, height: u32) -> Result<Result<String, String>> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (width, height)).into_drawing_area();
        match figure::draw(&root, fig, print_style()) {
            Ok(_) => {}
            Err(e @ figure::ChartError::Empty(_)) => return Ok(Err(e.to_string())),
            Err(e) => anyhow::bail!("drawing failed: {e}"),
        }
        root.present().map_err(|e| anyhow::anyhow!("drawing failed: {e:?}"))?;
    }
    Ok(Ok(out))
}

/// The SVG parser's options with the fonts for PNG and PDF: the `--font` files, else the system's; the generic
/// `sans-serif` the figures ask for is DejaVu Sans where there is one, else the first family found. No font is an
/// input error naming the fix.
fn font_options(files: &[PathBuf]) -> Result<resvg::usvg::Options<'static>> {
    let mut opt = resvg::usvg::Options::default();
    let db = opt.fontdb_mut();
    if files.is_empty() {
        db.load_system_fonts();
    }
    let not_a_font = |f: &Path, why: String| {
        anyhow::Error::new(InputError(format!(
            "--font {}: {why}; fix: a TrueType or OpenType file (.ttf, .otf), or leave --font out for the system's \
             fonts",
            f.display()
        )))
    };
    for f in files {
        let before = db.len();
        db.load_font_file(f).map_err(|e| not_a_font(f, format!("cannot read it as a font: {e}")))?;
        // fontdb takes a file it cannot parse without an error (it logs it): no face added is the sign.
        if db.len() == before {
            return Err(not_a_font(f, "not a font file (no font face in it)".into()));
        }
    }
    let families: Vec<String> = db.faces().flat_map(|f| f.families.iter().map(|(n, _)| n.clone())).collect();
    let family = families.iter().find(|n| *n == "DejaVu Sans").or(families.first()).cloned().ok_or_else(|| {
        let from = if files.is_empty() { "this system has no fonts" } else { "the --font files hold no font" };
        anyhow::Error::new(InputError(format!(
            "PNG and PDF figures need a font for their text and {from}: install one (Debian: fonts-dejavu-core) or \
             pass --font FILE.ttf; `--format svg` needs none"
        )))
    })?;
    db.set_sans_serif_family(family);
    Ok(opt)
}

fn svg_tree(text: &str, opt: &resvg::usvg::Options<'_>) -> Result<resvg::usvg::Tree> {
    resvg::usvg::Tree::from_str(text, opt).map_err(|e| anyhow::anyhow!("the figure's SVG does not parse: {e}"))
}

/// The PNG of an SVG figure at `dpi` pixels an inch (the SVG has [`SVG_PX_PER_INCH`]), which it records.
fn png(tree: &resvg::usvg::Tree, dpi: u32) -> Result<Vec<u8>> {
    let scale = (f64::from(dpi) / SVG_PX_PER_INCH) as f32;
    let size = tree.size().to_int_size().scale_by(scale).context("figure too large for a PNG")?;
    let mut pixmap =
        resvg::tiny_skia::Pixmap::new(size.width(), size.height()).context("figure too large for a PNG")?;
    resvg::render(tree, resvg::tiny_skia::Transform::from_scale(scale, scale), &mut pixmap.as_mut());
    let png = pixmap.encode_png().map_err(|e| anyhow::anyhow!("PNG encoding failed: {e}"))?;
    Ok(with_resolution(png, dpi))
}

/// `png` with a `pHYs` chunk saying `dpi` (after the header, where the format wants it), so that the figure opens
/// and prints at its size.
fn with_resolution(png: Vec<u8>, dpi: u32) -> Vec<u8> {
    // The 8-byte signature, then IHDR: length, type, 13 bytes, CRC.
    const AFTER_IHDR: usize = 8 + 4 + 4 + 13 + 4;
    if png.len() < AFTER_IHDR || &png[12..16] != b"IHDR" {
        return png;
    }
    let per_metre = (f64::from(dpi) / 0.0254).round() as u32;
    let mut chunk = b"pHYs".to_vec();
    chunk.extend(per_metre.to_be_bytes());
    chunk.extend(per_metre.to_be_bytes());
    chunk.push(1); // unit: the metre
    let mut out = Vec::with_capacity(png.len() + 21);
    out.extend(&png[..AFTER_IHDR]);
    out.extend(9u32.to_be_bytes());
    out.extend(&chunk);
    out.extend(crc32(&chunk).to_be_bytes());
    out.extend(&png[AFTER_IHDR..]);
    out
}

/// The CRC-32 (ISO-HDLC, PNG's) of `bytes`.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// The PDF of an SVG figure: one page of its size in inches ([`SVG_PX_PER_INCH`]), vector, the text's glyphs
/// embedded.
fn pdf(tree: &resvg::usvg::Tree) -> Result<Vec<u8>> {
    let page = svg2pdf::PageOptions { dpi: SVG_PX_PER_INCH as f32 };
    svg2pdf::to_pdf(tree, svg2pdf::ConversionOptions::default(), page)
        .map_err(|e| anyhow::anyhow!("PDF conversion failed: {e}"))
}

/// One line naming where the bundle's numbers come from.
fn provenance_line(b: &LoadedBundle) -> String {
    let p = &b.bundle.provenance;
    let device = p.device.name.as_deref().map_or(p.device.kind.clone(), |n| format!("{} ({n})", p.device.kind));
    let weights =
        if b.synthetic_weights { "SYNTHETIC weights: timing is real, quality is meaningless" } else { "real weights" };
    format!(
        "{}: {} cells on {device}, {}, created {}, {} {}; {weights}",
        b.source,
        b.bundle.cells.len(),
        p.config.run.dtype,
        p.created_at,
        p.tool,
        p.git_commit.as_deref().unwrap_or("commit unknown")
    )
}

/// The S_parity table as a LaTeX `tabular` (booktabs), from the same records as `report`.
fn parity_latex(b: &schema::Bundle, opts: &metrics::parity::ParityOptions) -> String {
    let esc = |s: &str| {
        // `<` and `>` in text mode print as other glyphs under the default font encoding: math mode.
        s.replace('\\', "\\textbackslash{}")
            .replace('_', "\\_")
            .replace('%', "\\%")
            .replace('&', "\\&")
            .replace('<', "$<$")
            .replace('>', "$>$")
    };
    let est = |e: &schema::parity::Estimate| match (e.low, e.high) {
        (Some(l), Some(h)) => format!("{:.3} [{:.3}, {:.3}]", e.value, l, h),
        _ => format!("{:.3}", e.value),
    };
    let mut s = String::new();
    // What a reader must know is said above the table, in the text (a LaTeX comment would not print): synthetic
    // weights, a partial bundle, and what the intervals cover.
    let _ = writeln!(s, "% dllm-bench figures: S_parity and the speedup at parity ({}).", esc(&opts.metric));
    if crate::report::synthetic_weights(b) {
        let _ = writeln!(s, "\\noindent\\emph{{SYNTHETIC weights: timing is real, quality is meaningless.}}\\par");
    }
    if let Some(x) = crate::commands::validate::partial(b) {
        let _ = writeln!(
            s,
            "\\noindent\\emph{{PARTIAL bundle ({}): S\\_parity and the speedups may change when the rest is \
             measured.}}\\par",
            x.counts()
        );
    }
    let _ = writeln!(
        s,
        "\\noindent{{\\footnotesize 95\\% intervals: prompts resampled for quality only; latencies at their \
         medians.}}\\par"
    );
    let records = metrics::parity::parity(b, opts);
    // A record's series as the table and the notes under it name it.
    let series_of = |r: &metrics::parity::ParityRecord| {
        esc(&r.variant().map_or_else(|| charts::views::sampler_name(r.sampler).to_string(), |v| v.name().to_string()))
    };
    for note in metrics::parity::cautions(b, &records) {
        let _ = writeln!(s, "\\noindent\\emph{{Caution: {}.}}\\par", esc(&note));
    }
    // An N at which no autoregressive cell finished has no row at all.
    for (model, n) in metrics::parity::unjudged_baselines(b, &records) {
        let text = metrics::parity::unjudged_baseline_text(model, n);
        let _ = writeln!(s, "\\noindent\\emph{{Warning: {}.}}\\par", esc(&text));
    }
    let _ = writeln!(s, "\\begin{{tabular}}{{rlrlrrll}}\n\\toprule");
    let _ = writeln!(
        s,
        "$N$ & series & $B$ & $S_\\mathrm{{parity}}$ & $L_\\mathrm{{e2e}}$ AR (ms) & $L_\\mathrm{{e2e}}$ diffusion (ms) & \
         speedup [95\\%] & verdict \\\\\n\\midrule"
    );
    for r in &records {
        let s_par = esc(&metrics::parity::s_parity_text(r));
        let series = series_of(r);
        for row in &r.speedups {
            let (diff, sp, verdict) = match (&row.speedup, row.diffusion_e2e_ms) {
                (Some(e), Some(ms)) => {
                    (format!("{ms:.1}"), est(e), if e.value > 1.0 { "viable" } else { "not viable" }.to_string())
                }
                _ => ("--".into(), "--".into(), metrics::parity::verdict_without_speedup(r).into()),
            };
            let _ = writeln!(
                s,
                "{} & {series} & {} & {s_par} & {:.1} & {diff} & {sp} & {verdict} \\\\",
                r.seq_len, row.batch_size, row.ar_e2e_ms
            );
        }
    }
    // `\par` ends the table's paragraph: the notes below start on lines of their own.
    let _ = writeln!(s, "\\bottomrule\n\\end{{tabular}}\\par");
    // Under the table, per series (as `report` says it under each): S_parity's bootstrap interval and how often
    // parity was reached, a warning where that is not always, and one where the text at parity is degenerate.
    let quality = metrics::parity::cell_quality(b);
    for r in &records {
        let mut said = Vec::new();
        if let Some(i) = metrics::parity::s_parity_interval_text(r) {
            said.push(format!("S\\_parity: {}, {}.", esc(&metrics::parity::s_parity_text(r)), esc(&i)));
        }
        if let Some(w) = metrics::parity::uncertain_text(r) {
            said.push(format!("\\emph{{Warning: {}: {}.}}", esc(&w), esc(metrics::parity::UNCERTAIN_SPEEDUP)));
        }
        for w in metrics::parity::low_entropy_at_parity(b, &quality, r) {
            said.push(format!("\\emph{{Warning: {}.}}", esc(&w)));
        }
        // The batch sizes whose autoregressive cell did not finish have no row in the table: one sentence per what
        // happened (`$B = 16, 32$: no row, the autoregressive cell ran out of memory ...`).
        let unfinished = metrics::parity::unfinished_baselines(b, r);
        let mut whats: Vec<&str> = Vec::new();
        for (_, w) in &unfinished {
            if !whats.contains(w) {
                whats.push(w);
            }
        }
        for what in whats {
            let bs: Vec<String> =
                unfinished.iter().filter(|(_, w)| *w == what).map(|(k, _)| k.batch_size.to_string()).collect();
            let why = esc(&metrics::parity::unfinished_baseline_text(what));
            said.push(format!("$B = {}$: no row, {why}.", bs.join(", ")));
        }
        if !said.is_empty() {
            let series = series_of(r);
            let _ = writeln!(s, "\\noindent{{\\footnotesize $N = {}$, {series}: {}\\par}}", r.seq_len, said.join(" "));
        }
    }
    s
}

/// How the figures of two bundles (`--compare`) tell them apart, as `charts::figure` draws them.
const COMPARE_LEGEND: &str = "Two bundles: every label starts with \"[A] \" (the first bundle) or \"[B] \" (the \
     second, `--compare`). The first bundle's series are solid lines with round points and full-colour bars; the \
     second's are finely dashed lines with triangular points and paler bars outlined in the full colour; on \
     points, the first bundle's error bars are drawn just left of the point and the second's just right, so that \
     neither covers the other. \
     Reference lines (the autoregressive model, S_parity) are dashed in both: long dashes for the first bundle, \
     short ones for the second; S_parity's vertical lines are half-tone in both, so that the error bar at their K \
     shows.";

/// The explorer's wording of its notes (its controls: filters, tabs, tooltips, a narrow screen) and what a printed
/// caption says instead.
const PRINT_WORDING: [(&str, &str); 16] = [
    ("Left (above, on a narrow screen), each cell", "In the heat map, each cell"),
    ("; its tooltip says by how much)", "; s_parity.md says by how much)"),
    ("; its tooltip says in how many)", "; s_parity.md says in how many)"),
    (" (the tooltip names them)", " (s_parity.md lists the cells that did not finish)"),
    (
        "; the tooltip names S_parity, its 95% interval and why",
        "; s_parity.md names S_parity, its 95% interval and why",
    ),
    ("Right (below): the Pareto frontier", "Beside it (or below, in a narrow figure): the Pareto frontier"),
    ("at the shape the filters pick", "at the smallest shape (N, B)"),
    (
        "Detail: the S_parity and Pareto frontier tabs.",
        "Detail: s_parity.md, s_parity.tex and the pareto_frontier_* figures.",
    ),
    (
        "the S_parity tab has both bundles' rows, the Pareto frontier beside it draws both, and below, the two stacks side \
         by side say how much of the speedup the implementations carry",
        "the Pareto frontier beside it draws both",
    ),
    (" (untick \"every shape\" for one chart at a time)", " (the files of each shape draw one at a time)"),
    (" (filter K to see one)", ""),
    ("; enter peaks above to override them.", "."),
    ("Their messages are in the Run details table.", "Their messages are in s_parity.md (the report)."),
    ("choose B and N in the filters for another shape", "the files of each (N, B) draw the others"),
    ("choose N in the filters for another length", "the files of each N draw the others"),
    ("choose an N or a B in the filters", "the files of each shape draw them one at a time"),
];

/// A view's note as a printed caption says it: [`PRINT_WORDING`] in place of the explorer's controls.
fn print_note(note: &str) -> String {
    PRINT_WORDING.iter().fold(note.to_string(), |out, (screen, print)| out.replace(screen, print))
}

/// The bundle-level cautions `dllm-bench report` prints above its tables, one line each: cells without timing, how
/// the run measured ([`metrics::derive::run_cautions`]), a partial bundle.
fn bundle_cautions(b: &schema::Bundle) -> Vec<String> {
    let mut out = Vec::new();
    let failed = b.cells.iter().filter(|c| c.status != schema::CellStatus::Ok).count();
    if failed > 0 {
        out.push(format!(
            "{failed} of {} cells have no timing (out of memory, failed or not run; s_parity.md lists them): a batch \
             size whose autoregressive cell is among them has no speedup.",
            b.cells.len()
        ));
    }
    out.extend(metrics::derive::run_cautions(b).into_iter().map(|(headline, rest)| format!("{headline}{rest}")));
    if !b.provenance.missing_cells.is_empty() {
        out.push(format!(
            "a partial bundle: {} cells of the grid are in no merged shard (`merge --allow-missing`).",
            b.provenance.missing_cells.len()
        ));
    } else if let Some(x) = crate::commands::validate::partial(b) {
        out.push(format!("a PARTIAL bundle ({}): figures may change when the rest is measured.", x.counts()));
    }
    out
}

/// The pixels of `inches` in the SVG.
fn px(inches: f64) -> u32 {
    (inches * SVG_PX_PER_INCH).round() as u32
}

/// Runs `dllm-bench figures`.
pub fn main(args: &FiguresArgs) -> Result<ExitCode> {
    let first = load(&args.bundle)?;
    let second = args.compare.as_deref().map(load).transpose()?;
    let bundles: Vec<&LoadedBundle> = std::iter::once(&first).chain(second.as_ref()).collect();
    let png_width = args.width * f64::from(args.dpi);
    if args.format.contains(&FigureFormat::Png) && png_width > MAX_PNG_WIDTH {
        return Err(anyhow::Error::new(InputError(format!(
            "--width {} at --dpi {} makes PNGs {png_width:.0} pixels wide, more than {MAX_PNG_WIDTH:.0}: lower \
             --dpi or --width",
            args.width, args.dpi
        ))));
    }
    if args.format.iter().all(|f| *f == FigureFormat::Svg) && !args.font.is_empty() {
        return Err(anyhow::Error::new(InputError(
            "--font is for PNG and PDF figures, and --format is svg (an SVG names its font family and leaves the \
             font to the viewer); fix: leave --font out, or add png or pdf to --format"
                .into(),
        )));
    }
    crate::output::create_folder_for(&args.output, "-o")?;
    // What an earlier `figures` wrote here, as its captions list it: what this one does not write again is removed
    // at the end, so that the folder holds one set of figures (not another bundle's beside these).
    let earlier = earlier_figures(&args.output);
    let mut files: Vec<String> = Vec::new();
    let mut captions = String::new();
    let _ = writeln!(captions, "# Figures\n");
    let _ = writeln!(
        captions,
        "Each figure is {} in wide (SVG: {} pixels, 96 an inch; PNG: {} dpi; PDF: a page of its size), its text at \
         least {MIN_TEXT_PT} pt at that size.\n",
        args.width,
        px(args.width),
        args.dpi
    );
    for b in &bundles {
        let _ = writeln!(captions, "- {}", provenance_line(b));
    }
    // What a reader must know of each bundle before reading its numbers, as `dllm-bench report` says it.
    for b in &bundles {
        for caution in bundle_cautions(&b.bundle) {
            let _ = writeln!(captions, "- Caution ({}): {caution}", b.source);
        }
    }
    if bundles.len() > 1 {
        let _ = writeln!(captions, "\n{COMPARE_LEGEND}");
    }
    let (mut written, mut skipped) = (0usize, 0usize);
    // Fonts for PNG and PDF, found before anything is drawn (a node without fonts is told so at once).
    let raster = args.format.iter().any(|f| *f != FigureFormat::Svg);
    // Each format once, in the order given (`--format svg,svg` writes each SVG once).
    let mut formats: Vec<FigureFormat> = Vec::new();
    for f in &args.format {
        if !formats.contains(f) {
            formats.push(*f);
        }
    }
    let fonts = raster.then(|| font_options(&args.font)).transpose()?;
    // Every file this may write, checked before any is: a folder in the way of one refuses the whole set rather
    // than leaving it half written.
    let specs = specs(&first);
    let names = specs
        .iter()
        .filter(|spec| spec.skip.is_none())
        .flat_map(|spec| formats.iter().map(move |f| format!("{}.{}", spec.stem, f.extension())))
        .chain(["s_parity.md", "s_parity.tex", "captions.md"].map(String::from));
    for name in names {
        crate::output::check_target(&args.output.join(name))?;
    }
    for spec in specs {
        if let Some(why) = &spec.skip {
            skipped += 1;
            let _ = writeln!(captions, "\n## {} (not drawn)\n\n{why}", spec.stem);
            continue;
        }
        let options =
            Options { multiples: spec.multiples, memory: spec.memory, energy: spec.energy, ..Options::default() };
        // The figures say so when any of their numbers come from synthetic weights (chart_view's titles do).
        let view = match spec.scaling {
            Some(n) => {
                let mut figure = throughput_scaling(&bundles, n, &options);
                if let (Ok(fig), true) = (&mut figure, bundles.iter().any(|b| b.synthetic_weights)) {
                    fig.label_synthetic();
                }
                ChartView { figure, notes: Vec::new() }
            }
            None => chart_view(spec.view, &bundles, &spec.filters, &options),
        };
        // Small multiples are as tall as their rows need at this width; single charts as `--height` says, or as
        // they need.
        let width = px(args.width);
        let drawn = match view.figure {
            Ok(fig) => {
                let height = match args.height {
                    Some(h) if !spec.multiples => px(h),
                    _ => fig.height_for(width, print_style()),
                };
                svg(&fig, width, height)?.map(|text| (fig, text))
            }
            Err(why) => Err(why),
        };
        match drawn {
            Ok((fig, text)) => {
                // Parsed once for PNG and PDF.
                let tree = fonts.as_ref().map(|opt| svg_tree(&text, opt)).transpose()?;
                for format in &formats {
                    let bytes = match (format, &tree) {
                        (FigureFormat::Svg, _) => text.clone().into_bytes(),
                        (FigureFormat::Png, Some(tree)) => png(tree, args.dpi)?,
                        (FigureFormat::Pdf, Some(tree)) => pdf(tree)?,
                        (_, None) => unreachable!("the SVG is parsed when a format needs it"),
                    };
                    let file = format!("{}.{}", spec.stem, format.extension());
                    crate::output::write_atomic(&args.output.join(&file), &bytes)?;
                    written += 1;
                    files.push(file.clone());
                    let _ = writeln!(captions, "\n## {file}\n\n{} ({} marks).", fig.title, fig.mark_count());
                }
                for note in &view.notes {
                    let _ = writeln!(captions, "- {}", print_note(note));
                }
            }
            Err(why) => {
                skipped += 1;
                let _ = writeln!(captions, "\n## {} (not drawn)\n\n{}", spec.stem, print_note(&why));
            }
        }
    }
    // The S_parity table: the report (Markdown) and the same records as LaTeX.
    let b = &first.bundle;
    let md = render(b, &first.source, first.recounted_repetitions, &ReportOptions::default());
    crate::output::write_atomic(&args.output.join("s_parity.md"), md.as_bytes())?;
    files.push("s_parity.md".into());
    let _ = writeln!(captions, "\n## s_parity.md\n\nThe `dllm-bench report` of {}.", first.source);
    written += 1;
    match resolve(b, &ReportOptions::default()) {
        Some(opts) => {
            crate::output::write_atomic(&args.output.join("s_parity.tex"), parity_latex(b, &opts).as_bytes())?;
            files.push("s_parity.tex".into());
            let _ = writeln!(
                captions,
                "\n## s_parity.tex\n\nS_parity and the speedup at parity per (N, B) for {} (booktabs tabular).",
                opts.metric
            );
            written += 1;
        }
        None => {
            skipped += 1;
            let _ = writeln!(captions, "\n## s_parity.tex (not written)\n\nThe bundle has no quality values.");
        }
    }
    crate::output::write_atomic(&args.output.join("captions.md"), captions.as_bytes())?;
    let mut removed = 0usize;
    for old in earlier.iter().filter(|f| !files.contains(f)) {
        match std::fs::remove_file(args.output.join(old)) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!("cannot remove {}, a figure of an earlier run: {e}", args.output.join(old).display())
            }
        }
    }
    let removed = match removed {
        0 => String::new(),
        n => format!("; removed {} an earlier `figures` wrote there that this one does not", crate::counted(n, "file")),
    };
    crate::say!(
        "figures: {} and captions.md in {} ({skipped} not drawn: captions.md says why){removed}",
        crate::counted(written, "file"),
        args.output.display()
    );
    // As every command that writes a file or folder: its path on standard output.
    println!("{}", args.output.display());
    Ok(ExitCode::SUCCESS)
}

/// The files an earlier `figures` wrote in `dir`, as its `captions.md` names them (a heading per file written;
/// none when there is no such captions file): plain names in the folder itself, never a path out of it.
fn earlier_figures(dir: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(dir.join("captions.md")) else { return Vec::new() };
    if !text.starts_with("# Figures\n") {
        return Vec::new();
    }
    text.lines()
        .filter_map(|l| l.strip_prefix("## "))
        .filter(|name| !name.ends_with(')') && !name.contains(['/', '\\']) && !name.starts_with('.'))
        .filter(|name| name != &"captions.md")
        .map(str::to_string)
        .collect()
}
