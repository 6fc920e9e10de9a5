//! The standalone `runnerd` binary; `turncut runnerd` runs the same code.

fn main() {
    cutpoint::die_with_parent();
    std::process::exit(runner::cli::main(std::env::args_os()));
}
