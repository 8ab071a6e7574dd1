//! Field errors in the apiserver's own wording, so a denial reads like a built-in one.
use std::fmt;

use serde_json::Value;

/// A field path written only when an error names it: `parent.field` ([`Sub`]) or
/// `list[index]` ([`Index`]); a valid field costs no string.
#[derive(Debug, Clone, Copy)]
pub struct Sub<P>(pub P, pub &'static str);

impl<P: fmt::Display> fmt::Display for Sub<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

/// The path of a list item, `list[index]`, written only when needed (see [`Sub`]).
#[derive(Debug, Clone, Copy)]
pub struct Index(pub &'static str, pub usize);

impl fmt::Display for Index {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]", self.0, self.1)
    }
}

/// What is wrong with one field; the variants follow k8s.io/apimachinery's `field.ErrorType`.
#[derive(Debug, Clone, PartialEq)]
pub enum Reason {
    Required,
    Invalid(Value),
    Duplicate(Value),
    NotSupported(Value, Vec<&'static str>),
    TooMany(usize, usize),
    Forbidden,
}

/// One violation: its field path (`spec.deployments[2].name`) and what is wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub path: String,
    pub reason: Reason,
    pub detail: String,
}

impl FieldError {
    pub fn required(path: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(path, Reason::Required, detail)
    }
    pub fn invalid(
        path: impl Into<String>,
        value: impl Into<Value>,
        detail: impl Into<String>,
    ) -> Self {
        Self::new(path, Reason::Invalid(value.into()), detail)
    }
    pub fn duplicate(path: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::new(path, Reason::Duplicate(value.into()), "")
    }
    pub fn not_supported(
        path: impl Into<String>,
        value: impl Into<Value>,
        supported: &[&'static str],
    ) -> Self {
        Self::new(
            path,
            Reason::NotSupported(value.into(), supported.to_vec()),
            "",
        )
    }
    pub fn too_many(path: impl Into<String>, actual: usize, max: usize) -> Self {
        Self::new(path, Reason::TooMany(actual, max), "")
    }
    pub fn forbidden(path: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(path, Reason::Forbidden, detail)
    }
    fn new(path: impl Into<String>, reason: Reason, detail: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            reason,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.path)?;
        match &self.reason {
            Reason::Required => write!(f, "Required value")?,
            Reason::Invalid(v) => write!(f, "Invalid value: {v}")?,
            Reason::Duplicate(v) => write!(f, "Duplicate value: {v}")?,
            Reason::NotSupported(v, supported) => {
                let quoted: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
                write!(
                    f,
                    "Unsupported value: {v}: supported values: {}",
                    quoted.join(", ")
                )?
            }
            Reason::TooMany(actual, max) => {
                write!(f, "Too many: {actual}: must have at most {max} items")?
            }
            Reason::Forbidden => write!(f, "Forbidden")?,
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

/// Every violation of one object, in the order they were found.
pub type FieldErrors = Vec<FieldError>;

/// The apiserver's summary line: `Kind.group "name" is invalid: [a, b]`.
pub fn summarize(kind: &str, name: &str, errors: &[FieldError]) -> String {
    let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let body = if list.len() == 1 {
        list[0].clone()
    } else {
        format!("[{}]", list.join(", "))
    };
    format!("{kind}.{} {name:?} is invalid: {body}", crate::GROUP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_match_the_apiserver() {
        let e = FieldError::invalid("spec.start", 25, "must be an hour 0-23 or \"HH:MM\"");
        assert_eq!(
            e.to_string(),
            "spec.start: Invalid value: 25: must be an hour 0-23 or \"HH:MM\""
        );
        let e = FieldError::invalid("spec.timeZone", "Mars/Olympus", "unknown time zone");
        assert_eq!(
            e.to_string(),
            "spec.timeZone: Invalid value: \"Mars/Olympus\": unknown time zone"
        );
        assert_eq!(
            FieldError::required("spec.name", "").to_string(),
            "spec.name: Required value"
        );
        let e = FieldError::not_supported("spec.serviceType", "Foo", &["NodePort", "ClusterIP"]);
        assert_eq!(e.to_string(), "spec.serviceType: Unsupported value: \"Foo\": supported values: \"NodePort\", \"ClusterIP\"");
        assert_eq!(
            FieldError::too_many("spec.jobs", 21, 20).to_string(),
            "spec.jobs: Too many: 21: must have at most 20 items"
        );
    }

    #[test]
    fn summary_lists_every_error() {
        let errs = vec![
            FieldError::required("spec.a", ""),
            FieldError::invalid("spec.b", 1, "bad"),
        ];
        assert_eq!(
            summarize("Scaler", "x", &errs),
            "Scaler.kubesteer.io \"x\" is invalid: [spec.a: Required value, spec.b: Invalid value: 1: bad]"
        );
    }
}
