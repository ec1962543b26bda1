//! JSON Lines: the durable form of the results.
//!
//! The appender is what `-o FILE.jsonl` opens. It is made for runs that can die half-way (a peer
//! that stops answering, a job killed by its scheduler): the file is opened for append before
//! anything is measured, so a bad path is reported before minutes of benchmarking are spent;
//! each record is written with a single `write` of one complete line straight to the file (no
//! user-space buffer), so every record measured so far is in the kernel once `push` returns
//! and survives the process dying. Several runs may append to the same file; readers and
//! `compare`/`plot` handle the repeated keys. A file deleted or replaced while the run writes it
//! would swallow every later record without an error (the writes go to the unlinked inode), so
//! each `push` checks that the path still names the file it opened and fails otherwise.
//!
//! The reader and [`validate_line`] check the `efabench.v1` contract strictly (schema tag and
//! every required key, nullable ones present as `null`) and name the file and line of the first
//! bad record, because a results file that silently drops lines makes comparisons lie. One
//! exception keeps records from being lost: the *last* line may be torn (an incomplete record,
//! left by a writer that was killed or ran out of disk space half-way through its write). The
//! records before it are good, so the reader keeps them and returns a warning naming the file and
//! line instead of refusing the whole file. A line is torn only when it is a proper prefix of a
//! JSON value (the parser ran out of input, possibly inside a UTF-8 sequence); anything else, or
//! a torn line followed by more records, is an error. Lines are read one at a time and none may
//! exceed [`MAX_LINE_BYTES`], so arbitrary input cannot make the reader hold more than that plus
//! the records it already parsed.

use crate::error::{io_reason, Error};
use crate::record::{Record, LATENCY_FIELDS, REQUIRED_FIELDS, SCHEMA};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The longest line the reader accepts. A record is a few KiB (a per-NIC counter map on a p5
/// with 32 NICs stays well under 1 MiB); a longer line is not an efabench record.
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// Appends records to a `.jsonl` file, one line each, written through as they arrive.
#[derive(Debug)]
pub struct JsonlWriter {
    path: PathBuf,
    file: File,
    /// (device, inode) of the opened file, to notice the path being deleted or replaced.
    identity: (u64, u64),
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
        let meta = file.metadata().map_err(|e| cannot(io_reason(&e)))?;
        Ok(JsonlWriter {
            path,
            file,
            identity: (meta.dev(), meta.ino()),
            written: 0,
        })
    }

    /// Fails when [`Self::path`] no longer names the file this writer opened: deleted (the
    /// records would go to an unlinked inode and vanish at exit) or replaced by another file.
    fn check_still_there(&self) -> Result<(), Error> {
        let gone = |what: &str| {
            Error::failed(format!(
                "the records file {} was {what} during the run: the {} record(s) written to it are not in that path any more and the rest of the run cannot be recorded; rerun with -o on a file nothing else removes or rewrites",
                self.path.display(),
                self.written
            ))
        };
        match std::fs::metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == self.identity => Ok(()),
            Ok(_) => Err(gone("replaced by another file")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(gone("deleted")),
            Err(e) => Err(Error::failed(format!(
                "cannot check the records file {}: {}",
                self.path.display(),
                io_reason(&e)
            ))),
        }
    }

    /// Writes one record as one line and flushes it to the file. Records that [`Record::check`]
    /// rejects (wrong schema tag, a NaN) are refused, since they could not be read back. Fails,
    /// without writing, when the file was deleted or replaced since [`JsonlWriter::open`].
    pub fn push(&mut self, record: &Record) -> Result<(), Error> {
        record
            .check()
            .map_err(|e| Error::failed(format!("not writing to {}: {e}", self.path.display())))?;
        self.check_still_there()?;
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
    check_line(line).map_err(|e| cap(&e.message, MAX_ECHO_CHARS))
}

/// Why a line is not a record, and whether it is a proper prefix of a JSON value (torn).
struct LineError {
    message: String,
    torn: bool,
}

impl From<String> for LineError {
    fn from(message: String) -> Self {
        LineError {
            message,
            torn: false,
        }
    }
}

fn check_line(line: &str) -> Result<Record, LineError> {
    let value: serde_json::Value = serde_json::from_str(line).map_err(|e| LineError {
        torn: e.is_eof(),
        message: format!("not valid JSON: {e}"),
    })?;
    let obj = value
        .as_object()
        .ok_or_else(|| "not a JSON object".to_string())?;
    match obj.get("schema") {
        Some(serde_json::Value::String(s)) if s == SCHEMA => {}
        Some(serde_json::Value::String(s)) => {
            return Err(format!(
            "schema is \"{s}\", expected \"{SCHEMA}\" (written by a different efabench version?)"
        )
            .into())
        }
        Some(_) => return Err("\"schema\" is not a string".to_string().into()),
        None => return Err(format!("no \"schema\" key: not an {SCHEMA} record").into()),
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
        )
        .into());
    }
    match obj.get("lat_us").and_then(|v| v.as_object()) {
        Some(lat) => {
            let missing: Vec<&str> = LATENCY_FIELDS
                .iter()
                .copied()
                .filter(|k| !lat.contains_key(*k))
                .collect();
            if !missing.is_empty() {
                return Err(format!("lat_us lacks {}", missing.join(", ")).into());
            }
        }
        None => {
            return Err("lat_us is not an object with min, p50, p99, max, mean"
                .to_string()
                .into())
        }
    }
    let record: Record = serde_json::from_value(value).map_err(|e| format!("bad field: {e}"))?;
    record.check()?;
    Ok(record)
}

