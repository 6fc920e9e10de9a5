//! The standalone `runnerd` binary; `turncut runnerd` runs the same code.

fn main() {
    std::process::exit(runner::cli::main(std::env::args_os()));
}
