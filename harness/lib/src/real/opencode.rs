//! The real `opencode serve`: its command line against the fake model API,
//! and its durable turns read back from its store after the cell.
//! What each setting is for, as measured on 1.18.33, is in
//! `docs/real-providers.md`.

use serde_json::{Value, json};
use wire::recorded::RecordedTurn;

use super::Product;

/// The model name the configuration declares for the fake model API.
const FAKE_MODEL: &str = "turncut-fake-model";

/// The variable the runner names its one-shot credential FIFO in
/// (`credential_fifo = true`): OpenCode gives its tools its whole
/// environment, so the key itself must not be in it.
pub(crate) const CREDENTIAL_FIFO_ENV: &str = "TURNCUT_CREDENTIAL_FIFO";

/// Offline and private: no models.dev fetch (the model is declared), no
/// self-update, no LSP downloads, no project or `~/.claude` configuration,
/// npm offline (OpenCode installs its plugin package in the background).
const OFFLINE_ENV: [(&str, &str); 7] = [
    ("OPENCODE_DISABLE_MODELS_FETCH", "1"),
    ("OPENCODE_DISABLE_AUTOUPDATE", "1"),
    ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1"),
    ("OPENCODE_DISABLE_PROJECT_CONFIG", "1"),
    ("OPENCODE_DISABLE_CLAUDE_CODE", "1"),
    ("OPENCODE_DISABLE_EXTERNAL_SKILLS", "1"),
    ("npm_config_offline", "true"),
];

/// The configuration: the built-in `openai` provider (Responses API) at the
/// fake model API, its key read from the runner's FIFO, one declared model,
/// `bash` asking for permission (the runner answers), no session titles
/// (an extra model request per session), no autoupdate or sharing.
fn config(model_url: &str) -> Value {
    json!({
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": false,
        "share": "disabled",
        "model": format!("openai/{FAKE_MODEL}"),
        "small_model": format!("openai/{FAKE_MODEL}"),
        "agent": { "title": { "disable": true } },
        "provider": { "openai": {
            "options": {
                "baseURL": format!("{model_url}/v1"),
                "apiKey": format!("{{file:{{env:{CREDENTIAL_FIFO_ENV}}}}}"),
            },
            "models": { FAKE_MODEL: { "name": "turncut fake model", "tool_call": true } },
        } },
        "permission": { "bash": "ask" },
    })
}

/// The argv of `opencode <subcommand>` (`serve`, on loopback, or `acp`)
/// with everything under the product's home (`HOME`, the XDG directories,
/// `opencode.json`).
pub(super) fn command(
    p: &Product,
    model_url: &str,
    subcommand: &[&str],
) -> anyhow::Result<Vec<String>> {
    let home = &p.home;
    let config_file = home.join("opencode.json");
    std::fs::write(&config_file, config(model_url).to_string())?;
    let dir = |rel: &str| home.join(rel).display().to_string();
    // OpenCode (a Bun executable) unpacks a native library of 5 MB into
    // its temporary directory at every start and never removes it: in the
    // product's home it goes with the home, not into the machine's /tmp.
    std::fs::create_dir_all(home.join("tmp"))?;
    let mut cmd: Vec<String> = vec!["env".into()];
    for var in wire::secret::CREDENTIAL_VARS {
        cmd.extend(["-u".to_owned(), (*var).to_owned()]);
    }
    cmd.extend([
        format!("HOME={}", home.display()),
        format!("XDG_CONFIG_HOME={}", dir(".config")),
        format!("XDG_DATA_HOME={}", dir(".local/share")),
        format!("XDG_CACHE_HOME={}", dir(".cache")),
        format!("XDG_STATE_HOME={}", dir(".local/state")),
        format!("OPENCODE_CONFIG={}", config_file.display()),
        format!("TMPDIR={}", dir("tmp")),
    ]);
    cmd.extend(OFFLINE_ENV.iter().map(|(k, v)| format!("{k}={v}")));
    cmd.push(p.bin.display().to_string());
    cmd.extend(subcommand.iter().map(|a| (*a).to_owned()));
    if subcommand == ["serve"] {
        cmd.extend(["--hostname", "127.0.0.1", "--port", "0"].map(str::to_owned));
    }
    Ok(cmd)
}

/// A recorded turn and its user message's text.
pub(super) type TurnText = (RecordedTurn, String);

/// Where OpenCode keeps its sessions under the product's home
/// (`$XDG_DATA_HOME/opencode`, SQLite since 1.2).
const STORE: &str = ".local/share/opencode/opencode.db";

/// Every user message of every session in the product's store, as a turn
/// with its text, once the product is dead: read from its SQLite store
/// (`STORE`) as `GET /session/{id}/message` serves it, with no server
/// started (one was 2-3 s of every cell: `docs/real-providers.md`). A
/// product that never started has no store and recorded nothing.
pub(super) fn recorded_turns(p: &Product) -> Result<Vec<TurnText>, String> {
    let path = p.home.join(STORE);
    if !path.exists() {
        return Ok(Vec::new());
    }
    let db = rusqlite::Connection::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    read_store(&db).map_err(|e| format!("{}: {e}", path.display()))
}

/// The turns of every session of an OpenCode store.
fn read_store(db: &rusqlite::Connection) -> rusqlite::Result<Vec<TurnText>> {
    let sessions: Vec<String> = db
        .prepare("SELECT id FROM session ORDER BY time_created, id")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut out = Vec::new();
    for id in &sessions {
        let messages = session_messages(db, id)?;
        for m in messages.iter().filter(|m| m["info"]["role"] == "user") {
            out.push(turn_of(id, m, &messages));
        }
    }
    Ok(out)
}

