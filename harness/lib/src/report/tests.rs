//! Tests of every report sink over one sample wave.

use super::markdown::md_code;
use super::markdown::md_text;
use super::*;
use crate::model::{CellSpec, Cut, Event, Fault, OracleResult, Outcome, WAVE_FORMAT_VERSION};

const INJECTION: &str = "</script><b>x";
const FAIL_MESSAGE: &str = "message m1 started 2 primary turns";
const FAIL_REPRODUCE: &str = "turncut run everyday.runner-codex.local.single --cut runner.turn_intent.persisted#1 --fault kill-runner --seed 7";

fn oracle(name: &str, verdict: Verdict, message: &str) -> OracleResult {
    OracleResult {
        oracle: crate::model::Oracle::parse(name).unwrap(),
        verdict,
        message: message.to_owned(),
        evidence: if verdict == Verdict::Pass {
            vec![]
        } else {
            vec!["journal.jsonl:12".to_owned(), "events#7".to_owned()]
        },
    }
}

fn cell(
    id: &str,
    scenario: &str,
    cut: Option<(&str, u64)>,
    fault: Option<Fault>,
    oracles: Vec<OracleResult>,
) -> CellResult {
    let verdict = oracles
        .iter()
        .map(|o| o.verdict)
        .max()
        .unwrap_or(Verdict::Unknown);
    CellResult {
        spec: CellSpec {
            cell_id: id.to_owned(),
            scenario_id: scenario.into(),
            seed: 7,
            events: cut
                .zip(fault)
                .map(|((point, n), fault)| Event {
                    cut: Cut {
                        point: point.to_owned(),
                        n,
                    },
                    fault,
                })
                .into_iter()
                .collect(),
        },
        verdict,
        oracles,
        outcome: Outcome {
            state: Some(crate::model::TaskState::Completed),
            cause: None,
            reached_cut: cut.is_some(),
            runs: 1,
            continuations: 0,
            retry_status: None,
            ..Outcome::default()
        },
        duration_ms: 143,
        reproduce: format!("turncut replay reports/out/w/{id}"),
        error: None,
        retried: None,
        reruns: Vec::new(),
    }
}

/// Two scenarios; t003 fails, t004 is unknown, the rest pass.
pub(crate) fn sample_wave() -> WaveResult {
    let a = "everyday.runner-codex.local.single";
    let b = "everyday.runner-codex.local.follow-up";
    let pass = |name| oracle(name, Verdict::Pass, "");
    let mut failing = cell(
        "t003",
        a,
        Some(("runner.turn_intent.persisted", 1)),
        Some(Fault::KillRunner),
        vec![
            oracle("no-replay.turn", Verdict::Fail, FAIL_MESSAGE),
            pass("contract"),
        ],
    );
    failing.reproduce = FAIL_REPRODUCE.to_owned();
    failing.outcome.state = Some(crate::model::TaskState::Failed);
    failing.outcome.cause = Some("provider_lost".to_owned());
    let mut unknown = cell(
        "t004",
        b,
        Some(("codex.turn.recorded", 2)),
        Some(Fault::HangProvider),
        vec![
            pass("no-replay.turn"),
            oracle(
                "liveness",
                Verdict::Unknown,
                &format!("state unreadable {INJECTION}"),
            ),
        ],
    );
    unknown.outcome.state = None;
    WaveResult {
        v: WAVE_FORMAT_VERSION,
        wave_id: "w-20250101T000000-s7".to_owned(),
        seed: 7,
        shard: None,
        jobs: 2,
        duration_ms: 2_500,
        run: Default::default(),
        not_run: 0,
        stopped: None,
        skipped: Vec::new(),
        stages: Default::default(),
        cells: vec![
            cell("t001", a, None, None, vec![pass("no-replay.turn")]),
            cell(
                "t002",
                a,
                Some(("runner.turn_intent.persisted", 1)),
                Some(Fault::KillProvider),
                vec![pass("no-replay.turn")],
            ),
            failing,
            unknown,
            cell(
                "t005",
                b,
                Some(("codex.turn.recorded", 2)),
                Some(Fault::KillBoth),
                vec![pass("no-replay.turn")],
            ),
        ],
    }
}

