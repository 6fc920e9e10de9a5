//! Generated workflows: controller programs nobody wrote.
//!
//! The built-in scenarios are thirteen programs someone thought of. Here a
//! proptest state machine (`proptest_state_machine::ReferenceStateMachine`)
//! generates others over the runner contract's operations: a scripted model
//! of 1–3 turns (messages, commands with and without approval, long
//! commands, commands in a shell, file changes), then a task's submit and
//! 0–8 controller steps — follow-ups now, while a turn is active, once the
//! task settled or during a recovery; the same follow-up again; a
//! follow-up's id with another text; awaits; Retries when the task failed
//! or always, and the same Retry id again; another task submitted on the
//! same runner (at most [`TASKS_MAX`]), and a switch back to an earlier
//! one (the steps act on the task submitted or switched to last). The
//! reference state holds what
//! the controller has done, so only programs a controller could send are
//! drawn, and a failing one shrinks (fewer steps, plainer steps, a smaller
//! script) the way a schedule does.
//!
//! A program becomes an ordinary scenario file ([`Program::scenario_toml`],
//! suite `generated`), parsed and validated like any other, so a shrunk
//! failure is written out as a scenario a person can add to `scenarios/`
//! (`turncut explore --workflows --emit-scenario DIR`). Nothing here judges
//! anything: the oracles judge a generated program's cells against the
//! contract model as they judge every cell, with no `[expect]` to lean on.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use proptest::strategy::{BoxedStrategy, ValueTree as _};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use proptest_state_machine::ReferenceStateMachine;

use crate::scenario::{FollowUpWhen, RetryWhen, Scenario, ScenarioError};

/// The suite of every generated program's scenario ids.
pub const SUITE: &str = "generated";

/// At most this many controller steps after the submit.
pub const STEPS_MAX: usize = 8;

/// At most this many tasks in a program.
pub const TASKS_MAX: usize = 3;

/// A tool call of a generated script turn, before a profile gives it its
/// protocol's form ([`Tool::toml`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    /// A command: whether it asks for approval, runs long enough to be cut
    /// while it runs, or runs inside a shell of its own.
    Command {
        approval: bool,
        long: bool,
        nested: bool,
    },
    /// A file written for the model: `fs/write_text_file` on ACP, `Write`
    /// on the native profile, the effect command elsewhere.
    WriteFile,
    /// A file added through `apply_patch` (Codex); a `WriteFile` on the
    /// other profiles.
    Patch,
}

impl Tool {
    /// The tool's TOML inline table for `profile`, with effect key `key`.
    fn toml(self, key: &str, profile: &str) -> String {
        match self {
            Tool::Command {
                approval,
                long,
                nested,
            } => {
                let mut t =
                    format!("{{ key = \"{key}\", kind = \"command\", approval = {approval}");
                if long {
                    t.push_str(", duration_ms = 300");
                }
                if nested {
                    t.push_str(", nested_shell = true");
                }
                t + " }"
            }
            Tool::Patch
                if wire::profiles::facts(profile)
                    .is_some_and(|f| f.protocol == wire::profiles::Protocol::Codex) =>
            {
                format!("{{ key = \"{key}\", kind = \"patch\", path = \"{key}.txt\" }}")
            }
            Tool::WriteFile | Tool::Patch => {
                format!("{{ key = \"{key}\", kind = \"write-file\", path = \"{key}.txt\" }}")
            }
        }
    }
}

/// One generated script turn: how many messages the model says before its
/// tools, and the tools.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Turn {
    /// Agent messages before the tools (0–2).
    pub say: usize,
    /// Tool calls, in order (0–3).
    pub tools: Vec<Tool>,
}

/// One controller step after the submit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// A new follow-up (`f<k>`, a text of its own), sent `when`.
    FollowUp(FollowUpWhen),
    /// Follow-up `k` (0-based) sent again: the same id and text.
    Repeat(usize),
    /// Follow-up `k`'s id with another text.
    Conflict(usize),
    /// Wait until the task settles.
    Await,
    /// A new Retry (`r<k>`).
    Retry(RetryWhen),
    /// The latest Retry's id again (a Retry repeated while its run goes, or
    /// after it settled).
    RetryAgain,
    /// Another task submitted on the same runner; the steps after it act
    /// on it.
    Submit,
    /// The steps after it act on task `k` (0-based), submitted before.
    Switch(usize),
}

