//! The README runs as printed: every `kubectl explain` path it names exists in the installed
//! CRDs. (Its try-it lines as a whole run in `make run-once`, which `make test` runs last.)
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
fn every_kubectl_explain_path_of_the_readme_exists() -> Result<()> {
    let readme = std::fs::read_to_string(repo_root().join("README.md"))?;
    let paths = explained_paths(&readme);
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
