//! CSV: columns derived from the first record, cells, and one quoted line per record.

use super::*;

/// The CSV columns of a run, derived from its first record rather than from a hand-kept list,
/// so a field a benchmark adds (`strategy`, `rails`, `per_rail`, `mr`, `footprint_bytes`, ...)
/// gets its column without a change here: the schema's fields in their order, with
/// `lat_us` flattened to `lat_us.min` … `lat_us.mean` and `lat_kind` right after `mem` (filled
/// from [`Record::lat_kind`] when the record does not carry it), then the record's extra fields,
/// then a last column `extra` that
/// holds, as a JSON object, any field a later record has and the first did not (the header is
/// written once, so a CSV stays one rectangular table and no field is dropped).
pub fn csv_columns(first: &Record) -> Vec<String> {
    let mut cols = Vec::new();
    // The fixed fields in the order of the schema (a JSON map may be sorted by key).
    for &k in REQUIRED_FIELDS {
        if k == "lat_us" {
            cols.extend(LATENCY_FIELDS.iter().map(|f| format!("lat_us.{f}")));
        } else {
            cols.push(k.to_string());
        }
        if k == "mem" {
            cols.push("lat_kind".into());
        }
    }
    cols.extend(
        first
            .extra
            .keys()
            .filter(|k| *k != "lat_kind" && !REQUIRED_FIELDS.contains(&k.as_str()))
            .cloned(),
    );
    cols.push(CSV_LEFTOVER.into());
    cols
}

/// The last CSV column: fields that are not in the header, as one JSON object.
pub const CSV_LEFTOVER: &str = "extra";

/// The record as its JSON object: the fixed fields in struct order, then the extra fields.
pub(super) fn record_object(r: &Record) -> serde_json::Map<String, serde_json::Value> {
    match serde_json::to_value(r) {
        Ok(serde_json::Value::Object(m)) => m,
        // A Record always serializes to an object (a struct with a flattened map).
        _ => serde_json::Map::new(),
    }
}

/// One JSON value as CSV text: strings as they are, numbers as Rust prints them (shortest
/// round-trip form: `2`, `1.5`), null as empty, a list of strings `;`-joined (`domains`), any
/// other list or object as compact JSON text (`per_rail`, `counters`).
pub(super) fn csv_cell(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::Null => String::new(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => u.to_string(),
            (None, Some(i), _) => i.to_string(),
            (None, None, Some(f)) => f.to_string(),
            _ => n.to_string(),
        },
        Value::String(s) => s.clone(),
        Value::Array(items) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(";"),
        other => other.to_string(),
    }
}

/// One record as CSV fields under `columns` (from [`csv_columns`]). A column the record lacks
/// is empty; fields of the record that have no column go, as a JSON object, to the last one.
pub fn csv_fields(r: &Record, columns: &[String]) -> Vec<String> {
    let mut obj = record_object(r);
    let lat = match obj.remove("lat_us") {
        Some(serde_json::Value::Object(lat)) => lat,
        _ => serde_json::Map::new(),
    };
    obj.remove("lat_kind");
    let mut out = Vec::with_capacity(columns.len());
    for c in columns {
        let cell = if c == "lat_kind" {
            r.lat_kind()
        } else if c == CSV_LEFTOVER {
            continue;
        } else if let Some(f) = c.strip_prefix("lat_us.") {
            lat.get(f).map(csv_cell).unwrap_or_default()
        } else {
            obj.remove(c.as_str())
                .map(|v| csv_cell(&v))
                .unwrap_or_default()
        };
        out.push(cell);
    }
    if columns.iter().any(|c| c == CSV_LEFTOVER) {
        let leftover: serde_json::Map<String, serde_json::Value> = lat
            .into_iter()
            .filter(|(f, _)| !columns.iter().any(|c| *c == format!("lat_us.{f}")))
            .map(|(f, v)| (format!("lat_us.{f}"), v))
            .chain(obj)
            .collect();
        out.push(if leftover.is_empty() {
            String::new()
        } else {
            serde_json::Value::Object(leftover).to_string()
        });
    }
    out
}

pub(super) fn csv_line(fields: &[String]) -> Result<Vec<u8>, Error> {
    let mut w = ::csv::Writer::from_writer(Vec::new());
    w.write_record(fields)
        .map_err(|e| Error::failed(format!("cannot format a CSV row: {e}")))?;
    w.into_inner()
        .map_err(|e| Error::failed(format!("cannot format a CSV row: {e}")))
}
