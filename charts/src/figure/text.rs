//! Text: titles wrapped to the width, text widths as the backend measures them (scaled by the style), the legend's
//! layout and drawing, and the estimates of both that size a figure before it is drawn.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::xy::triangle;
use super::{ChartError, ChartStyle, LEGEND_MARGIN, TextBox, backend_err};

/// The width and height `text` takes in `area` in `font` (one line), as [`ChartStyle::text_width`] corrects the
/// backend's estimate. (In a browser the estimate is a measured element, which wraps a text wider than the window:
/// its lines are counted back into the width.)
pub(super) fn text_width<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    font: &TextStyle<'_>,
    style: ChartStyle,
) -> Result<(f64, u32), ChartError> {
    let (w, h) = area.estimate_text_size(text, font).map_err(backend_err)?;
    let line = font.font.get_size() * 1.2;
    let lines = (f64::from(h) / line).round().max(1.0);
    Ok((f64::from(w) * lines * style.text_width, (f64::from(h) / lines).round() as u32))
}

/// The font of a title drawn across `area` and its lines: `size` (scaled), or smaller, down to half of it (never
/// below the style's `min_text`), where the text would not fit the area's width (a narrow canvas, half of a pair);
/// wrapped at spaces where it does not fit even so.
pub(super) fn title_lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    size: f64,
    style: ChartStyle,
) -> Result<(FontDesc<'static>, Vec<String>), ChartError> {
    let font = |size: f64| (FontFamily::SansSerif, (size * style.scale).max(1.0)).into_font();
    let room = f64::from(area.dim_in_pixel().0) * 0.96;
    let full = font((size * style.scale).round() / style.scale);
    let wide = text_width(area, text, &TextStyle::from(full.clone()), style)?.0;
    let least = (size * 0.5).max(style.min_text).min(size);
    let font = match wide > room {
        false => full,
        // Shrunk to fit; where even the smallest size does not, three quarters of the size over lines.
        true if size * room / wide >= least => font(size * room / wide),
        true => font((size * 0.75).max(least)),
    };
    let lines = wrap(area, text, &TextStyle::from(font.clone()), style, room)?;
    Ok((font, lines))
}

/// Draws `lines` centred across `area` from `top` down; returns the height they take with their padding (as
/// plotters' own title).
pub(super) fn title_text<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    lines: &[String],
    font: &FontDesc<'_>,
    top: i32,
    style: ChartStyle,
) -> Result<i32, ChartError> {
    let text = TextStyle::from(font.clone()).pos(Pos::new(HPos::Center, VPos::Top));
    let line_h = text_width(area, "Hg", &text, style)?.1 as i32;
    let (pad, step) = ((line_h / 2).min(5), (f64::from(line_h) * 1.2).round() as i32);
    let mid = area.dim_in_pixel().0 as i32 / 2;
    for (i, line) in lines.iter().enumerate() {
        area.draw(&Text::new(line.clone(), (mid, top + pad + step * i as i32), text.clone())).map_err(backend_err)?;
    }
    Ok(2 * pad + step * (lines.len().max(1) as i32 - 1) + line_h)
}

/// `area` under its title (see [`title_lines`]).
pub(super) fn titled<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    size: f64,
    style: ChartStyle,
) -> Result<DrawingArea<DB, Shift>, ChartError> {
    let (font, lines) = title_lines(area, text, size, style)?;
    if let [one] = lines.as_slice() {
        return area.titled(one, font).map_err(backend_err);
    }
    let used = title_text(area, &lines, &font, 0, style)?;
    Ok(area.split_vertically(used).1)
}

