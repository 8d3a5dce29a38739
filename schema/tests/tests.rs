//! Integration tests of the schema crate: one binary, one module per area.

mod config;
mod energy;
mod json_schema;
mod malformed;
mod util;
mod versions;
