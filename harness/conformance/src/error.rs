//! The typed errors of loading a vendored spec and turning it into validators.
//!
//! These describe a broken harness setup (a missing, unreadable or unexpectedly shaped spec
//! file). They deliberately do not describe a message that breaks the protocol: that is a
//! [`crate::Violation`], which is data about the system under test, not a setup failure.

use std::path::PathBuf;

/// A failure to load a vendored spec or to compile a schema from it.
///
/// Every message is a lowercase fragment that reads after "failed to …".
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec file could not be read, usually because it is not where
    /// [`crate::specs_dir`] says it is.
    #[error("read spec file {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The spec file is not JSON.
    #[error("parse spec file {} as json", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    /// The spec parsed but is not shaped the way the method tables are derived from it,
    /// which means the vendored spec changed in a way this crate must learn about.
    #[error("derive protocol tables from {}: {detail}", path.display())]
    Shape { path: PathBuf, detail: String },

    /// The `jsonschema` crate refused to index the document, for example because of a
    /// malformed `$id`.
    #[error("index schema document {base_uri}")]
    Index {
        base_uri: String,
        #[source]
        source: Box<jsonschema::ReferencingError>,
    },

    /// A schema could not be compiled into a validator, for example because a `$ref` points
    /// nowhere.
    #[error("compile a validator for {pointer}: {message}")]
    Compile { pointer: String, message: String },

    /// Reading a directory while comparing spec copies failed.
    #[error("walk spec directory {}", path.display())]
    Walk {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
