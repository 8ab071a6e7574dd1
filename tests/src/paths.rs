//! Where things are: the checkout, the cached tools, the e2e cluster's state and kubeconfig.
use std::path::PathBuf;

/// The repository root, for `config/samples` and the like.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub(crate) fn cache_bin() -> PathBuf {
    let cache = std::env::var_os("KUBESTEER_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/kubesteer")
        });
    cache.join("bin")
}

/// The e2e tests' own cluster, which `hack/e2e.sh` starts (never `make run`'s `kubesteer`).
pub(crate) const E2E_CLUSTER: &str = "kubesteer-e2e";

/// The state directory of the e2e cluster: `$KUBESTEER_STATE`, else `.kubesteer/e2e`.
pub(crate) fn state_dir() -> PathBuf {
    std::env::var_os("KUBESTEER_STATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".kubesteer/e2e"))
}

/// The kubeconfig of the e2e cluster that `hack/e2e.sh` started: `$KUBESTEER_KUBECONFIG`, else
/// the state directory's. Never `$KUBECONFIG`, which may well name `make run`'s cluster.
pub fn kubeconfig() -> PathBuf {
    std::env::var_os("KUBESTEER_KUBECONFIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| state_dir().join("kubeconfig"))
}

/// The CA of the client certificate the cluster's apiserver presents to webhooks, which
/// hack/cluster.sh makes beside the kubeconfig; `None` for a cluster started without it.
pub fn apiserver_client_ca() -> Option<PathBuf> {
    let ca = kubeconfig().parent()?.join("apiserver-client/ca.crt");
    ca.is_file().then_some(ca)
}

/// The chart values that make a release's webhook answer reviews from this cluster's apiserver
/// only (`webhook.apiserverAuth.clientCA`), or none for a cluster without that certificate.
pub fn apiserver_auth_values() -> Vec<String> {
    apiserver_client_ca()
        .map(|ca| {
            vec![
                "--set-file".to_string(),
                format!("webhook.apiserverAuth.clientCA={}", ca.display()),
            ]
        })
        .unwrap_or_default()
}

/// The directory cargo builds into (honours CARGO_TARGET_DIR).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
}

/// A workspace binary, built by `hack/e2e.sh` before the tests run.
pub fn workspace_bin(name: &str) -> PathBuf {
    target_dir().join("debug").join(name)
}

/// Runs a pinned tool from the control-plane cache (helm, kubectl).
pub fn cached_tool(name: &str) -> PathBuf {
    cache_bin().join(name)
}
