//! The client: a configuration plus its open cache connections; [`Client::check`] asks for a
//! verdict.

use crate::bundle::{Bundle, EXTENDED_FORMAT};
use crate::cache::LocalCache;
use crate::config::{load_config, where_notaries_are_read, Config, ExtendedMode, CONFIG_ENV_VAR};
use crate::error::{err, Error, Kind, Result};
use crate::fingerprint::{parse_fingerprint, Algorithm, Fingerprint};
use crate::legacy::{check_ip, check_target, location};
use crate::notary_io::{ask_notary, ExtQuery, NotaryResult, QueryOptions};
use crate::policy::{cache_decision, decide, settled, CacheDecision, Policy, Vote};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The decision for one (host, port, fingerprint).
#[derive(Debug, Clone)]
pub struct Verdict {
    pub trusted: bool,
    pub host: String,
    pub port: u16,
    /// The canonical form of the asked fingerprint.
    pub fingerprint: String,
    pub policy: Policy,
    pub stand_aside: bool,
    /// The local cache answered (then `results` is empty).
    pub from_cache: bool,
    /// One entry per notary asked, in configuration order.
    pub results: Vec<NotaryResult>,
    /// A sentence saying why.
    pub reason: String,
    pub elapsed: Duration,
    /// The bounce relay's name.
    pub relay: Option<String>,
}

/// Optional arguments of a check.
#[derive(Debug, Clone, Default)]
pub struct CheckOptions {
    /// The DER certificate: the cache and the notaries' lists are matched by SHA-1 and SHA-256.
    pub certificate: Option<Vec<u8>>,
    /// Ask the notaries to connect to this address (the one the caller connected to).
    pub ip: Option<String>,
}

struct Caches {
    all: Vec<LocalCache>,
    writer: Option<usize>,
}

/// A configuration and its open cache connections. Safe to share between threads (wrap it in
/// an `Arc`); keep one per configuration.
pub struct Client {
    config: Config,
    now: Arc<dyn Fn() -> f64 + Send + Sync>,
    random: Box<dyn Fn(usize) -> usize + Send + Sync>,
    caches: Mutex<Option<Caches>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("config", &self.config).finish_non_exhaustive()
    }
}

fn system_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

fn random_below(n: usize) -> usize {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 8];
    ring::rand::SystemRandom::new().fill(&mut b).expect("system randomness");
    (u64::from_le_bytes(b) % n.max(1) as u64) as usize
}

fn forms(fingerprint: &str, certificate: Option<&[u8]>) -> Result<Vec<Fingerprint>> {
    let fp = parse_fingerprint(fingerprint)?;
    let mut out = vec![fp.clone()];
    if let Some(der) = certificate {
        for alg in [Algorithm::Sha1, Algorithm::Sha256] {
            let alt = Fingerprint::of(der, alg);
            if alt.algorithm == fp.algorithm && alt != fp {
                return err(Kind::Fingerprint, "the certificate does not match the fingerprint");
            }
            if !out.contains(&alt) {
                out.push(alt);
            }
        }
    }
    Ok(out)
}

impl Client {
    /// A client for a configuration built in code.
    pub fn new(config: Config) -> Client {
        Client { config, now: Arc::new(system_now), random: Box::new(random_below), caches: Mutex::new(None) }
    }

    /// Loads a configuration directory (discovered when `dir` is `None`).
    pub fn load(dir: Option<&Path>) -> Result<Client> {
        Ok(Client::new(load_config(dir)?))
    }