/// Checks one line given as bytes: UTF-8 first. A line cut inside a multi-byte character is
/// torn when the part before the cut is itself a torn JSON prefix.
fn check_line_bytes(bytes: &[u8]) -> Result<Record, LineError> {
    match std::str::from_utf8(bytes) {
        Ok(text) => check_line(text),
        Err(e) => {
            let cut_at_end = e.error_len().is_none();
            let prefix_torn = cut_at_end
                && std::str::from_utf8(&bytes[..e.valid_up_to()])
                    .map(|p| check_line(p).err().is_some_and(|le| le.torn))
                    .unwrap_or(false);
            Err(LineError {
                message: format!("not UTF-8 text (byte {} of the line)", e.valid_up_to() + 1),
                torn: prefix_torn,
            })
        }
    }
}

/// Records read from one source, plus warnings about what was skipped (a torn last line).
#[derive(Debug, Default, PartialEq)]
pub struct RecordsRead {
    pub records: Vec<Record>,
    /// One line each, already naming the source and line, e.g.
    /// `r.jsonl:21: ignoring the torn last line (...)`.
    pub warnings: Vec<String>,
}

/// Parses JSONL from a reader; `source` names it in errors and warnings (`results.jsonl:3: …`).
/// Blank lines are skipped. A bad line is an error (partial results would make comparisons lie),
/// except a torn last line, which is skipped with a warning so that the records before it are
/// not lost. No line may exceed [`MAX_LINE_BYTES`].
pub fn parse_records_from(reader: impl BufRead, source: &str) -> Result<RecordsRead, Error> {
    let mut reader = reader;
    let mut out = RecordsRead::default();
    // A bad line is held back until we know whether another record follows it.
    let mut pending: Option<(usize, LineError, usize)> = None;
    let mut buf = Vec::new();
    let mut lineno = 0usize;
    loop {
        buf.clear();
        let n = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| {
                Error::bad_input(format!(
                    "cannot read records from {source}: {}",
                    io_reason(&e)
                ))
            })?;
        if n == 0 {
            break;
        }
        lineno += 1;
        let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
        if line.len() > MAX_LINE_BYTES {
            return Err(Error::bad_input(format!(
                "{source}:{lineno}: line longer than {} MiB: not an {SCHEMA} results file",
                MAX_LINE_BYTES >> 20
            )));
        }
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if let Some((at, e, _)) = pending.take() {
            return Err(bad_line(source, at, &e, true));
        }
        match check_line_bytes(line) {
            Ok(r) => out.records.push(r),
            Err(e) => pending = Some((lineno, e, line.len())),
        }
    }
    if let Some((at, e, len)) = pending {
        if !e.torn {
            return Err(bad_line(source, at, &e, false));
        }
        out.warnings.push(format!(
            "{source}:{at}: ignoring the torn last line ({len} bytes of an incomplete record: its writer was killed or ran out of disk space while writing it); the {} record(s) before it are read",
            out.records.len()
        ));
    }
    Ok(out)
}