fn written_sample() -> (tempfile::TempDir, WaveResult) {
    let dir = tempfile::tempdir().unwrap();
    let wave = sample_wave();
    write_wave(&dir.path().join("out"), &wave).unwrap();
    (dir, wave)
}

fn read(dir: &tempfile::TempDir, name: &str) -> String {
    std::fs::read_to_string(dir.path().join("out").join(name)).unwrap()
}

#[test]
fn write_wave_writes_exactly_the_four_files() {
    let (dir, _) = written_sample();
    let mut names: Vec<String> = std::fs::read_dir(dir.path().join("out"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, [JUNIT_XML, REPORT_HTML, SUMMARY_MD, WAVE_JSON]);
}

#[test]
fn read_wave_round_trips() {
    let (dir, wave) = written_sample();
    let back = read_wave(&dir.path().join("out").join(WAVE_JSON)).unwrap();
    assert_eq!(back, wave);
}

#[test]
fn read_wave_rejects_another_version_naming_it_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(WAVE_JSON);
    let mut value = serde_json::to_value(sample_wave()).unwrap();
    value["v"] = 99.into();
    std::fs::write(&path, value.to_string()).unwrap();
    let err = read_wave(&path).unwrap_err();
    assert!(matches!(err, ReportError::Version { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("version 99"), "{message}");
    assert!(message.contains(&path.display().to_string()), "{message}");
}

#[test]
fn read_wave_rejects_missing_version_and_bad_json_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(WAVE_JSON);
    std::fs::write(&path, r#"{"wave_id": "w"}"#).unwrap();
    let err = read_wave(&path).unwrap_err();
    assert!(matches!(err, ReportError::MissingVersion { .. }), "{err:?}");
    std::fs::write(&path, "{not json").unwrap();
    let err = read_wave(&path).unwrap_err();
    assert!(matches!(err, ReportError::Parse { .. }), "{err:?}");
    assert!(err.to_string().contains(&path.display().to_string()));
}

#[test]
fn junit_has_one_case_per_cell_a_failure_and_an_unknown_error() {
    let (dir, wave) = written_sample();
    let xml = read(&dir, JUNIT_XML);
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "testsuites");
    assert_eq!(root.attribute("name"), Some("turncut w-20250101T000000-s7"));

    let suites: Vec<_> = root
        .children()
        .filter(|n| n.has_tag_name("testsuite"))
        .map(|n| n.attribute("name").unwrap())
        .collect();
    assert_eq!(
        suites,
        [
            "everyday.runner-codex.local.single",
            "everyday.runner-codex.local.follow-up"
        ]
    );

    let cases: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("testcase"))
        .collect();
    let names: Vec<_> = cases.iter().map(|n| n.attribute("name").unwrap()).collect();
    let expected: Vec<_> = wave.cells.iter().map(|c| c.spec.name()).collect();
    assert_eq!(names, expected);
    for (case, cell) in cases.iter().zip(&wave.cells) {
        assert_eq!(
            case.attribute("classname"),
            Some(cell.spec.scenario_id.as_str())
        );
    }

    let failures: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("failure"))
        .collect();
    assert_eq!(failures.len(), 1);
    assert_eq!(
        failures[0].parent().unwrap().attribute("name"),
        Some("everyday.runner-codex.local.single@runner.turn_intent.persisted#1/kill-runner")
    );
    let message = failures[0].attribute("message").unwrap();
    assert!(message.contains("no-replay.turn") && message.contains(FAIL_MESSAGE));
    let description = failures[0].text().unwrap();
    assert!(description.contains("journal.jsonl:12"), "{description}");
    assert!(description.contains(FAIL_REPRODUCE), "{description}");

    let errors: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("error"))
        .collect();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].attribute("type"), Some("unknown"));
    assert_eq!(
        errors[0].parent().unwrap().attribute("name"),
        Some("everyday.runner-codex.local.follow-up@codex.turn.recorded#2/hang-provider")
    );
    assert!(errors[0].attribute("message").unwrap().contains(INJECTION));
    assert_eq!(
        doc.descendants()
            .filter(|n| n.has_tag_name("skipped"))
            .count(),
        0
    );
}

