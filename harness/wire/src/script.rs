//! The scripted model: what the fake says and which tools it calls, turn by turn.
//!
//! A script is a TOML file with `[[turn]]` tables (`say`, `tools`, `final`,
//! `answers`). The fakes pick a script turn for each user message and play it:
//! the turn whose `answers` lists the message's text, as a model answers what a
//! message asks whatever conversation it arrives in (a Retry re-sends a
//! follow-up's text into a fresh conversation, and the model does what that text
//! asks); else the turn of the message's position among the conversation's
//! distinct messages. This module only parses and validates scripts; it knows
//! nothing about protocols, scenarios or the harness.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// A whole script: the model's behaviour for successive user messages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// One entry per user message, in order. The last one repeats for any
    /// further messages.
    #[serde(rename = "turn")]
    pub turns: Vec<ScriptTurn>,
}

/// What the model does while answering one user message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptTurn {
    /// Message chunks said before the tools run, one agent message each.
    #[serde(default)]
    pub say: Vec<String>,
    /// Tool calls, in order.
    #[serde(default)]
    pub tools: Vec<ScriptTool>,
    /// The final assistant message of the turn.
    #[serde(rename = "final", default = "default_final")]
    pub final_message: String,
    /// The user message texts this turn answers, wherever they arrive (see
    /// [`Script::answering`]); empty: the turn answers by position only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answers: Vec<String>,
}

/// One side-effecting tool call requested by the model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptTool {
    /// Stable effect key: the effect ledger records it, the oracles count it.
    pub key: String,
    /// What kind of tool call this is.
    #[serde(default)]
    pub kind: ToolKind,
    /// Whether the provider asks the client for approval before running it.
    #[serde(default)]
    pub approval: bool,
    /// ACP only, with `kind = "command"`: the command line the client runs
    /// instead of the `effect` command (no ledger line then). For tests of
    /// what a client-side tool can see.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    /// ACP only, required with `kind = "write-file"`: the path the agent asks
    /// the client to write (`fs/write_text_file`), relative or absolute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// How long the effect command runs before its effect (`effect
    /// --duration-ms`): a command still running when its provider is killed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub duration_ms: u64,
    /// With `kind = "command"`: the model writes its command as a shell
    /// that runs the effect as its child (`sh -c '<effect line>; exit $?'`),
    /// as a model's compound command would. Killed with its provider, the
    /// shell dies and the effect lives on (measured on the real codex):
    /// only a stop of the provider's descendants ends it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub nested_shell: bool,
}

/// The line a model writes to run `line` (the effect command, shell-quoted)
/// for `tool`: the line itself, or a shell running it as its child
/// ([`ScriptTool::nested_shell`]). `$?` keeps the effect's exit status.
pub fn command_line(tool: &ScriptTool, line: &str) -> String {
    if tool.nested_shell {
        let inner = format!("{line}; exit $?");
        format!("sh -c {}", shlex::try_quote(&inner).unwrap_or_default())
    } else {
        line.to_owned()
    }
}

/// The `apply_patch` input a model writes for a `kind = "patch"` tool: add
/// the file `path` with the line `written by <key>`.
pub fn patch_text(tool: &ScriptTool) -> String {
    format!(
        "*** Begin Patch\n*** Add File: {}\n+{}\n*** End Patch",
        tool.path.as_deref().unwrap_or_default(),
        patch_content(&tool.key).trim_end()
    )
}

