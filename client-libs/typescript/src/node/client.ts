/**
 * The client: a configuration plus its open cache connections; `check()` asks for a verdict.
 *
 * @module
 */
import { existsSync } from "node:fs";
import { randomInt } from "node:crypto";
import { EXTENDED_FORMAT, offersExtended, type Bundle } from "../core/bundle.js";
import { ConfigError, FingerprintError } from "../core/errors.js";
import { Fingerprint, parseFingerprint } from "../core/fingerprint.js";
import { checkIp, checkTarget, location } from "../core/legacy.js";
import { gather, sample } from "../core/gather.js";
import { cacheDecision, type Policy, type Vote } from "../core/policy.js";
import { LocalCache } from "./cache.js";
import { CONFIG_ENV_VAR, enabledNotaries, loadConfig, whereNotariesAreRead, type Config } from "./config.js";
import { sha1Sync, sha256Sync } from "./crypto.js";
import { askNotary, type Dialer, type NotaryResult, type QueryOptions } from "./notaryio.js";

/** The decision for one (host, port, fingerprint). */
export interface Verdict {
  trusted: boolean;
  host: string;
  port: number;
  /** The canonical form of the asked fingerprint. */
  fingerprint: string;
  policy: Policy;
  standAside: boolean;
  /** The local cache answered (then `results` is empty). */
  fromCache: boolean;
  /** One entry per notary asked, in configuration order. */
  results: NotaryResult[];
  /** A sentence saying why. */
  reason: string;
  elapsedMs: number;
  /** The bounce relay's name, or null. */
  relay: string | null;
}

/** Optional arguments of a check. */
export interface CheckOptions {
  /** The DER certificate: the cache and the notaries' lists are matched by SHA-1 and SHA-256. */
  certificate?: Uint8Array;
  /** Ask the notaries to connect to this address (the one the caller connected to). */
  ip?: string;
  /** Abandon the check (the promise rejects with the signal's reason). */
  signal?: AbortSignal;
}

/** Options of a client built in code. */
export interface ClientOptions {
  /** The clock (unix seconds). */
  now?: () => number;
  /** A random integer in [0, n). */
  randomInt?: (n: number) => number;
  /** Opens TCP connections to notaries (tests). */
  dial?: Dialer;
}

function forms(fingerprint: string, certificate?: Uint8Array): Fingerprint[] {
  const fp = parseFingerprint(fingerprint);
  const out = [fp];
  if (certificate !== undefined) {
    for (const alt of [new Fingerprint("sha1", sha1Sync(certificate)), new Fingerprint("sha256", sha256Sync(certificate))]) {
      if (alt.algorithm === fp.algorithm && !alt.equals(fp)) {
        throw new FingerprintError("the certificate does not match the fingerprint");
      }
      if (!out.some((f) => f.equals(alt))) out.push(alt);
    }
  }
  return out;
}

/**
 * A configuration and its open cache connections. Keep one per configuration; `close()`
 * when done (it reopens the cache when used again).
 */
export class Client {
  readonly config: Config;
  private readonly nowFn: () => number;
  private readonly randomIntFn: (n: number) => number;
  private readonly dial: Dialer | undefined;
  private caches: LocalCache[] | undefined;
  private writer: LocalCache | undefined;

  constructor(config: Config, options: ClientOptions = {}) {
    this.config = config;
    this.nowFn = options.now ?? (() => Date.now() / 1000);
    this.randomIntFn = options.randomInt ?? ((n) => randomInt(n));
    this.dial = options.dial;
  }

  /** Loads a configuration directory (discovered when `dir` is empty). */
  static load(dir?: string, options: ClientOptions = {}): Client {
    return new Client(loadConfig(dir), options);
  }

  /** The clock this client uses (unix seconds). */
  now(): number {
    return this.nowFn();
  }

