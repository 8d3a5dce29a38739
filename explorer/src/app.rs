//! The leptos components of the explorer (wasm only): bundle list, provenance panel, chart canvas.
//!
//! Everything shown is computed in [`crate::view`] (and, below it, `schema`); this module fetches,
//! keeps the selection in signals and hands the canvas to [`crate::chart`]. Strings from bundles are
//! always rendered as text nodes, never as HTML.

use std::sync::Arc;

use leptos::html;
use leptos::prelude::*;
use plotters::prelude::IntoDrawingArea;
use plotters_canvas::CanvasBackend;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use crate::chart::{self, ChartStyle, Drawn, LatencyChart};
use schema::IndexEntry;

use crate::view::{self, LoadedBundle};

/// Where the index of bundles lives, relative to the page (the site may sit under a sub-path).
const INDEX_URL: &str = "bundles/index.json";
/// CSS size of the chart when the page cannot measure it.
const CHART_CSS_SIZE: (u32, u32) = (900, 520);

/// Mounts the app on `<body>`.
pub fn mount() {
    leptos::mount::mount_to_body(App);
}

/// The bundle the user asked for.
#[derive(Debug, Clone, PartialEq)]
enum Source {
    /// A file listed in (or named next to) `bundles/index.json`.
    Remote(String),
    /// A file picked with the file input, already read.
    Local { name: String, text: String },
    /// A request that failed before there was anything to parse.
    Broken(String),
}

type Loaded = Option<Result<Arc<LoadedBundle>, String>>;

/// The whole page.
#[component]
pub fn App() -> impl IntoView {
    let index = LocalResource::new(|| async {
        let text = fetch_text(INDEX_URL).await?;
        view::parse_index(&text)
    });
    let source = RwSignal::new(None::<Source>);

    // First bundle: `?bundle=FILE`, else the first entry of the index.
    Effect::new(move |_| {
        if source.with_untracked(Option::is_some) {
            return;
        }
        let entries = match index.get() {
            None => return,
            Some(r) => r.unwrap_or_default(),
        };
        let pick = match query_bundle() {
            Some(Ok(f)) => Some(Source::Remote(f)),
            Some(Err(e)) => Some(Source::Broken(e)),
            None => entries.first().map(|e| Source::Remote(e.file.clone())),
        };
        if pick.is_some() {
            source.set(pick);
        }
    });

    let bundle: LocalResource<Loaded> = LocalResource::new(move || {
        let src = source.get();
        async move {
            Some(match src? {
                Source::Remote(file) if !view::is_plain_file_name(&file) => {
                    Err(format!("{file:?} is not a plain bundle file name"))
                }
                Source::Remote(file) => match fetch_text(&format!("bundles/{file}")).await {
                    Ok(text) => view::load_bundle(&file, &text).map(Arc::new),
                    Err(e) => Err(e),
                },
                Source::Local { name, text } => view::load_bundle(&name, &text).map(Arc::new),
                Source::Broken(e) => Err(e),
            })
        }
    });

    let selected_file = move || match source.get() {
        Some(Source::Remote(f)) => f,
        _ => String::new(),
    };
    let listed =
        move |file: &str| index.with(|r| matches!(r, Some(Ok(entries)) if entries.iter().any(|e| e.file == file)));
    let on_pick = move |ev: leptos::ev::Event| {
        let file = event_target_value(&ev);
        if file.is_empty() {
            return;
        }
        set_query_bundle(&file);
        source.set(Some(Source::Remote(file)));
    };
    let on_file = move |ev: leptos::ev::Event| {
        let input: web_sys::HtmlInputElement = event_target(&ev);
        let Some(file) = input.files().and_then(|f| f.get(0)) else { return };
        // Reset so that picking the same file again (after editing it) fires `change` again.
        input.set_value("");
        let name = file.name();
        leptos::task::spawn_local(async move {
            let read = JsFuture::from(file.text()).await;
            source.set(Some(match read.map(|v| v.as_string()) {
                Ok(Some(text)) => Source::Local { name, text },
                Ok(None) => Source::Broken(format!("cannot read {name}: not a text file")),
                Err(e) => Source::Broken(format!("cannot read {name}: {}", js_message(&e))),
            }));
        });
    };

    view! {
        <header>
            <h1>"dllm-bench explorer"</h1>
            <p class="subtitle">"LLaDA-8B (masked diffusion) vs Meta-Llama-3-8B (autoregressive)"</p>
        </header>
        <section class="controls">
            <label>
                "Bundle "
                <select data-testid="bundle-select" on:change=on_pick>
                    // Selected while the shown bundle is not one of the list (local file, ?bundle=, error),
                    // so that picking any listed bundle fires `change`.
                    <option value="" disabled=true selected=move || !listed(&selected_file())>
                        "(choose a bundle)"
                    </option>
                    {move || {
                        let entries: Vec<IndexEntry> = index.get().and_then(Result::ok).unwrap_or_default();
                        entries
                            .into_iter()
                            .map(|e| {
                                let file = e.file.clone();
                                view! {
                                    <option value=e.file.clone() selected=move || selected_file() == file>
                                        {view::option_label(&e)}
                                    </option>
                                }
                            })
                            .collect_view()
                    }}
                </select>
            </label>
            <label>
                "or open a local bundle "
                <input type="file" accept=".json,application/json" data-testid="file-input" on:change=on_file/>
            </label>
        </section>
        {move || {
            index
                .get()
                .and_then(Result::err)
                .map(|e| view! { <p class="error" role="alert" data-testid="index-error">{e}</p> })
        }}
        <main>
            <Transition fallback=|| view! { <p class="loading">"Loading…"</p> }>
                {move || {
                    bundle
                        .get()
                        .map(|loaded| match loaded {
                            None => view! { <p class="hint">"No bundle selected."</p> }.into_any(),
                            Some(Err(e)) => {
                                view! { <p class="error" role="alert" data-testid="error">{e}</p> }.into_any()
                            }
                            Some(Ok(b)) => view! { <BundleView bundle=b/> }.into_any(),
                        })
                }}
            </Transition>
        </main>
    }
}

