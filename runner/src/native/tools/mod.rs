//! The tools the runner executes itself for the native OpenAI-Responses
//! profile: `Read`, `Write`, `Edit` and `Bash`. This module defines them for the
//! model ([`definitions`]), parses a Responses `function_call` into a [`Tool`]
//! ([`Tool::parse`]) and executes it inside a [`Workspace`] under [`Limits`]
//! ([`Tool::execute`]), producing the text that goes back to the model as the
//! call's `function_call_output`.
//!
//! Every failure is a [`ToolOutput`] with `ok: false` and a specific message,
//! never a panic: whatever the model asks for is data. Every input and output
//! is bounded, and a bound that is exceeded is reported, never silently
//! truncated, except for a command's output, which is cut with a visible
//! marker because the command has already run.
//!
//! It deliberately does not persist anything or decide whether a call may run:
//! the engine marks a call `executing` before [`Tool::execute`] and records
//! the outcome after it (DESIGN §3.4 rule 4). It is not an OS sandbox: the
//! file tools are confined by path resolution (so neither `..` nor a symlink
//! leads out of the workspace), but `Bash` runs with the runner's privileges
//! and its working directory is merely the workspace. What `Bash` is
//! guaranteed not to get is the credential: its environment is built from an
//! empty one, so nothing the runner holds in its own environment is inherited.
//!
//! The file tools live in `files`; `process` holds `ToolProcess` (which
//! ACP terminals use too), `Bash` on top of it and the layout of a command's
//! output.

use std::time::Duration;

use serde_json::{Map, Value, json};

pub use crate::workspace::{Workspace, WorkspaceError};

mod files;
mod process;

use files::{edit, read, write};
use process::bash;
pub(crate) use process::{Finished, ToolProcess, owned, render, tool_env, with_drain_note};

/// The bounds every tool call runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest file `Read` returns; a larger one is an error.
    pub read_bytes: usize,
    /// The largest file `Edit` works on, and the largest `Write` content,
    /// `old_string`, `new_string` and edited file.
    pub edit_bytes: usize,
    /// The largest `Bash` output returned to the model (stdout, stderr,
    /// labels and status line together); more is cut with a marker.
    pub output_bytes: usize,
    /// How long a `Bash` command may run before its process group is killed.
    pub bash_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            read_bytes: 64 * 1024,
            edit_bytes: 64 * 1024,
            output_bytes: 32 * 1024,
            bash_timeout: Duration::from_secs(30),
        }
    }
}

/// A tool call as the model made it, parsed and typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tool {
    /// Return a UTF-8 text file.
    Read { path: String },
    /// Create or replace a file with `content`.
    Write { path: String, content: String },
    /// Replace the one occurrence of `old` in a file by `new`.
    Edit {
        path: String,
        old: String,
        new: String,
    },
    /// Run `sh -c command` in the workspace.
    Bash { command: String },
}

/// Why a `function_call` is not a tool call; the message reads after "failed to …"
/// and is what the model gets back as the call's output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    #[error("unknown tool {name:?}; the tools are Read, Write, Edit and Bash")]
    UnknownTool { name: String },
    #[error("the arguments of {tool} are not valid JSON: {reason}")]
    InvalidJson { tool: &'static str, reason: String },
    #[error("the arguments of {tool} must be a JSON object, not {found}")]
    NotAnObject {
        tool: &'static str,
        found: &'static str,
    },
    #[error("{tool} is missing the string argument {field:?}")]
    MissingField {
        tool: &'static str,
        field: &'static str,
    },
    #[error("the argument {field:?} of {tool} must be a string, not {found}")]
    WrongType {
        tool: &'static str,
        field: &'static str,
        found: &'static str,
    },
    #[error("{tool} has no argument {field:?}; its arguments are {expected}")]
    UnexpectedField {
        tool: &'static str,
        field: String,
        expected: String,
    },
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
}

