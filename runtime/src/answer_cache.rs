//! One cache of the apiserver's answers, on moka: about access (SubjectAccessReviews, and the
//! TokenReview before one) for the webhook's permission checks and the controller's `/metrics`
//! guard ([`crate::metrics_auth`]), and discovery's answer about a kind for the RESTMapper
//! ([`crate::scale`]). An answer is a grant (access allowed, a kind found) or a denial:
//!
//! - a grant is kept for its TTL and a denial for a TTL of its own (per entry, moka's
//!   [`Expiry`]); an error is not kept at all;
//! - the same question asked at once is asked once, the others waiting for its answer (moka's
//!   `try_get_with`; if the one asking is dropped, a waiting one asks);
//! - at most `capacity` answers, the least recently used dropped first (LRU: a new answer is
//!   always kept, as a caller asking again at once expects);
//! - in the last fifth of a grant's TTL one caller asks again while the others still use the
//!   grant (refresh-ahead), so that a grant in steady use never expires under load, where every
//!   caller in flight would wait for the new answer, and never outlives its TTL either. A denial
//!   replaces the grant at once; an error leaves it standing until its TTL.
use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use moka::future::Cache;
use moka::policy::EvictionPolicy;
use moka::Expiry;

/// In the last `1 / REFRESH_IN_LAST` of a grant's TTL, one caller asks again.
const REFRESH_IN_LAST: u32 = 5;

/// An answer the cache keeps: a grant (access allowed, a kind found) or a denial.
pub trait Verdict: Clone + Send + Sync + 'static {
    fn grants(&self) -> bool;
}

impl Verdict for bool {
    fn grants(&self) -> bool {
        *self
    }
}

/// An answer and when it was asked; `refreshing` while one caller asks again.
struct Answer<V> {
    verdict: V,
    asked: Instant,
    refreshing: AtomicBool,
}

impl<V> Answer<V> {
    fn new(verdict: V) -> Arc<Self> {
        Arc::new(Self {
            verdict,
            asked: Instant::now(),
            refreshing: AtomicBool::new(false),
        })
    }
}

/// Each answer's TTL, from the moment it is stored (a grant asked again starts anew).
struct Ttls {
    grant: Duration,
    denial: Duration,
}

impl Ttls {
    fn of<V: Verdict>(&self, answer: &Answer<V>) -> Option<Duration> {
        Some(if answer.verdict.grants() {
            self.grant
        } else {
            self.denial
        })
    }
}

impl<K, V: Verdict> Expiry<K, Arc<Answer<V>>> for Ttls {
    fn expire_after_create(&self, _: &K, answer: &Arc<Answer<V>>, _: Instant) -> Option<Duration> {
        self.of(answer)
    }

    fn expire_after_update(
        &self,
        _: &K,
        answer: &Arc<Answer<V>>,
        _: Instant,
        _: Option<Duration>,
    ) -> Option<Duration> {
        self.of(answer)
    }
}

/// Answers by question `K` (the whole identity and what it asks).
#[derive(Clone)]
pub struct AnswerCache<K, V> {
    answers: Cache<K, Arc<Answer<V>>>,
    grant_ttl: Duration,
}

impl<K, V> AnswerCache<K, V>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Verdict,
{
    /// At most `capacity` answers; grants kept for `grant_ttl`, denials for `denial_ttl`.
    pub fn new(capacity: u64, grant_ttl: Duration, denial_ttl: Duration) -> Self {
        Self {
            answers: Cache::builder()
                .max_capacity(capacity.max(1))
                .eviction_policy(EvictionPolicy::lru())
                .expire_after(Ttls {
                    grant: grant_ttl,
                    denial: denial_ttl,
                })
                .build(),
            grant_ttl,
        }
    }

    /// The answer to `key`: the one kept, or `ask`'s, awaited only when nobody else is asking
    /// the same question (the others wait for its answer, errors included). In the last fifth
    /// of a grant's TTL, this caller may be the one that asks again: it gets the new answer, or
    /// on an error the grant, which stands until its TTL.
    pub async fn get_or_ask<E, F>(&self, key: K, ask: F) -> Result<V, Arc<E>>
    where
        F: Future<Output = Result<V, E>>,
        E: Send + Sync + 'static,
    {
        if let Some(answer) = self.answers.get(&key).await {
            let refresh_at = self.grant_ttl - self.grant_ttl / REFRESH_IN_LAST;
            if !answer.verdict.grants()
                || answer.asked.elapsed() < refresh_at
                || answer.refreshing.swap(true, Ordering::AcqRel)
            {
                return Ok(answer.verdict.clone());
            }
            // If this caller is dropped before the answer, the grant expires at its TTL.
            return match ask.await {
                Ok(verdict) => {
                    self.answers.insert(key, Answer::new(verdict.clone())).await;
                    Ok(verdict)
                }
                Err(_) => {
                    answer.refreshing.store(false, Ordering::Release);
                    Ok(answer.verdict.clone())
                }
            };
        }
        self.answers
            .try_get_with(key, async { ask.await.map(Answer::new) })
            .await
            .map(|answer| answer.verdict.clone())
    }

