//! dllm-bench charts: the figures of result bundles, with no browser API. The explorer draws them on a canvas,
//! `dllm-bench figures` into SVG (and PNG and PDF from it); the same code, so the same figures.
//!
//! - [`bundle`]: loading a bundle (parsing and checks come from `schema`, summaries from `metrics::derive`),
//!   its provenance rows.
//! - [`views`]: the filters and options, the views' figures (one module per chart family), the S_parity rows,
//!   the table of cells and its CSV (every number comes from `metrics`).
//! - [`figure`]: every chart, drawn with plotters from plain data, generic over the backend.

pub mod bundle;
pub mod figure;
pub mod views;
