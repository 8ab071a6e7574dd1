//! Every field rule, once. The schema attributes on the types (`#[schemars(...)]`), the CEL rules
//! of the CRDs (`x-kubernetes-validations`) and the Rust validation read these same constants, so
//! the apiserver and the webhook cannot drift apart; `tests/e2e/webhook/agreement.rs` feeds both the same
//! bad objects to prove it.
use std::sync::OnceLock;

use regex::Regex;

use crate::field::{FieldError, FieldErrors};

/// Replica counts start at 0: 0 scales a workload down.
pub const MIN_REPLICAS: i32 = 0;
/// The largest value of an int32 field without a tighter rule, so nothing stored overflows the typed list.
pub const MAX_INT32: i32 = i32::MAX;
/// TCP ports.
pub const MIN_PORT: i32 = 1;
pub const MAX_PORT: i32 = 65535;
/// The largest integer a schema bound states exactly, since the CRD keeps bounds as f64: a
/// bound of `i64::MAX` is read back as 2^63, which the apiserver's validation turns into
/// `i64::MIN`, refusing every value.
pub const MAX_EXACT: i64 = (1 << 53) - 1;
/// The largest generation.
pub const MAX_GENERATION: i64 = MAX_EXACT;

/// Object names: a DNS-1123 label (namespaces) and subdomain (Deployments, Secrets).
pub const MAX_LABEL: usize = 63;
pub const MAX_SUBDOMAIN: usize = 253;
/// Container image references, as written in the spec.
pub const MAX_IMAGE: usize = 512;

/// A regular expression in the syntax both Go's RE2 (the apiserver's `pattern`) and the `regex`
/// crate read the same way: ASCII classes only, anchored.
#[derive(Debug)]
pub struct Pattern {
    /// The expression, as the schema's `pattern` states it.
    pub regex: &'static str,
    /// Why a value that does not match is refused, as the webhook says it.
    pub message: &'static str,
    compiled: OnceLock<Regex>,
}

impl Pattern {
    pub const fn new(regex: &'static str, message: &'static str) -> Self {
        Self {
            regex,
            message,
            compiled: OnceLock::new(),
        }
    }

    pub fn is_match(&self, value: &str) -> bool {
        self.compiled
            .get_or_init(|| {
                // The patterns are constants of this module; a unit test compiles every one.
                Regex::new(self.regex).unwrap_or_else(|e| panic!("pattern {}: {e}", self.regex))
            })
            .is_match(value)
    }
}

pub static DNS1123_LABEL: Pattern = Pattern::new(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
);
/// The name part of a label key, and a non-empty label value.
pub static LABEL_NAME: Pattern = Pattern::new(
    r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
    "must be 1-63 characters: alphanumerics, '-', '_' or '.', beginning and ending with an alphanumeric",
);
pub static DNS1123_SUBDOMAIN: Pattern = Pattern::new(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
);
/// A key of a Secret's `data`, as the apiserver allows it.
pub static SECRET_KEY: Pattern = Pattern::new(
    r"^[-._a-zA-Z0-9]+$",
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
);
/// A container image reference in the distribution grammar (docker/distribution `reference`):
/// `[host[:port]/]path[:tag][@digest]`, the path lowercase.
pub static IMAGE: Pattern = Pattern::new(
    r"^(([a-zA-Z0-9]|[a-zA-Z0-9][-a-zA-Z0-9]*[a-zA-Z0-9])(\.([a-zA-Z0-9]|[a-zA-Z0-9][-a-zA-Z0-9]*[a-zA-Z0-9]))*(:[0-9]+)?/)?[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$",
    "must be a container image reference such as registry.example.com/team/app:1.0 (lowercase repository, optional tag and digest)",
);

/// A resource quantity (`250m`, `64Mi`, `1e3`), as the apiserver parses one; controller-gen puts
/// the same pattern on every `Quantity`.
pub static QUANTITY: Pattern = Pattern::new(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
    "must match the regular expression of a quantity, such as 250m or 64Mi",
);

/// Scaler rules.
pub mod scaler {
    use super::Pattern;

