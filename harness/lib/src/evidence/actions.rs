//! The harness's own side of the history: what it did (actions), the
//! requests it sent and their answers (exchanges), and every attempt of
//! each (ops). Each kind is a closed set, stored as the same text as ever
//! (`fault.fail-write`, `follow_up`, `read.task`), so an oracle matches an
//! action or a request, not a string.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::model::{Fault, ReplyExpect, TaskState};

/// Serializes a closed set as its name, and reads it back by name (another
/// name is an error naming it).
macro_rules! by_name {
    ($ty:ident, $what:literal) => {
        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(&self.name())
            }
        }

        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.name())
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let name = String::deserialize(d)?;
                $ty::parse(&name).ok_or_else(|| {
                    serde::de::Error::custom(format!(concat!("unknown ", $what, " {:?}"), name))
                })
            }
        }
    };
}

/// A controller request a scenario step or a controller-action fault sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RequestKind {
    /// `POST /v1/tasks` (`submit`).
    Submit,
    /// `POST /v1/tasks/{id}/messages` (`follow_up`).
    FollowUp,
    /// `POST /v1/tasks/{id}/retry` (`retry`).
    Retry,
}

impl RequestKind {
    /// Every request kind.
    pub const ALL: [RequestKind; 3] = [
        RequestKind::Submit,
        RequestKind::FollowUp,
        RequestKind::Retry,
    ];

    /// Its name in the evidence.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestKind::Submit => "submit",
            RequestKind::FollowUp => "follow_up",
            RequestKind::Retry => "retry",
        }
    }

    fn name(self) -> std::borrow::Cow<'static, str> {
        self.as_str().into()
    }

    /// The request kind named `name`.
    pub fn parse(name: &str) -> Option<RequestKind> {
        RequestKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

by_name!(RequestKind, "request kind");

/// Defines [`ActionKind`]'s fixed actions with their names.
macro_rules! actions {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)*) => {
        /// What the harness did, as its actions name it.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum ActionKind {
            /// A scenario step's request was answered (or not):
            /// `submit`, `follow_up`, `retry`.
            Request(RequestKind),
            /// A fault of the schedule was applied (`fault.<fault>`): a kill
            /// of the runner to restart it is `fault.kill-runner` too.
            Fault(Fault),
            $($(#[$doc])* $variant,)*
        }

        impl ActionKind {
            /// The actions that are neither a request nor a fault.
            const FIXED: &[ActionKind] = &[$(ActionKind::$variant,)*];

            /// Its name in the evidence.
            pub fn name(self) -> std::borrow::Cow<'static, str> {
                match self {
                    ActionKind::Request(r) => r.as_str().into(),
                    ActionKind::Fault(f) => format!("fault.{}", f.as_str()).into(),
                    $(ActionKind::$variant => $name.into(),)*
                }
            }
        }
    };
}

actions! {
    /// `runner.started`: the first runner of the cell is up.
    RunnerStarted = "runner.started",
    /// `settled`: an `await` step saw the task settle.
    Settled = "settled",
    /// `cut.reached`: the armed cut (the schedule's first event) was hit.
    CutReached = "cut.reached",
    /// `event.reached`: a later event of the schedule was hit.
    EventReached = "event.reached",
    /// `event.not-applied`: a later event matched a hit of a process
    /// already gone.
    EventNotApplied = "event.not-applied",
    /// `fault.hold-runner`: the runner stopped at a provider's hit until
    /// the event is applied.
    HoldRunner = "fault.hold-runner",
    /// `fault.freeze-providers`: the runner's children frozen at a kill of
    /// the runner alone.
    FreezeProviders = "fault.freeze-providers",
    /// `fault.no-provider`: a provider fault found no provider.
    NoProvider = "fault.no-provider",
    /// `fault.not-a-write`: a storage fault at a hit that is no write.
    NotAWrite = "fault.not-a-write",
    /// `fault.not-an-answer`: an error answer at a hit that answers no request.
    NotAnAnswer = "fault.not-an-answer",
    /// `restart`: a runner started again after a fault.
    Restart = "restart",
    /// `disk.still-full`: the runner's next write after `disk-full` failed too.
    DiskStillFull = "disk.still-full",
    /// `disk.quiet`: the runner wrote nothing for an idle timeout on a
    /// full disk.
    DiskQuiet = "disk.quiet",
    /// `disk.back`: the disk came back with a runner restart.
    DiskBack = "disk.back",
    /// `disks.lazy`: the cell's lazy mounts are up.
    DisksLazy = "disks.lazy",
    /// `disks.unmount-error`: a lazy mount did not unmount.
    DisksUnmountError = "disks.unmount-error",
    /// `trace.error`: the cut-point trace could not be marked.
    TraceError = "trace.error",
    /// `cut.error`: the cut side failed to serve a hit.
    CutError = "cut.error",
    /// `deadline.passed`: the cell's deadline passed while it waited on
    /// the runner.
    DeadlinePassed = "deadline.passed",
    /// `read.wait`: the final reads wait for an event still being applied.
    ReadWait = "read.wait",
    /// `read.again`: the final reads are made again after an event
    /// matched meanwhile.
    ReadAgain = "read.again",
}

