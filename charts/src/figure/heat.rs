//! The heat maps: panels of coloured cells (viridis, or a scale diverging at 1x), their colour bars, OOM and empty
//! cells.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axes::{scaled, tick_label};
use super::text::{text_width, title_lines, title_text, titled};
use super::{Axis, ChartError, ChartStyle, Drawn, Hit, Panel, backend_err};

/// A sequential colour-blind-safe scale (viridis), `t` in 0..=1.
pub fn viridis(t: f64) -> RGBColor {
    const STOPS: [(u8, u8, u8); 5] = [(68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37)];
    let t = if t.is_finite() { t.clamp(0.0, 1.0) } else { 0.0 } * (STOPS.len() - 1) as f64;
    let i = (t.floor() as usize).min(STOPS.len() - 2);
    let f = t - i as f64;
    let lerp = |a: u8, b: u8| (f64::from(a) + (f64::from(b) - f64::from(a)) * f).round() as u8;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    RGBColor(lerp(a.0, b.0), lerp(a.1, b.1), lerp(a.2, b.2))
}

/// A diverging colour-blind-safe scale, `t` in -1..=1: red (below), white (0), blue (above).
pub fn diverging(t: f64) -> RGBColor {
    let t = if t.is_finite() { t.clamp(-1.0, 1.0) } else { 0.0 };
    let end = if t < 0.0 { (178.0, 24.0, 43.0) } else { (33.0, 102.0, 172.0) };
    let lerp = |e: f64| (247.0 + (e - 247.0) * t.abs()).round() as u8;
    RGBColor(lerp(end.0), lerp(end.1), lerp(end.2))
}

/// Fill of the OOM heat cells.
pub const OOM_FILL: RGBColor = RGBColor(0x30, 0x30, 0x30);

/// Fill of heat cells without a value: a mid grey, hatched with [`NA_HATCH`], that the diverging scale's
/// near-white neutral (1x) cannot be taken for.
pub const NA_FILL: RGBColor = RGBColor(0xBD, 0xBD, 0xBD);

/// The diagonal hatch over heat cells without a value.
pub const NA_HATCH: RGBColor = RGBColor(0x96, 0x96, 0x96);

/// The short forms a cell without a value is written with where its words do not fit at the smallest text size
/// (a narrow figure, many columns); captions explain them.
pub const SHORT_FORMS: [(&str, &str); 4] =
    [("no parity", "n/p"), ("not measured", "n/m"), ("no data", "n/d"), ("no baseline", "n/b")];

/// The short form of a cell's text (`n/m` for `not measured`), if it has one.
pub fn short_form(text: &str) -> Option<&'static str> {
    SHORT_FORMS.iter().find(|(long, _)| *long == text).map(|(_, short)| *short)
}