    pub const MIN_TARGETS: usize = 1;
    pub const MAX_TARGETS: usize = 50;
    pub const MIN_JOBS: usize = 1;
    pub const MAX_JOBS: usize = 20;
    /// `spec.patches`: declared sleep patches, one per kind.
    pub const MAX_PATCHES: usize = 10;
    /// The paths one patch may touch.
    pub const MAX_PATCH_EDITS: usize = 20;
    /// The length of one patch's text, in bytes.
    pub const MAX_PATCH_BYTES: usize = 4096;
    /// Days of the week, each at most once.
    pub const MIN_DAYS: usize = 1;
    pub const MAX_DAYS: usize = 7;
    pub const MAX_JOB_NAME: usize = 63;
    pub const MAX_SCHEDULE: usize = 128;
    /// The longest IANA zone name is 32 characters; 64 leaves room.
    pub const MAX_TIME_ZONE: usize = 64;
    /// A time of day as an hour: 0 to this, inclusive.
    pub const MAX_HOUR: i64 = 23;
    /// "HH:MM": the longest time of day; bounding it keeps the CEL cost of the rules that read
    /// start and end (a list of windows, v1alpha1's spec) in budget.
    pub const MAX_CLOCK: usize = 5;
    pub static CLOCK: Pattern = Pattern::new(
        r"^([01][0-9]|2[0-3]):[0-5][0-9]$",
        "must be an hour 0-23 or \"HH:MM\"",
    );
    /// A window's end may also be the end of its day: the hour 24, or "24:00" (kube-downscaler's
    /// `Sat-Sun 00:00-24:00`), so that a window can last a whole day.
    pub const END_OF_DAY_HOUR: i64 = 24;
    pub static END_CLOCK: Pattern = Pattern::new(
        r"^(([01][0-9]|2[0-3]):[0-5][0-9]|24:00)$",
        "must be an hour 0-24 or \"HH:MM\" (\"24:00\": the end of the day)",
    );

    /// Why a window whose end is its start is refused.
    pub const SAME_START_AND_END: &str = "must differ from spec.start";

    /// The CEL rule of the spec: `end` is not the same time of day as `start`. A malformed time
    /// counts as -1 minutes and passes here, since its own rule refuses it.
    pub fn start_differs_from_end_rule() -> String {
        let minutes = |f: &str, pattern: &Pattern| {
            format!(
                "(type(self.{f}) == int ? self.{f} * 60 : (self.{f}.matches('{}') ? int(self.{f}.substring(0, 2)) * 60 + int(self.{f}.substring(3, 5)) : -1))",
                pattern.regex
            )
        };
        format!(
            "!has(self.start) || !has(self.end) || {start} < 0 || {start} != {end}",
            start = minutes("start", &CLOCK),
            end = minutes("end", &END_CLOCK)
        )
    }

    /// v1beta1: windows per Scaler.
    pub const MIN_WINDOWS: usize = 1;
    pub const MAX_WINDOWS: usize = 20;
    /// v1beta1: entries of `excludeDates`, and the longest one (`YYYY-MM-DD..YYYY-MM-DD`).
    pub const MAX_EXCLUDE_DATES: usize = 100;
    pub const MAX_EXCLUDE_DATE: usize = 22;
    /// v1beta1: a target's `apiVersion` (`group/version`) and `kind`.
    pub const MAX_API_VERSION: usize = 317;
    pub const MAX_KIND: usize = 63;
    /// v1beta1 `spec.selector`: kinds, listed namespaces and exclusions.
    pub const MAX_SELECTED_KINDS: usize = 8;
    pub const MAX_SELECTED_NAMESPACES: usize = 100;
    pub const MAX_EXCLUSIONS: usize = 50;
    /// v1beta1: `status.targets` lists at most this many targets (failing ones first);
    /// `status.targetCount` counts them all.
    pub const MAX_STATUS_TARGETS: usize = 100;
    /// v1beta1: the status lists this many upcoming transitions.
    pub const NEXT_TRANSITIONS: usize = 3;
    /// A kind as the apiserver names one: UpperCamelCase ASCII.
    pub static KIND: Pattern = Pattern::new(
        r"^[A-Z][A-Za-z0-9]*$",
        "must be a kind such as \"Deployment\": an ASCII letter A-Z followed by letters and digits",
    );
    /// `version` or `group/version`, the group a DNS-1123 subdomain.
    pub static API_VERSION: Pattern = Pattern::new(
        r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?v[0-9]+((alpha|beta)[0-9]+)?$",
        "must be \"version\" or \"group/version\", such as \"apps/v1\"",
    );

    /// The CEL rule of `start` (int-or-string): an hour or an "HH:MM" string.
    pub fn time_of_day_rule() -> String {
        format!(
            "type(self) == int ? (self >= 0 && self <= {MAX_HOUR}) : self.matches('{}')",
            CLOCK.regex
        )
    }

    /// The CEL rule of `end`: as `start`'s, or the end of the day (24, "24:00").
    pub fn end_of_window_rule() -> String {
        format!(
            "type(self) == int ? (self >= 0 && self <= {END_OF_DAY_HOUR}) : self.matches('{}')",
            END_CLOCK.regex
        )
    }
}

/// Welcome rules.
pub mod welcome {
    use super::Pattern;

