//! Integration tests of the runner: one binary, one module per area.

mod bench_plan;
mod bertscore;
mod bertscore_run;
mod chat;
mod cli;
mod compare;
mod dream;
mod energy;
mod export;
mod faults;
mod fetch;
mod hf_reference;
mod measure;
mod model;
mod profile;
mod prompts;
mod quality;
mod report_compare;
mod resume;
mod sampler;
mod serve;
mod silent;
mod slurm;
mod synth;
mod util;
