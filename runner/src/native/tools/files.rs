//! The file tools, `Read`, `Write` and `Edit`, over a [`Workspace`] (which
//! confines every path): each returns the text for the model or a specific
//! error message, and runs on a blocking thread.

use super::{Limits, Workspace};

pub(super) fn read(ws: &Workspace, path: &str, limits: &Limits) -> Result<String, String> {
    ws.read_text(path, limits.read_bytes).map_err(|e| {
        if e.contains("over the read limit") {
            format!("{e}; use Bash (head, sed -n) to see part of it")
        } else {
            e
        }
    })
}

pub(super) fn write(
    ws: &Workspace,
    path: &str,
    content: &str,
    limits: &Limits,
) -> Result<String, String> {
    ws.write_text(path, content, limits.edit_bytes)
}

pub(super) fn edit(
    ws: &Workspace,
    path: &str,
    old: &str,
    new: &str,
    limits: &Limits,
) -> Result<String, String> {
    let limit = limits.edit_bytes;
    if old.is_empty() {
        return Err("old_string is empty; use Write to create or replace a whole file".to_owned());
    }
    for (name, s) in [("old_string", old), ("new_string", new)] {
        if s.len() > limit {
            return Err(format!(
                "{name} is {} bytes, over the edit limit of {limit} bytes",
                s.len()
            ));
        }
    }
    ws.edit_text(path, limit, "edit", |text| {
        let at = match count_matches(text, old) {
            0 => return Err(format!("{path}: old_string not found")),
            1 => text.find(old).unwrap_or_default(),
            n => {
                return Err(format!(
                    "{path}: old_string has {n} matches; make old_string unique"
                ));
            }
        };
        let edited = [&text[..at], new, &text[at + old.len()..]].concat();
        if edited.len() > limit {
            return Err(format!(
                "the edited {path} would be {} bytes, over the edit limit of {limit} bytes",
                edited.len()
            ));
        }
        let answer = format!(
            "edited {path}: replaced 1 occurrence ({} bytes, was {})",
            edited.len(),
            text.len()
        );
        Ok((edited, answer))
    })
}

/// Counts occurrences of `needle`, overlapping ones included: `aa` occurs
/// twice in `aaa`, and replacing "the" one would be a guess.
fn count_matches(haystack: &str, needle: &str) -> usize {
    let mut count = 0;
    let mut from = 0;
    while let Some(i) = haystack[from..].find(needle) {
        count += 1;
        let at = from + i;
        from = at + haystack[at..].chars().next().map_or(1, char::len_utf8);
    }
    count
}
