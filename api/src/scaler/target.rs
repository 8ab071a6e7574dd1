//! The one identity of a Scaler's target, whatever names it (a v1beta1 `scaleTargetRefs`
//! entry, a v1alpha1 Deployment, a selector's match, a record in a status): its API group and
//! kind, its namespace resolved, and its name; with the version it is addressed at, which is
//! no part of that identity.
use std::cmp::Ordering;
use std::hash::{Hash, Hasher};

/// A target: its API group and kind (any version names the same object), its namespace
/// resolved, and its name; and the version to reach it at.
///
/// Equal, ordered and hashed by group, kind, namespace and name only, not by `version`: an
/// object served at several versions (`apps/v1beta2` and `apps/v1`) is one object, so two
/// names of it at different versions are one target (one claim, one entry in a set).
#[derive(Debug, Clone, Default)]
pub struct Target {
    pub group: String,
    /// The version it is addressed at: the part of its `apiVersion` after the slash ("v1" for
    /// the core group); empty when unknown (a target rebuilt from a claim, which keeps only
    /// the group).
    pub version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl Target {
    /// The target `api_version`/`kind` `namespace/name`.
    pub fn new(api_version: &str, kind: &str, namespace: &str, name: &str) -> Self {
        Self {
            group: group_of(api_version).to_string(),
            version: version_of(api_version).to_string(),
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    /// The apps/v1 Deployment `namespace/name`.
    pub fn deployment(namespace: &str, name: &str) -> Self {
        Self::new(DEPLOYMENT_API_VERSION, DEPLOYMENT_KIND, namespace, name)
    }

    /// The `apiVersion` it is addressed at: `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        match self.group.as_str() {
            "" => self.version.clone(),
            group => format!("{group}/{}", self.version),
        }
    }

    /// What identifies it: everything but the version.
    fn identity(&self) -> (&str, &str, &str, &str) {
        (&self.group, &self.kind, &self.namespace, &self.name)
    }
}

impl PartialEq for Target {
    fn eq(&self, other: &Self) -> bool {
        self.identity() == other.identity()
    }
}

impl Eq for Target {}

impl PartialOrd for Target {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Target {
    fn cmp(&self, other: &Self) -> Ordering {
        self.identity().cmp(&other.identity())
    }
}

impl Hash for Target {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.identity().hash(state);
    }
}

impl std::fmt::Display for Target {
    /// As users read it: `StatefulSet team/db`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// The API group of an `apiVersion`: "" for the core group ("v1").
pub fn group_of(api_version: &str) -> &str {
    api_version.split_once('/').map(|(g, _)| g).unwrap_or("")
}

/// The version of an `apiVersion`: "v1" of "apps/v1" and of the core group's "v1".
pub fn version_of(api_version: &str) -> &str {
    api_version
        .split_once('/')
        .map(|(_, v)| v)
        .unwrap_or(api_version)
}

/// The `apiVersion` and kind of every v1alpha1 target.
pub const DEPLOYMENT_API_VERSION: &str = "apps/v1";
pub const DEPLOYMENT_KIND: &str = "Deployment";

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;

    fn hash(target: &Target) -> u64 {
        let mut hasher = DefaultHasher::new();
        target.hash(&mut hasher);
        hasher.finish()
    }

    #[test]
    fn two_versions_of_one_target_are_one_target() {
        let old = Target::new("apps/v1beta2", "Deployment", "team", "web");
        let new = Target::deployment("team", "web");
        assert_eq!(old, new);
        assert_eq!(old.cmp(&new), Ordering::Equal);
        assert_eq!(hash(&old), hash(&new));
        // Each is still addressed at its own version.
        assert_eq!(old.api_version(), "apps/v1beta2");
        assert_eq!(new.api_version(), "apps/v1");
        // Another name, kind or group is another target.
        assert_ne!(new, Target::deployment("team", "db"));
        assert_ne!(new, Target::new("apps/v1", "StatefulSet", "team", "web"));
        assert_ne!(
            new,
            Target::new("example.com/v1", "Deployment", "team", "web")
        );
    }

    #[test]
    fn api_version_round_trips() {
        for api_version in ["apps/v1", "v1", "keda.sh/v1alpha1"] {
            let target = Target::new(api_version, "Kind", "ns", "name");
            assert_eq!(target.api_version(), api_version);
        }
        let core = Target::new("v1", "ReplicationController", "team", "web");
        assert_eq!((core.group.as_str(), core.version.as_str()), ("", "v1"));
    }
}
