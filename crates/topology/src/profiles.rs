//! What each EFA instance type should have, and where each figure comes from.
//!
//! `doctor` compares a node with its type's profile (EFA devices, GPUs) and `cluster` derives a
//! pair-bandwidth floor from the link speed, so a wrong figure here would fail a healthy node or
//! pass a degraded one. Every profile therefore carries its evidence: read in the source code or
//! configuration of a public component, observed in a public capture of a real node, or
//! reconstructed from neighbouring facts where no capture exists. The reports quote it beside
//! the figure, so a user knows which expectations to trust.

use serde::{Deserialize, Serialize};

/// How a profile's figures are known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Evidence {
    /// Read in the source code or configuration of a public component.
    Source,
    /// Seen in a public capture of a real node (sysfs, `fi_info`, `lstopo`, a device plugin).
    Observed,
    /// Inferred from neighbouring facts; no capture of this type was found.
    Reconstructed,
}

impl Evidence {
    pub fn name(self) -> &'static str {
        match self {
            Evidence::Source => "source",
            Evidence::Observed => "observed",
            Evidence::Reconstructed => "reconstructed",
        }
    }
}

/// Expected hardware of an instance type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InstanceProfile {
    /// The type the profile is for (one of several that share it, e.g. p5 and p5e).
    pub instance_type: &'static str,
    /// The accelerators, as a person reads them (`8x NVIDIA H100`).
    pub accelerators: &'static str,
    /// NVIDIA GPUs (0 for Trainium types).
    pub gpus: usize,
    pub efa_devices: usize,
    /// Link speed of one EFA device, Gb/s.
    pub gbps_per_efa: f64,
    pub evidence: Evidence,
    /// Where the figures come from, in a few words.
    pub source: &'static str,
}

impl InstanceProfile {
    /// `observed in public p5 captures (...)`: how the profile is known, for a report.
    pub fn provenance(&self) -> String {
        let how = match self.evidence {
            Evidence::Source => "read in",
            Evidence::Observed => "observed in",
            Evidence::Reconstructed => "reconstructed:",
        };
        format!("{how} {}", self.source)
    }

    /// Every EFA device at its link speed, Gb/s.
    pub fn aggregate_gbps(&self) -> f64 {
        self.efa_devices as f64 * self.gbps_per_efa
    }
}

const PROFILES: &[(&[&str], InstanceProfile)] = &[
    (
        &["p4d.24xlarge", "p4de.24xlarge"],
        InstanceProfile {
            instance_type: "p4d.24xlarge",
            accelerators: "8x NVIDIA A100 (p4de: A100 80GB)",
            gpus: 8,
            efa_devices: 4,
            gbps_per_efa: 100.0,
            evidence: Evidence::Source,
            source: "aws-ofi-nccl's p4d-24xl-topo.xml and the AWS cluster health check's instance profiles",
        },
    ),
    (
        &["p5.48xlarge", "p5e.48xlarge"],
        InstanceProfile {
            instance_type: "p5.48xlarge",
            accelerators: "8x NVIDIA H100 (p5e: H200)",
            gpus: 8,
            efa_devices: 32,
            gbps_per_efa: 100.0,
            evidence: Evidence::Observed,
            source: "public p5 captures (fi_info, lstopo, nvidia-smi topo)",
        },
    ),
    (
        &["p5en.48xlarge"],
        InstanceProfile {
            instance_type: "p5en.48xlarge",
            accelerators: "8x NVIDIA H200",
            gpus: 8,
            efa_devices: 16,
            gbps_per_efa: 200.0,
            evidence: Evidence::Source,
            source: "the AWS cluster health check's instance profiles (16 EFA) and aws-ofi-nccl's p5en 200 Gb/s override",
        },
    ),
    (
        &["p6-b200.48xlarge"],
        InstanceProfile {
            instance_type: "p6-b200.48xlarge",
            accelerators: "8x NVIDIA B200",
            gpus: 8,
            efa_devices: 8,
            gbps_per_efa: 400.0,
            evidence: Evidence::Source,
            source: "the AWS cluster health check's instance profiles (8 EFA), 3,200 Gb/s in all",
        },
    ),
    (
        &["p6-b300.48xlarge"],
        InstanceProfile {
            instance_type: "p6-b300.48xlarge",
            accelerators: "8x NVIDIA B300",
            gpus: 8,
            efa_devices: 16,
            gbps_per_efa: 400.0,
            evidence: Evidence::Observed,
            source: "a Kubernetes node's vpc.amazonaws.com/efa: 16, 6,400 Gb/s in all",
        },
    ),
    (
        &["trn1.32xlarge"],
        InstanceProfile {
            instance_type: "trn1.32xlarge",
            accelerators: "16x AWS Trainium",
            gpus: 0,
            efa_devices: 8,
            gbps_per_efa: 100.0,
            evidence: Evidence::Reconstructed,
            source: "800 Gb/s in all (Neuron documentation); the split into 8 x 100 is inferred",
        },
    ),
    (
        &["trn1n.32xlarge"],
        InstanceProfile {
            instance_type: "trn1n.32xlarge",
            accelerators: "16x AWS Trainium",
            gpus: 0,
            efa_devices: 16,
            gbps_per_efa: 100.0,
            evidence: Evidence::Reconstructed,
            source: "1,600 Gb/s in all (Neuron documentation); the split into 16 x 100 is inferred",
        },
    ),
    (
        &["trn2.48xlarge"],
        InstanceProfile {
            instance_type: "trn2.48xlarge",
            accelerators: "16x AWS Trainium2",
            gpus: 0,
            efa_devices: 16,
            gbps_per_efa: 200.0,
            evidence: Evidence::Reconstructed,
            source: "16 EFA devices observed; 200 Gb/s each inferred from the 3.2 Tb/s AWS quotes",
        },
    ),
];