fn bad_line(source: &str, at: usize, e: &LineError, followed: bool) -> Error {
    let fix = if e.torn && followed {
        "a record cut short by a run that died while writing it, with later records appended after it; delete that line"
    } else {
        "fix or delete that line"
    };
    Error::bad_input(format!(
        "{source}:{at}: {}; {fix}",
        cap(&e.message, MAX_ECHO_CHARS)
    ))
}

/// The most characters of a reason (which may quote the bad value) an error message carries:
/// a 10 MB string in a record must not become a 10 MB error line.
const MAX_ECHO_CHARS: usize = 200;

/// `s` cut to `max` characters (with `…`) and without control characters.
fn cap(s: &str, max: usize) -> String {
    let mut out: String = s
        .chars()
        .take(max)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if s.chars().nth(max).is_some() {
        out.push('…');
    }
    out
}

/// Parses JSONL text (see [`parse_records_from`]); warnings are dropped. Use
/// [`parse_records_from`] to see them.
pub fn parse_records(text: &str, source: &str) -> Result<Vec<Record>, Error> {
    parse_records_from(text.as_bytes(), source).map(|r| r.records)
}

/// Reads every record of one JSONL file, with the warnings (see [`parse_records_from`]).
pub fn read_records_with_warnings(path: impl AsRef<Path>) -> Result<RecordsRead, Error> {
    let path = path.as_ref();
    let cannot = |e: std::io::Error| {
        Error::bad_input(format!(
            "cannot read records from {}: {}",
            path.display(),
            io_reason(&e)
        ))
    };
    let file = File::open(path).map_err(cannot)?;
    if file.metadata().map_err(cannot)?.is_dir() {
        return Err(Error::bad_input(format!(
            "cannot read records from {}: it is a directory; pass a .jsonl file written with -o",
            path.display()
        )));
    }
    parse_records_from(BufReader::new(file), &path.display().to_string())
}

