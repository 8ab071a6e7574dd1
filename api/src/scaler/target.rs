//! The one identity of a Scaler's target, whatever names it (a v1beta1 `scaleTargetRefs`
//! entry, a v1alpha1 Deployment, a selector's match, a record in a status): its API group and
//! kind, its namespace resolved, and its name.

/// A target: its API group and kind (any version names the same object), its namespace
/// resolved, and its name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Target {
    pub group: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl Target {
    /// The target `api_version`/`kind` `namespace/name`.
    pub fn new(api_version: &str, kind: &str, namespace: &str, name: &str) -> Self {
        Self {
            group: group_of(api_version).to_string(),
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    /// The apps/v1 Deployment `namespace/name`.
    pub fn deployment(namespace: &str, name: &str) -> Self {
        Self::new(DEPLOYMENT_API_VERSION, DEPLOYMENT_KIND, namespace, name)
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

/// The `apiVersion` and kind of every v1alpha1 target.
pub const DEPLOYMENT_API_VERSION: &str = "apps/v1";
pub const DEPLOYMENT_KIND: &str = "Deployment";
