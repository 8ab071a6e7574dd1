//! Giving back the code and read-only data pages only start-up used.
//!
//! Most of a kubesteer process's resident memory is not its heap but its own executable's code,
//! mapped from the page cache as it runs (the kernel maps 64 KiB around each page touched). Much
//! of what start-up runs (flags, kubeconfig, certificates, TLS set-up, the first lists) never
//! runs again, and what it reads of the file's read-only data (the dynamic loader's symbol and
//! relocation tables, start-up's constants) is not read again either. [`release_startup_code`]
//! unmaps the executable's code and read-only data pages once start-up is done (and the webhook
//! again once its caches' first lists, which decode every object, are done); the pages the
//! process then uses are faulted back in from the page cache, where they still are, at the cost
//! of a minor fault each. Nothing is lost: only read-only, unwritten (never copied on write)
//! pages of the program's own file are dropped; its relocated read-only data (written by the
//! loader before it was made read-only) is kept.
use std::fs;
use std::io;
use std::path::Path;

/// One mapping of `/proc/self/smaps`: its address range, permissions, file, and how many
/// kilobytes of it are anonymous, i.e. pages of the file that were written (copied on write).
/// (Not `Private_Dirty`, which also counts page-cache pages of a freshly written file.)
#[derive(Debug, PartialEq, Eq)]
struct Mapping {
    start: usize,
    end: usize,
    perms: String,
    path: String,
    anonymous_kib: u64,
}

/// The mappings of an smaps text.
fn mappings(smaps: &str) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = Vec::new();
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else { continue };
        if let Some((start, end)) = first.split_once('-') {
            let (Ok(start), Ok(end)) = (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            ) else {
                continue;
            };
            let perms = fields.next().unwrap_or_default().to_string();
            // offset, device, inode, then the path (which may hold spaces).
            let path = fields.skip(3).collect::<Vec<_>>().join(" ");
            out.push(Mapping {
                start,
                end,
                perms,
                path,
                anonymous_kib: 0,
            });
        } else if first == "Anonymous:" {
            if let (Some(m), Some(Ok(kib))) = (out.last_mut(), fields.next().map(str::parse)) {
                m.anonymous_kib = kib;
            }
        }
    }
    out
}

/// The ranges that may be dropped: the executable's own read-only code and data, never written.
fn droppable<'a>(mappings: &'a [Mapping], exe: &'a str) -> impl Iterator<Item = &'a Mapping> {
    mappings.iter().filter(move |m| {
        m.path == exe && (m.perms == "r-xp" || m.perms == "r--p") && m.anonymous_kib == 0
    })
}

/// Unmaps the executable's unwritten code and read-only data pages (they stay in the page cache,
/// and come back as they are used).
/// Returns how many bytes of address range were released; an error when `/proc` cannot be read.
pub fn release_startup_code() -> io::Result<usize> {
    let exe = fs::read_link("/proc/self/exe")?;
    let smaps = fs::read_to_string("/proc/self/smaps")?;
    Ok(release(&mappings(&smaps), &exe))
}

fn release(mappings: &[Mapping], exe: &Path) -> usize {
    let Some(exe) = exe.to_str() else { return 0 };
    let mut released = 0;
    for m in droppable(mappings, exe) {
        let len = m.end.saturating_sub(m.start);
        // SAFETY: the range is a whole private, read-only mapping of this program's own file
        // (code, or constants the loader never relocated), none of whose pages was ever written
        // (no anonymous copy-on-write page): MADV_DONTNEED only drops the page table entries,
        // and the next read or instruction fetch from a page faults it back in with the same
        // bytes from the page cache. References into it (string constants) stay valid: the
        // addresses are unchanged and so are the bytes.
        let rc = unsafe { libc::madvise(m.start as *mut libc::c_void, len, libc::MADV_DONTNEED) };
        if rc == 0 {
            released += len;
        }
    }
    released
}

/// [`release_startup_code`], logged: called when a binary's start-up is done, and by the webhook
/// again once its caches have listed.
pub fn release_startup_code_logged() {
    match release_startup_code() {
        Ok(bytes) => tracing::debug!(kib = bytes / 1024, "start-up code pages given back"),
        Err(e) => tracing::debug!(error = %e, "start-up code pages kept: /proc unreadable"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55d0c0000000-55d0c0100000 r--p 00000000 fd:01 1234 /usr/bin/kubesteer
Size:               1024 kB
Anonymous:             0 kB
55d0c0100000-55d0c0900000 r-xp 00100000 fd:01 1234 /usr/bin/kubesteer
Size:               8192 kB
Anonymous:             0 kB
55d0c0900000-55d0c0a00000 r--p 00900000 fd:01 1234 /usr/bin/kubesteer
Anonymous:            64 kB
7f0000000000-7f0000100000 r-xp 00000000 fd:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             0 kB
7f0000200000-7f0000300000 rw-p 00000000 00:00 0
Anonymous:           512 kB
7f0000400000-7f0000500000 r-xp 00000000 fd:01 1234 /usr/bin/kubesteer
Anonymous:             4 kB
";

    #[test]
    fn only_the_programs_own_unwritten_code_is_dropped() {
        let all = mappings(SMAPS);
        assert_eq!(all.len(), 6);
        let chosen: Vec<_> = droppable(&all, "/usr/bin/kubesteer")
            .map(|m| (m.start, m.end))
            .collect();
        // Its code and its unwritten read-only data; not its relocated read-only data (written),
        // not libc, not the heap, not code with a written page (a debugger's breakpoint).
        assert_eq!(
            chosen,
            vec![
                (0x55d0_c000_0000, 0x55d0_c010_0000),
                (0x55d0_c010_0000, 0x55d0_c090_0000)
            ]
        );
    }

    #[test]
    fn a_path_with_spaces_is_read_whole() {
        let all = mappings("1000-2000 r-xp 00000000 fd:01 7 /opt/my tools/kubesteer\n");
        assert_eq!(all[0].path, "/opt/my tools/kubesteer");
    }

    #[test]
    fn this_process_gives_back_its_code_and_keeps_running() {
        let released = release_startup_code().expect("/proc is readable in tests");
        assert!(released > 0, "the test binary has code pages to give back");
        // Code runs on after its pages were dropped: they fault back in.
        assert_eq!(mappings(SMAPS).len(), 6);
    }
}
