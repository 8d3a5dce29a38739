//! The xy charts: points, lines, bars with error bars, reference lines, one chart or small multiples (facets with
//! shared axes), point labels placed without overprinting, hit boxes for tooltips and clicks.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axes::{Scaled, axis_title, axis_title_least, scaled, tick_label, to_space};
use super::text::{Key, draw_legend, legend_layout, text_width, title_lines, title_text, titled};
use super::{
    Axis, ChartError, ChartStyle, Drawn, FACET_MARGIN, FACET_X_TITLE, FACET_Y_TICKS, FACET_Y_TITLE, Grid, Hit,
    LEGEND_MARGIN, Mark, PANEL_MARGIN, RefLine, Series, Style, TextBox, Y_LABEL_AREA, backend_err, colour, overlap,
    single_plot_height,
};

/// What every chart of an x/y figure shares: its axes, their ranges (over every facet's marks), its series and
/// reference lines, the style.
pub(super) struct Xy<'a> {
    pub(super) axes: (&'a Axis, &'a Axis),
    pub(super) ranges: (Scaled, Scaled),
    pub(super) series: &'a [Series],
    pub(super) refs: &'a [RefLine],
    pub(super) style: ChartStyle,
}

pub(super) fn draw_xy<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    (xa, ya): (&Axis, &Axis),
    series: &[Series],
    refs: &[RefLine],
    grid: Option<&Grid>,
    style: ChartStyle,
) -> Result<Drawn, ChartError> {
    let marks = || series.iter().flat_map(|s| s.marks.iter());
    if marks().next().is_none() {
        return Err(ChartError::Empty(
            "no successful cell this view draws matches the filters (out-of-memory and failed cells are in the Run \
             details table)"
                .into(),
        ));
    }
    let s = |v: f64| (v * style.scale).round().max(1.0);
    let has_bars = series.iter().any(|x| matches!(x.style, Style::Bars { .. }));
    let xs: Vec<f64> = marks()
        .filter_map(|m| to_space(xa, m.x))
        .chain(refs.iter().filter(|r| r.vertical).filter_map(|r| to_space(xa, r.value)))
        .collect();
    let ys: Vec<f64> = marks()
        .flat_map(|m| [Some(m.y), m.lo, m.hi])
        .flatten()
        .chain(refs.iter().filter(|r| !r.vertical).flat_map(|r| {
            let (lo, hi) = r.band.unzip();
            [Some(r.value), lo, hi].into_iter().flatten()
        }))
        .filter_map(|v| to_space(ya, v))
        .collect();
    if xs.is_empty() || ys.is_empty() {
        return Err(ChartError::Empty("no value can be drawn on a log axis (all are zero or negative)".into()));
    }
    let (x_range, mut y_range) = (scaled(xa, &xs, false), scaled(ya, &ys, has_bars));
    let font = |size: f64| (FontFamily::SansSerif, s(size)).into_font();
    let (mut legend, mut drawn) = (Vec::new(), Drawn::default());
    let labels = legend_labels(refs, series);
    let m = s(LEGEND_MARGIN);
    let Some(g) = grid else {
        // The legend goes in the upper corner with fewer marks under it; where marks would still fall under it, the
        // y axis reaches higher until they are below it.
        let (x, y) = (&x_range.range, &y_range.range);
        let (mid_x, mid_y) = ((x.start + x.end) / 2.0, (y.start + y.end) / 2.0);
        let pt = |m: &Mark| Some((to_space(xa, m.x)?, to_space(ya, m.y)?));
        let upper = |left: bool| marks().filter_map(pt).filter(|p| p.1 > mid_y && (p.0 < mid_x) == left).count();
        // The plotting area, as xy_panel lays it out (margins, y labels; title and x labels about 110 px), in
        // pixels.
        let (w, h) = root.dim_in_pixel();
        let (plot_w, plot_h) = (f64::from(w) - s(Y_LABEL_AREA + 2.0 * PANEL_MARGIN), f64::from(h) - s(110.0));
        let lay = legend_layout(root, &labels, &font(12.0), style, (plot_w - 2.0 * m) as i32, false)?;
        let (box_w, box_h) = (f64::from(lay.w), f64::from(lay.h));
        let columns = |right: bool| match right {
            true => (1.0 - (m + box_w) / plot_w, 1.0 - m / plot_w),
            false => (m / plot_w, (m + box_w) / plot_w),
        };
        let frac = |v: f64| (v - x.start) / (x.end - x.start);
        // A vertical reference line (S_parity) runs through the whole height: the legend takes the corner that
        // covers fewer of them, else the one with fewer marks in the upper half.
        let lines_under = |right: bool| {
            let (a, b) = columns(right);
            refs.iter()
                .filter(|r| r.vertical)
                .filter_map(|r| to_space(xa, r.value))
                .filter(|&v| (a..=b).contains(&frac(v)))
                .count()
        };
        let right = match (lines_under(false), lines_under(true)) {
            (l, r) if l != r => l > r,
            _ => upper(true) > upper(false),
        };
        let f = (m + box_h) / plot_h;
        // A legend that does not fit in the plot goes under it. Decided on the plot's height as
        // `Figure::height_for` gives it (not more: on a canvas it made taller for the strip, the legend must still
        // go there, or the plot's room would be taken twice).
        let wrapped = lay.lines.iter().any(|l| l.len() > 1);
        let sized = single_plot_height(plot_w / style.scale, ya, style) * style.scale;
        let inside = legend_inside((plot_w, plot_h.min(sized)), (box_w, box_h), wrapped, m);
        let (fx0, fx1) = columns(right);
        // The highest value of a mark (its error bar's top, a bar's whole width) inside the legend's columns.
        let under = series.iter().flat_map(|se| {
            let half = match se.style {
                Style::Bars { width } => width / 2.0,
                _ => 0.0,
            };
            se.marks.iter().filter_map(move |m| {
                let (a, b) = (to_space(xa, m.x - half)?, to_space(xa, m.x + half)?);
                let top = to_space(ya, m.hi.unwrap_or(m.y).max(m.y))?;
                (frac(b) >= fx0 && frac(a) <= fx1).then_some(top)
            })
        });
        let top = under.fold(f64::NEG_INFINITY, f64::max);
        if inside && (0.0..0.6).contains(&f) && top > y.end - f * (y.end - y.start) {
            let base = y.start;
            let more: Vec<f64> =
                ys.iter().copied().chain([base + (top - base) / (1.0 - f) + 0.02 * (top - base)]).collect();
            y_range = scaled(ya, &more, has_bars);
        }
        let xy = Xy { axes: (xa, ya), ranges: (x_range, y_range), series, refs, style };
        let (chart, strip) = match inside || labels.is_empty() {
            true => (root.clone(), None),
            false => {
                let lay = legend_layout(root, &labels, &font(12.0), style, w as i32 - 2 * m as i32, true)?;
                let (a, b) = root.split_vertically(h as i32 - lay.h - 2 * m as i32);
                (a, Some(b))
            }
        };
        let at = Facet { index: 0, small: None, legend: inside.then_some((right, lay.w, lay.h)) };
        let cc = xy_panel(&chart, title, &xy, at, &mut legend, &mut drawn)?;
        drawn.plots.push(plot_rect(&cc));
        let placed = match &strip {
            None => draw_legend(&cc.plotting_area().strip_coord_spec(), &legend, Some(right), &font(12.0), style)?,
            Some(strip) => draw_legend(strip, &legend, None, &font(12.0), style)?,
        };
        drawn.legends.extend(placed);
        return Ok(drawn);
    };
    let xy = Xy { axes: (xa, ya), ranges: (x_range, y_range), series, refs, style };
    // Small multiples: the facets in rows under the title across the width, the axes' titles once (under and left of
    // them), one legend (each label once) in a strip under them. Only the left column has y tick labels (the axes
    // are shared), so every plot is as wide.
    let root = titled(root, title, 18.0, style)?;
    let (w, h) = root.dim_in_pixel();
    let lay = legend_layout(&root, &labels, &font(12.0), style, w as i32 - 2 * m as i32, true)?;
    let strip_h = if labels.is_empty() { 0 } else { lay.h + 2 * m as i32 };
    let (charts, strip) = root.split_vertically(h as i32 - strip_h);
    let (left, charts) = charts.split_horizontally(s(FACET_Y_TITLE) as i32);
    let (charts, under) = charts.split_vertically(charts.dim_in_pixel().1 as i32 - s(FACET_X_TITLE) as i32);
    let desc = TextStyle::from(font(14.0)).color(&BLACK).pos(Pos::new(HPos::Center, VPos::Center));
    let least = s(axis_title_least(style));
    // The x title across the facets' width, smaller where it is wider than that (a phone; to the smallest text).
    let (uw, uh) = under.dim_in_pixel();
    let (x_title, room) = (axis_title(xa), f64::from(uw) * 0.96);
    let long = text_width(&under, &x_title, &desc, style)?.0;
    let x_desc = match long > room {
        true => desc.clone().font.resize((s(14.0) * room / long).max(least)).into_text_style(&under),
        false => desc.clone(),
    };
    let x_desc = x_desc.pos(Pos::new(HPos::Center, VPos::Center));
    under.draw(&Text::new(x_title, (uw as i32 / 2, uh as i32 / 2), x_desc)).map_err(backend_err)?;
    // The y title along the facets' height, smaller where it is longer than that (to the style's smallest text).
    let (lw, lh) = left.dim_in_pixel();
    let (y_title, room) = (axis_title(ya), f64::from(lh) * 0.96);
    let long = text_width(&left, &y_title, &desc, style)?.0;
    let desc = match long > room {
        true => desc.clone().font.resize((s(14.0) * room / long).max(least)).into_text_style(&left),
        false => desc,
    };
    let desc = desc.transform(FontTransform::Rotate270).pos(Pos::new(HPos::Center, VPos::Center));
    left.draw(&Text::new(y_title, (lw as i32 / 2, lh as i32 / 2), desc)).map_err(backend_err)?;
    let cols = g.cols.clamp(1, g.titles.len().max(1));
    let rows = g.titles.len().div_ceil(cols);
    let (cw, ch) = charts.dim_in_pixel();
    let (y_area, fm) = (s(FACET_Y_TICKS), s(FACET_MARGIN));
    let plot_w = ((f64::from(cw) - y_area) / cols as f64 - 2.0 * fm).max(1.0);
    let xs: Vec<i32> = (1..cols).map(|c| (y_area + c as f64 * (plot_w + 2.0 * fm)).round() as i32).collect();
    let row_h = (f64::from(ch) / rows as f64).max(1.0);
    let ys: Vec<i32> = (1..rows).map(|r| (r as f64 * row_h).round() as i32).collect();
    let areas = charts.split_by_breakpoints(xs, ys);
    // Every facet's title shortened where one would not fit its facet: the grid reads alike.
    let mut short = false;
    for (t, area) in g.titles.iter().zip(&areas) {
        short |= !facet_title_fits(area, t, style)?;
    }
    for (k, (t, area)) in g.titles.iter().zip(&areas).enumerate() {
        let at = Facet { index: k, small: Some(k % cols == 0), legend: None };
        let t = if short { t.replace(" = ", "=") } else { t.clone() };
        let cc = xy_panel(area, &t, &xy, at, &mut legend, &mut drawn)?;
        drawn.plots.push(plot_rect(&cc));
    }
    let mut once: Vec<(&str, Key)> = Vec::new();
    for row in legend {
        if !once.iter().any(|r| r.0 == row.0) {
            once.push(row);
        }
    }
    drawn.legends.extend(draw_legend(&strip, &once, None, &font(12.0), style)?);
    Ok(drawn)
}

