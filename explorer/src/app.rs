//! The leptos components of the explorer (wasm only): loading (index, `?bundle=`, file picker,
//! drag-and-drop), the controls (view tabs, filters, axes, compare), the chart canvas with tooltips and
//! clicks, the S_parity panel, the table of cells, and the PNG/CSV downloads.
//!
//! Every number shown is computed in [`charts::views`] (and, below it, `metrics::derive`); this module keeps
//! the page state in signals, mirrors it in the URL ([`crate::state`]), and hands figures to [`charts::figure`]. Strings from
//! bundles are always rendered as text nodes, never as HTML.

use std::sync::Arc;

use leptos::html;
use leptos::prelude::*;
use metrics::derive::MemoryMetric;
use plotters::prelude::IntoDrawingArea;
use plotters_canvas::CanvasBackend;
use schema::IndexEntry;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use charts::bundle::{self, LoadedBundle};
use charts::figure::{self, CellId, ChartStyle, Drawn};
use charts::views::{self, ChartView, FilterChoices, Filters, ParetoX, ViewKind};

use crate::index;
use crate::state::{self, PageState};

/// Where the index of bundles lives, relative to the page (the site may sit under a sub-path).
const INDEX_URL: &str = "bundles/index.json";
/// CSS size of the chart when the page cannot measure it; the aspect ratio always.
const CHART_CSS_SIZE: (u32, u32) = (1000, 560);
/// Rows of the cell table per page (the table of a 10,000-cell bundle stays quick).
const PAGE_ROWS: usize = 100;

/// Mounts the app on `<body>`.
pub fn mount() {
    mark("dllm:start");
    leptos::mount::mount_to_body(App);
}

/// A `performance.mark` (the speed benchmark prints the time between them; see explorer/bench/bench.mjs).
fn mark(name: &str) {
    if let Some(p) = window().performance() {
        let _ = p.mark(name);
    }
}

/// A bundle the user asked for.
#[derive(Debug, Clone, PartialEq)]
enum Source {
    /// A file listed in (or named next to) `bundles/index.json`.
    Remote(String),
    /// A local file (picker or drop), already read.
    Local { name: String, text: String },
    /// A request that failed before there was anything to parse.
    Broken(String),
}

type Loaded = Option<Result<Arc<LoadedBundle>, String>>;

async fn load(src: Option<Source>) -> Loaded {
    Some(match src? {
        Source::Remote(file) if !index::is_plain_file_name(&file) => {
            Err(format!("{file:?} is not a plain bundle file name"))
        }
        Source::Remote(file) => {
            let url = format!("bundles/{file}");
            let text = match prefetched(&file).await {
                Some(bytes) => utf8(&url, bytes),
                None => fetch_utf8(&url).await,
            };
            mark("dllm:bundle-text");
            let loaded = text.and_then(|text| bundle::load_bundle(&file, &text).map(Arc::new));
            mark("dllm:bundle-loaded");
            loaded
        }
        Source::Local { name, text } => bundle::load_bundle(&name, &text).map(Arc::new),
        Source::Broken(e) => Err(e),
    })
}

fn remote_name(s: &Option<Source>) -> Option<String> {
    match s {
        Some(Source::Remote(f)) => Some(f.clone()),
        _ => None,
    }
}

