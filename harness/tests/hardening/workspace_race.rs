//! A directory of the workspace swapped for a link to a directory outside
//! while an ACP agent writes and reads under it (row 5). The same race
//! through the native tools is `runner::workspace::tests` (the one confiner
//! serves both).

use std::os::unix::fs::symlink;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::{ACP, WAIT, scripted_provider, state};

/// How many writes and reads the agent asks for.
const CALLS: usize = 500;

/// An ACP agent (a shell script) that asks the client to write `d/wN` and
/// read `d/rN` for N below [`CALLS`], one request at a time, keeping each
/// answer in `../answers.log`, then ends the turn.
fn racing_agent() -> String {
    format!(
        r#"read l; echo '{{"jsonrpc":"2.0","id":1,"result":{{"protocolVersion":1,"agentCapabilities":{{"loadSession":true}}}}}}'
read l; echo '{{"jsonrpc":"2.0","id":2,"result":{{"sessionId":"s1"}}}}'
read l; echo '{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s1","update":{{"sessionUpdate":"user_message_chunk","content":{{"type":"text","text":"Go"}},"messageId":"m1"}}}}}}'
i=0
while [ $i -lt {CALLS} ]; do
  echo '{{"jsonrpc":"2.0","id":'$((100+2*i))',"method":"fs/write_text_file","params":{{"sessionId":"s1","path":"d/w'$i'","content":"x"}}}}'
  read l; echo "$l" >> ../answers.log
  echo '{{"jsonrpc":"2.0","id":'$((101+2*i))',"method":"fs/read_text_file","params":{{"sessionId":"s1","path":"d/r'$i'"}}}}'
  read l; echo "$l" >> ../answers.log
  i=$((i+1))
done
echo '{{"jsonrpc":"2.0","id":3,"result":{{"stopReason":"end_turn"}}}}'
cat > /dev/null"#
    )
}

/// While the test swaps `d` and a link `s` to a directory outside
/// (`renameat2(RENAME_EXCHANGE)`, as fast as it can), every write lands
/// inside the workspace or is refused, and no read answers the outside
/// content (21-40 of 300 writes and 2-10 reads got out before).
#[test]
fn a_directory_swapped_for_a_link_never_leads_an_acp_tool_out() {
    let mut rig = scripted_provider(ACP, "acp", &racing_agent());
    let ws = rig.ws();
    let outside = rig.path("outside");
    std::fs::create_dir_all(ws.join("d")).unwrap();
    std::fs::create_dir(&outside).unwrap();
    for i in 0..CALLS {
        std::fs::write(ws.join(format!("d/r{i}")), "inside").unwrap();
        std::fs::write(outside.join(format!("r{i}")), "OUTSIDE").unwrap();
    }
    symlink(&outside, ws.join("s")).unwrap();
    let client = rig.start();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, ws) = (Arc::clone(&stop), ws.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                nix::fcntl::renameat2(
                    nix::fcntl::AT_FDCWD,
                    &ws.join("d"),
                    nix::fcntl::AT_FDCWD,
                    &ws.join("s"),
                    nix::fcntl::RenameFlags::RENAME_EXCHANGE,
                )
                .expect("exchange");
                swaps += 1;
            }
            swaps
        })
    };
    let (status, body) = client.create_task("t1", "m1", "Go", ACP, &ws).unwrap();
    assert_eq!(status, 201, "{body}");
    let task = client.wait_settled("t1", WAIT * 6);
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    let task = task.unwrap_or_else(|e| panic!("{e}\n{}", rig.log()));
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    let answers = std::fs::read_to_string(rig.path("answers.log")).unwrap();
    let escaped: Vec<String> = std::fs::read_dir(&outside)
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().into_owned();
            name.starts_with('w').then_some(name)
        })
        .collect();
    let outside_reads = answers.lines().filter(|l| l.contains("OUTSIDE")).count();
    let refused = answers.lines().filter(|l| l.contains("\"error\"")).count();
    eprintln!(
        "{swaps} swaps; {} answers, {refused} refusals, {} files outside, {outside_reads} outside reads",
        answers.lines().count(),
        escaped.len()
    );
    assert_eq!(
        answers.lines().count(),
        2 * CALLS,
        "every call was answered"
    );
    assert!(
        escaped.is_empty(),
        "{} files written outside",
        escaped.len()
    );
    assert_eq!(outside_reads, 0, "reads answered the outside content");
}
