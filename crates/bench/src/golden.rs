//! Key sets of records, for the golden tests that keep record field names stable.
//!
//! A record's fields are read by `compare`, by scripts and by people; a renamed or dropped field
//! breaks them silently. Each benchmark keeps the set of its records' field names in
//! `crates/efabench/tests/golden/<bench>.keys`, and its tests compare that list with what it
//! writes: the integration tests with a real run, the GPU benchmarks' unit tests with a record
//! built from their typed fields. This file only uses `std` and `serde_json`, so the integration
//! tests include it as well (`tests/common`): it is the one implementation of both.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

/// Every field name of `v`: `a` for a top-level field, `a.b` inside an object, `a[].b` inside
/// an array of objects. The names inside `counters` are the NIC's own counters, not the record's,
/// and are left out.
pub fn key_paths(v: &Value) -> BTreeSet<String> {
    fn walk(v: &Value, prefix: &str, out: &mut BTreeSet<String>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    let p = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    out.insert(p.clone());
                    if p != "counters" {
                        walk(x, &p, out);
                    }
                }
            }
            Value::Array(a) => {
                for x in a.iter().filter(|x| x.is_object()) {
                    walk(x, &format!("{prefix}[]"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    walk(v, "", &mut out);
    out
}

/// The key list of a golden file: one name a line, `#` starts a comment line.
pub fn golden(text: &str) -> BTreeSet<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

/// `None` when `got` is the golden set, else what differs, for the assertion message.
pub fn differs(want: &BTreeSet<String>, got: &BTreeSet<String>) -> Option<String> {
    let missing: Vec<&String> = want.difference(got).collect();
    let extra: Vec<&String> = got.difference(want).collect();
    if missing.is_empty() && extra.is_empty() {
        return None;
    }
    Some(format!(
        "record keys changed: missing {missing:?}, new {extra:?} (a new field is added to the \
         golden file and docs/records.md; a renamed or dropped one breaks readers)"
    ))
}

/// Where the golden files live, from this crate or from `efabench`'s tests (both sit in
/// `crates/`).
const GOLDEN_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../efabench/tests/golden");

/// Every field name of every record of a JSON Lines file (see [`key_paths`]).
pub fn record_keys(path: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("records file {}: {e}", path.display()));
    assert!(!text.trim().is_empty(), "no records in {}", path.display());
    text.lines()
        .flat_map(|l| key_paths(&serde_json::from_str(l).expect("a record is JSON")))
        .collect()
}

/// Fails unless `keys` equal the golden set `tests/golden/<name>.keys`, naming the keys that
/// appeared and disappeared. `EFABENCH_BLESS=1` writes the file instead, keeping its comment
/// lines (only when a record's fields were meant to change; `docs/records.md` must say so too).
pub fn assert_golden_keys(name: &str, keys: &BTreeSet<String>) {
    let path = Path::new(GOLDEN_DIR).join(format!("{name}.keys"));
    let old = std::fs::read_to_string(&path);
    if std::env::var_os("EFABENCH_BLESS").is_some_and(|v| v == "1") {
        let mut now: String = old
            .as_deref()
            .unwrap_or("")
            .lines()
            .filter(|l| l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect();
        now.extend(keys.iter().map(|k| format!("{k}\n")));
        std::fs::write(&path, now).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return;
    }
    let text = old.unwrap_or_else(|e| {
        panic!(
            "{}: {e}; write it with EFABENCH_BLESS=1 once the keys are right",
            path.display()
        )
    });
    if let Some(e) = differs(&golden(&text), keys) {
        panic!("{name} ({}): {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_reach_into_objects_and_arrays_of_objects() {
        let v = json!({"a": 1, "b": {"c": [1, 2]}, "d": [{"e": 1}, {"f": null}], "g": null,
            "counters": {"rdma_read_bytes": 1}});
        let got = key_paths(&v);
        let want = golden("# comment\na\nb\nb.c\ncounters\nd\nd[].e\nd[].f\ng\n");
        assert_eq!(differs(&want, &got), None);
        let fewer = golden("a\nb\n");
        let e = differs(&fewer, &got).unwrap();
        assert!(e.contains("new [\"b.c\""), "{e}");
        assert!(differs(&got, &fewer).unwrap().contains("missing"));
    }
}
