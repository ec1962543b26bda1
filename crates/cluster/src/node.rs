//! What one node reports about itself in the checks stage: its checks (the doctor's, one line
//! each) and the facts the consistency stage compares across nodes. Both travel from the node's
//! first rank to rank 0 as JSON.

use serde::{Deserialize, Serialize};

/// A check's outcome on one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckStatus {
    Pass,
    Warn,
    Fail,
    Skip,
}

impl CheckStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Pass => "pass",
            CheckStatus::Warn => "warn",
            CheckStatus::Fail => "fail",
            CheckStatus::Skip => "skip",
        }
    }
}

/// One check of one node (the doctor's id, status, one-line summary and fix).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeCheck {
    pub id: String,
    pub status: CheckStatus,
    pub summary: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fix: String,
}

/// The facts compared across nodes: what should be the same on every node of a cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeFacts {
    /// DMI product name (`p5.48xlarge` on EC2), when readable.
    pub instance_type: Option<String>,
    /// EFA devices under /sys/class/infiniband.
    pub efa_devices: usize,
    /// NVIDIA GPUs on the PCI bus.
    pub gpus: usize,
    /// Sum of the EFA ports' link speeds, Gb/s.
    pub link_gbps: f64,
    pub libfabric: Option<String>,
    pub efa_driver: Option<String>,
    pub aws_ofi_nccl: Option<String>,
    pub nccl: Option<String>,
    pub nvidia_driver: Option<String>,
    pub cuda: Option<String>,
    /// HugePages_Total of /proc/meminfo.
    pub hugepages: Option<u64>,
    pub kernel: Option<String>,
}

/// How much a fact differing from the majority weighs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weight {
    /// Hardware that is missing or different: the node cannot do what its peers do.
    Hardware,
    /// Software or settings: jobs may still run, but mixed stacks hang or slow down NCCL jobs.
    Software,
}

/// One compared fact: its name, how much a difference weighs, and the node's value as text.
pub struct Field {
    pub name: &'static str,
    pub weight: Weight,
    pub value: fn(&NodeFacts) -> String,
}

fn opt(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "none".into())
}

/// Every fact the consistency stage compares, in the order it reports them.
pub const FIELDS: &[Field] = &[
    Field {
        name: "instance_type",
        weight: Weight::Hardware,
        value: |f| opt(&f.instance_type),
    },
    Field {
        name: "efa_devices",
        weight: Weight::Hardware,
        value: |f| f.efa_devices.to_string(),
    },
    Field {
        name: "gpus",
        weight: Weight::Hardware,
        value: |f| f.gpus.to_string(),
    },
    Field {
        name: "link_gbps",
        weight: Weight::Hardware,
        value: |f| format!("{}", f.link_gbps),
    },
    Field {
        name: "libfabric",
        weight: Weight::Software,
        value: |f| opt(&f.libfabric),
    },
    Field {
        name: "efa_driver",
        weight: Weight::Software,
        value: |f| opt(&f.efa_driver),
    },
    Field {
        name: "aws_ofi_nccl",
        weight: Weight::Software,
        value: |f| opt(&f.aws_ofi_nccl),
    },
    Field {
        name: "nccl",
        weight: Weight::Software,
        value: |f| opt(&f.nccl),
    },
    Field {
        name: "nvidia_driver",
        weight: Weight::Software,
        value: |f| opt(&f.nvidia_driver),
    },
    Field {
        name: "cuda",
        weight: Weight::Software,
        value: |f| opt(&f.cuda),
    },
    Field {
        name: "hugepages",
        weight: Weight::Software,
        value: |f| f.hugepages.map_or("none".into(), |h| h.to_string()),
    },
    Field {
        name: "kernel",
        weight: Weight::Software,
        value: |f| opt(&f.kernel),
    },
];

/// What a node's first rank sends to rank 0 after its checks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeReport {
    pub host: String,
    pub checks: Vec<NodeCheck>,
    pub facts: NodeFacts,
}

impl NodeReport {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// A report from another rank; `None` when it is not one (an older efabench).
    pub fn decode(b: &[u8]) -> Option<NodeReport> {
        serde_json::from_slice(b).ok()
    }
}

/// This host's name as every rank reports it (the name reports are matched by).
pub fn this_host() -> String {
    efabench_record::hostname()
}
