//! The run log as turncut reads it (`docs/runner-contract.md`, "The run
//! log"): typed events, parsed once where the harness reads the run log
//! (the cell's teardown, and `turncut judge` loading a saved
//! `evidence.json`), never again by an oracle.
//!
//! Every kind turncut reads is a variant of [`Kind`] and of [`Data`], whose
//! payload names the fields turncut reads: a misspelt kind or field is a
//! compile error rather than a check that never fires. A field a payload
//! cannot do without, the events schema (`docs/runner-contract.events.schema.json`)
//! requires too, and every field it names is one of the schema's: a test
//! holds the payloads to the schema field by field. A runner may write kinds
//! of its own (`--runner-cmd`): they are [`Data::Other`], which no oracle
//! reads. An event whose envelope or payload does not parse is kept in its
//! place as [`Data::Malformed`], with an [`EventError`] naming the event and
//! the field: the evidence then has a run-log gap (`Evidence::gap`), so the
//! oracles that need the run log say `unknown`, never pass.
//!
//! The event as the runner wrote it is kept beside its typed form, only to
//! write `evidence.json` (which `turncut judge` parses again), to show it to
//! a person (the timeline), and to compare or search whole events (an event
//! read before a fault must come back unchanged; the canary must appear
//! nowhere in the run log).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::model::TaskState;

/// Version of the run-log events this harness reads (`v` of every event).
pub const EVENT_VERSION: u32 = 1;

/// Defines [`Kind`] and [`Data`], one variant per kind, with its name in
/// the run log and its payload (a struct of the same name).
macro_rules! kinds {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)*) => {
        /// A run-log event's kind.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Kind {
            $($(#[$doc])* $variant,)*
            /// A kind turncut does not read.
            Other,
        }

        impl Kind {
            /// Every kind turncut reads.
            pub const KNOWN: &[Kind] = &[$(Kind::$variant,)*];

            /// The kind named `name` in the run log.
            pub fn parse(name: &str) -> Kind {
                match name {
                    $($name => Kind::$variant,)*
                    _ => Kind::Other,
                }
            }

            /// The name in the run log (`"other"` for [`Kind::Other`]).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Kind::$variant => $name,)*
                    Kind::Other => "other",
                }
            }
        }

        /// A run-log event's `data`, typed by its kind.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum Data {
            $($(#[$doc])* $variant($variant),)*
            /// A kind turncut does not read (a runner's own), by name.
            Other(String),
            /// An event whose envelope or data does not parse.
            Malformed(Malformed),
        }

        impl Data {
            /// The kind (a malformed event's, as far as it could be read).
            pub fn kind(&self) -> Kind {
                match self {
                    $(Data::$variant(_) => Kind::$variant,)*
                    Data::Other(_) => Kind::Other,
                    Data::Malformed(m) => m.kind,
                }
            }

            /// `data` of an event of kind `kind` (named `name`), typed; the
            /// error names the field that does not fit.
            fn parse(kind: Kind, name: &str, data: &Value) -> Result<Data, String> {
                match kind {
                    $(Kind::$variant => payload(data).map(Data::$variant),)*
                    Kind::Other => Ok(Data::Other(name.to_owned())),
                }
            }

            /// The typed payload as JSON (the fields turncut reads), for the
            /// test that holds the payloads to the events schema.
            #[cfg(test)]
            fn payload_json(&self) -> Option<Value> {
                match self {
                    $(Data::$variant(p) => Some(serde_json::to_value(p).expect("a payload serializes")),)*
                    Data::Other(_) | Data::Malformed(_) => None,
                }
            }
        }

        $(impl Payload for $variant {
            const KIND: Kind = Kind::$variant;

            fn of(data: &Data) -> Option<&Self> {
                match data {
                    Data::$variant(p) => Some(p),
                    _ => None,
                }
            }
        })*
    };
}

