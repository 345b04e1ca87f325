/**
 * The configuration directory shared by every converge client.
 *
 * Discovery:
 *
 * 1. an explicit directory (must exist);
 * 2. `$CONVERGE_CONFIG_DIR` (must exist when set);
 * 3. `~/.config/converge` (`$XDG_CONFIG_HOME/converge` when set), if it exists;
 * 4. `/usr/local/etc/converge`, if it exists.
 *
 * Layout: `converge.config` (JSON, every key optional), `notaries-available/*.notary` and
 * `notaries-enabled/*.notary` symlinks to `../notaries-available/...`. The 2014 libraries'
 * layout, where `notaries-dir` names the enabled folder itself, is read too.
 *
 * @module
 */
import { existsSync, lstatSync, readdirSync, readFileSync, realpathSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { isAbsolute, join, resolve } from "node:path";
import { parseBundle, offersExtended, type Bundle } from "../core/bundle.js";
import { BundleError, ConfigError, ConvergeError } from "../core/errors.js";
import { DEFAULT_MAX_SKEW, type ExtendedMode } from "../core/extended.js";
import { fromUtf8 } from "../core/bytes.js";
import { asInt, isObject, parseJson, type JsonObject } from "../core/json.js";
import { MAX_RESPONSE_BYTES } from "../core/legacy.js";
import { parsePolicy, type Policy } from "../core/policy.js";
import { nodeCrypto } from "./crypto.js";

/** The configuration file's name. */
export const CONFIG_FILE = "converge.config";
/** The environment variable naming the configuration directory. */
export const CONFIG_ENV_VAR = "CONVERGE_CONFIG_DIR";
/** The system-wide configuration directory. */
export const SYSTEM_CONFIG_DIR = "/usr/local/etc/converge";
/** Seven days: how long a trusted verdict stays in the local cache by default. */
export const DEFAULT_CACHE_LIFETIME = 7 * 24 * 3600;
const MAX_CONFIG_BYTES = 64 * 1024;
const MAX_NOTARY_FILES = 64;

/** Everything a check needs. */
export interface Config {
  /** The configuration directory ("" when built by hand). */
  directory: string;
  /** The shared cache file; null = no cache. */
  db: string | null;
  /** A per-user cache file written instead of `db` (which is then only read); null = none. */
  userDb: string | null;
  /** Where the bundles are; null = none. */
  notariesDir: string | null;
  agreement: Policy;
  /** How many notaries to ask (a random sample when more are enabled). */
  quorum: number;
  /** Seconds to connect and handshake with one notary host. */
  connectTimeout: number;
  /** Seconds for one notary's answer. */
  notaryTimeout: number;
  /** Seconds for the whole check. */
  totalTimeout: number;
  /** Seconds a trusted verdict stays in the cache; null = forever. */
  cacheLifetime: number | null;
  standAside: boolean;
  earlyReturn: boolean;
  maxResponseBytes: number;
  bounce: boolean;
  bouncePort: number;
  extended: ExtendedMode;
  /** A fresh random nonce with every extended query. */
  extendedNonce: boolean;
  /** Seconds an extended answer's time may differ from ours. */
  maxSkew: number;
  /** When set, used instead of `notariesDir`. */
  bundles?: Bundle[];
}

/** The defaults of every key (no directory, no cache, no notaries). */
export function defaultConfig(): Config {
  return {
    directory: "", db: null, userDb: null, notariesDir: null, agreement: "majority", quorum: 3,
    connectTimeout: 3, notaryTimeout: 5, totalTimeout: 10, cacheLifetime: DEFAULT_CACHE_LIFETIME,
    standAside: true, earlyReturn: true, maxResponseBytes: MAX_RESPONSE_BYTES, bounce: false,
    bouncePort: 4242, extended: "prefer", extendedNonce: true, maxSkew: DEFAULT_MAX_SKEW,
  };
}

function isDir(p: string): boolean {
  try {
    return statSync(p).isDirectory();
  } catch {
    return false;
  }
}

function userConfigDir(env: NodeJS.ProcessEnv): string {
  if (env["XDG_CONFIG_HOME"]) return join(env["XDG_CONFIG_HOME"], "converge");
  return join(env["HOME"] || homedir(), ".config", "converge");
}

/** Finds the configuration directory (`explicit` may be undefined or ""). */
export function discoverConfigDir(explicit?: string, env: NodeJS.ProcessEnv = process.env): string {
  if (explicit) {
    if (!isDir(explicit)) throw new ConfigError(`configuration directory ${explicit} does not exist`);
    return explicit;
  }
  const fromEnv = env[CONFIG_ENV_VAR];
  if (fromEnv) {
    if (!isDir(fromEnv)) throw new ConfigError(`$${CONFIG_ENV_VAR}=${fromEnv} is not a directory`);
    return fromEnv;
  }
  for (const d of [userConfigDir(env), SYSTEM_CONFIG_DIR]) if (isDir(d)) return d;
  throw new ConfigError(
    `no configuration: set $${CONFIG_ENV_VAR}, or create ${userConfigDir(env)} or ${SYSTEM_CONFIG_DIR}`,
  );
}

const KNOWN_KEYS = new Set([
  "db", "userdb", "notaries-dir", "notary-agreement", "quorum", "connect-timeout", "notary-timeout",
  "total-timeout", "cache-lifetime", "stand-aside", "early-return", "bounce", "bounce-port",
  "max-response-bytes", "extended", "extended-nonce", "max-skew",
]);

function num(raw: JsonObject, key: string, def: number, low: number, high: number): number {
  const v = raw.get(key);
  if (v === undefined) return def;
  const f = typeof v === "number" ? v : undefined;
  if (f === undefined || !(f >= low && f <= high)) {
    throw new ConfigError(`${key} must be a number in [${low}, ${high}]`);
  }
  return f;
}

function int(raw: JsonObject, key: string, def: number, low: number, high: number, what: string): number {
  const v = raw.get(key);
  if (v === undefined) return def;
  const n = asInt(v);
  if (n === undefined || n < low || n > high) throw new ConfigError(`${key} must be ${what}`);
  return n;
}

function bool(raw: JsonObject, key: string, def: boolean): boolean {
  const v = raw.get(key);
  if (v === undefined) return def;
  if (typeof v !== "boolean") throw new ConfigError(`${key} must be true or false`);
  return v;
}

function expandUser(p: string): string {
  if (p === "~" || p.startsWith("~/")) return join(homedir(), p.slice(1));
  return p;
}

function path(dir: string, raw: JsonObject, key: string, def: string | null): string | null {
  const v = raw.get(key);
  if (v === undefined) return def === null ? null : join(dir, def);
  if (v === null) return null;
  if (typeof v !== "string" || v === "") throw new ConfigError(`${key} must be a path`);
  const s = expandUser(v);
  return isAbsolute(s) ? s : join(dir, s);
}

/** Validates the decoded `converge.config` of `dir`. */
export function parseConfig(dir: string, raw: JsonObject): Config {
  const unknown = [...raw.keys()].filter((k) => !KNOWN_KEYS.has(k)).sort();
  if (unknown.length > 0) throw new ConfigError(`unknown configuration keys: ${unknown.join(", ")}`);
  const c = defaultConfig();
  c.directory = dir;
  c.bouncePort = int(raw, "bounce-port", 4242, 1, 65535, "an integer port 1..65535");
  c.cacheLifetime = raw.has("cache-lifetime") && raw.get("cache-lifetime") === null
    ? null : num(raw, "cache-lifetime", DEFAULT_CACHE_LIFETIME, 0, 10 * 365 * 86400);
  c.quorum = int(raw, "quorum", 3, 1, 16, "an integer 1..16");
  c.maxResponseBytes = int(raw, "max-response-bytes", MAX_RESPONSE_BYTES, 1024, 16 * 1024 * 1024,
    "an integer 1024..16777216");
  if (raw.has("extended")) {
    const m = raw.get("extended");
    if (m !== "off" && m !== "prefer" && m !== "fallback" && m !== "require") {
      throw new ConfigError("extended must be one of off, prefer, fallback, require");
    }
    c.extended = m;
  }
  c.maxSkew = int(raw, "max-skew", DEFAULT_MAX_SKEW, 0, 86400, "an integer 0..86400 (seconds)");
  c.extendedNonce = bool(raw, "extended-nonce", true);
  if (raw.has("notary-agreement")) {
    const s = raw.get("notary-agreement");
    if (typeof s !== "string") throw new ConfigError("notary-agreement must be a string");
    c.agreement = parsePolicy(s);
  }
  c.db = path(dir, raw, "db", "cache.sqlite3");
  c.userDb = path(dir, raw, "userdb", null);
  c.notariesDir = path(dir, raw, "notaries-dir", ".");
  c.connectTimeout = num(raw, "connect-timeout", 3, 0.01, 600);
  c.notaryTimeout = num(raw, "notary-timeout", 5, 0.01, 600);
  c.totalTimeout = num(raw, "total-timeout", 10, 0.01, 3600);
  c.standAside = bool(raw, "stand-aside", true);
  c.earlyReturn = bool(raw, "early-return", true);
  c.bounce = bool(raw, "bounce", false);
  return c;
}

function readBounded(p: string, limit: number): Uint8Array {
  const data = readFileSync(p);
  if (data.length > limit) throw new ConfigError(`${p} larger than ${limit} bytes`);
  return data;
}

/** Discovers (`explicit` may be empty) and loads a configuration directory. */
export function loadConfig(explicit?: string, env: NodeJS.ProcessEnv = process.env): Config {
  const dir = discoverConfigDir(explicit, env);
  const f = join(dir, CONFIG_FILE);
  let raw: JsonObject = new Map();
  if (existsSync(f)) {
    let data: Uint8Array;
    try {
      data = readBounded(f, MAX_CONFIG_BYTES);
    } catch (err) {
      if (err instanceof ConvergeError) throw err;
      throw new ConfigError(`cannot read ${f}: ${(err as Error).message}`);
    }
    const text = fromUtf8(data);
    const v = text === undefined ? undefined : parseJson(text);
    if (v === undefined) throw new ConfigError(`${f} is not JSON`);
    if (!isObject(v)) throw new ConfigError(`${f} must hold a JSON object`);
    raw = v;
  }
  return parseConfig(dir, raw);
}

/** One bundle of notaries-available/ (or a plain file in notaries-enabled/). */
export interface NotaryFile {
  bundle: Bundle;
  enabled: boolean;
  path: string;
}

function hasSubfolders(dir: string): boolean {
  return isDir(join(dir, "notaries-available")) || isDir(join(dir, "notaries-enabled"));
}

function notaryFiles(dir: string): string[] {
  try {
    return readdirSync(dir).filter((n) => n.endsWith(".notary")).sort().map((n) => join(dir, n));
  } catch {
    return [];
  }
}

/**
 * Whether `dir` is the 2014 libraries' layout: `notaries-dir` names the enabled folder
 * itself, which holds `.notary` files and neither subfolder.
 */
export function isFlatLayout(dir: string): boolean {
  return !hasSubfolders(dir) && notaryFiles(dir).length > 0;
}

/** Where {@link listNotaries} looks, for "no notaries enabled" messages. */
export function whereNotariesAreRead(dir: string | null): string {
  if (!dir) return "no notaries-dir";
  const standard = join(dir, "notaries-enabled") + "/";
  return hasSubfolders(dir) ? standard : `${standard} and ${join(dir, "*.notary")}`;
}

function realAbs(p: string): string | undefined {
  try {
    return resolve(realpathSync(p));
  } catch {
    return undefined;
  }
}

/**
 * Every bundle in `dir`, sorted by file name; plain files placed in notaries-enabled/ count
 * as enabled bundles too. In the 2014 layout every `.notary` file of `dir` itself is enabled,
 * symlinks followed.
 */
export async function listNotaries(dir: string): Promise<NotaryFile[]> {
  const avail = join(dir, "notaries-available");
  const enabledDir = join(dir, "notaries-enabled");
  const enabledTargets = new Set<string>();
  const extra: string[] = [];
  const flat = isFlatLayout(dir);
  if (flat) {
    for (const p of notaryFiles(dir)) if (existsSync(p)) extra.push(p); // a dangling link is ignored
  } else if (isDir(enabledDir)) {
    for (const p of notaryFiles(enabledDir)) {
      let st;
      try {
        st = lstatSync(p);
      } catch {
        continue;
      }
      if (st.isSymbolicLink()) {
        const real = realAbs(p);
        if (real !== undefined) enabledTargets.add(real);
      } else {
        extra.push(p);
      }
    }
  }
  const files = !flat && isDir(avail) ? notaryFiles(avail) : [];
  if (files.length + extra.length > MAX_NOTARY_FILES) throw new ConfigError(`more than ${MAX_NOTARY_FILES} notary bundles`);
  const extraSet = new Set(extra);
  const out: NotaryFile[] = [];
  for (const p of [...files, ...extra]) {
    let data: Uint8Array;
    try {
      data = readFileSync(p);
    } catch (err) {
      throw new ConfigError(`cannot read ${p}: ${(err as Error).message}`);
    }
    let bundle: Bundle;
    try {
      bundle = await parseBundle(nodeCrypto, data);
    } catch (err) {
      if (err instanceof BundleError) throw new BundleError(`${p}: ${err.message.replace(/^converge: bundle: /, "")}`);
      throw err;
    }
    let enabled = extraSet.has(p);
    if (!enabled) {
      const real = realAbs(p);
      enabled = real !== undefined && enabledTargets.has(real);
    }
    out.push({ bundle, enabled, path: p });
  }
  return out;
}

/** The enabled logical notaries, de-duplicated by name (the first file wins). */
export async function enabledNotaries(config: Config): Promise<Bundle[]> {
  let found: Bundle[] = [];
  if (config.bundles !== undefined) found = config.bundles;
  else if (config.notariesDir) found = (await listNotaries(config.notariesDir)).filter((f) => f.enabled).map((f) => f.bundle);
  const seen = new Set<string>();
  return found.filter((b) => (seen.has(b.name) ? false : (seen.add(b.name), true)));
}

export { offersExtended };