/// The content a patch tool's file gets.
pub fn patch_content(key: &str) -> String {
    format!("written by {key}\n")
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The `effect` arguments that give the tool `key` its `duration_ms` (none
/// for an instant command).
pub fn duration_args(script: &Script, key: &str) -> Vec<String> {
    let ms = script
        .turns
        .iter()
        .flat_map(|t| &t.tools)
        .find(|t| t.key == key)
        .map_or(0, |t| t.duration_ms);
    if ms == 0 {
        Vec::new()
    } else {
        vec!["--duration-ms".to_owned(), ms.to_string()]
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The kinds of tool call the fakes can make. Every kind runs the `effect`
/// command, so the ledger sees it whoever executes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ToolKind {
    /// A shell command (`commandExecution` in Codex).
    #[default]
    Command,
    /// ACP only: a file write the client performs (`fs/write_text_file` of
    /// `path`); it runs no `effect` command, so the ledger does not see it.
    WriteFile,
    /// Codex (the fake, and the fake model API behind the real one): the
    /// model adds the file `path` (relative to the thread's directory)
    /// through `apply_patch`, a `fileChange` item that asks for approval.
    /// It runs no `effect` command, so the ledger does not see it.
    Patch,
}

/// What a `write-file` tool of `key` writes to its path, whoever performs
/// the write (ACP's `fs/write_text_file`, the native `Write` tool).
pub fn written_content(key: &str) -> String {
    format!("written by {key}\n")
}

fn default_final() -> String {
    "Done.".to_owned()
}

/// Errors from loading a script.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// The file could not be read.
    #[error("failed to read script {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The TOML is malformed or has unknown keys; the message carries line and column.
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    /// The script parsed but cannot be played.
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

impl Script {
    /// The built-in script used when no `--script` is given: one message, one
    /// command that needs approval, a final message.
    pub fn builtin() -> Script {
        Script {
            turns: vec![ScriptTurn {
                say: vec!["Looking at the workspace.".to_owned()],
                tools: vec![ScriptTool {
                    key: "write-hello".to_owned(),
                    kind: ToolKind::Command,
                    approval: true,
                    argv: None,
                    path: None,
                    duration_ms: 0,
                    nested_shell: false,
                }],
                final_message: "Created hello.txt.".to_owned(),
                answers: Vec::new(),
            }],
        }
    }

    /// Loads and validates a script file.
    pub fn load(path: &Path) -> Result<Script, ScriptError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScriptError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Script::parse(&text, &path.display().to_string())
    }

    /// Parses and validates script text; `origin` names the source in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Script, ScriptError> {
        let script: Script = toml::from_str(text).map_err(|e| ScriptError::Parse {
            path: origin.to_owned(),
            message: locate_toml_error(text, &e),
        })?;
        script.validate().map_err(|message| ScriptError::Invalid {
            path: origin.to_owned(),
            message,
        })?;
        Ok(script)
    }

    /// Checks a parsed script; the error is a sentence.
    pub fn validate(&self) -> Result<(), String> {
        if self.turns.is_empty() {
            return Err("a script needs at least one [[turn]]".to_owned());
        }
        let mut answered = std::collections::HashMap::new();
        for (i, turn) in self.turns.iter().enumerate() {
            for text in &turn.answers {
                if let Some(first) = answered.insert(text, i) {
                    return Err(format!(
                        "turns {} and {} both answer {text:?}; a message text is answered by one turn",
                        first + 1,
                        i + 1
                    ));
                }
            }
        }
        for (i, turn) in self.turns.iter().enumerate() {
            let mut seen = std::collections::HashSet::new();
            for tool in &turn.tools {
                if tool.key.is_empty() || tool.key.chars().any(char::is_whitespace) {
                    return Err(format!(
                        "turn {}: tool key {:?} must be non-empty and have no spaces",
                        i + 1,
                        tool.key
                    ));
                }
                if tool.nested_shell && (tool.kind != ToolKind::Command || tool.argv.is_some()) {
                    return Err(format!(
                        "turn {}: tool {:?}: nested_shell is only for kind = \"command\" without argv",
                        i + 1,
                        tool.key
                    ));
                }
                match (tool.kind, &tool.path, &tool.argv) {
                    (ToolKind::WriteFile | ToolKind::Patch, Some(p), None)
                        if !p.is_empty() && !p.contains('\n') => {}
                    (ToolKind::WriteFile | ToolKind::Patch, _, _) => {
                        return Err(format!(
                            "turn {}: tool {:?}: kind = \"write-file\" or \"patch\" needs a non-empty one-line path and no argv",
                            i + 1,
                            tool.key
                        ));
                    }
                    (ToolKind::Command, Some(_), _) => {
                        return Err(format!(
                            "turn {}: tool {:?}: path is only for kind = \"write-file\"",
                            i + 1,
                            tool.key
                        ));
                    }
                    (ToolKind::Command, None, Some(argv)) if argv.is_empty() => {
                        return Err(format!(
                            "turn {}: tool {:?}: argv is empty",
                            i + 1,
                            tool.key
                        ));
                    }
                    (ToolKind::Command, None, _) => {}
                }
                if !seen.insert(&tool.key) {
                    return Err(format!(
                        "turn {}: tool key {:?} appears twice; effect keys must be unique within a turn",
                        i + 1,
                        tool.key
                    ));
                }
            }
        }
        Ok(())
    }

    /// The script turn that answers the `index`-th distinct user message of a
    /// conversation (0-based). The last turn repeats.
    pub fn turn(&self, index: usize) -> &ScriptTurn {
        &self.turns[index.min(self.turns.len() - 1)]
    }

    /// The index of the turn whose `answers` lists `text`, if one does: the
    /// model answers what a message asks, in any conversation.
    pub fn answering(&self, text: &str) -> Option<usize> {
        self.turns
            .iter()
            .position(|t| t.answers.iter().any(|a| a == text))
    }

    /// The index of the turn that answers a user message of `text` that is
    /// the `position`-th distinct message of its conversation: the turn that
    /// answers its text, else the turn at its position (the last repeats).
    pub fn index_for(&self, text: &str, position: usize) -> usize {
        self.answering(text)
            .unwrap_or_else(|| position.min(self.turns.len() - 1))
    }

    /// This script with every turn that answers no text given the texts of
    /// `messages` (in the order a controller sends them, repeats ignored):
    /// the first text to the first turn, the second to the second, and every
    /// text after the last turn to the last turn. A script whose turns name
    /// any text already is returned as it is: its author chose.
    pub fn answering_in_order<'a>(&self, messages: impl IntoIterator<Item = &'a str>) -> Script {
        let mut script = self.clone();
        if script.turns.iter().any(|t| !t.answers.is_empty()) {
            return script;
        }
        let mut distinct: Vec<&str> = Vec::new();
        for m in messages {
            if !distinct.contains(&m) {
                distinct.push(m);
            }
        }
        let last = script.turns.len() - 1;
        for (i, text) in distinct.into_iter().enumerate() {
            script.turns[i.min(last)].answers.push(text.to_owned());
        }
        script
    }
}

