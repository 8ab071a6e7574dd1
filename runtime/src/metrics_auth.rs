//! Who may read /metrics under `--metrics-auth`, as controller-runtime's secure metrics decide:
//! the apiserver authenticates the request's bearer token (TokenReview), then authorizes its
//! user for `get` on the non-resource path /metrics (SubjectAccessReview).
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};
use tracing::warn;

use crate::answer_cache::{AnswerCache, Verdict};

/// How long a token's decision is reused, whatever it is: a revoked token or binding stops
/// working within this, and a scraper every 15-30 s costs at most two reviews per scrape.
const DECISION_TTL: Duration = Duration::from_secs(10);

/// Tokens whose decision is remembered at once: scrapers need a handful, and a flood of made-up
/// tokens cannot grow memory past this.
const MAX_TOKENS: u64 = 1024;

/// The path and verb that a reader of the metrics must be allowed, as in kubebuilder's
/// `metrics-reader` ClusterRole.
const PATH: &str = "/metrics";
const VERB: &str = "get";

/// The apiserver's answer about one token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    /// The token is valid, but its user may not `get` /metrics.
    Forbidden,
    /// The apiserver does not accept the token.
    Unauthenticated,
}

impl Verdict for Decision {
    fn grants(&self) -> bool {
        *self == Decision::Allowed
    }
}

/// Asks the apiserver about tokens, and remembers each answer briefly.
#[derive(Clone)]
pub struct Authorizer {
    client: Client,
    // Keyed by the token's SHA-256, so the tokens themselves are not kept.
    decisions: AnswerCache<[u8; 32], Decision>,
}

impl Authorizer {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            decisions: AnswerCache::new(MAX_TOKENS, DECISION_TTL, DECISION_TTL),
        }
    }

    /// The decision for `token`; concurrent requests with one token share one review.
    pub async fn decide(&self, token: &str) -> Result<Decision, Arc<kube::Error>> {
        let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        let mut key = [0u8; 32];
        key.copy_from_slice(digest.as_ref());
        self.decisions
            .get_or_ask(key, review(&self.client, token))
            .await
    }
}

async fn review(client: &Client, token: &str) -> Result<Decision, kube::Error> {
    let tokens: Api<TokenReview> = Api::all(client.clone());
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_string()),
            audiences: None,
        },
        ..Default::default()
    };
    let status = tokens.create(&PostParams::default(), &review).await?.status;
    let Some(user) = status
        .filter(|s| s.authenticated == Some(true))
        .and_then(|s| s.user)
    else {
        return Ok(Decision::Unauthenticated);
    };
    let access: Api<SubjectAccessReview> = Api::all(client.clone());
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username,
            uid: user.uid,
            groups: user.groups,
            extra: user.extra,
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(PATH.to_string()),
                verb: Some(VERB.to_string()),
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let allowed = access
        .create(&PostParams::default(), &review)
        .await?
        .status
        .is_some_and(|s| s.allowed);
    Ok(if allowed {
        Decision::Allowed
    } else {
        Decision::Forbidden
    })
}

/// Why a request for /metrics was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No bearer token, or one the apiserver does not accept.
    Unauthenticated,
    Forbidden,
    /// The apiserver could not be asked.
    Unavailable,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::Unauthenticated => (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"))],
                "Unauthorized\n",
            )
                .into_response(),
            Refusal::Forbidden => (StatusCode::FORBIDDEN, "Forbidden\n").into_response(),
            Refusal::Unavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "cannot review the token now\n",
            )
                .into_response(),
        }
    }
}

/// The bearer token of `Authorization: Bearer <token>`, if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Middleware: passes the request on only when its bearer token may `get` /metrics.
pub async fn require(
    State(authorizer): State<Authorizer>,
    request: Request,
    next: Next,
) -> Result<Response, Refusal> {
    let token = bearer(request.headers())
        .ok_or(Refusal::Unauthenticated)?
        .to_string();
    match authorizer.decide(&token).await {
        Ok(Decision::Allowed) => Ok(next.run(request).await),
        Ok(Decision::Forbidden) => Err(Refusal::Forbidden),
        Ok(Decision::Unauthenticated) => Err(Refusal::Unauthenticated),
        Err(e) => {
            warn!(error = %e, "cannot review the bearer token of a /metrics request");
            Err(Refusal::Unavailable)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_read_from_the_authorization_header() {
        let with = |value: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
            h
        };
        assert_eq!(bearer(&with("Bearer abc")), Some("abc"));
        assert_eq!(bearer(&with("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(&with("Basic abc")), None);
        assert_eq!(bearer(&with("Bearer ")), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }
}
