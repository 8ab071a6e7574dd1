//! `kubesteer-certs probe`: an HTTPS GET that trusts only a given CA, so `helm test` can check the
//! webhook from the project's own image, which has no shell and no curl. rustls verifies the
//! certificate (against the CA alone, for the URL's host) and hyper speaks HTTP/1.1.
use std::fmt;
use std::future::{poll_fn, Future};
use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use http::header::{ACCEPT, CONNECTION, HOST, USER_AGENT};
use http::uri::{Authority, Scheme, Uri};
use http::Request;
use hyper::body::{Body as _, Incoming};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::CertificateDer;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::pem::invalid;
use crate::Result;

// A response head longer than this, or with more headers, is not from the webhook.
const MAX_HEAD: usize = 16 * 1024;
const MAX_HEADERS: usize = 64;
// Enough of an error body to say why, e.g. "caches or certificate not ready".
const MAX_REASON: usize = 512;

/// Why one attempt failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot resolve {host}: {source}")]
    Resolve {
        host: String,
        source: std::io::Error,
    },
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("TLS handshake failed: {0}")]
    Tls(rustls::Error),
    #[error("{0}")]
    Io(std::io::Error),
    /// What hyper found wrong with the answer, e.g. "connection closed before message completed".
    #[error("not an HTTP response: {0}")]
    BadResponse(String),
    #[error("HTTP status {code} (want 2xx): {line}{}", suffix(.reason))]
    Status {
        code: u16,
        line: String,
        reason: Option<String>,
    },
}

fn suffix(reason: &Option<String>) -> String {
    reason
        .as_deref()
        .map(|r| format!(": {r}"))
        .unwrap_or_default()
}

impl From<std::io::Error> for ProbeError {
    fn from(e: std::io::Error) -> Self {
        // rustls reports handshake and certificate errors as io::Error; unwrap them to say so.
        let tls = e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            .cloned();
        match tls {
            Some(tls) => ProbeError::Tls(tls),
            None => ProbeError::Io(e),
        }
    }
}

impl From<hyper::Error> for ProbeError {
    fn from(e: hyper::Error) -> Self {
        // hyper keeps the connection's io::Error, maybe a rustls one, as its source.
        let io = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<std::io::Error>());
        match io {
            Some(io) => match io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                Some(tls) => ProbeError::Tls(tls.clone()),
                None => ProbeError::Io(std::io::Error::new(io.kind(), io.to_string())),
            },
            None => ProbeError::BadResponse(e.to_string()),
        }
    }
}

/// A 2xx answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Success {
    pub code: u16,
    /// The status line, e.g. "HTTP/1.1 200 OK".
    pub line: String,
}

impl fmt::Display for Success {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.line)
    }
}

/// The parts of an `https://host[:port][/path]` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub host: String,
    pub port: u16,
    /// Path and query, starting with "/".
    pub path: String,
}

impl Target {
    /// Parses an https URL; anything else is refused, since the point is to check the certificate.
    pub fn parse(url: &str) -> Result<Target> {
        let bad = |reason: &str| invalid("URL", format!("{url:?}: {reason}"));
        let uri: Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
        let authority = match uri.authority() {
            Some(authority) if uri.scheme() == Some(&Scheme::HTTPS) => authority,
            _ => return Err(bad("only https:// URLs can be probed")),
        };
        let (host, port) = authority_parts(authority).map_err(|reason| bad(&reason))?;
        let path = match uri.query() {
            Some(query) => format!("{}?{query}", uri.path()),
            None => uri.path().to_string(),
        };
        Ok(Target {
            host,
            port: port.unwrap_or(443),
            path,
        })
    }