/// What the controller did on one task: how many follow-ups and Retries it
/// issued (new ones).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskShape {
    /// Follow-ups issued (new ones).
    pub follow_ups: usize,
    /// Retries issued (new ones).
    pub retries: usize,
}

/// The reference state: the script, and what the controller has done so
/// far (per task, the task the steps act on, how many steps).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    /// The scripted model's turns.
    pub script: Vec<Turn>,
    /// The tasks submitted, in order (the first at the start).
    pub tasks: Vec<TaskShape>,
    /// The task the steps act on (0-based).
    pub current: usize,
    /// Steps so far.
    pub steps: usize,
}

impl Shape {
    /// The task the steps act on.
    fn on(&self) -> TaskShape {
        self.tasks[self.current]
    }
}

/// The state machine the programs are drawn from.
pub struct Machine;

fn tool() -> BoxedStrategy<Tool> {
    prop_oneof![
        4 => (any::<bool>(), prop::bool::weighted(0.2), prop::bool::weighted(0.15)).prop_map(
            |(approval, long, nested)| Tool::Command { approval, long, nested }
        ),
        1 => Just(Tool::WriteFile),
        1 => Just(Tool::Patch),
    ]
    .boxed()
}

fn turn() -> BoxedStrategy<Turn> {
    (0..=2usize, prop::collection::vec(tool(), 0..=3))
        .prop_map(|(say, tools)| Turn { say, tools })
        .boxed()
}

fn follow_up_when() -> BoxedStrategy<FollowUpWhen> {
    prop_oneof![
        Just(FollowUpWhen::Now),
        Just(FollowUpWhen::TurnActive),
        Just(FollowUpWhen::Settled),
        Just(FollowUpWhen::Recovering),
    ]
    .boxed()
}

impl ReferenceStateMachine for Machine {
    type State = Shape;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<Shape> {
        prop::collection::vec(turn(), 1..=3)
            .prop_map(|script| Shape {
                script,
                tasks: vec![TaskShape::default()],
                current: 0,
                steps: 0,
            })
            .boxed()
    }

    fn transitions(state: &Shape) -> BoxedStrategy<Op> {
        let retry_when = prop_oneof![Just(RetryWhen::FailedClosed), Just(RetryWhen::Always)];
        let mut ops: Vec<(u32, BoxedStrategy<Op>)> = vec![
            (4, follow_up_when().prop_map(Op::FollowUp).boxed()),
            (3, Just(Op::Await).boxed()),
            (2, retry_when.prop_map(Op::Retry).boxed()),
        ];
        let on = state.on();
        if on.follow_ups > 0 {
            let k = on.follow_ups;
            ops.push((1, (0..k).prop_map(Op::Repeat).boxed()));
            ops.push((1, (0..k).prop_map(Op::Conflict).boxed()));
        }
        if on.retries > 0 {
            ops.push((1, Just(Op::RetryAgain).boxed()));
        }
        if state.tasks.len() < TASKS_MAX {
            ops.push((1, Just(Op::Submit).boxed()));
        }
        if state.tasks.len() > 1 {
            ops.push((1, (0..state.tasks.len()).prop_map(Op::Switch).boxed()));
        }
        proptest::strategy::Union::new_weighted(ops).boxed()
    }

    fn preconditions(state: &Shape, op: &Op) -> bool {
        state.steps < STEPS_MAX
            && match op {
                Op::Repeat(k) | Op::Conflict(k) => *k < state.on().follow_ups,
                Op::RetryAgain => state.on().retries > 0,
                Op::Submit => state.tasks.len() < TASKS_MAX,
                Op::Switch(k) => *k < state.tasks.len(),
                _ => true,
            }
    }

