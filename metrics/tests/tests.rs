//! Integration tests of the metrics crate: one binary, one module per area. The bundles are the schema crate's
//! test bundles (its `util` module), so both crates test against the same data.

mod derived;
mod energy;
mod parity;
#[path = "../../schema/tests/util.rs"]
mod util;
