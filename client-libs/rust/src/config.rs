//! The configuration directory shared by every converge client.
//!
//! Discovery: an explicit directory (must exist); `$CONVERGE_CONFIG_DIR` (must exist when set);
//! `~/.config/converge` (`$XDG_CONFIG_HOME/converge` when set), if it exists;
//! `/usr/local/etc/converge`, if it exists. Layout: `converge.config` (JSON, every key
//! optional), `notaries-available/*.notary` and `notaries-enabled/*.notary` symlinks. The 2014
//! libraries' layout, where `notaries-dir` names the enabled folder itself, is read too.

use crate::bundle::{parse_bundle, Bundle};
use crate::error::{err, Error, Kind, Result};
use crate::extended::DEFAULT_MAX_SKEW;
use crate::json::{as_int, parse};
use crate::legacy::MAX_RESPONSE_BYTES;
use crate::policy::{parse_policy, Policy};
use serde_json::{Map, Value};
use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The configuration file's name.
pub const CONFIG_FILE: &str = "converge.config";
/// The environment variable naming the configuration directory.
pub const CONFIG_ENV_VAR: &str = "CONVERGE_CONFIG_DIR";
/// The system-wide configuration directory.
pub const SYSTEM_CONFIG_DIR: &str = "/usr/local/etc/converge";
/// How long a trusted verdict stays cached by default (seconds).
pub const DEFAULT_CACHE_LIFETIME: f64 = 7.0 * 24.0 * 3600.0;
const MAX_CONFIG_BYTES: u64 = 64 * 1024;
const MAX_NOTARY_FILES: usize = 64;

/// The `extended` configuration modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtendedMode {
    /// Legacy only.
    Off,
    /// Extended with notaries whose bundle offers it (the default).
    Prefer,
    /// As prefer, legacy when such a notary does not offer it after all.
    Fallback,
    /// Ask only notaries that offer it.
    Require,
}

/// Everything a check needs.
#[derive(Debug, Clone)]
pub struct Config {
    pub directory: Option<PathBuf>,
    /// The shared cache file; `None` = no cache.
    pub db: Option<PathBuf>,
    /// A per-user cache file written instead of `db` (then only read).
    pub user_db: Option<PathBuf>,
    pub notaries_dir: Option<PathBuf>,
    pub agreement: Policy,
    pub quorum: usize,
    /// Seconds.
    pub connect_timeout: f64,
    pub notary_timeout: f64,
    pub total_timeout: f64,
    /// Seconds; `None` = forever.
    pub cache_lifetime: Option<f64>,
    pub stand_aside: bool,
    pub early_return: bool,
    pub max_response_bytes: usize,
    pub bounce: bool,
    pub bounce_port: u16,
    pub extended: ExtendedMode,
    pub extended_nonce: bool,
    pub max_skew: i64,
    /// When set, used instead of `notaries_dir`.
    pub bundles: Option<Vec<Bundle>>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            directory: None,
            db: None,
            user_db: None,
            notaries_dir: None,
            agreement: Policy::Majority,
            quorum: 3,
            connect_timeout: 3.0,
            notary_timeout: 5.0,
            total_timeout: 10.0,
            cache_lifetime: Some(DEFAULT_CACHE_LIFETIME),
            stand_aside: true,
            early_return: true,
            max_response_bytes: MAX_RESPONSE_BYTES,
            bounce: false,
            bounce_port: 4242,
            extended: ExtendedMode::Prefer,
            extended_nonce: true,
            max_skew: DEFAULT_MAX_SKEW,
            bundles: None,
        }
    }
}

fn cfg_err<T>(message: impl Into<String>) -> Result<T> {
    err(Kind::Config, message)
}

fn user_config_dir(getenv: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    if let Some(x) = getenv("XDG_CONFIG_HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("converge");
    }
    let home = getenv("HOME").unwrap_or_default();
    PathBuf::from(home).join(".config").join("converge")
}

/// Finds the configuration directory (`explicit` may be `None`).
pub fn discover_config_dir(explicit: Option<&Path>, getenv: &dyn Fn(&str) -> Option<String>) -> Result<PathBuf> {
    if let Some(d) = explicit {
        if !d.is_dir() {
            return cfg_err(format!("configuration directory {} does not exist", d.display()));
        }
        return Ok(d.to_path_buf());
    }
    if let Some(d) = getenv(CONFIG_ENV_VAR).filter(|d| !d.is_empty()) {
        if !Path::new(&d).is_dir() {
            return cfg_err(format!("${CONFIG_ENV_VAR}={d} is not a directory"));
        }
        return Ok(PathBuf::from(d));
    }
    for d in [user_config_dir(getenv), PathBuf::from(SYSTEM_CONFIG_DIR)] {
        if d.is_dir() {
            return Ok(d);
        }
    }
    cfg_err(format!(
        "no configuration: set ${CONFIG_ENV_VAR}, or create {} or {SYSTEM_CONFIG_DIR}",
        user_config_dir(getenv).display()
    ))
}

