//! Property tests: the sysfs/procfs readers and the `fi_info` parsers never panic, whatever the
//! files hold. A node's files are not ours: a driver bug, a half-written file, a fixture edited
//! by hand or a `--fi-info` pointed at the wrong file must give a diagnosis, not a backtrace.
//!
//! How: one copy of the p4d fixture tree; each case overwrites a few of its files with arbitrary
//! bytes or with values chosen to sit on the parsers' edges (huge numbers, negative, NaN, empty,
//! NUL, long lines), runs every reader on it, and restores the files. Cases are bounded (64 by
//! default, `PROPTEST_CASES` overrides) so CI stays fast.

#[path = "../../../fixtures/variants.rs"]
mod variants;

use efabench_topology::installed::{cmp_versions, version_numbers, Installed};
use efabench_topology::libfabric::{
    parse_fi_info, parse_fi_info_checked, prov_version_to_libfabric,
};
use efabench_topology::topo::{normalize_bus_id, parse_rate_gbps, state_name};
use efabench_topology::{Root, Snapshot, Topology};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Cases per property: small by default so `cargo test` stays fast.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

/// A fresh copy of the fixture and its regular files (relative paths), one per case: dropped
/// with the case, so nothing is left in the temp dir (a copy held in a static never is).
fn tree() -> (variants::Tree, Vec<PathBuf>) {
    let t = variants::copy("p4d.24xlarge");
    let mut files = Vec::new();
    collect(t.path(), t.path(), &mut files);
    files.sort();
    (t, files)
}

fn collect(base: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let ty = e.file_type().unwrap();
        if ty.is_dir() {
            collect(base, &e.path(), out);
        } else if ty.is_file() {
            out.push(e.path().strip_prefix(base).unwrap().to_path_buf());
        }
    }
}

/// File contents that sit on a parser's edge, or arbitrary bytes.
fn contents() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..200),
        Just(b"".to_vec()),
        Just(b"\0\0\0".to_vec()),
        Just(b"18446744073709551616\n".to_vec()),
        Just(b"99999999999999999999999999999999\n".to_vec()),
        Just(b"-1\n".to_vec()),
        Just(b"NaN\n".to_vec()),
        Just(b"inf Gb/sec (4X EDR)\n".to_vec()),
        Just(b"1e309 Gb/sec\n".to_vec()),
        Just(b"4: ACTIVE\n".to_vec()),
        Just(b"0x\n".to_vec()),
        Just(b"0xffffffffffffffffffff\n".to_vec()),
        Just(b"0000:zz:00.0\n".to_vec()),
        Just("\u{feff}é\u{202e}\n".as_bytes().to_vec()),
        "[ -~]{0,80}".prop_map(String::into_bytes),
        Just(vec![b'9'; 5000]),
    ]
}

/// Every reader the diagnostics use, on one root. Panics are the failure.
fn read_everything(root: &Root, baseline: Option<&Snapshot>) {
    let t = Topology::discover(root);
    let _ = t.to_json();
    for n in &t.nics {
        let _ = t.nic(&n.name);
    }
    let snap = Snapshot::read(root);
    if let (Some(a), Some(b)) = (baseline, snap.as_ref()) {
        for d in a.delta(b) {
            let _ = d.errors();
            let _ = d.traffic_bytes();
            let _ = d.rates();
            let _ = d.to_map();
        }
        let _ = a.delta_json(b);
        let _ = b.to_json();
    }
    let mut env = BTreeMap::new();
    env.insert(
        "LD_LIBRARY_PATH".to_string(),
        "/opt/amazon/efa/lib64:/usr/lib".to_string(),
    );
    let _ = Installed::scan(root, &env);
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn sysfs_readers_survive_any_file_contents(
        picks in proptest::collection::vec((any::<proptest::sample::Index>(), contents()), 1..8)
    ) {
        let (t, files) = tree();
        let root = Root::new(t.path()).unwrap();
        let baseline = Snapshot::read(&root);
        for (idx, bytes) in &picks {
            std::fs::write(t.path().join(idx.get(&files)), bytes).unwrap();
        }
        read_everything(&root, baseline.as_ref());
    }

    #[test]
    fn fi_info_parsers_never_panic(text in "(([ a-z_:.\\-/0-9]{0,30}|provider: [a-z;_]{0,8}|    (fabric|domain|version|type): [ -~]{0,20}|libfabric( api)?: [0-9.a-z]{0,12}|fi_getinfo: -61 .{0,10}|fi_info:|---)\n){0,30}") {
        let lenient = parse_fi_info(&text);
        let _ = lenient.version();
        let _ = lenient.efa().count();
        if let Ok(checked) = parse_fi_info_checked(&text) {
            // What the checked parser accepts, it reads exactly as the lenient one.
            prop_assert_eq!(&checked, &lenient);
            prop_assert!(checked.library_version.is_some() || !checked.entries.is_empty() || checked.no_data);
            prop_assert!(checked.entries.iter().all(|e| !e.fabric.is_empty() && !e.domain.is_empty()));
        } else if let Err(e) = parse_fi_info_checked(&text) {
            let e = e.to_string();
            prop_assert!(!e.contains('\n') && e.len() < 400, "{}", e);
        }
    }

    #[test]
    fn fi_info_parsers_on_arbitrary_text(text in any::<String>()) {
        let _ = parse_fi_info(&text).version();
        if let Err(e) = parse_fi_info_checked(&text) {
            let e = e.to_string();
            prop_assert!(!e.contains('\n') && e.len() < 400, "{}", e);
        }
    }

    #[test]
    fn small_field_parsers_never_panic(s in any::<String>(), v in "[0-9.]{0,12}") {
        let _ = parse_rate_gbps(&s);
        let _ = state_name(&s);
        let _ = normalize_bus_id(&s);
        let _ = version_numbers(&s);
        let _ = cmp_versions(&s, &v);
        let _ = prov_version_to_libfabric(&s);
        let _ = prov_version_to_libfabric(&v);
    }
}
