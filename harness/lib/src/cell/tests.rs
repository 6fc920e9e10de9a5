use super::*;

/// A scenario of one task whose one turn runs a command of `duration_ms`.
fn with_command(duration_ms: u64) -> Scenario {
    let text = format!(
        "suite = \"t\"\ncase = \"c\"\nprofiles = [\"runner-codex\"]\ntitle = \"t\"\n\
         [[script.turn]]\ntools = [{{ key = \"k\", kind = \"command\", duration_ms = {duration_ms} }}]\n\
         [[steps]]\nsubmit = {{ prompt = \"p\" }}\n[[steps]]\nawait = \"settled\"\n\
         [chaos]\ncut = \"every-boundary\"\nfaults = [\"hang-provider\"]\n"
    );
    crate::scenario::parse(&text, "t/c.toml").unwrap()
}

/// A hang cell's idle timeout outlasts the script's longest command by the
/// hang timeout (a healthy provider is silent while it runs), up to the
/// runner's idle timeout; a cell that hangs nothing keeps the runner's.
#[test]
fn a_hang_cells_idle_timeout_outlasts_the_longest_scripted_command() {
    let env = CellEnv::new(Path::new("turncut"), Path::new(""));
    assert_eq!((env.idle_timeout_ms, env.hang_idle_timeout_ms), (500, 50));
    let hang = [Event {
        cut: crate::model::Cut {
            point: "runner.turn_accepted.persisted".into(),
            n: 1,
        },
        fault: Fault::HangProvider,
    }];
    let idle =
        |s: &Scenario, events: &[Event]| hang_timeout(&env, events, s).map(|e| e.idle_timeout_ms);
    assert_eq!(idle(&with_command(0), &hang), Some(50));
    assert_eq!(idle(&with_command(300), &hang), Some(350));
    assert_eq!(idle(&with_command(900), &hang), Some(500), "capped");
    assert_eq!(idle(&with_command(300), &[]), None, "nothing hung");
}

/// A hang cell gives runnerd's provider exit grace the cell's idle timeout
/// (a provider hung after its last answer cannot exit on its own), and only
/// `turncut runnerd` gets the option: a runner of `--runner-cmd` speaks the
/// contract's options alone.
#[test]
fn a_hang_cells_exit_grace_is_its_idle_timeout_and_only_runnerd_gets_it() {
    let env = CellEnv::new(Path::new("turncut"), Path::new(""));
    let hang = [Event {
        cut: crate::model::Cut {
            point: "runner.turn_accepted.persisted".into(),
            n: 1,
        },
        fault: Fault::HangProvider,
    }];
    let hung = hang_timeout(&env, &hang, &with_command(0)).unwrap();
    assert_eq!(hung.exit_grace_ms, Some(500));
    let args = exit_grace_args(&hung);
    assert_eq!(args, ["--provider-exit-grace-ms", "500"]);
    assert!(
        exit_grace_args(&env).is_empty(),
        "no hang: runnerd's default"
    );
    let foreign = CellEnv {
        runner_cmd: vec!["./my-runner".into()],
        ..hung
    };
    assert!(exit_grace_args(&foreign).is_empty());
}
