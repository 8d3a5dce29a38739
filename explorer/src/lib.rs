//! dllm-bench explorer: shows result bundles in the browser.
//!
//! - [`figure`]: every chart, drawn with plotters from plain data, generic over the backend (native-tested).
//! - [`view`]: loading a bundle (parsing and summaries come from `schema`), provenance, file-name checks.
//! - [`views`]: filters, the views' figures, panels and table rows, CSV, the URL state (native-tested;
//!   every number comes from `metrics::derive`).
//! - `app` (wasm only): leptos components, fetching, the canvas, downloads.

pub mod figure;
pub mod view;
pub mod views;

#[cfg(target_arch = "wasm32")]
pub mod app;