impl ActionKind {
    /// The action named `name`.
    pub fn parse(name: &str) -> Option<ActionKind> {
        if let Some(r) = RequestKind::parse(name) {
            return Some(ActionKind::Request(r));
        }
        if let Some(fixed) = ActionKind::FIXED.iter().find(|a| a.name() == name) {
            return Some(*fixed);
        }
        let fault = name.strip_prefix("fault.").and_then(Fault::parse)?;
        Some(ActionKind::Fault(fault))
    }
}

by_name!(ActionKind, "action");

/// One thing the harness did, with its time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Action {
    /// Milliseconds since the cell started.
    pub at_ms: u64,
    /// What it did.
    pub what: ActionKind,
    /// Details (ids, statuses, pids).
    pub detail: Value,
}

impl Action {
    /// The schedule event (from 1) a `cut.reached`, `event.*` or
    /// `fault.hold-runner` action is about.
    pub fn event(&self) -> Option<u64> {
        self.detail["event"].as_u64()
    }

    /// The cut point of the hit it was taken at.
    pub fn point(&self) -> Option<&str> {
        self.detail["point"].as_str()
    }

    /// The fault of the event a `cut.reached` or `event.reached` action
    /// matched.
    pub fn fault(&self) -> Option<Fault> {
        self.detail["fault"].as_str().and_then(Fault::parse)
    }

    /// The pid of the process it was about (the hit's, the killed
    /// runner's).
    pub fn pid(&self) -> Option<u64> {
        self.detail["pid"].as_u64()
    }

    /// The provider a provider fault signalled.
    pub fn provider_pid(&self) -> Option<u64> {
        self.detail["provider_pid"].as_u64()
    }

    /// The process group a provider fault signalled as a whole, when the
    /// provider led its own group (acpx's queue owner and the agent it
    /// spawned): a process of that group reported silent was faulted too.
    pub fn provider_pgid(&self) -> Option<u64> {
        self.detail["provider_pgid"].as_u64()
    }

    /// When a `fault.power-cut` found every process of the cell dead
    /// (milliseconds since the epoch).
    pub fn dead_at_epoch_ms(&self) -> Option<u64> {
        self.detail["dead_at_epoch_ms"].as_u64()
    }
}

/// A request the harness sent and the runner's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exchange {
    /// Which request.
    pub kind: RequestKind,
    /// The task it was sent for.
    #[serde(default = "first_task")]
    pub task: String,
    /// The message id the harness chose.
    pub message_id: String,
    /// The text sent (empty for a Retry, which re-sends a stored message).
    pub text: String,
    /// The HTTP status (0 when no answer came: the request is indeterminate,
    /// see [`super::Evidence::ops`]).
    pub status: u16,
    /// The JSON body.
    pub body: Value,
    /// The task's state as the harness read it just before sending (a
    /// follow-up sent once the task settled): the fence's other side.
    #[serde(default)]
    pub state_before: Option<TaskState>,
    /// What the scenario step expects the runner to answer.
    #[serde(default)]
    pub expect: Option<ReplyExpect>,
    /// When its first attempt was sent, in milliseconds since the cell
    /// started: the contract model takes requests in the order they were
    /// sent (a controller-action event's request is collected after the
    /// steps').
    #[serde(default)]
    pub sent_at_ms: u64,
    /// When its answer came (or the controller gave up on one), in
    /// milliseconds since the cell started: a fault applied before then may
    /// have changed the task before the runner took the request.
    #[serde(default)]
    pub answered_at_ms: u64,
    /// Whether a controller-action event sent it (`follow-up`, `retry`)
    /// rather than a scenario step.
    #[serde(default)]
    pub injected: bool,
}