/// The whole page.
#[component]
pub fn App() -> impl IntoView {
    let initial = query_state();
    let index = LocalResource::new(|| async {
        let text = fetch_text(INDEX_URL).await?;
        index::parse_index(&text)
    });
    let main_src = RwSignal::new(None::<Source>);
    let cmp_src = RwSignal::new(initial.compare.clone().map(Source::Remote));
    let state = RwSignal::new(initial.clone());
    let selected = RwSignal::new(None::<CellId>);

    // First bundle: `?bundle=FILE`, else the first entry of the index.
    let wanted = initial.bundle.clone();
    Effect::new(move |_| {
        if main_src.with_untracked(Option::is_some) {
            return;
        }
        if let Some(f) = &wanted {
            main_src.set(Some(if index::is_plain_file_name(f) {
                Source::Remote(f.clone())
            } else {
                Source::Broken(format!("?bundle={f:?} is not a plain bundle file name"))
            }));
            return;
        }
        let entries = match index.get() {
            None => return,
            Some(r) => r.unwrap_or_default(),
        };
        if let Some(e) = entries.first() {
            main_src.set(Some(Source::Remote(e.file.clone())));
        }
    });

    let main_res: LocalResource<Loaded> = LocalResource::new(move || load(main_src.get()));
    let cmp_res: LocalResource<Loaded> = LocalResource::new(move || load(cmp_src.get()));
    // The bundles shown: the main one, then the compared one, those that loaded.
    let shown = Memo::new(move |_| {
        let mut v: Vec<Arc<LoadedBundle>> = Vec::new();
        if let Some(Some(Ok(b))) = main_res.get() {
            v.push(b);
        }
        if let Some(Some(Ok(b))) = cmp_res.get() {
            v.push(b);
        }
        v
    });

    // The URL mirrors the state (bundles, view, filters, options).
    Effect::new(move |_| {
        let mut s = state.get();
        s.bundle = remote_name(&main_src.get());
        s.compare = remote_name(&cmp_src.get());
        set_query(&s.to_query());
    });

    let on_local = move |files: web_sys::FileList, into_compare: bool| {
        let mut list = Vec::new();
        for i in 0..files.length() {
            list.extend(files.get(i));
        }
        for (n, file) in list.into_iter().take(2).enumerate() {
            let target = if into_compare || n == 1 { cmp_src } else { main_src };
            let name = file.name();
            leptos::task::spawn_local(async move {
                let read = JsFuture::from(file.text()).await;
                target.set(Some(match read.map(|v| v.as_string()) {
                    Ok(Some(text)) => Source::Local { name, text },
                    Ok(None) => Source::Broken(format!("cannot read {name}: not a text file")),
                    Err(e) => Source::Broken(format!("cannot read {name}: {}", js_message(&e))),
                }));
            });
        }
    };
    let file_input = move |into_compare: bool| {
        move |ev: leptos::ev::Event| {
            let input: web_sys::HtmlInputElement = event_target(&ev);
            if let Some(files) = input.files() {
                on_local(files, into_compare);
            }
            // Reset so that picking the same file again (after editing it) fires `change` again.
            input.set_value("");
        }
    };
    let dragging = RwSignal::new(false);
    let on_drop = move |ev: leptos::ev::DragEvent| {
        ev.prevent_default();
        dragging.set(false);
        if let Some(files) = ev.data_transfer().and_then(|d| d.files()) {
            on_local(files, false);
        }
    };

    let entries = move || index.get().and_then(Result::ok).unwrap_or_default();
    let bundle_select = move |target: RwSignal<Option<Source>>, testid: &'static str, none: &'static str| {
        view! {
            <select
                data-testid=testid
                on:change=move |ev| {
                    let file = event_target_value(&ev);
                    selected.set(None);
                    target.set((!file.is_empty()).then_some(Source::Remote(file)));
                }
            >
                <option value="" selected=move || remote_name(&target.get()).is_none()>{none}</option>
                {move || {
                    entries()
                        .into_iter()
                        .map(|e: IndexEntry| {
                            let file = e.file.clone();
                            view! {
                                <option
                                    value=e.file.clone()
                                    selected=move || remote_name(&target.get()).as_deref() == Some(file.as_str())
                                >
                                    {index::option_label(&e)}
                                </option>
                            }
                        })
                        .collect_view()
                }}
            </select>
        }
    };

    view! {
        <div
            class="app"
            class:dragging=move || dragging.get()
            on:dragover=move |ev: leptos::ev::DragEvent| {
                ev.prevent_default();
                dragging.set(true);
            }
            on:dragleave=move |_| dragging.set(false)
            on:drop=on_drop
            data-testid="drop-zone"
        >
            // One compact bar: the bundles (chosen, compared, opened), the synthetic-weights badge and the
            // provenance in a line each (the rest on a click), so that the chart starts high on the first screen.
            <header class="bar">
                <h1 title="LLaDA-8B (masked diffusion) vs Meta-Llama-3-8B (autoregressive)">"dllm-bench explorer"</h1>
                <label>"Bundle " {bundle_select(main_src, "bundle-select", "(choose a bundle)")}</label>
                <label>"Compare with " {bundle_select(cmp_src, "compare-select", "(none)")}</label>
                <details class="open-files">
                    <summary>"Open files"</summary>
                    <div class="popover">
                        <label>
                            "Open local bundle(s) "
                            <input type="file" accept=".json,application/json" multiple=true data-testid="file-input"
                                on:change=file_input(false)/>
                        </label>
                        <label>
                            "Compare with a local bundle "
                            <input type="file" accept=".json,application/json" data-testid="compare-file-input"
                                on:change=file_input(true)/>
                        </label>
                        <span class="hint">"or drop one or two bundle files anywhere on the page"</span>
                    </div>
                </details>
                {move || provenance(&shown.get())}
            </header>
            {move || {
                index.get().and_then(Result::err).map(|e| view! { <p class="error" role="alert" data-testid="index-error">{e}</p> })
            }}
            <Transition fallback=|| view! { <p class="loading">"Loading…"</p> }>
                {move || {
                    let m = main_res.get();
                    let c = cmp_res.get();
                    let main_part = match m {
                        None | Some(None) => view! { <p class="hint">"No bundle selected."</p> }.into_any(),
                        Some(Some(Err(e))) => view! { <p class="error" role="alert" data-testid="error">{e}</p> }.into_any(),
                        Some(Some(Ok(_))) => ().into_any(),
                    };
                    let cmp_part = match c {
                        Some(Some(Err(e))) => {
                            view! { <p class="error" role="alert" data-testid="compare-error">"Compared bundle: " {e}</p> }.into_any()
                        }
                        _ => ().into_any(),
                    };
                    view! { {main_part} {cmp_part} }
                }}
            </Transition>
            {move || {
                let bundles = shown.get();
                (!bundles.is_empty()).then(|| view! { <Workspace bundles=bundles state=state selected=selected/> })
            }}
        </div>
    }
}