    fn apply(mut state: Shape, op: &Op) -> Shape {
        state.steps += 1;
        let current = state.current;
        match op {
            Op::FollowUp(_) => state.tasks[current].follow_ups += 1,
            Op::Retry(_) => state.tasks[current].retries += 1,
            Op::Submit => {
                state.tasks.push(TaskShape::default());
                state.current = state.tasks.len() - 1;
            }
            Op::Switch(k) => state.current = *k,
            _ => {}
        }
        state
    }
}

/// A generated program: the script and the controller's steps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program {
    /// The script.
    pub script: Vec<Turn>,
    /// The steps after the submit.
    pub ops: Vec<Op>,
}

/// What the state machine's strategy draws: the initial state (the
/// script), the steps, and the counter of steps a test saw.
pub type Drawn = (Shape, Vec<Op>, Option<Arc<AtomicUsize>>);

/// The strategy of programs: a script and 1–[`STEPS_MAX`] steps, shrinking
/// toward fewer and plainer steps and a smaller script (possibly to a
/// submit alone).
pub fn strategy() -> impl Strategy<Value = Drawn> {
    Machine::sequential_strategy(1..=STEPS_MAX)
}

impl Program {
    /// The program a drawn value stands for, in a test of it: shrinking
    /// deletes the steps a test never saw without trying them, so a test of
    /// a whole program marks every step seen (`seen`). Outside a test (the
    /// tree's value read before proptest runs it), [`Program::peek`].
    pub fn of(drawn: &Drawn) -> Program {
        let (_, ops, seen) = drawn;
        if let Some(seen) = seen {
            seen.store(ops.len(), Ordering::SeqCst);
        }
        Program::peek(drawn)
    }

    /// The program a drawn value stands for, read outside a test (the
    /// state machine's tree refuses to give a value while its counter of
    /// seen steps is set).
    pub fn peek(drawn: &Drawn) -> Program {
        Program {
            script: drawn.0.script.clone(),
            ops: drawn.1.clone(),
        }
    }
}

/// `k` programs drawn by `runner` (`workflow::seeded_runner`: the same
/// seed draws the same programs).
pub fn draw(runner: &mut TestRunner, k: usize) -> Vec<Program> {
    let strategy = strategy();
    (0..k)
        .filter_map(|_| strategy.new_tree(runner).ok())
        .map(|tree| Program::peek(&tree.current()))
        .collect()
}

/// The text of follow-up `k` (0-based) of task `task` (0-based): each
/// task's texts are its own.
fn follow_up_text(task: usize, k: usize) -> String {
    match task {
        0 => format!("Follow-up {}: also do step {}", k + 1, k + 2),
        t => format!(
            "Follow-up {} on {}: also do step {}",
            k + 1,
            task_name(t),
            k + 2
        ),
    }
}

/// The prompt the first generated task is submitted with.
pub const PROMPT: &str = "Start the work";

/// The prompt task `task` (0-based) is submitted with.
fn prompt(task: usize) -> String {
    match task {
        0 => PROMPT.to_owned(),
        t => format!("{PROMPT} on {}", task_name(t)),
    }
}

/// The id of task `task` (0-based): `task-1`, `task-2`, …
fn task_name(task: usize) -> String {
    format!("task-{}", task + 1)
}

/// The message id of a task's `kind` message `n` (1-based): `f2` on the
/// first task, `task-2-f2` on another.
fn message_id(task: usize, kind: &str, n: usize) -> String {
    match task {
        0 => format!("{kind}{n}"),
        t => format!("{}-{kind}{n}", task_name(t)),
    }
}