/// What a tool call returns to the model as its `function_call_output`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    /// Whether the call did what was asked (for `Bash`: exit status 0).
    pub ok: bool,
    /// The text the model sees; errors start with `error: `.
    pub output: String,
}

impl ToolOutput {
    fn success(output: String) -> ToolOutput {
        ToolOutput { ok: true, output }
    }

    fn failure(message: impl std::fmt::Display) -> ToolOutput {
        ToolOutput {
            ok: false,
            output: format!("error: {message}"),
        }
    }
}

impl From<ToolError> for ToolOutput {
    fn from(e: ToolError) -> ToolOutput {
        ToolOutput::failure(e)
    }
}

/// The four tools as entries of a Responses request's `tools` array, in strict
/// mode (every property required, no others allowed).
pub fn definitions() -> Value {
    let string = |description: &str| json!({ "type": "string", "description": description });
    let function = |name: &str, description: &str, properties: Vec<(&str, Value)>| {
        let required: Vec<&str> = properties.iter().map(|(k, _)| *k).collect();
        let properties: Map<String, Value> = properties
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        json!({
            "type": "function",
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": false,
            },
            "strict": true,
        })
    };
    json!([
        function(
            "Read",
            "Read a UTF-8 text file in the workspace. Files over the read limit are refused; use Bash (head, sed -n) for parts of large files.",
            vec![(
                "path",
                string("File path, relative to the workspace or absolute inside it.")
            )],
        ),
        function(
            "Write",
            "Create or replace a file in the workspace with the given content, creating parent directories. The replacement is atomic.",
            vec![
                (
                    "path",
                    string("File path, relative to the workspace or absolute inside it.")
                ),
                ("content", string("The complete new content of the file.")),
            ],
        ),
        function(
            "Edit",
            "Replace exactly one occurrence of old_string in a workspace file with new_string. Fails if old_string occurs zero or several times; include surrounding lines to make it unique.",
            vec![
                (
                    "path",
                    string("File path, relative to the workspace or absolute inside it.")
                ),
                (
                    "old_string",
                    string("The exact text to replace; it must occur exactly once.")
                ),
                ("new_string", string("The text to put in its place.")),
            ],
        ),
        function(
            "Bash",
            "Run a shell command (sh -c) in the workspace directory with no input and a timeout. Returns stdout, then stderr in a labeled section, then the exit status.",
            vec![("command", string("The shell command to run."))],
        ),
    ])
}

/// The tool kinds, so that parsing names its fields in one place.
#[derive(Clone, Copy)]
enum Kind {
    Read,
    Write,
    Edit,
    Bash,
}

impl Kind {
    fn of(name: &str) -> Option<Kind> {
        match name {
            "Read" => Some(Kind::Read),
            "Write" => Some(Kind::Write),
            "Edit" => Some(Kind::Edit),
            "Bash" => Some(Kind::Bash),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Read => "Read",
            Kind::Write => "Write",
            Kind::Edit => "Edit",
            Kind::Bash => "Bash",
        }
    }

    fn fields(self) -> &'static [&'static str] {
        match self {
            Kind::Read => &["path"],
            Kind::Write => &["path", "content"],
            Kind::Edit => &["path", "old_string", "new_string"],
            Kind::Bash => &["command"],
        }
    }
}