kinds! {
    /// A task was admitted with its first message.
    TaskAdmitted = "task.admitted",
    /// A follow-up was queued.
    MessageQueued = "message.queued",
    /// A turn's intent is durable (before it is sent).
    TurnIntent = "turn.intent",
    /// The provider accepted a turn (before its output is acted on).
    TurnAccepted = "turn.accepted",
    /// A turn ended.
    TurnFinished = "turn.finished",
    /// A turn failed or was found lost.
    TurnFailed = "turn.failed",
    /// An accepted turn the provider never recorded is sent again.
    TurnAbsentAtProvider = "turn.absent_at_provider",
    /// A run settled (`state`, `cause`).
    RunSettled = "run.settled",
    /// A provider process is about to be started.
    ProviderSpawnIntent = "provider.spawn_intent",
    /// A provider process was started.
    ProviderSpawned = "provider.spawned",
    /// A provider process was proven stopped.
    ProviderStopped = "provider.stopped",
    /// A provider left by an earlier runner was swept at start.
    ProviderSpawnSwept = "provider.spawn_swept",
    /// The runner gave up on a silent provider.
    ProviderUnresponsive = "provider_unresponsive",
    /// A provider exited on its own.
    ProviderExited = "provider_exited",
    /// A provider request (an approval) and the runner's decision.
    ProviderRequest = "provider_request",
    /// A provider item completed.
    ItemCompleted = "item.completed",
    /// The runner starts a tool call (write-ahead).
    ToolExecuting = "tool.executing",
    /// A tool call's outcome is durable.
    ToolOutcome = "tool.outcome",
    /// A tool call cut while executing: its outcome is unknown.
    ToolOutcomeUncertain = "tool_outcome_uncertain",
    /// A model answer (the native loop).
    ModelOutput = "model.output",
    /// A Retry was admitted.
    RetryAdmitted = "retry.admitted",
    /// The failed run's conversation was proven stopped before a Retry.
    StoppedConversationVerified = "stopped_conversation_verified",
    /// A message a failed run leaves waiting.
    MessageStranded = "message.stranded",
    /// A follow-up to a failed-closed task was refused.
    PriorOwnerFenceRefused = "prior_owner_fence_refused",
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// A typed payload of one kind ([`Data`]'s variant of the same name).
pub trait Payload: Sized + 'static {
    /// Its kind.
    const KIND: Kind;
    /// The payload of `data`, if `data` is of this kind and parsed.
    fn of(data: &Data) -> Option<&Self>;
}

/// Why a run-log event is not read: where it is, and what does not fit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// The envelope (`v`, `task_id`, `seq`, `run_id`, `ts_ms`, `kind`,
    /// `data`; nothing else) does not parse.
    #[error("run-log event {position} does not parse: {error}")]
    Envelope {
        /// 1-based position in the run log as read.
        position: usize,
        /// What does not fit.
        error: String,
    },
    /// Another format version than [`EVENT_VERSION`].
    #[error("run-log event {seq} has version {v}, this harness reads {EVENT_VERSION}")]
    Version {
        /// The event's `seq`.
        seq: i64,
        /// Its `v`.
        v: u32,
    },
    /// The `data` of a kind turncut reads does not parse.
    #[error("run-log event {seq} ({kind}) does not parse: {error}")]
    Data {
        /// The event's `seq`.
        seq: i64,
        /// Its kind.
        kind: Kind,
        /// The field and what does not fit (`data.turn_row: invalid type…`).
        error: String,
    },
}

/// An event that does not parse: its kind as far as it could be read, and
/// why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Malformed {
    /// The kind (`Other` when even that could not be read).
    pub kind: Kind,
    /// What does not fit, and where.
    pub error: EventError,
}

/// One run-log event, typed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunLogEvent {
    /// The task.
    pub task_id: String,
    /// Gapless per task, from 1 (`-1` when a malformed event has none).
    pub seq: i64,
    /// The run, if any.
    pub run_id: Option<String>,
    /// When it was written, in milliseconds since the epoch.
    pub ts_ms: i64,
    /// Its kind-specific data.
    pub data: Data,
    /// The event as the runner wrote it.
    raw: Value,
}