/// The synthetic-weights badge and the provenance of each loaded bundle: one line (device, date, commit, weights),
/// the rest on a click.
fn provenance(bundles: &[Arc<LoadedBundle>]) -> impl IntoView + use<> {
    let two = bundles.len() > 1;
    bundles
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let rows = b.provenance.iter().map(|(k, v)| view! { <dt>{*k}</dt><dd>{v.clone()}</dd> }).collect_view();
            let label = if two { ["[A] ", "[B] "][i.min(1)] } else { "" };
            let row = |k: &str| b.provenance.iter().find(|(l, _)| *l == k).map(|(_, v)| v.clone()).unwrap_or_default();
            let line = format!(
                "{}, {}, commit {:.8}, {} weights",
                row("Device"),
                row("Created"),
                row("Git commit"),
                if b.synthetic_weights { "SYNTHETIC" } else { "real" }
            );
            view! {
                {b.synthetic_weights.then(|| view! {
                    <span class="badge-synthetic" data-testid="synthetic-badge">
                        {label} "SYNTHETIC WEIGHTS: timing is real, quality is meaningless"
                    </span>
                })}
                <details class="provenance" data-testid=if i == 0 { "provenance" } else { "provenance-compare" }>
                    <summary>{label} <span class="source">{b.source.clone()}</span> ": " {line}</summary>
                    <dl>{rows}</dl>
                </details>
            }
        })
        .collect_view()
}

/// The controls and the current view of the loaded bundles.
#[component]
fn Workspace(
    /// The loaded bundles: main, then compared.
    bundles: Vec<Arc<LoadedBundle>>,
    /// The page state (view, filters, options).
    state: RwSignal<PageState>,
    /// The cell clicked last.
    selected: RwSignal<Option<CellId>>,
) -> impl IntoView {
    let bundles = Arc::new(bundles);
    let refs = |b: &Arc<Vec<Arc<LoadedBundle>>>| -> Vec<Arc<LoadedBundle>> { b.iter().cloned().collect() };
    let choices = {
        let v = refs(&bundles);
        let r: Vec<&LoadedBundle> = v.iter().map(|b| b.as_ref()).collect();
        Arc::new(views::filter_choices(&r))
    };
    let metrics = {
        let r: Vec<&LoadedBundle> = bundles.iter().map(|b| b.as_ref()).collect();
        views::quality_metrics(&r)
    };
    let energy = {
        let r: Vec<&LoadedBundle> = bundles.iter().map(|b| b.as_ref()).collect();
        views::has_energy(&r)
    };
    let b2 = bundles.clone();
    let chart = Memo::new(move |_| {
        let s = state.get();
        s.view.is_chart().then(|| {
            let r: Vec<&LoadedBundle> = b2.iter().map(|b| b.as_ref()).collect();
            let cv = Arc::new(views::chart_view(s.view, &r, &s.filters, &s.options));
            mark("dllm:figure");
            cv
        })
    });
    let tabs = ViewKind::ALL
        .into_iter()
        .map(|v| {
            view! {
                <button
                    role="tab"
                    class="tab"
                    aria-selected=move || (state.get().view == v).to_string()
                    data-testid=format!("tab-{}", v.slug())
                    on:click=move |_| state.update(|s| s.view = v)
                >
                    {v.title()}
                </button>
            }
        })
        .collect_view();
    let b3 = bundles.clone();
    let b4 = bundles.clone();
    let b5 = bundles.clone();
    view! {
        <nav class="tabs" role="tablist" aria-label="Views">{tabs}</nav>
        <FilterBar choices=choices metrics=metrics energy=energy state=state/>
        <section class="view" data-testid=move || format!("view-{}", state.get().view.slug())>
            {move || {
                let s = state.get();
                match s.view {
                    ViewKind::Parity => view! { <ParityView bundles=b3.clone() state=state/> }.into_any(),
                    ViewKind::Details => view! { <CellTable bundles=b3.clone() state=state selected=selected/> }.into_any(),
                    _ => ().into_any(),
                }
            }}
            <ChartPanel chart=chart bundles=b4 state=state selected=selected/>
        </section>
        <CellDetails bundles=b5 selected=selected/>
    }
}

