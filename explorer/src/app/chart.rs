//! The chart panel: the canvas, its tooltips and clicks, the PNG download.

use std::sync::Arc;

use charts::bundle::LoadedBundle;
use charts::figure::{self, CellId, ChartStyle, Drawn};
use charts::views::{self, ChartView, ViewKind};
use leptos::html;
use leptos::prelude::*;
use plotters::prelude::IntoDrawingArea;
use plotters_canvas::CanvasBackend;

use super::browser::{download_text, download_url, js_message};
use super::{CHART_CSS_SIZE, mark};
use crate::state::PageState;

/// A chart narrower than this (CSS pixels: a phone) shows its tooltips across its whole width.
const NARROW_CHART_PX: i32 = 640;

/// The canvas of the chart views; redrawn when the figure changes. Hover shows a mark's tooltip, a click
/// selects its cell; from the keyboard (the canvas is in the Tab order) the arrow keys step from mark to mark in
/// drawing order (Home and End: the first and the last), Enter or Space selects the cell, Escape leaves the marks.
/// Also the PNG and CSV downloads.
#[component]
pub(super) fn ChartPanel(
    /// The current view's figure (None: the view is not a chart).
    chart: Memo<Option<Arc<ChartView>>>,
    /// The loaded bundles.
    bundles: Arc<Vec<Arc<LoadedBundle>>>,
    /// The page state.
    state: RwSignal<PageState>,
    /// The cell clicked last.
    selected: RwSignal<Option<CellId>>,
) -> impl IntoView {
    let canvas_ref = NodeRef::<html::Canvas>::new();
    let message = RwSignal::new(None::<String>);
    let drawn = RwSignal::new(None::<Arc<Drawn>>);
    // Text, the pointer on the canvas (CSS pixels), the canvas's width, and whether the tooltip goes above the
    // pointer (in the lower half of the window: below it would run off the screen).
    let tooltip = RwSignal::new(None::<(String, i32, i32, i32, bool)>);
    // The mark the keyboard is on: its index in the drawn marks, its centre (CSS pixels in the frame), its cell.
    let key_mark = RwSignal::new(None::<(usize, i32, i32, Option<CellId>)>);
    let draws = StoredValue::new(0u32);
    Effect::new(move |_| {
        let cv = chart.get();
        let Some(canvas) = canvas_ref.get() else { return };
        tooltip.set(None);
        key_mark.set(None);
        let Some(cv) = cv else { return };
        let result = cv.figure.as_ref().map_err(Clone::clone).and_then(|fig| draw_on(&canvas, fig));
        draws.update_value(|n| *n += 1);
        let n = draws.get_value();
        let _ = canvas.set_attribute("data-draw-count", &n.to_string());
        match result {
            Ok(d) => {
                drawn.set(Some(Arc::new(d)));
                message.set(None);
            }
            Err(e) => {
                drawn.set(None);
                let _ = canvas.set_attribute("data-drawn", "empty");
                message.set(Some(e));
            }
        }
        mark("dllm:drawn");
        let now = window().performance().map_or(0.0, |p| p.now());
        let _ = canvas.set_attribute("data-drawn-at", &format!("{now:.1}"));
    });
    // Canvas pixels per CSS pixel.
    let scale =
        move || canvas_ref.get_untracked().map_or(1.0, |c| f64::from(c.width()) / f64::from(c.client_width().max(1)));
    // The tooltip of marks on one spot (an [A] and a [B] point of equal value): every one named, the first's cell.
    let tip_of = move |hits: &[&figure::Hit]| -> Option<(String, Option<CellId>)> {
        let cv = chart.get_untracked()?;
        let fig = cv.figure.as_ref().ok()?;
        let infos: Vec<(&str, Option<CellId>)> = hits.iter().filter_map(|h| fig.hit_info(h)).collect();
        let (_, cell) = *infos.first()?;
        let mut tips: Vec<&str> = Vec::new();
        for (tip, _) in &infos {
            if !tips.contains(tip) {
                tips.push(tip);
            }
        }
        Some((tips.join("\n\n"), cell))
    };
    let hit_at = move |ev: &leptos::ev::MouseEvent| -> Option<(String, Option<CellId>)> {
        let to_device = |v: i32| (f64::from(v) * scale()).round() as i32;
        let d = drawn.get_untracked()?;
        tip_of(&d.all_at(to_device(ev.offset_x()), to_device(ev.offset_y()), to_device(12)))
    };
    // Whether a tooltip at `y` (CSS pixels in the window) goes above it: in the window's lower half.
    let goes_above = |client_y: f64| {
        let window_h = window().inner_height().ok().and_then(|h| h.as_f64()).unwrap_or(f64::INFINITY);
        client_y > window_h / 2.0
    };
    // The keyboard onto mark `i` of the drawn marks (clamped to the last): its tooltip at its centre.
    let key_to = move |i: usize| {
        let (Some(canvas), Some(d)) = (canvas_ref.get_untracked(), drawn.get_untracked()) else { return };
        let Some(h) = d.hits.get(i.min(d.hits.len().saturating_sub(1))) else { return };
        let Some((text, cell)) = tip_of(&d.on_spot(h)) else { return };
        let (x, y) = ((f64::from(h.x) / scale()).round() as i32, (f64::from(h.y) / scale()).round() as i32);
        let above = goes_above(canvas.get_bounding_client_rect().top() + f64::from(y));
        tooltip.set(Some((text, x, y, canvas.client_width(), above)));
        // The ring around the mark, placed in the frame (the canvas's margin and border added).
        let (fx, fy) = (x + canvas.offset_left() + canvas.client_left(), y + canvas.offset_top() + canvas.client_top());
        key_mark.set(Some((i.min(d.hits.len() - 1), fx, fy, cell)));
    };
    let on_key = move |ev: leptos::ev::KeyboardEvent| {
        let n = drawn.get_untracked().map_or(0, |d| d.hits.len());
        let at = key_mark.get_untracked();
        let step = |forward: bool| match (at, forward) {
            (None, true) => Some(0),
            (None, false) => n.checked_sub(1),
            (Some((i, ..)), true) => Some((i + 1) % n.max(1)),
            (Some((i, ..)), false) => Some(i.checked_sub(1).unwrap_or(n.saturating_sub(1))),
        };
        let to = match ev.key().as_str() {
            _ if n == 0 => return,
            "ArrowRight" | "ArrowDown" => step(true),
            "ArrowLeft" | "ArrowUp" => step(false),
            "Home" => Some(0),
            "End" => Some(n - 1),
            "Enter" | " " => {
                if let Some((_, _, _, Some(cell))) = at {
                    selected.set(Some(cell));
                }
                None
            }
            "Escape" => {
                tooltip.set(None);
                key_mark.set(None);
                None
            }
            _ => return,
        };
        ev.prevent_default();
        if let Some(i) = to {
            key_to(i);
        }
    };
    let on_move = move |ev: leptos::ev::MouseEvent| {
        let w = canvas_ref.get_untracked().map_or(900, |c| c.client_width());
        let above = goes_above(f64::from(ev.client_y()));
        key_mark.set(None);
        tooltip.set(hit_at(&ev).map(|(t, _)| (t, ev.offset_x(), ev.offset_y(), w, above)));
    };
    let on_click = move |ev: leptos::ev::MouseEvent| {
        if let Some((_, Some(cell))) = hit_at(&ev) {
            selected.set(Some(cell));
        }
    };
    let shown = bundles.clone();
    let png = move |_| {
        let Some(canvas) = canvas_ref.get_untracked() else { return };
        if let Ok(url) = canvas.to_data_url() {
            let r: Vec<&LoadedBundle> = shown.iter().map(|b| b.as_ref()).collect();
            download_url(&url, &views::download_name(&r, &format!("{}.png", state.get_untracked().view.slug())));
        }
    };
    let csv = move |_| {
        let s = state.get_untracked();
        let r: Vec<&LoadedBundle> = bundles.iter().map(|b| b.as_ref()).collect();
        let text = views::csv(&r, &views::rows(&r, &s.filters));
        let name = views::download_name(&r, "cells.csv");
        download_text(&text, &name, "text/csv");
    };
    let is_chart = move || state.get().view.is_chart();
    // The answer's sentence above its chart; every other note (which shape, what a metric means) under it.
    let notes = move |above: bool| {
        let lead = state.get().view == ViewKind::Answer;
        chart.get().map(|cv| {
            let n = usize::from(lead);
            let notes = if above { &cv.notes[..n.min(cv.notes.len())] } else { &cv.notes[n.min(cv.notes.len())..] };
            notes.iter().map(|n| view! { <p class="note" data-testid="note">{n.clone()}</p> }).collect_view()
        })
    };
    view! {
        {move || notes(true)}
        {move || message.get().filter(|_| is_chart()).map(|m| {
            let nq = m == views::NO_QUALITY;
            let testid = if nq {
                "no-quality"
            } else if m == views::NO_ROOFLINE {
                "no-roofline"
            } else {
                "chart-message"
            };
            view! { <p class=if nq { "empty no-quality" } else { "empty" } data-testid=testid>{m}</p> }
        })}
        // Parked (no height, hidden), not `display: none`, when no chart shows: the canvas keeps its laid-out width,
        // so the first chart after a table or a message is drawn at the width it is shown at.
        <div class="chart-frame" class:parked=move || !is_chart() || message.get().is_some()>
            <canvas
                node_ref=canvas_ref
                width=CHART_CSS_SIZE.0
                height=CHART_CSS_SIZE.1
                data-testid="chart"
                data-view=move || state.get().view.slug()
                data-drawn="false"
                role="img"
                tabindex="0"
                aria-label=move || chart.get().and_then(|c| c.figure.as_ref().ok().map(|f| f.title.clone())).unwrap_or_default()
                aria-description="The arrow keys step through the marks, Enter shows a mark's cell"
                on:mousemove=on_move
                on:mouseleave=move |_| {
                    if key_mark.get_untracked().is_none() {
                        tooltip.set(None);
                    }
                }
                on:click=on_click
                on:keydown=on_key
                on:blur=move |_| {
                    key_mark.set(None);
                    tooltip.set(None);
                }
            ></canvas>
            {move || {
                key_mark.get().map(|(i, x, y, _)| {
                    view! {
                        <div class="mark-focus" data-testid="mark-focus" data-mark=i.to_string()
                            style=format!("left: {x}px; top: {y}px")></div>
                    }
                })
            }}
            {move || {
                tooltip.get().map(|(text, x, y, w, above)| {
                    // Under the pointer, or over it in the window's lower half (its bottom edge at the pointer).
                    let (top, lift) = if above { (y - 14, "translateY(-100%)") } else { (y + 14, "") };
                    view! {
                        <div
                            class="tooltip"
                            data-testid="chart-tooltip"
                            // Read out when the keyboard moves it (the pointer's would be read at every move).
                            aria-live=move || key_mark.get().map(|_| "polite")
                            // Right of the pointer, or left of it on the right half (stays inside); on a narrow
                            // chart (a phone) the whole width at the pointer, its lines wrapped, since a
                            // tooltip wider than half the screen would leave it on one side or the other.
                            style=if w < NARROW_CHART_PX {
                                format!("left: 0; right: 0; top: {top}px; white-space: pre-wrap; transform: {lift}")
                            } else if x < w / 2 {
                                format!("left: {}px; top: {top}px; transform: {lift}", x + 14)
                            } else {
                                format!("left: {}px; top: {top}px; transform: translateX(-100%) {lift}", x - 14)
                            }
                            data-above=above.to_string()
                        >
                            {text}
                        </div>
                    }
                })
            }}
        </div>
        {move || notes(false)}
        <div class="exports">
            <button data-testid="export-png" on:click=png disabled=move || !is_chart() || message.get().is_some()>"Download chart (PNG)"</button>
            <button data-testid="export-csv" on:click=csv>"Download filtered cells (CSV)"</button>
        </div>
    }
}