/// `text` broken at spaces into lines no wider than `room` pixels (a word wider than that keeps a line to itself).
pub(super) fn wrap<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    font: &TextStyle<'_>,
    style: ChartStyle,
    room: f64,
) -> Result<Vec<String>, ChartError> {
    if text_width(area, text, font, style)?.0 <= room {
        return Ok(vec![text.to_string()]);
    }
    let mut lines: Vec<String> = Vec::new();
    for word in text.split(' ') {
        match lines.last_mut() {
            Some(line) if text_width(area, &format!("{line} {word}"), font, style)?.0 <= room => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    Ok(lines)
}

/// The estimated height of a title `width` pixels wide, as [`title_lines`] lays it out (0.58 em a character): one
/// line at 18 px, or smaller down to its least size; where even that does not fit, lines at three quarters of the
/// size (a phone's long titles: wrapped at spaces, a line holds less than its room).
pub(super) fn title_estimate(text: &str, width: f64, style: ChartStyle) -> f64 {
    let (size, room) = (18.0, width * 0.96);
    let least = (size * 0.5f64).max(style.min_text).min(size);
    let wide = |at: f64| text.chars().count() as f64 * 0.58 * at * style.text_width.max(1.0);
    if wide(size) <= room {
        return 40.0;
    }
    if wide(least) <= room {
        // One line, shrunk to fit: plotters' caption takes twice its size.
        return 2.0 * size * room / wide(size) + 4.0;
    }
    let at = (size * 0.75).max(least);
    let lines = (wide(at) / (room * 0.85)).ceil().max(1.0);
    // As `title_text` draws them: a line's height (1.2 em), 1.2 of it from line to line, padding above and below.
    (lines - 1.0) * at * 1.44 + at * 1.2 + 12.0
}

/// The legend of `labels` estimated without a backend (0.58 em a character): the width of its box in a plot, at the
/// smallest font it may shrink to, and the height of a strip of it `width` wide (see [`legend_layout`]).
pub(super) fn legend_estimate(labels: &[&str], width: f64, style: ChartStyle) -> (f64, f64) {
    if labels.is_empty() {
        return (0.0, 0.0);
    }
    let em = 0.58 * style.text_width.max(1.0);
    let least = if style.min_text > 0.0 { style.min_text.min(12.0) } else { 12.0 * 0.6 };
    let chars = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0) as f64;
    let fixed = 38.0;
    let room = width - 2.0 * LEGEND_MARGIN;
    let (text_w, col_w) = (chars * em * 12.0, fixed + chars * em * 12.0);
    let cols = (room / col_w).floor().clamp(1.0, labels.len() as f64);
    // Wrapped at spaces, a line holds less than its room: a word that does not fit starts the next one (and a
    // canvas measures some labels wider than 0.58 em a character).
    let (size, lines) = match text_w + fixed > room {
        true => (least, (chars * em * least / ((room - fixed) * 0.8).max(40.0)).ceil().max(1.0)),
        false => (12.0, 1.0),
    };
    let rows = (labels.len() as f64 / cols).ceil() * lines;
    (fixed + chars * em * least, rows * (size * 1.2 + 4.0) + 12.0 + 2.0 * LEGEND_MARGIN)
}

/// The marker of a legend row.
#[derive(Clone, Copy)]
pub(super) enum Key {
    /// A line (or band) in this style, dashed (dash and gap lengths) or solid, with the series' point marker
    /// (a triangle when `true`) or none.
    Line { style: ShapeStyle, dash: Option<(f64, f64)>, marker: Option<bool> },
    /// A bar's fill, and its outline where it has one.
    Bar(ShapeStyle, Option<ShapeStyle>),
    /// A point: a circle, or a triangle when `true`.
    Point(ShapeStyle, bool),
}

/// A legend laid out: its text style, each row's label in lines, a line's height, a column's width, the number of
/// columns, and the box's width and height, in pixels.
pub(super) struct LegendLayout {
    pub(super) text: TextStyle<'static>,
    pub(super) lines: Vec<Vec<String>>,
    pub(super) line_h: i32,
    pub(super) col_w: i32,
    pub(super) cols: usize,
    pub(super) w: i32,
    pub(super) h: i32,
}

impl LegendLayout {
    /// The height of each row of entries (as many lines as its most wrapped label).
    pub(super) fn row_heights(&self) -> impl Iterator<Item = i32> + '_ {
        self.lines.chunks(self.cols).map(|row| row.iter().map(Vec::len).max().unwrap_or(1) as i32 * self.line_h)
    }
}

/// Lays out the legend of `labels` (empty ones take no row) in at most `room` pixels' width: one column (in a
/// plot), or as many columns as fit when `columns` (a strip under the charts), entries row by row. Wider than
/// `room`, its font shrinks (to 60%, or to the style's `min_text`), then its labels wrap.
pub(super) fn legend_layout<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    labels: &[&str],
    font: &FontDesc<'static>,
    style: ChartStyle,
    room: i32,
    columns: bool,
) -> Result<LegendLayout, ChartError> {
    let px = |v: f64| (v * style.scale).round().max(1.0) as i32;
    let labels: Vec<&str> = labels.iter().copied().filter(|l| !l.is_empty()).collect();
    let widest = |text: &TextStyle<'_>| -> Result<(i32, i32), ChartError> {
        let (mut w, mut h) = (0, 0);
        for l in &labels {
            let (a, b) = text_width(area, l, text, style)?;
            (w, h) = (w.max(a.ceil() as i32), h.max(b as i32));
        }
        Ok((w, h))
    };
    let size = font.get_size();
    let at = |size: f64| TextStyle::from(font.resize(size)).pos(Pos::new(HPos::Left, VPos::Center));
    let mut text = at(size);
    let (mut text_w, mut h) = widest(&text)?;
    let (pad, marker, gap) = (px(6.0), px(20.0), px(6.0));
    let fixed = 2 * pad + marker + gap;
    // A legend wider than its room (a long label in half of a pair, on a phone, in a printed column) gets a smaller
    // font rather than running past the edge, then its labels wrap.
    if fixed + text_w > room {
        let least = if style.min_text > 0.0 { (style.min_text * style.scale / size).min(1.0) } else { 0.6 };
        text = at(size * (f64::from(room - fixed) / f64::from(text_w.max(1))).clamp(least, 1.0));
        (text_w, h) = widest(&text)?;
    }
    let text_room = (room - fixed).max(px(40.0));
    let mut lines = Vec::new();
    for l in &labels {
        lines.push(wrap(area, l, &text, style, f64::from(text_room))?);
    }
    if text_w > text_room {
        text_w = 0;
        for line in lines.iter().flatten() {
            text_w = text_w.max(text_width(area, line, &text, style)?.0.ceil() as i32);
        }
    }
    let col_w = fixed + text_w;
    let cols = if columns { (room / col_w.max(1)).clamp(1, labels.len().max(1) as i32) as usize } else { 1 };
    let line_h = px(14.0).max(h + px(4.0));
    let mut lay = LegendLayout { text, lines, line_h, col_w, cols, w: 0, h: 0 };
    let rows: i32 = lay.row_heights().sum();
    (lay.w, lay.h) = if labels.is_empty() { (0, 0) } else { (col_w * cols as i32, 2 * pad + rows) };
    Ok(lay)
}

