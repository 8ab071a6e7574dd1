//! One version everywhere: the workspace version of Cargo.toml is the chart's `version` and
//! `appVersion`, the krew manifest's, the newest release of CHANGELOG.md and every version the
//! README's install lines name. (The binaries take it from Cargo at build time, the image's tag
//! and label from hack/image.sh and `make release`; the e2e tests read it back from the pods'
//! `/version`, their first log line and `kubectl kubesteer --version`.)
use std::fs;

use anyhow::Result;

use crate::repo_root;

/// The workspace version, `[workspace.package] version` of Cargo.toml.
pub fn workspace_version() -> Result<String> {
    let text = fs::read_to_string(repo_root().join("Cargo.toml"))?;
    let mut in_package = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[workspace.package]";
        } else if in_package {
            if let Some(v) = line.strip_prefix("version = ") {
                return Ok(v.trim_matches('"').to_string());
            }
        }
    }
    anyhow::bail!("no version in [workspace.package] of Cargo.toml")
}

#[cfg(test)]
mod tests {
    use anyhow::Context;
    use serde_json::Value;

    use super::*;

    fn yaml(path: &str) -> Result<Value> {
        let text = fs::read_to_string(repo_root().join(path)).with_context(|| path.to_string())?;
        serde_yaml::from_str(&text).with_context(|| path.to_string())
    }

    /// Every `<marker><version>` in `text`, the version being what follows up to a character
    /// that cannot be in one.
    fn versions_after<'a>(text: &'a str, marker: &str) -> Vec<&'a str> {
        text.match_indices(marker)
            .map(|(at, _)| {
                let rest = &text[at + marker.len()..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '-'))
                    .unwrap_or(rest.len());
                &rest[..end]
            })
            .collect()
    }

    #[test]
    fn the_workspace_version_is_the_crates_the_charts_krews_changelogs_and_readmes() -> Result<()> {
        let version = workspace_version()?;
        assert_eq!(version, env!("CARGO_PKG_VERSION"));
        let chart = yaml("charts/kubesteer/Chart.yaml")?;
        assert_eq!(chart["version"], version.as_str(), "Chart.yaml version");
        assert_eq!(
            chart["appVersion"],
            version.as_str(),
            "Chart.yaml appVersion"
        );
        // The image's tag defaults to appVersion: no other tag is pinned in the values.
        let values = yaml("charts/kubesteer/values.yaml")?;
        let tag = values["image"]["tag"].as_str().unwrap_or_default();
        assert!(
            tag.is_empty() || tag == version,
            "values.yaml image.tag {tag:?}"
        );
        let krew = yaml("kubesteer/plugin/krew.yaml")?;
        let tagged = format!("v{version}");
        assert_eq!(krew["spec"]["version"], tagged.as_str(), "krew.yaml");
        for platform in krew["spec"]["platforms"].as_array().into_iter().flatten() {
            let uri = platform["uri"].as_str().unwrap_or_default();
            assert!(uri.contains(&format!("/{tagged}/")), "krew.yaml uri {uri}");
        }
        let changelog = fs::read_to_string(repo_root().join("CHANGELOG.md"))?;
        let newest = versions_after(&changelog, "\n## [")
            .into_iter()
            .find(|v| *v != "Unreleased");
        assert_eq!(
            newest,
            Some(version.as_str()),
            "CHANGELOG.md's newest release"
        );
        // Every crate takes it: the binaries' --version, /version and first log line are it.
        let workspace = fs::read_to_string(repo_root().join("Cargo.toml"))?;
        let members = workspace
            .lines()
            .find_map(|l| l.strip_prefix("members = "))
            .context("no members in Cargo.toml")?;
        for member in members.split('"').skip(1).step_by(2) {
            let manifest = fs::read_to_string(repo_root().join(member).join("Cargo.toml"))?;
            assert!(
                manifest.contains("\nversion.workspace = true"),
                "{member}/Cargo.toml does not take the workspace version"
            );
        }
        let readme = fs::read_to_string(repo_root().join("README.md"))?;
        for marker in ["kubesteer:", "image.tag=", "VERSION=", "--version "] {
            for found in versions_after(&readme, marker) {
                if found.starts_with(|c: char| c.is_ascii_digit()) {
                    assert_eq!(found, version, "README.md: {marker}{found}");
                }
            }
        }
        Ok(())
    }

    #[test]
    fn versions_are_read_up_to_where_they_end() {
        let text = "a kubesteer:0.2.0 b\n--set image.tag=1.2.3-rc.1`";
        assert_eq!(versions_after(text, "kubesteer:"), ["0.2.0"]);
        assert_eq!(versions_after(text, "image.tag="), ["1.2.3-rc.1"]);
    }
}