const KNOWN_KEYS: &[&str] = &[
    "db",
    "userdb",
    "notaries-dir",
    "notary-agreement",
    "quorum",
    "connect-timeout",
    "notary-timeout",
    "total-timeout",
    "cache-lifetime",
    "stand-aside",
    "early-return",
    "bounce",
    "bounce-port",
    "max-response-bytes",
    "extended",
    "extended-nonce",
    "max-skew",
];

fn number(raw: &Map<String, Value>, key: &str, def: f64, low: f64, high: f64) -> Result<f64> {
    match raw.get(key) {
        None => Ok(def),
        Some(Value::Number(n)) => match n.to_string().parse::<f64>() {
            Ok(f) if f >= low && f <= high => Ok(f),
            _ => cfg_err(format!("{key} must be a number in [{low}, {high}]")),
        },
        Some(_) => cfg_err(format!("{key} must be a number in [{low}, {high}]")),
    }
}

fn int(raw: &Map<String, Value>, key: &str, def: i64, low: i64, high: i64, what: &str) -> Result<i64> {
    match raw.get(key) {
        None => Ok(def),
        Some(v) => match as_int(v) {
            Some(n) if n >= low && n <= high => Ok(n),
            _ => cfg_err(format!("{key} must be {what}")),
        },
    }
}

fn boolean(raw: &Map<String, Value>, key: &str, def: bool) -> Result<bool> {
    match raw.get(key) {
        None => Ok(def),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => cfg_err(format!("{key} must be true or false")),
    }
}

fn path(dir: &Path, raw: &Map<String, Value>, key: &str, def: Option<&str>) -> Result<Option<PathBuf>> {
    match raw.get(key) {
        None => Ok(def.map(|d| dir.join(d))),
        Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => {
            let expanded = if s == "~" || s.starts_with("~/") {
                PathBuf::from(std::env::var("HOME").unwrap_or_default())
                    .join(s.trim_start_matches('~').trim_start_matches('/'))
            } else {
                PathBuf::from(s)
            };
            Ok(Some(if expanded.is_absolute() { expanded } else { dir.join(expanded) }))
        }
        Some(_) => cfg_err(format!("{key} must be a path")),
    }
}

