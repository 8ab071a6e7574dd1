//! `/metrics` in the format the scraper asks for. prometheus-client writes OpenMetrics, which
//! Prometheus prefers; a client that asks for the Prometheus text format 0.0.4 alone (older
//! agents, `promtool check metrics`) gets that, as client_golang's handler does.
use axum::body::Body;
use axum::http::header::{HeaderMap, HeaderValue, ACCEPT, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};

/// The prefix of the controller's metric names (`kubesteer_...`).
pub const PREFIX: &str = "kubesteer";

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

/// Like [`respond`], for an exposition written in `parts` (each whole lines) as the body is
/// sent, so that a large one is never held whole: each part is made when the connection takes
/// the one before.
pub fn respond_parts<E>(
    headers: &HeaderMap,
    parts: impl Iterator<Item = Result<String, E>> + Send + 'static,
) -> Response
where
    E: std::error::Error + Send + Sync + 'static,
{
    let (content_type, mut text) = match wants_text(headers) {
        true => (TEXT, Some(ToText::default())),
        false => (OPENMETRICS, None),
    };
    let parts = parts.map(move |part| {
        part.map(|part| match text.as_mut() {
            Some(text) => text.convert(&part),
            None => part,
        })
    });
    (
        [(CONTENT_TYPE, HeaderValue::from_static(content_type))],
        Body::from_stream(futures::stream::iter(parts)),
    )
        .into_response()
}

/// OpenMetrics as prometheus-client writes it, in the Prometheus text format 0.0.4: a counter's
/// HELP and TYPE name its `_total` samples, `# UNIT` and `# EOF` go, and so do `_created`
/// samples, which the text format has no type for. (prometheus-client writes HELP unescaped,
/// so it is taken as it is.)
pub fn to_text(openmetrics: &str) -> String {
    ToText::default().convert(openmetrics)
}

/// [`to_text`] of an exposition that comes in parts of whole lines: what a part says of the
/// families goes on to the next.
#[derive(Debug, Default)]
pub struct ToText {
    /// The family whose samples are a counter's.
    counter: Option<String>,
    /// A HELP line held until the TYPE line says whether the family is a counter.
    help: Option<(String, String)>,
}

impl ToText {
    /// The next part, converted.
    pub fn convert(&mut self, openmetrics: &str) -> String {
        let mut out = String::with_capacity(openmetrics.len());
        for line in openmetrics.lines() {
            if line == "# EOF" || line.starts_with("# UNIT ") {
                continue;
            }
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
                self.help = Some((name.to_string(), text.to_string()));
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
                self.counter =
                    (kind == "counter").then(|| rest.split(' ').next().unwrap_or(rest).to_string());
                if let Some((_, text)) = self.help.take() {
                    out.push_str(&format!("# HELP {name} {text}\n"));
                }
                out.push_str(&format!("# TYPE {name} {kind}\n"));
                continue;
            }
            if let Some((name, text)) = self.help.take() {
                out.push_str(&format!("# HELP {name} {text}\n"));
            }
            if let Some(family) = &self.counter {
                let sample = line.split(['{', ' ']).next().unwrap_or_default();
                if sample.strip_suffix("_created") == Some(family.as_str()) {
                    continue;
                }
            }
            out.push_str(line);
            out.push('\n');
        }
        out
    }
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
    fn an_exposition_in_parts_converts_as_it_would_whole() {
        let whole = to_text(OPENMETRICS_TEXT);
        // Cut at every line: a counter's HELP, TYPE and samples each in a part of their own.
        let mut text = ToText::default();
        let parts: String = OPENMETRICS_TEXT
            .split_inclusive('\n')
            .map(|line| text.convert(line))
            .collect();
        assert_eq!(parts, whole);
    }

    #[tokio::test]
    async fn parts_are_sent_one_after_another_in_the_format_asked_for() {
        let parts = || {
            let lines: Vec<Result<String, std::fmt::Error>> = OPENMETRICS_TEXT
                .split_inclusive('\n')
                .map(|p| Ok(p.to_string()))
                .collect();
            lines.into_iter()
        };
        let body = |response: Response| async move {
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            String::from_utf8(bytes.to_vec()).unwrap()
        };
        let mut text = HeaderMap::new();
        text.insert(ACCEPT, HeaderValue::from_static("text/plain;version=0.0.4"));
        assert_eq!(
            body(respond_parts(&text, parts())).await,
            to_text(OPENMETRICS_TEXT)
        );
        let response = respond_parts(&HeaderMap::new(), parts());
        assert_eq!(response.headers()[CONTENT_TYPE], OPENMETRICS);
        assert_eq!(body(response).await, OPENMETRICS_TEXT);
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
