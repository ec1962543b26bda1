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
use serde_json::Value;
use std::collections::BTreeMap;

/// The extra fields that say which point a record measured (`docs/compare.md`), each as the
/// record wrote it (absent and `null` alike are `None`). Fields that describe the result
/// (`bw_GBps`, `wall_s`, `slowest_rank`) or that the tool resolves per machine (`bind`, `mr`)
/// are not here.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
struct Identity {
    src: Option<Value>,
    dst: Option<Value>,
    gpus: Option<Value>,
    notify: Option<Value>,
    layout: Option<Value>,
    window: Option<Value>,
    op: Option<Value>,
    strategy: Option<Value>,
    timing: Option<Value>,
    #[serde(rename = "loop")]
    loop_: Option<Value>,
    mode: Option<Value>,
    ring: Option<Value>,
    producer: Option<Value>,
    producers: Option<Value>,
    consumers: Option<Value>,
    proxy_threads: Option<Value>,
    payload_fence: Option<Value>,
    ordering: Option<Value>,
    time_to: Option<Value>,
    phase: Option<Value>,
    initiator: Option<Value>,
    dtype: Option<Value>,
    tokens: Option<Value>,
    hidden: Option<Value>,
    topk: Option<Value>,
    experts: Option<Value>,
    routing: Option<Value>,
    counts: Option<Value>,
    seed: Option<Value>,
    engine: Option<Value>,
    suite: Option<Value>,
    row: Option<Value>,
    col: Option<Value>,
}

impl Identity {
    /// The identity of record `r`: its extra fields read through serde (any other is ignored).
    fn of(r: &Record) -> Identity {
        use serde::de::value::MapDeserializer;
        let fields = r.extra.iter().map(|(k, v)| (k.as_str(), v));
        // Every field is an `Option<Value>`, which any JSON value fills: this cannot fail.
        Identity::deserialize(MapDeserializer::<_, serde_json::Error>::new(fields))
            .unwrap_or_default()
    }

    /// The fields present, each as compact JSON text (so `[0,1]` and `"signal"` compare exactly).
    fn settings(&self) -> BTreeMap<String, String> {
        match serde_json::to_value(self) {
            Ok(Value::Object(m)) => m
                .into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, v.to_string()))
                .collect(),
            _ => BTreeMap::new(),
        }
    }
}

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
    /// The identifying settings the record carries (`src`, `window`, `gpus`, ...), each as
    /// compact JSON text.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, String>,
}

impl Key {
    pub fn of(r: &Record) -> Self {
        let settings = Identity::of(r).settings();
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

    /// The source rank of a `pairs` record (its `src` setting).
    pub fn src(&self) -> Option<usize> {
        self.settings.get("src")?.parse().ok()
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
        assert_eq!(k.src(), Some(0));
        // `loop`, a Rust keyword, is read under its record name.
        a.extra.insert("loop".into(), json!("lean"));
        assert_eq!(Key::of(&a).settings_text(), "gpus=[0,1] loop=lean src=0");
    }

    #[test]
    fn queue_points_of_another_ordering_are_other_points() {
        let mut a = sample("queue", "pinned/blocking/1x1/c1", 16, 3.4, 0.03);
        let mut b = a.clone();
        a.extra.insert("ordering".into(), json!("fence"));
        b.extra.insert("ordering".into(), json!("store"));
        assert_ne!(Key::of(&a), Key::of(&b));
        assert_eq!(Key::of(&a).settings_text(), "ordering=fence");
    }
}
