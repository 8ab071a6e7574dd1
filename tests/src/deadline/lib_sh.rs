//! `hack/lib.sh`'s deadline and signal helpers, run by bash as the scripts run them: a wait past
//! its deadline ends and names what it waited for, and a job started from a parent that ignores
//! SIGINT gets it back (the `make run | tee` Ctrl-C case of `hack/test-run.sh`).
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::{output_within, repo_root};

/// Runs `script` in bash after sourcing hack/lib.sh (strict mode off, as the checks read exit
/// codes), for at most 60 s; returns its exit code and its stdout and stderr together.
fn lib_sh(script: &str) -> Result<(Option<i32>, String)> {
    let lib = repo_root().join("hack/lib.sh");
    let full = format!(". '{}'; set +e; {script}", lib.display());
    let out = output_within(
        Command::new("bash").args(["-c", &full]),
        None,
        Duration::from_secs(60),
        "bash with hack/lib.sh",
    )?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status.code(), text))
}

#[test]
fn wait_job_gives_a_job_its_deadline_and_names_it() -> Result<()> {
    let started = Instant::now();
    let (_, text) = lib_sh(
        "sleep 300 & pid=$!; wait_job $pid 1 'the sleeper'; echo \"rc=$?\"; \
         kill -0 $pid 2>/dev/null && echo still-running || echo gone",
    )?;
    assert!(
        text.contains("timed out after 1s waiting for the sleeper"),
        "{text}"
    );
    assert!(text.contains("rc=124") && text.contains("gone"), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    // A job that ends in time gives its own exit status.
    let (_, text) = lib_sh("(exit 7) & wait_job $! 10 'a quick job'; echo \"rc=$?\"")?;
    assert!(
        text.contains("rc=7") && !text.contains("timed out"),
        "{text}"
    );
    Ok(())
}

#[test]
fn wait_for_polls_until_its_deadline_and_names_what() -> Result<()> {
    let (_, text) = lib_sh("wait_for 'a condition that never holds' 1 false; echo \"rc=$?\"")?;
    assert!(
        text.contains("timed out after 1s waiting for a condition that never holds"),
        "{text}"
    );
    assert!(text.contains("rc=124"), "{text}");
    let (_, text) = lib_sh(
        "f=$(mktemp -u); (sleep 1; touch \"$f\") & wait_for 'the file' 20 test -e \"$f\"; \
         echo \"rc=$?\"; rm -f \"$f\"",
    )?;
    assert!(text.contains("rc=0"), "{text}");
    Ok(())
}

/// A bash started with SIGINT ignored cannot trap it (its trap is silently not set); started
/// through `with_default_sigint` it can. `sigint_ignored` tells the two apart.
#[test]
fn a_job_started_from_a_parent_that_ignores_sigint_gets_it_back() -> Result<()> {
    let child = "bash -c '. hack/lib.sh; sigint_ignored && echo child-ignores; \
                 trap \"echo trapped; exit 130\" INT; kill -INT $$; echo not-stopped'";
    let root = repo_root();
    let (_, plain) = lib_sh(&format!("cd '{}'; trap '' INT; {child}", root.display()))?;
    assert!(
        plain.contains("child-ignores") && plain.contains("not-stopped"),
        "{plain}"
    );
    let (_, wrapped) = lib_sh(&format!(
        "cd '{}'; trap '' INT; with_default_sigint {child}",
        root.display()
    ))?;
    assert!(wrapped.contains("trapped"), "{wrapped}");
    assert!(
        !wrapped.contains("child-ignores") && !wrapped.contains("not-stopped"),
        "{wrapped}"
    );
    Ok(())
}
