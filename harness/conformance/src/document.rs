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

use jsonschema::error::ValidationErrorKind;
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
            source: Box::new(source),
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
        let mut errors = Vec::new();
        for error in validator.iter_errors(value) {
            if errors.len() >= errors_max {
                break;
            }
            self.explain(&error, instance_prefix, &mut errors);
        }
        errors.truncate(errors_max);
        if errors.is_empty() {
            // `is_valid` and `iter_errors` disagreeing would be a bug in the validator; a
            // message must not pass because of it.
            errors.push("rejected by the schema without a reported error".to_owned());
        }
        Err(errors)
    }

    /// Describes one error, looking inside a failed `oneOf` or `anyOf`.
    ///
    /// The spec models tagged unions (`UserInput`, `ThreadItem`, approval decisions) as
    /// `oneOf`, and "not valid under any of the schemas" says nothing about which field is
    /// wrong. When exactly one alternative matches the value's shape (its type and any
    /// tag such as `"type": "text"`), that alternative's own errors are the useful ones;
    /// otherwise the reader needs to see what the alternatives were.
    fn explain(&self, error: &ValidationError<'_>, instance_prefix: &str, out: &mut Vec<String>) {
        let context = match error.kind() {
            ValidationErrorKind::OneOfNotValid { context }
            | ValidationErrorKind::AnyOf { context } => context,
            _ => {
                out.push(self.describe(error, instance_prefix, None));
                return;
            }
        };
        let at = error.instance_path().as_str();
        let mut shaped = context
            .iter()
            .filter(|errors| !errors.iter().any(|error| mismatches_shape(error, at)));
        if let (Some(only), None) = (shaped.next(), shaped.next())
            && !only.is_empty()
        {
            for inner in only {
                self.explain(inner, instance_prefix, out);
            }
            return;
        }
        out.push(self.describe(error, instance_prefix, self.alternatives(error)));
    }

    fn describe(
        &self,
        error: &ValidationError<'_>,
        instance_prefix: &str,
        expected: Option<String>,
    ) -> String {
        let at = format!("{instance_prefix}{}", error.instance_path());
        let at = if at.is_empty() { "/" } else { at.as_str() };
        // A scalar is short and is exactly what the reader needs to see ("maybe" is not
        // one of …); an object or array would drown the message.
        let message = match error.instance().as_ref() {
            Value::Object(_) | Value::Array(_) => error.masked_with("the value").to_string(),
            _ => error.to_string(),
        };
        let message = truncate(&message, ERROR_MESSAGE_CHARS_MAX);
        let expected = expected
            .map(|e| format!("; expected {e}"))
            .unwrap_or_default();
        let keyword = self.keyword_location(error);
        format!("at {at}: {message}{expected} (schema {keyword})")
    }

    /// The schema keyword that failed, as a pointer into this document when it is one.
    fn keyword_location(&self, error: &ValidationError<'_>) -> String {
        match error.absolute_keyword_location() {
            Some(uri) => {
                let uri = uri.as_str();
                uri.strip_prefix(&self.base_uri).unwrap_or(uri).to_owned()
            }
            None => error.schema_path().to_string(),
        }
    }

    /// A short list of what the alternatives of a failed `oneOf` or `anyOf` accept, such as
    /// `"accept", "decline", {"acceptWithExecpolicyAmendment": …}`.
    fn alternatives(&self, error: &ValidationError<'_>) -> Option<String> {
        let alternatives = self.get(&self.keyword_location(error))?.as_array()?;
        let shapes: Vec<String> = alternatives
            .iter()
            .flat_map(|alternative| self.shapes(alternative))
            .collect();
        let listed = shapes.len().min(ALTERNATIVES_LISTED_MAX);
        let mut text = format!("one of {}", shapes[..listed].join(", "));
        if shapes.len() > listed {
            text.push_str(&format!(" and {} more", shapes.len() - listed));
        }
        (!shapes.is_empty()).then_some(text)
    }

    /// What one alternative accepts, in the fewest words that tell it apart.
    fn shapes(&self, alternative: &Value) -> Vec<String> {
        let alternative = match alternative.get("$ref").and_then(Value::as_str) {
            Some(reference) => {
                let pointer = reference.strip_prefix(&self.base_uri).unwrap_or(reference);
                self.get(pointer).unwrap_or(alternative)
            }
            None => alternative,
        };
        if let Some(values) = alternative.get("enum").and_then(Value::as_array) {
            return values.iter().map(Value::to_string).collect();
        }
        if let Some(value) = alternative.get("const") {
            return vec![value.to_string()];
        }
        let properties = alternative.get("properties").and_then(Value::as_object);
        // A property fixed to one value is the union's tag, such as `"type": "text"`.
        let tag = properties.into_iter().flatten().find_map(|(name, schema)| {
            match schema.get("enum").and_then(Value::as_array)?.as_slice() {
                [value] => Some(format!("{{\"{name}\": {value}, …}}")),
                _ => None,
            }
        });
        if let Some(tag) = tag {
            return vec![tag];
        }
        let required = alternative.get("required").and_then(Value::as_array);
        if let Some([only]) = required.map(Vec::as_slice)
            && let Some(name) = only.as_str()
        {
            return vec![format!("{{\"{name}\": …}}")];
        }
        match alternative.get("type") {
            Some(Value::String(kind)) if kind == "null" => vec!["null".to_owned()],
            Some(Value::String(kind)) => vec![format!("a {kind}")],
            _ => match alternative.get("title").and_then(Value::as_str) {
                Some(title) => vec![title.to_owned()],
                None => vec!["another shape".to_owned()],
            },
        }
    }
}

/// How many alternatives a hint lists before summarizing the rest as a count.
const ALTERNATIVES_LISTED_MAX: usize = 8;

/// Whether `error`, raised inside one alternative of a union at instance path `at`, shows
/// that the value is not of that alternative's shape at all: the wrong JSON type, or a tag
/// property with a different value.
fn mismatches_shape(error: &ValidationError<'_>, at: &str) -> bool {
    let path = error.instance_path().as_str();
    let is_tag = path
        .strip_prefix(at)
        .and_then(|rest| rest.strip_prefix('/'))
        .is_some_and(|rest| !rest.is_empty() && !rest.contains('/'));
    match error.kind() {
        ValidationErrorKind::Type { .. } => path == at,
        ValidationErrorKind::Enum { .. } | ValidationErrorKind::Constant { .. } => {
            path == at || is_tag
        }
        _ => false,
    }
}

fn truncate(text: &str, chars_max: usize) -> String {
    match text.char_indices().nth(chars_max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
