//! A memory budget for request bodies in flight, and the body limit.
//!
//! A review's body is held in memory while it is answered, and any pod can send one: the port
//! must stay open to the apiserver. Unbounded, eight concurrent 4 MiB bodies took the webhook
//! past its 256 MiB memory limit. So a body is read only with permits for its bytes from a
//! semaphore sized in bytes (`--request-body-budget`, [`DEFAULT_BUDGET`]): all of them up front by
//! its Content-Length, which the apiserver always sends, or chunk by chunk as a body without one
//! arrives. A body over [`MAX_BODY_BYTES`] is answered 413 and one the budget has no room for
//! 429 with `Retry-After: 1`, both before a byte of it is read; hyper then closes the connection
//! rather than read the rest, so nothing of the body stays in memory. client-go, the apiserver's
//! webhook client, waits `Retry-After` and sends a review answered 429 again, within the
//! webhook's timeout.
//!
//! An eighth of the budget is kept for small bodies (an eighth of that at most: 256 KiB by
//! default), which is what nearly every review the apiserver sends is: a flood of large bodies
//! takes the rest and gets 429s while ordinary reviews are still read at once. A small body that
//! finds the whole budget taken waits up to [`RESERVE_WAIT`] for room in the reserve.
//!
//! The budget counts bodies; parsing one holds at most about as much again (its strings) plus a
//! bounded number of values (`review::MAX_OBJECT_VALUES`), so the memory a flood can take is
//! about twice the budget.
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{FromRef, FromRequest, Request};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Largest accepted request body. The apiserver refuses a request body over 3 MiB (its
/// `MaxRequestBodyBytes`, also the bound of a patch's result), and etcd an object over 1.5 MiB
/// (`--max-request-bytes`). An UPDATE's AdmissionReview carries the object and the stored
/// oldObject, each at most 3 MiB as JSON, and the review's own fields (userInfo with its groups,
/// options) take far less than 1 MiB: 2 x 3 MiB + 1 MiB. A ConversionReview carries objects
/// read from etcd, 1.5 MiB each at most; a list converts a page of them at once (kubectl and
/// informers read 500 at a time), so this admits pages of thousands of ordinary Scalers, and a
/// larger page fails with 413 rather than the webhook with its memory limit.
pub const MAX_BODY_BYTES: usize = 7 * 1024 * 1024;

/// hyper's read buffer per connection (its `max_buf_size`), which holds a request head and reads
/// ahead into the body before the handler decides whether to read it at all. hyper's default,
/// 400 KiB, made 64 connections sending large bodies hold 25 MiB outside the budget; a request
/// head from the apiserver is under 2 KiB, and a longer head than this gets 431.
pub const READ_BUFFER_BYTES: usize = 16 * 1024;

/// Bodies larger than this are parsed (and a ConversionReview converted) on a blocking thread
/// ([`apart`]): reading JSON takes about 3 ms a megabyte, and on a runtime thread a 4 MiB body
/// would hold up every other connection's review for over 10 ms.
pub const APART_BYTES: usize = 64 * 1024;

/// Bytes of request bodies in flight by default: two bodies of [`MAX_BODY_BYTES`] beside the
/// reserve, within a memory limit of 64 MiB with the webhook's ~15 MiB at rest.
pub const DEFAULT_BUDGET: usize = 16 * 1024 * 1024;

/// The smallest and largest budget `--request-body-budget` takes (permits are counted in u32).
const MIN_BUDGET: usize = 1024 * 1024;
const MAX_BUDGET: usize = 1024 * 1024 * 1024;

/// How long a small body waits for room in the reserve before it is answered 429: long enough
/// for a burst of ordinary reviews to be read in turn, shorter than the second client-go would
/// wait after a 429.
pub const RESERVE_WAIT: Duration = Duration::from_millis(500);

/// Seconds a client is told to wait after a 429: bodies in flight are read within milliseconds,
/// and one second is the least `Retry-After` says.
const RETRY_AFTER_SECONDS: &str = "1";

/// Permits for request bodies, in bytes; cheap to clone (the semaphores are shared).
#[derive(Debug, Clone)]
pub struct Budget {
    /// Every body may take from it.
    shared: Arc<Semaphore>,
    /// Only small bodies may take from it.
    reserve: Arc<Semaphore>,
    /// The largest body that counts as small.
    small: usize,
    /// The largest body read at all.
    limit: usize,
    /// Both parts.
    total: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Self::new(DEFAULT_BUDGET)
    }
}

