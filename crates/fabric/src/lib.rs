//! efabench-fabric (placeholder: being written).
