//! The confiner's own tests: links refused in every form, bounds, and a
//! directory swapped for a link while tools write and read under it.

use super::*;

use std::os::unix::fs::symlink;

/// A link inside the workspace to a file outside, dangling or not, is
/// refused for reading and writing, named by a relative or an absolute
/// path, with an absolute or a relative target; nothing appears outside.
#[test]
fn links_are_refused_in_every_form() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical");
    std::fs::create_dir(root.join("ws")).expect("mkdir");
    std::fs::write(root.join("there"), "outside").expect("write");
    let ws = Workspace::new(root.join("ws")).expect("workspace");
    symlink(root.join("abs-target"), root.join("ws/abs")).expect("symlink");
    symlink("../rel-target", root.join("ws/rel")).expect("symlink");
    symlink(root.join("there"), root.join("ws/live")).expect("symlink");
    symlink(".", root.join("ws/here")).expect("symlink");
    for link in ["abs", "rel", "live", "here/f"] {
        let absolute = root.join("ws").join(link).display().to_string();
        for path in [link, absolute.as_str()] {
            let err = ws.write_text(path, "x", 16).expect_err(path);
            assert!(err.contains("is a symbolic link"), "{path}: {err}");
            let err = ws.read_text(path, 16).expect_err(path);
            assert!(err.contains("is a symbolic link"), "{path}: {err}");
        }
    }
    assert!(!root.join("abs-target").exists());
    assert!(!root.join("rel-target").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("there")).unwrap(),
        "outside"
    );
}

#[test]
fn reads_and_writes_are_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = Workspace::new(dir.path().canonicalize().unwrap()).expect("workspace");
    assert_eq!(
        ws.write_text("f", "12345", 4),
        Err("the content is 5 bytes, over the write limit of 4 bytes".to_owned())
    );
    assert_eq!(
        ws.write_text("f", "1234", 4),
        Ok("created f (4 bytes)".to_owned())
    );
    let err = ws.read_text("f", 3).expect_err("over the limit");
    assert!(err.contains("over the read limit of 3 bytes"), "{err}");
    assert_eq!(ws.read_text("f", 4), Ok("1234".to_owned()));
}

/// A workspace whose path became a link since it was admitted is refused.
#[test]
fn a_workspace_replaced_by_a_link_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical");
    std::fs::create_dir(root.join("elsewhere")).expect("mkdir");
    symlink(root.join("elsewhere"), root.join("ws")).expect("symlink");
    let err = Workspace::new(root.join("ws")).expect_err("a link");
    assert!(err.to_string().contains("is not canonical"), "{err}");
}

/// While one thread swaps `d` with a link to a directory outside
/// (`renameat2(RENAME_EXCHANGE)`, as fast as it can), 2,000 writes and 2,000
/// reads under `d/` either act inside the workspace or are refused: no file
/// lands outside, no read returns outside content. (The confiner that
/// resolved a path and then opened it by path let 5-12 of the 2,000 writes
/// out, in three runs of this test against it.)
#[test]
fn a_directory_swapped_for_a_link_never_leads_a_tool_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical");
    let (ws_path, outside) = (root.join("ws"), root.join("outside"));
    std::fs::create_dir_all(ws_path.join("d")).expect("mkdir");
    std::fs::create_dir(&outside).expect("mkdir");
    for i in 0..2000 {
        std::fs::write(ws_path.join(format!("d/r{i}")), "inside").expect("write");
        std::fs::write(outside.join(format!("r{i}")), "OUTSIDE").expect("write");
    }
    symlink(&outside, ws_path.join("s")).expect("symlink");
    let ws = Workspace::new(&ws_path).expect("workspace");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, ws_path) = (Arc::clone(&stop), ws_path.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                nix::fcntl::renameat2(
                    nix::fcntl::AT_FDCWD,
                    &ws_path.join("d"),
                    nix::fcntl::AT_FDCWD,
                    &ws_path.join("s"),
                    nix::fcntl::RenameFlags::RENAME_EXCHANGE,
                )
                .expect("exchange");
                swaps += 1;
            }
            swaps
        })
    };
    let mut outside_reads = 0;
    let mut refused = 0;
    for i in 0..2000 {
        if ws.write_text(&format!("d/w{i}"), "x", 16).is_err() {
            refused += 1;
        }
        match ws.read_text(&format!("d/r{i}"), 16) {
            Ok(text) if text == "OUTSIDE" => outside_reads += 1,
            Ok(_) => {}
            Err(_) => refused += 1,
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().expect("swapper");
    let escaped: Vec<_> = std::fs::read_dir(&outside)
        .expect("outside")
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().into_owned();
            name.starts_with('w').then_some(name)
        })
        .collect();
    eprintln!("{swaps} swaps, {refused} calls refused");
    assert!(swaps > 0);
    assert!(
        escaped.is_empty(),
        "{} files written outside: {escaped:?}",
        escaped.len()
    );
    assert_eq!(outside_reads, 0, "reads returned outside content");
}
