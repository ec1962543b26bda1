//! efabench-bootstrap (placeholder: being written).