#[test]
fn summary_names_the_failure_its_message_and_reproduce_command() {
    let (dir, _) = written_sample();
    let summary = read(&dir, SUMMARY_MD);
    assert!(
        summary.starts_with("# turncut wave `w-20250101T000000-s7`: fail"),
        "{summary}"
    );
    assert!(
        summary.contains("5 cells: 3 pass, 1 unknown, 1 fail"),
        "{summary}"
    );
    assert!(
        summary.contains(&format!("`{FAIL_REPRODUCE}`")),
        "{summary}"
    );
    assert!(summary.contains(FAIL_MESSAGE), "{summary}");
    assert!(summary.contains("| t004 |"), "{summary}");
    // The injected markup is escaped, so GitHub shows it as text.
    assert!(!summary.contains("<b>"), "{summary}");
    assert!(!summary.contains("All 5 cells passed"), "{summary}");
}

#[test]
fn a_skipped_scenario_is_listed_as_skipped_in_every_report_never_as_passed() {
    let mut wave = sample_wave();
    wave.cells.retain(|c| c.verdict == Verdict::Pass);
    wave.skipped.push(crate::model::Skipped {
        scenario_id: "everyday.runner-codex-real.local.single".to_owned(),
        reason: "codex is not on PATH".to_owned(),
    });
    let summary = summary_markdown(&wave);
    assert!(
        summary.contains("**Skipped:** 1 not run, not passed, for 1 reason"),
        "{summary}"
    );
    assert!(
        summary.contains("- **1** skipped: codex is not on PATH"),
        "{summary}"
    );
    let xml = junit_xml(&wave, &Default::default()).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let skipped: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("skipped"))
        .map(|n| n.attribute("message").unwrap_or_default().to_owned())
        .collect();
    assert_eq!(skipped, vec!["codex is not on PATH".to_owned()], "{xml}");
    let page = report_html(&wave, &Default::default());
    assert!(page.contains("Skipped (not run, not passed)"));
}

/// The verdict and figures first, a one-line skip count, the failing cells
/// by first failing oracle, the skips one line per reason with the ids
/// collapsed, the per-scenario table last.
#[test]
fn summary_leads_with_the_verdict_and_groups_failures_by_oracle_and_skips_by_reason() {
    let mut wave = sample_wave();
    let no_fuse = "a power-cut cell needs a lazy mount, and FUSE cannot be used here: /dev/fuse cannot be opened";
    for i in 0..184 {
        wave.skipped.push(crate::model::Skipped {
            scenario_id: format!("everyday.runner-codex.local.single/power-cut#{i}"),
            reason: no_fuse.to_owned(),
        });
    }
    for id in ["a-real", "b-real"] {
        wave.skipped.push(crate::model::Skipped {
            scenario_id: id.to_owned(),
            reason: "codex is not on PATH".to_owned(),
        });
    }
    let summary = summary_markdown(&wave);
    let lines: Vec<&str> = summary.lines().collect();
    assert_eq!(lines[0], "# turncut wave `w-20250101T000000-s7`: fail");
    assert!(
        lines[2].starts_with("seed `7` · 5 cells: 3 pass, 1 unknown, 1 fail"),
        "{summary}"
    );
    let at = |needle: &str| {
        summary
            .find(needle)
            .unwrap_or_else(|| panic!("{needle:?} in {summary}"))
    };
    assert!(at("**Skipped:** 186 not run, not passed, for 2 reasons") < at("## Failing"));
    assert!(at("### `no-replay.turn` (1)") < at("## Skipped"));
    assert!(at("### `liveness` (1)") < at("## Skipped"));
    assert!(at("## Skipped") < at("## Cells per scenario"));
    // One line per reason, the most common first; each id once, collapsed.
    let reason_lines: Vec<&&str> = lines.iter().filter(|l| l.contains("FUSE cannot")).collect();
    assert_eq!(reason_lines.len(), 1, "{summary}");
    assert!(at(&format!("- **184** skipped: {}", md_text(no_fuse))) < at("- **2** skipped: codex"));
    assert!(
        at("<details><summary>the 184 ids</summary>")
            < at("`everyday.runner-codex.local.single/power-cut#183`")
    );
    assert_eq!(summary.matches("power-cut#7`").count(), 1, "{summary}");
    assert_eq!(summary.matches("<details>").count(), 2);
    assert_eq!(summary.matches("</details>").count(), 2);
}

