//! The closed sets behind the store's text columns, as types: what a run,
//! a turn, a message, a tool call or a provider request can be. Each spells
//! exactly the strings the store writes (`as_str`, `FromStr`, and serde in
//! the same spelling), so a row field switched from `String` to one of these
//! changes no byte in the database, the run log or the control API.
//!
//! The row types carry them (`Run::kind`, `TurnRow::status`, …) and the
//! writes take them. A string outside its set reads as
//! [`StoreError::Corrupt`], as an unknown task state does.

use serde::{Deserialize, Serialize};

use super::StoreError;

/// Defines a closed set stored as text: the enum with its serde spelling,
/// `ALL`, `as_str`, `Display`, `ToSql` (its text) and `FromStr` (an unknown
/// text is a corrupt row of `$table`).
macro_rules! closed_set {
    (
        $(#[$meta:meta])*
        $name:ident in $table:literal . $column:literal {
            $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant,)+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The text stored in the column.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl rusqlite::ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(rusqlite::types::ToSqlOutput::from(self.as_str()))
            }
        }

        impl std::str::FromStr for $name {
            type Err = StoreError;

            fn from_str(s: &str) -> Result<$name, StoreError> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(StoreError::Corrupt {
                        table: $table,
                        detail: format!(concat!("unknown ", $column, " {:?}"), other),
                    }),
                }
            }
        }
    };
}

closed_set! {
    /// What started a run (`runs.kind`).
    RunKind in "runs"."kind" {
        /// The task's admission, answering its prompt.
        Initial = "initial",
        /// A follow-up to a completed task.
        FollowUp = "follow_up",
        /// A Retry after the stop proof.
        Retry = "retry",
    }
}

closed_set! {
    /// Where a run is (`runs.status`).
    RunStatus in "runs"."status" {
        /// Executing, or to be resumed after a restart.
        Running = "running",
        /// Settled completed.
        Completed = "completed",
        /// Settled failed, with a cause.
        Failed = "failed",
    }
}

closed_set! {
    /// What a turn answers (`turns.kind`).
    TurnKind in "turns"."kind" {
        /// The turn that consumes its message, once per message.
        Primary = "primary",
        /// The one continuation of an accepted turn that was lost.
        Continuation = "continuation",
    }
}

closed_set! {
    /// Where a turn is (`turns.status`).
    TurnStatus in "turns"."status" {
        /// Written before the provider is asked.
        Intent = "intent",
        /// The provider accepted it.
        Accepted = "accepted",
        /// It ended completed.
        Completed = "completed",
        /// It ended interrupted, or was lost and continued.
        Interrupted = "interrupted",
        /// It ended failed.
        Failed = "failed",
    }
}

impl TurnStatus {
    /// Whether the turn still needs the provider (not settled): the
    /// statuses the `turns_one_active` index allows once per run.
    pub fn unsettled(self) -> bool {
        matches!(self, TurnStatus::Intent | TurnStatus::Accepted)
    }
}

closed_set! {
    /// What a message is (`messages.kind`).
    MessageKind in "messages"."kind" {
        /// The task's first message.
        Prompt = "prompt",
        /// A follow-up from the controller.
        FollowUp = "follow_up",
        /// A Retry that re-sends the text of the message it retries.
        Retry = "retry",
        /// A Retry that re-sends nothing and lets its run answer the queue
        /// ([`super::RETRY_RESUME`]).
        RetryResume = "retry_resume",
    }
}

closed_set! {
    /// Where a client-side tool call is (`tool_calls.status`).
    ToolCallStatus in "tool_calls"."status" {
        /// Durably marked before its effect.
        Executing = "executing",
        /// Its outcome is recorded: it succeeded.
        Completed = "completed",
        /// Its outcome is recorded: it failed.
        Failed = "failed",
        /// A crash or a lost provider left its outcome unknown; never run again.
        Uncertain = "uncertain",
    }
}

