//! Consistency across nodes: for every compared fact ([`crate::node::FIELDS`]) the value most
//! nodes share is the reference, and each node with another value is named with both values.
//! Where no value is held by more than half of the nodes (two against two, or every node
//! different) there is no reference: the split is reported for the whole cluster instead.

use std::collections::BTreeMap;

use crate::node::{NodeReport, Weight, FIELDS};

/// A node whose fact differs from the majority's.
#[derive(Clone, Debug, PartialEq)]
pub struct Deviation {
    pub host: String,
    pub field: &'static str,
    pub weight: Weight,
    pub value: String,
    pub majority: String,
    /// Nodes holding the majority value, of `nodes`.
    pub majority_nodes: usize,
    pub nodes: usize,
}

impl Deviation {
    pub fn describe(&self) -> String {
        format!(
            "{} is {} here, {} on {} of {} nodes",
            self.field, self.value, self.majority, self.majority_nodes, self.nodes
        )
    }
}

/// A fact with no majority value: each value and the hosts that have it.
#[derive(Clone, Debug, PartialEq)]
pub struct Split {
    pub field: &'static str,
    pub groups: Vec<(String, Vec<String>)>,
}

impl Split {
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self
            .groups
            .iter()
            .map(|(v, hosts)| format!("{v} on {}", hosts.join(",")))
            .collect();
        format!("{} has no majority value: {}", self.field, parts.join("; "))
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Consistency {
    pub deviations: Vec<Deviation>,
    pub splits: Vec<Split>,
}

/// Compares the facts of every node (one report per host).
pub fn compare(reports: &[NodeReport]) -> Consistency {
    let mut out = Consistency::default();
    let n = reports.len();
    if n < 2 {
        return out;
    }
    for field in FIELDS {
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for r in reports {
            groups
                .entry((field.value)(&r.facts))
                .or_default()
                .push(r.host.clone());
        }
        if groups.len() < 2 {
            continue;
        }
        let (majority, holders) = groups
            .iter()
            .max_by_key(|(_, h)| h.len())
            .map(|(v, h)| (v.clone(), h.len()))
            .unwrap_or_default();
        if holders * 2 > n {
            for (value, hosts) in groups.iter().filter(|(v, _)| **v != majority) {
                for host in hosts {
                    out.deviations.push(Deviation {
                        host: host.clone(),
                        field: field.name,
                        weight: field.weight,
                        value: value.clone(),
                        majority: majority.clone(),
                        majority_nodes: holders,
                        nodes: n,
                    });
                }
            }
        } else {
            out.splits.push(Split {
                field: field.name,
                groups: groups.into_iter().collect(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::NodeFacts;

    fn node(host: &str, f: impl Fn(&mut NodeFacts)) -> NodeReport {
        let mut facts = NodeFacts {
            instance_type: Some("p5.48xlarge".into()),
            efa_devices: 32,
            gpus: 8,
            link_gbps: 3200.0,
            libfabric: Some("2.1.0".into()),
            nccl: Some("2.27.3".into()),
            ..NodeFacts::default()
        };
        f(&mut facts);
        NodeReport {
            host: host.into(),
            checks: Vec::new(),
            facts,
        }
    }

    #[test]
    fn the_node_that_differs_from_the_majority_is_named_with_both_values() {
        let nodes = vec![
            node("a", |_| {}),
            node("b", |_| {}),
            node("c", |f| f.efa_devices = 31),
            node("d", |f| f.nccl = Some("2.23.4".into())),
        ];
        let c = compare(&nodes);
        assert!(c.splits.is_empty(), "{c:?}");
        assert_eq!(c.deviations.len(), 2, "{c:?}");
        let efa = c
            .deviations
            .iter()
            .find(|d| d.field == "efa_devices")
            .unwrap();
        assert_eq!(efa.host, "c");
        assert_eq!(efa.weight, Weight::Hardware);
        assert_eq!(efa.describe(), "efa_devices is 31 here, 32 on 3 of 4 nodes");
        let nccl = c.deviations.iter().find(|d| d.field == "nccl").unwrap();
        assert_eq!(nccl.host, "d");
        assert_eq!(nccl.weight, Weight::Software);
    }

    #[test]
    fn identical_nodes_and_a_single_node_have_nothing_to_report() {
        assert_eq!(compare(&[node("a", |_| {})]), Consistency::default());
        let same = vec![node("a", |_| {}), node("b", |_| {}), node("c", |_| {})];
        assert_eq!(compare(&same), Consistency::default());
    }

    #[test]
    fn two_against_two_is_a_split_not_a_deviation() {
        let nodes = vec![
            node("a", |_| {}),
            node("b", |_| {}),
            node("c", |f| f.libfabric = Some("1.22.0".into())),
            node("d", |f| f.libfabric = Some("1.22.0".into())),
        ];
        let c = compare(&nodes);
        assert!(c.deviations.is_empty(), "{c:?}");
        assert_eq!(c.splits.len(), 1);
        assert_eq!(
            c.splits[0].describe(),
            "libfabric has no majority value: 1.22.0 on c,d; 2.1.0 on a,b"
        );
    }
}
