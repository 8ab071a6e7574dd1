//! Where a bundle is kept: the four entries of a `kubernetes.io/tls` Secret with its CA
//! (`ca.crt`, `ca.key`, `tls.crt`, `tls.key`), as the Secret's keys and as the files of a
//! directory (a mounted Secret, or `kubesteer-certs generate --out-dir`).
use std::io::Write as _;
use std::path::Path;
use std::time::SystemTime;

use crate::{renew, Bundle, Error, Options, Outcome, Pem, Result};

/// File names inside the directory written by [`write_dir`], as in a `kubernetes.io/tls` Secret.
pub const CA_CERT_FILE: &str = "ca.crt";
/// See [`CA_CERT_FILE`].
pub const CA_KEY_FILE: &str = "ca.key";
/// See [`CA_CERT_FILE`].
pub const SERVING_CERT_FILE: &str = "tls.crt";
/// See [`CA_CERT_FILE`].
pub const SERVING_KEY_FILE: &str = "tls.key";

/// Writes the bundle as `ca.crt`, `ca.key`, `tls.crt` and `tls.key`, each replaced atomically.
pub fn write_dir(bundle: &Bundle, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    // Keys go first so that a reader never pairs a new certificate with an old key for long.
    write_atomic(&dir.join(CA_KEY_FILE), &bundle.ca.key, true)?;
    write_atomic(&dir.join(CA_CERT_FILE), &bundle.ca.cert, false)?;
    write_atomic(&dir.join(SERVING_KEY_FILE), &bundle.serving.key, true)?;
    write_atomic(&dir.join(SERVING_CERT_FILE), &bundle.serving.cert, false)?;
    Ok(())
}

/// Reads what [`write_dir`] wrote; `None` when any of the four files is absent.
pub fn read_dir(dir: &Path) -> Result<Option<Bundle>> {
    let (Some(ca), Some(serving)) = (
        read_pair(dir, CA_CERT_FILE, CA_KEY_FILE)?,
        read_pair(dir, SERVING_CERT_FILE, SERVING_KEY_FILE)?,
    ) else {
        return Ok(None);
    };
    Ok(Some(Bundle { ca, serving }))
}

/// Makes `dir` hold a usable bundle for `opts`, keeping a healthy CA so the caBundle stays stable.
pub fn ensure_dir(dir: &Path, opts: &Options, now: SystemTime) -> Result<Outcome> {
    let ca = read_pair(dir, CA_CERT_FILE, CA_KEY_FILE)?;
    let serving = read_pair(dir, SERVING_CERT_FILE, SERVING_KEY_FILE)?;
    let (bundle, outcome) = renew(ca, serving, opts, now)?;
    if outcome != Outcome::Kept {
        write_dir(&bundle, dir)?;
    }
    Ok(outcome)
}

pub(crate) fn read_pair(dir: &Path, cert_file: &str, key_file: &str) -> Result<Option<Pem>> {
    let (Some(cert), Some(key)) = (
        read_optional(&dir.join(cert_file))?,
        read_optional(&dir.join(key_file))?,
    ) else {
        return Ok(None);
    };
    Ok(Some(Pem { cert, key }))
}

fn read_optional(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

pub(crate) fn write_atomic(path: &Path, contents: &str, secret: bool) -> Result<()> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    // A leftover temp file from a crashed run could carry wider permissions; create_new sets ours.
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(e)),
        _ => {}
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, if secret { 0o600 } else { 0o644 });
    #[cfg(not(unix))]
    let _ = secret;
    let mut file = options.open(&tmp).map_err(io)?;
    file.write_all(contents.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(io)
}
#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::testing::*;
    use crate::{check, generate, Renewal};

    #[test]
    fn write_dir_and_read_dir_roundtrip() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("certs");
        assert!(read_dir(&out).unwrap().is_none());
        let bundle = generate(&opts()).unwrap();
        write_dir(&bundle, &out).unwrap();
        let read = read_dir(&out).unwrap().unwrap();
        assert_eq!(read.ca, bundle.ca);
        assert_eq!(read.serving, bundle.serving);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = |f: &str| out.join(f).metadata().unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(CA_KEY_FILE), 0o600);
            assert_eq!(mode(SERVING_KEY_FILE), 0o600);
            assert_eq!(mode(CA_CERT_FILE), 0o644);
        }
        let names: BTreeSet<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            ["ca.crt", "ca.key", "tls.crt", "tls.key"]
                .map(String::from)
                .into()
        );
        std::fs::remove_file(out.join(SERVING_KEY_FILE)).unwrap();
        assert!(read_dir(&out).unwrap().is_none());
    }

    #[test]
    fn ensure_dir_keeps_a_healthy_ca() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        let read = |f: &str| std::fs::read(out.join(f)).unwrap();
        let mut opts = opts();
        let now = SystemTime::now();

        assert_eq!(ensure_dir(out, &opts, now).unwrap(), Outcome::Created);
        let (ca, tls) = (read(CA_CERT_FILE), read(SERVING_CERT_FILE));
        assert_eq!(ensure_dir(out, &opts, now).unwrap(), Outcome::Kept);
        assert_eq!(read(CA_CERT_FILE), ca);
        assert_eq!(read(SERVING_CERT_FILE), tls);

        opts.dns.push("localhost".into());
        assert_eq!(
            ensure_dir(out, &opts, now).unwrap(),
            Outcome::Renewed(Renewal::SansChanged)
        );
        assert_eq!(read(CA_CERT_FILE), ca);
        assert_ne!(read(SERVING_CERT_FILE), tls);

        std::fs::remove_file(out.join(SERVING_CERT_FILE)).unwrap();
        assert!(matches!(
            ensure_dir(out, &opts, now).unwrap(),
            Outcome::Renewed(Renewal::Unreadable(_))
        ));
        assert_eq!(read(CA_CERT_FILE), ca);

        let late = now + 7 * 365 * DAY;
        assert_eq!(ensure_dir(out, &opts, late).unwrap(), Outcome::Created);
        assert_ne!(read(CA_CERT_FILE), ca);
        let bundle = read_dir(out).unwrap().unwrap();
        assert_eq!(check(&bundle, &opts, now), Renewal::NotNeeded);
    }
}
