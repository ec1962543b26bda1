//! Every rank must run with the same options: the hello carries a fingerprint of them, and when
//! one differs from rank 0's this says which words differ, so the message names the option to
//! fix rather than "fingerprint mismatch".

use super::*;

/// Longest piece of either side that a difference message quotes.
pub(super) const DIFF_SHOWN: usize = 80;

pub(super) fn quote(words: &[&str]) -> String {
    let s = words.join(" ");
    let s = if s.is_empty() {
        "(nothing)".to_string()
    } else {
        s
    };
    let s: String = s.chars().filter(|c| !c.is_control()).collect();
    if s.chars().count() > DIFF_SHOWN {
        let cut: String = s.chars().take(DIFF_SHOWN).collect();
        format!("`{cut}...`")
    } else {
        format!("`{s}`")
    }
}

/// The words where `mine` and `root` differ: the common leading and trailing words removed,
/// plus the option name in front when only its value differs (`--window 32` vs `--window 64`).
pub(super) fn word_difference(mine: &str, root: &str) -> (String, String) {
    let a: Vec<&str> = mine.split_whitespace().collect();
    let b: Vec<&str> = root.split_whitespace().collect();
    let mut head = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let max_tail = a.len().min(b.len()) - head;
    let tail = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take(max_tail)
        .take_while(|(x, y)| x == y)
        .count();
    let first_differs = |v: &[&str]| v.get(head).is_some_and(|w| !w.starts_with('-'));
    if head > 0 && b[head - 1].starts_with('-') && (first_differs(&a) || first_differs(&b)) {
        head -= 1;
    }
    if a == b {
        // Same words, different spacing or bytes: show the raw strings.
        return (quote(&[mine]), quote(&[root]));
    }
    (
        quote(&a[head..a.len() - tail]),
        quote(&b[head..b.len() - tail]),
    )
}

/// The usage error `check_same` reports for this table, or `None` when every rank agrees.
pub(super) fn first_difference(what: &str, table: &[Vec<u8>]) -> Option<BootstrapError> {
    let root = table.first()?;
    let (rank, mine) = table.iter().enumerate().skip(1).find(|(_, v)| *v != root)?;
    let (mine, theirs) = word_difference(
        &String::from_utf8_lossy(mine),
        &String::from_utf8_lossy(root),
    );
    let what: String = what.chars().take(40).collect();
    Some(BootstrapError::Usage(format!(
        "rank {rank} was started with different {what} than rank 0: {mine} vs {theirs}; start \
         every rank with the same {what}"
    )))
}
