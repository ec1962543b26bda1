//! JSON Lines: the durable form of the results.
//!
//! The appender is what `-o FILE.jsonl` opens. It is made for runs that can die half-way (a peer
//! that stops answering, a job killed by its scheduler): the file is opened for append before
//! anything is measured, so a bad path is reported before minutes of benchmarking are spent;
//! each record is written with a single `write` of one complete line straight to the file (no
//! user-space buffer), so every record measured so far is in the kernel once `push` returns
//! and survives the process dying. Several runs may append to the same file; readers and
//! `compare`/`plot` handle the repeated keys.
//!
//! The reader and [`validate_line`] check the `efabench.v1` contract strictly (schema tag and
//! every required key, nullable ones present as `null`) and name the file and line of the first
//! bad record, because a results file that silently drops lines makes comparisons lie.

use crate::error::{io_reason, Error};
use crate::record::{Record, LATENCY_FIELDS, REQUIRED_FIELDS, SCHEMA};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Appends records to a `.jsonl` file, one line each, written through as they arrive.
#[derive(Debug)]
pub struct JsonlWriter {
    path: PathBuf,
    file: File,
    written: u64,
}

impl JsonlWriter {
    /// Opens `path` for append, creating it if needed (the parent directory must exist).
    /// The error says which path and why, in one line, e.g.
    /// `cannot write records to /nonexistent/x.jsonl: No such file or directory; pass -o with a writable path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref().to_path_buf();
        let cannot = |why: String| {
            Error::bad_input(format!(
                "cannot write records to {}: {why}; pass -o with a writable path",
                path.display()
            ))
        };
        if path.as_os_str().is_empty() {
            return Err(cannot("the path is empty".into()));
        }
        if path.is_dir() {
            return Err(cannot("it is a directory".into()));
        }
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(|e| cannot(io_reason(&e)))?;
        // A previous run killed in the middle of a write may have left a partial last line;
        // start on a fresh line so our first record stays readable.
        let len = file.metadata().map_err(|e| cannot(io_reason(&e)))?.len();
        if len > 0 {
            let mut last = [0u8; 1];
            file.seek(SeekFrom::Start(len - 1))
                .and_then(|_| file.read_exact(&mut last))
                .map_err(|e| cannot(io_reason(&e)))?;
            if last[0] != b'\n' {
                file.write_all(b"\n").map_err(|e| cannot(io_reason(&e)))?;
            }
        }
        Ok(JsonlWriter {
            path,
            file,
            written: 0,
        })
    }

    /// Writes one record as one line and flushes it to the file. Records that [`Record::check`]
    /// rejects (wrong schema tag, a NaN) are refused, since they could not be read back.
    pub fn push(&mut self, record: &Record) -> Result<(), Error> {
        record
            .check()
            .map_err(|e| Error::failed(format!("not writing to {}: {e}", self.path.display())))?;
        let mut line = serde_json::to_string(record).map_err(|e| {
            Error::failed(format!("cannot encode {} as JSON: {e}", record.describe()))
        })?;
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .and_then(|_| self.file.flush())
            .map_err(|e| {
                Error::failed(format!(
                    "cannot write records to {}: {}; records before this one are kept",
                    self.path.display(),
                    io_reason(&e)
                ))
            })?;
        self.written += 1;
        Ok(())
    }

    /// The path given to [`JsonlWriter::open`].
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records written by this writer (not counting what the file held before).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Asks the OS to put the records on stable storage (survives a machine crash, not only a
    /// process crash). Optional: `push` already hands every line to the kernel.
    pub fn sync(&self) -> Result<(), Error> {
        self.file.sync_data().map_err(|e| {
            Error::failed(format!(
                "cannot sync {}: {}",
                self.path.display(),
                io_reason(&e)
            ))
        })
    }
}

