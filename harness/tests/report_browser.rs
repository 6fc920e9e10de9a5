//! The HTML report in a real browser: a small wave with passing and failing
//! cells (a custom runner that leaks its credential when a runner point is
//! armed), opened in headless Chromium at 1280 × 800 with a test script
//! added to a copy of the page. The script clicks cells, applies a filter
//! and measures the layout; its findings come back through `--dump-dom`.
//!
//! Skips with the reason only when no Chromium is installed (`.ci/run`
//! installs Debian's `chromium`).

mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const ID: &str = "everyday-workflows.runner-codex.local.single-task";

fn chromium() -> Option<PathBuf> {
    [
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
        "/usr/bin/google-chrome",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
}

/// Leaks the credential into the state directory when a runner point is
/// armed: cells cut at runner points fail (secrecy), the others pass.
fn half_leaky_runner(dir: &Path) -> PathBuf {
    let path = dir.join("runner.sh");
    let script = format!(
        "#!/bin/sh\n\
         state=''; prev=''\n\
         for a in \"$@\"; do [ \"$prev\" = --state-dir ] && state=\"$a\"; prev=\"$a\"; done\n\
         case \"$TURNCUT_CUT_ARM\" in runner.*) mkdir -p \"$state\"; printf '%s' \"$TURNCUT_PROVIDER_API_KEY\" > \"$state/leak.txt\";; esac\n\
         exec '{}' runnerd \"$@\"\n",
        env!("CARGO_BIN_EXE_turncut")
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Runs first in the page (in `<head>`): records errors and console errors.
const HOOK: &str = r#"<script>
window.__errors = [];
window.addEventListener('error', function (e) { window.__errors.push('error: ' + e.message); });
(function () {
  var original = console.error;
  console.error = function () {
    window.__errors.push('console.error: ' + Array.prototype.join.call(arguments, ' '));
    original.apply(console, arguments);
  };
})();
</script>"#;

/// Runs last: drives the page and writes what it saw into `#test-result`.
const CHECK: &str = r#"<script>
window.addEventListener('load', function () {
  var r = { width: window.innerWidth };
  var panel = document.getElementById('panel');
  var body = document.getElementById('panel-body');
  r.grids = document.querySelectorAll('table.grid').length;
  r.buttons = document.querySelectorAll('table.grid .c').length;
  var fail = document.querySelector('table.grid .c.fail');
  var pass = document.querySelector('table.grid td:not([colspan]) .c.pass');
  r.failId = fail && fail.dataset.cell;
  r.passId = pass && pass.dataset.cell;
  if (fail) {
    fail.click();
    r.failPanelHasId = body.textContent.indexOf(fail.dataset.cell) >= 0;
    r.failPanelHasSecrecy = body.textContent.indexOf('secrecy') >= 0;
    r.failPanelSvgRows = body.querySelectorAll('svg.seqd g').length;
    r.failPanelCut = body.querySelectorAll('svg.seqd line.cut').length;
    r.failPanelEvidenceRows = body.querySelectorAll('svg.seqd rect.ev').length;
    r.failSelected = fail.classList.contains('sel');
  }
  if (pass) {
    pass.click();
    r.passPanelText = body.textContent.indexOf('every oracle passed') >= 0;
    r.passPanelHasId = body.textContent.indexOf(pass.dataset.cell) >= 0;
    r.passPanelSvgRows = body.querySelectorAll('svg.seqd g').length;
    r.passPanelCut = body.querySelectorAll('svg.seqd line.cut').length;
  }
  var edge = panel.getBoundingClientRect().left;
  r.panelLeft = edge;
  r.hiddenColumns = [];
  document.querySelectorAll('table.grid thead th').forEach(function (th) {
    var b = th.getBoundingClientRect();
    if (b.left < 0 || b.right > edge + 1 || b.width < 20) r.hiddenColumns.push(th.textContent + ' ' + b.left + '-' + b.right);
  });
  var main = document.getElementById('main');
  r.mainOverflow = main.scrollWidth - main.clientWidth;
  var v = document.getElementById('f-v');
  v.value = 'fail';
  v.dispatchEvent(new Event('change'));
  r.shownWhenFail = document.querySelectorAll('table.grid .c:not(.off)').length;
  r.failCells = document.querySelectorAll('table.grid .c.fail').length;
  r.tocLinks = document.querySelectorAll('#toc a').length;
  r.errors = window.__errors;
  var out = document.createElement('pre');
  out.id = 'test-result';
  out.textContent = JSON.stringify(r);
  document.body.appendChild(out);
});
</script>"#;

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
}

#[test]
fn the_report_works_in_headless_chromium() {
    let Some(chromium) = chromium() else {
        common::skip(
            "chromium",
            "no chromium (apt-get install chromium; .ci/run installs it)",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let runner = half_leaky_runner(dir.path());
    let out = dir.path().join("wave");
    let status = Command::new(env!("CARGO_BIN_EXE_turncut"))
        .args([
            "wave", "--seed", "5", "--budget", "8", "--only", ID, "--jobs", "2",
        ])
        // Stage 1 only: the grid of 8 cells the script counts.
        .arg("--no-recuts")
        .arg("--runner-cmd")
        .arg(&runner)
        .arg("--out")
        .arg(&out)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1), "the wave has failing cells");

    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    let page = page
        .replacen("<head>", &format!("<head>{HOOK}"), 1)
        .replacen("</body>", &format!("{CHECK}</body>"), 1);
    let test_page = dir.path().join("test.html");
    std::fs::write(&test_page, page).unwrap();

    let profile = dir.path().join("chromium-profile");
    let started = Instant::now();
    let dump = Command::new(&chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1280,800",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", test_page.display()))
        .output()
        .unwrap();
    println!("chromium ran in {:.1} s", started.elapsed().as_secs_f64());
    let dom = String::from_utf8_lossy(&dump.stdout);
    let start = dom.find("<pre id=\"test-result\">").unwrap_or_else(|| {
        panic!(
            "no test result; stderr:\n{}",
            String::from_utf8_lossy(&dump.stderr)
        )
    }) + "<pre id=\"test-result\">".len();
    let end = start + dom[start..].find("</pre>").unwrap();
    let r: serde_json::Value = serde_json::from_str(&unescape(&dom[start..end])).unwrap();
    println!("{r:#}");

    assert_eq!(r["width"], 1280, "{r}");
    assert_eq!(r["grids"], 1, "{r}");
    assert_eq!(r["buttons"], 8, "{r}");
    assert!(r["failId"].is_string() && r["passId"].is_string(), "{r}");
    assert_eq!(r["failPanelHasId"], true, "{r}");
    assert_eq!(r["failPanelHasSecrecy"], true, "{r}");
    assert!(r["failPanelSvgRows"].as_u64().unwrap() > 5, "{r}");
    assert_eq!(r["failPanelCut"], 1, "{r}");
    assert_eq!(r["failSelected"], true, "{r}");
    assert_eq!(r["passPanelText"], true, "{r}");
    assert_eq!(r["passPanelHasId"], true, "{r}");
    assert!(r["passPanelSvgRows"].as_u64().unwrap() > 5, "{r}");
    assert_eq!(r["passPanelCut"], 1, "{r}");
    assert_eq!(r["hiddenColumns"], serde_json::json!([]), "{r}");
    assert!(r["mainOverflow"].as_i64().unwrap() <= 0, "{r}");
    assert_eq!(r["shownWhenFail"], r["failCells"], "{r}");
    assert!(r["tocLinks"].as_u64().unwrap() >= 1, "{r}");
    assert_eq!(r["errors"], serde_json::json!([]), "{r}");
}
