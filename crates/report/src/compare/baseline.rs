//! The baseline file: several runs of a sweep kept with their spread, so that a nightly job
//! compares tonight's run with what the machine did over several earlier runs, not with one
//! run that may have been lucky. Written by `efabench baseline` and `compare --save`, read by
//! `compare --baseline` (and by anything else that judges against a baseline: the types are
//! public). The schema is `docs/compare.md`'s; it is one JSON object, not JSON Lines, so a
//! records reader refuses it rather than misreading it.

use super::context::Context;
use super::figure::RunPoint;
use super::key::Key;
use super::side::{estimate, Estimate, Side};
use efabench_record::Error;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The schema tag of a baseline file.
pub const BASELINE_SCHEMA: &str = "efabench.baseline.v1";

/// A baseline file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub schema: String,
    /// RFC 3339 UTC, when the file was written.
    pub created: String,
    /// The record files the runs came from.
    pub sources: Vec<String>,
    /// Where the runs were measured.
    pub context: Context,
    pub points: Vec<BaselinePoint>,
}

/// One point: every run of it, and the summary `compare` computes from them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BaselinePoint {
    pub key: Key,
    /// The figures of each run, as `compare` read them from the records.
    pub runs: Vec<RunPoint>,
    /// p50 latency over the runs (µs) with its relative standard error.
    pub lat_p50_us: Estimate,
    /// Bandwidth over the runs (Gbps) with its relative standard error.
    pub bw_gbps: Estimate,
}

impl Baseline {
    /// The baseline of a side's runs.
    pub fn of(side: &Side) -> Baseline {
        let points = side
            .points
            .iter()
            .map(|(key, runs)| {
                let lat: Vec<_> = runs.iter().map(|r| r.lat_p50_us).collect();
                let bw: Vec<_> = runs.iter().map(|r| r.bw_gbps).collect();
                BaselinePoint {
                    key: key.clone(),
                    runs: runs.clone(),
                    lat_p50_us: estimate(&lat),
                    bw_gbps: estimate(&bw),
                }
            })
            .collect();
        Baseline {
            schema: BASELINE_SCHEMA.into(),
            created: efabench_record::now_rfc3339(),
            sources: side.files.clone(),
            context: side.context.clone(),
            points,
        }
    }

    /// The side this file stores, named `name`.
    pub fn side(&self, name: &str) -> Side {
        Side {
            files: vec![name.to_string()],
            records: self.points.iter().map(|p| p.runs.len()).sum(),
            points: self
                .points
                .iter()
                .map(|p| (p.key.clone(), p.runs.clone()))
                .collect(),
            context: self.context.clone(),
            repeated_in_file: 0,
        }
    }

    /// Writes the file (pretty JSON), replacing it atomically.
    pub fn save(&self, path: &Path) -> Result<(), Error> {
        let text = serde_json::to_string_pretty(self).map_err(|e| {
            Error::bad_input(format!(
                "cannot encode the baseline {}: {e}",
                path.display()
            ))
        })?;
        efabench_record::write_atomically(path, &format!("{text}\n")).map_err(|e| {
            Error::bad_input(format!(
                "cannot write the baseline {}: {}; pass a writable path",
                path.display(),
                efabench_record::error::io_reason(&e)
            ))
        })
    }

    /// Reads `text` as a baseline file when it is one: `None` for anything else (a records
    /// file), an error for a baseline that does not parse.
    pub fn parse(path: &Path, text: &str) -> Result<Option<Baseline>, Error> {
        if !text.trim_start().starts_with('{') {
            return Ok(None);
        }
        // A records file's first line also starts with a schema: a baseline is one object,
        // whose `schema` may sit anywhere in it (a tool that sorts keys moves it to the end).
        let Ok(serde_json::Value::Object(o)) = serde_json::from_str::<serde_json::Value>(text)
        else {
            return Ok(None);
        };
        if o.get("schema").and_then(|v| v.as_str()) != Some(BASELINE_SCHEMA) {
            return Ok(None);
        }
        serde_json::from_str(text).map(Some).map_err(|e| {
            Error::bad_input(format!(
                "{} is a {BASELINE_SCHEMA} file but does not parse: {e}; write it again with efabench baseline",
                path.display()
            ))
        })
    }
}
