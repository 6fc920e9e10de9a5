//! One vendored JSON Schema document, with validators for its parts compiled on first use
//! and cached.
//!
//! Protocol specs are large (the Codex one holds some 800 definitions) and a test validates
//! thousands of messages against a few dozen of them, so compiling the whole document up
//! front or on every message would both be wasteful. Every validator here is a small wrapper
//! schema whose `$ref`s point into the document, which is registered once under a private
//! base URI. This module deliberately knows nothing about JSON-RPC or any protocol's method
//! tables; it is shared by every protocol module.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use jsonschema::{Draft, Registry, ValidationError, Validator};
use serde_json::{Value, json};

use crate::Error;

/// How many characters of one error message are kept; schema errors about large objects
/// otherwise quote the whole object.
const ERROR_MESSAGE_CHARS_MAX: usize = 240;

pub(crate) struct SchemaDocument {
    base_uri: String,
    root: Arc<Value>,
    draft: Draft,
    registry: Registry<'static>,
    validators: Mutex<HashMap<String, Arc<Validator>>>,
}

impl std::fmt::Debug for SchemaDocument {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cached = self
            .validators
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        f.debug_struct("SchemaDocument")
            .field("base_uri", &self.base_uri)
            .field("draft", &self.draft)
            .field("validators_cached", &cached)
            .finish_non_exhaustive()
    }
}

impl SchemaDocument {
    /// Registers `root` under `base_uri`, which only needs to be unique within this process;
    /// nothing is ever fetched from it.
    pub(crate) fn new(base_uri: &str, root: Value, draft: Draft) -> Result<Self, Error> {
        let root = Arc::new(root);
        let index_error = |source| Error::Index {
            base_uri: base_uri.to_owned(),
            source,
        };
        let registry = Registry::new()
            .draft(draft)
            .add(base_uri, Arc::clone(&root))
            .map_err(index_error)?
            .prepare()
            .map_err(index_error)?;
        Ok(SchemaDocument {
            base_uri: base_uri.to_owned(),
            root,
            draft,
            registry,
            validators: Mutex::new(HashMap::new()),
        })
    }


    /// The part of the document at a fragment pointer such as `#/definitions/v2/Thread`.
    pub(crate) fn get(&self, pointer: &str) -> Option<&Value> {
        self.root.pointer(pointer.strip_prefix('#')?)
    }

    /// A `$ref` target for a fragment pointer into this document, usable from a wrapper
    /// schema that lives outside it.
    pub(crate) fn absolute(&self, pointer: &str) -> String {
        format!("{}{}", self.base_uri, pointer)
    }

    /// The validator for the part of the document at `pointer`.
    pub(crate) fn validator_at(&self, pointer: &str) -> Result<Arc<Validator>, Error> {
        if self.get(pointer).is_none() {
            return Err(Error::Compile {
                pointer: pointer.to_owned(),
                message: "no schema at this pointer".to_owned(),
            });
        }
        self.validator_with(pointer, || json!({ "$ref": self.absolute(pointer) }))
    }

    /// The validator cached under `key`, compiled from `schema()` the first time.
    ///
    /// The wrapper schema must refer into the document only through absolute references
    /// made with [`SchemaDocument::absolute`], because its own base URI is not the
    /// document's.
    pub(crate) fn validator_with(
        &self,
        key: &str,
        schema: impl FnOnce() -> Value,
    ) -> Result<Arc<Validator>, Error> {
        // Compiling under the lock keeps two threads from compiling the same schema twice;
        // compilation is quick next to the validation it saves.
        let mut validators = self
            .validators
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(validator) = validators.get(key) {
            return Ok(Arc::clone(validator));
        }
        let validator = jsonschema::options()
            .with_draft(self.draft)
            .with_registry(&self.registry)
            .build(&schema())
            .map_err(|error| Error::Compile {
                pointer: key.to_owned(),
                message: error.to_string(),
            })?;
        let validator = Arc::new(validator);
        validators.insert(key.to_owned(), Arc::clone(&validator));
        Ok(validator)
    }

    /// Validates `value`, describing at most `errors_max` errors. `instance_prefix` is
    /// prepended to every instance path so that an error in a response's `result` reads
    /// `/result/...` rather than starting at the root.
    pub(crate) fn check(
        &self,
        validator: &Validator,
        value: &Value,
        instance_prefix: &str,
        errors_max: usize,
    ) -> Result<(), Vec<String>> {
        if validator.is_valid(value) {
            return Ok(());
        }
        let errors: Vec<String> = validator
            .iter_errors(value)
            .take(errors_max)
            .map(|error| self.describe(&error, instance_prefix))
            .collect();
        if errors.is_empty() {
            // `is_valid` and `iter_errors` disagreeing would be a bug in the validator; a
            // message must not pass because of it.
            Err(vec!["rejected by the schema without a reported error".to_owned()])
        } else {
            Err(errors)
        }
    }

    fn describe(&self, error: &ValidationError<'_>, instance_prefix: &str) -> String {
        let at = format!("{instance_prefix}{}", error.instance_path());
        let at = if at.is_empty() { "/" } else { at.as_str() };
        // A scalar is short and is exactly what the reader needs to see ("maybe" is not
        // one of …); an object or array would drown the message.
        let message = match error.instance().as_ref() {
            Value::Object(_) | Value::Array(_) => error.masked_with("the value").to_string(),
            _ => error.to_string(),
        };
        let message = truncate(&message, ERROR_MESSAGE_CHARS_MAX);
        let keyword = match error.absolute_keyword_location() {
            Some(uri) => {
                let uri = uri.as_str();
                uri.strip_prefix(&self.base_uri).unwrap_or(uri).to_owned()
            }
            None => error.schema_path().to_string(),
        };
        format!("at {at}: {message} (schema {keyword})")
    }
}

fn truncate(text: &str, chars_max: usize) -> String {
    match text.char_indices().nth(chars_max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