/// Provenance and charts of one loaded bundle.
#[component]
fn BundleView(
    /// The bundle, already parsed and summarized.
    bundle: Arc<LoadedBundle>,
) -> impl IntoView {
    let group = RwSignal::new(0usize);
    let charts = Arc::new(bundle.charts.clone());
    let options = charts
        .iter()
        .enumerate()
        .map(|(i, c)| view! { <option value=i.to_string()>{c.group_label()}</option> })
        .collect_view();
    let chart_part = if charts.is_empty() {
        view! {
            <p class="error" role="alert" data-testid="error">
                "This bundle has no successful diffusion cells to plot."
            </p>
        }
        .into_any()
    } else {
        view! {
            <label>
                "Shape (batch size B, sequence length N) "
                <select
                    data-testid="group-select"
                    on:change=move |ev| group.set(event_target_value(&ev).parse().unwrap_or(0))
                >
                    {options}
                </select>
            </label>
            <LatencyCanvas charts=charts group=group.read_only()/>
        }
        .into_any()
    };
    let rows = bundle.provenance.iter().map(|(k, v)| view! { <dt>{*k}</dt><dd>{v.clone()}</dd> }).collect_view();
    view! {
        <section class="provenance" data-testid="provenance">
            <h2>"Provenance: " <span class="source">{bundle.source.clone()}</span></h2>
            {bundle.synthetic_weights.then(|| view! {
                <p class="badge-synthetic" data-testid="synthetic-badge">
                    "SYNTHETIC WEIGHTS: timing is real, quality is meaningless"
                </p>
            })}
            <dl>{rows}</dl>
        </section>
        <section class="chart">
            <h2>"Latency vs diffusion steps"</h2>
            {chart_part}
        </section>
    }
}

/// The canvas; redrawn whenever the selected group changes. Hovering a point shows its numbers.
#[component]
fn LatencyCanvas(
    /// One chart per (B, N) group.
    charts: Arc<Vec<LatencyChart>>,
    /// Index into `charts` of the group to draw.
    group: ReadSignal<usize>,
) -> impl IntoView {
    let canvas_ref = NodeRef::<html::Canvas>::new();
    let draw_error = RwSignal::new(None::<String>);
    // What was drawn last (group index, markers), for the tooltip.
    let drawn = RwSignal::new(None::<(usize, Arc<Drawn>)>);
    let tooltip = RwSignal::new(None::<(String, i32, i32)>);
    let charts_for_draw = charts.clone();
    Effect::new(move |_| {
        let i = group.get();
        let (Some(canvas), Some(c)) = (canvas_ref.get(), charts_for_draw.get(i)) else { return };
        tooltip.set(None);
        match draw_on(&canvas, c) {
            Ok(d) => {
                drawn.set(Some((i, Arc::new(d))));
                draw_error.set(None);
            }
            Err(e) => {
                drawn.set(None);
                draw_error.set(Some(e));
            }
        }
    });
    let on_move = move |ev: leptos::ev::MouseEvent| {
        let Some(canvas) = canvas_ref.get_untracked() else { return };
        let scale = f64::from(canvas.width()) / f64::from(canvas.client_width().max(1));
        let (x, y) = (ev.offset_x(), ev.offset_y());
        let to_device = |v: i32| (f64::from(v) * scale).round() as i32;
        let hit = drawn.with_untracked(|d| {
            let (i, d) = d.as_ref()?;
            let m = d.nearest(to_device(x), to_device(y), to_device(12))?;
            Some(chart::tooltip_text(charts.get(*i)?, m))
        });
        tooltip.set(hit.map(|text| (text, x, y)));
    };
    view! {
        <div class="chart-frame">
            <canvas
                node_ref=canvas_ref
                width=CHART_CSS_SIZE.0
                height=CHART_CSS_SIZE.1
                data-testid="chart-latency-steps"
                data-drawn="false"
                role="img"
                aria-label="Median end-to-end latency in milliseconds against diffusion steps K"
                on:mousemove=on_move
                on:mouseleave=move |_| tooltip.set(None)
            ></canvas>
            {move || {
                tooltip
                    .get()
                    .map(|(text, x, y)| {
                        view! {
                            <div
                                class="tooltip"
                                data-testid="chart-tooltip"
                                // Right of the pointer, or left of it on the right half (stays inside).
                                style=if x < 450 {
                                    format!("left: {}px; top: {}px", x + 14, y + 14)
                                } else {
                                    format!("left: {}px; top: {}px; transform: translateX(-100%)", x - 14, y + 14)
                                }
                            >
                                {text}
                            </div>
                        }
                    })
            }}
        </div>
        {move || draw_error.get().map(|e| view! { <p class="error" role="alert" data-testid="error">{e}</p> })}
    }
}

