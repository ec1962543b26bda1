//! The benchmark-specific fields of records and of every rank's outcome, as types.
//!
//! A record has the common fields of [`efabench_record::Record`] and, flat beside them, the
//! fields its benchmark adds: the run's ([`RunDetail`]: those several benchmarks share, typed
//! here, and the benchmark's own, [`RunOwn`]) and the point's ([`Detail`]). Each benchmark's
//! fields are one `#[derive(Serialize)]` struct, and these enums name every one of them, so the
//! harness carries typed values from `setup` and `point` to the record: a field cannot be
//! written under a name the struct does not declare, and the fields become JSON once, when
//! [`super::RunInfo::record`] makes the record. The enums are untagged: a variant's fields are
//! the record's keys, exactly as its struct names them.
//!
//! A rank's outcome of a point travels to rank 0 as a [`RankDetail`] (tagged: both ends are the
//! same binary, and rank 0 asks for the variant it expects with [`super::Measured::part`]).

use std::collections::BTreeMap;

use efabench_record::{GpuSharing, SharedGpu};
use serde::{Deserialize, Serialize, Serializer};

/// What every record of a run repeats beyond the common fields.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunDetail {
    /// Whether the rails are virtual (several on one NIC): runs on a mesh, `proxy`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub virtual_rails: Option<bool>,
    /// How messages are spread over the rails (`--strategy`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strategy: Option<&'static str>,
    /// How the buffers were registered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mr: Option<String>,
    /// The benchmark's own run fields.
    #[serde(flatten)]
    pub own: RunOwn,
    /// Each rank's GPU ordinal (null for a rank without one), when `--mem` needs a GPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Vec<Option<i32>>>,
    /// The ranks of one host whose buffers were on one GPU (`null` when none were); absent
    /// until the harness sets it.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "gpu_sharing"
    )]
    pub gpu_sharing: Option<Vec<SharedGpu>>,
    /// The libfabric variables (`FI_*`) set for the run, when any were.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fi_env: Option<BTreeMap<String, String>>,
}

/// `gpu_sharing` as [`GpuSharing::to_value`] writes it: `null` for no shared GPU.
fn gpu_sharing<S: Serializer>(groups: &Option<Vec<SharedGpu>>, s: S) -> Result<S::Ok, S::Error> {
    GpuSharing::to_value(groups.as_deref().unwrap_or_default()).serialize(s)
}

/// Declares an untagged enum of benchmarks' field structs, with `From` for each struct.
macro_rules! untagged {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident($ty:ty),)* }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, Serialize)]
        #[serde(untagged)]
        pub enum $name {
            /// No fields of its own.
            #[default]
            None,
            $($(#[$vmeta])* $variant($ty),)*
        }

        $(impl From<$ty> for $name {
            fn from(v: $ty) -> Self {
                $name::$variant(v)
            }
        })*
    };
}

untagged! {
    /// A benchmark's own fields that every record of its run repeats.
    RunOwn {
        Alltoall(crate::alltoall::AlltoallRun),
        Alltoallv(crate::alltoallv::AlltoallvRun),
        /// `sendrecv`, `write`, `read`.
        P2p(crate::p2p::P2pRun),
        Pairs(crate::pairs::PairsFacts),
        Proxy(crate::proxy::ProxyFacts),
        Queue(crate::queue::record::QueueFacts),
        H2d(crate::h2d::report::H2dFacts),
    }
}

untagged! {
    /// A point's own fields, one variant per benchmark.
    Detail {
        /// `sendrecv`, `write`, `read`.
        P2p(crate::p2p::PointDetail),
        Alltoall(crate::collective::report::Exchange<crate::alltoall::AlltoallDetail>),
        Alltoallv(crate::collective::report::Exchange<crate::alltoallv::AlltoallvDetail>),
        Pairs(crate::pairs::PairsDetail),
        Ep(crate::ep::metrics::EpDetail),
        Proxy(crate::proxy::ProxyDetail),
        Queue(crate::queue::record::QueueDetail),
        Ipc(crate::ipc::IpcDetail),
        /// `ipc --nvbandwidth`.
        Nvbw(crate::ipc::nvbw::NvbwDetail),
        H2d(crate::h2d::report::H2dDetail),
    }
}

/// A type one variant of [`RankDetail`] carries.
pub trait RankPart: Sized {
    /// The value, when `d` is this type's variant.
    fn of(d: &RankDetail) -> Option<&Self>;
}

/// Declares [`RankDetail`], with `From` and [`RankPart`] for each variant's type.
macro_rules! rank_detail {
    ($($(#[$vmeta:meta])* $variant:ident($ty:ty),)*) => {
        /// What a rank measured of a point beyond its samples and errors.
        // One value per rank and point, outside any timed loop: its size costs nothing.
        #[allow(clippy::large_enum_variant)]
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
        pub enum RankDetail {
            /// Nothing beyond the samples (or an idle rank).
            #[default]
            None,
            $($(#[$vmeta])* $variant($ty),)*
        }

        $(impl From<$ty> for RankDetail {
            fn from(v: $ty) -> Self {
                RankDetail::$variant(v)
            }
        }

        impl RankPart for $ty {
            fn of(d: &RankDetail) -> Option<&Self> {
                match d {
                    RankDetail::$variant(v) => Some(v),
                    _ => None,
                }
            }
        })*
    };
}

rank_detail! {
    /// The sender of a point-to-point benchmark: its per-rail counts.
    Sender(crate::p2p::SenderDetail),
    /// A rank of an all-to-all exchange.
    Exchange(crate::collective::report::RankOutcome),
    /// A rank of a `pairs` round.
    Pairs(crate::pairs::RoundFacts),
    /// `proxy`'s initiator and target.
    ProxyInitiator(crate::proxy::InitiatorStamps),
    ProxyTarget(crate::proxy::TargetStamps),
    /// A rank's log of an `ep` point.
    Ep(crate::ep::metrics::RankLog),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn run_fields_appear_only_when_set_and_sharing_is_null_when_none() {
        assert_eq!(
            serde_json::to_value(RunDetail::default()).unwrap(),
            json!({})
        );
        let d = RunDetail {
            virtual_rails: Some(true),
            strategy: Some("split"),
            gpu_sharing: Some(Vec::new()),
            own: crate::pairs::PairsFacts {
                schedule: "ring".into(),
            }
            .into(),
            ..RunDetail::default()
        };
        assert_eq!(
            serde_json::to_value(&d).unwrap(),
            json!({"virtual_rails": true, "strategy": "split", "gpu_sharing": null,
                   "schedule": "ring"})
        );
        let shared = SharedGpu {
            host: "h".into(),
            gpu: 0,
            ranks: vec![0, 1],
            mps: false,
        };
        let d = RunDetail {
            gpu_sharing: Some(vec![shared.clone()]),
            ..RunDetail::default()
        };
        assert_eq!(
            serde_json::to_value(&d).unwrap()["gpu_sharing"],
            GpuSharing::to_value(&[shared])
        );
    }

    #[test]
    fn a_rank_detail_travels_tagged_and_is_read_back_as_its_type() {
        let out = crate::collective::report::RankOutcome {
            warmup_done: 3,
            stopped_by: "count".into(),
            ..Default::default()
        };
        let d = RankDetail::from(out.clone());
        let back: RankDetail = serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
        assert_eq!(back, d);
        assert_eq!(
            crate::collective::report::RankOutcome::of(&back),
            Some(&out)
        );
        assert_eq!(crate::ep::metrics::RankLog::of(&back), None);
        assert_eq!(crate::ep::metrics::RankLog::of(&RankDetail::None), None);
    }
}