  private openCaches(): LocalCache[] {
    if (this.caches !== undefined) return this.caches;
    const caches: LocalCache[] = [];
    let writer: LocalCache | undefined;
    try {
      if (this.config.userDb) {
        writer = new LocalCache(this.config.userDb);
        caches.push(writer);
      }
      if (this.config.db) {
        if (writer === undefined) {
          writer = new LocalCache(this.config.db);
          caches.push(writer);
        } else if (existsSync(this.config.db)) {
          try {
            caches.push(new LocalCache(this.config.db, true)); // an unreadable shared cache only costs queries
          } catch {
            // ignored
          }
        }
      }
    } catch (err) {
      for (const c of caches) c.close();
      throw err;
    }
    this.caches = caches;
    this.writer = writer;
    return caches;
  }

  /** Closes the cache connections. */
  close(): void {
    for (const c of this.caches ?? []) c.close();
    this.caches = undefined;
    this.writer = undefined;
  }

  /**
   * The local cache's answer for (host, port, fingerprint) without asking any notary:
   * true on a hit. Synchronous (one indexed SQLite lookup per form).
   */
  cachedSync(host: string, port: number, fingerprint: string, certificate?: Uint8Array): boolean {
    checkTarget(host, port);
    return this.cached(location(host, port), forms(fingerprint, certificate), this.nowFn());
  }

  /** {@link cachedSync} for a DER certificate (matched by SHA-1 and SHA-256). */
  cachedCertificateSync(host: string, port: number, der: Uint8Array): boolean {
    return this.cachedSync(host, port, new Fingerprint("sha1", sha1Sync(der)).colonHex(), der);
  }

  private cached(loc: string, fps: readonly Fingerprint[], now: number): boolean {
    for (const cache of this.openCaches()) {
      for (const fp of fps) {
        if (cacheDecision(cache.lookup(loc, fp.colonHex()), now, this.config.cacheLifetime) === "hit") return true;
      }
    }
    return false;
  }

  private remember(loc: string, fps: readonly Fingerprint[], now: number): void {
    this.openCaches();
    if (this.writer === undefined) return;
    for (const fp of fps) this.writer.store(loc, fp.colonHex(), Math.trunc(now));
  }

  /**
   * Asks for a verdict on (host, port, fingerprint). A local cache hit costs one indexed
   * SQLite lookup. Rejects with a {@link ConvergeError} for bad input (fingerprint, target,
   * configuration) or cache IO; notary failures are votes in the verdict.
   */
  async check(host: string, port: number, fingerprint: string, options: CheckOptions = {}): Promise<Verdict> {
    const t0 = performance.now();
    options.signal?.throwIfAborted();
    checkTarget(host, port);
    if (options.ip) checkIp(options.ip);
    const fps = forms(fingerprint, options.certificate);
    const cfg = this.config;
    if (this.cached(location(host, port), fps, this.nowFn())) {
      return {
        trusted: true, host, port, fingerprint: fps[0]!.colonHex(), policy: cfg.agreement, standAside: cfg.standAside,
        fromCache: true, results: [], reason: "local cache hit", elapsedMs: performance.now() - t0, relay: null,
      };
    }
    return this.ask(host, port, fps, t0, options);
  }

  /** {@link check} with the DER certificate: matched by SHA-1 and SHA-256 both. */
  checkCertificate(host: string, port: number, der: Uint8Array, options: Omit<CheckOptions, "certificate"> = {}): Promise<Verdict> {
    return this.check(host, port, new Fingerprint("sha1", sha1Sync(der)).colonHex(), { ...options, certificate: der });
  }