/// Whether a facet's title (`N = 48, B = 4`) takes at most 85% of its facet's width at its 14 px; where one does
/// not (a phone's narrow facets, whose titles ran into each other), every title is drawn shortened
/// (`N=48, B=4`), and [`xy_panel`] shrinks it further where even that does not fit.
fn facet_title_fits<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    style: ChartStyle,
) -> Result<bool, ChartError> {
    let font = TextStyle::from((FontFamily::SansSerif, (14.0 * style.scale).round().max(1.0)).into_font());
    Ok(text_width(area, title, &font, style)?.0 <= f64::from(area.dim_in_pixel().0) * 0.85)
}

/// Whether a single x/y chart's legend goes inside its plot (in an upper corner) rather than in a strip under the
/// chart: when its box (`legend`, width and height) fits the plot's width (`plot`) within the margins, no label
/// wraps, and it takes under 60% of the plot's height. The drawing decides on the measured sizes,
/// `Figure::height_for` on estimates, so that a figure has room for the strip wherever its legend goes there.
pub(super) fn legend_inside(plot: (f64, f64), legend: (f64, f64), wrapped: bool, margin: f64) -> bool {
    let ((plot_w, plot_h), (box_w, box_h)) = (plot, legend);
    !wrapped && box_w <= plot_w - 2.0 * margin && plot_h > 0.0 && (margin + box_h) / plot_h < 0.6
}