/// Validates the decoded `converge.config` of `dir`.
pub fn parse_config(dir: &Path, raw: &Map<String, Value>) -> Result<Config> {
    let mut unknown: Vec<&String> = raw.keys().filter(|k| !KNOWN_KEYS.contains(&k.as_str())).collect();
    if !unknown.is_empty() {
        unknown.sort();
        return cfg_err(format!(
            "unknown configuration keys: {}",
            unknown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    let mut c = Config { directory: Some(dir.to_path_buf()), ..Config::default() };
    c.bounce_port = int(raw, "bounce-port", 4242, 1, 65535, "an integer port 1..65535")? as u16;
    c.cache_lifetime = match raw.get("cache-lifetime") {
        Some(Value::Null) => None,
        _ => Some(number(raw, "cache-lifetime", DEFAULT_CACHE_LIFETIME, 0.0, 10.0 * 365.0 * 86400.0)?),
    };
    c.quorum = int(raw, "quorum", 3, 1, 16, "an integer 1..16")? as usize;
    c.max_response_bytes =
        int(raw, "max-response-bytes", MAX_RESPONSE_BYTES as i64, 1024, 16 * 1024 * 1024, "an integer 1024..16777216")?
            as usize;
    if let Some(m) = raw.get("extended") {
        c.extended = match m.as_str() {
            Some("off") => ExtendedMode::Off,
            Some("prefer") => ExtendedMode::Prefer,
            Some("fallback") => ExtendedMode::Fallback,
            Some("require") => ExtendedMode::Require,
            _ => return cfg_err("extended must be one of off, prefer, fallback, require"),
        };
    }
    c.max_skew = int(raw, "max-skew", DEFAULT_MAX_SKEW, 0, 86400, "an integer 0..86400 (seconds)")?;
    c.extended_nonce = boolean(raw, "extended-nonce", true)?;
    if let Some(a) = raw.get("notary-agreement") {
        let Some(s) = a.as_str() else { return cfg_err("notary-agreement must be a string") };
        c.agreement = parse_policy(s)?;
    }
    c.db = path(dir, raw, "db", Some("cache.sqlite3"))?;
    c.user_db = path(dir, raw, "userdb", None)?;
    c.notaries_dir = path(dir, raw, "notaries-dir", Some("."))?;
    c.connect_timeout = number(raw, "connect-timeout", 3.0, 0.01, 600.0)?;
    c.notary_timeout = number(raw, "notary-timeout", 5.0, 0.01, 600.0)?;
    c.total_timeout = number(raw, "total-timeout", 10.0, 0.01, 3600.0)?;
    c.stand_aside = boolean(raw, "stand-aside", true)?;
    c.early_return = boolean(raw, "early-return", true)?;
    c.bounce = boolean(raw, "bounce", false)?;
    Ok(c)
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Discovers (`explicit` may be `None`) and loads a configuration directory.
pub fn load_config(explicit: Option<&Path>) -> Result<Config> {
    load_config_with(explicit, &env)
}

/// [`load_config`] with the environment given as a function (tests).
pub fn load_config_with(explicit: Option<&Path>, getenv: &dyn Fn(&str) -> Option<String>) -> Result<Config> {
    let dir = discover_config_dir(explicit, getenv)?;
    let f = dir.join(CONFIG_FILE);
    let mut raw = Map::new();
    if f.exists() {
        let meta =
            fs::metadata(&f).map_err(|e| Error::new(Kind::Config, format!("cannot read {}: {e}", f.display())))?;
        if meta.len() > MAX_CONFIG_BYTES {
            return cfg_err(format!("{} larger than {MAX_CONFIG_BYTES} bytes", f.display()));
        }
        let data = fs::read(&f).map_err(|e| Error::new(Kind::Config, format!("cannot read {}: {e}", f.display())))?;
        match parse(&data) {
            None => return cfg_err(format!("{} is not JSON", f.display())),
            Some(Value::Object(m)) => raw = m,
            Some(_) => return cfg_err(format!("{} must hold a JSON object", f.display())),
        }
    }
    parse_config(&dir, &raw)
}

/// One bundle of notaries-available/ (or a plain file in notaries-enabled/).
#[derive(Debug, Clone)]
pub struct NotaryFile {
    pub bundle: Bundle,
    pub enabled: bool,
    pub path: PathBuf,
}

fn has_subfolders(dir: &Path) -> bool {
    dir.join("notaries-available").is_dir() || dir.join("notaries-enabled").is_dir()
}

fn notary_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "notary"))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Whether `dir` is the 2014 libraries' layout: it holds `.notary` files and neither subfolder.
pub fn is_flat_layout(dir: &Path) -> bool {
    !has_subfolders(dir) && !notary_files(dir).is_empty()
}

/// Where [`list_notaries`] looks, for "no notaries enabled" messages.
pub fn where_notaries_are_read(dir: Option<&Path>) -> String {
    let Some(dir) = dir else { return "no notaries-dir".into() };
    let standard = format!("{}/", dir.join("notaries-enabled").display());
    if has_subfolders(dir) {
        standard
    } else {
        format!("{standard} and {}", dir.join("*.notary").display())
    }
}

/// Every bundle in `dir`, sorted by file name; plain files placed in notaries-enabled/ count as
/// enabled bundles too. In the 2014 layout every `.notary` file of `dir` itself is enabled.
pub fn list_notaries(dir: &Path) -> Result<Vec<NotaryFile>> {
    let avail = dir.join("notaries-available");
    let enabled_dir = dir.join("notaries-enabled");
    let mut enabled_targets: HashSet<PathBuf> = HashSet::new();
    let mut extra: Vec<PathBuf> = Vec::new();
    let flat = is_flat_layout(dir);
    if flat {
        extra = notary_files(dir).into_iter().filter(|p| p.exists()).collect(); // dangling links ignored
    } else if enabled_dir.is_dir() {
        for p in notary_files(&enabled_dir) {
            let Ok(meta) = fs::symlink_metadata(&p) else { continue };
            if meta.file_type().is_symlink() {
                if let Ok(real) = fs::canonicalize(&p) {
                    enabled_targets.insert(real);
                }
            } else {
                extra.push(p);
            }
        }
    }
    let files = if !flat && avail.is_dir() { notary_files(&avail) } else { Vec::new() };
    if files.len() + extra.len() > MAX_NOTARY_FILES {
        return cfg_err(format!("more than {MAX_NOTARY_FILES} notary bundles"));
    }
    let mut out = Vec::new();
    for p in files.iter().chain(extra.iter()) {
        let data = fs::read(p).map_err(|e| Error::new(Kind::Config, format!("cannot read {}: {e}", p.display())))?;
        let bundle =
            parse_bundle(&data).map_err(|e| Error::new(Kind::Bundle, format!("{}: {}", p.display(), e.message())))?;
        let enabled = extra.contains(p) || fs::canonicalize(p).is_ok_and(|r| enabled_targets.contains(&r));
        out.push(NotaryFile { bundle, enabled, path: p.clone() });
    }
    Ok(out)
}

impl Config {
    /// The enabled logical notaries, de-duplicated by name (the first file wins).
    pub fn notaries(&self) -> Result<Vec<Bundle>> {
        let found: Vec<Bundle> = if let Some(b) = &self.bundles {
            b.clone()
        } else if let Some(d) = &self.notaries_dir {
            list_notaries(d)?.into_iter().filter(|f| f.enabled).map(|f| f.bundle).collect()
        } else {
            Vec::new()
        };
        let mut seen = HashSet::new();
        Ok(found.into_iter().filter(|b| seen.insert(b.name.clone())).collect())
    }
}