/// The envelope as the contract defines it: closed (a runner that renames
/// a field fails loudly instead of being judged on nothing), `data` open.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope {
    v: u32,
    task_id: String,
    seq: i64,
    run_id: Option<String>,
    ts_ms: i64,
    kind: String,
    data: Value,
}

impl RunLogEvent {
    /// Reads the event `raw`, the `position`-th of its run log (from 1).
    /// Never fails: an event that does not parse is kept as
    /// [`Data::Malformed`] with what could be read of its envelope, so the
    /// run log keeps its order and length.
    pub fn read(position: usize, raw: Value) -> RunLogEvent {
        let envelope = match Envelope::deserialize(&raw) {
            Ok(e) => e,
            Err(e) => {
                let error = EventError::Envelope {
                    position,
                    error: e.to_string(),
                };
                return RunLogEvent::malformed(raw, error);
            }
        };
        let kind = Kind::parse(&envelope.kind);
        let data = if envelope.v != EVENT_VERSION {
            Err(EventError::Version {
                seq: envelope.seq,
                v: envelope.v,
            })
        } else {
            Data::parse(kind, &envelope.kind, &envelope.data).map_err(|error| EventError::Data {
                seq: envelope.seq,
                kind,
                error,
            })
        };
        RunLogEvent {
            task_id: envelope.task_id,
            seq: envelope.seq,
            run_id: envelope.run_id,
            ts_ms: envelope.ts_ms,
            data: data.unwrap_or_else(|error| Data::Malformed(Malformed { kind, error })),
            raw,
        }
    }

    /// A malformed event: what can be read of its envelope, leniently.
    fn malformed(raw: Value, error: EventError) -> RunLogEvent {
        let kind = raw["kind"].as_str().map_or(Kind::Other, Kind::parse);
        RunLogEvent {
            task_id: raw["task_id"].as_str().unwrap_or_default().to_owned(),
            seq: raw["seq"].as_i64().unwrap_or(-1),
            run_id: raw["run_id"].as_str().map(str::to_owned),
            ts_ms: raw["ts_ms"].as_i64().unwrap_or(0),
            data: Data::Malformed(Malformed { kind, error }),
            raw,
        }
    }

    /// Reads a whole run log (see [`RunLogEvent::read`]).
    pub fn read_all(raw: Vec<Value>) -> Vec<RunLogEvent> {
        raw.into_iter()
            .enumerate()
            .map(|(i, ev)| RunLogEvent::read(i + 1, ev))
            .collect()
    }

    /// Reads a whole run log, or names the first event that does not parse.
    pub fn parse_all(raw: &[Value]) -> Result<Vec<RunLogEvent>, EventError> {
        let events = RunLogEvent::read_all(raw.to_vec());
        match events.iter().find_map(RunLogEvent::error) {
            Some(e) => Err(e.clone()),
            None => Ok(events),
        }
    }

    /// The kind.
    pub fn kind(&self) -> Kind {
        self.data.kind()
    }

    /// The kind's name as the runner wrote it (a runner's own kinds
    /// included), if it wrote one.
    pub fn kind_name(&self) -> Option<&str> {
        self.raw["kind"].as_str()
    }

    /// The typed payload, if the event is of `P`'s kind and parsed.
    pub fn payload<P: Payload>(&self) -> Option<&P> {
        P::of(&self.data)
    }

    /// Why the event does not parse, if it does not.
    pub fn error(&self) -> Option<&EventError> {
        match &self.data {
            Data::Malformed(m) => Some(&m.error),
            _ => None,
        }
    }

    /// The event as the runner wrote it: for writing `evidence.json` and
    /// showing it to a person, never for judging.
    pub fn as_written(&self) -> &Value {
        &self.raw
    }
}

