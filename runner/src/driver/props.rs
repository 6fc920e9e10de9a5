//! Property tests of every decoder in the runner that reads untrusted bytes:
//! the stdio line reader, the Codex and ACP drivers behind it (fed by a real
//! process that prints arbitrary or mutated JSON-RPC), the SSE block parser
//! and bounded line reader of the HTTP drivers, the native checkpoint decoder
//! and the profiles file. Each one must answer every input with a value or a
//! clear error: no panic, and memory bounded by the decoder's own limits.
//! Inputs are arbitrary bytes and mutations (byte flips, insertions,
//! deletions, truncations) of real messages, so the decoders are reached past
//! their first check. The API bodies are covered over HTTP against a real
//! runnerd in the harness (`tests/api_props.rs`).

use std::io::Write as _;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::http::{Sse, find_blank_line, parse_block, read_line_bounded};
use super::stdio::{LINE_BYTES_MAX, Line, read_lines};
use crate::native::checkpoint::Checkpoint;

/// One edit of a mutation: (position, byte, kind).
type Edit = (usize, u8, u8);

/// `sample` with `edits` applied: 0 flips a byte, 1 inserts, 2 deletes, 3
/// truncates.
fn mutate(sample: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut out = sample.to_vec();
    for &(at, byte, kind) in edits {
        let i = if out.is_empty() { 0 } else { at % out.len() };
        match kind % 4 {
            0 if !out.is_empty() => out[i] ^= byte | 1,
            1 => out.insert(i.min(out.len()), byte),
            2 if !out.is_empty() => {
                out.remove(i);
            }
            3 => out.truncate(i),
            _ => {}
        }
    }
    out
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    prop::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 0..6)
}

/// Lines a Codex app-server or an ACP agent sends: responses to the first
/// requests, notifications, server requests.
fn rpc_samples() -> Vec<Value> {
    vec![
        json!({"id": 0, "result": {"userAgent": "codex"}}),
        json!({"id": 1, "result": {"thread": {"id": "thr_1"}}}),
        json!({"id": 2, "result": {"turn": {"id": "turn_1", "status": "inProgress", "items": []}}}),
        json!({"id": 3, "result": {"thread": {"id": "thr_1", "turns": [{"id": "turn_1", "status": "completed", "items": [{"type": "userMessage", "clientId": "m1"}]}]}}}),
        json!({"method": "turn/started", "params": {"threadId": "thr_1", "turn": {"id": "turn_1"}}}),
        json!({"method": "item/completed", "params": {"threadId": "thr_1", "turnId": "turn_1", "item": {"type": "agentMessage", "id": "msg_1", "text": "hi"}}}),
        json!({"method": "turn/completed", "params": {"threadId": "thr_1", "turn": {"id": "turn_1", "status": "completed"}}}),
        json!({"id": 7, "method": "item/commandExecution/requestApproval", "params": {"threadId": "thr_1", "turnId": "turn_1", "itemId": "call_1"}}),
        json!({"id": null, "error": {"code": -32700, "message": "parse error"}}),
        json!({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1, "agentCapabilities": {"loadSession": true}}}),
        json!({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s1"}}),
        json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "x"}, "_meta": {"messageId": "m1"}}}}),
        json!({"jsonrpc": "2.0", "id": 5, "method": "fs/write_text_file", "params": {"sessionId": "s1", "path": "a.txt", "content": "x"}}),
        json!({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}}),
    ]
}

