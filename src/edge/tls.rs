//! TLS at the edge: a rustls server config built from the PEM files
//! `server.tls_cert` (the chain, leaf first) and `server.tls_key`, offering HTTP/2
//! and HTTP/1.1 by ALPN, and rebuilt without a restart when the files change (a
//! certificate renewed by cert-manager or certbot) or a reload names other files.
//! A pair that does not load is refused loudly and the running one stays.

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

/// The certificate and key files, and what was read from them.
struct Loaded {
    cert: PathBuf,
    key: PathBuf,
    /// Hash of both files' bytes: a change means a new pair to load.
    fingerprint: u64,
}

/// The current TLS acceptor of a listener.
pub struct Tls {
    acceptor: ArcSwap<TlsAcceptor>,
    loaded: Mutex<Loaded>,
}

fn read_pair(cert: &Path, key: &Path) -> Result<(Vec<u8>, Vec<u8>), String> {
    let read = |path: &Path, what: &str| {
        std::fs::read(path)
            .map_err(|e| format!("server.{what}: cannot read {}: {e}", path.display()))
    };
    Ok((read(cert, "tls_cert")?, read(key, "tls_key")?))
}

fn fingerprint(cert: &[u8], key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(cert) ^ xxhash_rust::xxh3::xxh3_64(key).rotate_left(1)
}

/// A rustls server config from PEM bytes, offering `h2` then `http/1.1`.
///
/// # Errors
/// Which file is wrong and why (no certificate, no key, a key that does not match).
pub fn server_config(cert_pem: &[u8], key_pem: &[u8]) -> Result<ServerConfig, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("server.tls_cert: not a PEM certificate chain ({e})"))?;
    if chain.is_empty() {
        return Err("server.tls_cert: no certificate in the file".into());
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| format!("server.tls_key: no PEM private key in the file ({e})"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("server.tls_cert/tls_key: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

impl Tls {
    /// Loads `cert` and `key`.
    ///
    /// # Errors
    /// As [`server_config`], or a file that cannot be read.
    pub fn load(cert: &Path, key: &Path) -> Result<Tls, String> {
        let (cert_pem, key_pem) = read_pair(cert, key)?;
        let config = server_config(&cert_pem, &key_pem)?;
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
    pub fn refresh(&self, cert: &Path, key: &Path) -> Result<bool, String> {
        let (cert_pem, key_pem) = read_pair(cert, key)?;
        let print = fingerprint(&cert_pem, &key_pem);
        let mut loaded = self.loaded.lock().expect("tls lock is never poisoned");
        if loaded.cert == cert && loaded.key == key && loaded.fingerprint == print {
            return Ok(false);
        }
        let config = server_config(&cert_pem, &key_pem)?;
        self.acceptor
            .store(Arc::new(TlsAcceptor::from(Arc::new(config))));
        *loaded = Loaded {
            cert: cert.to_owned(),
            key: key.to_owned(),
            fingerprint: print,
        };
        Ok(true)
    }

    /// The files in use.
    pub fn files(&self) -> (PathBuf, PathBuf) {
        let loaded = self.loaded.lock().expect("tls lock is never poisoned");
        (loaded.cert.clone(), loaded.key.clone())
    }

    /// Polls the files every `every` until `stop`, loading a renewed pair; a pair
    /// that does not load is logged and the running one kept.
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
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = ticker.tick() => {}
                }
                let (cert, key) = tls.files();
                match tls.refresh(&cert, &key) {
                    Ok(true) => tracing::info!(cert = %cert.display(), "TLS certificate reloaded"),
                    Ok(false) => {}
                    Err(e) => tracing::error!(error = %e, "TLS certificate refused; keeping the running one"),
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

    #[test]
    fn a_pair_loads_with_alpn_and_bad_files_name_themselves() {
        let (cert, key) = pair("localhost");
        let config = server_config(cert.as_bytes(), key.as_bytes()).unwrap();
        assert_eq!(
            config.alpn_protocols,
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        );
        let e = server_config(b"", key.as_bytes()).unwrap_err();
        assert!(e.starts_with("server.tls_cert"), "{e}");
        let e = server_config(cert.as_bytes(), b"junk").unwrap_err();
        assert!(e.starts_with("server.tls_key"), "{e}");
        let (_, other_key) = pair("localhost");
        assert!(
            server_config(cert.as_bytes(), other_key.as_bytes()).is_err(),
            "a key of another cert"
        );
    }

    #[test]
    fn refresh_loads_a_changed_pair_and_keeps_the_old_on_error() {
        let dir = std::env::temp_dir().join(format!("mdproxy-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert_path, key_path) = (dir.join("c.pem"), dir.join("k.pem"));
        let (cert, key) = pair("localhost");
        std::fs::write(&cert_path, &cert).unwrap();
        std::fs::write(&key_path, &key).unwrap();
        let tls = Tls::load(&cert_path, &key_path).unwrap();
        let first = tls.acceptor();
        assert!(!tls.refresh(&cert_path, &key_path).unwrap(), "unchanged");
        std::fs::write(&cert_path, "not pem").unwrap();
        assert!(tls.refresh(&cert_path, &key_path).is_err());
        assert!(Arc::ptr_eq(&first, &tls.acceptor()), "the old pair stays");
        let (cert, key) = pair("localhost");
        std::fs::write(&cert_path, &cert).unwrap();
        std::fs::write(&key_path, &key).unwrap();
        assert!(tls.refresh(&cert_path, &key_path).unwrap());
        assert!(!Arc::ptr_eq(&first, &tls.acceptor()));
        std::fs::remove_dir_all(&dir).ok();
    }
}
