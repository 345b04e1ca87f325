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
  offersExtended, parseJson, sample, trustedKeys, type Bundle, type CryptoProvider, type HttpResponse,
  type Policy, type Vote,
} from "@converge/core";

/** What the user set on the options page. */
export interface Settings {
  policy: Policy;
  quorum: number;
  standAside: boolean;
  earlyReturn: boolean;
  /** Do not check sites whose address is loopback or private (decided on the connected IP). */
  exemptPrivate: boolean;
  /** Seconds a confirmed certificate stays cached; null = forever. */
  cacheLifetime: number | null;
  notaryTimeoutMs: number;
  totalTimeoutMs: number;
  /** Seconds an answer's time may differ from this browser's clock. */
  maxSkew: number;
}

export const DEFAULT_SETTINGS: Settings = {
  policy: "majority", quorum: 3, standAside: true, earlyReturn: true, exemptPrivate: true,
  cacheLifetime: 7 * 24 * 3600, notaryTimeoutMs: 5000, totalTimeoutMs: 10000, maxSkew: 300,
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
  /** match, mismatch, target-unreachable, refused, a verification failure, unreachable, timeout, legacy-only, settled. */
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
  /** cache, notaries, user (trusted by the user), exempt (private address). */
  source: "cache" | "notaries" | "user" | "exempt";
  results: NotaryAnswer[];
  reason: string;
  /** No notary gave a verified answer: the fail-closed state. */
  notariesUnreachable: boolean;
  at: number;
}

/** What the engine needs from its surroundings. */
export interface Deps {
  fetch: (url: string, init: RequestInit) => Promise<Response>;
  crypto: CryptoProvider;
  /** Unix seconds. */
  now: () => number;
  randomInt: (n: number) => number;
}

const MAX_ANSWER_BYTES = 64 * 1024;
const DEFINITIVE = new Set(["match", "mismatch"]);
const VERIFICATION = new Set(["malformed", "non-canonical", "unknown-key", "bad-signature", "wrong-target", "nonce-mismatch", "stale", "response"]);

/** Whether an IP literal is loopback, private, link-local or shared address space. */
export function isPrivateAddress(ip: string | null | undefined): boolean {
  if (!ip) return false;
  const a = ip.replace(/^\[|\]$/g, "").toLowerCase();
  const v4 = /^(?:::ffff:)?(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(a);
  if (v4) {
    const [x, y] = [Number(v4[1]), Number(v4[2])];
    return x === 127 || x === 10 || (x === 172 && y >= 16 && y < 32) || (x === 192 && y === 168) ||
      (x === 169 && y === 254) || (x === 100 && y >= 64 && y < 128) || x === 0;
  }
  return a === "::1" || a === "::" || /^f[cd][0-9a-f]{2}:/.test(a) || /^fe[89ab][0-9a-f]:/.test(a);
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
  const one = async (h: Bundle["hosts"][number]): Promise<NotaryAnswer> => {
    const nonce = newNonce(deps.crypto);
    try {
      const res = await deps.fetch(`https://${urlHost(h.host)}:${h.sslPort}${ANSWER_PATH}`, {
        method: "POST", body: extendedRequestBody(host, port, fp, nonce),
        headers: { "Content-Type": "application/json", Accept: ANSWER_MEDIA_TYPE },
        signal: limit.signal, cache: "no-store", credentials: "omit", redirect: "error", referrerPolicy: "no-referrer",
      });
      const body = await readBounded(res, MAX_ANSWER_BYTES);
      const resp: HttpResponse = { status: res.status, headers: new Map([["content-type", res.headers.get("content-type") ?? ""]]), body };
      const now = Math.trunc(deps.now());
      const o = await evaluateExtended(deps.crypto, resp, trustedKeys(bundle.signingKeys, now), {
        host, port, fingerprint: fp, nonce, now, maxSkew: s.maxSkew, bindIp: true, ip: "",
      });
      return { ...base, vote: o.vote, kind: o.kind, status: o.status, detail: o.detail, observations: observationsOf(o.answer) };
    } catch (err) {
      const timedOut = limit.timedOut();
      return { ...base, vote: "unreachable", kind: timedOut ? "timeout" : "unreachable", detail: timedOut ? `no answer within ${s.notaryTimeoutMs / 1000} s` : `${h.host}:${h.sslPort}: ${(err as Error).message}` };
    }
  };
  try {
    const answers: NotaryAnswer[] = [];
    // the first definitive answer wins; else the most telling failure
    const winner = await new Promise<NotaryAnswer | undefined>((resolve) => {
      let pending = bundle.hosts.length;
      for (const h of bundle.hosts) {
        void one(h).then((a) => {
          answers.push(a);
          if (DEFINITIVE.has(a.kind)) resolve(a);
          else if (--pending === 0) resolve(undefined);
        });
      }
    });
    return winner ?? answers.find((a) => VERIFICATION.has(a.kind)) ?? answers.find((a) => a.vote !== "unreachable") ?? answers[0]!;
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
  let reason: string;
  if (chosen.length === 0) reason = "no notary is enabled";
  else if (unreachable) reason = "notaries unreachable: no notary gave a verified answer";
  else reason = `${ok} of ${chosen.length} notaries confirm (${s.policy}${s.standAside ? ", unreachable stand aside" : ""})`;
  return {
    trusted: g.trusted && chosen.length > 0, host, port, sha1, sha256, source: "notaries", results, reason,
    notariesUnreachable: chosen.length === 0 || unreachable, at,
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