/// Reads every record of one JSONL file; warnings (a torn last line) go to stderr as
/// `efabench: warning: FILE:LINE: ...`.
pub fn read_records(path: impl AsRef<Path>) -> Result<Vec<Record>, Error> {
    let read = read_records_with_warnings(path)?;
    for w in &read.warnings {
        eprintln!("efabench: warning: {w}");
    }
    Ok(read.records)
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

        // A run killed mid-write leaves a partial line: as the last line it is skipped with a
        // warning and the records before it are read.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"schema\":\"efabench.v1\",\"bench\":")
            .unwrap();
        drop(f);
        let read = read_records_with_warnings(&path).unwrap();
        assert_eq!(read.records, vec![first.clone(), second.clone()]);
        assert_eq!(read.warnings.len(), 1);
        assert!(
            read.warnings[0].ends_with("r.jsonl:3: ignoring the torn last line (32 bytes of an incomplete record: its writer was killed or ran out of disk space while writing it); the 2 record(s) before it are read"),
            "{:?}",
            read.warnings
        );
        // The next run starts on a new line; the torn line is then in the middle, which the
        // reader reports by number with what it is.
        let third = sample("write", "stream", 16384, 70.0, 5.0);
        JsonlWriter::open(&path).unwrap().push(&third).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 4);
        assert_eq!(validate_line(text.lines().nth(3).unwrap()).unwrap(), third);
        let e = read_records(&path).unwrap_err().to_string();
        assert!(e.contains("r.jsonl:3: not valid JSON"), "{e}");
        assert!(e.contains("a record cut short by a run that died"), "{e}");
    }

    #[test]
    fn only_a_torn_last_line_is_forgiven() {
        let good = serde_json::to_string(&sample("sendrecv", "stream", 64, 1.0, 1.0)).unwrap();
        // Every proper prefix of a record is torn when it is the last line, with or without
        // a newline after it (a writer that opened the file after the crash adds one).
        for cut in [1, 2, 10, good.len() / 2, good.len() - 1] {
            for nl in ["", "\n", "\n\n"] {
                let text = format!("{good}\n{good}\n{}{nl}", &good[..cut]);
                let read = parse_records_from(text.as_bytes(), "t.jsonl").unwrap();
                assert_eq!(read.records.len(), 2, "cut {cut}");
                assert_eq!(read.warnings.len(), 1, "cut {cut}");
                assert!(read.warnings[0].starts_with("t.jsonl:3: ignoring the torn last line"));
            }
        }
        // Cut inside a multi-byte UTF-8 character (a host name with an accent).
        let mut r = sample("sendrecv", "stream", 64, 1.0, 1.0);
        r.host = "nœud-a".into();
        let line = serde_json::to_string(&r).unwrap();
        let at = line.find('œ').unwrap() + 1;
        let mut bytes = format!("{good}\n").into_bytes();
        bytes.extend_from_slice(&line.as_bytes()[..at]);
        let read = parse_records_from(&bytes[..], "u.jsonl").unwrap();
        assert_eq!((read.records.len(), read.warnings.len()), (1, 1));

        // A complete but invalid last line is not torn: an error.
        let text = format!("{good}\n{{\"schema\":\"efabench.v1\"}}");
        let e = parse_records_from(text.as_bytes(), "t.jsonl").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("t.jsonl:2: missing required fields"),
            "{e}"
        );
        // Garbage at the end is not torn either.
        for garbage in ["hello", "}", "{\"a\":1}}", "\u{0}\u{0}\u{0}"] {
            let text = format!("{good}\n{garbage}");
            let e = parse_records_from(text.as_bytes(), "t.jsonl").unwrap_err();
            assert!(e.to_string().starts_with("t.jsonl:2: "), "{garbage}: {e}");
        }
        let e = parse_records_from(&[b'{', b'"', 0xff, b'x'][..], "b").unwrap_err();
        assert!(e.to_string().contains("not UTF-8"), "{e}");
        // A torn or corrupt line in the middle is an error naming it.
        let text = format!("{good}\n{}\n{good}\n", &good[..20]);
        let e = parse_records_from(text.as_bytes(), "t.jsonl").unwrap_err();
        assert!(
            e.to_string().starts_with("t.jsonl:2: not valid JSON"),
            "{e}"
        );
        let text = format!("{good}\nxyz\n\n{good}\n");
        let e = parse_records_from(text.as_bytes(), "t.jsonl").unwrap_err();
        assert!(e.to_string().contains("t.jsonl:2: not valid JSON"), "{e}");
        assert!(e.to_string().ends_with("fix or delete that line"), "{e}");
        // CRLF line ends are accepted.
        let text = format!("{good}\r\n{good}\r\n");
        assert_eq!(parse_records(&text, "crlf").unwrap().len(), 2);
    }

    #[test]
    fn overlong_line_is_refused_without_reading_it_whole() {
        let long = vec![b'['; MAX_LINE_BYTES + 10];
        let e = parse_records_from(&long[..], "big").unwrap_err();
        assert!(
            e.to_string().starts_with("big:1: line longer than 16 MiB"),
            "{e}"
        );
    }

    #[test]
    fn a_records_file_deleted_or_replaced_mid_run_fails_the_push() {
        let dir = tempdir("gone");
        let path = dir.join("r.jsonl");
        let r = sample("sendrecv", "stream", 64, 1.0, 1.0);
        let mut w = JsonlWriter::open(&path).unwrap();
        w.push(&r).unwrap();
        std::fs::remove_file(&path).unwrap();
        let e = w.push(&r).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Failed);
        assert!(
            e.to_string()
                .contains("r.jsonl was deleted during the run: the 1 record(s) written to it"),
            "{e}"
        );
        assert!(!path.exists(), "a failed push must not recreate the file");

        let mut w = JsonlWriter::open(&path).unwrap();
        w.push(&r).unwrap();
        // Replaced: an editor's save or another job's `mv` puts a new file at the same path.
        let other = dir.join("other.jsonl");
        std::fs::write(&other, "").unwrap();
        std::fs::rename(&other, &path).unwrap();
        let e = w.push(&r).unwrap_err().to_string();
        assert!(
            e.contains("was replaced by another file during the run"),
            "{e}"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
        // Still there: pushes keep working, each line complete on disk at once.
        let path2 = dir.join("kept.jsonl");
        let mut w = JsonlWriter::open(&path2).unwrap();
        for i in 0..3 {
            w.push(&r).unwrap();
            let text = std::fs::read_to_string(&path2).unwrap();
            assert_eq!(text.lines().count(), i + 1);
            assert!(text.ends_with('\n'));
        }
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
        let e = read_records(&dir).unwrap_err().to_string();
        assert!(e.contains("it is a directory"), "{e}");
        std::fs::write(dir.join("bin.jsonl"), [0xffu8, 0xfe]).unwrap();
        let e = read_records(dir.join("bin.jsonl")).unwrap_err().to_string();
        assert!(e.contains("not UTF-8"), "{e}");
    }
}