impl Budget {
    /// A budget of `bytes` (clamped to 1 MiB..=1 GiB), an eighth of it kept for small bodies.
    pub fn new(bytes: usize) -> Self {
        let bytes = bytes.clamp(MIN_BUDGET, MAX_BUDGET);
        let reserve = bytes / 8;
        let shared = bytes - reserve;
        Self {
            shared: Arc::new(Semaphore::new(shared)),
            reserve: Arc::new(Semaphore::new(reserve)),
            small: reserve / 8,
            limit: MAX_BODY_BYTES.min(shared),
            total: bytes,
        }
    }

    /// The largest body read: [`MAX_BODY_BYTES`], or less when the budget could not hold it.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The largest body that may take from the reserve.
    pub fn small(&self) -> usize {
        self.small
    }

    /// Bytes held by bodies being read or answered now.
    pub fn in_use(&self) -> usize {
        self.total - self.shared.available_permits() - self.reserve.available_permits()
    }

    /// Permits for a body of `bytes`: 413 over the limit; from the shared part if it has room,
    /// else, for a small body, from the reserve within [`RESERVE_WAIT`]; 429 otherwise.
    pub async fn admit(&self, bytes: usize) -> Result<Held, Refused> {
        if bytes > self.limit {
            return Err(Refused::TooLarge {
                bytes,
                limit: self.limit,
            });
        }
        let n = permits(bytes);
        if let Ok(permit) = self.shared.clone().try_acquire_many_owned(n) {
            return Ok(Held(Some(permit)));
        }
        if bytes <= self.small {
            let reserved = self.reserve.clone().acquire_many_owned(n);
            if let Ok(Ok(permit)) = tokio::time::timeout(RESERVE_WAIT, reserved).await {
                return Ok(Held(Some(permit)));
            }
        }
        Err(Refused::Busy { bytes })
    }

    /// `more` bytes beside those `held` already has, for a body without a Content-Length, from
    /// the shared part only (such a body may turn out large); nothing is waited for.
    pub fn grow(&self, held: &mut Held, more: usize) -> Result<(), Refused> {
        let had = held.bytes();
        let bytes = had + more;
        if bytes > self.limit {
            return Err(Refused::TooLarge {
                bytes,
                limit: self.limit,
            });
        }
        let permit = self
            .shared
            .clone()
            .try_acquire_many_owned(permits(more))
            .map_err(|_| Refused::Busy { bytes })?;
        match &mut held.0 {
            Some(p) => p.merge(permit),
            None => held.0 = Some(permit),
        }
        Ok(())
    }

    /// Reads `request`'s body within the budget.
    pub async fn read(&self, request: Request) -> Result<Received, Refused> {
        let body = request.into_body();
        match HttpBody::size_hint(&body).exact() {
            Some(length) => {
                let length = usize::try_from(length).unwrap_or(usize::MAX);
                let held = self.admit(length).await?;
                let mut bytes = Vec::with_capacity(length);
                let mut stream = body.into_data_stream();
                while let Some(chunk) = stream.next().await {
                    let chunk = chunk.map_err(|e| Refused::Unreadable(e.to_string()))?;
                    // hyper ends a body at its Content-Length; a body of another kind may not.
                    if bytes.len() + chunk.len() > length {
                        return Err(Refused::Unreadable(format!(
                            "more than the {length} bytes its length announced"
                        )));
                    }
                    bytes.extend_from_slice(&chunk);
                }
                Ok(Received {
                    bytes: Bytes::from(bytes),
                    _held: held,
                })
            }
            None => self.read_unsized(body).await,
        }
    }

    /// A body without a Content-Length: permits for what the buffer holds, taken as it grows.
    async fn read_unsized(&self, body: Body) -> Result<Received, Refused> {
        let mut held = Held(None);
        let mut bytes = Vec::new();
        let mut stream = body.into_data_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| Refused::Unreadable(e.to_string()))?;
            let needed = bytes.len() + chunk.len();
            if needed > self.limit {
                return Err(Refused::TooLarge {
                    bytes: needed,
                    limit: self.limit,
                });
            }
            if needed > held.bytes() {
                // Grow as Vec would, but within the limit, and pay for the room first.
                let room = needed.max(held.bytes() * 2).min(self.limit);
                let more = room - held.bytes();
                self.grow(&mut held, more)?;
                bytes.reserve_exact(room - bytes.len());
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(Received {
            bytes: Bytes::from(bytes),
            _held: held,
        })
    }
}

