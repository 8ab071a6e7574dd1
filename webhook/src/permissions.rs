//! Permission checks for a request's author, with a short cache of granted answers.
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::UserInfo;
use kubesteer_api::access::Access;

use crate::cluster::Cluster;

/// How long a granted permission is trusted without asking again.
pub const TTL: Duration = Duration::from_secs(10);
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

/// Granted answers by identity and permission, each with when it was asked.
pub struct Permissions {
    granted: Mutex<HashMap<Key, Instant>>,
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
        if self
            .lock()
            .get(&key)
            .is_some_and(|asked| now.duration_since(*asked) < self.ttl)
        {
            return Ok(true);
        }
        let allowed = cluster.permitted(user, access).await?;
        if allowed {
            self.remember(key, now);
        }
        Ok(allowed)
    }

    fn remember(&self, key: Key, now: Instant) {
        let mut granted = self.lock();
        if granted.len() >= self.capacity && !granted.contains_key(&key) {
            granted.retain(|_, asked| now.duration_since(*asked) < self.ttl);
            if granted.len() >= self.capacity {
                let oldest = granted
                    .iter()
                    .min_by_key(|(_, asked)| **asked)
                    .map(|(k, _)| k.clone());
                if let Some(oldest) = oldest {
                    granted.remove(&oldest);
                }
            }
        }
        granted.insert(key, now);
    }

    /// Number of answers held, for tests.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Instant>> {
        // A panic elsewhere while holding the lock leaves the map usable: each entry is whole.
        self.granted.lock().unwrap_or_else(|e| e.into_inner())
    }
}