    /// The name the app greets.
    pub const MIN_NAME: usize = 1;
    pub const MAX_NAME: usize = 63;
    pub const MIN_USER_ID: i32 = 1;
    pub const MAX_USER_ID: i32 = 65535;
    pub const MAX_GROUPS: usize = 32;
    pub const MIN_GROUP: usize = 1;
    pub const MAX_GROUP: usize = 63;
    pub const MAX_EMAIL: usize = 254;
    /// One '@', a local part of 1-64 characters without whitespace or controls, and a dotted
    /// domain of alphanumeric labels with inner '-'.
    pub static EMAIL: Pattern = Pattern::new(
        r"^[^@[:space:][:cntrl:]]{1,64}@([a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?\.)+[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?$",
        "must be a valid email address",
    );
    pub const MIN_PASSWORD: usize = 1;
    pub const MAX_PASSWORD: usize = 1024;
    pub const MAX_REPLICAS: i32 = 100;
}

/// Application rules.
pub mod application {
    use super::Pattern;

    pub const MAX_REPLICAS: i32 = 100;
    /// Environment variables of the container.
    pub const MAX_ENV: usize = 128;
    pub const MAX_ENV_NAME: usize = 253;
    /// An environment variable name: printable ASCII without '=', as Kubernetes allows since 1.32.
    pub static ENV_NAME: Pattern = Pattern::new(
        r"^[!-<>-~]([ -<>-~]*[!-<>-~])?$",
        "must consist of printable ASCII characters other than '=', and must not start or end with a space",
    );
    /// A host as an Ingress rule takes it: a lowercase DNS-1123 subdomain, optionally behind one
    /// leading `*.` wildcard label; never an IP address.
    pub static HOST: Pattern = Pattern::new(
        r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
        "must be a lowercase DNS-1123 subdomain, optionally starting with a \"*.\" wildcard label",
    );
    /// Dotted numbers, which an Ingress host may not be: an IPv4 address, or what reads as one.
    pub static DOTTED_NUMBERS: Pattern = Pattern::new(
        r"^[0-9]+([.][0-9]+){3}$",
        "must be a DNS name, not an IP address",
    );

    /// The CEL rule of `ingress.host`: not [`DOTTED_NUMBERS`] (IPv6 fails the host pattern). The
    /// expression has no backslash, which a CEL string would need doubled.
    pub fn not_an_ip_rule() -> String {
        format!("!self.matches('{}')", DOTTED_NUMBERS.regex)
    }

    pub const MAX_PATH: usize = 1024;
    /// An HTTP path of an Ingress rule: absolute, no whitespace or controls, and none of
    /// `; { } $ "`, which some Ingress controllers paste into their configuration (an nginx
    /// `location` block) and so would let a path inject configuration.
    pub static PATH: Pattern = Pattern::new(
        r#"^/[^[:space:][:cntrl:];{}$"]*$"#,
        "must be an absolute path: start with '/', without whitespace or any of ; { } $ \"",
    );
}

