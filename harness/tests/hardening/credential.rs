//! The credential seen from a tool shell running with runnerd's own,
//! unprivileged uid (row 4): the sibling ACP agent's `/proc/PID/environ`,
//! runnerd's `/proc/PID/mem`, and `ptrace` on runnerd.

use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Command;

use harness::runner_client::{RunnerCommand, RunnerProcess};

use crate::{ACP, Rig, WAIT, exe, state};

/// The user the test runs runnerd as.
const USER: &str = "turncut-hardening";

/// The uid and gid of [`USER`], created if this process is root; why not,
/// otherwise.
fn unprivileged_user() -> Result<(u32, u32), String> {
    // SAFETY: a plain system call without arguments.
    if unsafe { nix::libc::geteuid() } != 0 {
        return Err("it must run as root to run runnerd as another, unprivileged uid".into());
    }
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, USER]).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    if id("-u").is_none() {
        let made = Command::new("useradd")
            .args(["--system", "--no-create-home", "--shell", "/bin/sh", USER])
            .status()
            .map_err(|e| format!("useradd: {e}"))?;
        // Another test process may have made it in between.
        if !made.success() && id("-u").is_none() {
            return Err(format!("useradd {USER} failed: {made}"));
        }
    }
    Ok((id("-u").expect("uid"), id("-g").expect("gid")))
}

/// Gives `dir` and everything under it to `uid`.
fn chown_tree(dir: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(dir, Some(uid), Some(gid)).unwrap();
    if dir.is_dir() && !dir.is_symlink() {
        for e in std::fs::read_dir(dir).unwrap() {
            chown_tree(&e.unwrap().path(), uid, gid);
        }
    }
}

/// What the tool shell tries, each result on a line of `probe.txt` in the
/// workspace: the environment of every sibling agent process, runnerd's
/// memory searched for the canary, and `PTRACE_SEIZE` of runnerd (which
/// does not stop it; the seizure ends with the probe).
const PROBE: &str = r#"
{
for p in /proc/[0-9]*; do
  [ "$p" = "/proc/$$" ] && continue
  case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in
    *"fake-provider acp"*)
      if tr '\0' '\n' < $p/environ > sibling.env 2>/dev/null; then echo "sibling: read"; else echo "sibling: denied"; fi ;;
  esac
done
perl -e '
  my ($pid, $canary) = ($ARGV[0] + 0, $ARGV[1]);
  if (!open(my $maps, "<", "/proc/$pid/maps")) { print "mem: denied\n" }
  elsif (!open(my $mem, "<", "/proc/$pid/mem")) { print "mem: denied\n" }
  else {
    my $found = 0;
    while (<$maps>) {
      my ($lo, $hi, $perm) = /^([0-9a-f]+)-([0-9a-f]+) (\S+)/ or next;
      next unless $perm =~ /^r/;
      my ($a, $b) = (hex $lo, hex $hi);
      next if $b - $a > (1 << 28);
      seek($mem, $a, 0) or next;
      my $buf; defined(sysread($mem, $buf, $b - $a)) or next;
      if (index($buf, $canary) >= 0) { $found = 1; last }
    }
    print $found ? "mem: found\n" : "mem: read, no key\n";
  }
  my %nr = (x86_64 => 101, aarch64 => 117);
  my $arch = `uname -m`; chomp $arch;
  if (!exists $nr{$arch}) { print "ptrace: unknown arch $arch\n" }
  elsif (syscall($nr{$arch}, 0x4206, $pid, 0, 0) == 0) { print "ptrace: attached\n" }
  else { print "ptrace: denied ($!)\n" }
' $PPID "$CANARY"
} > probe.txt 2>&1
"#;

/// runnerd and its tools run as an unprivileged uid; an ACP terminal (a
/// child of runnerd, sibling of the ACP agent) must not read the key from
/// the agent's environment (it gets it from a FIFO), from runnerd's memory,
/// or by tracing runnerd (runnerd is not dumpable). The probes must work:
/// the agent's environment is read (it holds the FIFO's path, not the key).
#[test]
fn a_tool_shell_cannot_read_the_credential_from_a_sibling_or_from_runnerd() {
    let (uid, gid) = match unprivileged_user() {
        Ok(ids) => ids,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let canary = "turncut-canary-row4-5e1d";
    let script = format!(
        "[[turn]]\ntools = [{{ key = \"probe\", argv = [\"/bin/sh\", \"-c\", {}] }}]\nfinal = \"Done.\"\n",
        serde_json::to_string(&PROBE.replace("\"$CANARY\"", canary)).unwrap()
    );
    let rig = Rig::new(ACP, &script);
    // The binary where the unprivileged uid can run it.
    let binary = rig.path("turncut");
    // Copied by a process of its own: a copy written here holds a writable
    // descriptor that a sibling test's fork inherits until its exec, and an
    // exec of the copy then fails with ETXTBSY (one CI run did).
    let copied = std::process::Command::new("cp")
        .arg(exe())
        .arg(&binary)
        .status()
        .unwrap();
    assert!(copied.success(), "cp of the turncut binary failed");
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
    let profiles = std::fs::read_to_string(rig.path("profiles.toml")).unwrap();
    let profiles = profiles.replace(&exe().display().to_string(), &binary.display().to_string());
    std::fs::write(rig.path("profiles.toml"), profiles).unwrap();
    chown_tree(rig.dir.path(), uid, gid);
    let mut cmd = RunnerCommand::via(&binary).command(&rig.path("state"), &rig.extra);
    cmd.env_remove(cutpoint::ENV_ARM)
        .env_remove(cutpoint::ENV_SOCKET)
        .env("TURNCUT_PROVIDER_API_KEY", canary)
        .env("HOME", rig.dir.path())
        .current_dir(rig.dir.path())
        .uid(uid)
        .gid(gid);
    let runner = RunnerProcess::start(
        &mut cmd,
        &rig.path("state"),
        &rig.path("runnerd.stderr"),
        WAIT,
    )
    .unwrap();
    let client = runner.client();
    let ws = rig.ws();
    let (status, body) = client.create_task("t1", "m1", "Go", ACP, &ws).unwrap();
    assert_eq!(status, 201, "{body}");
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    let probe = std::fs::read_to_string(ws.join("probe.txt")).unwrap_or_default();
    let sibling = std::fs::read_to_string(ws.join("sibling.env")).unwrap_or_default();
    eprintln!("probe:\n{probe}");
    assert!(
        probe.contains("sibling: read"),
        "the sibling probe found no agent:\n{probe}"
    );
    assert!(
        sibling.contains("RUNNERD_SPAWN_MARKER=") && !sibling.contains(canary),
        "the agent's environment holds the key:\n{sibling}"
    );
    assert!(probe.contains("mem: denied"), "runnerd's memory:\n{probe}");
    assert!(
        probe.contains("ptrace: denied") || probe.contains("ptrace: unknown arch"),
        "ptrace on runnerd:\n{probe}"
    );
    runner.kill().unwrap();
}
