/**
 * The extension's decision, without any browser API (tested under Node): ask the enabled
 * notaries in the extended format over HTTPS, verify each answer against the bundle's
 * signing keys (the pin: a browser cannot pin a notary's TLS certificate), bind it to the
 * target, the fingerprint, a fresh nonce and the clock, and combine the votes with the
 * consensus policy. The same core as the TypeScript library.
 */
import {
  ANSWER_MEDIA_TYPE, ANSWER_PATH, asInt, asString, cacheDecision, deadline, evaluateExtended,
  EXTENDED_FORMAT, extendedRequestBody, Fingerprint, fromUtf8, gather, isIpLiteral, isObject, newNonce,
  offersExtended, parseJson, raceHosts, sample, trustedKeys, type Bundle, type CryptoProvider, type HttpResponse,
  type Policy, type Vote,
} from "@converge/core";

/** What the user set on the options page. */
export interface Settings {
  policy: Policy;
  quorum: number;
  standAside: boolean;
  earlyReturn: boolean;
  /**
   * Host names the user chose not to check: exact names, or `*.example` for every name under
   * `example`. Judged on the URL's name only, never on an address (which whoever answers DNS,
   * or a proxy, chooses).
   */
  exemptNames: string[];
  /** Also leave unchecked single-label names and names under .local and .home.arpa (opt-in). */
  exemptLocalNames: boolean;
  /** Seconds a confirmed certificate stays cached; null = forever. */
  cacheLifetime: number | null;
  notaryTimeoutMs: number;
  totalTimeoutMs: number;
  /** Seconds an answer's time may differ from this browser's clock. */
  maxSkew: number;
  /** Sites kept in the verdict cache (least recently used dropped first). */
  cacheEntries: number;
  /** Block-page records kept (least recently used dropped first). */
  blockedEntries: number;
  /** Notary queries per second for everything but top-level pages, all tabs together; 0: no limit. */
  queryRate: number;
  /** How many of those may go at once after a quiet spell. */
  queryBurst: number;
  /** Queries for one tab's subresources in flight at once (the rest wait in the tab's queue). */
  tabConcurrency: number;
}

export const DEFAULT_SETTINGS: Settings = {
  policy: "majority", quorum: 3, standAside: true, earlyReturn: true, exemptNames: [], exemptLocalNames: false,
  cacheLifetime: 7 * 24 * 3600, notaryTimeoutMs: 5000, totalTimeoutMs: 10000, maxSkew: 300,
  cacheEntries: 5000, blockedEntries: 100, queryRate: 8, queryBurst: 32, tabConcurrency: 4,
};

/** What the certificate a notary saw looked like (from its signed answer). */
export interface Observation {
  sha256: string;
  sha1: string;
  firstSeen: number;
  lastSeen: number;
}

/** One notary's answer. */
export interface NotaryAnswer {
  name: string;
  vote: Vote;
  /** match, mismatch, target-unreachable, refused, a verification failure, unreachable, timeout, busy, legacy-only, settled. */
  kind: string;
  status: number | null;
  detail: string;
  /** What the notary saw (verified answers only). */
  observations: Observation[];
}

/** The decision about one site's certificate. */
export interface SiteVerdict {
  trusted: boolean;
  host: string;
  port: number;
  sha1: string;
  sha256: string;
  /** cache, notaries, user (trusted by the user), exempt (a name the user exempted), unconfigured (no notary enabled). */
  source: "cache" | "notaries" | "user" | "exempt" | "unconfigured";
  results: NotaryAnswer[];
  reason: string;
  /** No notary gave a verified answer: the fail-closed state. */
  notariesUnreachable: boolean;
  /** A notary asked this browser to slow down (429): "notary busy", not "unreachable". */
  notaryBusy?: boolean;
  /** What this browser sent the site before the verdict (said on the block page). */
  sent?: string;
  /** A request with a body that was not sent (the site not yet confirmed in this session). */
  held?: boolean;
  at: number;
}

/** What the engine needs from its surroundings. */
export interface Deps {
  fetch: (url: string, init: RequestInit) => Promise<Response>;
  crypto: CryptoProvider;
  /** Unix seconds. */
  now: () => number;
  randomInt: (n: number) => number;
  /** A notary answered 429: it asks for no query for this many seconds. */
  busy?: (seconds: number) => void;
}

