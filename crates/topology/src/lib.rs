//! efabench-topology: what is in this node, read from `/sys`, `/proc`, `/opt` and DMI under a
//! root directory.
//!
//! Why a separate crate: `topo`, `doctor`, `counters` and the benchmark records all need the same
//! facts (EFA devices and their counters, GPUs, NUMA, GPU↔NIC pairing, installed versions), and
//! all of it must be testable against fixture trees of real p4d/p5 nodes on machines with neither
//! EFA nor GPUs. Nothing here needs libfabric, CUDA or NVML; those layers add their data through
//! [`topo::Topology::merge_nvml`] and [`topo::Topology::set_libfabric_domains`].
//!
//! Modules: [`root`] (the root-directory abstraction), [`topo`] (discovery and pairing),
//! [`counters`] (hw_counters snapshots and deltas), [`installed`] (component versions),
//! [`libfabric`] (`fi_info` parsing), [`gin`] (what GPU-initiated networking needs on top),
//! [`pcie`] (PCIe link speed/width and AER counters of GPUs, EFAs and the ports above them),
//! [`gpu_health`] (the driver's GPU health readings behind a trait, with a JSON fixture source).

#![forbid(unsafe_code)]

pub mod counters;
pub mod gin;
pub mod gpu_health;
pub mod installed;
pub mod libfabric;
pub mod pcie;
pub mod profiles;
pub mod root;
pub mod topo;

pub use counters::Snapshot;
pub use root::{Root, RootError};
pub use topo::{NvLink, NvmlGpu, Topology};