impl Program {
    /// The program as a scenario file of `case` for `profiles`; `chaos` is
    /// its `[chaos]` table's body (e.g. a shrunk failure's `schedules`).
    pub fn scenario_toml(&self, case: &str, profiles: &[&str], chaos: &str) -> String {
        let profile = profiles.first().copied().unwrap_or_default();
        let list: Vec<String> = profiles.iter().map(|p| format!("\"{p}\"")).collect();
        let mut t = format!(
            "suite = \"{SUITE}\"\ncase = \"{case}\"\nprofiles = [{}]\ntitle = \"{}\"\n",
            list.join(", "),
            self.title()
        );
        for (i, turn) in self.script.iter().enumerate() {
            let say: Vec<String> = (0..turn.say)
                .map(|s| format!("\"Turn {} says {}.\"", i + 1, s + 1))
                .collect();
            let tools: Vec<String> = turn
                .tools
                .iter()
                .enumerate()
                .map(|(j, tool)| tool.toml(&format!("t{}-k{}", i + 1, j + 1), profile))
                .collect();
            t.push_str(&format!(
                "\n[[script.turn]]\nsay = [{}]\ntools = [{}]\nfinal = \"Turn {} done.\"\n",
                say.join(", "),
                tools.join(", "),
                i + 1
            ));
        }
        t.push_str(&format!(
            "\n[[steps]]\nsubmit = {{ prompt = \"{PROMPT}\" }}\n"
        ));
        for step in self.steps() {
            t.push_str(&format!("[[steps]]\n{step}\n"));
        }
        t.push_str(&format!("\n[chaos]\n{chaos}"));
        t
    }

    /// The steps as scenario `[[steps]]` lines, every id given, each on
    /// its task (`task = "task-2"` before it when it is not the first).
    fn steps(&self) -> Vec<String> {
        let mut tasks = vec![TaskShape::default()];
        let mut current = 0;
        let mut out = Vec::new();
        for op in &self.ops {
            let t = &mut tasks[current];
            let line = match *op {
                Op::FollowUp(when) => {
                    t.follow_ups += 1;
                    format!(
                        "follow_up = {{ text = \"{}\", message_id = \"{}\", when = \"{}\" }}",
                        follow_up_text(current, t.follow_ups - 1),
                        message_id(current, "f", t.follow_ups),
                        when.as_str()
                    )
                }
                Op::Repeat(k) => format!(
                    "follow_up = {{ text = \"{}\", message_id = \"{}\" }}",
                    follow_up_text(current, k),
                    message_id(current, "f", k + 1)
                ),
                Op::Conflict(k) => format!(
                    "follow_up = {{ text = \"Something else under {0}'s id\", message_id = \"{0}\" }}",
                    message_id(current, "f", k + 1)
                ),
                Op::Await => "await = \"settled\"".to_owned(),
                Op::Retry(when) => {
                    t.retries += 1;
                    format!(
                        "retry = {{ when = \"{}\", message_id = \"{}\" }}",
                        when.as_str(),
                        message_id(current, "r", t.retries)
                    )
                }
                Op::RetryAgain => format!(
                    "retry = {{ when = \"always\", message_id = \"{}\" }}",
                    message_id(current, "r", t.retries)
                ),
                Op::Submit => {
                    tasks.push(TaskShape::default());
                    current = tasks.len() - 1;
                    format!(
                        "submit = {{ prompt = \"{}\", message_id = \"{}\" }}",
                        prompt(current),
                        message_id(current, "m", 1)
                    )
                }
                Op::Switch(k) => {
                    current = k;
                    continue;
                }
            };
            out.push(match current {
                0 => line,
                k => format!("task = \"{}\"\n{line}", task_name(k)),
            });
        }
        out
    }

    /// One line for people: the steps in order.
    pub fn title(&self) -> String {
        let steps: Vec<String> = self
            .ops
            .iter()
            .map(|op| match op {
                Op::FollowUp(w) => format!("follow-up@{}", w.as_str()),
                Op::Repeat(k) => format!("follow-up f{} again", k + 1),
                Op::Conflict(k) => format!("f{}'s id with another text", k + 1),
                Op::Await => "await".to_owned(),
                Op::Retry(w) => format!("retry@{}", w.as_str()),
                Op::RetryAgain => "the same retry again".to_owned(),
                Op::Submit => "another task".to_owned(),
                Op::Switch(k) => format!("on {}", task_name(*k)),
            })
            .collect();
        format!(
            "Generated: a {}-turn script; submit{}{}",
            self.script.len(),
            if steps.is_empty() { "" } else { ", " },
            steps.join(", ")
        )
    }