const MAX_ANSWER_BYTES = 64 * 1024;

/** A name in lower case without a trailing dot or IPv6 brackets. */
function normalName(host: string): string {
  return host.replace(/^\[|\]$/g, "").replace(/\.$/, "").toLowerCase();
}

/**
 * Whether the user chose not to check this host name: listed (exactly, or under a `*.`
 * entry), or, when opted in, a single-label name or one under .local or .home.arpa. Only the
 * URL's name counts: a public name that resolved to a private address is checked, and so is
 * every request through a proxy, whatever the proxy's address.
 */
export function isExempt(host: string, s: Pick<Settings, "exemptNames" | "exemptLocalNames">): boolean {
  const h = normalName(host);
  if (!h) return false;
  for (const raw of s.exemptNames) {
    const e = normalName(raw.trim());
    if (!e) continue;
    if (e.startsWith("*.") ? h.endsWith(e.slice(1)) && h.length > e.length - 1 : h === e) return true;
  }
  if (!s.exemptLocalNames || isIpLiteral(h)) return false;
  return !h.includes(".") || h.endsWith(".local") || h.endsWith(".home.arpa");
}

/** Seconds from a Retry-After header (delta seconds or an HTTP date), within [1, 60]. */
export function retryAfterSeconds(header: string | null, nowMs: number): number {
  const v = (header ?? "").trim();
  let secs = /^\d{1,9}$/.test(v) ? Number(v) : Number.isNaN(Date.parse(v)) ? 1 : Math.ceil((Date.parse(v) - nowMs) / 1000);
  if (!Number.isFinite(secs)) secs = 1;
  return Math.min(60, Math.max(1, secs));
}

function urlHost(host: string): string {
  return host.includes(":") ? `[${host}]` : host;
}

async function readBounded(res: Response, limit: number): Promise<Uint8Array> {
  const reader = res.body?.getReader();
  if (reader === undefined) return new Uint8Array(0);
  const parts: Uint8Array[] = [];
  let n = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    n += value.length;
    if (n > limit) {
      await reader.cancel();
      throw new Error(`answer larger than ${limit} bytes`);
    }
    parts.push(value);
  }
  const out = new Uint8Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function observationsOf(answer: Uint8Array | undefined): Observation[] {
  const text = answer === undefined ? undefined : fromUtf8(answer);
  const doc = text === undefined ? undefined : parseJson(text);
  const stmt = isObject(doc) ? doc.get("statement") : undefined;
  const obs = isObject(stmt) ? stmt.get("observations") : undefined;
  if (!Array.isArray(obs)) return [];
  return obs.filter(isObject).map((o) => ({
    sha256: asString(o.get("sha256")) ?? "", sha1: asString(o.get("sha1")) ?? "",
    firstSeen: asInt(o.get("first_seen")) ?? 0, lastSeen: asInt(o.get("last_seen")) ?? 0,
  }));
}

