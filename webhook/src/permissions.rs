//! Permission checks for a request's author, with a short cache of answers
//! ([`kubesteer_runtime::answer_cache`], the one the controller's /metrics guard uses too): grants
//! for [`TTL`], denials for a fifth of it, and one SubjectAccessReview at a time for the same
//! question, so that a burst of identical reviews (a forged `userInfo` among them) costs the
//! apiserver one check, not one per review. SubjectAccessReviews actually sent are bounded by a
//! token bucket ([`SarLimit`]), so a flood of distinct questions spends at most that share of
//! the webhook's API priority: a check over the bound waits at most [`MAX_WAIT`] for its turn,
//! and otherwise fails as "could not check" (a denial naming the reason), never queueing.
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::UserInfo;
use kubesteer_api::access::Access;
use kubesteer_runtime::answer_cache::AnswerCache;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::cluster::Cluster;
use crate::metrics::SarLabels;

/// How long a granted permission is trusted without asking again. In the last fifth of it, one
/// request asks again while the others still use the grant, so that a grant in steady use never
/// expires under load (where every request in flight would wait for a SubjectAccessReview of
/// its own) and never outlives its TTL either.
pub const TTL: Duration = Duration::from_secs(10);
/// A denial is kept for this share of a grant's TTL, so a new grant counts within it.
const DENIAL_SHARE: u32 = 5;
/// Most answers kept; past it the least recently used is dropped.
pub const CAPACITY: usize = 4096;
/// The longest a check waits for its turn under the [`SarLimit`]. The apiserver gives a whole
/// review `timeoutSeconds` (5 s in the chart), a review's checks run at once, and the check
/// itself takes milliseconds; 1 s leaves most of that for the rest of the review.
pub const MAX_WAIT: Duration = Duration::from_secs(1);

/// SubjectAccessReviews per second and burst (`--subject-access-review-qps` and `-burst`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SarLimit {
    pub per_second: u32,
    pub burst: u32,
}

impl Default for SarLimit {
    /// 50/s covers the apiserver's own admission traffic (a check is asked once per TTL per
    /// author and question); a burst of 100 lets one review of a 50-target Scaler with HPA
    /// cooperation (its 100 checks) through at once.
    fn default() -> Self {
        Self {
            per_second: 50,
            burst: 100,
        }
    }
}

/// A token bucket of SubjectAccessReviews, read on tokio's clock. A check that finds no token
/// reserves the next one (the count goes below zero) and sleeps until it is due, so checks are
/// served in order and at most `burst + per_second * t` are sent in any `t`.
struct Bucket {
    limit: SarLimit,
    state: Mutex<(f64, tokio::time::Instant)>,
}

impl Bucket {
    fn new(limit: SarLimit) -> Self {
        let limit = SarLimit {
            per_second: limit.per_second.max(1),
            burst: limit.burst.max(1),
        };
        Self {
            limit,
            state: Mutex::new((f64::from(limit.burst), tokio::time::Instant::now())),
        }
    }

    /// A token now (no wait) or within [`MAX_WAIT`] (the wait); None, taking nothing, when the
    /// next free token is further away than that.
    fn reserve(&self) -> Option<Duration> {
        let (rate, burst) = (
            f64::from(self.limit.per_second),
            f64::from(self.limit.burst),
        );
        let now = tokio::time::Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, at) = &mut *state;
        if now > *at {
            *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * rate).min(burst);
            *at = now;
        }
        let wait = Duration::from_secs_f64((1.0 - *tokens).max(0.0) / rate);
        if wait > MAX_WAIT {
            return None;
        }
        *tokens -= 1.0;
        Some(wait)
    }

    /// A reserved token not used (its check was dropped while waiting).
    fn give_back(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.0 = (state.0 + 1.0).min(f64::from(self.limit.burst));
    }

    /// The error of a check refused by the bound.
    fn refusal(&self) -> String {
        format!(
            "the webhook's bound of {} SubjectAccessReviews per second (burst {}) is reached; try again",
            self.limit.per_second, self.limit.burst
        )
    }
}

/// A reserved token, given back unless [`Reserved::used`] (a check dropped while it waited).
struct Reserved<'a>(Option<&'a Bucket>);

impl Reserved<'_> {
    fn used(mut self) {
        self.0 = None;
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        if let Some(bucket) = self.0 {
            bucket.give_back();
        }
    }
}

/// Everything a SubjectAccessReview is asked with: the whole identity and the attributes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    user: Option<String>,
    uid: Option<String>,
    groups: Option<Vec<String>>,
    extra: Option<BTreeMap<String, Vec<String>>>,
    access: Access,
}