/// A `<select>` with an "all" option, bound to one filter. Values are the filter's text (numbers as decimals),
/// and `get`/`set` plain functions: one copy of this view code in the wasm for all six filters.
fn filter_select(
    label: &'static str,
    testid: &'static str,
    values: Vec<String>,
    get: fn(&Filters) -> Option<String>,
    set: fn(&mut Filters, Option<&str>),
    state: RwSignal<PageState>,
) -> AnyView {
    let options = values
        .into_iter()
        .map(|v| {
            let text = v.clone();
            view! { <option value=v.clone() selected=move || get(&state.get().filters).as_deref() == Some(v.as_str())>{text}</option> }
        })
        .collect_view();
    view! {
        <label>
            {label} " "
            <select
                data-testid=testid
                on:change=move |ev| {
                    let t = event_target_value(&ev);
                    state.update(|s| set(&mut s.filters, (!t.is_empty()).then_some(t.as_str())));
                }
            >
                <option value="" selected=move || get(&state.get().filters).is_none()>"all"</option>
                {options}
            </select>
        </label>
    }
    .into_any()
}

/// A number input for a device peak (roofline ceilings), bound to one option; empty or invalid: no peak.
fn peak_input(
    label: &'static str,
    testid: &'static str,
    placeholder: &'static str,
    get: fn(&views::Options) -> Option<f64>,
    set: fn(&mut views::Options, Option<f64>),
    state: RwSignal<PageState>,
) -> AnyView {
    view! {
        <label class="opt opt-roof">
            {label}
            <input type="number" min="0" step="any" placeholder=placeholder data-testid=testid
                prop:value=move || get(&state.get().options).map(|v| v.to_string()).unwrap_or_default()
                on:change=move |ev| state.update(|s| set(&mut s.options, state::parse_peak(&event_target_value(&ev))))/>
        </label>
    }
    .into_any()
}

fn texts<T: ToString>(values: &[T]) -> Vec<String> {
    values.iter().map(T::to_string).collect()
}

