//! Tests of the schedule strategies (`super`).

use super::*;

fn b(role: &str, point: &str, n: u64, alive: bool) -> Boundary {
    Boundary {
        segment: 0,
        cut: Cut {
            point: point.into(),
            n,
        },
        role: Role::of(role),
        provider_alive: alive,
    }
}

#[test]
fn the_same_seed_draws_the_same_schedules() {
    let bs = vec![
        b("runner", "runner.a.persisted", 1, false),
        b("provider", "codex.x", 1, true),
        b("runner", "runner.b.persisted", 1, true),
    ];
    let f = FILE_DRAW;
    let one = draw(&bs, EventCount::default(), f, 7, 20);
    assert_eq!(one, draw(&bs, EventCount::default(), f, 7, 20));
    assert_ne!(one, draw(&bs, EventCount::default(), f, 8, 20));
    assert!(one.iter().all(|s| (1..=4).contains(&s.len())));
    // A provider fault is never the first event where no provider lives.
    for s in &one {
        if s[0].cut.point == "runner.a.persisted" {
            assert!(!nemesis::needs_provider(s[0].fault), "{s:?}");
        }
    }
}

/// Every event of 200 schedules of 4–8 events drawn from `bs` at seed 3.
fn events_drawn(bs: &[Boundary], how: Draw) -> Vec<Event> {
    let count = EventCount { min: 4, max: 8 };
    draw(bs, count, how, 3, 200).into_iter().flatten().collect()
}

#[test]
fn each_fault_is_drawn_where_it_applies() {
    let bs = vec![
        b("runner", "runner.write.turn_intent", 1, true),
        b("runner", "runner.read.turns", 1, true),
        b("runner", "runner.turn_intent.persisted", 1, true),
        b("provider", "codex.x", 1, true),
    ];
    let drawn = events_drawn(&bs, FILE_DRAW);
    for e in &drawn {
        let read = e.cut.point.starts_with(READ_POINTS);
        assert!(e.fault.applies_at(&e.cut.point), "{e}");
        // A read point is drawn for read faults only.
        assert_eq!(read, e.fault.is_read(), "{e}");
    }
    for f in [Fault::FailRead, Fault::CorruptRead, Fault::FailWrite] {
        assert!(drawn.iter().any(|e| e.fault == f), "{f} is drawn");
    }
    assert!(!drawn.iter().any(|e| e.fault == Fault::PowerCut));
}

/// The first events of `k` one-event schedules of `bs` (seed 3) that kill
/// or hang the provider.
fn provider_firsts(bs: &[Boundary], k: usize) -> Vec<Event> {
    draw(bs, EventCount { min: 1, max: 1 }, WORKFLOW_DRAW, 3, k)
        .into_iter()
        .map(|s| s[0].clone())
        .filter(|e| matches!(e.fault, Fault::KillProvider | Fault::HangProvider))
        .collect()
}

/// A schedule's first provider kill or hang lands at a point of the
/// provider's own, where it is held: among a program's boundaries the
/// runner's are most.
#[test]
fn a_first_provider_kill_lands_where_the_provider_is_held() {
    let mut bs: Vec<Boundary> = (0..30)
        .map(|i| b("runner", &format!("runner.p{i}.sent"), 1, true))
        .collect();
    bs.push(b("provider", "codex.turn_start.responded", 1, true));
    bs.push(b("provider", "codex.turn.recorded", 1, true));
    let firsts = provider_firsts(&bs, 300);
    assert!(firsts.len() > 10, "{} provider faults", firsts.len());
    for e in &firsts {
        assert!(e.cut.point.starts_with("codex."), "{e}");
    }
}

/// Half of a schedule's first provider kills or hangs land right after the
/// provider answered (where it may hold what it answered unrecorded), the
/// other half anywhere among its points: one answer among twenty points
/// gets about half of them (0.5 + 0.5 / 20), not a twentieth.
#[test]
fn a_first_provider_kill_lands_after_an_answer_half_the_time() {
    let mut bs: Vec<Boundary> = (0..19)
        .map(|i| b("provider", &format!("codex.p{i}.recorded"), 1, true))
        .collect();
    bs.push(b("provider", "codex.turn_start.responded", 1, true));
    let firsts = provider_firsts(&bs, 600);
    let answered = firsts
        .iter()
        .filter(|e| e.cut.point.ends_with(".responded"))
        .count();
    assert!(firsts.len() > 40, "{} provider faults", firsts.len());
    assert!(
        answered * 10 > firsts.len() * 4,
        "{answered} of {}",
        firsts.len()
    );
    assert!(answered < firsts.len(), "the other points too");
}

/// An error answer lands where its process answers: a 429 or an
/// expired key at the model request, whichever of a hundred boundaries
/// there are, not `kill-runner` at the other ninety-nine.
#[test]
fn error_answers_are_drawn_where_they_answer() {
    let mut bs: Vec<Boundary> = (0..100)
        .map(|i| b("provider", &format!("codex.p{i}.notified"), 1, true))
        .collect();
    bs.push(b("provider", "codex.model.requested", 1, true));
    bs.push(b("provider", "codex.turn_start.received", 1, true));
    let drawn = events_drawn(&bs, FILE_DRAW);
    let answers: Vec<&Event> = drawn
        .iter()
        .filter(|e| e.fault.class() == FaultClass::Answer)
        .collect();
    for f in [
        Fault::RateLimit,
        Fault::AuthExpired,
        Fault::ContextOverflow,
        Fault::ErrorAnswer,
    ] {
        assert!(answers.iter().any(|e| e.fault == f), "{f} is drawn");
    }
    for e in &answers {
        assert!(e.fault.applies_at(&e.cut.point), "{e}");
    }
    // About one event in four: five answer faults of 15.
    let share = answers.len() as f64 / drawn.len() as f64;
    assert!(
        share > 0.15,
        "answer faults drawn where they apply: {share}"
    );
}

