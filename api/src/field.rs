//! Field errors in the apiserver's own wording, so a denial reads like a built-in one.
use std::fmt;

use serde_json::Value;

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

/// A DNS-1123 label: lowercase alphanumerics and '-', starting and ending alphanumeric, at most 63.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// A DNS-1123 subdomain: dot-separated labels, at most 253 characters (object names).
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// Checks `value` as an object name and records why it is not one.
pub fn check_name(errors: &mut FieldErrors, path: &str, value: &str, label: bool) {
    let (ok, what) = if label {
        (is_dns1123_label(value), "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character")
    } else {
        (is_dns1123_subdomain(value), "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character")
    };
    if value.is_empty() {
        errors.push(FieldError::required(path, ""));
    } else if !ok {
        errors.push(FieldError::invalid(path, value, what));
    }
}

/// Checks an integer range and records the apiserver-style message.
pub fn check_range(errors: &mut FieldErrors, path: &str, value: i64, min: i64, max: i64) {
    if value < min || value > max {
        errors.push(FieldError::invalid(
            path,
            value,
            format!("must be between {min} and {max}, inclusive"),
        ));
    }
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

    #[test]
    fn dns_names() {
        assert!(is_dns1123_label("web-1"));
        assert!(!is_dns1123_label("Web"));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label(&"a".repeat(64)));
        assert!(is_dns1123_subdomain("a.b-c"));
        assert!(!is_dns1123_subdomain("a..b"));
    }
}