#[test]
fn summary_of_a_passing_wave_says_so_in_one_line() {
    let mut wave = sample_wave();
    wave.cells.retain(|c| c.verdict == Verdict::Pass);
    let summary = summary_markdown(&wave);
    assert!(summary.contains("All 3 cells passed."), "{summary}");
    assert!(!summary.contains("Failing"), "{summary}");
}

#[test]
fn html_escapes_cell_text_and_has_only_its_own_script() {
    let (dir, _) = written_sample();
    let html = read(&dir, REPORT_HTML);
    assert!(!html.contains(INJECTION));
    assert!(!html.contains("<b>x"));
    assert!(html.contains("&lt;/script&gt;&lt;b&gt;x"));
    // Its JSON data and its code; a "</" inside the data is escaped.
    assert_eq!(html.matches("<script").count(), 2);
    assert_eq!(html.matches("</script>").count(), 2);
    // No external assets: everything the page needs is inline, and every
    // link is to a place in the page.
    assert!(!html.contains("src="));
    let svg_namespace = "http://www.w3.org/2000/svg";
    assert_eq!(
        html.matches("http://").count(),
        html.matches(svg_namespace).count()
    );
    assert!(!html.contains("https://"));
    assert_eq!(
        html.matches("href=").count(),
        html.matches("href=\"#").count()
    );
}

#[test]
fn html_keeps_a_passing_cell_compact_and_details_for_the_others() {
    let html = report_html(&sample_wave(), &Timelines::new());
    for id in ["t003", "t004"] {
        assert!(html.contains(&format!("<template id=\"d-{id}\">")), "{id}");
    }
    for id in ["t001", "t002", "t005"] {
        assert!(!html.contains(&format!("<template id=\"d-{id}\">")), "{id}");
        assert!(
            html.contains(&format!("\"{id}\":[")),
            "{id} has a compact record"
        );
    }
    // The failing cells are grouped by their first failing oracle, with the
    // message inline.
    let failures = &html[html.find("<section id=\"failures\">").unwrap()..];
    let failures = &failures[..failures.find("</section>").unwrap()];
    assert!(failures.contains("<summary><code>no-replay.turn</code> (1)</summary>"));
    assert!(failures.contains(FAIL_MESSAGE));
    assert!(failures.contains("<summary><code>liveness</code> (1)</summary>"));
}

#[test]
fn html_grows_by_little_per_passing_cell() {
    let mut wave = sample_wave();
    let one = report_html(&wave, &Timelines::new()).len();
    let pass = wave.cells[4].clone();
    // As in a wave: every cut point with each fault.
    for i in 0..1000 {
        let mut c = pass.clone();
        c.spec.cell_id = format!("t{}", 1000 + i);
        c.spec.events[0].cut.n = 10 + i / 4;
        c.spec.events[0].fault = Fault::ALL[i as usize % 4];
        wave.cells.push(c);
    }
    let per_cell = (report_html(&wave, &Timelines::new()).len() - one) / 1000;
    // 5,504 cells of the default wave at this size stay well under 2 MB.
    assert!(
        per_cell * 5_504 < 1_500_000,
        "{per_cell} bytes per passing cell"
    );
}

