//! TLS at the edge: a rustls server config built from the PEM files
//! `server.tls_cert` (the chain, leaf first) and `server.tls_key`, offering HTTP/2
//! and HTTP/1.1 by ALPN, and rebuilt without a restart when the files change (a
//! certificate renewed by cert-manager or certbot) or a reload names other files.
//! A pair that does not load is refused loudly (once per change of the files, not on
//! every poll) and the running one stays. [`check`] is the same verdict for the
//! config loader, and a private key others may read draws a warning.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use mdproxy_config::{Config, Problem};

/// The certificate and key files, and what was read from them.
struct Loaded {
    cert: PathBuf,
    key: PathBuf,
    /// Hash of both files' bytes: a change means a new pair to load.
    fingerprint: u64,
}

/// A pair loaded and checked, not in use yet ([`Tls::prepare`]).
pub struct Prepared {
    acceptor: TlsAcceptor,
    loaded: Loaded,
}

/// The current TLS acceptor of a listener.
pub struct Tls {
    acceptor: ArcSwap<TlsAcceptor>,
    loaded: Mutex<Loaded>,
}

/// Why a certificate and key pair did not load, naming the key at fault
/// (`server.tls_cert`, `server.tls_key`, or both for a key that does not fit).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct TlsError {
    pub key: &'static str,
    pub reason: String,
}

impl TlsError {
    fn new(key: &'static str, reason: impl Into<String>) -> TlsError {
        TlsError {
            key,
            reason: reason.into(),
        }
    }
}

/// Why a pair was refused, and a fingerprint of what was refused (the files' bytes,
/// or the read error), so that the same broken files are reported once.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{error}")]
pub struct Refused {
    pub error: TlsError,
    fingerprint: u64,
}

/// What one look at the files found, for the watcher's log.
#[derive(Debug, PartialEq, Eq)]
enum Look {
    Unchanged,
    Reloaded,
    /// Refused, and not the pair refused last time: worth a log line.
    Refused(String),
    /// The same pair as refused last time: already said.
    StillRefused,
}

fn read_pair(cert: &Path, key: &Path) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
    let read = |path: &Path, what: &'static str| {
        std::fs::read(path)
            .map_err(|e| TlsError::new(what, format!("cannot read {}: {e}", path.display())))
    };
    Ok((read(cert, "server.tls_cert")?, read(key, "server.tls_key")?))
}

fn fingerprint(cert: &[u8], key: &[u8]) -> u64 {
    twox_hash::XxHash3_64::oneshot(cert) ^ twox_hash::XxHash3_64::oneshot(key).rotate_left(1)
}

