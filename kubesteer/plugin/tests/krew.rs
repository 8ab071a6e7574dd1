//! The krew manifest names the plugin, its binary and this version on every platform.
use serde_json::Value;

#[test]
fn the_krew_manifest_matches_the_crate() {
    let text = include_str!("../krew.yaml");
    let manifest: Value = serde_yaml::from_str(text).unwrap_or_default();
    assert_eq!(
        manifest["apiVersion"],
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(manifest["kind"], "Plugin");
    assert_eq!(manifest["metadata"]["name"], "kubesteer");
    let spec = &manifest["spec"];
    let version = format!("v{}", env!("CARGO_PKG_VERSION"));
    assert_eq!(spec["version"], version.as_str());
    // krew-index: a short description of at most 60 characters.
    let short = spec["shortDescription"].as_str().unwrap_or_default();
    assert!(!short.is_empty() && short.len() <= 60, "{short:?}");
    let platforms = spec["platforms"].as_array().cloned().unwrap_or_default();
    assert!(!platforms.is_empty());
    for p in platforms {
        assert_eq!(p["bin"], "kubectl-kubesteer");
        let uri = p["uri"].as_str().unwrap_or_default();
        let os = p["selector"]["matchLabels"]["os"]
            .as_str()
            .unwrap_or_default();
        let arch = p["selector"]["matchLabels"]["arch"]
            .as_str()
            .unwrap_or_default();
        assert!(
            uri.ends_with(&format!("/{version}/kubectl-kubesteer_{os}_{arch}.tar.gz")),
            "{uri}"
        );
        let sha = p["sha256"].as_str().unwrap_or_default();
        assert!(
            sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit()),
            "{sha}"
        );
    }
}
