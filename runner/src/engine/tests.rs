//! The actor's early returns, each forced: a wake that arrives while the
//! actor decides to return keeps it (the race `Engine::wake` lost before),
//! an actor of a task that does not exist retires so the next wake starts a
//! new one, and a task unsettled with no run is settled with a cause
//! instead of left running with no actor. A failed read, the third early
//! return, needs the cut-point harness: `harness/tests/runnerd/reads.rs`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::{Engine, EngineOptions};
use crate::store::{Store, TaskState};

/// How long a test waits for the actor's event before it fails.
const WAIT: Duration = Duration::from_secs(10);

fn engine(dir: &std::path::Path) -> Arc<Engine> {
    let (store, epoch) = Store::open(&dir.join("state")).unwrap();
    Engine::new(
        store,
        EngineOptions {
            state_dir: dir.join("state"),
            epoch,
            bounds: crate::driver::Bounds::with_idle(Duration::from_secs(5)),
            exit_grace: Duration::ZERO,
            term_grace: Duration::from_millis(100),
            kill_grace: Duration::from_millis(100),
            profiles: BTreeMap::new(),
            credential: None,
        },
    )
}

fn has_actor(engine: &Engine, task_id: &str) -> bool {
    engine.actors.lock().unwrap().contains_key(task_id)
}

#[tokio::test]
async fn a_wake_waiting_when_the_actor_would_return_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let (tx, mut rx) = mpsc::unbounded_channel();
    engine
        .actors
        .lock()
        .unwrap()
        .insert("t1".into(), tx.clone());
    // A wake sent after the actor read "no such task", before it returned:
    // `wake` saw the channel open and counted the wake as delivered.
    tx.send(()).unwrap();
    assert!(
        !engine.retire("t1", &mut rx),
        "an actor with a wake waiting must read the task again"
    );
    assert!(has_actor(&engine, "t1"));
    assert!(engine.retire("t1", &mut rx), "no wake waiting: it may go");
    assert!(!has_actor(&engine, "t1"), "and its entry goes with it");
    assert!(
        tx.send(()).is_err(),
        "a wake into the retired channel is refused, never counted as delivered"
    );
}

#[tokio::test]
async fn an_actor_of_a_task_that_does_not_exist_retires_and_the_next_wake_starts_one() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let (tx, rx) = mpsc::unbounded_channel();
    engine.actors.lock().unwrap().insert("ghost".into(), tx);
    let actor = Arc::clone(&engine).actor("ghost".into(), rx);
    tokio::time::timeout(WAIT, actor)
        .await
        .expect("the actor of a task that does not exist returns");
    assert!(!has_actor(&engine, "ghost"), "it retired");
    engine.wake("ghost");
    assert!(
        has_actor(&engine, "ghost"),
        "a wake after the return starts a new actor"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_unsettled_with_no_run_is_settled_with_a_cause() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let workspace = dir.path().display().to_string();
    let epoch = engine.epoch();
    engine
        .store()
        .call(move |db| {
            db.admit(
                "t1",
                "m1",
                "hello",
                "runner-codex",
                &workspace,
                "run-1",
                epoch,
            )?;
            // Only a corrupt store holds this: a running task whose row
            // names no run.
            db.conn()
                .execute(
                    "UPDATE tasks SET state = 'running', current_run = NULL WHERE task_id = 't1'",
                    [],
                )
                .map_err(crate::store::StoreError::from)?;
            Ok(())
        })
        .await
        .unwrap();
    let mut events = engine.store().subscribe();
    engine.wake("t1");
    let settled = async {
        loop {
            let (task, _) = events.recv().await.expect("the store's events");
            let state = engine
                .store()
                .call(move |db| db.task(&task))
                .await
                .unwrap()
                .map(|t| t.state);
            if state.is_some_and(TaskState::settled) {
                break;
            }
        }
    };
    tokio::time::timeout(WAIT, settled)
        .await
        .expect("the task settles instead of staying running with no actor");
    let task = engine
        .store()
        .call(|db| db.task("t1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(task.state, TaskState::Failed);
    let cause = task.cause.expect("a cause");
    assert_eq!(cause.code.as_str(), "storage_failed");
    assert!(!cause.recoverable);
    assert!(cause.message.contains("no run"), "{}", cause.message);
    assert!(has_actor(&engine, "t1"), "the settled task keeps its actor");
}