/** Asks one notary (its hosts raced) about host:port with the SHA-256 fingerprint. */
export async function askNotary(
  bundle: Bundle, host: string, port: number, fp: Fingerprint, s: Settings, deps: Deps, signal: AbortSignal,
): Promise<NotaryAnswer> {
  const base = { name: bundle.name, status: null, observations: [] as Observation[] };
  if (!offersExtended(bundle)) {
    return {
      ...base, vote: "unreachable", kind: "legacy-only",
      detail: `the bundle does not offer ${EXTENDED_FORMAT}: a legacy answer cannot be checked from a browser`,
    };
  }
  const limit = deadline(signal, s.notaryTimeoutMs);
  const one = async (h: Bundle["hosts"][number], sig: AbortSignal): Promise<NotaryAnswer> => {
    const nonce = newNonce(deps.crypto);
    try {
      const res = await deps.fetch(`https://${urlHost(h.host)}:${h.sslPort}${ANSWER_PATH}`, {
        // a bundle naming a transparency log asks for a proof of inclusion with every answer
        method: "POST", body: extendedRequestBody(host, port, fp, nonce, undefined, bundle.transparency !== undefined),
        headers: { "Content-Type": "application/json", Accept: ANSWER_MEDIA_TYPE },
        signal: sig, cache: "no-store", credentials: "omit", redirect: "error", referrerPolicy: "no-referrer",
      });
      if (res.status === 429) {
        await res.body?.cancel();
        const wait = retryAfterSeconds(res.headers.get("retry-after"), deps.now() * 1000);
        deps.busy?.(wait);
        return { ...base, vote: "unreachable", kind: "busy", status: 429, detail: `notary busy: it asked for no query for ${wait} s` };
      }
      const body = await readBounded(res, MAX_ANSWER_BYTES);
      const resp: HttpResponse = { status: res.status, headers: new Map([["content-type", res.headers.get("content-type") ?? ""]]), body };
      const now = Math.trunc(deps.now());
      const o = await evaluateExtended(deps.crypto, resp, trustedKeys(bundle.signingKeys, now), {
        host, port, fingerprint: fp, nonce, now, maxSkew: s.maxSkew, bindIp: true, ip: "",
      }, bundle.transparency); // with a log, a match without a valid proof is a log-* failure
      return { ...base, vote: o.vote, kind: o.kind, status: o.status, detail: o.detail, observations: observationsOf(o.answer) };
    } catch (err) {
      const timedOut = limit.timedOut();
      return { ...base, vote: "unreachable", kind: timedOut ? "timeout" : "unreachable", detail: timedOut ? `no answer within ${s.notaryTimeoutMs / 1000} s` : `${h.host}:${h.sslPort}: ${(err as Error).message}` };
    }
  };
  try {
    // the first definitive answer wins; else the most telling failure (the core's rule)
    const winner = await raceHosts(bundle.hosts, one, (a) => a, limit.signal);
    return winner ?? { ...base, vote: "unreachable", kind: "timeout", detail: `no answer within ${s.notaryTimeoutMs / 1000} s` };
  } finally {
    limit.abort();
  }
}

/** The enabled notaries' verdict on host:port showing a certificate with these fingerprints. */
export async function checkWithNotaries(
  bundles: readonly Bundle[], host: string, port: number, sha1: string, sha256: string, s: Settings, deps: Deps,
): Promise<SiteVerdict> {
  const fp = new Fingerprint("sha256", Uint8Array.from(sha256.split(":").map((x) => parseInt(x, 16))));
  const chosen = sample(bundles, s.quorum, deps.randomInt);
  const at = deps.now();
  const g = await gather(chosen.length, (i, signal) => askNotary(chosen[i]!, host, port, fp, s, deps, signal), {
    policy: s.policy, standAside: s.standAside, earlyReturn: s.earlyReturn, totalTimeoutMs: s.totalTimeoutMs,
  });
  const results: NotaryAnswer[] = g.results.map((r, i) => r ?? (g.timedOut
    ? { name: chosen[i]!.name, vote: "unreachable", kind: "timeout", status: null, detail: `no answer within ${s.totalTimeoutMs / 1000} s`, observations: [] }
    : { name: chosen[i]!.name, vote: "skipped", kind: "settled", status: null, detail: "verdict settled before this notary answered", observations: [] }));
  const counted = results.filter((r) => r.vote !== "skipped");
  const ok = counted.filter((r) => r.vote === "success").length;
  const unreachable = counted.length > 0 && counted.every((r) => r.vote === "unreachable");
  const busy = unreachable && counted.some((r) => r.kind === "busy");
  let reason: string;
  if (chosen.length === 0) reason = "no notary is enabled";
  else if (busy) reason = "notary busy: the notaries asked this browser to slow down, none gave a verified answer";
  else if (unreachable) reason = "notaries unreachable: no notary gave a verified answer";
  else reason = `${ok} of ${chosen.length} notaries confirm (${s.policy}${s.standAside ? ", unreachable stand aside" : ""})`;
  return {
    trusted: g.trusted && chosen.length > 0, host, port, sha1, sha256, source: "notaries", results, reason,
    notariesUnreachable: chosen.length === 0 || unreachable, notaryBusy: busy, at,
  };
}

/** The cache's answer: a stored confirmation still fresh for either fingerprint form. */
export function cacheHit(entries: Readonly<Record<string, number>> | undefined, sha1: string, sha256: string, now: number, lifetime: number | null): boolean {
  if (entries === undefined) return false;
  return [sha1, sha256].some((fp) => cacheDecision(entries[fp] ?? null, now, lifetime) === "hit");
}

/** `host:port` as the cache keys it. */
export function siteKey(host: string, port: number): string {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  return `${isIpLiteral(h) && h.includes(":") ? `[${h}]` : h}:${port}`;
}