/// The legend: a row per reference line and series (its marker, then its label), in a box in the upper left
/// corner of the plot, or the upper right when `Some(true)`; `None`: the whole `area` is a strip under the charts,
/// the box centred in it, its entries in as many columns as fit. Returns the box drawn. (Drawn here rather than by
/// plotters' series labels, which bring a Unicode lower-casing table into the wasm: about 10 KB gzipped.)
pub(super) fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    rows: &[(&str, Key)],
    corner: Option<bool>,
    font: &FontDesc<'static>,
    style: ChartStyle,
) -> Result<Option<TextBox>, ChartError> {
    let rows: Vec<_> = rows.iter().filter(|r| !r.0.is_empty()).collect();
    if rows.is_empty() {
        return Ok(None);
    }
    let px = |v: f64| (v * style.scale).round().max(1.0) as i32;
    let (pad, marker, gap, margin) = (px(6.0), px(20.0), px(6.0), px(LEGEND_MARGIN));
    let area_w = area.dim_in_pixel().0 as i32;
    let labels: Vec<&str> = rows.iter().map(|r| r.0).collect();
    let lay = legend_layout(area, &labels, font, style, area_w - 2 * margin, corner.is_none())?;
    let (box_w, box_h) = (lay.w, lay.h);
    // Never left of the area (plotters would pull every element there onto its edge, text over the markers).
    let x0 = match corner {
        Some(true) => (area_w - margin - box_w).max(0),
        Some(false) => margin,
        None => ((area_w - box_w) / 2).max(0),
    };
    let (y0, corner) = (margin, |x: i32, y: i32| (x0 + x, margin + y));
    area.draw(&Rectangle::new([(x0, y0), corner(box_w, box_h)], WHITE.mix(0.85).filled())).map_err(backend_err)?;
    area.draw(&Rectangle::new([(x0, y0), corner(box_w, box_h)], BLACK.mix(0.4))).map_err(backend_err)?;
    let heights: Vec<i32> = lay.row_heights().collect();
    for (i, ((_, key), lines)) in rows.iter().zip(&lay.lines).enumerate() {
        let (row, col) = (i / lay.cols, i % lay.cols);
        let top = pad + heights[..row].iter().sum::<i32>();
        let (x, y) = corner(pad + lay.col_w * col as i32, top + lay.line_h / 2);
        let mid = (x + marker / 2, y);
        let point = |fill: ShapeStyle, tri: bool| match tri {
            true => area.draw(&(EmptyElement::at(mid) + triangle(px(5.0) as u32, fill))),
            false => area.draw(&Circle::new(mid, px(4.0), fill)),
        };
        match *key {
            Key::Line { style, dash, marker: m } => {
                let (on, off) = dash.map_or((marker, 0), |(d, g)| (d as i32, g as i32));
                let mut at = x;
                while at < x + marker {
                    area.draw(&PathElement::new([(at, y), ((at + on).min(x + marker), y)], style))
                        .map_err(backend_err)?;
                    at += on + off;
                }
                m.map_or(Ok(()), |tri| point(style.color.filled(), tri))
            }
            Key::Bar(fill, outline) => {
                let corners = [(x + px(3.0), y - px(5.0)), (x + px(17.0), y + px(5.0))];
                area.draw(&Rectangle::new(corners, fill)).map_err(backend_err)?;
                outline.map_or(Ok(()), |line| area.draw(&Rectangle::new(corners, line)))
            }
            Key::Point(fill, tri) => point(fill, tri),
        }
        .map_err(backend_err)?;
        for (j, line) in lines.iter().enumerate() {
            let at = (x + marker + gap, y + lay.line_h * j as i32);
            area.draw(&Text::new(line.clone(), at, lay.text.clone())).map_err(backend_err)?;
        }
    }
    let (bx, by) = area.get_base_pixel();
    let rect = [bx + x0, by + y0, bx + x0 + box_w, by + y0 + box_h];
    Ok(Some(TextBox { text: labels.join("\n"), rect }))
}
