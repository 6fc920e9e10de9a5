//! `turncut crash-round`: many tasks on one runner state, the runner
//! SIGKILLed again and again at seeded moments (including between a
//! provider's spawn intent and its recorded identity), restarted on the same
//! state each time; then the figures that matter: tasks lost, turns or effects
//! duplicated, and processes left behind.
//!
//! Every provider is the fake Codex behind a wrapper that first leaves two
//! long-lived `sleep` children (one in the provider's group, one in a new
//! session), as real providers leave tool shells. Every runner of the round
//! carries a round tag in its environment, which its providers and their
//! children inherit, so the final census finds every process the round
//! started, whoever forgot it. This is a soak of the runner's process and
//! recovery hygiene; it does not judge the recovery contract cell by cell
//! (the wave does that).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::plan::mix;
use crate::run_log::Kind;
use crate::runner_client::{RunnerClient, RunnerCommand, RunnerProcess};

/// What a crash round does.
#[derive(Clone, Debug)]
pub struct Options {
    /// Tasks submitted (all on one runner state).
    pub tasks: usize,
    /// Runner SIGKILLs before the final, unarmed runner.
    pub kills: usize,
    /// Seed of the kill moments.
    pub seed: u64,
    /// Deadline of the final settle.
    pub wait: Duration,
    /// How long a round waits for its armed moment before killing anyway.
    pub round_wait: Duration,
    /// Keep the round's directory.
    pub keep: bool,
    /// Where the round reports (the kept directory, with `keep`).
    pub progress: crate::progress::Progress,
}

/// The runner moments a kill is armed at, the spawn window first.
const KILL_POINTS: &[&str] = &[
    "runner.provider.spawned",
    "runner.provider_spawn_intent.persisted",
    "runner.provider_identity.persisted",
    "runner.conversation.persisted",
    "runner.turn_intent.persisted",
    "runner.turn_accepted.persisted",
    "runner.approval_intent.persisted",
    "runner.item.persisted",
    "runner.turn_ended.persisted",
    "runner.run_settled.persisted",
];

/// The figures of a round.
#[derive(Debug, Default)]
pub struct Figures {
    pub tasks: usize,
    pub kills: Vec<String>,
    pub states: BTreeMap<String, usize>,
    pub lost: Vec<String>,
    pub duplicated_turns: Vec<String>,
    pub duplicated_effects: Vec<String>,
    pub orphans: Vec<String>,
    pub spawn_sweeps: usize,
    pub swept_processes: usize,
    pub wall: Duration,
}

impl Figures {
    /// Whether nothing was lost, duplicated or left behind.
    pub fn clean(&self) -> bool {
        self.lost.is_empty()
            && self.duplicated_turns.is_empty()
            && self.duplicated_effects.is_empty()
            && self.orphans.is_empty()
    }
}

/// Runs a crash round with the runnerd of `exe` (`turncut runnerd`).
pub fn run(exe: &Path, opts: &Options) -> anyhow::Result<Figures> {
    let started = Instant::now();
    let dir = crate::tempdirs::tempdir("round")?;
    let rig = Rig::new(exe, dir.path(), opts)?;
    let mut figures = Figures {
        tasks: opts.tasks,
        ..Figures::default()
    };
    let mut rng = mix(opts.seed);
    // Each round brings a batch of new tasks, so every runner has fresh work
    // to be killed in; the final runner gets the rest.
    let batch = opts.tasks.div_ceil(opts.kills + 1).max(1);
    for round in 0..opts.kills {
        rng = mix(rng);
        let point = KILL_POINTS[(rng % KILL_POINTS.len() as u64) as usize];
        let n = 1 + (mix(rng) % batch as u64);
        let arm = format!("{point}#{n}");
        let runner = rig.start(Some(&arm))?;
        rig.submit(&runner.client(), (round + 1) * batch)?;
        // Killed at the armed moment, or, if the round's tasks never get
        // there, at the deadline, whatever they are doing then.
        let reached = rig.listener.accept_hit(opts.round_wait).ok();
        crate::nemesis::kill_runner(runner)?;
        let how = match reached {
            Some(_) => format!("{arm} (reached)"),
            None => format!(
                "{arm} (not reached; killed after {} ms)",
                opts.round_wait.as_millis()
            ),
        };
        drop(reached);
        figures.kills.push(how);
    }
    let runner = rig.start(None)?;
    let client = runner.client();
    rig.submit(&client, opts.tasks)?;
    rig.settle_all(&client, opts.wait, &mut figures)?;
    crate::nemesis::kill_runner(runner)?;
    rig.census(&mut figures);
    figures.wall = started.elapsed();
    if opts.keep {
        let kept = dir.keep();
        let _ = crate::tempdirs::mark_kept(&kept);
        opts.progress.note(&format!("kept {}", kept.display()));
    }
    Ok(figures)
}