    /// The Host header: IPv6 addresses in brackets, the port unless it is 443.
    fn host_header(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == 443 {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// The host, without IPv6 brackets, and port of an authority; the port must be 1-65535.
fn authority_parts(authority: &Authority) -> Result<(String, Option<u16>), String> {
    if authority.as_str().contains('@') {
        return Err("user information is not supported".into());
    }
    // http's port() ignores a port that is not a number, so check what follows the host.
    let host = authority.host();
    let port = match authority.as_str().strip_prefix(host).unwrap_or_default() {
        "" => None,
        rest => Some(
            rest.strip_prefix(':')
                .and_then(|p| p.parse::<u16>().ok())
                .filter(|p| *p != 0)
                .ok_or("the port is not a number 1-65535")?,
        ),
    };
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() {
        return Err("no host".into());
    }
    Ok((host.to_string(), port))
}

/// An HTTPS GET of one URL whose certificate must chain to the given CA and name its host.
#[derive(Debug, Clone)]
pub struct Probe {
    target: Target,
    /// Where to connect instead of the URL's host, which the certificate must still name.
    dial: Option<(String, u16)>,
    name: ServerName<'static>,
    config: Arc<ClientConfig>,
    timeout: Duration,
}

impl Probe {
    /// `ca_pem` holds one or more CA certificates; `timeout` bounds the connect, the TLS handshake,
    /// the wait for the answer's head and the read of an error's body, each.
    pub fn new(url: &str, ca_pem: &[u8], timeout: Duration) -> Result<Probe> {
        let target = Target::parse(url)?;
        let name = ServerName::try_from(target.host.clone())
            .map_err(|e| invalid("URL host", format!("{:?}: {e}", target.host)))?;
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem) {
            let cert = cert.map_err(|e| invalid("CA certificate", e))?;
            roots.add(cert).map_err(|e| invalid("CA certificate", e))?;
        }
        if roots.is_empty() {
            return Err(invalid("CA file", "no CERTIFICATE block"));
        }
        if timeout.is_zero() {
            return Err(invalid("timeout", "must be above zero"));
        }
        // An explicit provider: ring is the only one built in.
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Probe {
            target,
            dial: None,
            name,
            config: Arc::new(config),
            timeout,
        })
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Connects to `addr` (`host`, `host:port`, `[v6]:port` or a bare IPv6 address; the URL's
    /// port when none) instead of the URL's host, still verifying the certificate for the URL's
    /// host, like curl's --connect-to: a Service's address from its environment variable needs
    /// no cluster DNS.
    pub fn connect_to(mut self, addr: &str) -> Result<Probe> {
        let bad = |reason: &str| invalid("connect-to address", format!("{addr:?}: {reason}"));
        // A bare IPv6 address is no authority, but it is what a Service's variable may hold.
        let (host, port) = match addr.parse::<IpAddr>() {
            Ok(_) => (addr.to_string(), None),
            Err(_) => {
                let authority: Authority = addr
                    .parse()
                    .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
                authority_parts(&authority).map_err(|reason| bad(&reason))?
            }
        };
        // Catches an unexpanded $(VAR) from the pod spec here rather than as a resolver error.
        ServerName::try_from(host.as_str()).map_err(|_| bad("not a host name or IP address"))?;
        self.dial = Some((host, port.unwrap_or(self.target.port)));
        Ok(self)
    }

    async fn connect(&self) -> Result<TcpStream, ProbeError> {
        let (host, port) = match &self.dial {
            Some((host, port)) => (host.as_str(), *port),
            None => (self.target.host.as_str(), self.target.port),
        };
        let addrs: Vec<SocketAddr> = (host, port)
            .to_socket_addrs()
            .map_err(|source| ProbeError::Resolve {
                host: host.to_string(),
                source,
            })?
            .collect();
        let mut last = std::io::Error::new(ErrorKind::NotFound, "no address");
        for addr in &addrs {
            match tokio::time::timeout(self.timeout, TcpStream::connect(addr)).await {
                Ok(Ok(tcp)) => {
                    let _ = tcp.set_nodelay(true);
                    return Ok(tcp);
                }
                Ok(Err(e)) => last = e,
                Err(_) => last = std::io::Error::new(ErrorKind::TimedOut, "connection timed out"),
            }
        }
        Err(ProbeError::Connect {
            addr: format!("{host}:{port}"),
            source: last,
        })
    }

    /// One GET; a 2xx status is success, anything else an error that says what came back.
    pub fn once(&self) -> Result<Success, ProbeError> {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(self.get())
    }

    async fn get(&self) -> Result<Success, ProbeError> {
        let tcp = self.connect().await?;
        let connector = TlsConnector::from(self.config.clone());
        let tls = self
            .within("TLS handshake", connector.connect(self.name.clone(), tcp))
            .await??;
        let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
            .max_buf_size(MAX_HEAD)
            .max_headers(MAX_HEADERS)
            .handshake(TokioIo::new(tls))
            .await?;
        tokio::spawn(connection);
        let request = Request::get(self.target.path.as_str())
            .header(HOST, self.target.host_header())
            .header(USER_AGENT, "kubesteer-certs-probe")
            .header(ACCEPT, "*/*")
            .header(CONNECTION, "close")
            .body(String::new())
            .map_err(|e| ProbeError::Io(std::io::Error::new(ErrorKind::InvalidInput, e)))?;
        let response = self
            .within("answer", sender.send_request(request))
            .await??;
        let code = response.status().as_u16();
        // The status line as sent: hyper keeps a reason phrase only when it is not the usual one.
        let reason = match response.extensions().get::<hyper::ext::ReasonPhrase>() {
            Some(reason) => String::from_utf8_lossy(reason.as_bytes()).into_owned(),
            None => response
                .status()
                .canonical_reason()
                .unwrap_or_default()
                .into(),
        };
        let line = format!("{:?} {code} {reason}", response.version())
            .trim_end()
            .to_string();
        if (200..300).contains(&code) {
            return Ok(Success { code, line });
        }
        let reason = self
            .within("error body", error_reason(response.into_body()))
            .await
            .ok()
            .flatten();
        Err(ProbeError::Status { code, line, reason })
    }

    /// `step` of one attempt, in at most the timeout.
    async fn within<T>(&self, step: &str, f: impl Future<Output = T>) -> Result<T, ProbeError> {
        tokio::time::timeout(self.timeout, f).await.map_err(|_| {
            let timeout = humantime::format_duration(self.timeout);
            ProbeError::Io(std::io::Error::new(
                ErrorKind::TimedOut,
                format!("no {step} within {timeout}"),
            ))
        })
    }

    /// Tries `1 + retries` times, `interval` apart, and tells `on_failure` of each failed attempt
    /// (numbered from 1) before the next; returns the first success or the last failure.
    pub fn run(
        &self,
        retries: u32,
        interval: Duration,
        mut on_failure: impl FnMut(u32, &ProbeError),
    ) -> Result<Success, ProbeError> {
        let mut attempt = 1;
        loop {
            match self.once() {
                Ok(success) => return Ok(success),
                Err(e) if attempt > retries => return Err(e),
                Err(e) => on_failure(attempt, &e),
            }
            attempt += 1;
            // Retrying is the point: the webhook may still be starting when `helm test` runs.
            std::thread::sleep(interval);
        }
    }
}

/// The first line of an error body of known length, when it is short text; best effort.
async fn error_reason(mut body: Incoming) -> Option<String> {
    body.size_hint().exact()?;
    let mut text = Vec::new();
    while text.len() < MAX_REASON {
        match poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            Some(Ok(frame)) => text.extend(frame.into_data().unwrap_or_default()),
            _ => break,
        }
    }
    text.truncate(MAX_REASON);
    let text = String::from_utf8_lossy(&text);
    let first = text.lines().next()?.trim();
    (!first.is_empty()).then(|| first.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls_server::serve;
    use crate::{generate, server_config, Bundle, Options};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn bundle() -> Bundle {
        let mut opts = Options::new("probe", "test");
        opts.dns.push("localhost".into());
        opts.ips.push("127.0.0.1".parse().unwrap());
        generate(&opts).unwrap()
    }

    fn bundle_for_localhost_only() -> Bundle {
        let mut opts = Options::new("probe", "test");
        opts.dns.push("localhost".into());
        generate(&opts).unwrap()
    }

    /// A TLS server on 127.0.0.1 answering the n-th connection with `answers[n]` (the last one
    /// repeats); returns its port and a count of requests it read.
    fn server(serving: &Bundle, answers: Vec<&'static str>) -> (u16, Arc<AtomicUsize>) {
        let served = Arc::new(AtomicUsize::new(0));
        let count = served.clone();
        let port = serve(server_config(&serving.serving).unwrap(), move |n, head| {
            if !head.starts_with("GET /readyz HTTP/1.1\r\n") {
                return None;
            }
            count.fetch_add(1, Ordering::SeqCst);
            let (status, body) = answers[n.min(answers.len() - 1)].split_once('|').unwrap();
            let reply = format!(
                "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            Some(reply.into_bytes())
        })
        .unwrap();
        (port, served)
    }

    fn probe(url: String, ca: &Bundle) -> Probe {
        Probe::new(&url, ca.ca.cert.as_bytes(), Duration::from_secs(5)).unwrap()
    }

    /// A TLS server on 127.0.0.1 that reads each request's head and sends `reply` as it is, or
    /// nothing for a second with None; returns its port.
    fn raw_server(serving: &Bundle, reply: Option<Vec<u8>>) -> u16 {
        serve(server_config(&serving.serving).unwrap(), move |_, _| {
            reply.clone()
        })
        .unwrap()
    }

    fn once_against(reply: Option<Vec<u8>>, timeout: Duration) -> Result<Success, ProbeError> {
        let certs = bundle();
        let port = raw_server(&certs, reply);
        let url = format!("https://127.0.0.1:{port}/readyz");
        Probe::new(&url, certs.ca.cert.as_bytes(), timeout)
            .unwrap()
            .once()
    }

    /// A head of `headers` headers of `size` bytes each.
    fn head(headers: usize, size: usize) -> Vec<u8> {
        let mut head = String::from("HTTP/1.1 200 OK\r\n");
        for n in 0..headers {
            head.push_str(&format!("x-{n:03}: {}\r\n", "a".repeat(size)));
        }
        head.push_str("content-length: 0\r\n\r\n");
        head.into_bytes()
    }

    #[test]
    fn what_is_no_http_answer_fails_as_such() {
        let second = Duration::from_secs(5);
        for reply in [
            &b"SSH-2.0-OpenSSH_9.6\r\n"[..],
            b"",
            b"HTTP/1.1 200 OK\r\ncontent-le",
        ] {
            let err = once_against(Some(reply.to_vec()), second).unwrap_err();
            assert!(
                matches!(err, ProbeError::BadResponse(_)),
                "{reply:?}: {err:?}"
            );
            assert!(
                err.to_string().starts_with("not an HTTP response: "),
                "{err}"
            );
        }
    }

    #[test]
    fn the_answer_head_is_bounded() {
        let second = Duration::from_secs(5);
        assert!(once_against(Some(head(MAX_HEADERS - 2, 8)), second).is_ok());
        assert!(once_against(Some(head(10, 1000)), second).is_ok());
        for (headers, size) in [(MAX_HEADERS + 1, 8), (2, 2 * MAX_HEAD)] {
            let err = once_against(Some(head(headers, size)), second).unwrap_err();
            assert!(
                matches!(err, ProbeError::BadResponse(_)),
                "{headers}x{size}: {err:?}"
            );
        }
    }

    #[test]
    fn an_error_body_gives_its_first_line_up_to_512_bytes() {
        let second = Duration::from_secs(5);
        let long = "x".repeat(2000);
        let reply =
            format!("HTTP/1.1 503 Service Unavailable\r\ncontent-length: 2000\r\n\r\n{long}");
        let err = once_against(Some(reply.into_bytes()), second).unwrap_err();
        let ProbeError::Status { reason, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(reason.as_deref(), Some(&long[..MAX_REASON]));
        // Only a body of known length is read.
        let reply = "HTTP/1.1 500 Internal Server Error\r\ntransfer-encoding: chunked\r\n\r\n4\r\nwhy!\r\n0\r\n\r\n";
        let err = once_against(Some(reply.into()), second).unwrap_err();
        assert_eq!(
            err.to_string(),
            "HTTP status 500 (want 2xx): HTTP/1.1 500 Internal Server Error"
        );
    }

    #[test]
    fn a_silent_server_fails_within_the_timeout() {
        let start = std::time::Instant::now();
        let err = once_against(None, Duration::from_millis(200)).unwrap_err();
        assert!(matches!(err, ProbeError::Io(_)), "{err:?}");
        assert!(
            start.elapsed() < Duration::from_millis(900),
            "{:?}",
            start.elapsed()
        );
        // A peer that accepts and never answers the TLS handshake.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!(
            "https://127.0.0.1:{}/",
            listener.local_addr().unwrap().port()
        );
        let ca = bundle().ca.cert;
        let start = std::time::Instant::now();
        let err = Probe::new(&url, ca.as_bytes(), Duration::from_millis(200))
            .unwrap()
            .once()
            .unwrap_err();
        assert!(matches!(err, ProbeError::Io(_)), "{err:?}");
        assert!(
            start.elapsed() < Duration::from_millis(900),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn a_2xx_from_a_server_the_ca_signed_succeeds() {
        let certs = bundle();
        let (port, served) = server(&certs, vec!["200 OK|ok"]);
        for host in ["127.0.0.1", "localhost"] {
            let ok = probe(format!("https://{host}:{port}/readyz"), &certs)
                .once()
                .unwrap();
            assert_eq!(ok.code, 200);
            assert_eq!(ok.line, "HTTP/1.1 200 OK");
        }
        assert_eq!(served.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn connect_to_dials_an_address_but_verifies_the_url_host() {
        let certs = bundle_for_localhost_only();
        let (port, served) = server(&certs, vec!["200 OK|ok"]);
        // A name no resolver knows, as in a cluster without DNS; the certificate carries it.
        let url = format!("https://probe.test.svc:{port}/readyz");
        for addr in ["127.0.0.1".to_string(), format!("127.0.0.1:{port}")] {
            let ok = probe(url.clone(), &certs)
                .connect_to(&addr)
                .unwrap()
                .once()
                .unwrap();
            assert_eq!(ok.code, 200, "{addr}");
        }
        assert_eq!(served.load(Ordering::SeqCst), 2);
        // The dialled address does not count for the certificate: the URL's host must match.
        let err = probe(format!("https://other.test.svc:{port}/readyz"), &certs)
            .connect_to("127.0.0.1")
            .unwrap()
            .once()
            .unwrap_err();
        assert!(matches!(err, ProbeError::Tls(_)), "{err:?}");
        for bad in ["", "$(WEBHOOK_SERVICE_HOST", "host:http", "[::1"] {
            assert!(probe(url.clone(), &certs).connect_to(bad).is_err(), "{bad}");
        }
        assert!(probe(url.clone(), &certs).connect_to("fd00::1").is_ok());
    }

    #[test]
    fn another_ca_is_refused_before_any_request() {
        let certs = bundle();
        let (port, served) = server(&certs, vec!["200 OK|ok"]);
        let err = probe(format!("https://127.0.0.1:{port}/readyz"), &bundle())
            .once()
            .unwrap_err();
        // Both CAs are named kubesteer-ca, so the other one is found and its signature fails.
        assert!(
            matches!(
                err,
                ProbeError::Tls(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::BadSignature
                        | rustls::CertificateError::UnknownIssuer
                ))
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("TLS handshake failed"), "{err}");
        assert_eq!(served.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_name_the_certificate_lacks_is_refused() {
        let certs = bundle_for_localhost_only();
        let (port, served) = server(&certs, vec!["200 OK|ok"]);
        let err = probe(format!("https://127.0.0.1:{port}/readyz"), &certs)
            .once()
            .unwrap_err();
        assert!(
            matches!(
                err,
                ProbeError::Tls(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::NotValidForName
                        | rustls::CertificateError::NotValidForNameContext { .. }
                ))
            ),
            "{err:?}"
        );
        assert_eq!(served.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_non_2xx_fails_and_says_why() {
        let certs = bundle();
        let (port, _) = server(
            &certs,
            vec!["503 Service Unavailable|caches or certificate not ready"],
        );
        let err = probe(format!("https://127.0.0.1:{port}/readyz"), &certs)
            .once()
            .unwrap_err();
        assert!(
            matches!(err, ProbeError::Status { code: 503, .. }),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "HTTP status 503 (want 2xx): HTTP/1.1 503 Service Unavailable: caches or certificate not ready"
        );
    }

    #[test]
    fn retries_until_the_server_is_ready() {
        let certs = bundle();
        let (port, served) = server(
            &certs,
            vec![
                "503 Service Unavailable|starting",
                "500 Oops|",
                "204 No Content|",
            ],
        );
        let p = probe(format!("https://127.0.0.1:{port}/readyz"), &certs);
        let mut failures = Vec::new();
        let ok = p
            .run(5, Duration::from_millis(10), |n, e| {
                failures.push((n, e.to_string()))
            })
            .unwrap();
        assert_eq!(ok.code, 204);
        assert_eq!(served.load(Ordering::SeqCst), 3);
        assert_eq!(failures.len(), 2, "{failures:?}");
        assert_eq!(failures[0].0, 1);
        assert!(failures[0].1.contains("503"), "{failures:?}");
        assert_eq!(
            failures[1].1,
            "HTTP status 500 (want 2xx): HTTP/1.1 500 Oops"
        );
    }

    #[test]
    fn gives_up_after_the_retries_with_the_last_error() {
        let port = {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let certs = bundle();
        let mut attempts = 0;
        let err = probe(format!("https://127.0.0.1:{port}/readyz"), &certs)
            .run(2, Duration::from_millis(1), |_, _| attempts += 1)
            .unwrap_err();
        assert_eq!(attempts, 2);
        assert!(matches!(err, ProbeError::Connect { .. }), "{err:?}");
    }

    #[test]
    fn urls() {
        let t = Target::parse("https://svc.ns.svc:443/readyz").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("svc.ns.svc", 443, "/readyz")
        );
        assert_eq!(t.host_header(), "svc.ns.svc");
        let t = Target::parse("https://[::1]:9443?x=1#frag").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("::1", 9443, "/?x=1")
        );
        assert_eq!(t.host_header(), "[::1]:9443");
        let t = Target::parse("https://example.com").unwrap();
        assert_eq!((t.port, t.path.as_str()), (443, "/"));
        for bad in [
            "http://svc/readyz",
            "svc:443/readyz",
            "https://:443/",
            "https://svc:0/",
            "https://svc:http/",
            "https://user@svc/",
            "https://[::1/",
            "https://svc/a b",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_ca_file_without_a_certificate_is_refused() {
        let err = Probe::new("https://svc/", b"not pem", Duration::from_secs(1)).unwrap_err();
        assert!(err.to_string().contains("no CERTIFICATE"), "{err}");
        let ca = bundle().ca.cert;
        assert!(Probe::new("https://svc/", ca.as_bytes(), Duration::ZERO).is_err());
    }
}