/// Checks one JSONL line against the `efabench.v1` contract and parses it.
/// The error is one line without the line number (callers add it).
pub fn validate_line(line: &str) -> Result<Record, String> {
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("not valid JSON: {e}"))?;
    let obj = value
        .as_object()
        .ok_or_else(|| "not a JSON object".to_string())?;
    match obj.get("schema") {
        Some(serde_json::Value::String(s)) if s == SCHEMA => {}
        Some(serde_json::Value::String(s)) => {
            return Err(format!(
            "schema is \"{s}\", expected \"{SCHEMA}\" (written by a different efabench version?)"
        ))
        }
        Some(_) => return Err("\"schema\" is not a string".into()),
        None => return Err(format!("no \"schema\" key: not an {SCHEMA} record")),
    }
    let missing: Vec<&str> = REQUIRED_FIELDS
        .iter()
        .copied()
        .filter(|k| !obj.contains_key(*k))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "missing required field{} {} (use null for unknown values)",
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", ")
        ));
    }
    match obj.get("lat_us").and_then(|v| v.as_object()) {
        Some(lat) => {
            let missing: Vec<&str> = LATENCY_FIELDS
                .iter()
                .copied()
                .filter(|k| !lat.contains_key(*k))
                .collect();
            if !missing.is_empty() {
                return Err(format!("lat_us lacks {}", missing.join(", ")));
            }
        }
        None => return Err("lat_us is not an object with min, p50, p99, max, mean".into()),
    }
    let record: Record = serde_json::from_value(value).map_err(|e| format!("bad field: {e}"))?;
    record.check()?;
    Ok(record)
}

/// Parses JSONL text; `source` names it in errors (`results.jsonl:3: …`). Blank lines are
/// skipped. The first bad line is an error: partial results would make comparisons lie.
pub fn parse_records(text: &str, source: &str) -> Result<Vec<Record>, Error> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let r = validate_line(line).map_err(|e| {
            Error::bad_input(format!("{source}:{}: {e}; fix or delete that line", i + 1))
        })?;
        out.push(r);
    }
    Ok(out)
}

/// Reads every record of one JSONL file (see [`parse_records`]).
pub fn read_records(path: impl AsRef<Path>) -> Result<Vec<Record>, Error> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| {
        Error::bad_input(format!(
            "cannot read records from {}: {}",
            path.display(),
            io_reason(&e)
        ))
    })?;
    let text = String::from_utf8(bytes).map_err(|e| {
        Error::bad_input(format!(
            "{} is not a JSONL results file: not UTF-8 text (byte {})",
            path.display(),
            e.utf8_error().valid_up_to()
        ))
    })?;
    parse_records(&text, &path.display().to_string())
}

