//! Permission checks for a request's author, with a short cache of answers: grants for
//! [`TTL`], denials for a fifth of it, and one SubjectAccessReview at a time for the same
//! question, so that a burst of identical reviews (a forged `userInfo` among them) costs the
//! apiserver one check, not one per review.
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::UserInfo;
use kubesteer_api::access::Access;

use crate::cluster::Cluster;

/// How long a granted permission is trusted without asking again.
pub const TTL: Duration = Duration::from_secs(10);
/// In the last fifth of a grant's TTL, one request asks again while the others still use the
/// grant, so that a grant in steady use never expires under load (where every request in flight
/// would wait for a SubjectAccessReview of its own) and never outlives its TTL either.
const REFRESH_IN_LAST: u32 = 5;
/// A denial is kept for this share of a grant's TTL, so a new grant counts within it.
const DENIAL_SHARE: u32 = 5;
/// Most answers kept; past it the oldest is dropped.
pub const CAPACITY: usize = 4096;

/// Everything a SubjectAccessReview is asked with: the whole identity and the attributes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    user: Option<String>,
    uid: Option<String>,
    groups: Option<Vec<String>>,
    extra: Option<BTreeMap<String, Vec<String>>>,
    access: Access,
}

/// An answer: when it was asked, whether it granted, and whether a request is asking again.
struct Grant {
    asked: Instant,
    granted: bool,
    refreshing: bool,
}

/// What the cache says about a question.
enum Cached {
    /// A valid answer.
    Answer(bool),
    /// A grant in the last fifth of its TTL: this request asks again, the others use it.
    AskAgain,
}

/// Answers by identity and permission.
pub struct Permissions {
    granted: Mutex<HashMap<Key, Grant>>,
    /// The question being asked now, one lock each: the others asking it wait for its answer.
    asking: Mutex<HashMap<Key, Turn>>,
    ttl: Duration,
    capacity: usize,
}

impl Default for Permissions {
    fn default() -> Self {
        Self::new(TTL, CAPACITY)
    }
}

impl Permissions {
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        Self {
            granted: Mutex::default(),
            asking: Mutex::default(),
            ttl,
            capacity: capacity.max(1),
        }
    }

    /// How long a denial is kept.
    fn denial_ttl(&self) -> Duration {
        self.ttl / DENIAL_SHARE
    }

    /// What the cache says about `key` now; a grant in the last fifth of its TTL is marked as
    /// being asked again, by the one request told [`Cached::AskAgain`].
    fn cached(&self, key: &Key, now: Instant) -> Option<Cached> {
        let mut granted = self.lock();
        let answer = granted.get_mut(key)?;
        let age = now.duration_since(answer.asked);
        if !answer.granted {
            return (age < self.denial_ttl()).then_some(Cached::Answer(false));
        }
        if age >= self.ttl {
            return None;
        }
        if answer.refreshing || age < self.ttl - self.ttl / REFRESH_IN_LAST {
            return Some(Cached::Answer(true));
        }
        answer.refreshing = true;
        Some(Cached::AskAgain)
    }

    /// Whether `user` holds `access`. A grant is kept for the TTL, a denial for a fifth of it
    /// (a new grant counts within that), errors not at all.
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
        // Whether this request asks again for a grant that is still valid. If it is dropped
        // before the answer, the grant simply expires at its TTL and the next request asks.
        let mut refreshing = match self.cached(&key, Instant::now()) {
            Some(Cached::Answer(answer)) => return Ok(answer),
            Some(Cached::AskAgain) => true,
            None => false,
        };
        // One request asks a question at a time; the others wait for it and take its answer
        // (or, if the grant it waited for has reached its last fifth meanwhile, ask again).
        let _asking = Asking::new(self, &key).await;
        if !refreshing {
            match self.cached(&key, Instant::now()) {
                Some(Cached::Answer(answer)) => return Ok(answer),
                Some(Cached::AskAgain) => refreshing = true,
                None => {}
            }
        }
        let now = Instant::now();
        let answer = cluster.permitted(user, access).await;
        let result = match answer {
            Ok(granted) => {
                // A denial counts at once, for every request, and takes a grant away.
                self.remember(key.clone(), now, granted);
                Ok(granted)
            }
            // The grant asked again is still within its TTL: it stands, and a later request
            // asks again.
            Err(_) if refreshing => {
                if let Some(grant) = self.lock().get_mut(&key) {
                    grant.refreshing = false;
                }
                Ok(true)
            }
            Err(e) => Err(e),
        };
        result
    }

    fn remember(&self, key: Key, now: Instant, answer: bool) {
        let mut granted = self.lock();
        if granted.len() >= self.capacity && !granted.contains_key(&key) {
            let (ttl, denial_ttl) = (self.ttl, self.denial_ttl());
            granted.retain(|_, grant| {
                now.duration_since(grant.asked) < if grant.granted { ttl } else { denial_ttl }
            });
            if granted.len() >= self.capacity {
                let oldest = granted
                    .iter()
                    .min_by_key(|(_, grant)| grant.asked)
                    .map(|(k, _)| k.clone());
                if let Some(oldest) = oldest {
                    granted.remove(&oldest);
                }
            }
        }
        granted.insert(
            key,
            Grant {
                asked: now,
                granted: answer,
                refreshing: false,
            },
        );
    }

    /// Number of answers held, for tests.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Number of questions being asked now, for tests.
    pub fn asking(&self) -> usize {
        self.asking_lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn asking_lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Turn>> {
        self.asking.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Grant>> {
        // A panic elsewhere while holding the lock leaves the map usable: each entry is whole.
        self.granted.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The lock of one question, shared by whoever asks it now.
type Turn = Arc<tokio::sync::Mutex<()>>;

/// This request's turn to ask a question: held until dropped (answered, or the request gone),
/// then the question's lock is forgotten once nobody else holds or waits for it.
struct Asking<'a> {
    permissions: &'a Permissions,
    key: &'a Key,
    held: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl<'a> Asking<'a> {
    async fn new(permissions: &'a Permissions, key: &'a Key) -> Self {
        let turn = permissions
            .asking_lock()
            .entry(key.clone())
            .or_default()
            .clone();
        Self {
            permissions,
            key,
            held: Some(turn.lock_owned().await),
        }
    }
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        self.held = None;
        let mut asking = self.permissions.asking_lock();
        // Only the map holds it: nobody asks or waits.
        if asking
            .get(self.key)
            .is_some_and(|t| Arc::strong_count(t) == 1)
        {
            asking.remove(self.key);
        }
    }
}
