//! efabench-gpu (placeholder: being written).
