//! The leptos components of the explorer (wasm only): loading (index, `?bundle=`, file picker,
//! drag-and-drop), the controls (view tabs, filters, axes, compare), the chart canvas with tooltips and
//! clicks, the S_parity panel, the table of cells, and the PNG/CSV downloads.
//!
//! Every number shown is computed in [`charts::views`] (and, below it, `metrics::derive`); this module keeps
//! the page state in signals, mirrors it in the URL ([`crate::state`]), and hands figures to [`charts::figure`]. Strings from
//! bundles are always rendered as text nodes, never as HTML.

use std::sync::Arc;

use charts::bundle::{self, LoadedBundle};
use charts::figure::CellId;
use charts::views::{self, ViewKind};
use leptos::prelude::*;
use schema::IndexEntry;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use crate::index;
use crate::state::PageState;
use browser::{
    close_popovers_as_menus, fetch_text, fetch_utf8, js_message, on_history, prefetched, query_state, set_query, utf8,
};
use chart::ChartPanel;
use filters::FilterBar;
use tables::{CellDetails, CellTable, ParityView, StacksView};

mod browser;
mod chart;
mod filters;
mod tables;

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
    /// A local file (picker or drop), already read and parsed: one that does not parse never replaces what is on
    /// view (see `on_local`).
    Local(Arc<LoadedBundle>),
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
            mark("dllm:bundle-wanted");
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
        Source::Local(b) => Ok(b),
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

    // First bundle: `?bundle=FILE`, else the newest whole one of the index (`index::default_entry`).
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
        if let Some(e) = index::default_entry(&entries) {
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

    // The URL mirrors the state (bundles, view, filters, options): another view or bundle is a new history entry
    // (Back returns to the one before), a filter or option edit replaces the current one; the first bundle opened
    // by default, and a state read back from the address (Back, Forward), push nothing.
    let shown_last = StoredValue::new(None::<PageState>);
    Effect::new(move |_| {
        let mut s = state.get();
        s.bundle = remote_name(&main_src.get());
        s.compare = remote_name(&cmp_src.get());
        let push = shown_last.with_value(|last| {
            last.as_ref().is_some_and(|l| {
                l.view != s.view || (l.bundle.is_some() && l.bundle != s.bundle) || l.compare != s.compare
            })
        });
        set_query(&s.to_query(), push);
        shown_last.set_value(Some(s));
    });
    close_popovers_as_menus();
    // Back and Forward: the state, the bundles and the view again from the address.
    on_history(move || {
        let q = query_state();
        if let Some(f) = q.bundle.clone().filter(|f| Some(f) != remote_name(&main_src.get_untracked()).as_ref()) {
            selected.set(None);
            main_src.set(Some(match index::is_plain_file_name(&f) {
                true => Source::Remote(f),
                false => Source::Broken(format!("?bundle={f:?} is not a plain bundle file name")),
            }));
        }
        if q.compare != remote_name(&cmp_src.get_untracked()) {
            selected.set(None);
            cmp_src.set(q.compare.clone().map(Source::Remote));
        }
        // What the address now holds is what is shown: the effect above must not push it again.
        shown_last.set_value(None);
        state.set(q);
    });

    // A local file that cannot be read or is no bundle is said above the chart, and the bundle on view (main or
    // compared) stays: the error names the file, and is dismissed, or replaced by the next file's outcome.
    let file_error = RwSignal::new(None::<String>);
    let on_local = move |files: web_sys::FileList, into_compare: bool| {
        let mut list = Vec::new();
        for i in 0..files.length() {
            list.extend(files.get(i));
        }
        file_error.set(None);
        for (n, file) in list.into_iter().take(2).enumerate() {
            let (target, res) = if into_compare || n == 1 { (cmp_src, cmp_res) } else { (main_src, main_res) };
            let name = file.name();
            leptos::task::spawn_local(async move {
                let read = JsFuture::from(file.text()).await;
                let parsed = match read.map(|v| v.as_string()) {
                    Ok(Some(text)) => bundle::load_bundle(&name, &text).map(Arc::new),
                    Ok(None) => Err(format!("cannot read {name}: not a text file")),
                    Err(e) => Err(format!("cannot read {name}: {}", js_message(&e))),
                };
                match parsed {
                    Ok(b) => {
                        selected.set(None);
                        target.set(Some(Source::Local(b)));
                    }
                    Err(e) => {
                        let kept = matches!(res.get_untracked(), Some(Some(Ok(_))));
                        let which = if target == cmp_src { "compared bundle" } else { "bundle" };
                        let e = if kept { format!("{e} (the {which} on view is kept)") } else { e };
                        file_error.update(|f| *f = Some(f.take().map_or(e.clone(), |f| format!("{f}; {e}"))));
                    }
                }
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
            // The file is chosen: the popover goes, so that it covers neither the chart nor an error.
            browser::close_popovers(None);
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
    // `other`: the main bundle's source, for the compare list, in which the main bundle's file is disabled
    // (compared with itself, every difference would be zero).
    let bundle_select = move |target: RwSignal<Option<Source>>,
                              other: Option<RwSignal<Option<Source>>>,
                              testid: &'static str,
                              none: &'static str| {
        view! {
            <select
                data-testid=testid
                on:change=move |ev| {
                    let file = event_target_value(&ev);
                    selected.set(None);
                    file_error.set(None);
                    target.set((!file.is_empty()).then_some(Source::Remote(file)));
                }
            >
                <option value="" prop:selected=move || remote_name(&target.get()).is_none()>{none}</option>
                {move || {
                    let all = entries();
                    all.iter()
                        .map(|e: &IndexEntry| {
                            let file = e.file.clone();
                            let this = e.file.clone();
                            let on_view = move || {
                                other.is_some_and(|o| remote_name(&o.get()).as_deref() == Some(this.as_str()))
                            };
                            view! {
                                <option
                                    value=e.file.clone()
                                    prop:selected=move || remote_name(&target.get()).as_deref() == Some(file.as_str())
                                    disabled=on_view
                                >
                                    {index::option_label(e, &all)}
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
                <About/>
                <label>"Bundle " {bundle_select(main_src, None, "bundle-select", "(choose a bundle)")}</label>
                <label>"Compare with " {bundle_select(cmp_src, Some(main_src), "compare-select", "(none)")}</label>
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
            {move || {
                file_error.get().map(|e| {
                    view! {
                        <p class="error" role="alert" data-testid="file-error">
                            {e} " "
                            <button class="dismiss" data-testid="file-error-dismiss" on:click=move |_| file_error.set(None)>
                                "Dismiss"
                            </button>
                        </p>
                    }
                })
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

/// What a reviewer reads before the numbers, one click away in the bar: what is compared, what S_parity and the
/// speedup at parity are, what the intervals cover, what synthetic weights mean, and how to get the same numbers
/// without a browser. Static text (the study's models by name, any bundle's in its provenance), no bundle's numbers.
#[component]
fn About() -> impl IntoView {
    view! {
        <details class="about" data-testid="about">
            <summary>"About"</summary>
            <div class="popover">
                <p>
                    "dllm-bench measures a masked-diffusion language model against an autoregressive one on the \
                     same prompts, sequence lengths N, batch sizes B and device: in the study, LLaDA-8B-Base \
                     (every forward reads the whole sequence; K steps, or with a confidence threshold as many \
                     forwards as it takes) against Meta-Llama-3-8B (one token per forward, with a KV cache). Each \
                     bundle's provenance names its models and device; each view draws from the bundle."
                </p>
                <p>
                    "S_parity is the fewest diffusion steps K (for a threshold series, the fewest forwards) at \
                     which the diffusion model's quality is at least as good as the autoregressive model's, per N \
                     and series; the speedup at parity is L_e2e(autoregressive, B) / L_e2e(diffusion at S_parity, \
                     B), and above 1 the diffusion model is faster at equal quality. The Answer tab shows both; the \
                     S_parity tab has them per series, B and N."
                </p>
                <p>
                    "Intervals are 95% bootstrap intervals over prompts: they cover quality (and so S_parity), not \
                     timing noise; latencies are medians over repetitions, whose spread (min to max) the latency \
                     charts draw as bars. A cell that ran out of memory, failed or was skipped is named in a note \
                     where a view leaves it out, and listed in Run details."
                </p>
                <p>
                    "A bundle marked SYNTHETIC was measured on random weights in the real format: its timing and \
                     memory are real, its quality (and so S_parity) is meaningless."
                </p>
                <p class="hint">
                    "The same numbers without a browser: " <code>"dllm-bench report BUNDLE"</code> " (S_parity, the \
                     speedups, the verdicts) and " <code>"dllm-bench figures BUNDLE"</code> " (these charts as \
                     files). Each bundle's provenance names the commit and the config that made it."
                </p>
            </div>
        </details>
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
            // A commit with uncommitted changes says so in the line too, not only in the panel.
            let commit = row("Git commit");
            let dirty = if commit.ends_with("-dirty") { "-dirty (uncommitted changes)" } else { "" };
            let line = format!(
                "{}, {}, commit {:.8}{dirty}, {} weights",
                row("Device"),
                row("Created"),
                commit,
                if b.synthetic_weights { "SYNTHETIC" } else { "real" }
            );
            view! {
                {b.synthetic_weights.then(|| view! {
                    <span class="badge-synthetic" data-testid="synthetic-badge">
                        {label} "SYNTHETIC WEIGHTS: timing is real, quality is meaningless"
                    </span>
                })}
                {b.partial.clone().map(|counts| view! {
                    <span class="badge-partial" data-testid="partial-badge">
                        {label} "PARTIAL: " {counts} " (an unfinished run): S_parity and speedups may change"
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
    // Values these bundles do not have (the address's, or the previous bundle's) would empty every view unseen.
    let pruned = state.with_untracked(|s| s.filters.within(&choices));
    if state.with_untracked(|s| s.filters != pruned) {
        state.update(|s| s.filters = pruned);
    }
    let (metrics, default_metric) = {
        let r: Vec<&LoadedBundle> = bundles.iter().map(|b| b.as_ref()).collect();
        // What the views show until one is chosen: the run's parity metric, else the first.
        (views::quality_metrics(&r), views::quality_metric(&r, &views::Options::default()).map(|(m, _)| m))
    };
    let energy = {
        let r: Vec<&LoadedBundle> = bundles.iter().map(|b| b.as_ref()).collect();
        views::has_energy(&r)
    };
    // The allocated / reserved choice only where a bundle has device memory (a CPU run's heat map is its RSS).
    let device_memory = bundles.iter().any(|b| {
        b.bundle
            .cells
            .iter()
            .flat_map(|c| &c.repetitions)
            .any(|r| r.peak_allocated_bytes.is_some() || r.peak_reserved_bytes.is_some())
    });
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
    // On a phone the tabs are one row that scrolls sideways: the selected one is scrolled into it after each view
    // change (a deep link, Back), never off screen.
    let strip = NodeRef::<leptos::html::Nav>::new();
    Effect::new(move |_| {
        let v = state.with(|s| s.view);
        let Some(strip) = strip.get() else { return };
        let Ok(Some(tab)) = strip.query_selector(&format!("[data-testid=\"tab-{}\"]", v.slug())) else { return };
        let Ok(tab) = tab.dyn_into::<web_sys::HtmlElement>() else { return };
        // Offsets within the strip (positioned in the stylesheet), with a little room beyond the tab's edges.
        let (left, right) = (tab.offset_left() - 16, tab.offset_left() + tab.offset_width() + 16);
        let (at, width) = (strip.scroll_left(), strip.client_width());
        if left < at {
            strip.set_scroll_left(left.max(0));
        } else if right > at + width {
            strip.set_scroll_left(right - width);
        }
    });
    // The tabs as a tab list is operated from the keyboard: Tab reaches the selected one only, the arrows (Home,
    // End) select the next one (previous, first, last) and move the focus with it.
    let on_tab_key = move |v: ViewKind, ev: leptos::ev::KeyboardEvent| {
        let all = ViewKind::ALL;
        let (i, n) = (all.iter().position(|&x| x == v).unwrap_or(0), all.len());
        let next = match ev.key().as_str() {
            "ArrowRight" => (i + 1) % n,
            "ArrowLeft" => (i + n - 1) % n,
            "Home" => 0,
            "End" => n - 1,
            _ => return,
        };
        ev.prevent_default();
        state.update(|s| s.view = all[next]);
        let Some(strip) = strip.get() else { return };
        let Ok(Some(tab)) = strip.query_selector(&format!("[data-testid=\"tab-{}\"]", all[next].slug())) else {
            return;
        };
        if let Ok(tab) = tab.dyn_into::<web_sys::HtmlElement>() {
            let _ = tab.focus();
        }
    };
    let tabs = ViewKind::ALL
        .into_iter()
        .map(|v| {
            view! {
                <button
                    role="tab"
                    class="tab"
                    id=format!("tab-{}", v.slug())
                    aria-controls="view-panel"
                    aria-selected=move || (state.get().view == v).to_string()
                    tabindex=move || if state.get().view == v { "0" } else { "-1" }
                    data-testid=format!("tab-{}", v.slug())
                    on:click=move |_| state.update(|s| s.view = v)
                    on:keydown=move |ev| on_tab_key(v, ev)
                >
                    {v.title()}
                </button>
            }
        })
        .collect_view();
    // Two bundles: the stacks side by side under the answer's chart (the landing view, the first a reviewer sees,
    // right under the verdict it qualifies) and under the S_parity table. Computed again only when the quality
    // metric changes (S_parity of both bundles with its bootstrap), and only when one of these views asks.
    let two = bundles.len() == 2;
    let metric = Memo::new(move |_| state.with(|s| s.options.metric.clone()));
    let b6 = bundles.clone();
    let stacks = Memo::new(move |_| {
        let o = views::Options { metric: metric.get(), ..views::Options::default() };
        let r: Vec<&LoadedBundle> = b6.iter().map(|b| b.as_ref()).collect();
        Arc::new(views::stack_comparison(&r, &o))
    });
    let show_stacks = Memo::new(move |_| two && state.with(|s| matches!(s.view, ViewKind::Answer | ViewKind::Parity)));
    let b3 = bundles.clone();
    let b4 = bundles.clone();
    let b5 = bundles.clone();
    view! {
        <nav class="tabs" role="tablist" aria-label="Views" node_ref=strip>{tabs}</nav>
        <FilterBar choices=choices metrics=metrics default_metric=default_metric energy=energy device_memory=device_memory state=state/>
        <section
            class="view"
            id="view-panel"
            role="tabpanel"
            aria-labelledby=move || format!("tab-{}", state.get().view.slug())
            data-testid=move || format!("view-{}", state.get().view.slug())
        >
            {move || {
                let s = state.get();
                match s.view {
                    ViewKind::Parity => view! { <ParityView bundles=b3.clone() state=state/> }.into_any(),
                    ViewKind::Details => view! { <CellTable bundles=b3.clone() state=state selected=selected/> }.into_any(),
                    _ => ().into_any(),
                }
            }}
            <ChartPanel chart=chart bundles=b4 state=state selected=selected/>
            {move || show_stacks.get().then(|| view! { <StacksView panel=stacks/> })}
        </section>
        <CellDetails bundles=b5 selected=selected/>
    }
}