impl Exchange {
    /// The reason of a refusal (`reason` of the answer's body).
    pub fn reason(&self) -> Option<&str> {
        self.body["reason"].as_str()
    }

    /// Why a Retry was blocked (`block_reason` of the answer's body).
    pub fn block_reason(&self) -> Option<&str> {
        self.body["block_reason"].as_str()
    }

    /// The run an admitted request started or joined (`run_id`).
    pub fn run_id(&self) -> Option<&str> {
        self.body["run_id"].as_str()
    }
}

/// How a controller request ended, as Jepsen records operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpResult {
    /// The runner answered 2xx: it happened.
    Ok,
    /// The runner answered 4xx: it definitely did not happen.
    Fail,
    /// No answer (the connection was cut, or a 5xx): it may or may not have
    /// happened.
    Info,
}

/// What an op was: a request, or a final read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpKind {
    /// A controller request (`submit`, `follow_up`, `retry`).
    Request(RequestKind),
    /// The final `GET /v1/tasks/{id}` (`read.task`).
    ReadTask,
    /// The final `GET /v1/tasks/{id}/events` (`read.events`).
    ReadEvents,
}

impl OpKind {
    fn name(self) -> std::borrow::Cow<'static, str> {
        match self {
            OpKind::Request(r) => r.as_str().into(),
            OpKind::ReadTask => "read.task".into(),
            OpKind::ReadEvents => "read.events".into(),
        }
    }

    /// The op kind named `name`.
    pub fn parse(name: &str) -> Option<OpKind> {
        match name {
            "read.task" => Some(OpKind::ReadTask),
            "read.events" => Some(OpKind::ReadEvents),
            _ => RequestKind::parse(name).map(OpKind::Request),
        }
    }
}

by_name!(OpKind, "op kind");

/// One attempt of a controller request: invoked at `at_ms`, then `result`.
/// A request re-sent across a runner restart is one op per attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    /// What it was.
    pub kind: OpKind,
    /// The message id (empty for reads).
    pub message_id: String,
    /// When it was invoked, in milliseconds since the cell started.
    pub at_ms: u64,
    /// How it ended.
    pub result: OpResult,
    /// The HTTP status, when one came.
    pub status: Option<u16>,
    /// The transport error, when no answer came.
    pub error: Option<String>,
}

impl Op {
    /// The op of one attempt that got `answer`.
    pub fn of<T>(
        kind: OpKind,
        message_id: &str,
        at_ms: u64,
        answer: &anyhow::Result<(u16, T)>,
    ) -> Op {
        let (result, status, error) = match answer {
            Ok((s, _)) if (200..300).contains(s) => (OpResult::Ok, Some(*s), None),
            Ok((s, _)) if (400..500).contains(s) => (OpResult::Fail, Some(*s), None),
            Ok((s, _)) => (OpResult::Info, Some(*s), None),
            Err(e) => (OpResult::Info, None, Some(format!("{e:#}"))),
        };
        Op {
            kind,
            message_id: message_id.to_owned(),
            at_ms,
            result,
            status,
            error,
        }
    }
}

/// The task of an exchange recorded before cells ran several tasks.
fn first_task() -> String {
    crate::scenario::FIRST_TASK.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_reads_back_by_its_name_and_no_fault_takes_a_fixed_one() {
        let all = ActionKind::FIXED
            .iter()
            .copied()
            .chain(RequestKind::ALL.map(ActionKind::Request))
            .chain(Fault::ALL.map(ActionKind::Fault));
        let mut names = std::collections::BTreeSet::new();
        for a in all {
            assert_eq!(ActionKind::parse(&a.name()), Some(a), "{a}");
            assert!(names.insert(a.name()), "two actions are named {a}");
            let json = serde_json::to_value(a).unwrap();
            assert_eq!(json, serde_json::json!(a.to_string()));
            assert_eq!(serde_json::from_value::<ActionKind>(json).unwrap(), a);
        }
        assert_eq!(
            ActionKind::Fault(Fault::FailWrite).to_string(),
            "fault.fail-write"
        );
        assert!(serde_json::from_str::<ActionKind>("\"fault.nope\"").is_err());
        for k in [
            OpKind::ReadTask,
            OpKind::ReadEvents,
            OpKind::Request(RequestKind::FollowUp),
        ] {
            assert_eq!(OpKind::parse(&k.to_string()), Some(k));
        }
    }
}
