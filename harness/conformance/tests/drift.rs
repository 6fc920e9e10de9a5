//! The vendored specs must be byte-identical to the project's shared copies.
//!
//! The shared folder is the source of truth; the vendored copy exists so this crate builds
//! and tests anywhere. On a machine without the shared folder there is nothing to compare,
//! so the test says so and passes; it deliberately does not fetch the specs from anywhere.

use conformance::{shared_protocols_dir, spec_drift, specs_dir};

#[test]
fn vendored_specs_match_the_shared_copies() {
    let Some(shared) = shared_protocols_dir() else {
        println!("skipped: no shared/protocols folder next to the workspace");
        return;
    };
    let vendored = specs_dir();
    let drift = spec_drift(&shared, &vendored).unwrap();
    let listing: Vec<String> = drift.iter().map(ToString::to_string).collect();
    assert!(
        drift.is_empty(),
        "{} differs from {}; re-vendor with `cp -r {}/. {}`:\n{}",
        vendored.display(),
        shared.display(),
        shared.display(),
        vendored.display(),
        listing.join("\n")
    );
}

#[test]
fn drift_is_reported_per_file() {
    let root = std::env::temp_dir().join(format!("conformance-drift-{}", std::process::id()));
    let (shared, vendored) = (root.join("shared"), root.join("vendored"));
    std::fs::create_dir_all(shared.join("acp")).unwrap();
    std::fs::create_dir_all(vendored.join("acp")).unwrap();
    std::fs::write(shared.join("same.json"), "{}").unwrap();
    std::fs::write(vendored.join("same.json"), "{}").unwrap();
    std::fs::write(shared.join("acp/schema.json"), "{\"a\":1}").unwrap();
    std::fs::write(vendored.join("acp/schema.json"), "{\"a\":2}").unwrap();
    std::fs::write(shared.join("new.json"), "{}").unwrap();

    let drift: Vec<String> = spec_drift(&shared, &vendored)
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    std::fs::remove_dir_all(&root).unwrap();
    assert_eq!(
        drift,
        [
            "acp/schema.json: differs from the vendored copy",
            "new.json: missing from the vendored copy"
        ]
    );
}

/// The ACP schema is named explicitly, so that removing it from the shared folder cannot
/// silently stop the copy the ACP checker reads from being compared.
#[test]
fn vendored_acp_schema_matches_the_shared_copy() {
    let vendored = specs_dir().join(conformance::ACP_SCHEMA_FILE);
    assert!(vendored.is_file(), "{} is missing", vendored.display());
    let Some(shared) = shared_protocols_dir() else {
        println!("skipped: no shared/protocols folder next to the workspace");
        return;
    };
    let shared = shared.join(conformance::ACP_SCHEMA_FILE);
    assert_eq!(
        std::fs::read(&shared).unwrap(),
        std::fs::read(&vendored).unwrap(),
        "{} differs from {}; re-vendor it with `cp`",
        vendored.display(),
        shared.display()
    );
}

/// The OpenCode spec is named explicitly for the same reason: `conformance::opencode`
/// reads the vendored copy, which must stay the shared one byte for byte.
#[test]
fn vendored_opencode_spec_matches_the_shared_copy() {
    let vendored = specs_dir().join(conformance::OPENCODE_SPEC_FILE);
    assert!(vendored.is_file(), "{} is missing", vendored.display());
    let Some(shared) = shared_protocols_dir() else {
        println!("skipped: no shared/protocols folder next to the workspace");
        return;
    };
    let shared = shared.join(conformance::OPENCODE_SPEC_FILE);
    assert_eq!(
        std::fs::read(&shared).unwrap(),
        std::fs::read(&vendored).unwrap(),
        "{} differs from {}; re-vendor it with `cp`",
        vendored.display(),
        shared.display()
    );
}
