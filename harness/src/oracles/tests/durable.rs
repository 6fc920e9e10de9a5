//! `durable.effect`: a file write the run log holds as completed must be on
//! disk with what the provider asked to write. Made to fail by the states a
//! power cut leaves under a runner that skips a sync: the file empty (its
//! bytes never synced) or gone (its rename never made durable).

use super::*;

/// `good()` whose turn wrote `notes.txt` through the runner (ACP
/// `fs/write_text_file`), the workspace holding `file` at the end.
fn wrote_notes(file: Option<&str>) -> Evidence {
    let mut e = good();
    let settled = e.events.split_off(3);
    e.events.extend([
        event(
            4,
            "tool.executing",
            json!({ "turn_row": 1, "key": "call_1", "kind": "write_text_file",
                    "detail": { "path": "notes.txt", "bytes": 23 } }),
        ),
        event(
            5,
            "tool.outcome",
            json!({ "key": "call_1", "status": "completed", "outcome": { "bytes": 23 } }),
        ),
    ]);
    for (i, mut ev) in settled.into_iter().enumerate() {
        ev["seq"] = json!(6 + i);
        e.events.push(ev);
    }
    e.journal.push(entry(
        EntryKind::Out,
        None,
        json!({ "jsonrpc": "2.0", "id": 7, "method": "fs/write_text_file",
                "params": { "sessionId": "s", "path": "notes.txt", "content": "written by write-notes\n" } }),
    ));
    e.workspace_root = "/ws".into();
    e.workspace = Some(
        file.map(|c| ("notes.txt".to_owned(), c.to_owned()))
            .into_iter()
            .collect(),
    );
    e
}

#[test]
fn durable_effect_passes_a_write_that_is_on_disk() {
    let results = judge(&wrote_notes(Some("written by write-notes\n")));
    assert_eq!(worst(&results), Verdict::Pass, "{results:#?}");
}

#[test]
fn durable_effect_catches_a_file_whose_bytes_were_never_synced() {
    assert_only_fails(
        &wrote_notes(Some("")),
        "durable.effect",
        "the file holds 0 bytes no write asked for",
    );
}

#[test]
fn durable_effect_catches_a_file_whose_rename_was_never_synced() {
    assert_only_fails(
        &wrote_notes(None),
        "durable.effect",
        "the file is not in the workspace",
    );
}

#[test]
fn durable_effect_judges_only_what_the_run_log_holds_as_done() {
    // The outcome never became durable (the call is uncertain after the
    // cut): the runner claims nothing, whatever the file holds.
    let mut e = wrote_notes(None);
    e.events[4]["data"]["status"] = json!("uncertain");
    assert_eq!(verdict(&judge(&e), "durable.effect").0, Verdict::Pass);
    // An absolute path inside the workspace is the same file.
    let mut e = wrote_notes(Some(""));
    e.events[3]["data"]["detail"]["path"] = json!("/ws/notes.txt");
    e.journal.last_mut().unwrap().data["params"]["path"] = json!("/ws/notes.txt");
    assert_only_fails(&e, "durable.effect", "/ws/notes.txt");
}

#[test]
fn durable_effect_is_unknown_without_the_workspace_or_the_request() {
    let mut e = wrote_notes(None);
    e.workspace = None;
    let (v, m) = verdict(&judge(&e), "durable.effect");
    assert_eq!(v, Verdict::Unknown, "{m}");
    assert!(m.contains("the workspace was never read"), "{m}");
    let mut e = wrote_notes(Some("x"));
    e.journal.pop();
    let (v, m) = verdict(&judge(&e), "durable.effect");
    assert_eq!(v, Verdict::Unknown, "{m}");
    assert!(m.contains("the journal never asked for"), "{m}");
}