    /// The program as a scenario (parsed and validated like a file).
    pub fn scenario(
        &self,
        case: &str,
        profiles: &[&str],
        chaos: &str,
    ) -> Result<Scenario, ScenarioError> {
        let text = self.scenario_toml(case, profiles, chaos);
        crate::scenario::parse(&text, &format!("{SUITE}/{case}.toml"))
    }
}

/// The `[chaos]` body a generated program runs with: every fault a
/// schedule draws, at every boundary (the wave and explore draw schedules
/// from it; its one-cut cells are not planned for generated programs).
pub const CHAOS: &str = "cut = \"every-boundary\"\nfaults = [\"kill-runner\", \"kill-provider\", \"kill-both\", \"hang-provider\", \"follow-up\", \"retry\", \"fail-write\", \"disk-full\"]\n";

/// The longest a failure is shrunk, in milliseconds.
pub const SHRINK_TIME_MS: u32 = 120_000;

/// A proptest runner with a fixed seed: the same seed draws the same
/// schedules.
pub fn seeded_runner(seed: u64, shrink_iters: u32) -> TestRunner {
    let mut bytes = [0u8; 32];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&crate::plan::mix(seed ^ i as u64).to_le_bytes());
    }
    let config = Config {
        cases: u32::MAX,
        failure_persistence: None,
        max_shrink_iters: shrink_iters,
        // Shrinking stops after this long (with the smallest failure so far).
        max_shrink_time: SHRINK_TIME_MS,
        ..Config::default()
    };
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
}

/// What a wave mixes into its seed to draw its programs (explore draws
/// others from the same seed).
const WAVE_SALT: u64 = 0x776f_726b_666c_6f77;

/// The case of program `n` of a wave seeded `seed`.
pub fn wave_case(seed: u64, n: usize) -> String {
    format!("seed{seed}-p{n}")
}

/// The seed and number a [`wave_case`] name holds.
pub fn parse_wave_case(case: &str) -> Option<(u64, usize)> {
    let (seed, n) = case.strip_prefix("seed")?.split_once("-p")?;
    Some((seed.parse().ok()?, n.parse().ok()?))
}

/// The sources of the generated programs of a wave seeded `seed`: `k`
/// programs, each as a scenario file per fake profile (a tool's form is
/// the profile's), case [`wave_case`], as `(file name, text)`. Program `n`
/// depends on the seed and `n` alone (the draws are sequential), so
/// `turncut run` finds it again from its id.
pub fn wave_sources(seed: u64, k: usize) -> Vec<(String, String)> {
    let mut runner = seeded_runner(seed ^ WAVE_SALT, 0);
    let mut out = Vec::new();
    for (n, program) in draw(&mut runner, k).iter().enumerate() {
        let case = wave_case(seed, n);
        for profile in wire::profiles::BUILTIN.iter().map(|p| p.name) {
            let text = program.scenario_toml(&case, &[profile], CHAOS);
            out.push((format!("{case}.{profile}.toml"), text));
        }
    }
    out
}

/// The generated programs of a wave seeded `seed` ([`wave_sources`]),
/// parsed and marked `generated`.
pub fn wave_programs(seed: u64, k: usize) -> Vec<Scenario> {
    wave_sources(seed, k)
        .into_iter()
        .map(|(name, text)| {
            // Every drawn program is valid on every fake profile (the
            // test below): a refusal here is a defect of the generator.
            let mut s = crate::scenario::parse(&text, &format!("{SUITE}/{name}"))
                .unwrap_or_else(|e| panic!("generated {name}: {e}"));
            s.generated = true;
            s
        })
        .collect()
}

/// Adds the generated program that scenario id `id` names (suite
/// `generated`, a [`wave_case`]) unless `scenarios` has it: `turncut run`
/// and `replay` of a wave's generated cell need no file.
pub fn add_wave_program(scenarios: &mut Vec<Scenario>, id: &str) {
    use crate::model::ScenarioId;
    let case = ScenarioId::part_of(id, 3);
    if ScenarioId::part_of(id, 0) != SUITE || crate::scenario::find(scenarios, id).is_some() {
        return;
    }
    if let Some((seed, n)) = parse_wave_case(case) {
        let drawn = wave_programs(seed, n + 1);
        scenarios.extend(drawn.into_iter().filter(|s| s.case == case));
    }
}