/// `work` on `body`: at once for a body up to [`APART_BYTES`], on a blocking thread for a larger
/// one, so that the runtime's threads go on answering small reviews meanwhile.
pub async fn apart<T: Send + 'static>(
    body: &Received,
    work: impl FnOnce(&[u8]) -> T + Send + 'static,
) -> T {
    if body.len() <= APART_BYTES {
        return work(body);
    }
    let bytes = body.bytes.clone();
    match tokio::task::spawn_blocking(move || work(&bytes)).await {
        Ok(done) => done,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Cancelled: only when the runtime shuts down, which drops this request too.
        Err(_) => std::future::pending().await,
    }
}

/// Permits for `bytes`; the budget is at most 1 GiB, so a body it admits fits in u32.
fn permits(bytes: usize) -> u32 {
    u32::try_from(bytes).unwrap_or(u32::MAX)
}

/// Permits held for one body; given back when dropped.
#[derive(Debug)]
pub struct Held(Option<OwnedSemaphorePermit>);

impl Held {
    /// The bytes it holds permits for.
    pub fn bytes(&self) -> usize {
        self.0.as_ref().map_or(0, OwnedSemaphorePermit::num_permits)
    }
}

/// A request body read within the budget; its permits are held until it is dropped.
#[derive(Debug)]
pub struct Received {
    pub bytes: Bytes,
    _held: Held,
}

impl std::ops::Deref for Received {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl<S> FromRequest<S> for Received
where
    S: Send + Sync,
    Budget: FromRef<S>,
{
    type Rejection = Refused;

    async fn from_request(request: Request, state: &S) -> Result<Self, Refused> {
        Budget::from_ref(state).read(request).await
    }
}

/// Why a body is not read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refused {
    #[error(
        "the request body of {bytes} bytes is over the limit of {limit} bytes (two objects at the apiserver's 3 MiB request limit and the review around them)"
    )]
    TooLarge { bytes: usize, limit: usize },
    #[error(
        "the webhook is reading other request bodies up to its memory budget (--request-body-budget); this one of {bytes} bytes was not read, retry"
    )]
    Busy { bytes: usize },
    #[error("reading the request body: {0}")]
    Unreadable(String),
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        tracing::debug!(reason = %self, "request body refused");
        match self {
            Refused::TooLarge { .. } => {
                (StatusCode::PAYLOAD_TOO_LARGE, self.to_string()).into_response()
            }
            Refused::Busy { .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, RETRY_AFTER_SECONDS)],
                self.to_string(),
            )
                .into_response(),
            Refused::Unreadable(_) => (StatusCode::BAD_REQUEST, self.to_string()).into_response(),
        }
    }
}

