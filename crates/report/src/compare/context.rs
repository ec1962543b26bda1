//! Where a side's records were measured: the library, provider, hosts, commit and NICs. A
//! comparison across a change of these says as much about the change as about the code, so
//! `compare` prints every difference (and fails on one with `--strict-context`): a candidate
//! that fell back from EFA to TCP, or ran another libfabric, must not read as a plain "OK".

use efabench_record::Record;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// The values seen on one side, each set sorted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Context {
    /// The libfabric release the records name (`libfabric`; absent for benchmarks without it).
    pub libfabric: BTreeSet<String>,
    pub provider: BTreeSet<String>,
    pub host: BTreeSet<String>,
    pub git: BTreeSet<String>,
    /// efabench's version.
    pub version: BTreeSet<String>,
    /// The libfabric domains (NICs) a record used, joined by `,`: another machine kind has
    /// other NICs.
    pub domains: BTreeSet<String>,
}

/// One field whose values differ between the sides.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContextChange {
    pub field: String,
    pub baseline: Vec<String>,
    pub candidate: Vec<String>,
}

impl std::fmt::Display for ContextChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: &[String]| {
            if v.is_empty() {
                "(none)".to_string()
            } else {
                v.join(", ")
            }
        };
        write!(
            f,
            "{}: {} -> {}",
            self.field,
            show(&self.baseline),
            show(&self.candidate)
        )
    }
}

impl Context {
    pub fn add(&mut self, r: &Record) {
        if let Some(l) = &r.libfabric {
            self.libfabric.insert(l.clone());
        }
        self.provider.insert(r.provider.clone());
        self.host.insert(r.host.clone());
        if let Some(g) = &r.git {
            self.git.insert(g.clone());
        }
        self.version.insert(r.version.clone());
        if !r.domains.is_empty() {
            self.domains.insert(r.domains.join(","));
        }
    }

    /// Adds another context's values (several files on one side).
    pub fn merge(&mut self, o: &Context) {
        self.libfabric.extend(o.libfabric.iter().cloned());
        self.provider.extend(o.provider.iter().cloned());
        self.host.extend(o.host.iter().cloned());
        self.git.extend(o.git.iter().cloned());
        self.version.extend(o.version.iter().cloned());
        self.domains.extend(o.domains.iter().cloned());
    }

    fn fields(&self) -> [(&'static str, &BTreeSet<String>); 6] {
        [
            ("libfabric", &self.libfabric),
            ("provider", &self.provider),
            ("host", &self.host),
            ("git", &self.git),
            ("version", &self.version),
            ("domains", &self.domains),
        ]
    }

    /// The fields whose sets differ, baseline (`self`) against the candidate.
    pub fn changes(&self, candidate: &Context) -> Vec<ContextChange> {
        self.fields()
            .into_iter()
            .zip(candidate.fields())
            .filter(|((_, b), (_, c))| b != c)
            .map(|((name, b), (_, c))| ContextChange {
                field: name.into(),
                baseline: b.iter().cloned().collect(),
                candidate: c.iter().cloned().collect(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use efabench_record::testing::sample;

    #[test]
    fn differences_are_named_field_by_field() {
        let a = sample("sendrecv", "stream", 8, 1.0, 1.0);
        let mut b = a.clone();
        let (mut ca, mut cb) = (Context::default(), Context::default());
        ca.add(&a);
        cb.add(&b);
        assert!(ca.changes(&cb).is_empty());
        b.libfabric = Some("1.22.0".into());
        b.host = "node-b".into();
        b.git = Some("abc123".into());
        let mut cb = Context::default();
        cb.add(&b);
        let ch: Vec<String> = ca.changes(&cb).iter().map(|c| c.to_string()).collect();
        assert_eq!(
            ch,
            [
                "libfabric: 2.1.0 -> 1.22.0",
                "host: node-a -> node-b",
                "git: (none) -> abc123"
            ]
        );
    }
}
