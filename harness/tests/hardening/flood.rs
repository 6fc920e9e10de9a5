//! Hostile provider output: a flood of small lines (row 2) and a provider
//! that chatters instead of answering (row 3).

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{ACP, Rig, WAIT, scripted_provider, state};

/// The Codex handshake and a turn accepted, then `flood_bytes` of small
/// notifications, then (with `end`) the turn completed.
fn codex_flood(flood_bytes: u64, end: bool) -> String {
    let completed = match end {
        true => {
            r#"echo '{"method":"turn/completed","params":{"turn":{"id":"tu1","status":"completed"}}}'"#
        }
        false => "",
    };
    format!(
        r#"read l; echo '{{"id":1,"result":{{}}}}'
read l; read l; echo '{{"id":2,"result":{{"thread":{{"id":"th1"}}}}}}'
read l; echo '{{"id":3,"result":{{"turn":{{"id":"tu1"}}}}}}'
yes '{{"method":"item/agentMessage/delta","params":{{"delta":"x"}}}}' | head -c {flood_bytes}
{completed}
cat > /dev/null"#
    )
}

/// The peak resident memory of `pid` (`VmHWM`), in KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

/// The most runnerd may hold at its peak while a provider floods it.
const PEAK_KIB_MAX: u64 = 128 * 1024;

/// Starts a runner whose Codex provider floods `flood_bytes` (then ends
/// its turn) with `extra` arguments; the settled task, the time it took
/// and runnerd's peak memory in KiB.
fn flood(flood_bytes: u64, extra: &[&str]) -> (Value, Duration, u64, String) {
    let mut rig = scripted_provider("runner-codex", "codex", &codex_flood(flood_bytes, true));
    rig.extra[3] = "10000".to_owned();
    rig.extra.extend(extra.iter().map(|a| a.to_string()));
    let client = rig.start();
    let started = Instant::now();
    let (status, body) = client
        .create_task("t1", "m1", "Go", "runner-codex", &rig.ws())
        .unwrap();
    assert_eq!(status, 201, "{body}");
    let task = client
        .wait_settled("t1", Duration::from_secs(180))
        .unwrap_or_else(|e| panic!("{e}\n{}", rig.log()));
    let peak = peak_kib(rig.runner_pid());
    (task, started.elapsed(), peak, rig.log())
}

/// A Codex-protocol provider that prints 15 MB of small JSON lines (100 MB
/// peaked runnerd at 2.6-3.9 GiB): the engine takes them at its own pace
/// while the provider waits on its pipe, so runnerd's peak memory stays
/// under [`PEAK_KIB_MAX`]. Whether the flood outruns the default output
/// budget depends on how fast this build reads (a debug build does not), so
/// the task may complete or fail with `provider_protocol_error`; the next
/// test pins the budget.
#[test]
fn a_flood_of_provider_output_is_held_back_by_the_pipe() {
    let (task, took, peak, log) = flood(15_000_000, &[]);
    eprintln!(
        "15 MB flood: {} after {} ms, runnerd's peak {} MiB",
        state(&task),
        took.as_millis(),
        peak / 1024
    );
    match state(&task) {
        "completed" => {}
        "failed" => assert_eq!(task["cause"]["code"], "provider_protocol_error", "{task}"),
        other => panic!("{other}: {task}\n{log}"),
    }
    assert!(peak < PEAK_KIB_MAX, "runnerd peaked at {peak} KiB");
}

/// The same flood faster than `--provider-output-bytes-per-s-max` stops
/// the provider with `provider_protocol_error` quoting the limit, long
/// before the flood ends.
#[test]
fn a_flood_over_the_output_budget_stops_the_provider_quoting_the_limit() {
    let (task, took, peak, _) = flood(
        100_000_000,
        &["--provider-output-bytes-per-s-max", "200000"],
    );
    eprintln!(
        "100 MB flood, budget 200000 B/s: {} after {} ms, runnerd's peak {} MiB",
        state(&task),
        took.as_millis(),
        peak / 1024
    );
    assert_eq!(state(&task), "failed", "{task}");
    assert_eq!(task["cause"]["code"], "provider_protocol_error", "{task}");
    let message = task["cause"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("budget of 200000 bytes per second")
            && message.contains("provider_output_bytes_per_s_max"),
        "{message}"
    );
    assert!(took < Duration::from_secs(60), "stopped after {took:?}");
    assert!(peak < PEAK_KIB_MAX, "runnerd peaked at {peak} KiB");
}

/// A provider that prints a notification every 50 ms and never answers
/// `initialize`: the notifications are no progress toward the answer, so
/// the request ends at the idle timeout (1 s here) however long the
/// chatter lasts, and the task fails with a cause naming it instead of
/// staying `running`.
#[test]
fn a_chattering_provider_that_never_answers_is_not_kept_alive_by_its_chatter() {
    let cases = [
        (
            ACP,
            "acp",
            r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"plan"}}}"#,
        ),
        ("runner-codex", "codex", r#"{"method":"thread/started"}"#),
    ];
    for (profile, driver, line) in cases {
        let script = format!("while :; do echo '{line}' || exit; sleep 0.05; done");
        let mut rig: Rig = scripted_provider(profile, driver, &script);
        rig.extra[3] = "1000".to_owned();
        let client = rig.start();
        let (status, body) = client
            .create_task("t1", "m1", "Go", profile, &rig.ws())
            .unwrap();
        assert_eq!(status, 201, "{body}");
        let task: Value = client
            .wait_settled("t1", WAIT)
            .unwrap_or_else(|e| panic!("{profile}: {e}\n{}", rig.log()));
        assert_eq!(state(&task), "failed", "{profile}: {task}");
        let message = task["cause"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("initialize was not answered"),
            "{profile}: {message}"
        );
    }
}

/// A model API (the native profile's provider: a perl HTTP server here)
/// that answers `POST /v1/responses` 200 and then streams only SSE
/// comments, every 200 ms, forever: a comment is no progress toward the
/// response, so the request ends at the idle timeout (1 s) and the task
/// fails with a cause instead of waiting forever on the chatter.
#[test]
fn a_model_api_that_streams_only_comments_is_not_kept_alive_by_them() {
    let server = r#"exec perl -MIO::Socket::INET -e '
        $| = 1;
        my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 0, Listen => 5, ReuseAddr => 1) or die;
        print "listening on http://127.0.0.1:" . $l->sockport . "\n";
        while (my $c = $l->accept) {
            next if fork;
            $c->autoflush(1);
            while (my $line = <$c>) { last if $line eq "\r\n" }
            print $c "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n";
            while (print $c ": ping\n\n") { select(undef, undef, undef, 0.2) }
            exit 0;
        }'"#;
    let mut rig = scripted_provider("runner-native-openai", "native", server);
    rig.extra[3] = "1000".to_owned();
    let client = rig.start();
    let (status, body) = client
        .create_task("t1", "m1", "Go", "runner-native-openai", &rig.ws())
        .unwrap();
    assert_eq!(status, 201, "{body}");
    let task = client
        .wait_settled("t1", WAIT)
        .unwrap_or_else(|e| panic!("{e}\n{}", rig.log()));
    assert_eq!(state(&task), "failed", "{task}");
    let message = task["cause"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("POST /v1/responses was not answered"),
        "{message}"
    );
}