/// Written as the runner wrote it.
impl Serialize for RunLogEvent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(s)
    }
}

/// Strict: an event that does not parse is an error (a whole run log read
/// leniently, keeping such events in place, is [`RunLogEvent::read_all`]).
impl<'de> Deserialize<'de> for RunLogEvent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let ev = RunLogEvent::read(1, Value::deserialize(d)?);
        match ev.error() {
            Some(e) => Err(serde::de::Error::custom(e)),
            None => Ok(ev),
        }
    }
}

/// A run log read leniently (for `#[serde(deserialize_with)]`): every event
/// kept in place, those that do not parse as [`Data::Malformed`].
pub fn deserialize_lenient<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<RunLogEvent>, D::Error> {
    Vec::<Value>::deserialize(d).map(RunLogEvent::read_all)
}

/// [`deserialize_lenient`] for an optional run log.
pub fn deserialize_lenient_opt<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<RunLogEvent>>, D::Error> {
    Option::<Vec<Value>>::deserialize(d).map(|o| o.map(RunLogEvent::read_all))
}

/// A payload from `data`, or the field that does not fit and why.
fn payload<T: DeserializeOwned>(data: &Value) -> Result<T, String> {
    serde_path_to_error::deserialize(data).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            format!("data: {inner}")
        } else {
            format!("data.{path}: {inner}")
        }
    })
}

/// A field that is either absent or present, maybe `null`: `Some(None)` is
/// an explicit `null` (`#[serde(default, deserialize_with = "present")]`).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// A turn's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnKind {
    /// The turn that answers a message.
    Primary,
    /// The turn that continues a lost one (it never re-sends the message).
    Continuation,
}

/// A cause as the run log carries it. Read leniently: `cause.structured`
/// judges a cause's shape, so a missing field is its finding, not a parse
/// error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cause {
    /// The closed-set code.
    pub code: Option<String>,
    /// Whether the runner recovers by itself.
    pub recoverable: Option<bool>,
    /// A sentence for a person.
    pub message: Option<String>,
}

/// `task.admitted`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskAdmitted {
    /// The first message.
    pub message_id: String,
}

/// `message.queued`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageQueued {
    /// The queued message.
    pub message_id: String,
}

/// `turn.intent`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnIntent {
    /// The message the turn answers.
    pub message_id: String,
    /// Primary or continuation.
    pub kind: TurnKind,
    /// The id the turn is sent to the provider under.
    pub client_id: String,
}

/// `turn.accepted`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnAccepted {
    /// The turn's row (`TurnView::turn_row`).
    pub turn_row: i64,
    /// The provider's turn id.
    pub provider_turn_id: String,
}

/// `turn.finished`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnFinished {
    /// The turn's row.
    pub turn_row: i64,
    /// Whether the runner adopted a turn the provider completed while it
    /// was away.
    #[serde(default)]
    pub adopted: Option<bool>,
}

/// `turn.failed`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnFailed {
    /// The turn's row.
    pub turn_row: i64,
    /// The provider's turn id, if it had one.
    #[serde(default)]
    pub provider_turn_id: Option<String>,
    /// Its cause: absent, `null` (`Some(None)`), or given.
    #[serde(default, deserialize_with = "present")]
    pub cause: Option<Option<Cause>>,
}

/// `turn.absent_at_provider`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnAbsentAtProvider {
    /// The message sent again.
    pub message_id: String,
    /// The acceptance that turned out lost (`None`: an intent found absent,
    /// sent the first time).
    #[serde(default)]
    pub provider_turn_id: Option<String>,
}

/// `run.settled`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSettled {
    /// How it settled.
    pub state: TaskState,
    /// Why, unless it completed.
    #[serde(default)]
    pub cause: Option<Cause>,
}

/// `provider.spawn_intent`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderSpawnIntent {}

