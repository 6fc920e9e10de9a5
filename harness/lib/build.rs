//! Embeds the built-in scenarios (`../../scenarios/*.toml`) into the binary, so
//! an installed `turncut` keeps them: `$OUT_DIR/builtin_scenarios.rs` is a
//! list of (file name, `include_str!` of the file).

use std::path::Path;

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("the scenarios directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    let mut out = String::from("&[\n");
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
        let name = f.file_name().unwrap().to_string_lossy();
        let path = std::fs::canonicalize(f).expect("a scenario file");
        out.push_str(&format!(
            "    ({name:?}, include_str!({:?})),\n",
            path.display().to_string()
        ));
    }
    out.push_str("]\n");
    let target = Path::new(&std::env::var("OUT_DIR").unwrap()).join("builtin_scenarios.rs");
    std::fs::write(target, out).expect("writing builtin_scenarios.rs");
}
