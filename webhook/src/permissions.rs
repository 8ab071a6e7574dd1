//! Permission checks for a request's author, with a short cache of granted answers.
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
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

/// A granted answer: when it was asked, and whether a request is asking again.
struct Grant {
    asked: Instant,
    refreshing: bool,
}

/// Granted answers by identity and permission.
pub struct Permissions {
    granted: Mutex<HashMap<Key, Grant>>,
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
            ttl,
            capacity: capacity.max(1),
        }
    }

    /// Whether `user` holds `access`; only grants are cached, so a new grant counts at once.
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
        let now = Instant::now();
        // Whether this request asks again for a grant that is still valid. If it is dropped
        // before the answer, the grant simply expires at its TTL and the next request asks.
        let refreshing = match self.lock().get_mut(&key) {
            Some(grant) if now.duration_since(grant.asked) < self.ttl => {
                let age = now.duration_since(grant.asked);
                if grant.refreshing || age < self.ttl - self.ttl / REFRESH_IN_LAST {
                    return Ok(true);
                }
                grant.refreshing = true;
                true
            }
            _ => false,
        };
        match cluster.permitted(user, access).await {
            Ok(true) => {
                self.remember(key, now);
                Ok(true)
            }
            Ok(false) => {
                // Revoked: it counts at once, for every request.
                self.lock().remove(&key);
                Ok(false)
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
        }
    }

    fn remember(&self, key: Key, now: Instant) {
        let mut granted = self.lock();
        if granted.len() >= self.capacity && !granted.contains_key(&key) {
            granted.retain(|_, grant| now.duration_since(grant.asked) < self.ttl);
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
                refreshing: false,
            },
        );
    }

    /// Number of answers held, for tests.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Grant>> {
        // A panic elsewhere while holding the lock leaves the map usable: each entry is whole.
        self.granted.lock().unwrap_or_else(|e| e.into_inner())
    }
}
