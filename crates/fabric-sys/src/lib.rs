//! efabench-fabric-sys (placeholder: being written).