/// Answers by identity and permission.
pub struct Permissions {
    answers: AnswerCache<Key, bool>,
    /// The bound on SubjectAccessReviews sent.
    bucket: Bucket,
    /// SubjectAccessReviews sent and refused by the bound (the metrics' family once
    /// [`Permissions::counted`]).
    reviews: Family<SarLabels, Counter>,
}

impl Default for Permissions {
    fn default() -> Self {
        Self::new(TTL, CAPACITY)
    }
}

impl Permissions {
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        Self {
            answers: AnswerCache::new(capacity as u64, ttl, ttl / DENIAL_SHARE),
            bucket: Bucket::new(SarLimit::default()),
            reviews: Family::default(),
        }
    }

    /// Bounds SubjectAccessReviews by `limit` from now on, with a full burst.
    pub fn set_limit(&mut self, limit: SarLimit) {
        self.bucket = Bucket::new(limit);
    }

    /// The same cache counting SubjectAccessReviews in `reviews`
    /// (`kubesteer_webhook_subject_access_reviews_total`).
    pub fn counted(mut self, reviews: Family<SarLabels, Counter>) -> Self {
        self.reviews = reviews;
        self
    }

    /// The bound on SubjectAccessReviews.
    pub fn limit(&self) -> SarLimit {
        self.bucket.limit
    }

    /// Asks `cluster` within the bound: waits for a token up to [`MAX_WAIT`], or fails.
    async fn ask<C: Cluster>(
        &self,
        cluster: &C,
        user: &UserInfo,
        access: &Access,
    ) -> Result<bool, String> {
        let Some(wait) = self.bucket.reserve() else {
            self.reviews.get_or_create(&SarLabels::RATE_LIMITED).inc();
            return Err(self.bucket.refusal());
        };
        let reserved = Reserved(Some(&self.bucket));
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        reserved.used();
        self.reviews.get_or_create(&SarLabels::SENT).inc();
        cluster.permitted(user, access).await
    }

    /// Whether `user` holds `access`. A grant is kept for the TTL (asked again in its last
    /// fifth, standing on an error), a denial for a fifth of it (a new grant counts within
    /// that), errors not at all.
    pub async fn check<C: Cluster>(
        &self,
        cluster: &C,
        user: &UserInfo,
        access: &Access,
    ) -> Result<bool, String> {
        let key = Key {
            user: user.username.clone(),
            uid: user.uid.clone(),
            groups: user.groups.clone(),
            extra: user.extra.clone(),
            access: access.clone(),
        };
        self.answers
            .get_or_ask(key, self.ask(cluster, user, access))
            .await
            .map_err(Arc::unwrap_or_clone)
    }

    /// Number of answers held, for tests.
    pub async fn len(&self) -> usize {
        self.answers.len().await as usize
    }

    pub async fn is_empty(&self) -> bool {
        self.len().await == 0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use kubesteer_runtime::scale::Mapping;
    use tokio::time::Instant as TokioInstant;

    use super::*;

    /// Grants everything, at once, and notes when each SubjectAccessReview was sent.
    #[derive(Default)]
    struct Granting {
        sent: Mutex<Vec<TokioInstant>>,
        asked: AtomicUsize,
    }

    impl Granting {
        fn sent(&self) -> Vec<TokioInstant> {
            self.sent.lock().unwrap().clone()
        }
    }

    impl Cluster for Granting {
        async fn permitted(&self, _: &UserInfo, _: &Access) -> Result<bool, String> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            self.sent.lock().unwrap().push(TokioInstant::now());
            Ok(true)
        }
        async fn resolve(&self, _: &str, _: &str) -> Result<Mapping, String> {
            Err("not asked in these tests".into())
        }
    }

    fn forged() -> UserInfo {
        UserInfo {
            username: Some("system:admin".into()),
            groups: Some(vec!["system:masters".into()]),
            ..Default::default()
        }
    }

    async fn ask(
        permissions: &Permissions,
        cluster: &Granting,
        name: &str,
    ) -> Result<bool, String> {
        let access = Access::scale_deployment("team", name);
        permissions.check(cluster, &forged(), &access).await
    }

    fn count(reviews: &Family<SarLabels, Counter>, labels: &SarLabels) -> u64 {
        reviews.get_or_create(labels).get()
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_of_distinct_questions_sends_at_most_burst_plus_rate_times_t() {
        let limit = SarLimit {
            per_second: 50,
            burst: 100,
        };
        let reviews = Family::<SarLabels, Counter>::default();
        let mut permissions = Permissions::default().counted(reviews.clone());
        permissions.set_limit(limit);
        let permissions = Arc::new(permissions);
        let cluster = Arc::new(Granting::default());
        let user = forged();
        // One question answered before the flood: asked again during it, it costs nothing.
        let cached = Access::scale_deployment("team", "web");
        assert_eq!(permissions.check(&*cluster, &user, &cached).await, Ok(true));
        let start = TokioInstant::now();

        // 5 s of 1,000 new questions a second, in waves of 100 every 100 ms.
        let mut checks = Vec::new();
        for wave in 0..50 {
            for i in 0..100 {
                let (permissions, cluster, user) =
                    (permissions.clone(), cluster.clone(), user.clone());
                let access = Access::scale_deployment("team", &format!("w{wave}-{i}"));
                checks.push(tokio::spawn(async move {
                    let asked = TokioInstant::now();
                    let answer = permissions.check(&*cluster, &user, &access).await;
                    (answer, asked.elapsed())
                }));
            }
            let before = cluster.asked.load(Ordering::SeqCst);
            for _ in 0..10 {
                assert_eq!(permissions.check(&*cluster, &user, &cached).await, Ok(true));
            }
            assert_eq!(
                cluster.asked.load(Ordering::SeqCst),
                before,
                "a cached answer sends no SubjectAccessReview, however empty the bucket"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut refused = 0;
        for check in checks {
            let (answer, waited) = check.await.unwrap();
            assert!(waited <= MAX_WAIT, "a check waited {waited:?}");
            match answer {
                Ok(granted) => assert!(granted),
                Err(e) => {
                    assert_eq!(
                        e,
                        "the webhook's bound of 50 SubjectAccessReviews per second (burst 100) is reached; try again"
                    );
                    refused += 1;
                }
            }
        }

        // The flood's reviews (the first one was before it), in every interval of every length.
        let sent = &cluster.sent()[1..];
        let bound =
            |t: Duration| f64::from(limit.burst) + f64::from(limit.per_second) * t.as_secs_f64();
        for (i, from) in sent.iter().enumerate() {
            for (n, to) in sent[i..].iter().enumerate() {
                let t = to.duration_since(*from);
                assert!(
                    (n + 1) as f64 <= bound(t) + 1e-6,
                    "{} reviews sent within {t:?}, over the bound of {}",
                    n + 1,
                    bound(t)
                );
            }
        }
        let elapsed = sent.last().unwrap().duration_since(start);
        assert!(
            sent.len() as f64 >= bound(elapsed) - 1.0,
            "the bound is used, not starved: {} sent in {elapsed:?}",
            sent.len()
        );
        assert_eq!(sent.len() + refused, 5_000, "every check sent or refused");
        assert_eq!(count(&reviews, &SarLabels::SENT), 1 + sent.len() as u64);
        assert_eq!(count(&reviews, &SarLabels::RATE_LIMITED), refused as u64);
    }

    #[tokio::test(start_paused = true)]
    async fn a_check_over_the_bound_waits_its_turn_when_it_is_near_and_fails_at_once_when_not() {
        let mut permissions = Permissions::default();
        permissions.set_limit(SarLimit {
            per_second: 2,
            burst: 1,
        });
        let cluster = Granting::default();
        let user = forged();
        let ask = |name: &'static str| {
            let (permissions, cluster, user) = (&permissions, &cluster, &user);
            async move {
                let at = TokioInstant::now();
                let answer = permissions
                    .check(cluster, user, &Access::scale_deployment("team", name))
                    .await;
                (answer, at.elapsed())
            }
        };
        assert_eq!(ask("a").await, (Ok(true), Duration::ZERO));
        // The next token is due in 500 ms: within MAX_WAIT, so it waits and is sent.
        assert_eq!(ask("b").await, (Ok(true), Duration::from_millis(500)));
        // Three at once: the first waits 500 ms, the second 1 s, the third would wait 1.5 s.
        let (c, d, e) = tokio::join!(ask("c"), ask("d"), ask("e"));
        assert_eq!(c, (Ok(true), Duration::from_millis(500)));
        assert_eq!(d, (Ok(true), Duration::from_secs(1)));
        assert!(e.0.is_err() && e.1.is_zero(), "{e:?}");
        assert_eq!(cluster.asked.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_check_dropped_while_waiting_gives_its_turn_back() {
        let mut permissions = Permissions::default();
        permissions.set_limit(SarLimit {
            per_second: 1,
            burst: 1,
        });
        let cluster = Granting::default();
        assert_eq!(ask(&permissions, &cluster, "a").await, Ok(true));
        // b would wait 1 s; it is given up after 100 ms (its review timed out, say).
        assert!(
            tokio::time::timeout(Duration::from_millis(100), ask(&permissions, &cluster, "b"))
                .await
                .is_err()
        );
        // So c waits the 900 ms left, not 1.9 s.
        let at = TokioInstant::now();
        assert_eq!(ask(&permissions, &cluster, "c").await, Ok(true));
        assert_eq!(at.elapsed(), Duration::from_millis(900));
        assert_eq!(cluster.asked.load(Ordering::SeqCst), 2);
    }
}