closed_set! {
    /// Where a provider request (an approval) is
    /// (`provider_requests.status`).
    RequestStatus in "provider_requests"."status" {
        /// The provider asked.
        Requested = "requested",
        /// The runner is about to answer.
        Answering = "answering",
        /// The answer was sent.
        Answered = "answered",
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use serde_json::json;

    use super::*;
    use crate::store::{RETRY_RESUME, Store, TaskState};

    /// Every value's text parses back to it, and serde spells it the same.
    fn round_trips<T>(all: &[T], as_str: fn(T) -> &'static str)
    where
        T: Copy + std::fmt::Debug + PartialEq + FromStr<Err = StoreError> + Serialize,
    {
        for &v in all {
            assert_eq!(T::from_str(as_str(v)).unwrap(), v);
            assert_eq!(serde_json::to_value(v).unwrap(), json!(as_str(v)));
        }
        assert!(matches!(
            T::from_str("Completed"),
            Err(StoreError::Corrupt { .. })
        ));
    }

    #[test]
    fn each_set_round_trips_and_refuses_an_unknown_text() {
        round_trips(RunKind::ALL, RunKind::as_str);
        round_trips(RunStatus::ALL, RunStatus::as_str);
        round_trips(TurnKind::ALL, TurnKind::as_str);
        round_trips(TurnStatus::ALL, TurnStatus::as_str);
        round_trips(MessageKind::ALL, MessageKind::as_str);
        round_trips(ToolCallStatus::ALL, ToolCallStatus::as_str);
        round_trips(RequestStatus::ALL, RequestStatus::as_str);
        assert_eq!(MessageKind::RetryResume.as_str(), RETRY_RESUME);
        let unsettled: Vec<_> = TurnStatus::ALL.iter().filter(|s| s.unsettled()).collect();
        assert_eq!(unsettled, [&TurnStatus::Intent, &TurnStatus::Accepted]);
    }

    /// Drives one task through admission, a lost and continued turn, a
    /// failure, a Retry, a completion and a follow-up, and parses every text
    /// the store wrote into its set.
    #[test]
    fn every_text_the_store_writes_is_in_its_set() {
        let dir = tempfile::tempdir().unwrap();
        let (store, epoch) = Store::open(dir.path()).unwrap();
        store
            .call_blocking(move |db| {
                db.admit("t1", "m1", "hello", "p", "/ws", "run-1", epoch)?;
                let row = db.turn_intent("t1", "run-1", "m1", TurnKind::Primary, "m1")?;
                db.turn_accepted("t1", "run-1", row, "turn-1")?;
                let cont = db.turn_lost_continued("t1", "run-1", row, json!({}), "m1-c")?;
                db.turn_finished("t1", "run-1", cont, TurnStatus::Failed, json!({}))?;
                db.tool_executing("t1", "run-1", cont, "k1", "terminal", json!({}))?;
                db.tool_executing("t1", "run-1", cont, "k2", "terminal", json!({}))?;
                db.tool_outcome("t1", "run-1", "k1", ToolCallStatus::Completed, json!({}))?;
                db.tools_uncertain("t1", "run-1")?;
                for &status in RequestStatus::ALL {
                    db.provider_request(
                        "approval_request",
                        "t1",
                        "run-1",
                        cont,
                        "r1",
                        "m",
                        status,
                        None,
                        None,
                    )?;
                }
                db.settle("t1", "run-1", TaskState::Failed, None)?;
                let retried = db.admit_retry("t1", "r1", "run-2", epoch, json!({}))?;
                assert_eq!(retried.as_deref(), Ok("run-2"));
                let row = db.turn_intent("t1", "run-2", "r1", TurnKind::Primary, "r1")?;
                db.turn_finished("t1", "run-2", row, TurnStatus::Completed, json!({}))?;
                assert!(db.settle_completed_if_idle("t1", "run-2")?);
                db.follow_up("t1", "f1", "more", "run-3", epoch)?;
                Ok(())
            })
            .unwrap();
        store
            .call_blocking(|db| {
                let texts = |sql: &str| -> Vec<String> {
                    let mut stmt = db.conn().prepare(sql).unwrap();
                    stmt.query_map([], |r| r.get(0))
                        .unwrap()
                        .collect::<Result<_, _>>()
                        .unwrap()
                };
                let check = |sql: &str, parse: &dyn Fn(&str) -> Result<(), StoreError>| {
                    let found = texts(sql);
                    assert!(!found.is_empty(), "{sql}");
                    for t in &found {
                        parse(t).unwrap();
                    }
                    found
                };
                let runs = check("SELECT kind FROM runs", &|t| RunKind::from_str(t).map(drop));
                assert_eq!(runs, ["initial", "retry", "follow_up"]);
                check("SELECT status FROM runs", &|t| {
                    RunStatus::from_str(t).map(drop)
                });
                check("SELECT kind FROM turns", &|t| {
                    TurnKind::from_str(t).map(drop)
                });
                check("SELECT status FROM turns", &|t| {
                    TurnStatus::from_str(t).map(drop)
                });
                let messages = check("SELECT kind FROM messages ORDER BY ord", &|t| {
                    MessageKind::from_str(t).map(drop)
                });
                assert_eq!(messages, ["prompt", "retry", "follow_up"]);
                let tools = check("SELECT status FROM tool_calls ORDER BY rowid", &|t| {
                    ToolCallStatus::from_str(t).map(drop)
                });
                assert_eq!(tools, ["completed", "uncertain"]);
                check("SELECT status FROM provider_requests", &|t| {
                    RequestStatus::from_str(t).map(drop)
                });
                Ok(())
            })
            .unwrap();
    }
}
