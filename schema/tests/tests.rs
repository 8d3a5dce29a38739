//! Integration tests of the schema crate: one binary, one module per area.

mod config;
mod derived;
mod json_schema;
mod malformed;
mod parity;
mod util;
mod versions;