/// Memcached rules.
pub mod memcached {
    pub const MAX_SIZE: i32 = 100;
    pub const MIN_MEMORY_MB: i32 = 1;
    /// The largest -m that still fits a 64 GiB node; beyond it memcached would be killed anyway.
    pub const MAX_MEMORY_MB: i32 = 65536;
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

/// Checks a string's length in characters (as the schema's `minLength`/`maxLength` count).
pub fn check_length(
    errors: &mut FieldErrors,
    path: impl std::fmt::Display,
    value: &str,
    min: usize,
    max: usize,
) {
    let n = value.chars().count();
    if n < min || n > max {
        errors.push(FieldError::invalid(
            path.to_string(),
            value,
            format!("must be {min}-{max} characters"),
        ));
    }
}

/// Checks a string against a pattern; an empty string needs no pattern to be refused.
pub fn check_pattern(
    errors: &mut FieldErrors,
    path: impl std::fmt::Display,
    value: &str,
    pattern: &Pattern,
) {
    if !pattern.is_match(value) {
        errors.push(FieldError::invalid(
            path.to_string(),
            value,
            pattern.message,
        ));
    }
}

/// Checks `value` as an object name: a DNS-1123 label or subdomain.
/// `path` is written only into an error.
pub fn check_name(
    errors: &mut FieldErrors,
    path: impl std::fmt::Display,
    value: &str,
    label: bool,
) {
    let (pattern, max) = if label {
        (&DNS1123_LABEL, MAX_LABEL)
    } else {
        (&DNS1123_SUBDOMAIN, MAX_SUBDOMAIN)
    };
    if value.is_empty() {
        errors.push(FieldError::required(path.to_string(), ""));
    } else if value.len() > max {
        errors.push(FieldError::invalid(
            path.to_string(),
            value,
            format!("must be no more than {max} characters"),
        ));
    } else {
        check_pattern(errors, path, value, pattern);
    }
}

/// Checks a container image reference as written.
pub fn check_image(errors: &mut FieldErrors, value: &str) {
    let n = value.chars().count();
    if n > MAX_IMAGE {
        errors.push(FieldError::invalid(
            "spec.image",
            value,
            format!("must be no more than {MAX_IMAGE} characters"),
        ));
    } else {
        check_pattern(errors, "spec.image", value, &IMAGE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pattern_compiles_and_is_anchored() {
        for p in [
            &DNS1123_LABEL,
            &DNS1123_SUBDOMAIN,
            &SECRET_KEY,
            &IMAGE,
            &QUANTITY,
            &scaler::CLOCK,
            &scaler::KIND,
            &scaler::API_VERSION,
            &welcome::EMAIL,
            &application::ENV_NAME,
            &application::HOST,
            &application::PATH,
            &application::DOTTED_NUMBERS,
        ] {
            assert!(Regex::new(p.regex).is_ok(), "{}", p.regex);
            assert!(
                p.regex.starts_with('^') && p.regex.ends_with('$'),
                "{}",
                p.regex
            );
        }
    }

    #[test]
    fn dns_names() {
        assert!(DNS1123_LABEL.is_match("web-1"));
        assert!(!DNS1123_LABEL.is_match("Web"));
        assert!(!DNS1123_LABEL.is_match("-a"));
        assert!(!DNS1123_LABEL.is_match("a.b"));
        assert!(DNS1123_SUBDOMAIN.is_match("a.b-c"));
        assert!(!DNS1123_SUBDOMAIN.is_match("a..b"));
        let mut errors = FieldErrors::new();
        check_name(&mut errors, "n", &"a".repeat(MAX_LABEL + 1), true);
        check_name(&mut errors, "n", &"a".repeat(MAX_LABEL), true);
        assert_eq!(errors.len(), 1, "{errors:?}");
    }

    #[test]
    fn emails() {
        for ok in ["a@b.io", "first.last+tag@sub.example.com"] {
            assert!(welcome::EMAIL.is_match(ok), "{ok}");
        }
        for bad in [
            "",
            "a",
            "a@",
            "@b.io",
            "a@b",
            "a b@c.io",
            "a@b..io",
            "a@-b.io",
            "a@b@c.io",
            "a\u{7}@b.io",
        ] {
            assert!(!welcome::EMAIL.is_match(bad), "{bad}");
        }
        assert!(!welcome::EMAIL.is_match(&format!("{}@b.io", "a".repeat(65))));
    }

    #[test]
    fn quantities() {
        for ok in ["1", "250m", "64Mi", "1.5", ".5", "1e3", "+2k", "-1"] {
            assert!(QUANTITY.is_match(ok), "{ok}");
        }
        for bad in ["", "lots", "1 Gi", "1GiB", "1.2.3", "e3"] {
            assert!(!QUANTITY.is_match(bad), "{bad}");
        }
    }

    #[test]
    fn images_and_clocks() {
        let digest = format!("sha256:{}", "0a".repeat(32));
        for ok in [
            "nginx".to_string(),
            "memcached:1.6.38-alpine".into(),
            "hashicorp/http-echo:1.0.0".into(),
            "localhost:5000/team/app_1:v1.2".into(),
            "Registry.Example.com/a/b:1".into(),
            format!("registry.example.com/a/b:1@{digest}"),
            format!("a/b@{digest}"),
        ] {
            assert!(IMAGE.is_match(&ok), "{ok:?}");
        }
        for bad in [
            "",
            "a b",
            "a\tb",
            " a",
            "a\u{0}",
            "Nginx",
            "a/B",
            "a:",
            "a:tag:x",
            "a/",
            "/a",
            "a//b",
            "a@sha256:00",
            "-a",
            "a:-x",
        ] {
            assert!(!IMAGE.is_match(bad), "{bad:?}");
        }
        assert!(scaler::CLOCK.is_match("23:59"));
        for bad in ["7:45", "24:00", "12:60", "ab:cd", "1200", "+1:00"] {
            assert!(!scaler::CLOCK.is_match(bad), "{bad}");
        }
        assert_eq!(
            scaler::time_of_day_rule(),
            "type(self) == int ? (self >= 0 && self <= 23) : self.matches('^([01][0-9]|2[0-3]):[0-5][0-9]$')"
        );
        for end in ["00:00", "23:59", "24:00"] {
            assert!(scaler::END_CLOCK.is_match(end), "{end}");
        }
        for bad in ["24:01", "25:00", "7:45", "24:0", "24"] {
            assert!(!scaler::END_CLOCK.is_match(bad), "{bad}");
        }
    }
}