  private async ask(host: string, port: number, fps: Fingerprint[], t0: number, options: CheckOptions): Promise<Verdict> {
    const cfg = this.config;
    let notaries = await enabledNotaries(cfg);
    if (notaries.length === 0) {
      throw new ConfigError(`no notaries enabled (looked in ${whereNotariesAreRead(cfg.notariesDir)})`);
    }
    if (cfg.extended === "require") {
      notaries = notaries.filter(offersExtended);
      if (notaries.length === 0) {
        throw new ConfigError(`extended is require but no enabled notary's bundle offers ${EXTENDED_FORMAT}`);
      }
    }
    let relay: Bundle | undefined;
    if (cfg.bounce) {
      if (notaries.length < 2) throw new ConfigError("bounce needs two enabled notaries: one relays, one votes");
      const i = this.randomIntFn(notaries.length);
      relay = notaries[i];
      notaries = [...notaries.slice(0, i), ...notaries.slice(i + 1)];
    }
    // a random sample of quorum notaries, reported in configuration order
    const chosen = sample(notaries, cfg.quorum, this.randomIntFn);
    const k = chosen.length;
    const base: QueryOptions = {
      connectTimeoutMs: cfg.connectTimeout * 1000, maxBytes: cfg.maxResponseBytes, bouncePort: cfg.bouncePort,
      ...(relay === undefined ? {} : { relay }),
      ...(options.ip ? { ip: options.ip } : {}),
      ...(this.dial === undefined ? {} : { dial: this.dial }),
    };
    const g = await gather(k, (i, signal) => {
      const b = chosen[i]!;
      const o: QueryOptions = cfg.extended !== "off" && offersExtended(b)
        ? { ...base, ext: { keys: b.signingKeys, nonce: cfg.extendedNonce, maxSkew: cfg.maxSkew, fallback: cfg.extended === "fallback" && !b.transparency, now: this.nowFn, ...(b.transparency ? { log: b.transparency } : {}) } }
        : base;
      return askNotary(b, host, port, fps, cfg.notaryTimeout * 1000, o, signal);
    }, {
      policy: cfg.agreement, standAside: cfg.standAside, earlyReturn: cfg.earlyReturn,
      totalTimeoutMs: cfg.totalTimeout * 1000, ...(options.signal ? { signal: options.signal } : {}),
    });
    const ordered: NotaryResult[] = g.results.map((r, i) => r ?? (g.timedOut
      ? { name: chosen[i]!.name, vote: "unreachable", kind: "timeout", status: null, host: "", detail: `no answer within ${cfg.totalTimeout} s`, elapsedMs: performance.now() - t0, cacheStatus: "", protocol: null }
      : { name: chosen[i]!.name, vote: "skipped", kind: "settled", status: null, host: "", detail: "verdict settled before this notary answered", elapsedMs: 0, cacheStatus: "", protocol: null }));
    const votes: Vote[] = ordered.map((r) => r.vote).filter((v) => v !== "skipped");
    const verdict = g.trusted;
    const s = votes.filter((v) => v === "success").length;
    const aside = cfg.standAside ? "unreachable stand aside" : "unreachable count as failure";
    if (verdict) this.remember(location(host, port), fps, this.nowFn());
    return {
      trusted: verdict, host, port, fingerprint: fps[0]!.colonHex(), policy: cfg.agreement, standAside: cfg.standAside,
      fromCache: false, results: ordered, reason: `${s} of ${k} notaries confirm (${cfg.agreement}, ${aside})`,
      elapsedMs: performance.now() - t0, relay: relay?.name ?? null,
    };
  }
}

const shared = new Map<string, Client>();

/**
 * Asks whether `fingerprint` (SHA-1 or SHA-256, any case, colons optional) is the
 * certificate the notaries see for `host:port`, with the discovered configuration
 * (`$CONVERGE_CONFIG_DIR`, `~/.config/converge`, `/usr/local/etc/converge`) or
 * `options.configDir`. The client behind it is kept open across calls.
 *
 * @example
 * ```ts
 * import { converge } from "@converge-notary/client";
 * const v = await converge("www.example.org", 443, "8F:C0:79:...");
 * if (!v.trusted) throw new Error(v.reason);
 * ```
 */
export async function converge(
  host: string, port: number, fingerprint: string, options: CheckOptions & { configDir?: string } = {},
): Promise<Verdict> {
  return sharedClient(options.configDir).check(host, port, fingerprint, options);
}

/** The client `converge()` uses for a configuration directory (loaded once). */
export function sharedClient(configDir?: string): Client {
  const key = configDir ? `dir:${configDir}` : `env:${process.env[CONFIG_ENV_VAR] ?? ""}`;
  let c = shared.get(key);
  if (c === undefined) {
    c = Client.load(configDir);
    shared.set(key, c);
  }
  return c;
}

/** Closes every client {@link converge} opened. */
export function closeSharedClients(): void {
  for (const c of shared.values()) c.close();
  shared.clear();
}