/// One runner state, its profile and the round's tag.
struct Rig {
    exe: PathBuf,
    dir: PathBuf,
    tag: String,
    tasks: usize,
    listener: cutpoint::Listener,
}

impl Rig {
    fn new(exe: &Path, dir: &Path, opts: &Options) -> anyhow::Result<Rig> {
        std::fs::create_dir_all(dir.join("ws"))?;
        let tag = format!("round-{}-{:x}", std::process::id(), opts.seed);
        let fake = [
            exe.display().to_string(),
            "fake-provider".into(),
            "codex".into(),
            "--state-dir".into(),
            "{provider_dir}".into(),
            "--journal".into(),
            dir.join("journal.jsonl").display().to_string(),
            "--ledger".into(),
            dir.join("ledger.jsonl").display().to_string(),
        ];
        // Children that outlive a provider unless someone stops them.
        let wrapper = "sleep 86400 & setsid sleep 86400 & exec \"$@\"";
        let mut command = vec!["sh".to_owned(), "-c".into(), wrapper.into(), "sh".into()];
        command.extend(fake);
        let profiles = format!(
            "[profile.runner-codex]\ndriver = \"codex\"\ncommand = {}\ncredential_fifo = true\n",
            serde_json::to_string(&command)?
        );
        std::fs::write(dir.join("profiles.toml"), profiles)?;
        let listener = cutpoint::Listener::bind(dir.join("cut.sock"))?;
        Ok(Rig {
            exe: exe.to_owned(),
            dir: dir.to_owned(),
            tag,
            tasks: opts.tasks,
            listener,
        })
    }

    fn start(&self, arm: Option<&str>) -> anyhow::Result<RunnerProcess> {
        let extra = vec![
            "--profiles".to_owned(),
            self.dir.join("profiles.toml").display().to_string(),
            "--provider-idle-timeout-ms".into(),
            "5000".into(),
        ];
        let mut cmd = RunnerCommand::via(&self.exe).command(&self.dir.join("state"), &extra);
        cmd.env(cutpoint::ENV_SOCKET, self.listener.path())
            .env_remove(cutpoint::ENV_ARM)
            .env_remove(wire::secret::CREDENTIAL_ENV)
            .env(crate::nemesis::TAG_ENV, &self.tag);
        if let Some(arm) = arm {
            cmd.env(cutpoint::ENV_ARM, arm);
        }
        RunnerProcess::start(
            &mut cmd,
            &self.dir.join("state"),
            &self.dir.join("runnerd.stderr"),
            Duration::from_secs(20),
        )
    }

    /// Submits the first `upto` tasks (the same ids again get the same
    /// answer, so earlier batches are only confirmed).
    fn submit(&self, client: &RunnerClient, upto: usize) -> anyhow::Result<()> {
        let ws = self.dir.join("ws");
        for i in 0..upto.min(self.tasks) {
            let (status, body) = client.create_task(
                &format!("task-{i:03}"),
                &format!("m-{i:03}"),
                "Create hello.txt",
                "runner-codex",
                &ws,
            )?;
            anyhow::ensure!(status == 201, "task-{i:03} was refused: {status} {body}");
        }
        Ok(())
    }

