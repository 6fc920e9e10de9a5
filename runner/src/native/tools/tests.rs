//! Tests of the native tools: parsing, confinement, bounds, `Bash` and its
//! process group, and the credential kept out of every output.

use super::process::{STDERR_LABEL, clip};
use super::*;

use std::fs::Permissions;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Instant;

use tempfile::TempDir;

/// A workspace inside a temporary directory, with room for an outside.
struct Fx {
    dir: TempDir,
    ws: Workspace,
}

impl Fx {
    fn new() -> Fx {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("ws")).expect("mkdir ws");
        let ws = Workspace::new(dir.path().join("ws")).expect("workspace");
        Fx { dir, ws }
    }

    /// A path next to the workspace, outside it.
    fn outside(&self, name: &str) -> PathBuf {
        self.dir
            .path()
            .canonicalize()
            .expect("canonical")
            .join(name)
    }

    fn at(&self, rel: &str) -> PathBuf {
        self.ws.root().join(rel)
    }

    fn put(&self, rel: &str, bytes: &[u8]) {
        let p = self.at(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, bytes).expect("write fixture");
    }

    async fn run(&self, tool: Tool) -> ToolOutput {
        self.run_with(tool, Limits::default()).await
    }

    async fn run_with(&self, tool: Tool, limits: Limits) -> ToolOutput {
        tool.execute(&self.ws, &limits, &[]).await
    }
}

fn read(path: &str) -> Tool {
    Tool::Read { path: path.into() }
}

fn write(path: &str, content: &str) -> Tool {
    Tool::Write {
        path: path.into(),
        content: content.into(),
    }
}

fn edit(path: &str, old: &str, new: &str) -> Tool {
    Tool::Edit {
        path: path.into(),
        old: old.into(),
        new: new.into(),
    }
}

fn bash(command: &str) -> Tool {
    Tool::Bash {
        command: command.into(),
    }
}

fn limits(f: impl FnOnce(&mut Limits)) -> Limits {
    let mut l = Limits::default();
    f(&mut l);
    l
}

#[track_caller]
fn assert_err(out: &ToolOutput, fragments: &[&str]) {
    assert!(!out.ok, "expected an error, got {out:?}");
    assert!(out.output.starts_with("error: "), "{out:?}");
    for f in fragments {
        assert!(out.output.contains(f), "{:?} lacks {f:?}", out.output);
    }
}

/// Every entry of a directory, recursively, with its content, so a test can
/// say "the file system was not touched".
fn tree(root: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("read_dir") {
            let p = e.expect("entry").path();
            let m = std::fs::symlink_metadata(&p).expect("lstat");
            if m.is_dir() {
                stack.push(p.clone());
                out.push((p, None));
            } else if m.is_file() {
                let bytes = std::fs::read(&p).expect("read");
                out.push((p, Some(bytes)));
            } else {
                out.push((p, None));
            }
        }
    }
    out.sort();
    out
}

// ---- parsing and definitions ----