/// A new program tree drawn from `runner` (its shrinking is proptest's).
pub fn new_tree(
    runner: &mut TestRunner,
) -> Option<impl proptest::strategy::ValueTree<Value = Drawn> + use<>> {
    strategy().new_tree(runner).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wave_program_is_found_again_from_its_id_alone() {
        let wave = wave_programs(7, 3);
        assert_eq!(wave.len(), 3 * wire::profiles::BUILTIN.len());
        assert!(wave.iter().all(|s| s.generated));
        let last = wave.last().expect("programs");
        let id = last.ids().pop().expect("an id");
        let mut found = Vec::new();
        add_wave_program(&mut found, &id);
        let (again, _) = crate::scenario::find(&found, &id).expect("regenerated");
        assert_eq!(format!("{:?}", again.steps), format!("{:?}", last.steps));
        assert_eq!(format!("{:?}", again.script), format!("{:?}", last.script));
        assert_eq!(parse_wave_case(&wave_case(7, 2)), Some((7, 2)));
        assert_eq!(parse_wave_case("s7-w2"), None);
    }

    #[test]
    fn every_drawn_program_is_a_valid_scenario_on_every_fake_profile() {
        for (i, p) in draw(&mut seeded_runner(42, 0), 200).iter().enumerate() {
            for profile in wire::profiles::BUILTIN.iter().map(|p| p.name) {
                let s = p.scenario(&format!("w{i}"), &[profile], CHAOS);
                assert!(
                    s.is_ok(),
                    "{profile}: {:?}\n{}",
                    s.err(),
                    p.scenario_toml("w", &[profile], CHAOS)
                );
            }
        }
    }

    #[test]
    fn the_same_seed_draws_the_same_programs_and_steps_keep_their_ids() {
        let draw = |seed| draw(&mut seeded_runner(seed, 0), 30);
        let a = draw(7);
        assert_eq!(a, draw(7));
        assert_ne!(a, draw(8));
        assert!(a.iter().any(|p| p.ops.len() >= 3), "{a:?}");
        // Some programs run several tasks, and go back to an earlier one.
        assert!(a.iter().any(|p| p.ops.contains(&Op::Submit)), "{a:?}");
        assert!(
            a.iter()
                .any(|p| p.ops.iter().any(|o| matches!(o, Op::Switch(_)))),
            "{a:?}"
        );
        let p = Program {
            script: vec![Turn {
                say: 1,
                tools: vec![Tool::Patch],
            }],
            ops: vec![
                Op::FollowUp(FollowUpWhen::Settled),
                Op::Repeat(0),
                Op::Conflict(0),
                Op::Retry(RetryWhen::FailedClosed),
                Op::RetryAgain,
                Op::Submit,
                Op::FollowUp(FollowUpWhen::Now),
                Op::Switch(0),
                Op::Await,
            ],
        };
        let s = p.scenario("w1", &["runner-codex"], CHAOS).unwrap();
        let ids: Vec<String> = s
            .steps
            .iter()
            .map(|st| format!("{}:{}", st.task(), st.message_id().unwrap_or("await")))
            .collect();
        assert_eq!(
            ids,
            [
                "task-1:m1",
                "task-1:f1",
                "task-1:f1",
                "task-1:f1",
                "task-1:r1",
                "task-1:r1",
                "task-2:task-2-m1",
                "task-2:task-2-f1",
                "task-1:await"
            ]
        );
        assert!(
            p.scenario_toml("w1", &["runner-codex"], CHAOS)
                .contains("kind = \"patch\"")
        );
        assert!(
            p.scenario_toml("w1", &["runner-opencode"], CHAOS)
                .contains("kind = \"write-file\"")
        );
    }
}
