//! A checker of the Prometheus text exposition format (0.0.4), for tests: the unit tests of
//! `prometheus.rs` and the CLI tests include this file.
#![allow(dead_code)]

/// One sample: metric name, labels in order, value.
pub type Sample = (String, Vec<(String, String)>, f64);

/// A small checker of the text exposition format, for the tests: every line is a comment, a
/// `HELP`/`TYPE` line or a sample; metric and label names are valid; label values are quoted
/// with only the three escapes; values are numbers; each family's samples are contiguous, its
/// `TYPE` comes before them and at most once; no sample (name and labels) repeats. Returns the
/// samples as (name, labels, value).
pub fn check_exposition(text: &str) -> Result<Vec<Sample>, String> {
    use std::collections::HashSet;
    fn metric_name_ok(n: &str) -> bool {
        let mut b = n.bytes();
        matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_' || c == b':')
            && b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
    }
    fn label_name_ok(n: &str) -> bool {
        let mut b = n.bytes();
        matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
            && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
    }
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("the text does not end with a newline".into());
    }
    let mut samples = Vec::new();
    let mut typed: HashSet<String> = HashSet::new();
    let mut helped: HashSet<String> = HashSet::new();
    let mut finished: HashSet<String> = HashSet::new();
    let mut current: Option<String> = None;
    let mut seen: HashSet<String> = HashSet::new();
    for (i, line) in text.lines().enumerate() {
        let at = |m: &str| format!("line {}: {m}: {line:?}", i + 1);
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix('#') {
            let words: Vec<&str> = rest.trim_start().splitn(3, ' ').collect();
            match words.first().copied() {
                Some("TYPE") => {
                    let (Some(name), Some(ty)) = (words.get(1), words.get(2)) else {
                        return Err(at("TYPE without name and type"));
                    };
                    if !metric_name_ok(name) {
                        return Err(at("bad metric name"));
                    }
                    if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&ty.trim())
                    {
                        return Err(at("unknown type"));
                    }
                    if !typed.insert(name.to_string()) {
                        return Err(at("second TYPE for a metric"));
                    }
                    if finished.contains(*name) || current.as_deref() == Some(name) {
                        return Err(at("TYPE after the metric's samples"));
                    }
                }
                Some("HELP") => {
                    let Some(name) = words.get(1) else {
                        return Err(at("HELP without a name"));
                    };
                    if !metric_name_ok(name) || !helped.insert(name.to_string()) {
                        return Err(at("bad or repeated HELP"));
                    }
                }
                _ => {}
            }
            continue;
        }
        let (name, rest) = match line.find(['{', ' ']) {
            Some(p) => (&line[..p], &line[p..]),
            None => return Err(at("a sample without a value")),
        };
        if !metric_name_ok(name) {
            return Err(at("bad metric name"));
        }
        let mut labels = Vec::new();
        let rest = if let Some(body) = rest.strip_prefix('{') {
            let bytes = body.as_bytes();
            let mut j = 0;
            loop {
                if bytes.get(j) == Some(&b'}') {
                    j += 1;
                    break;
                }
                let eq = body[j..].find('=').ok_or_else(|| at("label without ="))? + j;
                let lname = &body[j..eq];
                if !label_name_ok(lname) {
                    return Err(at("bad label name"));
                }
                if bytes.get(eq + 1) != Some(&b'"') {
                    return Err(at("label value not quoted"));
                }
                let mut value = String::new();
                j = eq + 2;
                loop {
                    match *bytes.get(j).ok_or_else(|| at("unterminated label value"))? {
                        b'\\' => {
                            match bytes.get(j + 1) {
                                Some(b'\\') => value.push('\\'),
                                Some(b'"') => value.push('"'),
                                Some(b'n') => value.push('\n'),
                                _ => return Err(at("bad escape in a label value")),
                            }
                            j += 2;
                        }
                        b'"' => break,
                        _ => {
                            let ch = body[j..].chars().next().unwrap_or('?');
                            value.push(ch);
                            j += ch.len_utf8();
                        }
                    }
                }
                labels.push((lname.to_string(), value));
                j += 1;
                match bytes.get(j) {
                    Some(b',') => j += 1,
                    Some(b'}') => {}
                    _ => return Err(at("expected , or } after a label")),
                }
            }
            &body[j..]
        } else {
            rest
        };
        let mut parts = rest.split_whitespace();
        let value = parts.next().ok_or_else(|| at("no value"))?;
        let v: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            _ => value.parse().map_err(|_| at("value is not a number"))?,
        };
        if let Some(ts) = parts.next() {
            ts.parse::<i64>()
                .map_err(|_| at("timestamp is not an integer"))?;
        }
        if parts.next().is_some() {
            return Err(at("trailing text"));
        }
        if current.as_deref() != Some(name) {
            if finished.contains(name) {
                return Err(at("samples of one metric are not contiguous"));
            }
            if let Some(c) = current.take() {
                finished.insert(c);
            }
            current = Some(name.to_string());
        }
        let mut key_labels = labels.clone();
        key_labels.sort();
        if !seen.insert(format!("{name}{key_labels:?}")) {
            return Err(at("repeated sample"));
        }
        samples.push((name.to_string(), labels, v));
    }
    Ok(samples)
}