/// `provider.spawned`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderSpawned {
    /// Its pid.
    pub pid: u64,
    /// Its start time (`/proc/<pid>/stat`), telling it from a reused pid.
    #[serde(default)]
    pub start_time: Option<u64>,
}

/// A stopped provider's identity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// Its pid.
    pub pid: u64,
}

/// `provider.stopped`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderStopped {
    /// Which provider.
    pub identity: Identity,
}

/// `provider.spawn_swept`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderSpawnSwept {}

/// `provider_unresponsive`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderUnresponsive {
    /// The silent provider's pid, if known.
    #[serde(default)]
    pub pid: Option<u64>,
    /// What the runner saw.
    #[serde(default)]
    pub detail: Option<String>,
    /// How long it waited before giving up.
    #[serde(default)]
    pub idle_ms: Option<u64>,
}

/// `provider_exited`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderExited {}

/// Where a provider request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestStatus {
    /// The provider asked.
    Requested,
    /// The runner is answering.
    Answering,
    /// The runner answered.
    Answered,
}

/// `provider_request`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderRequest {
    /// The turn's row.
    pub turn_row: i64,
    /// The provider's request id.
    pub request_id: String,
    /// Where it stands.
    pub status: RequestStatus,
    /// The runner's decision (`accept…`, `decline…`), once answered.
    #[serde(default)]
    pub decision: Option<String>,
    /// The command item it approves, if any.
    #[serde(default)]
    pub item_id: Option<String>,
}

/// A completed provider item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// Its id, if it has one.
    #[serde(default)]
    pub id: Option<String>,
    /// An ACP tool call's id (`toolCallId`), if it is one.
    #[serde(
        default,
        rename = "toolCallId",
        skip_serializing_if = "Option::is_none"
    )]
    pub tool_call_id: Option<String>,
}

/// `item.completed`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemCompleted {
    /// The turn's row.
    pub turn_row: i64,
    /// The item.
    pub item: Item,
}

/// What a tool call acts on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolDetail {
    /// The file it writes, if it writes one.
    #[serde(default)]
    pub path: Option<String>,
}

/// `tool.executing`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolExecuting {
    /// The call's key.
    pub key: String,
    /// The tool (`write_text_file`, `Write`, …).
    #[serde(default)]
    pub kind: Option<String>,
    /// What it acts on.
    #[serde(default)]
    pub detail: Option<ToolDetail>,
}

/// `tool.outcome`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolOutcome {
    /// The call's key.
    pub key: String,
    /// A client tool's status (`completed`, `failed`).
    #[serde(default)]
    pub status: Option<String>,
    /// A native tool's result.
    #[serde(default)]
    pub ok: Option<bool>,
}

impl ToolOutcome {
    /// Whether the call completed (`status: completed`, or the native
    /// `ok: true`).
    pub fn completed(&self) -> bool {
        self.status.as_deref() == Some("completed") || self.ok == Some(true)
    }
}

/// `tool_outcome_uncertain`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolOutcomeUncertain {}

/// `model.output`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelOutput {
    /// The native turn's row.
    #[serde(default)]
    pub turn_row: Option<i64>,
    /// How many tool calls the answer made (0: a final answer).
    #[serde(default)]
    pub calls: Option<u64>,
}

/// `retry.admitted`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryAdmitted {
    /// The Retry's message id.
    pub message_id: String,
    /// Whether it re-sends a stored text.
    #[serde(default)]
    pub resends: Option<bool>,
    /// The message whose text it re-sends.
    #[serde(default)]
    pub resends_message: Option<String>,
}

/// `stopped_conversation_verified`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoppedConversationVerified {}

/// `message.stranded`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageStranded {
    /// The message left waiting for a Retry.
    pub message_id: String,
}

/// `prior_owner_fence_refused`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriorOwnerFenceRefused {
    /// The refused message.
    #[serde(default)]
    pub message_id: Option<String>,
}

#[cfg(test)]
mod tests;
