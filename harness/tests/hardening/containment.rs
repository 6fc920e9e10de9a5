//! Processes that escape (row 6): a provider's tool double-forks a daemon
//! into a session and group of its own, renames it and gives it an empty
//! environment; neither the provider's group, nor its ancestry, nor its
//! spawn marker finds it. Its container does.

use serde_json::Value;

use crate::{ACP, Rig, Start, WAIT, scripted_provider, start_runnerd, state, wait_event};

/// Starts the hidden daemon and writes its pid to `daemon.pid` (in the
/// workspace): a subshell that exits at once, `env -i` for an empty
/// environment, `setsid` for a session and group of its own, and a name
/// that is not its command's.
const DAEMON: &str = r#"( env -i setsid perl -e '$0 = "kworker/0:7"; sleep 3600' </dev/null >/dev/null 2>&1 & echo $! > daemon.pid )"#;

/// An ACP agent that starts [`DAEMON`] and then plays one turn.
fn agent() -> String {
    format!(
        r#"{DAEMON}
read l; echo '{{"jsonrpc":"2.0","id":1,"result":{{"protocolVersion":1,"agentCapabilities":{{"loadSession":true}}}}}}'
read l; echo '{{"jsonrpc":"2.0","id":2,"result":{{"sessionId":"s1"}}}}'
read l; echo '{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s1","update":{{"sessionUpdate":"user_message_chunk","content":{{"type":"text","text":"Go"}},"messageId":"m1"}}}}}}'
echo '{{"jsonrpc":"2.0","id":3,"result":{{"stopReason":"end_turn"}}}}'
cat > /dev/null"#
    )
}

/// The daemon's pid, once its file is written.
fn daemon_pid(rig: &Rig) -> u32 {
    let text = std::fs::read_to_string(rig.ws().join("daemon.pid")).expect("daemon.pid");
    text.trim().parse().expect("a pid")
}

fn alive(pid: u32) -> bool {
    wire::procstat::live_start_time(pid).is_some()
}

/// Kills the daemon if a failed test left it.
struct Reap(Option<u32>);

impl Drop for Reap {
    fn drop(&mut self) {
        if let Some(pid) = self.0.filter(|p| alive(*p)) {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
        }
    }
}

/// The mechanisms to try: the default, then each one forced.
const MECHANISMS: [Option<&str>; 4] = [
    None,
    Some("cgroup-v2"),
    Some("cgroup-v1-freezer"),
    Some("subreaper"),
];