/// Filters and chart options.
#[component]
fn FilterBar(
    /// The values each filter can take.
    choices: Arc<FilterChoices>,
    /// Quality metrics of the loaded bundles.
    metrics: Vec<String>,
    /// True when a loaded bundle measured energy (the "cost" choice shows only then).
    energy: bool,
    /// The page state.
    state: RwSignal<PageState>,
) -> impl IntoView {
    let c = choices;
    let cost_select = energy.then(|| {
        view! {
            <label class="opt opt-cost" title="Latency vs steps and the Pareto frontier over latency: time, or joules per generated token">
                "Cost "
                <select data-testid="cost-axis" on:change=move |ev| {
                    let v = event_target_value(&ev);
                    state.update(|s| s.options.energy = v == "energy");
                }>
                    <option value="time" selected=move || !state.get().options.energy>"time (ms)"</option>
                    <option value="energy" selected=move || state.get().options.energy>"energy (J/token)"</option>
                </select>
            </label>
        }
    });
    let metric_select = (!metrics.is_empty()).then(|| {
        let opts = metrics
            .iter()
            .map(|m| {
                let mm = m.clone();
                view! { <option value=m.clone() selected=move || state.get().options.metric.as_deref() == Some(mm.as_str())>{m.clone()}</option> }
            })
            .collect_view();
        view! {
            <label class="opt opt-q">
                "Quality metric "
                <select data-testid="metric-select" on:change=move |ev| {
                    let v = event_target_value(&ev);
                    state.update(|s| s.options.metric = (!v.is_empty()).then_some(v));
                }>
                    <option value="" selected=move || state.get().options.metric.is_none()>"(first)"</option>
                    {opts}
                </select>
            </label>
        }
    });
    view! {
        // The options of other views are hidden (style.css, by `data-view`): each shows in the views it acts on.
        <section class="filters" aria-label="Filters" data-view=move || state.get().view.slug()>
            {filter_select("Model", "filter-model", c.models.clone(), |f| f.model.clone(), |f, v| f.model = v.map(str::to_string), state)}
            {filter_select("Sampler", "filter-sampler", c.samplers.clone(), |f| f.sampler.clone(), |f, v| f.sampler = v.map(str::to_string), state)}
            {filter_select("K", "filter-K", texts(&c.steps), |f| f.steps.map(|v| v.to_string()), |f, v| f.steps = v.and_then(|v| v.parse().ok()), state)}
            {filter_select("B", "filter-B", texts(&c.batches), |f| f.batch.map(|v| v.to_string()), |f, v| f.batch = v.and_then(|v| v.parse().ok()), state)}
            {filter_select("N", "filter-N", texts(&c.seqs), |f| f.seq.map(|v| v.to_string()), |f, v| f.seq = v.and_then(|v| v.parse().ok()), state)}
            {filter_select("Precision", "filter-precision", c.precisions.clone(), |f| f.precision.clone(), |f, v| f.precision = v.map(str::to_string), state)}
            <label class="opt opt-chart">
                <input type="checkbox" data-testid="log-x" prop:checked=move || state.get().options.log_x
                    on:change=move |ev| state.update(|s| s.options.log_x = event_target_checked(&ev))/>
                " log x"
            </label>
            <label class="opt opt-chart">
                <input type="checkbox" data-testid="log-y" prop:checked=move || state.get().options.log_y
                    on:change=move |ev| state.update(|s| s.options.log_y = event_target_checked(&ev))/>
                " log y"
            </label>
            <label class="opt opt-multi" title="Latency, Pareto, quality and throughput: a small chart per (N, B), shared axes">
                <input type="checkbox" data-testid="multiples" prop:checked=move || state.get().options.multiples
                    on:change=move |ev| state.update(|s| s.options.multiples = event_target_checked(&ev))/>
                " every shape"
            </label>
            <label class="opt opt-mem">
                "Memory "
                <select data-testid="memory-metric" on:change=move |ev| {
                    let v = event_target_value(&ev);
                    state.update(|s| s.options.memory = if v == "reserved" { MemoryMetric::Reserved } else { MemoryMetric::Allocated });
                }>
                    <option value="allocated" selected=move || state.get().options.memory != MemoryMetric::Reserved>"peak allocated"</option>
                    <option value="reserved" selected=move || state.get().options.memory == MemoryMetric::Reserved>"peak reserved"</option>
                </select>
            </label>
            <label class="opt opt-px">
                "Pareto x "
                <select data-testid="pareto-x" on:change=move |ev| {
                    let v = event_target_value(&ev);
                    state.update(|s| s.options.pareto_x = [ParetoX::Forwards, ParetoX::TokensPerForward].into_iter().find(|x| x.slug() == v).unwrap_or_default());
                }>
                    <option value="latency" selected=move || state.get().options.pareto_x == ParetoX::Latency>"latency"</option>
                    <option value="forwards" selected=move || state.get().options.pareto_x == ParetoX::Forwards>"forward passes"</option>
                    <option value="tpf" selected=move || state.get().options.pareto_x == ParetoX::TokensPerForward>"tokens per forward"</option>
                </select>
            </label>
            {cost_select}
            <label class="opt opt-tp">
                "Throughput in "
                <select data-testid="throughput-unit" on:change=move |ev| {
                    let v = event_target_value(&ev);
                    state.update(|s| s.options.bytes = v == "bytes");
                }>
                    <option value="tokens" selected=move || !state.get().options.bytes>"tokens/s"</option>
                    <option value="bytes" selected=move || state.get().options.bytes>"bytes/s"</option>
                </select>
            </label>
            {metric_select}
            {peak_input("Peak bandwidth (TB/s) ", "peak-bw", "e.g. 4.8", |o| o.peak_bw_tbs, |o, v| o.peak_bw_tbs = v, state)}
            {peak_input("Peak FLOP rate (TFLOP/s) ", "peak-flops", "e.g. 989", |o| o.peak_tflops, |o, v| o.peak_tflops = v, state)}
            <button data-testid="reset-filters" on:click=move |_| state.update(|s| s.filters = Filters::default())>
                "Reset filters"
            </button>
        </section>
    }
}

