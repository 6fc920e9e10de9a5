//! `turncut demo`: one full Codex turn through the fake provider, then a SIGKILL
//! of the fake at every boundary of that turn, each followed by a restart on
//! the same state and a `thread/read` of what it recorded.
//!
//! It is the first end-to-end job of the project and a check of the fake's
//! durability contract: a turn is recorded from `codex.turn.recorded` on and
//! never before, it reads back completed only after `codex.turn_completed.recorded`,
//! and an effect is in the ledger only after `codex.effect.exited`. The
//! boundaries come from a traced clean run, not from a list. It does not run a
//! runner; `turncut wave` does that.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

use crate::codex_client::{ClientError, CodexClient};

/// How to start the fake Codex provider.
#[derive(Clone, Debug)]
pub struct FakeCodex {
    /// The program and leading arguments that reach `fake-provider`
    /// (`turncut fake-provider`, or the standalone binary).
    pub program: Vec<String>,
    /// Its state directory.
    pub state_dir: PathBuf,
}

impl FakeCodex {
    /// The fake reached through this very binary (`<exe> fake-provider`).
    pub fn via(exe: &Path, state_dir: &Path) -> FakeCodex {
        FakeCodex {
            program: vec![exe.display().to_string(), "fake-provider".to_owned()],
            state_dir: state_dir.to_owned(),
        }
    }

    /// The journal file.
    pub fn journal(&self) -> PathBuf {
        self.state_dir.join("journal.jsonl")
    }

    /// The effect ledger.
    pub fn ledger(&self) -> PathBuf {
        self.state_dir.join("ledger.jsonl")
    }

    /// A command that starts `fake-provider codex` with `extra` arguments.
    pub fn command(&self, extra: &[String]) -> Command {
        let mut cmd = Command::new(&self.program[0]);
        cmd.args(&self.program[1..])
            .arg("codex")
            .arg("--state-dir")
            .arg(&self.state_dir)
            .args(extra)
            .env_remove(cutpoint::ENV_ARM)
            .env_remove(cutpoint::ENV_SOCKET)
            .env_remove(cutpoint::ENV_TRACE)
            .env(cutpoint::ENV_ROLE, crate::model::Role::Provider.as_str());
        cmd
    }

    /// Starts it, handshaken.
    pub fn start(&self, extra: &[String]) -> Result<CodexClient, ClientError> {
        let mut client = CodexClient::spawn(&mut self.command(extra))?;
        client.initialize()?;
        Ok(client)
    }
}

/// One row of the crash sweep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SweepRow {
    /// The boundary, `point#n`.
    pub point: String,
    /// What the contract says: (turn recorded, turn completed, effects in ledger).
    pub expected: (bool, bool, usize),
    /// What the restarted fake reported.
    pub observed: (bool, bool, usize),
    /// The turn status after restart (`absent` when not recorded).
    pub status: String,
    /// Whether the journal agrees with `thread/read` about the turn.
    pub journal_agrees: bool,
}

/// Plays the built-in turn once cleanly with tracing on and returns the
/// boundaries from `codex.turn_start.received` on, as `point#n`.
pub fn discover(exe: &Path, work: &Path) -> anyhow::Result<Vec<cutpoint::Arm>> {
    let fake = FakeCodex::via(exe, &work.join("discover"));
    let trace = work.join("discover.trace");
    let mut cmd = fake.command(&[]);
    cmd.env(cutpoint::ENV_TRACE, &trace);
    let mut client = CodexClient::spawn(&mut cmd)?;
    client.initialize()?;
    let thread = client.thread_start(&work.display().to_string())?;
    let outcome = client.run_turn(&thread, "Create hello.txt", Some("m-1"), |_| "accept")?;
    anyhow::ensure!(
        outcome.status == "completed",
        "the clean turn ended {}",
        outcome.status
    );
    client.close()?;
    let hits = cutpoint::trace_read(&trace)?;
    let start = hits
        .iter()
        .position(|h| h.point == "codex.turn_start.received")
        .ok_or_else(|| anyhow::anyhow!("the trace has no codex.turn_start.received"))?;
    Ok(hits[start..]
        .iter()
        .map(|h| cutpoint::Arm {
            point: h.point.clone(),
            n: h.n,
        })
        .collect())
}