/// The plotting area of a chart: left, top, right, bottom, backend pixels.
pub(super) fn plot_rect<DB: DrawingBackend>(cc: &ChartContext<'_, DB, Cartesian2d<Scaled, Scaled>>) -> [i32; 4] {
    let (x, y) = cc.plotting_area().get_pixel_range();
    [x.start, y.start, x.end, y.end]
}

/// The legend's labels of an x/y figure: its reference lines' and series', each once, none empty.
pub(super) fn legend_labels<'a>(refs: &'a [RefLine], series: &'a [Series]) -> Vec<&'a str> {
    let mut labels: Vec<&str> = Vec::new();
    for l in refs.iter().map(|r| r.label.as_str()).chain(series.iter().map(|s| s.label.as_str())) {
        if !l.is_empty() && !labels.contains(&l) {
            labels.push(l);
        }
    }
    labels
}

/// Which chart of an x/y figure [`xy_panel`] draws: the facet's index (0 in a single chart); `small`: a facet of
/// small multiples, without the axes' titles (drawn once for all), with y tick labels where `Some(true)` (the left
/// column); `legend`: the legend box the point labels keep clear of, in the plot's upper right
/// corner (`.0`) or left, `.1` by `.2` pixels.
#[derive(Clone, Copy)]
pub(super) struct Facet {
    pub(super) index: usize,
    pub(super) small: Option<bool>,
    pub(super) legend: Option<(bool, i32, i32)>,
}