/// The canvas of the chart views; redrawn when the figure changes. Hover shows a mark's tooltip, a click
/// selects its cell. Also the PNG and CSV downloads.
#[component]
fn ChartPanel(
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
    let tooltip = RwSignal::new(None::<(String, i32, i32, i32)>);
    let draws = StoredValue::new(0u32);
    Effect::new(move |_| {
        let cv = chart.get();
        let Some(canvas) = canvas_ref.get() else { return };
        tooltip.set(None);
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
    let hit_at = move |ev: &leptos::ev::MouseEvent| -> Option<(String, Option<CellId>)> {
        let canvas = canvas_ref.get_untracked()?;
        let scale = f64::from(canvas.width()) / f64::from(canvas.client_width().max(1));
        let to_device = |v: i32| (f64::from(v) * scale).round() as i32;
        let d = drawn.get_untracked()?;
        let h = *d.at(to_device(ev.offset_x()), to_device(ev.offset_y()), to_device(12))?;
        let cv = chart.get_untracked()?;
        let fig = cv.figure.as_ref().ok()?;
        let (tip, cell) = fig.hit_info(&h)?;
        Some((tip.to_string(), cell))
    };
    let on_move = move |ev: leptos::ev::MouseEvent| {
        let w = canvas_ref.get_untracked().map_or(900, |c| c.client_width());
        tooltip.set(hit_at(&ev).map(|(t, _)| (t, ev.offset_x(), ev.offset_y(), w)));
    };
    let on_click = move |ev: leptos::ev::MouseEvent| {
        if let Some((_, Some(cell))) = hit_at(&ev) {
            selected.set(Some(cell));
        }
    };
    let png = move |_| {
        let Some(canvas) = canvas_ref.get_untracked() else { return };
        if let Ok(url) = canvas.to_data_url() {
            download_url(&url, &format!("dllm-bench-{}.png", state.get_untracked().view.slug()));
        }
    };
    let csv = move |_| {
        let s = state.get_untracked();
        let r: Vec<&LoadedBundle> = bundles.iter().map(|b| b.as_ref()).collect();
        let text = views::csv(&views::rows(&r, &s.filters));
        download_text(&text, "dllm-bench-cells.csv", "text/csv");
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
                aria-label=move || chart.get().and_then(|c| c.figure.as_ref().ok().map(|f| f.title.clone())).unwrap_or_default()
                on:mousemove=on_move
                on:mouseleave=move |_| tooltip.set(None)
                on:click=on_click
            ></canvas>
            {move || {
                tooltip.get().map(|(text, x, y, w)| {
                    view! {
                        <div
                            class="tooltip"
                            data-testid="chart-tooltip"
                            // Right of the pointer, or left of it on the right half (stays inside).
                            style=if x < w / 2 {
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
        {move || notes(false)}
        <div class="exports">
            <button data-testid="export-png" on:click=png disabled=move || !is_chart() || message.get().is_some()>"Download chart (PNG)"</button>
            <button data-testid="export-csv" on:click=csv>"Download filtered cells (CSV)"</button>
        </div>
    }
}

/// Draws `fig` on `canvas` at device resolution and records what was drawn on the element:
/// `data-figure` (the figure's numbers), `data-hits` (where each mark landed, canvas pixels),
/// then `data-drawn="true"`.
fn draw_on(canvas: &web_sys::HtmlCanvasElement, fig: &figure::Figure) -> Result<Drawn, String> {
    let attr = |k: &str, v: &str| canvas.set_attribute(k, v).map_err(|e| js_message(&e));
    attr("data-drawn", "false")?;
    let dpr = window().device_pixel_ratio().clamp(1.0, 4.0);
    let css_w = match canvas.client_width() {
        w if w > 0 => w as u32,
        _ => CHART_CSS_SIZE.0,
    };
    // Small multiples are taller; the element keeps the drawing's proportions.
    let css_h = fig.height(css_w);
    attr("style", &format!("aspect-ratio: {css_w} / {css_h}"))?;
    canvas.set_width((f64::from(css_w) * dpr).round() as u32);
    canvas.set_height((f64::from(css_h) * dpr).round() as u32);
    let backend = CanvasBackend::with_canvas_object(canvas.clone()).ok_or("the browser gave no 2D canvas context")?;
    let root = backend.into_drawing_area();
    let drawn =
        figure::draw(&root, fig, ChartStyle { scale: dpr, ..ChartStyle::default() }).map_err(|e| e.to_string())?;
    attr("data-figure", &serde_json::to_string(fig).map_err(|e| e.to_string())?)?;
    attr("data-hits", &serde_json::to_string(&drawn.hits).map_err(|e| e.to_string())?)?;
    attr("data-drawn", "true")?;
    Ok(drawn)
}

/// The S_parity panel: one row per diffusion model/sampler and (B, N).
#[component]
fn ParityView(
    /// The loaded bundles.
    bundles: Arc<Vec<Arc<LoadedBundle>>>,
    /// The page state.
    state: RwSignal<PageState>,
) -> impl IntoView {
    move || {
        let s = state.get();
        let r: Vec<&LoadedBundle> = bundles.iter().map(|b| b.as_ref()).collect();
        match views::parity_rows(&r, &s.filters, &s.options) {
            Err(e) if e == views::NO_QUALITY => {
                view! { <p class="empty no-quality" data-testid="no-quality">{e}</p> }.into_any()
            }
            Err(e) => view! { <p class="empty" data-testid="chart-message">{e}</p> }.into_any(),
            Ok((metric, rows)) => {
                let body = rows
                    .into_iter()
                    .map(|r| {
                        let cls = match r.panel.viable { Some(true) => "viable", _ => "not-viable" };
                        view! {
                            <tr data-testid="parity-row" class=cls>
                                <td>{r.tag.clone()} {r.diffusion.clone()} " vs " {r.ar.clone()}</td>
                                <td data-testid="parity-B">{r.batch}</td>
                                <td>{r.seq}</td>
                                <td data-testid="parity-s">{r.s_parity.clone()}</td>
                                <td data-testid="parity-interval">{r.interval_text()}</td>
                                <td data-testid="parity-bootstrap">{r.bootstrap.clone().unwrap_or_else(|| "-".into())}</td>
                                <td data-testid="parity-speedup">{r.speedup_text()}</td>
                                <td data-testid="parity-verdict">{r.verdict()}</td>
                                <td class="mono">{r.matched_key.clone().unwrap_or_else(|| "-".into())} <br/> {r.ar_key.clone()}</td>
                                <td data-testid="parity-warning">{r.entropy_warning.then_some("LLaDA's output entropy is far below LLaMA's: parity may come from degenerate text")}</td>
                            </tr>
                        }
                    })
                    .collect_view();
                view! {
                    <p class="note">"Quality metric: " {metric} ". S_parity = the fewest diffusion steps K at which LLaDA is at least as good as LLaMA (a threshold series: the fewest forwards, at the threshold named); speedup = L_e2e(LLaMA) / L_e2e(LLaDA at S_parity). One row per series, B and N."</p>
                    <table class="parity" data-testid="parity-table">
                        <thead><tr>
                            <th>"models"</th><th>"B"</th><th>"N"</th><th>"S_parity"</th><th>"grid interval"</th><th>"95% bootstrap"</th>
                            <th>"speedup"</th><th>"verdict"</th><th>"matched cells"</th><th>"warning"</th>
                        </tr></thead>
                        <tbody>{body}</tbody>
                    </table>
                }
                .into_any()
            }
        }
    }
}

/// The sortable, paginated table of the filtered cells; a click on a row selects its cell.
#[component]
fn CellTable(
    /// The loaded bundles.
    bundles: Arc<Vec<Arc<LoadedBundle>>>,
    /// The page state.
    state: RwSignal<PageState>,
    /// The cell clicked last.
    selected: RwSignal<Option<CellId>>,
) -> impl IntoView {
    let sort = RwSignal::new((usize::MAX, false));
    let page = RwSignal::new(0usize);
    let rows = Memo::new(move |_| {
        let s = state.get();
        let r: Vec<&LoadedBundle> = bundles.iter().map(|b| b.as_ref()).collect();
        let mut rows = views::rows(&r, &s.filters);
        let (col, desc) = sort.get();
        if col < views::COLUMNS.len() {
            views::sort_rows(&mut rows, col, desc);
        }
        Arc::new(rows)
    });
    let head = views::COLUMNS
        .iter()
        .enumerate()
        .map(|(i, name)| {
            view! {
                <th aria-sort=move || match sort.get() { (c, true) if c == i => "descending", (c, false) if c == i => "ascending", _ => "none" }>
                    <button data-testid=format!("sort-{name}") on:click=move |_| {
                        sort.update(|s| *s = if s.0 == i { (i, !s.1) } else { (i, false) });
                        page.set(0);
                    }>{*name}</button>
                </th>
            }
        })
        .collect_view();
    view! {
        <p class="note" data-testid="table-count">
            {move || {
                let n = rows.get().len();
                let p = page.get();
                format!("{n} cells match the filters; showing {}-{}", (p * PAGE_ROWS + 1).min(n), ((p + 1) * PAGE_ROWS).min(n))
            }}
            " "
            <button data-testid="page-prev" on:click=move |_| page.update(|p| *p = p.saturating_sub(1))>"previous"</button>
            <button data-testid="page-next" on:click=move |_| {
                let n = rows.get_untracked().len();
                page.update(|p| if (*p + 1) * PAGE_ROWS < n { *p += 1 });
            }>"next"</button>
        </p>
        <div class="table-wrap">
            <table class="cells" data-testid="cell-table">
                <thead><tr>{head}</tr></thead>
                <tbody>
                    {move || {
                        let rows = rows.get();
                        let p = page.get();
                        rows.iter()
                            .skip(p * PAGE_ROWS)
                            .take(PAGE_ROWS)
                            .map(|r| {
                                let id = r.id;
                                let cells = r.text.iter().map(|t| view! { <td>{t.clone()}</td> }).collect_view();
                                view! {
                                    <tr class=r.state data-testid="cell-row" tabindex="0"
                                        on:click=move |_| selected.set(Some(id))
                                        on:keydown=move |ev: leptos::ev::KeyboardEvent| if ev.key() == "Enter" { selected.set(Some(id)) }
                                    >{cells}</tr>
                                }
                            })
                            .collect_view()
                    }}
                </tbody>
            </table>
        </div>
    }
}

/// The clicked cell's details.
#[component]
fn CellDetails(
    /// The loaded bundles.
    bundles: Arc<Vec<Arc<LoadedBundle>>>,
    /// The cell clicked last.
    selected: RwSignal<Option<CellId>>,
) -> impl IntoView {
    move || {
        let id = selected.get()?;
        let lb = bundles.get(id.bundle)?;
        let rows = views::cell_details(lb, id.cell);
        (!rows.is_empty()).then(|| {
            let rows = rows.into_iter().map(|(k, v)| view! { <dt>{k}</dt><dd>{v}</dd> }).collect_view();
            view! {
                <section class="cell-details" data-testid="cell-details" aria-live="polite">
                    <h2>"Selected cell " <button on:click=move |_| selected.set(None)>"close"</button></h2>
                    <dl>{rows}</dl>
                </section>
            }
        })
    }
}

/// The page state in the address (`?bundle=...&view=...`).
fn query_state() -> PageState {
    let search = window().location().search().unwrap_or_default();
    let Ok(params) = web_sys::UrlSearchParams::new_with_str(&search) else { return PageState::default() };
    let mut pairs: Vec<(String, String)> = Vec::new();
    for key in state::KEYS {
        if let Some(v) = params.get(key) {
            pairs.push((key.to_string(), v));
        }
    }
    PageState::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

/// Replaces the address' query, so a reload or a shared link shows the same state.
fn set_query(query: &str) {
    let Ok(history) = window().history() else { return };
    let path = window().location().pathname().unwrap_or_default();
    let url = format!("{path}{query}");
    // Failing to update the address bar is harmless: ignore it.
    let _ = history.replace_state_with_url(&JsValue::NULL, "", Some(&url));
}

/// Starts a download of `url` as `name`.
fn download_url(url: &str, name: &str) {
    let doc = document();
    let Ok(a) = doc.create_element("a") else { return };
    let Ok(a) = a.dyn_into::<web_sys::HtmlAnchorElement>() else { return };
    a.set_href(url);
    a.set_download(name);
    if let Some(body) = doc.body() {
        let _ = body.append_child(&a);
        a.click();
        let _ = body.remove_child(&a);
    }
}

/// Starts a download of `text` as `name`.
fn download_text(text: &str, name: &str, mime: &str) {
    let parts = js_sys::Array::of1(&JsValue::from_str(text));
    let opts = web_sys::BlobPropertyBag::new();
    opts.set_type(mime);
    let Ok(blob) = web_sys::Blob::new_with_str_sequence_and_options(&parts, &opts) else { return };
    let Ok(url) = web_sys::Url::create_object_url_with_blob(&blob) else { return };
    download_url(&url, name);
    let _ = web_sys::Url::revoke_object_url(&url);
}

/// The bytes of `file` if index.html started fetching it (`?bundle=`) while the wasm loaded; taken once, by
/// the load of that file.
/// `None` (fetch again, for the error message) when it did not, or the request failed.
async fn prefetched(file: &str) -> Option<Vec<u8>> {
    let win: JsValue = window().into();
    let key = JsValue::from_str("__dllmPrefetch");
    let pre = js_sys::Reflect::get(&win, &key).ok().filter(|v| v.is_object())?;
    // Only the load of that very file takes it (the compared bundle's load must not wait for it, nor steal it).
    if js_sys::Reflect::get(&pre, &JsValue::from_str("file")).ok()?.as_string()? != file {
        return None;
    }
    let _ = js_sys::Reflect::delete_property(win.unchecked_ref::<js_sys::Object>(), &key);
    let promise: js_sys::Promise = js_sys::Reflect::get(&pre, &JsValue::from_str("bytes")).ok()?.dyn_into().ok()?;
    let buf = JsFuture::from(promise).await.ok().filter(JsValue::is_object)?;
    Some(js_sys::Uint8Array::new(&buf).to_vec())
}

fn utf8(url: &str, bytes: Vec<u8>) -> Result<String, String> {
    String::from_utf8(bytes)
        .map_err(|e| format!("{url} is not a text file: invalid UTF-8 at byte {}", e.utf8_error().valid_up_to()))
}

/// GETs `url` as bytes and checks they are UTF-8 (cheaper for large bundles than a JS string: no UTF-16
/// round trip); errors are user messages.
async fn fetch_utf8(url: &str) -> Result<String, String> {
    let resp = fetch_response(url).await?;
    let fail = |why: String| format!("could not fetch {url}: {why}");
    let buf = resp.array_buffer().map_err(|e| fail(js_message(&e)))?;
    let buf = JsFuture::from(buf).await.map_err(|e| fail(js_message(&e)))?;
    utf8(url, js_sys::Uint8Array::new(&buf).to_vec())
}

/// GETs `url` (relative to the page), bypassing stale caches; errors are user messages.
async fn fetch_response(url: &str) -> Result<web_sys::Response, String> {
    let fail = |why: String| format!("could not fetch {url}: {why}");
    let init = web_sys::RequestInit::new();
    init.set_cache(web_sys::RequestCache::NoCache);
    let req = web_sys::Request::new_with_str_and_init(url, &init).map_err(|e| fail(js_message(&e)))?;
    let resp = JsFuture::from(window().fetch_with_request(&req)).await.map_err(|e| fail(js_message(&e)))?;
    let resp: web_sys::Response = resp.dyn_into().map_err(|_| fail("not an HTTP response".into()))?;
    if !resp.ok() {
        return Err(fail(format!("HTTP {} {}", resp.status(), resp.status_text())));
    }
    Ok(resp)
}

/// GETs `url` (relative to the page) as text, bypassing stale caches; errors are user messages.
async fn fetch_text(url: &str) -> Result<String, String> {
    let fail = |why: String| format!("could not fetch {url}: {why}");
    let resp = fetch_response(url).await?;
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