pub(super) fn draw_heat<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    xa: &Axis,
    ya: &Axis,
    panels: &[Panel],
    (unit, center): (&str, Option<f64>),
    style: ChartStyle,
) -> Result<Drawn, ChartError> {
    if panels.iter().all(|p| p.cells.is_empty()) {
        return Err(ChartError::Empty("no cell matches the filters".into()));
    }
    let s = |v: f64| (v * style.scale).round().max(1.0);
    let si = |v: f64| s(v) as u32;
    let font = |size: f64| (FontFamily::SansSerif, s(size)).into_font();
    // Out-of-memory cells are drawn as such, so their values (a peak before the failure) stay out of the scale.
    let values = panels.iter().flat_map(|p| p.cells.iter().filter(|c| !c.oom).filter_map(|c| c.value));
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
    // The values the figure has, for the bar's labels (a diverging scale spans more than them).
    let (least, most) = (lo, hi);
    // A diverging scale spans the centre plus and minus the farthest value.
    let (lo, hi) = match center {
        Some(c) if lo <= hi => {
            let r = (lo - c).abs().max((hi - c).abs()).max(1e-9);
            (c - r, c + r)
        }
        _ => (lo, hi),
    };
    let t_of = |v: f64| if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
    let paint = |t: f64| if center.is_some() { diverging(2.0 * t - 1.0) } else { viridis(t) };
    let root = titled(root, title, 18.0, style)?;
    // A colour bar on the right: the scale from the smallest to the largest value, in the figure's unit.
    let (w, h) = root.dim_in_pixel();
    let (root, bar) = root.split_horizontally(w.saturating_sub(si(HEAT_BAR)));
    if lo <= hi {
        let (x0, x1) = (si(14.0) as i32, si(32.0) as i32);
        let (top, bottom) = (si(40.0) as i32, h as i32 - si(60.0) as i32);
        let steps = 48;
        for i in 0..steps {
            let (a, b) = (i as f64 / steps as f64, (i + 1) as f64 / steps as f64);
            let y = |t: f64| bottom - ((bottom - top) as f64 * t).round() as i32;
            // One value everywhere: the cells' colour, not a range the figure does not have.
            let t = if hi > lo { (a + b) / 2.0 } else { 0.5 };
            bar.draw(&Rectangle::new([(x0, y(b)), (x1, y(a))], paint(t).filled())).map_err(backend_err)?;
        }
        let label = font(12.0).color(&BLACK);
        // 2^v as e^(v ln 2): `exp2` would bring its own routine into the wasm (3 KB), `exp` is there already.
        let fmt = |v: f64| {
            if center.is_some() { format!("{:.2}x", (v * std::f64::consts::LN_2).exp()) } else { format!("{v:.2}") }
        };
        // Labels at the figure's largest and smallest values and, on a diverging scale, at its centre (1x): the
        // ends of a scale mirrored about the centre are values no cell has (12x where the fastest is 0.6x).
        let y_of = |v: f64| bottom - ((bottom - top) as f64 * t_of(v)).round() as i32;
        let mut marks: Vec<(i32, String)> = vec![(y_of(most), fmt(most)), (y_of(least), fmt(least))];
        if let Some(c) = center {
            marks.push((y_of(c), fmt(c)));
        }
        // One label where two would overprint (one value everywhere, or the largest at the centre).
        let gap = si(13.0) as i32;
        let mut drawn: Vec<i32> = Vec::new();
        for (y, text) in marks {
            if drawn.iter().any(|d| (d - y).abs() < gap) {
                continue;
            }
            drawn.push(y);
            bar.draw(&Text::new(text, (x1 + si(4.0) as i32, y - si(6.0) as i32), label.clone()))
                .map_err(backend_err)?;
        }
        bar.draw(&Text::new(unit.to_string(), (x0, bottom + si(10.0) as i32), label)).map_err(backend_err)?;
    }
    // Side by side where they are wide enough, else in rows.
    let cols = heat_columns(panels.len(), f64::from(root.dim_in_pixel().0) / style.scale);
    let areas = root.split_evenly((panels.len().div_ceil(cols), cols));
    let (mut hits, mut plots) = (Vec::new(), Vec::new());
    for (pi, (panel, area)) in panels.iter().zip(&areas).enumerate() {
        let (title_font, lines) = title_lines(area, &panel.title, 14.0, style)?;
        let mut builder = ChartBuilder::on(area);
        builder.margin(si(10.0)).x_label_area_size(si(44.0)).y_label_area_size(si(56.0));
        if let [one] = lines.as_slice() {
            builder.caption(one, title_font);
        } else {
            let used = title_text(area, &lines, &title_font, si(10.0) as i32, style)?;
            builder.margin_top(si(10.0) as i32 + used);
        }
        let mut cc = builder.build_cartesian_2d(scaled(xa, &[], false), scaled(ya, &[], false)).map_err(backend_err)?;
        let xfmt = |v: &f64| tick_label(xa, *v);
        let yfmt = |v: &f64| tick_label(ya, *v);
        cc.configure_mesh()
            .disable_mesh()
            .x_desc(xa.label.as_str())
            .y_desc(ya.label.as_str())
            .x_label_formatter(&xfmt)
            .y_label_formatter(&yfmt)
            .label_style(font(13.0))
            .axis_desc_style(font(14.0))
            .draw()
            .map_err(backend_err)?;
        let (px, py) = cc.plotting_area().get_pixel_range();
        plots.push([px.start, py.start, px.end, py.end]);
        for (ci, c) in panel.cells.iter().enumerate() {
            let (x, y) = (c.col as f64, c.row as f64);
            let fill = match (c.oom, c.value) {
                (true, _) => OOM_FILL,
                (false, Some(v)) => paint(t_of(v)),
                (false, None) => NA_FILL,
            };
            cc.draw_series([Rectangle::new([(x - 0.48, y - 0.48), (x + 0.48, y + 0.48)], fill.filled())])
                .map_err(backend_err)?;
            // No value: hatched, so that it never reads as a colour of the scale.
            if !c.oom && c.value.is_none() {
                let hatch = NA_HATCH.stroke_width(si(1.0));
                // Diagonals u + v = t across the cell's unit square, t in steps of 1/4.
                let lines = (1..8).map(|i| {
                    let t = f64::from(i) / 4.0;
                    let (u0, u1) = ((t - 1.0).max(0.0), t.min(1.0));
                    let at = |u: f64, v: f64| (x - 0.48 + 0.96 * u, y - 0.48 + 0.96 * v);
                    PathElement::new(vec![at(u0, t - u0), at(u1, t - u1)], hatch)
                });
                cc.draw_series(lines).map_err(backend_err)?;
            }
            let light = fill.0 as u32 * 299 + fill.1 as u32 * 587 + fill.2 as u32 * 114 > 128_000;
            let ink = if light { BLACK } else { WHITE };
            let (cx, cy) = cc.backend_coord(&(x, y));
            let (x0, y0) = cc.backend_coord(&(x - 0.48, y + 0.48));
            let (x1, y1) = cc.backend_coord(&(x + 0.48, y - 0.48));
            // The cell's text at 13 px, smaller (to 8 px, or the style's `min_text`) where the cell is narrower or
            // lower than that, and none where even that does not fit (many rows, a phone): overprinted labels read
            // as nonsense; the tooltip still has the value. A cell without a value that its words do not fit is
            // written in its short form (`n/m`, [`SHORT_FORMS`]), never left a bare grey cell.
            let (cell_w, cell_h) = (f64::from((x1 - x0).abs()), f64::from((y0 - y1).abs()));
            let fit = |text: &str| -> Result<f64, ChartError> {
                let (wide, _) = text_width(area, text, &TextStyle::from(font(13.0)), style)?;
                Ok((13.0 * (cell_w * 0.92 / wide.max(1.0)).min(cell_h * 0.85 / s(13.0))).min(13.0))
            };
            let least = style.min_text.max(8.0);
            let mut text = (c.text.as_str(), fit(&c.text)?);
            if text.1 < least
                && let Some(short) = short_form(&c.text)
            {
                text = (short, fit(short)?);
            }
            if text.1 >= least {
                let text_style = font(text.1).color(&ink).pos(Pos::new(HPos::Center, VPos::Center));
                cc.draw_series([Text::new(text.0.to_string(), (x, y), text_style)]).map_err(backend_err)?;
            }
            hits.push(Hit { series: pi, mark: ci, x: cx, y: cy, x0, y0, x1, y1 });
        }
    }
    Ok(Drawn { hits, plots, ..Drawn::default() })
}

/// The narrowest heat map panel, CSS pixels.
pub(super) const HEAT_PANEL: f64 = 200.0;

/// The colour bar's width, CSS pixels.
pub(super) const HEAT_BAR: f64 = 86.0;

/// The panels a row of a heat map `width` CSS pixels wide holds.
pub(super) fn heat_columns(panels: usize, width: f64) -> usize {
    (((width - HEAT_BAR) / HEAT_PANEL).floor().max(1.0) as usize).clamp(1, panels.max(1))
}

#[cfg(test)]
mod tests {
    use plotters::prelude::RGBColor;

    use super::viridis;

    #[test]
    fn viridis_ends() {
        assert_eq!(viridis(0.0), RGBColor(68, 1, 84));
        assert_eq!(viridis(1.0), RGBColor(253, 231, 37));
        assert_eq!(viridis(f64::NAN), RGBColor(68, 1, 84));
    }
}
