//! `/metrics` in the format the scraper asks for. prometheus-client writes OpenMetrics, which
//! Prometheus prefers; a client that asks for the Prometheus text format 0.0.4 alone (older
//! agents, `promtool check metrics`) gets that, as client_golang's handler does.
use axum::http::header::{HeaderMap, HeaderValue, ACCEPT, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};

pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether the request's Accept header asks for the text format and not for OpenMetrics.
pub fn wants_text(headers: &HeaderMap) -> bool {
    let accept = headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    accept.contains("text/plain") && !accept.contains("application/openmetrics-text")
}

/// The response for `openmetrics` (prometheus-client's encoding), in the format `headers` ask for.
pub fn respond(headers: &HeaderMap, openmetrics: String) -> Response {
    let (content_type, body) = match wants_text(headers) {
        true => (TEXT, to_text(&openmetrics)),
        false => (OPENMETRICS, openmetrics),
    };
    (
        [(CONTENT_TYPE, HeaderValue::from_static(content_type))],
        body,
    )
        .into_response()
}

/// OpenMetrics as prometheus-client writes it, in the Prometheus text format 0.0.4: a counter's
/// HELP and TYPE name its `_total` samples, `# UNIT` and `# EOF` go, and so do `_created`
/// samples, which the text format has no type for. (prometheus-client writes HELP unescaped,
/// so it is taken as it is.)
pub fn to_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut counter: Option<&str> = None;
    let mut help: Option<(&str, &str)> = None;
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            // Held until the TYPE line says whether the family is a counter.
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (name, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "gaugehistogram" | "stateset" | "unknown" => (name.to_string(), "untyped"),
                other => (name.to_string(), other),
            };
            counter = (kind == "counter").then_some(rest.split(' ').next().unwrap_or(rest));
            if let Some((_, text)) = help.take() {
                out.push_str(&format!("# HELP {name} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name} {kind}\n"));
            continue;
        }
        if let Some((name, text)) = help.take() {
            out.push_str(&format!("# HELP {name} {text}\n"));
        }
        if let Some(family) = counter {
            let sample = line.split(['{', ' ']).next().unwrap_or_default();
            if sample == format!("{family}_created") {
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPENMETRICS_TEXT: &str = r#"# HELP kubesteer_reconciles Reconciliations "started", per kind.
# TYPE kubesteer_reconciles counter
kubesteer_reconciles_total{kind="Scaler"} 3
kubesteer_reconciles_created{kind="Scaler"} 1700000000.0
# HELP kubesteer_leading 1 while leading.
# TYPE kubesteer_leading gauge
kubesteer_leading 1
# HELP kubesteer_lateness_seconds Lateness.
# TYPE kubesteer_lateness_seconds histogram
# UNIT kubesteer_lateness_seconds seconds
kubesteer_lateness_seconds_sum 0.5
kubesteer_lateness_seconds_count 1
kubesteer_lateness_seconds_bucket{le="1.0"} 1
kubesteer_lateness_seconds_bucket{le="+Inf"} 1
# EOF
"#;

    #[test]
    fn counters_are_named_by_their_samples_and_openmetrics_only_lines_go() {
        assert_eq!(
            to_text(OPENMETRICS_TEXT),
            r#"# HELP kubesteer_reconciles_total Reconciliations "started", per kind.
# TYPE kubesteer_reconciles_total counter
kubesteer_reconciles_total{kind="Scaler"} 3
# HELP kubesteer_leading 1 while leading.
# TYPE kubesteer_leading gauge
kubesteer_leading 1
# HELP kubesteer_lateness_seconds Lateness.
# TYPE kubesteer_lateness_seconds histogram
kubesteer_lateness_seconds_sum 0.5
kubesteer_lateness_seconds_count 1
kubesteer_lateness_seconds_bucket{le="1.0"} 1
kubesteer_lateness_seconds_bucket{le="+Inf"} 1
"#
        );
    }

    #[test]
    fn text_only_when_asked_for_without_openmetrics() {
        let accept = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(ACCEPT, HeaderValue::from_str(v).unwrap());
            h
        };
        assert!(!wants_text(&HeaderMap::new()));
        assert!(wants_text(&accept("text/plain;version=0.0.4")));
        assert!(!wants_text(&accept("*/*")));
        // Prometheus offers both and prefers OpenMetrics.
        assert!(!wants_text(&accept(
            "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4"
        )));
    }
}
