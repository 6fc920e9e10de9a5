//! runnerd at its edges: the credential, malformed provider output, the API's
//! input checks, its files, its port and its connections.

use crate::*;

#[test]
fn the_canary_credential_reaches_only_the_provider_environment() {
    let canary = "turncut-canary-7f3a91";
    let mut rig = Rig::new(&[]);
    rig.env
        .push(("TURNCUT_PROVIDER_API_KEY".into(), canary.into()));
    rig.env.push(("RUST_LOG".into(), "trace".into()));
    let client = rig.start(Some("codex.turn.recorded"));
    submit(&client, &rig, "t1", "m1");
    // The provider got it through its one-shot FIFO, not its environment
    // (which its tools, and theirs, can read): the variable names the FIFO,
    // which is gone once the provider has read it.
    let held = rig.hold();
    let environ = std::fs::read(format!("/proc/{}/environ", held.hit.pid)).unwrap();
    let environ = String::from_utf8_lossy(&environ).into_owned();
    assert!(
        !environ.contains(canary),
        "the key is in the provider's environment"
    );
    let fifo = environ
        .split('\0')
        .find_map(|v| v.strip_prefix("TURNCUT_PROVIDER_API_KEY="))
        .expect("the provider is told where its key is");
    assert!(fifo.contains("/credentials/"), "{fifo}");
    assert!(
        !std::path::Path::new(fifo).exists(),
        "the provider did not take its key from {fifo}"
    );
    held.resume().unwrap();
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}");
    assert!(!rig.ledger().is_empty());
    assert!(
        rig.ledger().iter().all(|e| !e.saw_secret),
        "no tool saw the credential"
    );
    for file in harness::runner_client::state_files(rig.dir.path()) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(canary),
            "the canary leaked into {}",
            file.display()
        );
    }
    let events = serde_json::to_string(&client.events("t1", 0).unwrap()).unwrap();
    assert!(!events.contains(canary));
}

#[test]
fn malformed_provider_output_is_a_protocol_error_without_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("garbage.sh");
    std::fs::write(
        &script,
        "read l; echo '{\"id\":1,\"result\":{}}'\nread l\nread l; echo '{\"id\":2,\"result\":{\"thread\":{\"id\":\"th-1\"}}}'\nread l; echo 'this is not json'\ncat >/dev/null\n",
    )
    .unwrap();
    let mut rig = Rig::new(&[]);
    let profiles = format!(
        "[profile.runner-codex]\ndriver = \"codex\"\ncommand = [\"sh\", {:?}]\n",
        script.display().to_string()
    );
    std::fs::write(rig.path("profiles.toml"), profiles).unwrap();
    let client = rig.start(None);
    submit(&client, &rig, "t1", "m1");
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(
        cause(&task),
        "provider_protocol_error",
        "{task}\n{}",
        rig.log()
    );
    assert!(!rig.log().contains("panicked"), "{}", rig.log());
    let (status, _) = client.get("/v1/health").unwrap();
    assert_eq!(status, 200, "the runner keeps serving");
}

#[test]
fn the_api_is_idempotent_and_rejects_bad_input_clearly() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(None);
    let run = submit(&client, &rig, "t1", "m1");
    assert_eq!(
        submit(&client, &rig, "t1", "m1"),
        run,
        "same ids, same answer"
    );
    let (status, body) = client
        .create_task("t1", "m1", "another prompt", "runner-codex", &rig.ws())
        .unwrap();
    assert_eq!(
        (status, body["reason"].as_str()),
        (409, Some("id_conflict"))
    );
    let (status, body) = client.post_raw("/v1/tasks", "{not json").unwrap();
    assert_eq!(status, 400);
    assert!(
        body["error"].as_str().unwrap().contains("bad JSON"),
        "{body}"
    );
    let (status, body) = client
        .create_task("t2", "m1", "x", "no-such-profile", &rig.ws())
        .unwrap();
    assert_eq!(
        (status, body["reason"].as_str()),
        (409, Some("unknown_profile"))
    );
    let (status, _) = client.task("nope").unwrap();
    assert_eq!(status, 404);
    let (status, _) = client.retry("nope", "r").unwrap();
    assert_eq!(status, 404);
    let (status, _) =
        harness::runner_client::RunnerClient::new(&rig.runner.as_ref().unwrap().base, "wrong")
            .get("/v1/health")
            .unwrap();
    assert_eq!(status, 401);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed");
    let (status, body) = client.retry("t1", "r1").unwrap();
    assert_eq!(
        (status, body["block_reason"].as_str()),
        (409, Some("nothing_to_retry"))
    );
    let (status, body) = client.get("/v1/health").unwrap();
    assert_eq!(status, 200);
    assert!(body["owner_epoch"].as_i64().unwrap() >= 1);
}

#[test]
fn state_files_are_private() {
    use std::os::unix::fs::PermissionsExt as _;
    let mut rig = Rig::new(&[]);
    let client = rig.start(None);
    submit(&client, &rig, "t1", "m1");
    client.wait_settled("t1", WAIT).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&rig.path("state")), 0o700);
    assert_eq!(mode(&rig.path("state/token")), 0o600);
    assert_eq!(mode(&rig.path("state/runner.sqlite3")), 0o600);
}

#[test]
fn a_port_in_use_exits_2_with_a_clear_message() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(exe())
        .args(["runnerd", "--state-dir"])
        .arg(dir.path().join("state"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is in use"), "{stderr}");
}

#[test]
fn a_finished_wait_gives_its_connection_back() {
    // Each wait watches the task's event stream on a connection of its own;
    // one left open after the wait (a settled task's stream never speaks
    // again but for a keep-alive) costs the runner one of its bounded
    // connections: with 4 allowed, the fifth wait was answered 503.
    let mut rig = Rig::new(&[]);
    rig.runner_extra
        .extend(["--connections-max".to_owned(), "4".to_owned()]);
    let client = rig.start(None);
    submit(&client, &rig, "t1", "m1");
    for i in 0..12 {
        let task = client
            .wait_settled("t1", WAIT)
            .unwrap_or_else(|e| panic!("wait {i}: {e:#}"));
        assert_eq!(state(&task), "completed", "{task}");
    }
    let (status, _) = client.task("t1").unwrap();
    assert_eq!(status, 200);
}
