//! The `turncut` binary is linked as a fixed-address executable: it is
//! started for every runnerd, fake provider and effect command of a wave
//! (tens of thousands of times), and a position-independent image applied
//! ~34,000 relocations at each start, copying the pages they touched
//! (`docs/architecture.md`, `src/main.rs`).
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-link-arg-bins=-no-pie");
}