/// One chart of an x/y figure (see [`Facet`]): its axes and mesh, then the reference lines and series of its facet
/// with their error bars and markers, then their point labels where each finds room; their legend rows, hits and
/// label boxes are appended. Returns the chart.
pub(super) fn xy_panel<'a, 'b, DB: DrawingBackend>(
    area: &'b DrawingArea<DB, Shift>,
    caption: &str,
    xy: &Xy<'a>,
    at: Facet,
    legend: &mut Vec<(&'a str, Key)>,
    drawn: &mut Drawn,
) -> Result<ChartContext<'b, DB, Cartesian2d<Scaled, Scaled>>, ChartError> {
    let ((xa, ya), (xr, yr)) = (xy.axes, xy.ranges.clone());
    let (facet, small) = (at.index, at.small);
    let s = |v: f64| (v * xy.style.scale).round().max(1.0);
    let si = |v: f64| s(v) as u32;
    let (x_lo, x_hi, y_floor) = (xr.range.start, xr.range.end, yr.range.start);
    let font = |size: f64| (FontFamily::SansSerif, s(size)).into_font();
    // A facet has smaller margins, tick labels without the axes' titles, y tick labels only in the left column.
    let (titles, show_y) = (small.is_none(), small.unwrap_or(true));
    let margin = si(if small.is_some() { FACET_MARGIN } else { PANEL_MARGIN });
    let x_area = match (xa.categories.is_empty(), titles) {
        (true, true) => 48.0,
        (false, true) => 56.0,
        (true, false) => 26.0,
        (false, false) => 34.0,
    };
    let y_area = match (titles, show_y) {
        (true, _) => si(Y_LABEL_AREA),
        (false, true) => si(FACET_Y_TICKS),
        (false, false) => 0,
    };
    let (title_font, lines) = title_lines(area, caption, if small.is_some() { 14.0 } else { 18.0 }, xy.style)?;
    let mut builder = ChartBuilder::on(area);
    builder.margin(margin).x_label_area_size(si(x_area)).y_label_area_size(y_area);
    // The height the title takes above the plot (plotters' caption: its size and a margin as high).
    let used_top = if let [one] = lines.as_slice() {
        builder.caption(one, title_font.clone());
        2 * title_font.get_size().round() as i32
    } else {
        let used = title_text(area, &lines, &title_font, margin as i32, xy.style)?;
        builder.margin_top(margin as i32 + used);
        used
    };
    let mut cc = builder.build_cartesian_2d(xr, yr).map_err(backend_err)?;
    let xfmt = |v: &f64| tick_label(xa, *v);
    let yfmt = |v: &f64| if show_y { tick_label(ya, *v) } else { String::new() };
    let desc = |a: &Axis| if titles { axis_title(a) } else { String::new() };
    // The axes' titles at 14 px, smaller (to 70%, or the smallest text) where the x title is wider than the chart or
    // the y title longer than the plot is tall (a phone).
    let (aw, ah) = area.dim_in_pixel();
    let plot_h = f64::from(ah) - f64::from(used_top) - f64::from(si(x_area)) - f64::from(2 * margin);
    let fit = |text: String, room: f64| -> Result<f64, ChartError> {
        let wide = text_width(area, &text, &TextStyle::from(font(14.0)), xy.style)?.0;
        Ok(if wide > room { room / wide } else { 1.0 })
    };
    let shrink = fit(desc(xa), f64::from(aw) * 0.9)?.min(fit(desc(ya), plot_h * 0.96)?);
    let least = axis_title_least(xy.style) * xy.style.scale;
    let desc_font = match shrink < 1.0 {
        true => FontDesc::from((FontFamily::SansSerif, (s(14.0) * shrink).max(least))),
        false => font(14.0),
    };
    let labels = if small.is_some() { 5 } else { 10 };
    cc.configure_mesh()
        .x_desc(desc(xa))
        .y_desc(desc(ya))
        .x_labels(labels)
        .y_labels(labels)
        .x_label_formatter(&xfmt)
        .y_label_formatter(&yfmt)
        .label_style(font(13.0))
        .axis_desc_style(desc_font)
        .light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(228, 228, 228))
        .draw()
        .map_err(backend_err)?;

    let width = si(2.0);
    let pt = |m: &Mark| Some((to_space(xa, m.x)?, to_space(ya, m.y)?));
    // Bands first, under every line and mark: the interval of a horizontal reference, pale in its colour.
    for r in xy.refs.iter().filter(|r| r.facet == facet && !r.vertical) {
        // A low end a log axis cannot place (0 or below) is drawn at the axis' floor.
        let Some((lo, hi)) = r.band.and_then(|(lo, hi)| Some((to_space(ya, lo).unwrap_or(y_floor), to_space(ya, hi)?)))
        else {
            continue;
        };
        let fill = colour(r.colour).mix(if r.alt { 0.07 } else { 0.12 }).filled();
        cc.draw_series([Rectangle::new([(x_lo, lo), (x_hi, hi)], fill)]).map_err(backend_err)?;
    }
    for r in xy.refs.iter().filter(|r| r.facet == facet) {
        // A vertical line (S_parity at its K) half-tone: the error bar of the point at that K, drawn over it in the
        // full colour, stays visible.
        let st = match r.vertical {
            true => colour(r.colour).mix(0.5).stroke_width(width),
            false => colour(r.colour).stroke_width(width),
        };
        let Some(v) = to_space(if r.vertical { xa } else { ya }, r.value) else { continue };
        let line = if r.vertical { [(v, cc.y_range().start), (v, cc.y_range().end)] } else { [(x_lo, v), (x_hi, v)] };
        let (dash, gap) = if r.alt { (s(3.0), s(4.0)) } else { (s(8.0), s(5.0)) };
        cc.draw_series(DashedLineSeries::new(line, dash, gap, st)).map_err(backend_err)?;
        legend.push((&r.label, Key::Line { style: st, dash: Some((dash, gap)), marker: None }));
    }
    for (index, se) in xy.series.iter().enumerate().filter(|(_, s)| s.facet == facet) {
        let c = colour(se.colour);
        let st = c.stroke_width(width);
        let pts: Vec<(f64, f64)> = se.marks.iter().filter_map(pt).collect();
        match se.style {
            Style::Frontier => {
                let band = c.mix(0.45).stroke_width(si(9.0));
                if pts.len() > 1 {
                    cc.draw_series(LineSeries::new(pts, band)).map_err(backend_err)?;
                }
                legend.push((&se.label, Key::Line { style: band, dash: None, marker: None }));
                continue;
            }
            Style::Line if se.alt => {
                if pts.len() > 1 {
                    cc.draw_series(DashedLineSeries::new(pts.clone(), s(6.0), s(4.0), st)).map_err(backend_err)?;
                }
                legend.push((&se.label, Key::Line { style: st, dash: Some((s(6.0), s(4.0))), marker: Some(true) }));
            }
            Style::Line => {
                if pts.len() > 1 {
                    cc.draw_series(LineSeries::new(pts.clone(), st)).map_err(backend_err)?;
                }
                legend.push((&se.label, Key::Line { style: st, dash: None, marker: Some(false) }));
            }
            Style::Bars { width: w } => {
                // The compared bundle's bars: paler, outlined in the full colour, so that one is not taken for a
                // bar of another series whose colour is pale.
                let fill = if se.alt { c.mix(0.55).filled() } else { c.filled() };
                let outline = se.alt.then(|| c.stroke_width(si(1.5)));
                let rects: Vec<[(f64, f64); 2]> = se
                    .marks
                    .iter()
                    .filter_map(|m| {
                        let (Some(y), Some(_)) = (to_space(ya, m.y), to_space(xa, m.x)) else { return None };
                        Some([(m.x - w / 2.0, y_floor), (m.x + w / 2.0, y)])
                    })
                    .collect();
                cc.draw_series(rects.iter().map(|&r| Rectangle::new(r, fill))).map_err(backend_err)?;
                if let Some(line) = outline {
                    cc.draw_series(rects.iter().map(|&r| Rectangle::new(r, line))).map_err(backend_err)?;
                }
                legend.push((&se.label, Key::Bar(fill, outline)));
            }
            Style::Points => legend.push((&se.label, Key::Point(c.filled(), se.alt))),
        }
        // Spread over repetitions (min..max), or an interval, as error bars: dark grey on a bar, in the series'
        // colour on a point (two series' bars at one x are told apart by colour). A compared bundle's series share
        // their colour with the first's: on a point, its bar is drawn a few pixels to the right of the x (the first
        // bundle's a few to the left), so that two bundles' bars at one K do not cover each other; a bar chart places
        // the two bundles' bars side by side already.
        let on_bar = matches!(se.style, Style::Bars { .. });
        let whisker = if on_bar { RGBColor(0x33, 0x33, 0x33) } else { c };
        let thin = whisker.stroke_width(si(1.0));
        let cap = s(4.0) as i32;
        let dodge = match (on_bar, xy.series.iter().any(|s| s.alt)) {
            (false, true) => s(3.0) as i32 * if se.alt { 1 } else { -1 },
            _ => 0,
        };
        for m in &se.marks {
            // A low end a log axis cannot place (0 or below) is drawn at the axis' floor.
            let lo = m.lo.map(|v| to_space(ya, v).unwrap_or(y_floor));
            let (Some(x), Some(lo), Some(hi)) = (to_space(xa, m.x), lo, m.hi.and_then(|v| to_space(ya, v))) else {
                continue;
            };
            let rise = cc.backend_coord(&(x, hi)).1 - cc.backend_coord(&(x, lo)).1;
            cc.draw_series([EmptyElement::at((x, lo)) + PathElement::new([(dodge, 0), (dodge, rise)], thin)])
                .map_err(backend_err)?;
            cc.draw_series(
                [lo, hi]
                    .map(|v| EmptyElement::at((x, v)) + PathElement::new([(dodge - cap, 0), (dodge + cap, 0)], thin)),
            )
            .map_err(backend_err)?;
        }
        if !matches!(se.style, Style::Bars { .. }) {
            let r = si(4.5);
            if se.alt {
                cc.draw_series(pts.iter().map(|&p| EmptyElement::at(p) + triangle(r + 1, c.filled())))
                    .map_err(backend_err)?;
            } else {
                cc.draw_series(pts.iter().map(|&p| Circle::new(p, r, c.filled()))).map_err(backend_err)?;
            }
        }
        // Where each mark landed (not the frontier's, which is not hoverable).
        let r = s(7.0) as i32;
        for (mi, m) in se.marks.iter().enumerate() {
            let Some(p) = pt(m) else { continue };
            let (x, y) = cc.backend_coord(&p);
            let mut h = Hit { series: index, mark: mi, x, y, x0: x - r, y0: y - r, x1: x + r, y1: y + r };
            if let Style::Bars { width: w } = se.style {
                let (a, top) = cc.backend_coord(&(m.x - w / 2.0, p.1));
                let (b, bottom) = cc.backend_coord(&(m.x + w / 2.0, y_floor));
                h = Hit { x0: a, y0: top, x1: b, y1: bottom, ..h };
            }
            drawn.hits.push(h);
        }
    }
    place_labels(area, &cc, xy, at, drawn)?;
    Ok(cc)
}

