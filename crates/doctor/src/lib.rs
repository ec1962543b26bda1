//! efabench-doctor (placeholder: being written).