#[test]
fn every_report_orders_cells_by_number() {
    let mut wave = sample_wave();
    wave.cells.truncate(2);
    wave.cells[0].spec.cell_id = "t1000".to_owned();
    wave.cells[1].spec.cell_id = "t757".to_owned();
    for c in &mut wave.cells {
        c.verdict = Verdict::Fail;
        c.oracles[0].verdict = Verdict::Fail;
    }
    let first = |text: &str| text.find("t757").unwrap() < text.find("t1000").unwrap();
    assert!(
        first(&summary_markdown(&wave)),
        "{}",
        summary_markdown(&wave)
    );
    assert!(first(&junit_xml(&wave, &Timelines::new()).unwrap()));
    assert!(first(&report_html(&wave, &Timelines::new())));
}

#[test]
fn junit_has_the_scenario_file_and_the_timeline_of_a_failing_case() {
    let mut wave = sample_wave();
    wave.run.scenario_files.insert(
        "everyday.runner-codex.local.single".to_owned(),
        "scenarios/single.toml".to_owned(),
    );
    let timelines = Timelines::from([
        ("t003".to_owned(), "12 ms >> H cut.reached".to_owned()),
        ("t002".to_owned(), "a passing cell's timeline".to_owned()),
    ]);
    let xml = junit_xml(&wave, &timelines).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let case = |name: &str| {
        doc.descendants()
            .find(|n| n.has_tag_name("testcase") && n.attribute("name").unwrap().ends_with(name))
            .unwrap()
    };
    let failing = case("runner.turn_intent.persisted#1/kill-runner");
    assert_eq!(failing.attribute("file"), Some("scenarios/single.toml"));
    let out = failing
        .children()
        .find(|n| n.has_tag_name("system-out"))
        .unwrap();
    assert_eq!(out.text(), Some("12 ms >> H cut.reached"));
    let passing = case("runner.turn_intent.persisted#1/kill-provider");
    assert!(!passing.children().any(|n| n.has_tag_name("system-out")));
}

#[test]
fn html_grid_puts_each_cell_under_its_fault() {
    let html = report_html(&sample_wave(), &Timelines::new());
    // Row runner.turn_intent.persisted#1: kill-runner is t003, kill-provider t002.
    let row_start = html
        .find("<tr><th><code>runner.turn_intent.persisted#1</code></th>")
        .unwrap();
    let row = &html[row_start..row_start + html[row_start..].find("</tr>").unwrap()];
    let tds: Vec<&str> = row.split("<td>").skip(1).collect();
    assert_eq!(tds.len(), Fault::ALL.len());
    assert!(tds[0].contains("data-cell=\"t003\"") && tds[0].contains("failed · provider_lost"));
    assert!(tds[1].contains("data-cell=\"t002\""));
    assert!(!tds[2].contains("data-cell") && !tds[3].contains("data-cell"));
    assert!(html.contains("<tr><th>clean run</th>"));
}

#[test]
fn html_shows_a_timeline_only_when_given() {
    let wave = sample_wave();
    assert!(!report_html(&wave, &Timelines::new()).contains("<h4>sequence</h4>"));
    let timelines = Timelines::from([(
        "t003".to_owned(),
        "    12 ms >> H cut.reached <cut>".to_owned(),
    )]);
    let html = report_html(&wave, &timelines);
    assert_eq!(html.matches("<h4>sequence</h4>").count(), 1);
    assert_eq!(html.matches("data-seq=\"t003\"").count(), 1);
    assert!(
        html.contains("cut.reached &lt;cut&gt;"),
        "the text timeline"
    );
    assert!(
        html.contains("\"H>cut.reached <cut>\""),
        "the diagram's rows"
    );
}