/// Draws `fig` on `canvas` at device resolution and records what was drawn on the element:
/// `data-figure` (the figure's numbers), `data-hits` (where each mark landed, canvas pixels), `data-plots` (each
/// plot's area, canvas pixels), then `data-drawn="true"`.
pub(super) fn draw_on(canvas: &web_sys::HtmlCanvasElement, fig: &figure::Figure) -> Result<Drawn, String> {
    let attr = |k: &str, v: &str| canvas.set_attribute(k, v).map_err(|e| js_message(&e));
    attr("data-drawn", "false")?;
    let dpr = window().device_pixel_ratio().clamp(1.0, 4.0);
    let css_w = match canvas.client_width() {
        w if w > 0 => w as u32,
        _ => CHART_CSS_SIZE.0,
    };
    // Small multiples are taller; the element keeps the drawing's proportions.
    let style = ChartStyle::screen(dpr);
    let css_h = fig.height_for(css_w, ChartStyle::screen(1.0));
    attr("style", &format!("aspect-ratio: {css_w} / {css_h}"))?;
    canvas.set_width((f64::from(css_w) * dpr).round() as u32);
    canvas.set_height((f64::from(css_h) * dpr).round() as u32);
    let backend = CanvasBackend::with_canvas_object(canvas.clone()).ok_or("the browser gave no 2D canvas context")?;
    let root = backend.into_drawing_area();
    let drawn = figure::draw(&root, fig, style).map_err(|e| e.to_string())?;
    attr("data-figure", &serde_json::to_string(fig).map_err(|e| e.to_string())?)?;
    attr("data-hits", &serde_json::to_string(&drawn.hits).map_err(|e| e.to_string())?)?;
    attr("data-plots", &serde_json::to_string(&drawn.plots).map_err(|e| e.to_string())?)?;
    attr("data-drawn", "true")?;
    Ok(drawn)
}