/// The profile of an instance type, `None` for a type efabench does not know.
pub fn instance_profile(instance_type: &str) -> Option<InstanceProfile> {
    let t = instance_type.trim();
    PROFILES
        .iter()
        .find(|(names, _)| names.contains(&t))
        .map(|(_, p)| *p)
}

/// Every known profile, for listings and tests.
pub fn all() -> impl Iterator<Item = &'static InstanceProfile> {
    PROFILES.iter().map(|(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_profile_names_its_evidence_and_source() {
        for p in all() {
            assert!(!p.source.is_empty(), "{}", p.instance_type);
            let how = p.provenance();
            assert!(how.contains(p.source), "{how}");
            if p.evidence == Evidence::Reconstructed {
                assert!(how.starts_with("reconstructed"), "{how}");
            }
            assert!(p.efa_devices > 0 && p.gbps_per_efa > 0.0, "{p:?}");
        }
        // The facts the reports lean on most.
        let p5 = instance_profile("p5.48xlarge").unwrap();
        assert_eq!((p5.efa_devices, p5.gbps_per_efa, p5.gpus), (32, 100.0, 8));
        assert_eq!(p5.aggregate_gbps(), 3200.0);
        assert_eq!(instance_profile(" p5e.48xlarge ").unwrap(), p5);
        let p5en = instance_profile("p5en.48xlarge").unwrap();
        assert_eq!((p5en.efa_devices, p5en.gbps_per_efa), (16, 200.0));
        let p4de = instance_profile("p4de.24xlarge").unwrap();
        assert_eq!((p4de.efa_devices, p4de.gbps_per_efa), (4, 100.0));
        assert_eq!(p4de.evidence, Evidence::Source);
        // Every type the cluster verdict can judge against its link has a profile.
        for t in [
            "p4d.24xlarge",
            "p5e.48xlarge",
            "p6-b200.48xlarge",
            "p6-b300.48xlarge",
            "trn1.32xlarge",
            "trn1n.32xlarge",
        ] {
            assert!(instance_profile(t).is_some(), "{t}");
        }
        assert_eq!(
            serde_json::to_string(&Evidence::Reconstructed).unwrap(),
            "\"reconstructed\""
        );
        assert_eq!(
            instance_profile("trn2.48xlarge").unwrap().evidence,
            Evidence::Reconstructed
        );
        assert_eq!(instance_profile("m5.large"), None);
    }
}
