//! Property tests of what reads untrusted input in the harness and at the
//! runner's edge: scenario files (arbitrary and mutated real ones must parse
//! or give an error placed inside the file, never panic), and the control
//! API of a real runnerd (arbitrary and mutated bodies, paths and queries
//! must get a JSON answer below 500, and the runner must stay up).

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use harness::runner_client::{RunnerClient, RunnerCommand, RunnerProcess};
use proptest::prelude::*;
use serde_json::{Value, json};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_turncut"))
}

/// Line-level edits of a text: (line, kind) with 0 drop, 1 duplicate, 2
/// swap with the next, 3 cut the line in half.
fn edit_lines(text: &str, edits: &[(usize, u8)]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for &(at, kind) in edits {
        if lines.is_empty() {
            break;
        }
        let i = at % lines.len();
        match kind % 4 {
            0 => {
                lines.remove(i);
            }
            1 => lines.insert(i, lines[i].clone()),
            2 if i + 1 < lines.len() => lines.swap(i, i + 1),
            _ => {
                let half = lines[i].len() / 2;
                let cut: String = lines[i].chars().take(half).collect();
                lines[i] = cut;
            }
        }
    }
    lines.join("\n")
}

fn scenario_texts() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let mut texts: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    texts.sort();
    texts
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn scenario_files_parse_or_name_the_place_of_the_error(
        i in any::<usize>(),
        edits in prop::collection::vec((any::<usize>(), any::<u8>()), 0..5),
        raw in ".{0,300}",
        which in any::<bool>(),
    ) {
        let texts = scenario_texts();
        let text = if which { edit_lines(&texts[i % texts.len()], &edits) } else { raw };
        if let Err(e) = harness::scenario::parse(&text, "s.toml") {
            prop_assert_eq!(e.path.as_str(), "s.toml");
            prop_assert!(e.line >= 1 && e.line <= text.lines().count().max(1) + 1, "{:?}", e);
            prop_assert!(e.col >= 1, "{:?}", e);
            prop_assert!(!e.message.is_empty());
        }
    }
}

/// A runner for the API properties, its workspace, and what must live as
/// long as it.
fn start_runner() -> (
    RunnerClient,
    std::path::PathBuf,
    RunnerProcess,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("ws")).unwrap();
    let mut cmd = RunnerCommand::via(exe()).command(&dir.path().join("state"), &[]);
    cmd.env_remove(cutpoint::ENV_ARM)
        .env_remove(cutpoint::ENV_SOCKET);
    let p = RunnerProcess::start(
        &mut cmd,
        &dir.path().join("state"),
        &dir.path().join("runnerd.stderr"),
        Duration::from_secs(20),
    )
    .unwrap();
    let ws = dir.path().join("ws");
    (p.client(), ws, p, dir)
}

/// One runnerd for the API properties, started on first use and killed with
/// the test process (its group is ours).
fn runner() -> &'static (RunnerClient, std::path::PathBuf) {
    static RUNNER: OnceLock<(
        RunnerClient,
        std::path::PathBuf,
        RunnerProcess,
        tempfile::TempDir,
    )> = OnceLock::new();
    // runnerd dies with the thread that started it (`PR_SET_PDEATHSIG`
    // follows the thread, not the process: `cutpoint::die_with_parent`), and
    // a test's thread ends with its test: the one runner the tests share is
    // started by a thread that lives as long as the test binary. (Started by
    // whichever test came first, it was killed under the property test when
    // that test ended: "Connection reset by peer", then "refused".)
    let r = RUNNER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            tx.send(start_runner()).unwrap();
            loop {
                std::thread::park();
            }
        });
        rx.recv().unwrap()
    });
    // Leak-free: the statics live until the test binary exits.
    Box::leak(Box::new((r.0.clone(), r.1.clone())))
}

fn bodies(ws: &str) -> Vec<Value> {
    vec![
        json!({"task_id": "t", "message_id": "m", "prompt": "p", "profile": "runner-codex", "workspace": ws}),
        json!({"message_id": "m2", "text": "more"}),
        json!({"message_id": "r1"}),
    ]
}

fn mutate_json(v: &Value, key: usize, replacement: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        let keys: Vec<String> = o.keys().cloned().collect();
        if !keys.is_empty() {
            o.insert(keys[key % keys.len()].clone(), replacement.clone());
        }
    }
    v
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,40}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(".{0,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

const PATHS: &[&str] = &["/v1/tasks", "/v1/tasks/t/messages", "/v1/tasks/t/retry"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_api_answers_any_body_path_or_query_with_json_below_500(
        path in 0..3usize,
        body in 0..3usize,
        key in any::<usize>(),
        replacement in json_value(),
        raw in prop::collection::vec(any::<u8>(), 0..200),
        segment in "[^/?#]{0,24}",
        query in ".{0,24}",
        use_raw in any::<bool>(),
    ) {
        let (client, ws) = runner();
        let valid = bodies(&ws.display().to_string());
        let answer = if use_raw {
            client.post_raw(PATHS[path], &String::from_utf8_lossy(&raw)).unwrap()
        } else {
            client.post(PATHS[path], &mutate_json(&valid[body], key, &replacement)).unwrap()
        };
        prop_assert!(answer.0 < 500, "{:?}", answer);
        prop_assert!(!answer.1.is_null(), "every answer is JSON: {:?}", answer);
        // A route that does not exist, and a route with the wrong method.
        let unknown = client.get(&format!("/v1/{}", urlencode(&segment))).unwrap();
        prop_assert!(unknown.0 < 500 && !unknown.1.is_null(), "{:?}", unknown);
        let wrong = client.get(PATHS[path]).unwrap();
        prop_assert!(wrong.0 < 500 && !wrong.1.is_null(), "{:?}", wrong);
        let segment: String = segment.chars().filter(|c| !c.is_control() && *c != ' ').collect();
        let get = client
            .get(&format!("/v1/tasks/{}/events?{}", urlencode(&segment), urlencode_query(&query)))
            .unwrap();
        prop_assert!(get.0 < 500, "{:?}", get);
        prop_assert!(!get.1.is_null(), "every answer is JSON: {:?}", get);
    }
}

#[test]
fn the_runner_is_still_up_after_the_api_properties() {
    let (client, _) = runner();
    let (status, body) = client.get("/v1/health").unwrap();
    assert_eq!(status, 200, "{body}");
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn urlencode_query(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"=&-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