#[test]
fn cell_line_shows_verdict_name_duration_and_first_reason() {
    let wave = sample_wave();
    assert_eq!(
        cell_line(&wave.cells[2]),
        format!(
            "t003 fail    everyday.runner-codex.local.single@runner.turn_intent.persisted#1/kill-runner  143 ms  no-replay.turn: {FAIL_MESSAGE}"
        )
    );
    assert_eq!(
        cell_line(&wave.cells[0]),
        "t001 pass    everyday.runner-codex.local.single@clean  143 ms"
    );
    let mut long = wave.cells[3].clone();
    long.oracles[1].message = "x".repeat(500);
    let line = cell_line(&long);
    let detail = line.split("  ").last().unwrap();
    assert_eq!(detail.chars().count(), CELL_LINE_DETAIL_CHARS_MAX);
    assert!(detail.starts_with("liveness: xxx") && detail.ends_with('…'));
}

#[test]
fn cell_line_prefers_the_harness_error_for_an_unknown_cell() {
    let mut cell = sample_wave().cells[3].clone();
    cell.error = Some("runner did not start\nwithin 5000 ms".to_owned());
    assert!(
        cell_line(&cell).ends_with("  harness error: runner did not start within 5000 ms"),
        "{}",
        cell_line(&cell)
    );
}

fn shards() -> (WaveResult, WaveResult, WaveResult) {
    let whole = sample_wave();
    let mut one = whole.clone();
    let mut two = whole.clone();
    one.shard = Some((1, 2));
    two.shard = Some((2, 2));
    one.jobs = 1;
    two.jobs = 1;
    one.duration_ms = 2_500;
    two.duration_ms = 1_200;
    one.cells = whole.cells.iter().step_by(2).cloned().collect();
    two.cells = whole.cells.iter().skip(1).step_by(2).cloned().collect();
    (whole, one, two)
}

#[test]
fn merge_reassembles_shards_sorted_by_cell_id() {
    let (whole, one, two) = shards();
    assert_eq!(merge(vec![two, one]).unwrap(), whole);
}

#[test]
fn merge_sorts_cell_ids_by_number() {
    let mut wave = sample_wave();
    wave.cells.truncate(2);
    wave.cells[0].spec.cell_id = "t1000".to_owned();
    wave.cells[1].spec.cell_id = "t999".to_owned();
    let merged = merge(vec![wave]).unwrap();
    let ids: Vec<_> = merged
        .cells
        .iter()
        .map(|c| c.spec.cell_id.as_str())
        .collect();
    assert_eq!(ids, ["t999", "t1000"]);
}

#[test]
fn merge_rejects_different_waves_naming_both() {
    let (_, one, mut two) = shards();
    two.wave_id = "w-20250102T000000-s7".to_owned();
    let err = merge(vec![one.clone(), two]).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, ReportError::WaveMismatch { .. }));
    assert!(message.contains("w-20250101T000000-s7") && message.contains("w-20250102T000000-s7"));

    let (_, _, mut two) = shards();
    two.seed = 8;
    let err = merge(vec![one, two]).unwrap_err();
    assert!(err.to_string().contains("seed 8"), "{err}");
}

#[test]
fn merge_rejects_duplicate_cells() {
    let (_, mut one, two) = shards();
    one.cells.push(two.cells[0].clone());
    let err = merge(vec![one, two]).unwrap_err();
    assert!(matches!(err, ReportError::DuplicateCell { ref cell_id, .. } if cell_id == "t002"));
    assert!(err.to_string().contains("t002"));
}