/// Kills the fake at each boundary and reads back what survived.
pub fn sweep(exe: &Path, work: &Path, points: &[cutpoint::Arm]) -> anyhow::Result<Vec<SweepRow>> {
    let index_of = |name: &str| points.iter().position(|a| a.point == name && a.n == 1);
    let recorded_at = index_of("codex.turn.recorded");
    let completed_at = index_of("codex.turn_completed.recorded");
    // The command runs in a session of its own and dies of its parent-death
    // signal when the fake dies: killed while it runs, it may or may not
    // have had its effect; from its exit on, it had.
    let running_at = index_of("codex.effect.spawned");
    let effect_at = index_of("codex.effect.exited");
    let mut rows = Vec::new();
    for (i, arm) in points.iter().enumerate() {
        let fake = FakeCodex::via(exe, &work.join(format!("cut{i:03}")));
        let mut client = fake.start(&["--exit".to_owned(), arm.to_string()])?;
        let thread = client.thread_start(&work.display().to_string())?;
        match client.run_turn(&thread, "Create hello.txt", Some("m-1"), |_| "accept") {
            Err(ClientError::Closed { .. }) => {}
            // Killed right after its approval request, the fake may be gone
            // before the answer is written.
            Err(ClientError::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            // A cut after the last notification lets the turn end first; the
            // fake must still die right after it.
            Ok(_) => match client.next_message("the fake to die") {
                Err(ClientError::Closed { .. }) => {}
                Ok(m) => anyhow::bail!("{arm}: the fake kept talking after its exit point: {m}"),
                Err(e) => anyhow::bail!("{arm}: the fake did not die: {e}"),
            },
            Err(e) => return Err(e.into()),
        }
        client.wait_exit()?;
        wait_for_commands(&fake.journal())?;
        let mut again = fake.start(&[])?;
        let read = match again.request(
            "thread/read",
            serde_json::json!({ "threadId": thread, "includeTurns": true }),
        ) {
            Err(ClientError::Rpc { message, .. }) if never_written(&message) => Value::Null,
            other => other?,
        };
        again.close()?;
        let turn = read.pointer("/thread/turns/0");
        let status = turn
            .and_then(|t| t.get("status"))
            .and_then(Value::as_str)
            .unwrap_or("absent")
            .to_owned();
        let effects = wire::ledger::read(&fake.ledger())?.len();
        let journal = wire::journal::read(&fake.journal())?;
        let journal_recorded = journal
            .iter()
            .any(|e| e.fact.as_deref() == Some("turn.recorded"));
        let at_or_after = |mark: Option<usize>| mark.is_some_and(|m| i >= m);
        rows.push(SweepRow {
            point: arm.to_string(),
            expected: (
                at_or_after(recorded_at),
                at_or_after(completed_at),
                if running_at == Some(i) {
                    effects.min(1)
                } else {
                    usize::from(at_or_after(effect_at))
                },
            ),
            observed: (turn.is_some(), status == "completed", effects),
            journal_agrees: journal_recorded == turn.is_some(),
            status,
        });
    }
    Ok(rows)
}

/// Whether a `thread/read` error says the thread was never written: killed
/// before its first turn, the restarted server does not know it ("thread not
/// loaded"); killed as it began writing it, it cannot read it ("rollout at …
/// is empty").
fn never_written(message: &str) -> bool {
    message.starts_with("thread not loaded") || message.ends_with(" is empty")
}

/// Waits (with a deadline) until every command the fake spawned, as its
/// journal says, has ended: they outlive the fake.
fn wait_for_commands(journal: &Path) -> anyhow::Result<()> {
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    for e in wire::journal::read(journal)? {
        if e.fact.as_deref() != Some("effect.spawned") {
            continue;
        }
        let Some(pid) = e.data["pid"].as_u64() else {
            continue;
        };
        let start = e.data["start_time"].as_u64();
        while crate::nemesis::alive_same(pid as u32, start) {
            anyhow::ensure!(
                Instant::now() < deadline,
                "command {pid} outlived the deadline"
            );
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
    Ok(())
}

/// Runs the demo, printing as it goes. Returns whether every row matched.
pub fn run(exe: &Path, keep: bool) -> anyhow::Result<bool> {
    let tmp = crate::tempdirs::tempdir("demo")?;
    let work = tmp.path();
    println!(
        "turncut demo: a full Codex turn through the fake provider, then a SIGKILL at every boundary of it"
    );

    let started = Instant::now();
    let fake = FakeCodex::via(exe, &work.join("clean"));
    let mut client = fake.start(&[])?;
    let thread = client.thread_start(&work.display().to_string())?;
    let outcome = client.run_turn(&thread, "Create hello.txt", Some("m-1"), |_| "accept")?;
    let transcript = std::mem::take(&mut client.transcript);
    client.close()?;
    for (dir, msg) in &transcript {
        println!("  {}", describe(*dir, msg));
    }
    println!(
        "clean turn: {} messages, {} approval(s), status {}, {} effect(s), {:.1} ms",
        transcript.len(),
        outcome.approvals,
        outcome.status,
        wire::ledger::read(&fake.ledger())?.len(),
        started.elapsed().as_secs_f64() * 1e3
    );

    let points = discover(exe, work)?;
    let started = Instant::now();
    let rows = sweep(exe, work, &points)?;
    println!(
        "crash sweep: {} boundaries, {:.1} ms per kill+restart+read",
        rows.len(),
        started.elapsed().as_secs_f64() * 1e3 / rows.len().max(1) as f64
    );
    println!(
        "  {:<52} {:<12} {:>7}  verdict",
        "killed at", "after restart", "effects"
    );
    let mut all_ok = true;
    for row in &rows {
        let ok = row.expected == row.observed && row.journal_agrees;
        all_ok &= ok;
        println!(
            "  {:<52} {:<12} {:>7}  {}",
            row.point,
            row.status,
            row.observed.2,
            if ok {
                "ok".to_owned()
            } else {
                format!("MISMATCH expected {:?}", row.expected)
            }
        );
    }
    if keep {
        let path = tmp.keep();
        println!("kept {}", path.display());
    }
    Ok(all_ok)
}

fn describe(dir: crate::codex_client::Dir, msg: &Value) -> String {
    let arrow = match dir {
        crate::codex_client::Dir::Sent => "→",
        crate::codex_client::Dir::Received => "←",
    };
    let what = match (msg.get("method"), msg.get("id")) {
        (Some(m), Some(id)) => format!("request {} (id {id})", m.as_str().unwrap_or("?")),
        (Some(m), None) => {
            let item = msg
                .pointer("/params/item/type")
                .and_then(Value::as_str)
                .map(|t| format!(" {t}"))
                .unwrap_or_default();
            format!("{}{item}", m.as_str().unwrap_or("?"))
        }
        (None, Some(id)) if msg.get("error").is_some() => format!("error (id {id})"),
        (None, Some(id)) => format!("response (id {id})"),
        _ => "?".to_owned(),
    };
    format!("{arrow} {what}")
}
