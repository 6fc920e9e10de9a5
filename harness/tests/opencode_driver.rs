//! The runner's OpenCode driver against the real `fake-provider opencode` process: a full
//! turn with a tool and a permission, then a SIGKILL of the server mid-turn, a restart on
//! the same state directory, and the "was this turn recorded?" lookups that recovery
//! depends on.
//!
//! The test lives here rather than in `runner/tests` because only the `turncut` build
//! reaches the fake as a separate process (`turncut fake-provider …`). Every wait is
//! bounded by the driver's idle timeout; nothing sleeps to synchronize.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use runner::driver::opencode::OpenCodeDriver;
use runner::driver::{DriverError, FoundTurn, ProviderEvent, ProviderTurnStatus, Sent, TurnLookup};
use tokio::process::{Child, Command};

const IDLE: Duration = Duration::from_secs(15);

fn spawn(state: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_turncut"))
        .args(["fake-provider", "opencode", "--state-dir"])
        .arg(state)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the fake")
}

async fn connect(child: &mut Child) -> OpenCodeDriver {
    let mut driver = OpenCodeDriver::attach(child, runner::driver::Bounds::with_idle(IDLE))
        .await
        .expect("attach");
    driver.initialize().await.expect("initialize");
    driver
}

/// Plays events until the turn completes, accepting permissions; returns the status and
/// the completed items.
async fn finish_turn(driver: &mut OpenCodeDriver, turn: &str) -> (String, Vec<serde_json::Value>) {
    let mut items = Vec::new();
    loop {
        match driver.next_event().await.expect("an event") {
            ProviderEvent::Request {
                request_id,
                method,
                turn_id,
                ..
            } => {
                assert_eq!(
                    (method.as_str(), turn_id.as_str()),
                    ("permission.asked", turn)
                );
                driver.answer(&request_id, "accept").await.expect("answer");
            }
            ProviderEvent::ItemCompleted { turn_id, item } => {
                assert_eq!(turn_id, turn);
                items.push(item);
            }
            ProviderEvent::TurnCompleted { turn_id, end } => {
                assert_eq!(turn_id, turn);
                return (end.status, items);
            }
            ProviderEvent::Other(_) => {}
            other => panic!("unexpected event {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_cut_by_sigkill_looks_up_interrupted_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut child = spawn(&state);
    let mut driver = connect(&mut child).await;
    let session = driver.open_conversation("/").await.expect("session");

    // One whole turn: a permission, a tool, completion.
    let m1 = driver.client_id("m-1", false);
    assert!(m1.starts_with("msg_") && m1.ends_with("_m-1"), "{m1}");
    let turn = driver
        .start_turn(&session, "Create hello.txt", &m1)
        .await
        .expect("start");
    assert_eq!(turn, m1);
    let (status, items) = finish_turn(&mut driver, &m1).await;
    assert_eq!(status, "completed");
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0]["status"], "completed");
    let found = driver
        .lookup_turn(
            &session,
            &TurnLookup::ClientId {
                id: m1.clone(),
                sent: Sent::default(),
            },
        )
        .await
        .expect("lookup");
    assert_eq!(
        found,
        Some(FoundTurn {
            id: m1.clone(),
            status: ProviderTurnStatus::Completed,
            upstream: None,
        })
    );

    // A second turn, cut while its permission is pending.
    let m2 = driver.client_id("m-2", false);
    assert!(m2 > m1, "{m2} > {m1}");
    driver
        .start_turn(&session, "Again", &m2)
        .await
        .expect("start");
    loop {
        if let ProviderEvent::Request { .. } = driver.next_event().await.expect("an event") {
            break;
        }
    }
    child.kill().await.expect("SIGKILL the fake");
    match driver.next_event().await {
        Err(DriverError::Exited) => {}
        other => panic!("a killed server reads as exited, not {other:?}"),
    }
    assert!(matches!(
        driver
            .lookup_turn(&session, &TurnLookup::TurnId(m2.clone()))
            .await,
        Err(DriverError::Exited)
    ));

    // Restart on the same state: the store is read back intact.
    let mut child = spawn(&state);
    let mut driver = connect(&mut child).await;
    driver.resume_conversation(&session).await.expect("resume");
    let lookup = |id: &str| TurnLookup::TurnId(id.to_owned());
    assert_eq!(
        driver
            .lookup_turn(&session, &lookup(&m2))
            .await
            .expect("lookup"),
        Some(FoundTurn {
            id: m2.clone(),
            status: ProviderTurnStatus::Interrupted,
            upstream: None,
        })
    );
    assert_eq!(
        driver
            .lookup_turn(&session, &lookup(&m1))
            .await
            .expect("lookup"),
        Some(FoundTurn {
            id: m1.clone(),
            status: ProviderTurnStatus::Completed,
            upstream: None,
        })
    );
    let never = format!("{}_never", &m2[..20]);
    assert_eq!(
        driver
            .lookup_turn(&session, &lookup(&never))
            .await
            .expect("lookup"),
        None
    );
    // A session the server does not have (a power cut took it before the
    // fake, like the real OpenCode, synced it) is a lost conversation, as a
    // Codex thread never written: the runner opens a fresh one.
    assert!(matches!(
        driver.resume_conversation("ses_unknown").await,
        Err(DriverError::ConversationGone(id)) if id == "ses_unknown"
    ));

    // The one continuation: sorts after everything the session holds, completes.
    let c2 = driver.client_id("m-2", true);
    assert!(c2.ends_with("_m-2__continuation"), "{c2}");
    driver
        .start_turn(&session, "[turncut:continue] Again", &c2)
        .await
        .expect("continuation accepted");
    let (status, _) = finish_turn(&mut driver, &c2).await;
    assert_eq!(status, "completed");
    let turns = wire::stores::opencode::recorded_turns(&state);
    let statuses: Vec<(&str, &str, bool)> = turns
        .iter()
        .map(|t| (t.turn.as_str(), t.status.as_str(), t.continuation))
        .collect();
    assert_eq!(
        statuses,
        [
            (m1.as_str(), "completed", false),
            (m2.as_str(), "interrupted", false),
            (c2.as_str(), "completed", true),
        ]
    );

    // Everything the driver sent, as the fake journaled it, is what the spec accepts.
    let journal = wire::journal::read(&state.join("journal.jsonl")).expect("journal");
    let spec = conformance::opencode();
    let mut requests = 0;
    for entry in journal
        .iter()
        .filter(|e| e.kind == wire::journal::EntryKind::In)
    {
        let d = &entry.data;
        let body = (!d["body"].is_null()).then_some(&d["body"]);
        let (method, path) = (d["method"].as_str().unwrap(), d["path"].as_str().unwrap());
        spec.check_request(method, path, body)
            .unwrap_or_else(|v| panic!("the driver sent what the spec rejects:\n{v}"));
        requests += 1;
    }
    assert!(requests >= 10, "{requests} requests");
}