/// A rustls server config from PEM bytes, offering `h2` then `http/1.1`.
///
/// # Errors
/// Which file is wrong and why (no certificate, no key, a key that does not match).
pub fn server_config(cert_pem: &[u8], key_pem: &[u8]) -> Result<ServerConfig, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| {
            TlsError::new(
                "server.tls_cert",
                format!("not a PEM certificate chain ({e})"),
            )
        })?;
    if chain.is_empty() {
        return Err(TlsError::new(
            "server.tls_cert",
            "no certificate in the file",
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| {
        TlsError::new(
            "server.tls_key",
            format!("no PEM private key in the file ({e})"),
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::new("server.tls_cert", format!("TLS: {e}")))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::new("server.tls_cert/tls_key", e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The TLS files' verdict for the config loader (a [`mdproxy_config::Check`]):
/// whether `server.tls_cert` and `server.tls_key` load as a pair. It reads the
/// files, so `serve` and `check-config` run it, a reload does not (the reload's own
/// [`Tls::refresh`] refuses a pair that does not load).
pub fn check(config: &Config, _env: &dyn mdproxy_config::Env) -> Vec<Problem> {
    let server = &config.server;
    if server.tls_cert.is_empty() || server.tls_key.is_empty() {
        return Vec::new();
    }
    let (cert, key) = (Path::new(&server.tls_cert), Path::new(&server.tls_key));
    match read_pair(cert, key).and_then(|(c, k)| server_config(&c, &k).map(drop)) {
        Ok(()) => Vec::new(),
        Err(e) => vec![Problem::new(e.key, &e.reason)],
    }
}

/// A warning when the private key at `path` may be read by its group or by others
/// (on Unix, by its mode): anyone who can read it can pose as this server.
pub fn key_warning(path: &Path) -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
        (mode & 0o077 != 0).then(|| {
            format!(
                "server.tls_key: {} is readable by its group or others (mode {mode:03o}); chmod 600 it",
                path.display()
            )
        })
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

fn warn_if_readable(key: &Path) {
    if let Some(warning) = key_warning(key) {
        tracing::warn!("{warning}");
    }
}

impl Tls {
    /// Loads `cert` and `key`; warns when others may read the key.
    ///
    /// # Errors
    /// As [`server_config`], or a file that cannot be read.
    pub fn load(cert: &Path, key: &Path) -> Result<Tls, TlsError> {
        let (cert_pem, key_pem) = read_pair(cert, key)?;
        let config = server_config(&cert_pem, &key_pem)?;
        warn_if_readable(key);
        Ok(Tls {
            acceptor: ArcSwap::from_pointee(TlsAcceptor::from(Arc::new(config))),
            loaded: Mutex::new(Loaded {
                cert: cert.to_owned(),
                key: key.to_owned(),
                fingerprint: fingerprint(&cert_pem, &key_pem),
            }),
        })
    }

    /// The acceptor for a new connection.
    pub fn acceptor(&self) -> Arc<TlsAcceptor> {
        self.acceptor.load_full()
    }

    /// Loads `cert` and `key` again when they are other files or their content
    /// changed; returns whether a new pair is in use.
    ///
    /// # Errors
    /// Why the new pair was refused; the running one stays.
    pub fn refresh(&self, cert: &Path, key: &Path) -> Result<bool, Refused> {
        let prepared = self.prepare(cert, key)?;
        let changed = prepared.is_some();
        if let Some(pair) = prepared {
            self.install(pair);
        }
        Ok(changed)
    }

    /// Loads and checks `cert` and `key` without using them: `None` when they are
    /// the files in use, unchanged. A reload prepares the pair first (it may refuse
    /// the reload) and installs it only once the rest of the reload is applied.
    ///
    /// # Errors
    /// Why the pair was refused; the running one stays.
    pub fn prepare(&self, cert: &Path, key: &Path) -> Result<Option<Prepared>, Refused> {
        let (cert_pem, key_pem) = read_pair(cert, key).map_err(|error| Refused {
            fingerprint: twox_hash::XxHash3_64::oneshot(error.to_string().as_bytes()),
            error,
        })?;
        let print = fingerprint(&cert_pem, &key_pem);
        {
            let loaded = self.loaded.lock().expect("tls lock is never poisoned");
            if loaded.cert == cert && loaded.key == key && loaded.fingerprint == print {
                return Ok(None);
            }
        }
        let config = server_config(&cert_pem, &key_pem).map_err(|error| Refused {
            error,
            fingerprint: print,
        })?;
        warn_if_readable(key);
        Ok(Some(Prepared {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            loaded: Loaded {
                cert: cert.to_owned(),
                key: key.to_owned(),
                fingerprint: print,
            },
        }))
    }

    /// Puts a [`prepare`](Self::prepare)d pair in use for new connections.
    pub fn install(&self, pair: Prepared) {
        let mut loaded = self.loaded.lock().expect("tls lock is never poisoned");
        self.acceptor.store(Arc::new(pair.acceptor));
        *loaded = pair.loaded;
    }

    /// The files in use.
    pub fn files(&self) -> (PathBuf, PathBuf) {
        let loaded = self.loaded.lock().expect("tls lock is never poisoned");
        (loaded.cert.clone(), loaded.key.clone())
    }

    /// Looks at the files in use once; `refused` remembers the pair refused last,
    /// so a broken pair left on disk is reported once, not on every poll.
    fn look(&self, refused: &mut Option<u64>) -> Look {
        let (cert, key) = self.files();
        match self.refresh(&cert, &key) {
            Ok(reloaded) => {
                *refused = None;
                if reloaded {
                    Look::Reloaded
                } else {
                    Look::Unchanged
                }
            }
            Err(e) if *refused == Some(e.fingerprint) => Look::StillRefused,
            Err(e) => {
                *refused = Some(e.fingerprint);
                Look::Refused(e.error.to_string())
            }
        }
    }

    /// Polls the files every `every` until `stop`, loading a renewed pair; a pair
    /// that does not load is logged (once until the files change) and the running
    /// one kept.
    pub fn watch(
        self: &Arc<Self>,
        every: Duration,
        stop: CancellationToken,
        tracker: &TaskTracker,
    ) {
        let tls = Arc::clone(self);
        tracker.spawn(async move {
            let mut ticker = tokio::time::interval(every);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticker.tick().await;
            let mut refused = None;
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = ticker.tick() => {}
                }
                match tls.look(&mut refused) {
                    Look::Reloaded => {
                        let (cert, _) = tls.files();
                        tracing::info!(cert = %cert.display(), "TLS certificate reloaded");
                    }
                    Look::Refused(error) => tracing::error!(
                        error = %error,
                        "TLS certificate refused; keeping the running one (said once until the files change)"
                    ),
                    Look::Unchanged | Look::StillRefused => {}
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(name: &str) -> (String, String) {
        let cert = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
        (cert.cert.pem(), cert.signing_key.serialize_pem())
    }

    /// A fresh directory named `name`, and the paths of a certificate and its key
    /// in it, holding a new valid pair.
    fn files(name: &str) -> (PathBuf, PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("mdproxy-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert_path, key_path) = (dir.join("c.pem"), dir.join("k.pem"));
        write_pair(&cert_path, &key_path);
        (dir, cert_path, key_path)
    }

    fn write_pair(cert_path: &Path, key_path: &Path) {
        let (cert, key) = pair("localhost");
        std::fs::write(cert_path, cert).unwrap();
        std::fs::write(key_path, key).unwrap();
    }

    #[test]
    fn a_pair_loads_with_alpn_and_bad_files_name_themselves() {
        let (cert, key) = pair("localhost");
        let config = server_config(cert.as_bytes(), key.as_bytes()).unwrap();
        assert_eq!(
            config.alpn_protocols,
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        );
        let e = server_config(b"", key.as_bytes()).unwrap_err();
        assert_eq!(e.key, "server.tls_cert", "{e}");
        let e = server_config(cert.as_bytes(), b"junk").unwrap_err();
        assert_eq!(e.key, "server.tls_key", "{e}");
        let (_, other_key) = pair("localhost");
        assert!(
            server_config(cert.as_bytes(), other_key.as_bytes()).is_err(),
            "a key of another cert"
        );
    }

    #[test]
    fn refresh_loads_a_changed_pair_and_keeps_the_old_on_error() {
        let (dir, cert_path, key_path) = files("tls");
        let tls = Tls::load(&cert_path, &key_path).unwrap();
        let first = tls.acceptor();
        assert!(!tls.refresh(&cert_path, &key_path).unwrap(), "unchanged");
        std::fs::write(&cert_path, "not pem").unwrap();
        assert!(tls.refresh(&cert_path, &key_path).is_err());
        assert!(Arc::ptr_eq(&first, &tls.acceptor()), "the old pair stays");
        write_pair(&cert_path, &key_path);
        assert!(tls.refresh(&cert_path, &key_path).unwrap());
        assert!(!Arc::ptr_eq(&first, &tls.acceptor()));
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Security review: a broken certificate left on disk logged the same ERROR on
    /// every poll (about 1,800 lines an hour). It is reported once per change of
    /// the files.
    #[test]
    fn a_broken_pair_is_reported_once_per_change() {
        let (dir, cert_path, key_path) = files("tls-once");
        let tls = Tls::load(&cert_path, &key_path).unwrap();
        let mut refused = None;
        assert_eq!(tls.look(&mut refused), Look::Unchanged);
        std::fs::write(&cert_path, "not pem").unwrap();
        assert!(matches!(tls.look(&mut refused), Look::Refused(_)));
        for _ in 0..3 {
            assert_eq!(tls.look(&mut refused), Look::StillRefused);
        }
        std::fs::write(&cert_path, "not pem either").unwrap();
        assert!(
            matches!(tls.look(&mut refused), Look::Refused(_)),
            "a new change"
        );
        assert_eq!(tls.look(&mut refused), Look::StillRefused);
        std::fs::remove_file(&cert_path).unwrap();
        assert!(matches!(tls.look(&mut refused), Look::Refused(e) if e.contains("cannot read")));
        assert_eq!(tls.look(&mut refused), Look::StillRefused);
        write_pair(&cert_path, &key_path);
        assert_eq!(tls.look(&mut refused), Look::Reloaded);
        std::fs::write(&cert_path, "not pem").unwrap();
        assert!(
            matches!(tls.look(&mut refused), Look::Refused(_)),
            "broken again after a good pair: said again"
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn check_names_the_file_that_does_not_load() {
        let (dir, cert_path, key_path) = files("tls-check");
        let key = std::fs::read(&key_path).unwrap();
        std::fs::write(&key_path, "junk").unwrap();
        let mut config = Config::default();
        config.server.tls_cert = cert_path.display().to_string();
        config.server.tls_key = key_path.display().to_string();
        let found = check(&config, &|_: &str| None);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].key.as_deref(), Some("server.tls_key"));
        std::fs::write(&key_path, &key).unwrap();
        assert!(check(&config, &|_: &str| None).is_empty());
        config.server.tls_cert = dir.join("missing.pem").display().to_string();
        let found = check(&config, &|_: &str| None);
        assert_eq!(found[0].key.as_deref(), Some("server.tls_cert"));
        assert!(found[0].message.contains("cannot read"), "{found:?}");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Security review: a private key readable by group or others drew no warning.
    #[cfg(unix)]
    #[test]
    fn a_key_others_may_read_draws_a_warning() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("mdproxy-tls-mode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key_path = dir.join("k.pem");
        std::fs::write(&key_path, "key").unwrap();
        let mode = |m| std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(m));
        mode(0o600).unwrap();
        assert_eq!(key_warning(&key_path), None);
        for open in [0o640, 0o604, 0o644] {
            mode(open).unwrap();
            let warning = key_warning(&key_path).unwrap();
            assert!(warning.contains(&format!("{open:03o}")), "{warning}");
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
