//! The filter bar: its selects, the peak-memory input.

use std::sync::Arc;

use charts::views::{self, FilterChoices, Filters, ParetoX};
use leptos::prelude::*;
use metrics::derive::MemoryMetric;

use crate::state::{self, PageState};

/// A `<select>` with an "all" option, bound to one filter. Values are the filter's text (numbers as decimals),
/// and `get`/`set` plain functions: one copy of this view code in the wasm for all six filters.
pub(super) fn filter_select(
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
            view! { <option value=v.clone() prop:selected=move || get(&state.get().filters).as_deref() == Some(v.as_str())>{text}</option> }
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
                <option value="" prop:selected=move || get(&state.get().filters).is_none()>"all"</option>
                {options}
            </select>
        </label>
    }
    .into_any()
}

/// A number input for a device peak (roofline ceilings), bound to one option; empty or invalid: no peak.
pub(super) fn peak_input(
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

/// A `<select>` of two choices bound to one yes/no option: `choices` are the (value, text) of no, then of yes.
/// Plain functions as in [`filter_select`], so one copy of this view code serves each such option in the wasm.
#[allow(clippy::too_many_arguments)]
fn two_way_select(
    class: &'static str,
    title: Option<&'static str>,
    label: &'static str,
    testid: &'static str,
    choices: [(&'static str, &'static str); 2],
    get: fn(&views::Options) -> bool,
    set: fn(&mut views::Options, bool),
    state: RwSignal<PageState>,
) -> AnyView {
    let [(no, no_text), (yes, yes_text)] = choices;
    view! {
        <label class=class title=title>
            {label}
            <select data-testid=testid on:change=move |ev| {
                let v = event_target_value(&ev);
                state.update(|s| set(&mut s.options, v == yes));
            }>
                <option value=no prop:selected=move || !get(&state.get().options)>{no_text}</option>
                <option value=yes prop:selected=move || get(&state.get().options)>{yes_text}</option>
            </select>
        </label>
    }
    .into_any()
}

pub(super) fn texts<T: ToString>(values: &[T]) -> Vec<String> {
    values.iter().map(T::to_string).collect()
}

/// Filters and chart options.
#[component]
pub(super) fn FilterBar(
    /// The values each filter can take.
    choices: Arc<FilterChoices>,
    /// Quality metrics of the loaded bundles.
    metrics: Vec<String>,
    /// The metric shown until one is chosen (the "default" choice names it).
    default_metric: Option<String>,
    /// True when a loaded bundle measured energy (the "cost" choice shows only then).
    energy: bool,
    /// True when a loaded bundle measured device memory (the allocated / reserved choice shows only then).
    device_memory: bool,
    /// The page state.
    state: RwSignal<PageState>,
) -> impl IntoView {
    let c = choices;
    let cost_select = energy.then(|| {
        two_way_select(
            "opt opt-cost",
            Some("Latency vs steps and the Pareto frontier over latency: time, or joules per generated token"),
            "Cost ",
            "cost-axis",
            [("time", "time (ms)"), ("energy", "energy (J/token)")],
            |o| o.energy,
            |o, v| o.energy = v,
            state,
        )
    });
    let metric_select = (!metrics.is_empty()).then(|| {
        let opts = metrics
            .iter()
            .map(|m| {
                let mm = m.clone();
                view! { <option value=m.clone() prop:selected=move || state.get().options.metric.as_deref() == Some(mm.as_str())>{m.clone()}</option> }
            })
            .collect_view();
        view! {
            <label class="opt opt-q">
                "Quality metric "
                <select data-testid="metric-select" on:change=move |ev| {
                    let v = event_target_value(&ev);
                    state.update(|s| s.options.metric = (!v.is_empty()).then_some(v));
                }>
                    <option value="" prop:selected=move || state.get().options.metric.is_none()>{default_metric.map_or("default".to_string(), |m| format!("default: {m}"))}</option>
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
            <label class="opt opt-logx">
                <input type="checkbox" data-testid="log-x" prop:checked=move || state.get().options.log_x
                    on:change=move |ev| state.update(|s| s.options.log_x = event_target_checked(&ev))/>
                " log x"
            </label>
            <label class="opt opt-logy">
                <input type="checkbox" data-testid="log-y" prop:checked=move || state.get().options.log_y
                    on:change=move |ev| state.update(|s| s.options.log_y = event_target_checked(&ev))/>
                " log y"
            </label>
            <label class="opt opt-multi" title="Latency, Pareto, quality and throughput: a small chart per (N, B), shared axes">
                <input type="checkbox" data-testid="multiples" prop:checked=move || state.get().options.multiples
                    on:change=move |ev| state.update(|s| s.options.multiples = event_target_checked(&ev))/>
                " every shape"
            </label>
            {device_memory.then(|| two_way_select(
                "opt opt-mem",
                None,
                "Memory ",
                "memory-metric",
                [("allocated", "peak allocated"), ("reserved", "peak reserved")],
                |o| o.memory == MemoryMetric::Reserved,
                |o, v| o.memory = if v { MemoryMetric::Reserved } else { MemoryMetric::Allocated },
                state,
            ))}
            <label class="opt opt-px">
                "Pareto x "
                <select data-testid="pareto-x" on:change=move |ev| {
                    let v = event_target_value(&ev);
                    state.update(|s| s.options.pareto_x = [ParetoX::Forwards, ParetoX::TokensPerForward].into_iter().find(|x| x.slug() == v).unwrap_or_default());
                }>
                    <option value="latency" prop:selected=move || state.get().options.pareto_x == ParetoX::Latency>"latency"</option>
                    <option value="forwards" prop:selected=move || state.get().options.pareto_x == ParetoX::Forwards>"forward passes"</option>
                    <option value="tpf" prop:selected=move || state.get().options.pareto_x == ParetoX::TokensPerForward>"tokens per forward"</option>
                </select>
            </label>
            {cost_select}
            {two_way_select(
                "opt opt-tp",
                None,
                "Throughput in ",
                "throughput-unit",
                [("tokens", "tokens/s"), ("bytes", "bytes/s")],
                |o| o.bytes,
                |o, v| o.bytes = v,
                state,
            )}
            {two_way_select(
                "opt opt-tp",
                Some("Bars per batch size, or each series' scaling with the batch size as a line"),
                "as ",
                "throughput-shape",
                [("bars", "bars per B"), ("lines", "lines over B")],
                |o| o.throughput_lines,
                |o, v| o.throughput_lines = v,
                state,
            )}
            {metric_select}
            {peak_input("Peak bandwidth (TB/s) ", "peak-bw", "e.g. 4.8", |o| o.peak_bw_tbs, |o, v| o.peak_bw_tbs = v, state)}
            {peak_input("Peak FLOP rate (TFLOP/s) ", "peak-flops", "e.g. 989", |o| o.peak_tflops, |o, v| o.peak_tflops = v, state)}
            <button data-testid="reset-filters" on:click=move |_| state.update(|s| s.filters = Filters::default())>
                "Reset filters"
            </button>
        </section>
    }
}
