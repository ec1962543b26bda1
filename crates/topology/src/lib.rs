//! efabench-topology (placeholder: being written).
