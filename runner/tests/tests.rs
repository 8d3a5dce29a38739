//! Integration tests of the runner: one binary, one module per area.

mod cli;
mod model;
mod serve;
mod util;
