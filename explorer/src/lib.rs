//! dllm-bench explorer: shows result bundles in the browser. The charts themselves (loading a bundle, the views'
//! figures, the S_parity rows, the table and CSV, the drawing) are the `charts` crate's, which `dllm-bench
//! figures` draws with too; this crate is the app around them.
//!
//! - [`state`]: the page state in the address (native-tested).
//! - [`index`]: the bundle index the page fetches, its file-name checks and selector labels (native-tested).
//! - `app` (wasm only): leptos components, fetching, the canvas, downloads.

pub mod index;
pub mod state;

#[cfg(target_arch = "wasm32")]
pub mod app;
