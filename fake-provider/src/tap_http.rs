//! `fake-provider tap-http`: a transparent recorder in front of a real HTTP
//! provider (the real `opencode serve`). It starts the program, waits for
//! its `… listening on http://HOST:PORT` line, listens on a loopback port of
//! its own and announces it with the same words, then forwards every
//! request unchanged — bodies and server-sent event streams included —,
//! journaling each request first (`{method, path, body}`, as the fake
//! OpenCode journals what it reads) and each answer's status.
//!
//! Like `tap`, it answers nothing itself. The program dies with it
//! (`PR_SET_PDEATHSIG`), and it exits with the program's exit code.

use std::ffi::OsString;
use std::io::BufRead as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use serde_json::{Value, json};
use wire::journal::Journal;

/// `fake-provider tap-http` options.
#[derive(Debug, clap::Args)]
pub struct TapHttpArgs {
    /// Journal file (appended).
    #[arg(long)]
    pub journal: PathBuf,
    /// The program and its arguments, after `--`.
    #[arg(last = true, required = true)]
    pub argv: Vec<OsString>,
}

/// What the forwarding handler shares.
struct Tap {
    upstream: String,
    client: reqwest::Client,
    journal: Journal,
}

/// The largest request body forwarded.
const BODY_MAX: usize = 16 << 20;

/// Runs the tap; the program's exit code (1 if it could not start, 2 on
/// bad arguments).
pub fn run_tap_http(args: &TapHttpArgs) -> i32 {
    let journal = match Journal::open(Some(&args.journal)) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("fake-provider tap-http: {}: {e}", args.journal.display());
            return 2;
        }
    };
    let (mut child, upstream) = match start(&args.argv) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("fake-provider tap-http: {e}");
            return 1;
        }
    };
    journal.fact(
        "tap.spawned",
        json!({ "pid": child.id(), "upstream": upstream }),
    );
    let listener = match std::net::TcpListener::bind(("127.0.0.1", 0)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("fake-provider tap-http: bind: {e}");
            return 1;
        }
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let tap = Arc::new(Tap {
        upstream,
        client: reqwest::Client::new(),
        journal,
    });
    std::thread::spawn(move || serve(listener, tap));
    println!("opencode server listening on http://127.0.0.1:{port}");
    match child.wait() {
        Ok(s) => s.code().unwrap_or(1),
        Err(_) => 1,
    }
}

/// Starts the program and reads its stdout up to its listening line; the
/// rest of its stdout is passed through.
fn start(argv: &[OsString]) -> Result<(std::process::Child, String), String> {
    let mut cmd = Command::new(&argv[0]);
    // Its stdin is the tap's: a fake that ends when its client closes
    // stdin ends with the tap's client too.
    cmd.args(&argv[1..])
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    crate::tap::dies_with_tap(&mut cmd);
    let mut child = cmd.spawn().map_err(|e| format!("{:?}: {e}", argv[0]))?;
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = std::io::BufReader::new(stdout).lines();
    let upstream = loop {
        let Some(Ok(line)) = lines.next() else {
            return Err(format!("{:?} ended before it listened", argv[0]));
        };
        if let Some(at) = line.find("listening on http://") {
            break line[at + "listening on ".len()..].trim().to_owned();
        }
        eprintln!("{line}");
    };
    std::thread::spawn(move || lines.for_each(drop));
    Ok((child, upstream))
}

fn serve(listener: std::net::TcpListener, tap: Arc<Tap>) {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("fake-provider tap-http: runtime: {e}");
            std::process::exit(1);
        }
    };
    runtime.block_on(async move {
        let _ = listener.set_nonblocking(true);
        let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
            std::process::exit(1);
        };
        let app = axum::Router::new().fallback(forward).with_state(tap);
        let _ = axum::serve(listener, app).await;
    });
}

/// Journals the request, forwards it, and streams the answer back.
async fn forward(State(tap): State<Arc<Tap>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, BODY_MAX)
        .await
        .unwrap_or_default();
    let path = parts.uri.path().to_owned();
    let parsed: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    tap.journal
        .message_in(&json!({ "method": parts.method.as_str(), "path": path, "body": parsed }));
    let query = parts
        .uri
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let mut out = tap
        .client
        .request(
            parts.method.clone(),
            format!("{}{path}{query}", tap.upstream),
        )
        .body(bytes.to_vec());
    for (name, value) in &parts.headers {
        if name != axum::http::header::HOST && name != axum::http::header::CONTENT_LENGTH {
            out = out.header(name, value);
        }
    }
    match out.send().await {
        Ok(answer) => {
            tap.journal
                .message_out(&json!({ "path": path, "status": answer.status().as_u16() }));
            let mut builder = Response::builder().status(answer.status());
            for (name, value) in answer.headers() {
                if name != axum::http::header::CONTENT_LENGTH
                    && name != axum::http::header::TRANSFER_ENCODING
                {
                    builder = builder.header(name, value);
                }
            }
            builder
                .body(Body::from_stream(answer.bytes_stream()))
                .unwrap_or_else(|_| Response::new(Body::empty()))
        }
        Err(e) => {
            tap.journal
                .message_out(&json!({ "path": path, "status": 502, "error": e.to_string() }));
            Response::builder()
                .status(502)
                .body(Body::from(format!("tap-http: {e}")))
                .unwrap_or_else(|_| Response::new(Body::empty()))
        }
    }
}
