//! Slurm host lists (`p5-[001-004,007],p5-010`): the node list of a step names rank 0's host
//! (its first entry), and a list can be huge or mistyped, so expansion is bounded and the first
//! host is found without expanding the rest.

/// Most hosts a host list may expand to (bounds memory on a hostile or mistyped list).
pub const MAX_HOSTS: usize = 1 << 20;

/// Expand a Slurm host list such as `p5-[001-004,007],p5-010` into host names.
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for item in split_top_level(list)? {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        expand_item(item, &mut out)?;
    }
    if out.is_empty() {
        return Err("it names no host".into());
    }
    Ok(out)
}

/// The first host of a Slurm host list (rank 0's host under Slurm's default distribution).
pub fn first_host(list: &str) -> Result<String, String> {
    let first = split_top_level(list)?
        .into_iter()
        .map(str::trim)
        .find(|s| !s.is_empty())
        .ok_or("it names no host")?;
    // Expanding only the first item keeps this cheap even for huge ranges.
    let mut hosts = Vec::new();
    expand_first(first, &mut hosts)?;
    hosts
        .into_iter()
        .next()
        .ok_or_else(|| "it names no host".into())
}

fn split_top_level(list: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in list.char_indices() {
        match c {
            '[' => {
                if depth > 0 {
                    return Err("nested '['".into());
                }
                depth += 1;
            }
            ']' => {
                if depth == 0 {
                    return Err("']' without '['".into());
                }
                depth -= 1;
            }
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("'[' without ']'".into());
    }
    parts.push(&list[start..]);
    Ok(parts)
}

/// One range inside brackets: ("001", "004") keeps the zero padding of the low end.
fn bracket_values(spec: &str) -> Result<Vec<String>, String> {
    let mut vals = Vec::new();
    for part in spec.split(',') {
        let part = part.trim();
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let (l, h) = (number(lo)?, number(hi)?);
        if h < l {
            return Err(format!("range {part:?} goes backwards"));
        }
        if h - l >= MAX_HOSTS as u64 || vals.len() + ((h - l) as usize) >= MAX_HOSTS {
            return Err(format!("range {part:?} is too large"));
        }
        let width = lo.len();
        for n in l..=h {
            vals.push(format!("{n:0width$}"));
        }
    }
    Ok(vals)
}

fn expand_item(item: &str, out: &mut Vec<String>) -> Result<(), String> {
    let Some(open) = item.find('[') else {
        out.push(item.to_string());
        return check_len(out);
    };
    let close = item[open..].find(']').ok_or("'[' without ']'")? + open;
    let prefix = &item[..open];
    let rest = &item[close + 1..];
    for v in bracket_values(&item[open + 1..close])? {
        // A name may have several bracket groups (`a[1-2]b[3-4]`): expand the rest for each.
        expand_item(&format!("{prefix}{v}{rest}"), out)?;
    }
    Ok(())
}

/// The first value of a bracket expression, checked but without expanding the ranges.
fn first_bracket_value(spec: &str) -> Result<String, String> {
    let part = spec.split(',').next().unwrap_or("").trim();
    let (lo, hi) = part.split_once('-').unwrap_or((part, part));
    let l = number(lo)?;
    if number(hi)? < l {
        return Err(format!("range {part:?} goes backwards"));
    }
    Ok(lo.to_string())
}

fn number(s: &str) -> Result<u64, String> {
    if s.is_empty() {
        return Err("empty range in brackets".into());
    }
    if !s.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!("{s:?} is not a number"));
    }
    s.parse().map_err(|_| format!("{s:?} is too large"))
}

fn expand_first(item: &str, out: &mut Vec<String>) -> Result<(), String> {
    let Some(open) = item.find('[') else {
        out.push(item.to_string());
        return Ok(());
    };
    let close = item[open..].find(']').ok_or("'[' without ']'")? + open;
    let lo = first_bracket_value(&item[open + 1..close])?;
    expand_first(&format!("{}{lo}{}", &item[..open], &item[close + 1..]), out)
}

fn check_len(out: &[String]) -> Result<(), String> {
    if out.len() > MAX_HOSTS {
        Err(format!("it expands to more than {MAX_HOSTS} hosts"))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostlists_expand() {
        assert_eq!(
            expand_hostlist("p5-[001-004,007],p5-010").unwrap(),
            ["p5-001", "p5-002", "p5-003", "p5-004", "p5-007", "p5-010"]
        );
        assert_eq!(expand_hostlist("node1").unwrap(), ["node1"]);
        assert_eq!(expand_hostlist("a,b , c").unwrap(), ["a", "b", "c"]);
        assert_eq!(
            expand_hostlist("gpu[9-11]").unwrap(),
            ["gpu9", "gpu10", "gpu11"]
        );
        assert_eq!(
            expand_hostlist("r[1-2]n[08-09]").unwrap(),
            ["r1n08", "r1n09", "r2n08", "r2n09"]
        );
        assert_eq!(expand_hostlist("x[3]-ib").unwrap(), ["x3-ib"]);
        for bad in [
            "",
            "a[1-",
            "a]",
            "a[[1]]",
            "a[4-2]",
            "a[x]",
            "a[]",
            "a[1-99999999]",
            ",",
        ] {
            assert!(expand_hostlist(bad).is_err(), "{bad:?} should be rejected");
        }
        assert_eq!(first_host("p5-[001-004,007],p5-010").unwrap(), "p5-001");
        assert_eq!(first_host("r[1-2]n[08-09]").unwrap(), "r1n08");
        // The first host of a huge list is found without expanding the rest.
        assert_eq!(
            first_host("n[000000-999999],m[1-999999]").unwrap(),
            "n000000"
        );
        assert!(first_host(",,").is_err());
    }
}