#[test]
fn merge_rejects_missing_repeated_or_mismatched_shards() {
    let (whole, one, two) = shards();
    let err = merge(vec![one.clone()]).unwrap_err();
    assert!(
        matches!(
            err,
            ReportError::MissingShards {
                found: 1,
                count: 2,
                ..
            }
        ),
        "{err:?}"
    );
    let err = merge(vec![one.clone(), one.clone()]).unwrap_err();
    assert!(matches!(err, ReportError::DuplicateShard { .. }), "{err:?}");
    let mut three = two.clone();
    three.shard = Some((2, 3));
    let err = merge(vec![one.clone(), three]).unwrap_err();
    assert!(
        matches!(err, ReportError::ShardCountMismatch { .. }),
        "{err:?}"
    );
    let err = merge(vec![whole, two]).unwrap_err();
    assert!(matches!(err, ReportError::MixedSharding { .. }), "{err:?}");
    assert!(matches!(
        merge(vec![]).unwrap_err(),
        ReportError::NothingToMerge
    ));
}

/// A wave run in two phases: stage-1 shards, then the stage-2 shards
/// planned from them, each phase numbered 1/n … n/n on its own; merged they
/// are the whole wave, and either phase alone is refused.
#[test]
fn merge_joins_both_phases_of_a_two_phase_wave_and_refuses_one_alone() {
    let (whole, mut one, mut two) = shards();
    let mut stage2: Vec<WaveResult> = (1..=2)
        .map(|i| {
            let mut w = whole.clone();
            w.stages = crate::model::Stages::Stage2;
            w.shard = Some((i, 2));
            w.jobs = 1;
            w.duration_ms = 100 * u64::from(i);
            w.cells = Vec::new();
            w
        })
        .collect();
    // Stage 1 holds all but the last cell; stage 2 ran the last one (as
    // `t005` of a plan2 would be, say `t001.1`).
    let last = whole.cells.last().unwrap().clone();
    one.cells.retain(|c| c.spec.cell_id != last.spec.cell_id);
    two.cells.retain(|c| c.spec.cell_id != last.spec.cell_id);
    stage2[1].cells.push(last);
    one.stages = crate::model::Stages::Stage1;
    two.stages = crate::model::Stages::Stage1;
    let all = vec![
        stage2[1].clone(),
        one.clone(),
        stage2[0].clone(),
        two.clone(),
    ];
    let merged = merge(all).unwrap();
    assert_eq!(merged.cells, whole.cells);
    assert_eq!(merged.stages, crate::model::Stages::Both);
    assert_eq!(merged.jobs, 2, "each phase ran on 2 machines side by side");
    assert_eq!(
        merged.duration_ms,
        2_500 + 200,
        "the phases ran one after the other"
    );
    for alone in [vec![one.clone(), two.clone()], stage2.clone()] {
        let err = merge(alone).unwrap_err();
        assert!(
            matches!(err, ReportError::StagesIncomplete { .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("turncut plan --stage2"), "{err}");
    }
    let mut stopped = one.clone();
    stopped.stopped = Some("stopped after 1 cell did not pass (--max-fail 1)".into());
    stopped.not_run = 2;
    let partial = merge(vec![stopped, two.clone()]).unwrap();
    assert!(
        partial.stopped.is_some(),
        "a stage 1 that stopped has no stage 2 to wait for"
    );
    let err = merge(vec![one, two, stage2[0].clone()]).unwrap_err();
    assert!(
        matches!(
            err,
            ReportError::MissingShards {
                found: 1,
                count: 2,
                ..
            }
        ),
        "{err:?}"
    );
    let err = merge(vec![whole, stage2[0].clone(), stage2[1].clone()]).unwrap_err();
    assert!(
        matches!(err, ReportError::StagesIncomplete { .. }),
        "{err:?}"
    );
}

#[test]
fn markdown_code_spans_survive_backticks_and_pipes() {
    assert_eq!(md_code("a|b"), "`a\\|b`");
    assert_eq!(md_code("say `hi`"), "`` say `hi` ``");
    assert_eq!(md_text("*x* <b>"), "\\*x\\* \\<b\\>");
}

#[test]
fn durations_read_naturally() {
    assert_eq!(format_ms(143), "143 ms");
    assert_eq!(format_ms(12_345), "12.3 s");
    assert_eq!(format_ms(245_000), "4 min 05 s");
}
