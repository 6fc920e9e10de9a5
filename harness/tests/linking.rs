//! How `turncut` is linked: on x86_64 Linux with glibc, statically
//! (`tools/link-static`, the linker `.cargo/config.toml` names; why and what
//! it buys: docs/ci.md, "Linked statically"). A link that fell back to the
//! dynamic one (the wrapper's line on stderr is easy to miss in a build's
//! output) fails here. Built only for the target `tools/link-static` is
//! named for.
#![cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]

/// The ELF program header types of the file at `path`.
fn segment_types(path: &str) -> Vec<u32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(&bytes[..4], b"\x7fELF", "{path} is not an ELF file");
    assert_eq!(bytes[4], 2, "{path} is not a 64-bit ELF file");
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(bytes[0x20..0x28].try_into().unwrap()) as usize;
    let (size, count) = (u16_at(0x36), u16_at(0x38));
    (0..count)
        .map(|i| {
            let at = phoff + i * size;
            u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
        })
        .collect()
}

/// `PT_DYNAMIC` and `PT_INTERP`.
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;

#[test]
fn turncut_is_linked_statically() {
    if std::env::var("TURNCUT_DYNAMIC").as_deref() == Ok("1") {
        eprintln!("skipped: TURNCUT_DYNAMIC=1 asks tools/link-static for a dynamic link");
        return;
    }
    let exe = env!("CARGO_BIN_EXE_turncut");
    let types = segment_types(exe);
    assert!(
        !types.contains(&PT_INTERP) && !types.contains(&PT_DYNAMIC),
        "{exe} is linked dynamically (program headers {types:?}): either cargo ran outside \
         the repository and never read .cargo/config.toml, or tools/link-static fell back to \
         rustc's dynamic link (its line in the build's output says why)"
    );
}

#[test]
fn the_program_headers_of_a_dynamic_executable_are_read() {
    // The test binary itself is linked as rustc asked: dynamically.
    let me = std::env::current_exe().unwrap();
    let types = segment_types(me.to_str().unwrap());
    assert!(types.contains(&PT_INTERP), "{types:?}");
}
