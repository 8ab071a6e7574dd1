//! The README and docs/ run as printed: every `kubectl explain` path they name exists in the
//! installed CRDs. (The README's try-it lines as a whole run in `make run-once`, which `make test`
//! runs last.)
use anyhow::Result;
use kubesteer_tests::{kubectl, repo_root};

/// Every `kubectl explain PATH` of the README, in code blocks and inline, across line breaks.
fn explained_paths(readme: &str) -> Vec<String> {
    let words: Vec<&str> = readme.split_whitespace().collect();
    words
        .windows(3)
        .filter(|w| w[0].trim_start_matches('`') == "kubectl" && w[1] == "explain")
        .map(|w| {
            w[2].trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
                .to_string()
        })
        .collect()
}

#[test]
fn every_kubectl_explain_path_of_the_readme_and_docs_exists() -> Result<()> {
    let mut pages = vec![repo_root().join("README.md")];
    for entry in std::fs::read_dir(repo_root().join("docs"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    let mut paths = Vec::new();
    for page in &pages {
        paths.extend(explained_paths(&std::fs::read_to_string(page)?));
    }
    assert!(
        paths.iter().any(|p| p == "scaler.spec.windows.start"),
        "the try-it line is found: {paths:?}"
    );
    let mut failed = Vec::new();
    for path in &paths {
        let run = kubectl(&["explain", path], None)?;
        if !run.ok {
            failed.push(format!("kubectl explain {path}: {}", run.stderr.trim()));
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
    Ok(())
}

#[test]
fn explain_paths_are_read_across_line_breaks_and_markup() {
    let text =
        "a `kubectl explain\n  scaler.spec.timeZone`). and\nkubectl explain memcached.spec.size\n";
    assert_eq!(
        explained_paths(text),
        ["scaler.spec.timeZone", "memcached.spec.size"]
    );
}

/// Every relative link `](path)` of a page, without its `#anchor`.
fn relative_links(page: &str) -> Vec<String> {
    page.split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')').map(|(link, _)| link))
        .filter(|link| !link.contains("://") && !link.starts_with('#') && !link.is_empty())
        .map(|link| link.split('#').next().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn every_relative_link_of_the_readme_docs_and_chart_readme_resolves() -> Result<()> {
    let root = repo_root();
    let mut pages = vec![
        root.join("README.md"),
        root.join("charts/kubesteer/README.md"),
    ];
    for entry in std::fs::read_dir(root.join("docs"))? {
        pages.push(entry?.path());
    }
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in &pages {
        let dir = page.parent().unwrap_or(&root);
        for link in relative_links(&std::fs::read_to_string(page)?) {
            checked += 1;
            if !dir.join(&link).exists() {
                broken.push(format!("{}: {link}", page.display()));
            }
        }
    }
    assert!(checked > 10, "the links are found ({checked})");
    assert!(broken.is_empty(), "{broken:#?}");
    Ok(())
}

#[test]
fn relative_links_are_read_without_anchors_and_urls() {
    let page = "see [a](docs/a.md#x), [b](https://example.com) and [c](#here) or [d](../d.md)";
    assert_eq!(relative_links(page), vec!["docs/a.md", "../d.md"]);
}