    fn settle_all(
        &self,
        client: &RunnerClient,
        wait: Duration,
        figures: &mut Figures,
    ) -> anyhow::Result<()> {
        let until = Instant::now() + wait;
        for i in 0..self.tasks {
            let id = format!("task-{i:03}");
            let left = until.saturating_duration_since(Instant::now());
            match client.wait_settled(&id, left.max(Duration::from_millis(1))) {
                Ok(task) => {
                    let state = task["state"].as_str().unwrap_or("?").to_owned();
                    let cause = task.pointer("/cause/code").and_then(Value::as_str);
                    let key = match cause {
                        Some(c) => format!("{state} {c}"),
                        None => state,
                    };
                    *figures.states.entry(key).or_default() += 1;
                }
                Err(e) => figures.lost.push(format!("{id}: {e:#}")),
            }
            for e in client.events(&id, 0)? {
                if Kind::parse(e["kind"].as_str().unwrap_or_default()) == Kind::ProviderSpawnSwept {
                    figures.spawn_sweeps += 1;
                    figures.swept_processes += e
                        .pointer("/data/killed")
                        .and_then(Value::as_array)
                        .map_or(0, Vec::len);
                }
            }
        }
        Ok(())
    }

    /// Duplicated turns (the provider's own store: a message recorded by
    /// more than one primary turn; a turn/start re-sent because the provider
    /// never recorded the first one is no duplicate) and effects (the ledger),
    /// and every live process still carrying the round's tag (recorded, then
    /// killed).
    fn census(&self, figures: &mut Figures) {
        let (turns, problems) =
            crate::evidence::read_provider_turns(&self.dir.join("state/providers"));
        for p in problems {
            figures.lost.push(format!("provider store unreadable: {p}"));
        }
        let mut starts: BTreeMap<String, usize> = BTreeMap::new();
        for t in turns.iter().filter(|t| !t.continuation) {
            if let Some(id) = &t.client_id {
                *starts.entry(id.clone()).or_default() += 1;
            }
        }
        for (id, n) in starts.into_iter().filter(|(_, n)| *n > 1) {
            figures
                .duplicated_turns
                .push(format!("{id}: {n} recorded turns"));
        }
        let ledger = wire::ledger::read(&self.dir.join("ledger.jsonl")).unwrap_or_default();
        let mut effects: BTreeMap<(String, String), usize> = BTreeMap::new();
        for l in &ledger {
            *effects.entry((l.key.clone(), l.by.clone())).or_default() += 1;
        }
        for ((key, by), n) in effects.into_iter().filter(|(_, n)| *n > 1) {
            figures
                .duplicated_effects
                .push(format!("{key} by {by}: {n} times"));
        }
        for (pid, cmdline) in crate::nemesis::tagged_processes(&self.tag) {
            figures.orphans.push(format!("pid {pid}: {cmdline}"));
            let _ = crate::nemesis::signal_pid(pid, nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// The figures as the command prints them.
pub fn render(f: &Figures) -> String {
    let mut out = String::new();
    let states: Vec<String> = f.states.iter().map(|(s, n)| format!("{n} {s}")).collect();
    out.push_str(&format!("tasks:              {}\n", f.tasks));
    out.push_str(&format!("runner kills:       {}\n", f.kills.len()));
    for k in &f.kills {
        out.push_str(&format!("  armed at {k}\n"));
    }
    out.push_str(&format!("settled:            {}\n", states.join(", ")));
    out.push_str(&format!("lost:               {}\n", f.lost.len()));
    out.push_str(&format!(
        "duplicated turns:   {}\n",
        f.duplicated_turns.len()
    ));
    out.push_str(&format!(
        "duplicated effects: {}\n",
        f.duplicated_effects.len()
    ));
    out.push_str(&format!(
        "spawn sweeps:       {} ({} processes of providers whose identity was never recorded)\n",
        f.spawn_sweeps, f.swept_processes
    ));
    out.push_str(&format!("orphan processes:   {}\n", f.orphans.len()));
    for line in f
        .lost
        .iter()
        .chain(&f.duplicated_turns)
        .chain(&f.duplicated_effects)
        .chain(&f.orphans)
    {
        out.push_str(&format!("  {line}\n"));
    }
    out.push_str(&format!(
        "wall time:          {:.1} s\n",
        f.wall.as_secs_f64()
    ));
    out
}