impl Tool {
    /// Parses a Responses `function_call`: `name` is one of `Read`, `Write`,
    /// `Edit`, `Bash` (case-sensitive) and `arguments` is its JSON-encoded
    /// argument object, with exactly the fields of [`definitions`].
    pub fn parse(name: &str, arguments: &str) -> Result<Tool, ToolError> {
        let kind = Kind::of(name).ok_or_else(|| ToolError::UnknownTool {
            name: name.to_owned(),
        })?;
        let tool = kind.name();
        let value: Value = serde_json::from_str(arguments).map_err(|e| ToolError::InvalidJson {
            tool,
            reason: e.to_string(),
        })?;
        let mut object = match value {
            Value::Object(o) => o,
            other => {
                return Err(ToolError::NotAnObject {
                    tool,
                    found: json_type(&other),
                });
            }
        };
        // The smallest unexpected name, so the message does not depend on
        // the map's iteration order.
        if let Some(field) = object
            .keys()
            .filter(|k| !kind.fields().contains(&k.as_str()))
            .min()
        {
            return Err(ToolError::UnexpectedField {
                tool,
                field: field.clone(),
                expected: kind.fields().join(", "),
            });
        }
        let mut take = |field: &'static str| match object.remove(field) {
            Some(Value::String(s)) => Ok(s),
            Some(other) => Err(ToolError::WrongType {
                tool,
                field,
                found: json_type(&other),
            }),
            None => Err(ToolError::MissingField { tool, field }),
        };
        Ok(match kind {
            Kind::Read => Tool::Read {
                path: take("path")?,
            },
            Kind::Write => Tool::Write {
                path: take("path")?,
                content: take("content")?,
            },
            Kind::Edit => Tool::Edit {
                path: take("path")?,
                old: take("old_string")?,
                new: take("new_string")?,
            },
            Kind::Bash => Tool::Bash {
                command: take("command")?,
            },
        })
    }

    /// The tool's name as the model calls it.
    pub fn name(&self) -> &'static str {
        match self {
            Tool::Read { .. } => "Read",
            Tool::Write { .. } => "Write",
            Tool::Edit { .. } => "Edit",
            Tool::Bash { .. } => "Bash",
        }
    }

    /// What the run log's `tool.executing` says of the call besides its
    /// name: the path a `Write` or `Edit` changes (what `durable.effect`
    /// holds the workspace to after a power cut).
    pub fn detail(&self) -> Value {
        match self {
            Tool::Write { path, .. } | Tool::Edit { path, .. } => json!({ "path": path }),
            Tool::Read { .. } | Tool::Bash { .. } => json!({}),
        }
    }

    /// Whether running the call can change anything; such a call must be
    /// durably `executing` before it runs and is never run twice.
    pub fn has_effect(&self) -> bool {
        !matches!(self, Tool::Read { .. })
    }

    /// Runs the call. Every outcome, including a refusal, is a [`ToolOutput`];
    /// any occurrence of a non-empty `scrub` string in the output is masked
    /// with `*` of the same length. `Bash` additionally never sees a variable
    /// named in `scrub` or a value containing a `scrub` string.
    pub async fn execute(&self, ws: &Workspace, limits: &Limits, scrub: &[&str]) -> ToolOutput {
        let mut out = match self {
            Tool::Bash { command } => bash(ws, command, limits, scrub).await,
            file_tool => {
                let (tool, ws, limits) = (file_tool.clone(), ws.clone(), *limits);
                match tokio::task::spawn_blocking(move || tool.run_file_tool(&ws, &limits)).await {
                    Ok(Ok(text)) => ToolOutput::success(text),
                    Ok(Err(message)) => ToolOutput::failure(message),
                    Err(e) => {
                        ToolOutput::failure(format!("the {} tool did not finish: {e}", self.name()))
                    }
                }
            }
        };
        out.output = mask(&out.output, scrub);
        out
    }

    /// The file tools, on a blocking thread.
    fn run_file_tool(&self, ws: &Workspace, limits: &Limits) -> Result<String, String> {
        match self {
            Tool::Read { path } => read(ws, path, limits),
            Tool::Write { path, content } => write(ws, path, content, limits),
            Tool::Edit { path, old, new } => edit(ws, path, old, new, limits),
            Tool::Bash { .. } => Err("Bash is not a file tool".to_owned()),
        }
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Masks every occurrence of a non-empty `scrub` string, keeping the length so
/// that output bounds still hold.
pub(crate) fn mask(text: &str, scrub: &[&str]) -> String {
    let mut text = text.to_owned();
    for s in scrub.iter().filter(|s| !s.is_empty()) {
        if text.contains(s) {
            text = text.replace(s, &"*".repeat(s.len()));
        }
    }
    text
}

#[cfg(test)]
mod tests;
