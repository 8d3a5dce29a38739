//! Integration tests of the schema crate: one binary, one module per area.

mod config;
mod json_schema;
mod malformed;
mod util;
mod versions;