/// A session's messages as the session API serves them, in id order (the
/// order OpenCode's ids, and the runner's client ids, are made to sort
/// in): `{info, parts}`, `info` the stored message with its `id` and
/// `sessionID`, `parts` its stored parts with theirs.
fn session_messages(db: &rusqlite::Connection, session: &str) -> rusqlite::Result<Vec<Value>> {
    let rows: Vec<(String, String)> = db
        .prepare("SELECT id, data FROM message WHERE session_id = ?1 ORDER BY id")?
        .query_map([session], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut parts = db.prepare("SELECT id, data FROM part WHERE message_id = ?1 ORDER BY id")?;
    let mut out = Vec::new();
    for (id, data) in rows {
        let info = stored(&data, &[("id", &id), ("sessionID", session)]);
        let parts: Vec<Value> = parts
            .query_map([&id], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })?
            .map(|row| {
                row.map(|(pid, d)| {
                    stored(
                        &d,
                        &[("id", &pid), ("messageID", &id), ("sessionID", session)],
                    )
                })
            })
            .collect::<rusqlite::Result<_>>()?;
        out.push(json!({ "info": info, "parts": parts }));
    }
    Ok(out)
}

/// A stored JSON object with the fields its row keeps in columns; a row
/// that does not parse is an empty object (it names no turn).
fn stored(data: &str, columns: &[(&str, &str)]) -> Value {
    let mut v: Value = serde_json::from_str(data).unwrap_or_else(|_| json!({}));
    if let Some(o) = v.as_object_mut() {
        for (k, val) in columns {
            o.insert((*k).to_owned(), json!(val));
        }
    }
    v
}

/// A user message as a turn, its status its last answer's
/// (`wire::stores::opencode::turn_status`, as the runner's driver reads it),
/// and its text.
fn turn_of(session: &str, user: &Value, messages: &[Value]) -> TurnText {
    let id = user["info"]["id"].as_str().unwrap_or_default().to_owned();
    let status = wire::stores::opencode::turn_status(messages, &id);
    let text = user["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|p| p["text"].as_str())
        .unwrap_or_default();
    let controller = wire::client_id::controller_id(&id);
    let authorized_by = controller
        .strip_suffix(wire::client_id::CONTINUATION)
        .unwrap_or(&controller)
        .to_owned();
    let turn = RecordedTurn {
        thread: session.to_owned(),
        turn: id.clone(),
        client_id: Some(id),
        status: status.to_owned(),
        continuation: wire::marker::is_continuation(text),
        authorized_by,
        model_requests: None,
    };
    (turn, text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store as OpenCode 1.18.33 writes it (the columns the reading
    /// uses; rows as a real cell's, 2026-12-06): a turn whose first answer
    /// ran a tool and whose last one stopped, and a second turn cut before
    /// any answer.
    fn store() -> rusqlite::Connection {
        let db = rusqlite::Connection::open_in_memory().unwrap();
        db.execute_batch(
            "CREATE TABLE session (id text PRIMARY KEY, time_created integer NOT NULL);
             CREATE TABLE message (id text PRIMARY KEY, session_id text NOT NULL,
               time_created integer NOT NULL, data text NOT NULL);
             CREATE TABLE part (id text PRIMARY KEY, message_id text NOT NULL,
               session_id text NOT NULL, data text NOT NULL);
             INSERT INTO session VALUES ('ses_1', 1);
             INSERT INTO message VALUES ('msg_001a_m1', 'ses_1', 1, '{\"role\":\"user\",\"time\":{\"created\":1}}');
             INSERT INTO message VALUES ('msg_24c7b', 'ses_1', 3,
               '{\"parentID\":\"msg_001a_m1\",\"role\":\"assistant\",\"time\":{\"created\":3,\"completed\":4},\"finish\":\"stop\"}');
             INSERT INTO message VALUES ('msg_24c7a', 'ses_1', 2,
               '{\"parentID\":\"msg_001a_m1\",\"role\":\"assistant\",\"time\":{\"created\":2,\"completed\":3},\"finish\":\"tool-calls\"}');
             INSERT INTO message VALUES ('msg_24c8_m2', 'ses_1', 5, '{\"role\":\"user\",\"time\":{\"created\":5}}');
             INSERT INTO part VALUES ('prt_1', 'msg_001a_m1', 'ses_1', '{\"type\":\"text\",\"text\":\"Do two steps\"}');
             INSERT INTO part VALUES ('prt_2', 'msg_24c8_m2', 'ses_1', '{\"type\":\"text\",\"text\":\"And a third\"}');",
        )
        .unwrap();
        db
    }

    /// A turn's status is its last answer's in id order (not the row
    /// order), its text its user message's text part; a turn with no
    /// answer is interrupted.
    #[test]
    fn the_store_reads_as_the_session_api_serves_it() {
        let turns = read_store(&store()).unwrap();
        let got: Vec<(&str, &str, &str)> = turns
            .iter()
            .map(|(t, text)| (t.turn.as_str(), t.status.as_str(), text.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("msg_001a_m1", "completed", "Do two steps"),
                ("msg_24c8_m2", "interrupted", "And a third"),
            ]
        );
        assert!(turns.iter().all(|(t, _)| t.thread == "ses_1"));
    }

    /// A product that never started stored nothing: no turn, no error.
    #[test]
    fn no_store_is_no_turn() {
        let home = tempfile::tempdir().unwrap();
        let p = Product {
            real: &wire::profiles::REAL[0],
            bin: "opencode".into(),
            home: home.path().to_owned(),
        };
        assert!(recorded_turns(&p).unwrap().is_empty());
    }
}
