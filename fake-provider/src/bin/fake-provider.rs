//! The standalone `fake-provider` binary; `turncut fake-provider` runs the same code.

fn main() {
    let exe = std::env::current_exe().map_or_else(|_| "fake-provider".into(), Into::into);
    std::process::exit(fake_provider::cli::main(std::env::args_os(), vec![exe]));
}
