//! dllm-bench explorer: shows result bundles in the browser.
//!
//! - [`chart`]: plotters drawing code, generic over the backend (native-tested).
//! - [`view`]: bundle -> display rows and chart data (native-tested; numbers come from `schema`).
//! - `app` (wasm only): leptos components, fetching, the canvas.

pub mod chart;
pub mod view;

#[cfg(target_arch = "wasm32")]
pub mod app;