/// The point labels of facet `at` (K of a diffusion point), in the series' colours, each at the first of eight
/// places around its point (up and right first, as before) that stays in the plot and clear of every label placed
/// before it, every marker and the legend; a label with no such place is left out (the tooltip has it). Series by
/// series, point by point: the same figure always gets the same labels.
pub(super) fn place_labels<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    cc: &ChartContext<'_, DB, Cartesian2d<Scaled, Scaled>>,
    xy: &Xy<'_>,
    at: Facet,
    drawn: &mut Drawn,
) -> Result<(), ChartError> {
    let ((xa, ya), style) = (xy.axes, xy.style);
    let px = |v: f64| (v * style.scale).round().max(1.0) as i32;
    let pt = |m: &Mark| Some((to_space(xa, m.x)?, to_space(ya, m.y)?));
    let (xr, yr) = cc.plotting_area().get_pixel_range();
    let (x0, x1, y0, y1) = (xr.start, xr.end, yr.start, yr.end);
    let series =
        || xy.series.iter().filter(|s| s.facet == at.index && !matches!(s.style, Style::Bars { .. } | Style::Frontier));
    // Markers, then the legend, are kept clear.
    let r = px(5.5);
    let mut taken: Vec<[i32; 4]> = series()
        .flat_map(|s| s.marks.iter().filter_map(pt))
        .map(|p| cc.backend_coord(&p))
        .map(|(x, y)| [x - r, y - r, x + r, y + r])
        .collect();
    let m = px(LEGEND_MARGIN);
    taken.extend(at.legend.map(|(right, w, h)| {
        let left = if right { x0 + (x1 - x0 - m - w).max(0) } else { x0 + m };
        [left, y0 + m, left + w, y0 + m + h]
    }));
    let size = (FontFamily::SansSerif, (11f64.max(style.min_text) * style.scale).round().max(1.0)).into_font();
    let gap = px(3.0);
    for se in series() {
        let ink = colour(se.colour);
        let text = TextStyle::from(size.clone()).color(&ink);
        for m in &se.marks {
            let (Some(p), Some(label)) = (pt(m), m.label.as_ref()) else { continue };
            let (x, y) = cc.backend_coord(&p);
            let (w, h) = text_width(area, label, &text, style)?;
            let (w, h) = (w.ceil() as i32, h as i32);
            let (right, left, up, down) = (x + r + gap, x - r - gap - w, y - r - gap - h, y + r + gap);
            let places = [
                (right, up),
                (right, down),
                (left, up),
                (left, down),
                (right, y - h / 2),
                (left, y - h / 2),
                (x - w / 2, up),
                (x - w / 2, down),
            ];
            let free = |&(l, t): &(i32, i32)| {
                let b = [l, t, l + w, t + h];
                l >= x0 && t >= y0 && l + w <= x1 && t + h <= y1 && !taken.iter().any(|o| overlap(*o, b))
            };
            let Some((l, t)) = places.into_iter().find(free) else { continue };
            // On a white ground a pixel wider than the text: a line drawn through the place (the Pareto frontier,
            // a reference line) does not strike the label through.
            let ground = Rectangle::new([(l - x - 1, t - y), (l - x + w + 1, t - y + h)], WHITE.mix(0.85).filled());
            cc.plotting_area()
                .draw(&(EmptyElement::at(p) + ground + Text::new(label.clone(), (l - x, t - y), text.clone())))
                .map_err(backend_err)?;
            taken.push([l, t, l + w, t + h]);
            drawn.labels.push(TextBox { text: label.clone(), rect: [l, t, l + w, t + h] });
        }
    }
    Ok(())
}

/// An upward triangle of circumradius `r` around its anchor (as plotters' `TriangleMarker` draws it, without
/// its run-time sine and cosine, which would bring the wasm a trigonometry library).
pub(super) fn triangle(r: u32, style: ShapeStyle) -> Polygon<(i32, i32)> {
    let r = f64::from(r);
    // cos 30 deg and sin 30 deg.
    let (dx, dy) = ((r * 0.866_025_403_784_438_6).ceil() as i32, (r * 0.5).ceil() as i32);
    Polygon::new(vec![(0, -(r as i32)), (dx, dy), (-dx, dy)], style)
}