/// A generated program's later events land inside a recovery (at the
/// runner's durable writes, at the provider's recovery lookups, which no
/// clean run reaches) about half the time; a file scenario's, at the
/// runner's writes' share of the boundaries and never at a lookup.
#[test]
fn later_events_of_generated_schedules_reach_into_recoveries() {
    let mut bs: Vec<Boundary> = (0..8)
        .map(|i| b("provider", &format!("codex.p{i}.notified"), 1, true))
        .collect();
    bs.push(b("runner", "runner.turn_ended.persisted", 1, true));
    bs.push(b("runner", "runner.turn_intent.persisted", 1, true));
    let later = |how: Draw| -> Vec<Event> {
        draw(&bs, EventCount { min: 4, max: 8 }, how, 5, 300)
            .into_iter()
            .flat_map(|s| s.into_iter().skip(1))
            .filter(|e| e.fault.class() != crate::model::FaultClass::Storage)
            .collect()
    };
    let inside = |e: &&Event| {
        e.cut.point.ends_with(".persisted")
            || wire::upstream::LOOKUP_POINTS.contains(&e.cut.point.as_str())
    };
    let share =
        |events: &[Event]| events.iter().filter(inside).count() as f64 / events.len() as f64;
    let (file, workflow) = (later(FILE_DRAW), later(WORKFLOW_DRAW));
    assert!(share(&file) < 0.3, "file schedules: {}", share(&file));
    assert!(
        share(&workflow) > 0.4,
        "generated: {} (files: {})",
        share(&workflow),
        share(&file)
    );
    let at_lookup = |es: &[Event], f: Fault| {
        es.iter()
            .any(|e| e.fault == f && e.cut.point == "codex.thread_read.received")
    };
    assert!(
        !file
            .iter()
            .any(|e| e.cut.point.starts_with("codex.thread_"))
    );
    assert!(
        at_lookup(&workflow, Fault::ErrorAnswer),
        "an error answer at a lookup"
    );
    assert!(
        at_lookup(&workflow, Fault::KillProvider),
        "a kill at a lookup"
    );
}

/// A generated program's schedules cut the power too, only where the
/// wave plans power cuts (after a durable write of the runner, at a
/// provider's `.received`).
#[test]
fn workflow_schedules_cut_the_power_where_the_wave_would() {
    let bs = vec![
        b("runner", "runner.write.turn_intent", 1, true),
        b("runner", "runner.turn_intent.persisted", 1, true),
        b("runner", "runner.codex.turn_start.sent", 1, true),
        b("provider", "codex.turn.received", 1, true),
        b("provider", "codex.turn.recorded", 1, true),
    ];
    let drawn = events_drawn(&bs, WORKFLOW_DRAW);
    let cuts: Vec<&Event> = drawn
        .iter()
        .filter(|e| e.fault == Fault::PowerCut)
        .collect();
    assert!(!cuts.is_empty(), "power-cut is drawn");
    for e in cuts {
        let planned = ["runner.turn_intent.persisted", "codex.turn.received"];
        assert!(planned.contains(&e.cut.point.as_str()), "{e}");
    }
}

/// An explore run names its `unknown` cells, as a wave does: each is
/// kept with its schedule, in the count and in the list alike (a pass
/// and a failure are counted only).
#[test]
fn unknown_cells_are_kept_to_be_named() {
    let cell = |id: &str, verdict: Verdict| {
        let events =
            crate::model::parse_schedule("runner.turn_intent.persisted#1/kill-runner").unwrap();
        let spec = plan::schedule_cell(1, id.into(), "s.a.b.runner-codex".into(), &events);
        Finished {
            result: CellResult::bare(spec, verdict, Default::default()),
            evidence: None,
            timeline: String::new(),
            kept: None,
        }
    };
    let tally = Tally::default();
    tally.count("s.a.b.runner-codex", None);
    tally.count("s.a.b.runner-codex", Some(&cell("t1", Verdict::Fail)));
    tally.count("s.a.b.runner-codex", Some(&cell("t2", Verdict::Unknown)));
    assert_eq!(tally.runs.load(Ordering::SeqCst), 3);
    assert_eq!(tally.unknown.load(Ordering::SeqCst), 1);
    let kept = tally.unknown_cells.into_inner().unwrap();
    let ids: Vec<&str> = kept.iter().map(|r| r.spec.cell_id.as_str()).collect();
    assert_eq!(ids, ["t2"]);
    assert_eq!(kept[0].spec.events.len(), 1, "with its schedule");
}

#[test]
fn boundaries_are_ordered_runner_first_in_hit_order() {
    let bs = vec![
        b("provider", "codex.x", 1, true),
        b("runner", "runner.z", 1, true),
        b("runner", "runner.a", 1, true),
    ];
    let names: Vec<String> = ordered(&bs).iter().map(|b| b.cut.point.clone()).collect();
    assert_eq!(names, ["runner.z", "runner.a", "codex.x"]);
}

#[test]
fn event_counts_parse_or_say_why() {
    assert_eq!(
        parse_event_count("3").unwrap(),
        EventCount { min: 3, max: 3 }
    );
    assert_eq!(parse_event_count("1-4").unwrap(), EventCount::default());
    for bad in ["0", "4-2", "x", "1-99"] {
        assert!(parse_event_count(bad).is_err(), "{bad}");
    }
}