/// A provider's whole output: mutated sample lines and raw garbage lines.
fn provider_output() -> impl Strategy<Value = Vec<u8>> {
    let samples = rpc_samples();
    let n = samples.len();
    let line = prop_oneof![
        3 => (0..n, edits()).prop_map(move |(i, e)| {
            mutate(samples[i].to_string().as_bytes(), &e)
        }),
        1 => prop::collection::vec(any::<u8>(), 0..64),
    ];
    prop::collection::vec(line, 0..12).prop_map(|lines| {
        let mut out = Vec::new();
        for mut l in lines {
            l.retain(|b| *b != b'\n');
            out.extend(l);
            out.push(b'\n');
        }
        out
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Every line the stdio reader produces from `bytes`, up to its `Eof`.
fn read_all(bytes: Vec<u8>) -> Vec<Line> {
    runtime().block_on(async move {
        let mut rx = read_lines(std::io::Cursor::new(bytes), u64::MAX);
        let mut lines = Vec::new();
        while let Some((line, _)) = rx.recv().await {
            let eof = matches!(line, Line::Eof);
            lines.push(line);
            if eof {
                break;
            }
        }
        lines
    })
}

/// A real process that prints `bytes` and exits, with piped stdio, as a
/// provider is started.
fn printing_process(bytes: &[u8]) -> (tempfile::NamedTempFile, tokio::process::Child) {
    let mut file = tempfile::NamedTempFile::new().expect("a temp file");
    file.write_all(bytes).expect("written");
    let child = tokio::process::Command::new("cat")
        .arg(file.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("cat starts");
    (file, child)
}

const IDLE: Duration = Duration::from_millis(200);

/// The Codex driver through a whole turn against `bytes`.
async fn drive_codex(bytes: Vec<u8>) {
    let (_file, mut child) = printing_process(&bytes);
    let mut d = super::codex::CodexDriver::attach(&mut child, super::Bounds::with_idle(IDLE));
    let _ = d.initialize().await;
    let _ = d.open_conversation("/tmp").await;
    let _ = d.resume_conversation("thr_1", "/tmp").await;
    let _ = d.start_turn("thr_1", "hello", "m1").await;
    for _ in 0..16 {
        if d.next_event().await.is_err() {
            break;
        }
    }
    let _ = d
        .lookup_turn(
            "thr_1",
            &super::TurnLookup::ClientId {
                id: "m1".into(),
                sent: super::Sent::default(),
            },
        )
        .await;
}

/// The ACP driver through a whole turn against `bytes`.
async fn drive_acp(bytes: Vec<u8>) {
    let (_file, mut child) = printing_process(&bytes);
    let mut d = super::acp::AcpDriver::attach(&mut child, super::Bounds::with_idle(IDLE), "1");
    let _ = d.initialize().await;
    let _ = d.open_conversation("/tmp").await;
    let _ = d.resume_conversation("s1", "/tmp").await;
    let _ = d.start_turn("s1", "hello", "m1").await;
    for _ in 0..16 {
        if d.next_event().await.is_err() {
            break;
        }
    }
}

fn sse_samples() -> Vec<&'static [u8]> {
    vec![
        b"event: message\ndata: {\"type\":\"session.idle\",\"properties\":{\"sessionID\":\"s\"}}",
        b"data: {\"type\":\"response.output_text.delta\",\"sequence_number\":3,\"delta\":\"hi\"}",
        b"data: {\"type\":\"message.part.updated\",\n data: \"properties\":{}}",
        b": keep-alive",
        b"data: [DONE]",
    ]
}

fn valid_checkpoint() -> Vec<u8> {
    let mut c = Checkpoint::new("gpt-test", "conv-1", "m1", "Create hello.txt");
    c.record_response(vec![json!({
        "type": "function_call", "call_id": "call_1", "name": "Bash",
        "arguments": "{\"command\":\"true\"}"
    })])
    .expect("a well-formed call");
    c.to_json().to_string().into_bytes()
}

const PROFILES: &str = "[profile.custom]\ndriver = \"codex\"\ncommand = [\"/bin/true\", \"{provider_dir}\"]\napproval = \"accept\"\n";

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_stdio_reader_answers_any_bytes_with_lines_then_eof(
        bytes in prop_oneof![provider_output(), prop::collection::vec(any::<u8>(), 0..512)]
    ) {
        let lines = read_all(bytes);
        prop_assert!(matches!(lines.last(), Some(Line::Eof)));
        for l in &lines {
            if let Line::Msg(v) = l {
                prop_assert!(v.is_object());
            }
        }
    }

    #[test]
    fn sse_blocks_and_bounded_lines_never_panic(
        i in 0..5usize,
        e in edits(),
        raw in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let block = mutate(sse_samples()[i], &e);
        for input in [&block, &raw] {
            match parse_block(input) {
                None | Some(Sse::Event(_)) | Some(Sse::Malformed(_)) | Some(Sse::Eof) => {}
            }
            if let Some((end, after)) = find_blank_line(input) {
                prop_assert!(end <= after && after <= input.len());
            }
            let lines = runtime().block_on(async {
                let mut reader = tokio::io::BufReader::new(std::io::Cursor::new(input.clone()));
                let mut lines = Vec::new();
                loop {
                    let mut line = Vec::new();
                    match read_line_bounded(&mut reader, &mut line).await {
                        Ok(0) | Err(_) => return lines,
                        Ok(_) => lines.push(line),
                    }
                }
            });
            prop_assert!(lines.iter().all(|l| l.len() <= super::http::LINE_BYTES_MAX));
        }
    }

    #[test]
    fn the_checkpoint_decoder_answers_any_text_with_a_checkpoint_or_an_error(
        e in edits(),
        raw in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        for input in [mutate(&valid_checkpoint(), &e), raw] {
            if let Ok(v) = serde_json::from_slice::<Value>(&input)
                && let Ok(c) = Checkpoint::from_json(&v)
            {
                // What decodes encodes back to the same value.
                prop_assert_eq!(c.to_json(), v);
            }
        }
    }

    #[test]
    fn the_profiles_file_answers_any_text_with_profiles_or_a_placed_error(
        e in edits(),
        raw in ".{0,200}",
    ) {
        let dir = tempfile::tempdir().expect("a temp dir");
        for input in [mutate(PROFILES.as_bytes(), &e), raw.into_bytes()] {
            let path = dir.path().join("profiles.toml");
            std::fs::write(&path, &input).expect("written");
            if let Err(err) = crate::profiles::load(std::path::Path::new("/x/turncut"), Some(&path)) {
                let text = format!("{err:#}");
                prop_assert!(!text.is_empty());
            }
        }
    }
}

proptest! {
    // Each case starts a real process.
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_codex_and_acp_drivers_answer_any_provider_output_without_panicking(
        bytes in provider_output()
    ) {
        let rt = runtime();
        rt.block_on(drive_codex(bytes.clone()));
        rt.block_on(drive_acp(bytes));
    }
}

#[test]
fn a_line_over_the_limit_ends_the_stream_after_one_malformed() {
    let mut bytes = vec![b'x'; LINE_BYTES_MAX + 10];
    bytes.extend(b"\n{\"id\":1}\n");
    let lines = read_all(bytes);
    assert!(matches!(lines.as_slice(), [Line::Malformed(_), Line::Eof]));
}