/// For the default container and each one this host allows: the task
/// completes, the settle stops the provider, and the stop proof (the run
/// log's `provider.stopped`) names the container and the daemon it killed;
/// the daemon is gone (it outlived the settle before).
#[test]
fn a_hidden_daemon_of_a_provider_dies_with_its_container_at_the_settle() {
    let mut ran = Vec::new();
    for mechanism in MECHANISMS {
        let mut rig = scripted_provider(ACP, "acp", &agent());
        if let Some(m) = mechanism {
            rig.extra
                .extend(["--provider-containment".to_owned(), m.to_owned()]);
            if let Start::Exited(code, why) = start_runnerd(&rig.path("probe-state"), &rig.extra) {
                eprintln!("{m}: not on this host (exit {code:?}): {}", why.trim());
                continue;
            }
        }
        let name = mechanism.unwrap_or("default");
        let client = rig.start();
        let (status, body) = client
            .create_task("t1", "m1", "Go", ACP, &rig.ws())
            .unwrap();
        assert_eq!(status, 201, "{body}");
        let task = client.wait_settled("t1", WAIT).unwrap();
        let _reap = Reap(Some(daemon_pid(&rig)));
        assert_eq!(state(&task), "completed", "{name}: {task}\n{}", rig.log());
        let daemon = daemon_pid(&rig);
        let stopped = wait_event(&client, "t1", "provider.stopped");
        let contained = &stopped["data"]["contained"];
        eprintln!("{name}: {contained}");
        assert!(
            !alive(daemon),
            "{name}: the daemon {daemon} outlived the settle"
        );
        let killed = killed_by(contained);
        assert!(killed.contains(&(daemon as i64)), "{name}: {stopped}");
        if let Some(m) = mechanism {
            assert_eq!(contained["mechanism"], m, "{stopped}");
        }
        ran.push(
            contained["mechanism"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    eprintln!("containers that ran: {ran:?}");
    assert!(ran.iter().any(|m| m == "subreaper"), "{ran:?}");
    // SAFETY: a plain system call without arguments.
    if unsafe { nix::libc::geteuid() } == 0 {
        assert!(
            ran.iter().any(|m| m.starts_with("cgroup")),
            "root, yet no cgroup: {ran:?}"
        );
    }
}

/// The pids a `contained` proof says it killed, in any of its parts.
fn killed_by(contained: &Value) -> Vec<i64> {
    let mut killed: Vec<i64> = contained["adopted_killed"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_i64)
        .collect();
    for group in contained["cgroups"].as_array().into_iter().flatten() {
        killed.extend(
            group["killed"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_i64),
        );
    }
    killed
}

/// A provider that started such a daemon lives on after its runner is
/// SIGKILLed; the runner restarted on the same state finds its container by
/// the spawn marker and empties it before anything else of the task.
#[test]
fn a_hidden_daemon_of_a_killed_runners_provider_dies_when_the_next_runner_stops_it() {
    let script = format!("[ -e first ] && exit 1; : > first; {DAEMON}; exec sleep 3600");
    let mut rig = scripted_provider(ACP, "acp", &script);
    rig.extra[3] = "20000".to_owned();
    let client = rig.start();
    let (status, body) = client
        .create_task("t1", "m1", "Go", ACP, &rig.ws())
        .unwrap();
    assert_eq!(status, 201, "{body}");
    wait_event(&client, "t1", "provider.spawned");
    let until = std::time::Instant::now() + WAIT;
    while !rig.ws().join("daemon.pid").exists() {
        assert!(std::time::Instant::now() < until, "no daemon.pid");
        std::thread::yield_now();
    }
    let daemon = daemon_pid(&rig);
    let _reap = Reap(Some(daemon));
    rig.runner.take().expect("a runner").kill().unwrap();
    assert!(alive(daemon), "the daemon died with the runner");
    let client = rig.start();
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "failed", "{task}");
    let events = client.events("t1", 0).unwrap();
    let stops: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "provider.stopped")
        .collect();
    eprintln!(
        "{:#?}",
        stops
            .iter()
            .map(|e| &e["data"]["contained"])
            .collect::<Vec<_>>()
    );
    assert!(
        !alive(daemon),
        "the daemon {daemon} outlived the next runner's stop"
    );
}

/// The same daemon started by a command runnerd runs itself for the agent
/// (an ACP terminal): it dies with the command's container when the
/// command ends (with the subreaper: it is adopted by runnerd and dies at
/// the provider's stop), so it is gone by the settle, whatever the container.
#[test]
fn a_hidden_daemon_of_an_acp_terminal_is_gone_by_the_settle() {
    let mut ran = 0;
    for mechanism in MECHANISMS {
        let script = format!(
            "[[turn]]\ntools = [{{ key = \"daemon\", argv = [\"/bin/sh\", \"-c\", {}] }}]\nfinal = \"Done.\"\n",
            serde_json::to_string(DAEMON).unwrap()
        );
        let mut rig = Rig::new(ACP, &script);
        if let Some(m) = mechanism {
            rig.extra
                .extend(["--provider-containment".to_owned(), m.to_owned()]);
            if let Start::Exited(code, why) = start_runnerd(&rig.path("probe-state"), &rig.extra) {
                eprintln!("{m}: not on this host (exit {code:?}): {}", why.trim());
                continue;
            }
        }
        let name = mechanism.unwrap_or("default");
        let client = rig.start();
        let task = rig.run_task(&client, "t1");
        let daemon = daemon_pid(&rig);
        let _reap = Reap(Some(daemon));
        assert_eq!(state(&task), "completed", "{name}: {task}\n{}", rig.log());
        wait_event(&client, "t1", "provider.stopped");
        assert!(
            !alive(daemon),
            "{name}: the terminal's daemon {daemon} outlived the settle"
        );
        ran += 1;
    }
    assert!(ran > 0);
}
