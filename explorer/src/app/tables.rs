//! The S_parity panel, the two stacks side by side, the table of cells and a cell's details.

use std::sync::Arc;

use charts::bundle::LoadedBundle;
use charts::figure::CellId;
use charts::views;
use leptos::prelude::*;

use super::PAGE_ROWS;
use crate::state::PageState;

/// The S_parity panel: one row per diffusion model/sampler and (B, N).
#[component]
pub(super) fn ParityView(
    /// The loaded bundles.
    bundles: Arc<Vec<Arc<LoadedBundle>>>,
    /// The page state.
    state: RwSignal<PageState>,
) -> impl IntoView {
    move || {
        let s = state.get();
        let r: Vec<&LoadedBundle> = bundles.iter().map(|b| b.as_ref()).collect();
        // The autoregressive cells that did not finish: their (B, N) has no row, said above the table.
        let not_drawn = views::parity_not_drawn(&r, &s.filters)
            .map(|n| view! { <p class="note" data-testid="parity-not-drawn">{n}</p> });
        match views::parity_rows(&r, &s.filters, &s.options) {
            Err(e) if e == views::NO_QUALITY => {
                view! { <p class="empty no-quality" data-testid="no-quality">{e}</p> }.into_any()
            }
            Err(e) => view! { <p class="empty" data-testid="chart-message">{e}</p> {not_drawn} }.into_any(),
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
                                <td data-testid="parity-warning">{r.warnings().into_iter().map(|w| view! { <p class="warning">{w}</p> }).collect_view()}</td>
                            </tr>
                        }
                    })
                    .collect_view();
                view! {
                    <p class="note">"Quality metric: " {metric} ". S_parity = the fewest diffusion steps K at which the diffusion model (LLaDA) is at least as good as the AR model (LLaMA) (a threshold series: the fewest forwards, at the threshold named); speedup = L_e2e(AR) / L_e2e(diffusion at S_parity). One row per series, B and N."</p>
                    {not_drawn}
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

/// Two bundles of the same cells side by side (the answer and S_parity views, with a compared bundle): per arm and
/// B the latency ratio A / B, the factor it puts into the speedup, and the speedup at parity under each; a one-line
/// note when the bundles share no cell. Every number is `metrics::compare::compare_stacks`'s
/// ([`views::stack_comparison`]).
#[component]
pub(super) fn StacksView(
    /// The panel, or why there is none.
    panel: Memo<Arc<Result<views::StackPanel, String>>>,
) -> impl IntoView {
    move || match panel.get().as_ref() {
        Err(e) => view! { <p class="note" data-testid="stacks-note">{e.clone()}</p> }.into_any(),
        Ok(p) => {
            let arms = p
                .arms
                .iter()
                .map(|r| {
                    view! {
                        <tr data-testid="stacks-arm">
                            <td>{r.arm.clone()}</td>
                            <td data-testid="stacks-B">{r.batch}</td>
                            <td data-testid="stacks-cells">{r.cells}</td>
                            <td data-testid="stacks-ratio">{r.ratio_text.clone()}</td>
                            <td>{r.range.clone()}</td>
                        </tr>
                    }
                })
                .collect_view();
            let speedups = p
                .speedups
                .iter()
                .map(|r| {
                    view! {
                        <tr data-testid="stacks-speedup">
                            <td>{r.series.clone()} " vs " {r.ar.clone()}</td>
                            <td>{r.batch}</td>
                            <td>{r.seq}</td>
                            <td>{r.s_parity_a.clone()}</td>
                            <td data-testid="stacks-speedup-a">{r.speedup_a.clone()}</td>
                            <td>{r.s_parity_b.clone()}</td>
                            <td data-testid="stacks-speedup-b">{r.speedup_b.clone()}</td>
                            <td data-testid="stacks-speedup-ratio">{r.speedup_ratio.clone()}</td>
                            <td data-testid="stacks-factor">{r.factor.clone()}</td>
                        </tr>
                    }
                })
                .collect_view();
            let factors = p
                .factors
                .iter()
                .map(|f| view! { <li data-testid="stacks-factor-line">{f.clone()}</li> })
                .collect_view();
            let arms_table = match &p.arms_note {
                Some(n) => view! { <p class="note">{n.clone()}</p> }.into_any(),
                None => view! {
                    <p class="note">"L_e2e [A] / [B], the median over the cells ok in both (below 1: [A] is faster); every cell of both bundles, the filters do not apply."</p>
                    <table class="parity" data-testid="stacks-arms">
                        <thead><tr><th>"arm"</th><th>"B"</th><th>"cells"</th><th>"[A] / [B]"</th><th>"range"</th></tr></thead>
                        <tbody>{arms}</tbody>
                    </table>
                    <ul class="note">{factors}</ul>
                }
                .into_any(),
            };
            let speedup_table = match &p.speedups_note {
                Some(n) => view! { <p class="note">{n.clone()}</p> }.into_any(),
                None => view! {
                    <p class="note">"Speedup at parity under each stack (" {p.metric.clone().unwrap_or_default()} "; each bundle's own S_parity and latencies; -: that bundle has no value, never 0), and the factor the latency ratios put into it (AR ratio / diffusion ratio)."</p>
                    <table class="parity" data-testid="stacks-speedups">
                        <thead><tr>
                            <th>"models"</th><th>"B"</th><th>"N"</th><th>"S_parity [A]"</th><th>"speedup [A]"</th>
                            <th>"S_parity [B]"</th><th>"speedup [B]"</th><th>"speedup [A] / [B]"</th><th>"from the stacks"</th>
                        </tr></thead>
                        <tbody>{speedups}</tbody>
                    </table>
                }
                .into_any(),
            };
            view! {
                <section class="stacks" data-testid="stacks-panel">
                    <h2>"The two stacks side by side: [A] " <span class="source">{p.a.clone()}</span> " against [B] " <span class="source">{p.b.clone()}</span></h2>
                    <p class="note" data-testid="stacks-counts">{p.counts.clone()}</p>
                    {p.warnings.iter().map(|w| view! { <p class="note warning" data-testid="stacks-warning">"Warning: " {w.clone()} "."</p> }).collect_view()}
                    {arms_table}
                    {speedup_table}
                </section>
            }
            .into_any()
        }
    }
}

/// The sortable, paginated table of the filtered cells; a click on a row selects its cell.
#[component]
pub(super) fn CellTable(
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
    // The page on view: the one asked for, or the last one when a filter left fewer rows.
    let last_page = move || rows.get().len().saturating_sub(1) / PAGE_ROWS;
    let shown = move || page.get().min(last_page());
    let (at_first, at_last) = (move || shown() == 0, move || shown() >= last_page());
    view! {
        <p class="note" data-testid="table-count">
            {move || {
                let n = rows.get().len();
                let p = shown();
                format!("{n} cells match the filters; showing {}-{}", (p * PAGE_ROWS + 1).min(n), ((p + 1) * PAGE_ROWS).min(n))
            }}
            " "
            <button data-testid="page-prev" disabled=at_first
                on:click=move |_| page.set(shown().saturating_sub(1))>"previous"</button>
            <button data-testid="page-next" disabled=at_last
                on:click=move |_| page.set((shown() + 1).min(last_page()))>"next"</button>
        </p>
        <div class="table-wrap">
            <table class="cells" data-testid="cell-table">
                <thead><tr>{head}</tr></thead>
                <tbody>
                    {move || {
                        let p = shown();
                        let rows = rows.get();
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
pub(super) fn CellDetails(
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