    /// Replaces the clock (unix seconds; tests).
    pub fn with_clock(mut self, now: impl Fn() -> f64 + Send + Sync + 'static) -> Client {
        self.now = Arc::new(now);
        self
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    fn with_caches<T>(&self, f: impl FnOnce(&Caches) -> Result<T>) -> Result<T> {
        let mut guard = self.caches.lock().map_err(|_| Error::new(Kind::CacheIo, "cache lock poisoned"))?;
        if guard.is_none() {
            let mut all = Vec::new();
            let mut writer = None;
            if let Some(u) = &self.config.user_db {
                all.push(LocalCache::open(u, false)?);
                writer = Some(0);
            }
            if let Some(db) = &self.config.db {
                if writer.is_none() {
                    all.push(LocalCache::open(db, false)?);
                    writer = Some(all.len() - 1);
                } else if db.exists() {
                    if let Ok(c) = LocalCache::open(db, true) {
                        all.push(c); // an unreadable shared cache only costs notary queries
                    }
                }
            }
            *guard = Some(Caches { all, writer });
        }
        f(guard.as_ref().expect("opened"))
    }

    /// Closes the cache connections (reopened when used again).
    pub fn close(&self) {
        if let Ok(mut g) = self.caches.lock() {
            *g = None;
        }
    }

    fn cached(&self, loc: &str, fps: &[Fingerprint]) -> Result<bool> {
        let now = (self.now)();
        let lifetime = self.config.cache_lifetime;
        self.with_caches(|c| {
            for cache in &c.all {
                for fp in fps {
                    if cache_decision(cache.lookup(loc, &fp.colon_hex())?, now, lifetime) == CacheDecision::Hit {
                        return Ok(true);
                    }
                }
            }
            Ok(false)
        })
    }

    fn remember(&self, loc: &str, fps: &[Fingerprint]) -> Result<()> {
        let now = (self.now)() as i64;
        self.with_caches(|c| {
            if let Some(w) = c.writer {
                for fp in fps {
                    c.all[w].store(loc, &fp.colon_hex(), now)?;
                }
            }
            Ok(())
        })
    }

    /// The local cache's answer without asking any notary: `true` on a hit.
    pub fn cached_certificate(&self, host: &str, port: u16, der: &[u8]) -> Result<bool> {
        check_target(host, port as u32)?;
        let fps = forms(&Fingerprint::of(der, Algorithm::Sha1).colon_hex(), Some(der))?;
        self.cached(&location(host, port), &fps)
    }

    /// Asks for a verdict on (host, port, fingerprint). A local cache hit costs one indexed
    /// SQLite lookup. Errors are bad input (fingerprint, target, configuration) or cache IO;
    /// notary failures are votes in the verdict.
    pub fn check(&self, host: &str, port: u16, fingerprint: &str) -> Result<Verdict> {
        self.check_with(host, port, fingerprint, &CheckOptions::default())
    }

    /// [`Client::check`] with the DER certificate: matched by SHA-1 and SHA-256 both.
    pub fn check_certificate(&self, host: &str, port: u16, der: &[u8]) -> Result<Verdict> {
        let fp = Fingerprint::of(der, Algorithm::Sha1).colon_hex();
        self.check_with(host, port, &fp, &CheckOptions { certificate: Some(der.to_vec()), ip: None })
    }

    /// [`Client::check`] with options.
    pub fn check_with(&self, host: &str, port: u16, fingerprint: &str, opts: &CheckOptions) -> Result<Verdict> {
        let t0 = Instant::now();
        check_target(host, port as u32)?;
        if let Some(ip) = opts.ip.as_deref().filter(|i| !i.is_empty()) {
            check_ip(ip)?;
        }
        let fps = forms(fingerprint, opts.certificate.as_deref())?;
        let cfg = &self.config;
        if self.cached(&location(host, port), &fps)? {
            return Ok(Verdict {
                trusted: true,
                host: host.to_string(),
                port,
                fingerprint: fps[0].colon_hex(),
                policy: cfg.agreement,
                stand_aside: cfg.stand_aside,
                from_cache: true,
                results: vec![],
                reason: "local cache hit".into(),
                elapsed: t0.elapsed(),
                relay: None,
            });
        }
        self.ask(host, port, fps, t0, opts.ip.clone().filter(|i| !i.is_empty()))
    }

    fn ask(&self, host: &str, port: u16, fps: Vec<Fingerprint>, t0: Instant, ip: Option<String>) -> Result<Verdict> {
        let cfg = &self.config;
        let mut notaries = cfg.notaries()?;
        if notaries.is_empty() {
            return err(
                Kind::Config,
                format!("no notaries enabled (looked in {})", where_notaries_are_read(cfg.notaries_dir.as_deref())),
            );
        }
        if cfg.extended == ExtendedMode::Require {
            notaries.retain(Bundle::offers_extended);
            if notaries.is_empty() {
                return err(
                    Kind::Config,
                    format!("extended is require but no enabled notary's bundle offers {EXTENDED_FORMAT}"),
                );
            }
        }
        let mut relay: Option<Bundle> = None;
        if cfg.bounce {
            if notaries.len() < 2 {
                return err(Kind::Config, "bounce needs two enabled notaries: one relays, one votes");
            }
            relay = Some(notaries.remove((self.random)(notaries.len())));
        }
        // a random sample of quorum notaries, reported in configuration order
        let mut idx: Vec<usize> = (0..notaries.len()).collect();
        let k = cfg.quorum.min(notaries.len());
        for i in 0..k {
            let j = i + (self.random)(idx.len() - i);
            idx.swap(i, j);
        }
        let mut picked = idx[..k].to_vec();
        picked.sort_unstable();
        let chosen: Vec<Bundle> = picked.into_iter().map(|i| notaries[i].clone()).collect();
        let total_deadline = t0 + Duration::from_secs_f64(cfg.total_timeout);
        let base = QueryOptions {
            connect_timeout: Duration::from_secs_f64(cfg.connect_timeout),
            max_bytes: cfg.max_response_bytes,
            relay: relay.clone(),
            relay_dests: vec![],
            bounce_port: cfg.bounce_port,
            ext: None,
            ip,
        };
        let (tx, rx) = mpsc::channel::<(usize, NotaryResult)>();
        let wanted = Arc::new(fps.clone());
        for (i, b) in chosen.iter().enumerate() {
            let mut o = base.clone();
            if cfg.extended != ExtendedMode::Off && b.offers_extended() {
                o.ext = Some(ExtQuery {
                    keys: b.signing_keys.clone(),
                    nonce: cfg.extended_nonce,
                    max_skew: cfg.max_skew,
                    fallback: cfg.extended == ExtendedMode::Fallback && b.transparency.is_none(),
                    now: self.now.clone(),
                    log: b.transparency.clone(),
                });
            }
            let (tx, b, wanted, host) = (tx.clone(), b.clone(), wanted.clone(), host.to_string());
            let notary_timeout = Duration::from_secs_f64(cfg.notary_timeout);
            std::thread::spawn(move || {
                let _ = tx.send((i, ask_notary(&b, &host, port, &wanted, notary_timeout, &o, total_deadline)));
            });
        }
        drop(tx);
        let mut results: Vec<Option<NotaryResult>> = vec![None; k];
        let mut pending = k;
        let mut early: Option<bool> = None;
        let mut timed_out = false;
        while pending > 0 {
            let Some(left) = total_deadline.checked_duration_since(Instant::now()) else {
                timed_out = true;
                break;
            };
            match rx.recv_timeout(left) {
                Ok((i, r)) => {
                    results[i] = Some(r);
                    pending -= 1;
                    if cfg.early_return {
                        let votes: Vec<Vote> = results.iter().flatten().map(|r| r.vote).collect();
                        early = settled(cfg.agreement, &votes, pending, cfg.stand_aside);
                        if early.is_some() {
                            break;
                        }
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    timed_out = true;
                    break;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        let ordered: Vec<NotaryResult> = results
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                r.unwrap_or_else(|| {
                    let (vote, kind, detail) = if timed_out {
                        (Vote::Unreachable, "timeout", format!("no answer within {} s", cfg.total_timeout))
                    } else {
                        (Vote::Skipped, "settled", "verdict settled before this notary answered".to_string())
                    };
                    NotaryResult {
                        name: chosen[i].name.clone(),
                        vote,
                        kind: kind.into(),
                        status: None,
                        host: String::new(),
                        detail,
                        elapsed: if timed_out { t0.elapsed() } else { Duration::ZERO },
                        protocol: None,
                        answer: None,
                    }
                })
            })
            .collect();
        let votes: Vec<Vote> = ordered.iter().map(|r| r.vote).filter(|v| *v != Vote::Skipped).collect();
        let verdict = match early {
            Some(v) if !timed_out => v,
            _ => decide(cfg.agreement, &votes, cfg.stand_aside),
        };
        if verdict {
            self.remember(&location(host, port), &fps)?;
        }
        let s = votes.iter().filter(|v| **v == Vote::Success).count();
        let aside = if cfg.stand_aside { "unreachable stand aside" } else { "unreachable count as failure" };
        Ok(Verdict {
            trusted: verdict,
            host: host.to_string(),
            port,
            fingerprint: fps[0].colon_hex(),
            policy: cfg.agreement,
            stand_aside: cfg.stand_aside,
            from_cache: false,
            results: ordered,
            reason: format!("{s} of {k} notaries confirm ({}, {aside})", cfg.agreement.as_str()),
            elapsed: t0.elapsed(),
            relay: relay.map(|r| r.name),
        })
    }
}

fn shared() -> &'static Mutex<HashMap<Option<PathBuf>, Arc<Client>>> {
    static SHARED: OnceLock<Mutex<HashMap<Option<PathBuf>, Arc<Client>>>> = OnceLock::new();
    SHARED.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The client [`converge`] uses for a configuration directory (`None`: discovered), loaded once.
pub fn shared_client(dir: Option<&Path>) -> Result<Arc<Client>> {
    let key = dir
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os(CONFIG_ENV_VAR).map(|d| PathBuf::from(format!("env:{}", d.to_string_lossy()))));
    let mut m = shared().lock().map_err(|_| Error::new(Kind::Config, "client registry poisoned"))?;
    if let Some(c) = m.get(&key) {
        return Ok(c.clone());
    }
    let c = Arc::new(Client::load(dir)?);
    m.insert(key, c.clone());
    Ok(c)
}

/// Asks whether `fingerprint` (SHA-1 or SHA-256, any case, colons optional) is the certificate
/// the notaries see for `host:port`, with the discovered configuration (`$CONVERGE_CONFIG_DIR`,
/// `~/.config/converge`, `/usr/local/etc/converge`). The client behind it is kept open.
///
/// ```no_run
/// let v = converge::converge("www.example.org", 443, "8F:C0:79:E8:14:77:7F:68:8B:A4:C8:07:D9:BD:67:D6:2A:F7:1A:EB")?;
/// if !v.trusted {
///     eprintln!("not trusted: {}", v.reason);
/// }
/// # Ok::<(), converge::Error>(())
/// ```
pub fn converge(host: &str, port: u16, fingerprint: &str) -> Result<Verdict> {
    shared_client(None)?.check(host, port, fingerprint)
}
