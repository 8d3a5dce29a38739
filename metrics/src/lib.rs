//! Every number dllm-bench derives from a result bundle, one function per number, used by every reader (the
//! runner's `report` and writers, the explorer in the browser). The bundle format itself is the `schema` crate;
//! nothing here is stored except the parity records, whose types `schema` owns.
//!
//! Where to find a metric:
//! - [`compare`]: two bundles of the same cells (the runner's and a reference's) side by side: latency ratios per
//!   cell and per arm, the speedup at parity under each;
//! - [`coverage`]: whether a bundle holds every cell its run planned (a partial bundle);
//! - [`derive`](mod@derive): summaries of repetitions (median, mean, ...), inter-token latency, throughput,
//!   latency vs steps, Pareto front, memory heatmaps, the explorer's view data;
//! - [`parity`]: quality per cell group, S_parity and the speedup at parity with bootstrap intervals;
//! - [`energy`]: joules per generated token and per sequence, mean power (format 1.7's energy counters);
//! - [`roofline`]: the analytic work of a generation (weights read, FLOPs, KV cache) from the model's shape;
//! - [`rng`]: the one seeded generator (bootstrap resampling, sampling, prompt selection).
//!
//! It compiles to wasm (no I/O).
#![warn(missing_docs)]

pub mod compare;
pub mod coverage;
pub mod derive;
pub mod energy;
pub mod parity;
pub mod rng;
pub mod roofline;
