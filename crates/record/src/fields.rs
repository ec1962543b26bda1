//! Typed reading of the fields a record carries beside the schema's fixed columns.
//!
//! A record's benchmark-specific fields are kept as written (see [`Record::extra`]), but no reader
//! picks them out by name and guesses at their type: a reader declares the fields it reads as a
//! `Deserialize` struct and reads it with [`Record::fields`], so a field renamed or retyped by a
//! benchmark fails that reader's deserialisation (and its tests) instead of reading as absent.
//! [`Common`] is what the harness writes into the records of every benchmark and what the
//! generic readers (`plot`, `compare`, the table and CSV output) need of them.
//!
//! [`Record::check`] refuses a record whose [`Common`] fields have the wrong type, so readers of
//! checked records can rely on them.

use serde::{Deserialize, Deserializer, Serialize};

use crate::record::{GpuSharing, Record, SharedGpu};

/// The fields any benchmark's record may carry that readers of every benchmark use. Each is
/// absent in records of benchmarks (or of efabench versions) that do not write it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Common {
    /// What the latency columns mean (`one-way`, `round-trip/2`, ...); see [`Record::lat_kind`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lat_kind: Option<String>,
    /// The benchmark's own definition of its bus bandwidth.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busbw_def: Option<String>,
    /// How the point was timed; `run` means one time for the whole run (no per-block noise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timing: Option<String>,
    /// Medians of consecutive blocks of iterations, µs (`stats::BLOCK_MEDIANS_FIELD`).
    #[serde(rename = "lat_p50_blocks_us", skip_serializing_if = "Option::is_none")]
    pub blocks_us: Option<Vec<f64>>,
    /// Seconds the point took, set-up and verification included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_s: Option<f64>,
    /// The source of an ordered pair (`pairs` rank, `ipc` GPU): rows are pairs, not peers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub src: Option<i64>,
}

/// `gpu_sharing` with its three states: absent (`None`), `null` (`Some(None)`), groups.
#[derive(Deserialize)]
struct SharingField {
    #[serde(default, deserialize_with = "present")]
    gpu_sharing: Option<Option<Vec<SharedGpu>>>,
}

/// A field that is present, `null` or not, as `Some`; serde's `default` leaves it `None` when
/// the key is absent.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

impl Common {
    /// The first field of `extra` that [`Common`] cannot read, with why.
    pub(crate) fn bad_field(
        extra: &serde_json::Map<String, serde_json::Value>,
    ) -> Option<(&str, serde_json::Error)> {
        extra.iter().find_map(|(k, v)| {
            let one = serde_json::Map::from_iter([(k.clone(), v.clone())]);
            Common::deserialize(&one).err().map(|e| (k.as_str(), e))
        })
    }
}

impl Record {
    /// The record's extra fields as `T` (a struct naming the fields a reader uses; keys it
    /// does not name are ignored unless it denies them).
    pub fn fields<'a, T: Deserialize<'a>>(&'a self) -> Result<T, serde_json::Error> {
        T::deserialize(&self.extra)
    }

    /// The [`Common`] fields; default (all absent) when one has the wrong type, which
    /// [`Record::check`] refuses.
    pub fn common(&self) -> Common {
        self.fields().unwrap_or_default()
    }

    /// `gpu_sharing` typed, or why it cannot be.
    pub(crate) fn sharing(&self) -> Result<GpuSharing, serde_json::Error> {
        let f: SharingField = self.fields()?;
        Ok(match f.gpu_sharing {
            None => GpuSharing::Unknown,
            Some(None) => GpuSharing::NotShared,
            Some(Some(g)) if g.is_empty() => GpuSharing::NotShared,
            Some(Some(g)) => GpuSharing::Shared(g),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::sample;
    use serde_json::json;

    #[test]
    fn common_fields_read_typed_and_absent_ones_stay_absent() {
        let mut r = sample("sendrecv", "pingpong", 64, 1.0, 1.0);
        assert_eq!(r.common(), Common::default());
        r.extra.insert("lat_kind".into(), json!("round-trip/2"));
        r.extra
            .insert("lat_p50_blocks_us".into(), json!([1.0, 2.5]));
        r.extra.insert("src".into(), json!(3));
        r.extra.insert("window".into(), json!(64));
        let c = r.common();
        assert_eq!(c.lat_kind.as_deref(), Some("round-trip/2"));
        assert_eq!(c.blocks_us, Some(vec![1.0, 2.5]));
        assert_eq!((c.src, &c.timing, c.wall_s), (Some(3), &None, None));
        // Written back, only the fields that were there.
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            json!({"lat_kind": "round-trip/2", "lat_p50_blocks_us": [1.0, 2.5], "src": 3})
        );
    }

    #[test]
    fn a_common_field_of_the_wrong_type_is_an_error() {
        let mut r = sample("pairs", "stream", 64, 1.0, 1.0);
        r.extra.insert("src".into(), json!("zero"));
        assert!(r.fields::<Common>().is_err());
        assert_eq!(r.common(), Common::default());
        let e = r.check().unwrap_err();
        assert!(e.contains("src"), "{e}");
    }

    #[test]
    fn a_reader_borrows_what_it_reads() {
        #[derive(Deserialize)]
        struct Mine<'a> {
            layout: &'a str,
            #[serde(default)]
            topk: Option<u32>,
        }
        let mut r = sample("ep", "dispatch", 64, 1.0, 1.0);
        assert!(r.fields::<Mine>().is_err(), "layout is required");
        r.extra.insert("layout".into(), json!("flat"));
        let m: Mine = r.fields().unwrap();
        assert_eq!((m.layout, m.topk), ("flat", None));
    }
}