/// Draws `c` on `canvas` at device resolution and records what was drawn on the element:
/// `data-series` (the chart's numbers), `data-markers` (each point's centre in canvas pixels),
/// then `data-drawn="true"`.
fn draw_on(canvas: &web_sys::HtmlCanvasElement, c: &LatencyChart) -> Result<Drawn, String> {
    let attr = |k: &str, v: &str| canvas.set_attribute(k, v).map_err(|e| js_message(&e));
    attr("data-drawn", "false")?;
    let dpr = window().device_pixel_ratio().clamp(1.0, 4.0);
    let css_w = match canvas.client_width() {
        w if w > 0 => w as u32,
        _ => CHART_CSS_SIZE.0,
    };
    let css_h = css_w * CHART_CSS_SIZE.1 / CHART_CSS_SIZE.0;
    canvas.set_width((f64::from(css_w) * dpr).round() as u32);
    canvas.set_height((f64::from(css_h) * dpr).round() as u32);
    let backend = CanvasBackend::with_canvas_object(canvas.clone()).ok_or("the browser gave no 2D canvas context")?;
    let root = backend.into_drawing_area();
    let drawn = chart::draw_latency_vs_steps(&root, c, ChartStyle { scale: dpr }).map_err(|e| e.to_string())?;
    attr("data-series", &serde_json::to_string(c).map_err(|e| e.to_string())?)?;
    attr("data-markers", &serde_json::to_string(&drawn.markers).map_err(|e| e.to_string())?)?;
    attr("data-drawn", "true")?;
    Ok(drawn)
}

/// `?bundle=FILE` from the address: `Some(Err)` if it is not a plain file name.
fn query_bundle() -> Option<Result<String, String>> {
    let search = window().location().search().ok()?;
    let params = web_sys::UrlSearchParams::new_with_str(&search).ok()?;
    let file = params.get("bundle").filter(|f| !f.is_empty())?;
    Some(if view::is_plain_file_name(&file) {
        Ok(file)
    } else {
        Err(format!("?bundle={file:?} is not a plain bundle file name"))
    })
}

/// Puts the chosen bundle in the address, so a reload or a shared link shows the same one.
fn set_query_bundle(file: &str) {
    if let Ok(history) = window().history() {
        let url = format!("?bundle={}", String::from(js_sys::encode_uri_component(file)));
        // Failing to update the address bar is harmless: ignore it.
        let _ = history.replace_state_with_url(&JsValue::NULL, "", Some(&url));
    }
}

/// GETs `url` (relative to the page) as text, bypassing stale caches; errors are user messages.
async fn fetch_text(url: &str) -> Result<String, String> {
    let fail = |why: String| format!("could not fetch {url}: {why}");
    let init = web_sys::RequestInit::new();
    init.set_cache(web_sys::RequestCache::NoCache);
    let req = web_sys::Request::new_with_str_and_init(url, &init).map_err(|e| fail(js_message(&e)))?;
    let resp = JsFuture::from(window().fetch_with_request(&req)).await.map_err(|e| fail(js_message(&e)))?;
    let resp: web_sys::Response = resp.dyn_into().map_err(|_| fail("not an HTTP response".into()))?;
    if !resp.ok() {
        return Err(fail(format!("HTTP {} {}", resp.status(), resp.status_text())));
    }
    let text =
        JsFuture::from(resp.text().map_err(|e| fail(js_message(&e)))?).await.map_err(|e| fail(js_message(&e)))?;
    text.as_string().ok_or_else(|| fail("the response is not text".into()))
}

fn js_message(e: &JsValue) -> String {
    if let Some(err) = e.dyn_ref::<js_sys::Error>() {
        return String::from(err.message());
    }
    e.as_string().unwrap_or_else(|| format!("{e:?}"))
}