/// Reads several files, keeping each file's records separate (plots draw one series per file).
/// A file with no records is an error naming it.
pub fn read_files<P: AsRef<Path>>(paths: &[P]) -> Result<Vec<(PathBuf, Vec<Record>)>, Error> {
    let mut out = Vec::with_capacity(paths.len());
    for p in paths {
        let p = p.as_ref();
        let records = read_records(p)?;
        if records.is_empty() {
            return Err(Error::bad_input(format!(
                "{} holds no records; pass a file written with -o by an efabench benchmark",
                p.display()
            )));
        }
        out.push((p.to_path_buf(), records));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{sample, tempdir};

    #[test]
    fn round_trip_keeps_every_field() {
        let dir = tempdir("rt");
        let path = dir.join("r.jsonl");
        let mut a = sample("sendrecv", "pingpong", 8, 0.5, 2.25);
        a.extra
            .insert("lat_kind".into(), serde_json::json!("round-trip/2"));
        a.counters = Some(serde_json::json!({"rdmap16s27": {"tx_bytes": 123}}));
        let mut b = sample("alltoall", "default", 1 << 20, 90.0, 100.0);
        b.peer = None;
        b.busbw_gbps = Some(67.5);
        b.link_gbps = None;
        b.util_pct = None;
        let mut w = JsonlWriter::open(&path).unwrap();
        w.push(&a).unwrap();
        w.push(&b).unwrap();
        assert_eq!(w.written(), 2);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert!(text.ends_with('\n'));
        // Nullable fields are written as explicit nulls.
        assert!(text.lines().nth(1).unwrap().contains("\"util_pct\":null"));
        assert_eq!(read_records(&path).unwrap(), vec![a, b]);
    }

    #[test]
    fn append_keeps_earlier_records_and_repairs_a_torn_line() {
        let dir = tempdir("append");
        let path = dir.join("r.jsonl");
        let first = sample("write", "stream", 4096, 40.0, 3.0);
        JsonlWriter::open(&path).unwrap().push(&first).unwrap();
        let second = sample("write", "stream", 8192, 60.0, 4.0);
        JsonlWriter::open(&path).unwrap().push(&second).unwrap();
        assert_eq!(
            read_records(&path).unwrap(),
            vec![first.clone(), second.clone()]
        );

        // A run killed mid-write leaves a partial line; the next run starts on a new line,
        // and the reader reports the torn line by number.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"schema\":\"efabench.v1\",\"bench\":")
            .unwrap();
        drop(f);
        let third = sample("write", "stream", 16384, 70.0, 5.0);
        JsonlWriter::open(&path).unwrap().push(&third).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 4);
        assert_eq!(validate_line(text.lines().nth(3).unwrap()).unwrap(), third);
        let e = read_records(&path).unwrap_err().to_string();
        assert!(e.contains("r.jsonl:3: not valid JSON"), "{e}");
    }

    #[test]
    fn unwritable_path_is_one_line_naming_path_and_reason() {
        let e = JsonlWriter::open("/nonexistent/x.jsonl").unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot write records to /nonexistent/x.jsonl: No such file or directory; pass -o with a writable path"
        );
        assert_eq!(e.kind(), crate::ErrorKind::BadInput);
        let dir = tempdir("dir");
        let e = JsonlWriter::open(&dir).unwrap_err().to_string();
        assert!(e.contains("it is a directory") && !e.contains('\n'), "{e}");
        assert!(JsonlWriter::open("").is_err());
    }

    #[test]
    fn relative_path_without_parent_works() {
        let dir = tempdir("rel");
        // A bare file name (no parent component) resolves against the working directory;
        // emulate that with a path relative to the temp dir.
        let path = dir.join("plain.jsonl");
        let mut w = JsonlWriter::open(&path).unwrap();
        w.push(&sample("read", "pingpong", 64, 1.0, 4.0)).unwrap();
        w.sync().unwrap();
        assert_eq!(w.path(), path.as_path());
    }

    #[test]
    fn push_refuses_non_finite_numbers() {
        let dir = tempdir("nan");
        let path = dir.join("r.jsonl");
        let mut w = JsonlWriter::open(&path).unwrap();
        let mut r = sample("sendrecv", "stream", 64, 1.0, 1.0);
        r.bw_gbps = f64::NAN;
        let e = w.push(&r).unwrap_err().to_string();
        assert!(e.contains("bw_gbps is NaN"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    }

    #[test]
    fn validator_names_the_problem() {
        let good = serde_json::to_string(&sample("sendrecv", "stream", 64, 1.0, 1.0)).unwrap();
        assert!(validate_line(&good).is_ok());

        let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
        v["schema"] = serde_json::json!("efabench.v0");
        assert!(validate_line(&v.to_string())
            .unwrap_err()
            .contains("schema is \"efabench.v0\""));

        let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
        v.as_object_mut().unwrap().remove("util_pct");
        v.as_object_mut().unwrap().remove("bw_gbps");
        let e = validate_line(&v.to_string()).unwrap_err();
        assert!(
            e.contains("missing required fields bw_gbps, util_pct"),
            "{e}"
        );

        let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
        v["lat_us"].as_object_mut().unwrap().remove("p99");
        assert_eq!(
            validate_line(&v.to_string()).unwrap_err(),
            "lat_us lacks p99"
        );

        let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
        v["size_bytes"] = serde_json::json!("big");
        assert!(validate_line(&v.to_string())
            .unwrap_err()
            .starts_with("bad field: invalid type"));

        assert_eq!(validate_line("[1,2]").unwrap_err(), "not a JSON object");
        assert!(validate_line("{")
            .unwrap_err()
            .starts_with("not valid JSON"));
        assert!(validate_line("{}")
            .unwrap_err()
            .contains("no \"schema\" key"));
        // Extra fields are allowed and kept.
        let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
        v["lat_kind"] = serde_json::json!("one-way");
        let r = validate_line(&v.to_string()).unwrap();
        assert_eq!(r.lat_kind(), "one-way");
    }

    #[test]
    fn reader_errors_carry_file_and_line() {
        let good = serde_json::to_string(&sample("sendrecv", "stream", 64, 1.0, 1.0)).unwrap();
        let text = format!("{good}\n\n{good}\nnot json\n");
        let e = parse_records(&text, "x.jsonl").unwrap_err();
        assert!(
            e.to_string().starts_with("x.jsonl:4: not valid JSON"),
            "{e}"
        );
        assert!(!e.to_string().contains('\n'));
        assert_eq!(parse_records(&format!("{good}\n\n"), "x").unwrap().len(), 1);

        let dir = tempdir("read");
        let e = read_records(dir.join("missing.jsonl"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("missing.jsonl: No such file or directory"),
            "{e}"
        );
        std::fs::write(dir.join("empty.jsonl"), "\n").unwrap();
        let e = read_files(&[dir.join("empty.jsonl")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("holds no records"), "{e}");
        std::fs::write(dir.join("bin.jsonl"), [0xffu8, 0xfe]).unwrap();
        let e = read_records(dir.join("bin.jsonl")).unwrap_err().to_string();
        assert!(e.contains("not UTF-8"), "{e}");
    }
}
