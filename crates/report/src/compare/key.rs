//! What identifies a measured point, so that `compare` pairs a baseline record only with the
//! candidate record that measured the same thing.
//!
//! Besides the record's own columns (bench, variant, size, world, peer, memory, provider,
//! rails), benchmarks write the settings that shape a point as extra fields: the source rank of
//! a `pairs` pair, the GPUs, the notification and layout of the all-to-alls, the window, the
//! operation. Leaving one out merges different points: `pairs` records matched without `src`
//! made 6 pairs look like 3 repeated ones. Every such field present in the record is part of
//! the key, as compact JSON text (so `[0,1]` and `"signal"` compare exactly).

use efabench_record::Record;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The extra fields that say which point a record measured (`docs/compare.md`). Fields that
/// describe the result (`bw_GBps`, `wall_s`, `slowest_rank`) or that the tool resolves per
/// machine (`bind`, `mr`) are not here.
pub const IDENTITY_FIELDS: &[&str] = &[
    "src",
    "dst",
    "gpus",
    "notify",
    "layout",
    "window",
    "op",
    "strategy",
    "timing",
    "loop",
    "mode",
    "ring",
    "producer",
    "producers",
    "consumers",
    "proxy_threads",
    "payload_fence",
    "time_to",
    "phase",
    "initiator",
    "dtype",
    "tokens",
    "hidden",
    "topk",
    "experts",
    "routing",
    "counts",
    "seed",
    "engine",
    "suite",
    "row",
    "col",
];

/// What two records must share to be compared.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Key {
    pub bench: String,
    pub variant: String,
    pub size_bytes: u64,
    pub world: u32,
    pub peer: Option<u32>,
    pub mem: String,
    pub provider: String,
    pub rails: u32,
    /// The [`IDENTITY_FIELDS`] the record carries, each as compact JSON text.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, String>,
}

impl Key {
    pub fn of(r: &Record) -> Self {
        let settings = IDENTITY_FIELDS
            .iter()
            .filter_map(|f| {
                r.extra
                    .get(*f)
                    .filter(|v| !v.is_null())
                    .map(|v| (f.to_string(), v.to_string()))
            })
            .collect();
        Key {
            bench: r.bench.clone(),
            variant: r.variant.clone(),
            size_bytes: r.size_bytes,
            world: r.world,
            peer: r.peer,
            mem: r.mem.clone(),
            provider: r.provider.clone(),
            rails: r.rails,
            settings,
        }
    }

    /// `src=0 window=64`: the settings in one cell, `-` when there are none.
    pub fn settings_text(&self) -> String {
        if self.settings.is_empty() {
            return "-".into();
        }
        let parts: Vec<String> = self
            .settings
            .iter()
            .map(|(k, v)| format!("{k}={}", v.trim_matches('"')))
            .collect();
        parts.join(" ")
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{} {} B peer {} mem {} provider {} rails {} world {}",
            self.bench,
            self.variant,
            self.size_bytes,
            self.peer
                .map(|p| p.to_string())
                .unwrap_or_else(|| "-".into()),
            self.mem,
            self.provider,
            self.rails,
            self.world
        )?;
        if !self.settings.is_empty() {
            write!(f, " {}", self.settings_text())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use efabench_record::testing::sample;
    use serde_json::json;

    #[test]
    fn pairs_differ_by_source_and_settings_are_exact() {
        let mut a = sample("pairs", "stream", 64, 1.0, 1.0);
        let mut b = a.clone();
        a.extra.insert("src".into(), json!(0));
        b.extra.insert("src".into(), json!(2));
        assert_ne!(Key::of(&a), Key::of(&b));
        b.extra.insert("src".into(), json!(0));
        assert_eq!(Key::of(&a), Key::of(&b));
        // A result field does not split keys; a null setting counts as absent.
        b.extra.insert("wall_s".into(), json!(1.5));
        b.extra.insert("notify".into(), json!(null));
        assert_eq!(Key::of(&a), Key::of(&b));
        a.extra.insert("gpus".into(), json!([0, 1]));
        let k = Key::of(&a);
        assert_eq!(k.settings_text(), "gpus=[0,1] src=0");
        assert!(k.to_string().ends_with("world 2 gpus=[0,1] src=0"), "{k}");
    }
}