#[test]
fn parse_accepts_each_tool() {
    let cases = [
        ("Read", r#"{"path":"a"}"#, read("a")),
        ("Write", r#"{"path":"a","content":"x"}"#, write("a", "x")),
        (
            "Edit",
            r#"{"path":"a","old_string":"o","new_string":"n"}"#,
            edit("a", "o", "n"),
        ),
        ("Bash", r#"{"command":"ls"}"#, bash("ls")),
    ];
    for (name, args, want) in cases {
        assert_eq!(Tool::parse(name, args), Ok(want), "{name} {args}");
    }
}

#[test]
fn parse_errors_are_specific() {
    let cases: [(&str, &str, &str); 7] = [
        (
            "read",
            r#"{"path":"a"}"#,
            r#"unknown tool "read"; the tools are Read, Write, Edit and Bash"#,
        ),
        (
            "Read",
            "{",
            "the arguments of Read are not valid JSON: EOF while parsing an object at line 1 column 1",
        ),
        (
            "Read",
            r#"["a"]"#,
            "the arguments of Read must be a JSON object, not an array",
        ),
        (
            "Write",
            r#"{"path":"a"}"#,
            r#"Write is missing the string argument "content""#,
        ),
        (
            "Edit",
            r#"{"path":"a","old_string":1,"new_string":"n"}"#,
            r#"the argument "old_string" of Edit must be a string, not a number"#,
        ),
        (
            "Bash",
            r#"{"command":"ls","cwd":"/"}"#,
            r#"Bash has no argument "cwd"; its arguments are command"#,
        ),
        (
            "Edit",
            r#"{"path":"a","old":"o","new":"n"}"#,
            r#"Edit has no argument "new"; its arguments are path, old_string, new_string"#,
        ),
    ];
    for (name, args, want) in cases {
        let got = Tool::parse(name, args).expect_err("must fail").to_string();
        assert_eq!(got, want, "{name} {args}");
    }
}

#[test]
fn parse_error_becomes_failed_output() {
    let out = ToolOutput::from(Tool::parse("Nope", "{}").expect_err("unknown"));
    assert_err(&out, &["unknown tool \"Nope\""]);
}

#[test]
fn definitions_match_the_parser() {
    let defs = definitions();
    let defs = defs.as_array().expect("array");
    let names: Vec<&str> = defs
        .iter()
        .map(|d| d["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["Read", "Write", "Edit", "Bash"]);
    for d in defs {
        assert_eq!(d["type"], "function");
        assert_eq!(d["strict"], true);
        assert!(d["description"].as_str().is_some_and(|s| !s.is_empty()));
        let params = &d["parameters"];
        assert_eq!(params["additionalProperties"], false);
        // Key order depends on serde_json's `preserve_order`, which other
        // crates of the workspace switch on: compare as sorted sets.
        let mut props: Vec<&String> = params["properties"]
            .as_object()
            .expect("props")
            .keys()
            .collect();
        props.sort();
        let required: Vec<&str> = params["required"]
            .as_array()
            .expect("required")
            .iter()
            .map(|v| v.as_str().expect("str"))
            .collect();
        let mut sorted_required = required.clone();
        sorted_required.sort();
        assert_eq!(
            props, sorted_required,
            "strict mode requires every property"
        );
        // Arguments built from the schema parse.
        let args: Map<String, Value> = required
            .iter()
            .map(|k| (k.to_string(), json!("x")))
            .collect();
        let name = d["name"].as_str().expect("name");
        let tool = Tool::parse(name, &Value::Object(args).to_string()).expect("parses");
        assert_eq!(tool.name(), name);
    }
}

#[test]
fn only_read_has_no_effect() {
    assert!(!read("a").has_effect());
    assert!(write("a", "").has_effect());
    assert!(edit("a", "o", "n").has_effect());
    assert!(bash("true").has_effect());
}

#[test]
fn workspace_must_be_a_directory() {
    let fx = Fx::new();
    let file = fx.outside("file");
    std::fs::write(&file, "x").expect("write");
    let err = Workspace::new(&file).expect_err("a file");
    assert!(err.to_string().contains("is not a directory"), "{err}");
    let err = Workspace::new(fx.outside("missing")).expect_err("missing");
    assert!(err.to_string().contains("No such file"), "{err}");
}

// ---- confinement ----

#[tokio::test]
async fn escapes_are_refused_and_touch_nothing() {
    let fx = Fx::new();
    let elsewhere = tempfile::tempdir().expect("elsewhere");
    let elsewhere_path = elsewhere.path().canonicalize().expect("canonical");
    std::fs::write(elsewhere_path.join("secret"), "outside").expect("write");
    symlink(&elsewhere_path, fx.at("linkdir")).expect("symlink dir");
    symlink(elsewhere_path.join("secret"), fx.at("linkfile")).expect("symlink file");
    symlink(elsewhere_path.join("created"), fx.at("dangling")).expect("symlink dangling");
    fx.put("a/keep", b"keep");
    symlink(fx.at("a"), fx.at("inner-link")).expect("symlink");
    let before = (tree(fx.dir.path()), tree(&elsewhere_path));
    let ws = fx.ws.root().display().to_string();
    let cases = [
        (read("../x"), "../x"),
        (write("../x", "x"), "../x"),
        (read("/etc/passwd"), "/etc/passwd"),
        (write("/etc/passwd", "x"), "/etc/passwd"),
        (write("a/../../x", "x"), "a/../../x"),
        (write("missing/../../x", "x"), "missing/../../x"),
    ];
    for (tool, path) in cases {
        let out = fx.run(tool.clone()).await;
        assert_err(
            &out,
            &[&format!("the path {path} is outside the workspace {ws}")],
        );
    }
    // A link on the path is refused wherever it leads: tools follow none.
    let links = [
        read("linkdir/secret"),
        write("linkdir/new", "x"),
        write("linkdir/sub/new", "x"),
        edit("linkdir/secret", "outside", "x"),
        read("linkfile"),
        write("linkfile", "x"),
        edit("linkfile", "outside", "x"),
        write("dangling", "x"),
        write("dangling/x", "x"),
        read("inner-link/keep"),
    ];
    for tool in links {
        let out = fx.run(tool.clone()).await;
        assert_err(
            &out,
            &["is a symbolic link, and tools do not follow symbolic links"],
        );
    }
    assert_eq!((tree(fx.dir.path()), tree(&elsewhere_path)), before);
}

#[tokio::test]
async fn paths_inside_are_accepted() {
    let fx = Fx::new();
    fx.put("a/f", b"one");
    let abs = fx.at("a/f").display().to_string();
    for p in ["a/f", "./a/f", "a/../a/f", abs.as_str(), "missing/../a/f"] {
        assert_eq!(
            fx.run(read(p)).await,
            ToolOutput::success("one".into()),
            "{p}"
        );
    }
    assert_eq!(fx.ws.resolve("new/dir/f"), Ok(fx.at("new/dir/f")));
    assert!(fx.ws.resolve("").is_err());
}

// ---- Read ----

#[tokio::test]
async fn read_is_bounded_exactly() {
    let fx = Fx::new();
    let l = limits(|l| l.read_bytes = 10);
    fx.put("ten", b"0123456789");
    fx.put("eleven", b"0123456789a");
    assert_eq!(
        fx.run_with(read("ten"), l).await,
        ToolOutput::success("0123456789".into())
    );
    let out = fx.run_with(read("eleven"), l).await;
    assert_err(
        &out,
        &["eleven is 11 bytes, over the read limit of 10 bytes"],
    );
}

#[tokio::test]
async fn read_refuses_what_is_not_text_in_a_file() {
    let fx = Fx::new();
    fx.put("bin", b"ok\xff\xfe");
    std::fs::create_dir(fx.at("dir")).expect("mkdir");
    assert_err(
        &fx.run(read("bin")).await,
        &["bin is not UTF-8 text (invalid byte at offset 2)"],
    );
    assert_err(&fx.run(read("dir")).await, &["dir is not a regular file"]);
    assert_err(
        &fx.run(read("nope")).await,
        &["cannot open nope", "No such file"],
    );
    let fifo =
        std::ffi::CString::new(fx.at("fifo").into_os_string().into_encoded_bytes()).expect("cstr");
    // SAFETY: a plain system call with a valid C string.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    assert_err(&fx.run(read("fifo")).await, &["fifo is not a regular file"]);
}

// ---- Write ----

#[tokio::test]
async fn write_creates_dirs_and_private_files_atomically() {
    let fx = Fx::new();
    let out = fx.run(write("deep/er/f.txt", "hello")).await;
    assert_eq!(
        out,
        ToolOutput::success("created deep/er/f.txt (5 bytes)".into())
    );
    assert_eq!(
        std::fs::read(fx.at("deep/er/f.txt")).expect("read"),
        b"hello"
    );
    let mode = std::fs::metadata(fx.at("deep/er/f.txt"))
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // Replacing keeps the file's own permissions and leaves no temporary file.
    std::fs::set_permissions(fx.at("deep/er/f.txt"), Permissions::from_mode(0o755)).expect("chmod");
    let out = fx.run(write("deep/er/f.txt", "bye")).await;
    assert_eq!(
        out,
        ToolOutput::success("replaced deep/er/f.txt (3 bytes)".into())
    );
    let mode = std::fs::metadata(fx.at("deep/er/f.txt"))
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    let names: Vec<_> = std::fs::read_dir(fx.at("deep/er"))
        .expect("ls")
        .map(|e| e.expect("e").file_name())
        .collect();
    assert_eq!(names, ["f.txt"]);
}

#[tokio::test]
async fn write_is_bounded_exactly() {
    let fx = Fx::new();
    let l = limits(|l| l.edit_bytes = 4);
    assert!(fx.run_with(write("ok", "abcd"), l).await.ok);
    let out = fx.run_with(write("big", "abcde"), l).await;
    assert_err(
        &out,
        &["the content is 5 bytes, over the write limit of 4 bytes"],
    );
    assert!(!fx.at("big").exists());
}

#[tokio::test]
async fn write_refuses_directories() {
    let fx = Fx::new();
    std::fs::create_dir(fx.at("d")).expect("mkdir");
    assert_err(
        &fx.run(write("d", "x")).await,
        &["d exists and is not a regular file"],
    );
    assert_err(&fx.run(write(".", "x")).await, &["is not a regular file"]);
}

// ---- Edit ----

#[tokio::test]
async fn edit_replaces_the_one_match() {
    let fx = Fx::new();
    fx.put("f", "fn a() {}\nfn b() {}\n".as_bytes());
    std::fs::set_permissions(fx.at("f"), Permissions::from_mode(0o640)).expect("chmod");
    let out = fx.run(edit("f", "fn b", "fn bee")).await;
    assert_eq!(
        out,
        ToolOutput::success("edited f: replaced 1 occurrence (22 bytes, was 20)".into())
    );
    assert_eq!(
        std::fs::read_to_string(fx.at("f")).expect("read"),
        "fn a() {}\nfn bee() {}\n"
    );
    let mode = std::fs::metadata(fx.at("f"))
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o640);
}

#[tokio::test]
async fn edit_errors_leave_the_file_unchanged() {
    let fx = Fx::new();
    let original: &[u8] = b"one two two aaa\n";
    fx.put("f", original);
    let cases = [
        (edit("f", "three", "3"), "f: old_string not found"),
        (
            edit("f", "two", "2"),
            "f: old_string has 2 matches; make old_string unique",
        ),
        (
            edit("f", "aa", "b"),
            "f: old_string has 2 matches; make old_string unique",
        ),
        (edit("f", "", "x"), "old_string is empty"),
        (edit("missing", "a", "b"), "cannot open missing"),
    ];
    for (tool, want) in cases {
        assert_err(&fx.run(tool).await, &[want]);
        assert_eq!(std::fs::read(fx.at("f")).expect("read"), original);
    }
}

#[tokio::test]
async fn edit_is_bounded_exactly() {
    let fx = Fx::new();
    let l = limits(|l| l.edit_bytes = 8);
    fx.put("eight", b"abcdefgh");
    fx.put("nine", b"abcdefghi");
    assert!(
        fx.run_with(edit("eight", "abcdefgh", "12345678"), l)
            .await
            .ok
    );
    assert_eq!(std::fs::read(fx.at("eight")).expect("read"), b"12345678");
    let cases = [
        (
            edit("nine", "a", "b"),
            "nine is 9 bytes, over the edit limit of 8 bytes",
        ),
        (
            edit("eight", "123456789", "x"),
            "old_string is 9 bytes, over the edit limit of 8 bytes",
        ),
        (
            edit("eight", "1", "123456789"),
            "new_string is 9 bytes, over the edit limit of 8 bytes",
        ),
        (
            edit("eight", "1", "12"),
            "the edited eight would be 9 bytes, over the edit limit of 8 bytes",
        ),
    ];
    for (tool, want) in cases {
        assert_err(&fx.run_with(tool, l).await, &[want]);
    }
    assert_eq!(std::fs::read(fx.at("eight")).expect("read"), b"12345678");
    assert_eq!(std::fs::read(fx.at("nine")).expect("read"), b"abcdefghi");
}

// ---- Bash ----

/// Whether no live (non-zombie) process is left in process group `pgid`
/// within a deadline: a SIGKILLed process is gone a moment after the
/// signal, not at once, so the test waits for the event, bounded.
fn group_gone(pgid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(2);
    while group_alive(pgid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::yield_now();
    }
    true
}

/// Whether any live (non-zombie) process is in process group `pgid`.
fn group_alive(pgid: u32) -> bool {
    std::fs::read_dir("/proc").expect("/proc").any(|e| {
        let Ok(stat) = std::fs::read_to_string(e.expect("entry").path().join("stat")) else {
            return false;
        };
        // After the parenthesized command name: state, ppid, pgrp.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            return false;
        };
        let fields: Vec<&str> = after.split(' ').collect();
        fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string()
    })
}

#[tokio::test]
async fn bash_runs_in_the_workspace_with_null_stdin() {
    let fx = Fx::new();
    let out = fx.run(bash("pwd; echo \"$HOME\"; cat; echo done")).await;
    let ws = fx.ws.root().display();
    assert_eq!(
        out,
        ToolOutput::success(format!("{ws}\n{ws}\ndone\nexit status: 0"))
    );
}

#[tokio::test]
async fn bash_labels_stderr_and_fails_on_nonzero_exit() {
    let fx = Fx::new();
    let out = fx.run(bash("echo out; echo err >&2; exit 3")).await;
    assert_eq!(
        out,
        ToolOutput {
            ok: false,
            output: "out\n\n--- stderr ---\nerr\nexit status: 3".into()
        }
    );
    let out = fx.run(bash("printf partial")).await;
    assert_eq!(out, ToolOutput::success("partial\nexit status: 0".into()));
    let out = fx.run(bash("kill -9 $$")).await;
    assert_eq!(
        out,
        ToolOutput {
            ok: false,
            output: "killed by signal 9".into()
        }
    );
    assert_err(&fx.run(bash("  ")).await, &["the command is empty"]);
}

#[tokio::test]
async fn bash_timeout_kills_the_whole_group() {
    let fx = Fx::new();
    let l = limits(|l| l.bash_timeout = Duration::from_millis(200));
    let started = Instant::now();
    let out = fx.run_with(bash("echo $$; sleep 5 & sleep 5"), l).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert!(!out.ok);
    assert!(
        out.output
            .ends_with("timed out after 200 ms; the command's process group was killed"),
        "{out:?}"
    );
    let pgid: u32 = out
        .output
        .lines()
        .next()
        .and_then(|l| l.parse().ok())
        .expect("pid line");
    assert!(group_gone(pgid), "group {pgid} survived");
}

#[tokio::test]
async fn bash_leaves_nothing_running_after_exit() {
    let fx = Fx::new();
    let started = Instant::now();
    let out = fx.run(bash("sleep 30 & echo $$")).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert!(out.ok, "{out:?}");
    let pgid: u32 = out
        .output
        .lines()
        .next()
        .and_then(|l| l.parse().ok())
        .expect("pid line");
    assert!(group_gone(pgid), "background job of group {pgid} survived");
}

#[tokio::test]
async fn bash_output_is_bounded_with_markers() {
    let fx = Fx::new();
    let l = limits(|l| l.output_bytes = 1000);
    let out = fx
        .run_with(
            bash("head -c 5000 /dev/zero | tr '\\0' o; head -c 7000 /dev/zero | tr '\\0' e >&2"),
            l,
        )
        .await;
    assert!(out.ok);
    assert!(out.output.len() <= 1000, "{} bytes", out.output.len());
    let (stdout, rest) = out
        .output
        .split_once(STDERR_LABEL)
        .expect("stderr label kept");
    assert!(stdout.starts_with("ooo"));
    assert!(stdout.ends_with(" bytes truncated]"), "{stdout}");
    assert!(rest.starts_with("eee"));
    assert!(
        rest.ends_with(" bytes truncated]\nexit status: 0"),
        "{rest}"
    );
    // The marker counts exactly what was left out.
    let shown = stdout.find("\n[… ").expect("marker");
    assert!(stdout.ends_with(&format!("[… {} bytes truncated]", 5000 - shown)));
    // A small stderr is kept whole; stdout gets the rest of the room.
    let out = fx
        .run_with(
            bash("head -c 5000 /dev/zero | tr '\\0' o; echo oops >&2"),
            l,
        )
        .await;
    assert!(out.output.len() <= 1000);
    assert!(
        out.output
            .ends_with("\n--- stderr ---\noops\nexit status: 0"),
        "{out:?}"
    );
}

#[test]
fn clip_keeps_utf8_and_counts_bytes() {
    // Everything fits.
    assert_eq!(clip("héllo".as_bytes(), 6, 6), "héllo");
    // Only a prefix of 100 bytes was kept: the marker counts every byte
    // not shown, and a character is never split.
    let room = "\n[… 100 bytes truncated]".len() + 2;
    assert_eq!(
        clip("héllo".as_bytes(), 100, room),
        "h\n[… 99 bytes truncated]"
    );
    // An invalid byte shows as U+FFFD and counts as the one byte it was.
    assert_eq!(clip(b"a\xffb", 3, 5), "a\u{fffd}b");
    let room = "\n[… 100 bytes truncated]".len() + 4;
    assert_eq!(
        clip(b"a\xffbcdefgh", 100, room),
        "a\u{fffd}\n[… 98 bytes truncated]"
    );
    // Not even the marker fits: the marker alone.
    assert_eq!(clip(b"abc", 10, 3), "\n[… 10 bytes truncated]");
}

#[tokio::test]
async fn credential_never_reaches_bash() {
    let fx = Fx::new();
    // SAFETY: the variable is unique to this test, and the environment
    // is read elsewhere only through std, which serializes access.
    unsafe { std::env::set_var("TURNCUT_PROVIDER_API_KEY", "turncut-canary-x") };
    let scrub = ["TURNCUT_PROVIDER_API_KEY", "turncut-canary-x"];
    let out = bash("env")
        .execute(&fx.ws, &Limits::default(), &scrub)
        .await;
    assert!(out.ok, "{out:?}");
    assert!(!out.output.contains("turncut-canary-x"), "{}", out.output);
    assert!(
        !out.output.contains("TURNCUT_PROVIDER_API_KEY"),
        "{}",
        out.output
    );
    let names: Vec<&str> = out
        .output
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(n, _)| n)
        .collect();
    for name in &names {
        assert!(
            [
                "PATH", "HOME", "LANG", "TERM", "PWD", "SHLVL", "OLDPWD", "_"
            ]
            .contains(name),
            "unexpected {name} in {names:?}"
        );
    }
    // Masking the output cannot hide a leak here: the shell itself checks,
    // and even with nothing to scrub the variable is not inherited.
    let probe =
        bash("env | grep -c turncut-canary || true; echo \"[${TURNCUT_PROVIDER_API_KEY:-unset}]\"");
    let out = probe.execute(&fx.ws, &Limits::default(), &[]).await;
    assert_eq!(
        out,
        ToolOutput::success("0\n[unset]\nexit status: 0".into())
    );
    // SAFETY: as above.
    unsafe { std::env::remove_var("TURNCUT_PROVIDER_API_KEY") };
}

#[test]
fn tool_env_is_an_allowlist_without_scrubbed_entries() {
    let fx = Fx::new();
    let host = |name: &str| match name {
        "PATH" => Some("/bin:/opt/sk-123/bin".to_owned()),
        "LANG" => Some("C.UTF-8".to_owned()),
        "TURNCUT_PROVIDER_API_KEY" => Some("sk-123".to_owned()),
        _ => None,
    };
    let home = fx.ws.root().to_string_lossy().into_owned();
    let names =
        |env: Vec<(&'static str, String)>| env.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
    assert_eq!(
        tool_env(&fx.ws, &[""], host),
        [
            ("PATH", "/bin:/opt/sk-123/bin".to_owned()),
            ("HOME", home.clone()),
            ("LANG", "C.UTF-8".to_owned()),
            ("TERM", "dumb".to_owned()),
        ]
    );
    assert_eq!(
        names(tool_env(&fx.ws, &["sk-123"], host)),
        ["HOME", "LANG", "TERM"]
    );
    assert_eq!(
        names(tool_env(&fx.ws, &["LANG"], host)),
        ["PATH", "HOME", "TERM"]
    );
    assert_eq!(
        names(tool_env(&fx.ws, &[home.as_str()], |_| None)),
        ["PATH", "TERM"]
    );
}

#[tokio::test]
async fn outputs_mask_scrubbed_strings() {
    let fx = Fx::new();
    fx.put("notes", b"key=sk-abc\n");
    let out = read("notes")
        .execute(&fx.ws, &Limits::default(), &["sk-abc"])
        .await;
    assert_eq!(out, ToolOutput::success("key=******\n".into()));
}
