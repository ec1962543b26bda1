//! efabench-fabric: safe types over libfabric (being written).

pub mod memory;

pub use memory::{DmabufHandle, Hmem, MemoryBuffer};