/// Renders a TOML error as `line:col: message`.
pub fn locate_toml_error(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let (line, col) = line_col(text, span.start);
            format!("{line}:{col}: {}", e.message())
        }
        None => e.message().to_owned(),
    }
}

/// 1-based line and column of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_script() {
        let s = Script::parse(
            r#"
[[turn]]
say = ["a", "b"]
tools = [{ key = "k1", kind = "command", approval = true }, { key = "k2" }]
final = "done"

[[turn]]
say = ["second"]
"#,
            "t.toml",
        )
        .unwrap();
        assert_eq!(s.turns.len(), 2);
        assert!(!s.turns[0].tools[1].approval);
        assert_eq!(s.turn(5).say, vec!["second".to_owned()]);
        assert_eq!(s.turns[1].final_message, "Done.");
    }

    #[test]
    fn a_turn_answers_its_texts_in_any_conversation() {
        let s = Script::parse(
            "[[turn]]\nfinal = \"one\"\n[[turn]]\nfinal = \"two\"\n",
            "t.toml",
        )
        .unwrap()
        .answering_in_order([
            "Create hello.txt",
            "Also add notes",
            "Create hello.txt",
            "More",
        ]);
        assert_eq!(s.turns[0].answers, ["Create hello.txt"]);
        assert_eq!(s.turns[1].answers, ["Also add notes", "More"]);
        // A Retry re-sends "Also add notes" as the first message of a fresh
        // conversation: the model still does what it asks.
        assert_eq!(s.index_for("Also add notes", 0), 1);
        assert_eq!(s.index_for("Create hello.txt", 1), 0);
        // A text no turn answers plays the turn of its position.
        assert_eq!(s.index_for("something else", 0), 0);
        assert_eq!(s.index_for("something else", 7), 1);
        // A script that names its texts is left as its author wrote it.
        let named = s.answering_in_order(["x"]);
        assert_eq!(named, s);
        let e = Script::parse(
            "[[turn]]\nanswers = [\"a\"]\n[[turn]]\nanswers = [\"a\"]\n",
            "s.toml",
        )
        .unwrap_err();
        assert!(e.to_string().contains("both answer"), "{e}");
    }

    #[test]
    fn errors_name_the_place() {
        let e = Script::parse("[[turn]]\nsay = [\"a\"]\nbogus = 1\n", "s.toml").unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("s.toml: 3:1:"), "{msg}");
        assert!(msg.contains("bogus"), "{msg}");

        let e = Script::parse("turn = []\n", "s.toml").unwrap_err();
        assert!(e.to_string().contains("at least one"), "{e}");

        let e = Script::parse(
            "[[turn]]\ntools = [{ key = \"a\" }, { key = \"a\" }]\n",
            "s.toml",
        )
        .unwrap_err();
        assert!(e.to_string().contains("appears twice"), "{e}");
    }
}
