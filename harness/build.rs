//! The `turncut` binary is linked as a fixed-address executable: it is
//! started for every runnerd, fake provider and effect command of a wave
//! (tens of thousands of times), and a position-independent image applied
//! ~34,000 relocations at each start, copying the pages they touched
//! (`docs/architecture.md`, `src/main.rs`). On x86_64 Linux it is also
//! linked statically against glibc, by `tools/link-static` (the linker
//! `.cargo/config.toml` names): a build script cannot ask rustc for that.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-link-arg-bins=-no-pie");
}