/// Parses a byte count as Kubernetes writes quantities: `16777216`, `16384Ki`, `16Mi`, `1Gi`;
/// between 1Mi and 1Gi.
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let scale: usize = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        other => {
            return Err(format!(
                "unit {other:?}: write bytes as a number with Ki, Mi or Gi, e.g. 16Mi"
            ))
        }
    };
    let number: usize = digits
        .parse()
        .map_err(|_| format!("{text:?} is no byte count, e.g. 16Mi"))?;
    let bytes = number
        .checked_mul(scale)
        .filter(|b| (MIN_BUDGET..=MAX_BUDGET).contains(b))
        .ok_or_else(|| format!("{text} is not between 1Mi and 1Gi"))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1024 * 1024;

    #[test]
    fn the_docs_state_the_body_limit_of_the_code() {
        let page = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/webhook.md");
        let text = std::fs::read_to_string(page).unwrap().replace('\n', " ");
        let said = format!("over {} MiB", MAX_BODY_BYTES / MIB);
        assert_eq!(
            MAX_BODY_BYTES % MIB,
            0,
            "a whole number of MiB, as the docs say it"
        );
        assert!(text.contains(&said), "docs/webhook.md must say {said:?}");
    }

    #[test]
    fn byte_counts_read_as_quantities_and_a_bad_one_says_why() {
        assert_eq!(parse_bytes("16Mi"), Ok(16 * MIB));
        assert_eq!(parse_bytes("16384Ki"), Ok(16 * MIB));
        assert_eq!(parse_bytes("1Gi"), Ok(1024 * MIB));
        assert_eq!(parse_bytes("2097152"), Ok(2 * MIB));
        for (bad, says) in [
            ("16MB", "unit \"MB\""),
            ("Mi", "no byte count"),
            ("512Ki", "not between 1Mi and 1Gi"),
            ("2Gi", "not between 1Mi and 1Gi"),
            ("99999999999999999999Gi", "no byte count"),
        ] {
            let e = parse_bytes(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn the_flag_takes_quantities_and_names_itself_when_wrong() {
        use clap::Parser as _;
        let args = |flag: &str| crate::args::Args::try_parse_from(["kubesteer-webhook", flag]);
        assert_eq!(
            args("--addr=127.0.0.1:1").unwrap().request_body_budget,
            DEFAULT_BUDGET
        );
        assert_eq!(
            args("--request-body-budget=32Mi")
                .unwrap()
                .request_body_budget,
            32 * MIB
        );
        let e = args("--request-body-budget=32MB").unwrap_err();
        assert!(e.to_string().contains("--request-body-budget"), "{e}");
    }

    #[test]
    fn the_default_budget_holds_two_bodies_at_the_limit_beside_the_reserve() {
        let budget = Budget::default();
        assert_eq!(budget.limit(), MAX_BODY_BYTES);
        assert_eq!(budget.shared.available_permits(), 14 * MIB);
        assert_eq!(budget.reserve.available_permits(), 2 * MIB);
        assert_eq!(budget.small(), 256 * 1024);
        // A budget too small for a body at the limit lowers the limit instead of answering 429
        // to that body forever.
        let budget = Budget::new(4 * MIB);
        assert_eq!(budget.limit(), 3 * MIB + MIB / 2);
    }

    #[tokio::test]
    async fn large_bodies_take_the_shared_part_and_small_ones_also_the_reserve() {
        let budget = Budget::new(16 * MIB);
        let first = budget.admit(7 * MIB).await.unwrap();
        let second = budget.admit(7 * MIB).await.unwrap();
        assert_eq!(
            budget.admit(MIB).await.unwrap_err(),
            Refused::Busy { bytes: MIB }
        );
        // The reserve still reads ordinary reviews.
        let small = budget.admit(200 * 1024).await.unwrap();
        assert_eq!(small.bytes(), 200 * 1024);
        drop((first, small));
        assert!(budget.admit(7 * MIB).await.is_ok(), "permits come back");
        drop(second);
        assert_eq!(
            budget.admit(MAX_BODY_BYTES + 1).await.unwrap_err(),
            Refused::TooLarge {
                bytes: MAX_BODY_BYTES + 1,
                limit: MAX_BODY_BYTES
            }
        );
    }

    #[tokio::test]
    async fn a_small_body_waits_for_the_reserve_then_gets_429() {
        let budget = Budget::new(16 * MIB);
        let _shared = (budget.admit(7 * MIB).await, budget.admit(7 * MIB).await);
        let reserve: Vec<_> = futures::future::join_all((0..8).map(|_| budget.admit(256 * 1024)))
            .await
            .into_iter()
            .collect::<Result<_, _>>()
            .unwrap();
        let started = std::time::Instant::now();
        assert_eq!(
            budget.admit(1024).await.unwrap_err(),
            Refused::Busy { bytes: 1024 }
        );
        assert!(started.elapsed() >= RESERVE_WAIT);
        // Room made while it waits lets it in at once.
        let started = std::time::Instant::now();
        let waiting = tokio::spawn({
            let budget = budget.clone();
            async move { budget.admit(1024).await.map(|h| h.bytes()) }
        });
        // On this one-thread runtime the spawned admit runs up to its wait here.
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(reserve);
        assert_eq!(waiting.await.unwrap(), Ok(1024));
        assert!(started.elapsed() < RESERVE_WAIT);
    }

    #[test]
    fn growing_pays_for_what_is_added_and_stops_at_the_limit() {
        let budget = Budget::new(16 * MIB);
        let mut held = Held(None);
        budget.grow(&mut held, MIB).unwrap();
        budget.grow(&mut held, 5 * MIB).unwrap();
        assert_eq!(held.bytes(), 6 * MIB);
        assert_eq!(
            budget.grow(&mut held, 2 * MIB).unwrap_err(),
            Refused::TooLarge {
                bytes: 8 * MIB,
                limit: MAX_BODY_BYTES
            }
        );
        let mut other = Held(None);
        budget.grow(&mut other, 7 * MIB).unwrap();
        let mut third = Held(None);
        assert_eq!(
            budget.grow(&mut third, 2 * MIB).unwrap_err(),
            Refused::Busy { bytes: 2 * MIB }
        );
        drop(held);
        budget.grow(&mut third, 2 * MIB).unwrap();
    }
}
