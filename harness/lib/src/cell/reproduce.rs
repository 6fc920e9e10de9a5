//! How a cell runs again: the `turncut run` arguments and shell command
//! that reproduce a cell as its wave ran it, and its `reproduce.sh`.

use super::CellEnv;
use crate::model::{CellResult, CellSpec, RunConfig};
use crate::scenario::Scenario;

/// The `--scenarios` directory of `env`, absolute; `None` for the built-in
/// scenarios (an empty `scenarios_dir`).
pub fn scenarios_arg(env: &CellEnv) -> Option<String> {
    let dir = &env.scenarios_dir;
    (!dir.as_os_str().is_empty()).then(|| {
        std::path::absolute(dir)
            .unwrap_or_else(|_| dir.clone())
            .display()
            .to_string()
    })
}

/// The `turncut` arguments that run `spec` again the way `env` ran it: the
/// scenario, the cut and fault, and every option that differs from the
/// default (`--scenarios` only when the scenarios were not built in).
pub fn reproduce_args(env: &CellEnv, spec: &CellSpec) -> Vec<String> {
    let mut args = vec!["run".to_owned(), spec.scenario_id.to_string()];
    match (&spec.cut(), spec.fault(), spec.schedule()) {
        (_, _, Some(events)) if events.len() > 1 => {
            args.extend(["--schedule".into(), crate::model::format_schedule(events)]);
        }
        (Some(cut), Some(fault), _) => args.extend([
            "--cut".into(),
            cut.to_string(),
            "--fault".into(),
            fault.to_string(),
        ]),
        _ => {}
    }
    let run = run_config(env, &[]);
    if let Some(dir) = run.scenarios {
        args.extend(["--scenarios".into(), dir]);
    }
    if let Some(cmd) = run.runner_cmd {
        args.extend(["--runner-cmd".into(), cmd.join(" ")]);
    }
    args.extend(run.runner_args.iter().map(|a| format!("--runner-arg={a}")));
    let defaults = CellEnv::new(&env.turncut, &env.scenarios_dir);
    for (flag, value, default) in [
        (
            "--idle-timeout-ms",
            env.idle_timeout_ms,
            defaults.idle_timeout_ms,
        ),
        (
            "--hang-idle-timeout-ms",
            env.hang_idle_timeout_ms,
            defaults.hang_idle_timeout_ms,
        ),
        ("--cell-wait-ms", env.wait_ms, defaults.wait_ms),
    ] {
        if value != default {
            args.extend([flag.to_owned(), value.to_string()]);
        }
    }
    args
}

/// The shell command that runs `spec` again: the absolute path of this
/// turncut and [`reproduce_args`], quoted for `sh`.
pub fn reproduce_command(env: &CellEnv, spec: &CellSpec) -> String {
    std::iter::once(env.turncut.display().to_string())
        .chain(reproduce_args(env, spec))
        .map(|a| sh_quote(&a))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `cells/t###/reproduce.sh`: runs the cell again with the turncut of the
/// run, or `$TURNCUT` when set (e.g. when that file is gone).
pub fn reproduce_script(env: &CellEnv, result: &CellResult) -> String {
    let args: Vec<String> = reproduce_args(env, &result.spec)
        .iter()
        .map(|a| sh_quote(a))
        .collect();
    format!(
        "#!/bin/sh\n# {id}: {name} ({verdict} in the wave)\n\
         # Runs this cell again with the turncut that ran the wave (version {version}).\n\
         # If that file is gone, point TURNCUT at another turncut of that version,\n\
         # e.g. TURNCUT=\"$(command -v turncut)\" sh reproduce.sh\n\
         TURNCUT=\"${{TURNCUT:-{exe}}}\"\nexec \"$TURNCUT\" {args}\n",
        id = result.spec.cell_id,
        name = result.spec.name(),
        verdict = result.verdict.as_str(),
        version = env!("CARGO_PKG_VERSION"),
        exe = env.turncut.display(),
        args = args.join(" ")
    )
}

/// Quotes a word for `sh` when it needs it.
fn sh_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=#:,@+%".contains(c));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// How `env` runs cells, for `wave.json` (what `turncut replay` reads),
/// with the file of every scenario id of `scenarios`.
pub fn run_config(env: &CellEnv, scenarios: &[Scenario]) -> RunConfig {
    let default_runner = [env.turncut.display().to_string(), "runnerd".to_owned()];
    RunConfig {
        turncut_version: env!("CARGO_PKG_VERSION").to_owned(),
        turncut_path: env.turncut.display().to_string(),
        runner_cmd: (env.runner_cmd != default_runner).then(|| env.runner_cmd.clone()),
        runner_args: env.runner_extra.clone(),
        idle_timeout_ms: env.idle_timeout_ms,
        hang_idle_timeout_ms: env.hang_idle_timeout_ms,
        cell_wait_ms: env.wait_ms,
        depth1_only: !env.recut,
        stress: env.stress,
        scenarios: scenarios_arg(env),
        scenario_files: scenarios
            .iter()
            .flat_map(|s| {
                s.ids()
                    .into_iter()
                    .map(|id| (id, s.path.display().to_string()))
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(
            sh_quote("runner.turn_intent.persisted#1"),
            "runner.turn_intent.persisted#1"
        );
        assert_eq!(sh_quote("/bin/sh -c x"), "'/bin/sh -c x'");
        assert_eq!(sh_quote("it's"), "'it'\\''s'");
    }
}