    /// Takes `verdict` as the answer to `key`, as if it had just been asked.
    pub async fn remember(&self, key: K, verdict: V) {
        self.answers.insert(key, Answer::new(verdict)).await;
    }

    /// Answers held, once the pending evictions and expiries are done.
    pub async fn len(&self) -> u64 {
        self.answers.run_pending_tasks().await;
        self.answers.entry_count()
    }

    pub async fn is_empty(&self) -> bool {
        self.len().await == 0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Answers `verdict` after `delay`, counting the questions.
    async fn asked<V>(count: &AtomicUsize, delay: Duration, verdict: V) -> Result<V, String> {
        count.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(delay).await;
        Ok(verdict)
    }

    #[tokio::test]
    async fn grants_and_denials_have_their_own_ttl() {
        let cache = AnswerCache::new(16, Duration::from_secs(2), Duration::from_millis(200));
        let n = AtomicUsize::new(0);
        // Asks both questions: the grant "yes" and the denial "no".
        let both = || async {
            let yes = cache.get_or_ask("yes", asked(&n, Duration::ZERO, true));
            let no = cache.get_or_ask("no", asked(&n, Duration::ZERO, false));
            (yes.await, no.await)
        };
        for _ in 0..3 {
            assert_eq!(both().await, (Ok(true), Ok(false)));
        }
        assert_eq!(n.load(Ordering::SeqCst), 2);
        // Past the denial's TTL (moka reads the real clock), within the grant's.
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(both().await, (Ok(true), Ok(false)));
        assert_eq!(
            n.load(Ordering::SeqCst),
            3,
            "the denial expired, the grant did not"
        );
    }

    #[tokio::test]
    async fn one_question_asked_at_once_is_asked_once_and_errors_are_not_kept() {
        let cache =
            AnswerCache::<&str, bool>::new(16, Duration::from_secs(10), Duration::from_secs(2));
        let n = AtomicUsize::new(0);
        let answers = futures::future::join_all(
            (0..50).map(|_| cache.get_or_ask("q", asked(&n, Duration::from_millis(20), true))),
        )
        .await;
        assert!(answers.iter().all(|a| *a == Ok(true)));
        assert_eq!(n.load(Ordering::SeqCst), 1);
        let failed = cache
            .get_or_ask("e", async { Err::<bool, _>("no answer".to_string()) })
            .await;
        assert_eq!(failed.unwrap_err().as_str(), "no answer");
        assert_eq!(
            cache.get_or_ask("e", asked(&n, Duration::ZERO, true)).await,
            Ok(true)
        );
        assert_eq!(n.load(Ordering::SeqCst), 2, "the error was not kept");
    }

    #[tokio::test]
    async fn the_capacity_bounds_the_answers_and_keeps_the_newest() {
        let cache = AnswerCache::new(2, Duration::from_secs(10), Duration::from_secs(2));
        let n = AtomicUsize::new(0);
        for q in ["a", "b", "c"] {
            cache
                .get_or_ask(q, asked(&n, Duration::ZERO, true))
                .await
                .unwrap();
        }
        assert_eq!(cache.len().await, 2);
        cache
            .get_or_ask("c", asked(&n, Duration::ZERO, true))
            .await
            .unwrap();
        assert_eq!(n.load(Ordering::SeqCst), 3, "the newest is kept");
    }

    #[tokio::test]
    async fn a_grant_in_its_last_fifth_is_asked_again_by_one_caller_while_the_others_use_it() {
        // Asked at 85% of the TTL: in the last fifth, with 150 ms to spare.
        let ttl = Duration::from_secs(1);
        let cache = AnswerCache::new(16, ttl, ttl / 5);
        let n = AtomicUsize::new(0);
        cache
            .get_or_ask("q", asked(&n, Duration::ZERO, true))
            .await
            .unwrap();
        std::thread::sleep(ttl * 85 / 100);
        // 20 callers at once, the new answer slow: one asks, none waits for it.
        let started = Instant::now();
        let slow = Duration::from_millis(300);
        let answers = futures::future::join_all(
            (0..20).map(|_| cache.get_or_ask("q", asked(&n, slow, false))),
        )
        .await;
        assert_eq!(n.load(Ordering::SeqCst), 2);
        assert!(started.elapsed() >= slow);
        let fresh = answers.iter().filter(|a| **a == Ok(false)).count();
        assert_eq!(fresh, 1, "{answers:?}");
        assert_eq!(answers.iter().filter(|a| **a == Ok(true)).count(), 19);
        // A denial replaces the grant at once.
        assert_eq!(
            cache.get_or_ask("q", asked(&n, Duration::ZERO, true)).await,
            Ok(false)
        );
        // An error leaves a grant standing, and the next caller asks again.
        cache
            .get_or_ask("r", asked(&n, Duration::ZERO, true))
            .await
            .unwrap();
        std::thread::sleep(ttl * 85 / 100);
        let failing = async { Err::<bool, _>("no answer".to_string()) };
        assert_eq!(cache.get_or_ask("r", failing).await, Ok(true));
        let before = n.load(Ordering::SeqCst);
        assert_eq!(
            cache.get_or_ask("r", asked(&n, Duration::ZERO, true)).await,
            Ok(true)
        );
        assert_eq!(n.load(Ordering::SeqCst), before + 1);
    }
}
