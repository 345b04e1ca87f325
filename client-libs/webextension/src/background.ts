/**
 * The background page. Every HTTPS and WSS request is watched at two points:
 *
 * - before its headers are sent (webRequest.onBeforeSendHeaders, blocking): a request that
 *   carries a secret (a Cookie or Authorization header, or a body: any method but GET, HEAD,
 *   OPTIONS) to a host:port whose certificate has not been confirmed in this session is held;
 *   a credential-less HEAD to the same origin (the preflight) shows the browser the server's
 *   certificate, which is checked first. Untrusted: the request is cancelled before it leaves.
 * - when its response headers arrive (webRequest.onHeadersReceived, blocking): the leaf
 *   certificate it came with is checked: the user's own exceptions, then the local cache,
 *   then the notaries. An untrusted response is cancelled before the page gets it; a
 *   top-level one is replaced by the block page.
 *
 * Until a notary is enabled nothing is checked, and the badge and popup say "not configured".
 */
import { parseBundle, type Bundle } from "@converge/core";
import { cacheHit, checkWithNotaries, DEFAULT_SETTINGS, isExempt, siteKey, type Settings, type SiteVerdict } from "./engine.js";
import type { BackgroundMessage, Blocked, StoredBundle, TabState } from "./messages.js";
import { Budget, Lru, TabClosed } from "./state.js";
import { webCrypto } from "./webcrypto.js";

const crypto = webCrypto();
const OWN = browser.runtime.getURL("");

let settings: Settings = { ...DEFAULT_SETTINGS };
let enabled: Bundle[] = [];
/** host:port -> fingerprint -> unix seconds of the last confirmation (persisted, LRU) */
const cache = new Lru<string, Record<string, number>>(() => settings.cacheEntries);
/** host:port -> fingerprints the user chose to trust always */
let userTrust: Record<string, string[]> = {};
/** host:port|fingerprint the user chose to trust for this session */
const trustOnce = new Set<string>();
/** host:port whose certificate was confirmed in this session (secrets may go to it) */
const confirmed = new Lru<string, true>(() => settings.cacheEntries);
const pending = new Map<string, Promise<SiteVerdict>>();
const tabs = new Map<number, TabState>();
const blocked = new Lru<string, Blocked>(() => settings.blockedEntries);
/** requestId -> what it carried when it left (for the block page); dropped at its response */
const carried = new Lru<string, string>(() => 1000);
const preflights = new Map<string, { promise: Promise<Seen | undefined>; resolve: (s: Seen | undefined) => void }>();
const budget = new Budget(() => settings);
let blockSeq = 0;
let saveTimer: ReturnType<typeof setTimeout> | undefined;
/** JSON of what this page last wrote, per storage key: its own writes do not reload it */
const written = new Map<string, string>();
let loads = 0;

interface Seen {
  sha1: string;
  sha256: string;
}

async function load(): Promise<void> {
  loads++;
  const got = await browser.storage.local.get(["settings", "bundles", "cache", "userTrust"]);
  settings = { ...DEFAULT_SETTINGS, ...(got["settings"] as Partial<Settings> | undefined) };
  const stored = (got["bundles"] as StoredBundle[] | undefined) ?? [];
  const c = got["cache"] as [string, Record<string, number>][] | Record<string, Record<string, number>> | undefined;
  cache.clear();
  for (const [k, v] of Array.isArray(c) ? c : Object.entries(c ?? {})) cache.set(k, v);
  userTrust = (got["userTrust"] as typeof userTrust | undefined) ?? {};
  const parsed: Bundle[] = [];
  for (const b of stored) {
    if (!b.enabled) continue;
    try {
      parsed.push(await parseBundle(crypto, b.text));
    } catch {
      // the options page refuses invalid bundles; a damaged stored one is skipped
    }
  }
  enabled = parsed;
  blocked.trim();
  confirmed.trim();
  refreshBadges();
}

let isReady = false;
const ready = load().then(() => {
  isReady = true;
});
browser.storage.onChanged.addListener((changes, area) => {
  if (area !== "local") return;
  const theirs = ["settings", "bundles", "userTrust"].some((k) => {
    const c = changes[k];
    return c !== undefined && JSON.stringify(c.newValue) !== written.get(k);
  });
  // the cache is written only here; settings, bundles and exceptions by the options page
  if (theirs) void load();
});

async function write(items: Record<string, unknown>): Promise<void> {
  for (const [k, v] of Object.entries(items)) written.set(k, JSON.stringify(v));
  await browser.storage.local.set(items);
}

function saveCache(): void {
  if (saveTimer !== undefined) return;
  saveTimer = setTimeout(() => {
    saveTimer = undefined;
    void write({ cache: cache.entries() });
  }, 500);
}

browser.runtime.onInstalled.addListener((d) => {
  if (d.reason === "install") void browser.tabs.create({ url: browser.runtime.getURL("options.html?first-run=1") });
});

function now(): number {
  return Date.now() / 1000;
}

function configured(): boolean {
  return enabled.length > 0;
}

/** The user's exceptions and the cache, without waiting for anything (the common case). */
function knownVerdict(host: string, port: number, sha1: string, sha256: string): SiteVerdict | undefined {
  const key = siteKey(host, port);
  const base = { host, port, sha1, sha256, results: [], notariesUnreachable: false, at: now() };
  if (trustOnce.has(`${key}|${sha256}`) || userTrust[key]?.includes(sha256)) {
    return { ...base, trusted: true, source: "user", reason: "you chose to trust this certificate" };
  }
  if (cacheHit(cache.get(key), sha1, sha256, now(), settings.cacheLifetime)) {
    return { ...base, trusted: true, source: "cache", reason: "confirmed by the notaries earlier (local cache)" };
  }
  return undefined;
}

async function askOnce(host: string, port: number, sha1: string, sha256: string, tabId: number, topLevel: boolean): Promise<SiteVerdict> {
  let release: () => void;
  try {
    release = await budget.acquire(tabId, topLevel);
  } catch (err) {
    if (!(err instanceof TabClosed)) throw err;
    return {
      trusted: false, host, port, sha1, sha256, source: "notaries", results: [], reason: "not checked: its tab was closed",
      notariesUnreachable: false, at: now(),
    };
  }
  try {
    return await checkWithNotaries(enabled, host, port, sha1, sha256, settings, {
      fetch: (url, init) => fetch(url, init), crypto, now,
      randomInt: (n) => globalThis.crypto.getRandomValues(new Uint32Array(1))[0]! % n,
      busy: (seconds) => budget.pause(seconds),
    });
  } finally {
    release();
  }
}

async function verdictFor(host: string, port: number, sha1: string, sha256: string, tabId: number, topLevel: boolean): Promise<SiteVerdict> {
  if (!isReady) await ready;
  const known = knownVerdict(host, port, sha1, sha256);
  if (known !== undefined) return known;
  const key = siteKey(host, port);
  const dedupe = `${key}|${sha256}`;
  let p = pending.get(dedupe);
  if (p === undefined) {
    p = (async () => {
      // a notary that said "busy" is asked again after the pause it asked for (twice at most)
      const crowded = budget.subresourceLoad() > 0;
      let v = await askOnce(host, port, sha1, sha256, tabId, topLevel);
      for (let i = 0; i < 2 && v.notaryBusy; i++) v = await askOnce(host, port, sha1, sha256, tabId, topLevel);
      // a question whose notaries all timed out while subresource questions crowded the
      // browser's connections is asked once more (Firefox was measured holding the
      // extension's requests for about 5 s at the start of a 200-host-name page)
      if (crowded && !v.trusted && v.notariesUnreachable && v.results.every((r) => r.kind === "timeout")) {
        v = await askOnce(host, port, sha1, sha256, tabId, topLevel);
      }
      if (v.trusted) {
        cache.set(key, { ...(cache.get(key) ?? {}), [sha1]: Math.trunc(now()), [sha256]: Math.trunc(now()) });
        saveCache();
      }
      return v;
    })().finally(() => pending.delete(dedupe));
    pending.set(dedupe, p);
  }
  return p;
}

const badges = new Map<number, string>();

function badge(tabId: number, v: SiteVerdict | undefined): void {
  if (tabId < 0) return;
  const [text, color, title]: [string, string, string] = !configured()
    ? ["off", "#6e7781", "Converge: not configured (no notary enabled): nothing is checked"]
    : v === undefined ? ["", "#888888", "Converge"]
    : v.source === "exempt" ? ["", "#888888", `Converge: ${v.host} is on your list of names not checked`]
    : v.trusted ? ["ok", "#1a7f37", `Converge: ${v.host}:${v.port} confirmed`]
    : v.notaryBusy ? ["?", "#b35900", `Converge: ${v.host}:${v.port} blocked, notary busy`]
    : v.notariesUnreachable ? ["?", "#b35900", `Converge: ${v.host}:${v.port} blocked, notaries unreachable`]
    : ["!", "#cf222e", `Converge: ${v.host}:${v.port} untrusted`];
  // each call is a message to the browser: only when the badge changes
  const key = `${text}|${title}`;
  if (badges.get(tabId) === key) return;
  badges.set(tabId, key);
  void browser.browserAction.setBadgeText({ tabId, text }).catch(() => undefined);
  void browser.browserAction.setBadgeBackgroundColor({ tabId, color }).catch(() => undefined);
  void browser.browserAction.setTitle({ tabId, title }).catch(() => undefined);
}

function worstOf(t: TabState): SiteVerdict | undefined {
  return [t.main, ...t.others].find((x) => x && !x.trusted) ?? t.main;
}

function refreshBadges(): void {
  void browser.browserAction.setBadgeText({ text: configured() ? "" : "off" }).catch(() => undefined);
  void browser.browserAction.setBadgeBackgroundColor({ color: "#6e7781" }).catch(() => undefined);
  for (const [id, t] of tabs) badge(id, worstOf(t));
}

function remember(tabId: number, type: string, url: string, v: SiteVerdict): void {
  if (tabId < 0) return;
  if (type === "main_frame") tabs.set(tabId, { url, main: v, others: [] });
  else {
    const t = tabs.get(tabId);
    if (t && !t.others.some((o) => o.host === v.host && o.port === v.port)) {
      t.others.push(v);
      if (t.others.length > 200) t.others.splice(0, t.others.length - 200);
    }
  }
  const t = tabs.get(tabId);
  badge(tabId, t ? worstOf(t) : v);
}

function unchecked(host: string, port: number, source: "exempt" | "unconfigured", reason: string): SiteVerdict {
  return { trusted: true, host, port, sha1: "", sha256: "", source, results: [], reason, notariesUnreachable: false, at: now() };
}

/** host and port of an https:// or wss:// URL; undefined for anything else. */
function target(u: string): { host: string; port: number; origin: string } | undefined {
  const url = new URL(u);
  if (url.protocol !== "https:" && url.protocol !== "wss:") return undefined;
  const port = url.port ? Number(url.port) : 443;
  return { host: url.hostname.replace(/^\[|\]$/g, ""), port, origin: `https://${url.host}/` };
}

function own(d: { originUrl?: string; documentUrl?: string }): boolean {
  return (d.originUrl ?? "").startsWith(OWN) || (d.documentUrl ?? "").startsWith(OWN);
}

/** Cancels; a top-level request also gets the block page. */
function block(d: { tabId: number; type: string; url: string }, v: SiteVerdict): browser.webRequest.BlockingResponse {
  if (d.type === "main_frame" && d.tabId >= 0) {
    const id = String(++blockSeq);
    blocked.set(id, { ...v, url: d.url });
    const page = browser.runtime.getURL(`block.html?id=${id}`);
    setTimeout(() => void browser.tabs.update(d.tabId, { url: page }).catch(() => undefined), 0);
  }
  return { cancel: true };
}

const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);
const SECRET_HEADERS = new Set(["cookie", "authorization"]);
const NOTHING_SECRET = "Nothing secret: the request carried no cookie, no Authorization header and no body.";
const HELD = "Nothing secret: the request (with its cookies, credentials or form) was held; only a HEAD request without cookies went to the site, to see its certificate.";
const AFTER_CONFIRMED = "The request went with its cookies and body: this site's certificate had been confirmed earlier in this session, and a browser shows an extension a connection's certificate only once the request was sent on it.";

/** A credential-less HEAD to the origin: which certificate does the server show? */
function preflight(origin: string): Promise<Seen | undefined> {
  let p = preflights.get(origin);
  if (p !== undefined) return p.promise;
  let resolve!: (s: Seen | undefined) => void;
  const promise = new Promise<Seen | undefined>((r) => (resolve = r));
  p = { promise, resolve };
  preflights.set(origin, p);
  void fetch(origin, {
    method: "HEAD", credentials: "omit", cache: "no-store", redirect: "manual", referrerPolicy: "no-referrer",
    signal: AbortSignal.timeout(settings.notaryTimeoutMs),
  }).then((r) => r.body?.cancel(), () => undefined).finally(() => {
    resolve(undefined); // no response headers (a TLS or network failure): nothing learned
    preflights.delete(origin);
  });
  return promise;
}

async function certificateOf(requestId: string): Promise<Seen> {
  try {
    const info = await browser.webRequest.getSecurityInfo(requestId, {});
    const leaf = info.certificates?.[0];
    return { sha1: leaf?.fingerprint.sha1 ?? "", sha256: leaf?.fingerprint.sha256 ?? "" };
  } catch {
    return { sha1: "", sha256: "" };
  }
}

type SendDetails = browser.webRequest._OnBeforeSendHeadersDetails;

/**
 * Answers at once (no promise) in the common cases, a confirmed site or a request without a
 * secret: a blocking listener that returns a promise costs the request more.
 */
function onBeforeSendHeaders(d: SendDetails): browser.webRequest.BlockingResponse | Promise<browser.webRequest.BlockingResponse> {
  if (own(d)) return {};
  const t = target(d.url);
  if (t === undefined) return {};
  if (!isReady) return ready.then(() => onBeforeSendHeaders(d));
  if (!configured() || isExempt(t.host, settings)) return {};
  const key = siteKey(t.host, t.port);
  const secret = !SAFE_METHODS.has(d.method.toUpperCase()) ||
    (d.requestHeaders ?? []).some((h) => SECRET_HEADERS.has(h.name.toLowerCase()));
  if (confirmed.has(key)) {
    carried.set(d.requestId, secret ? AFTER_CONFIRMED : NOTHING_SECRET);
    return {};
  }
  if (!secret) {
    carried.set(d.requestId, NOTHING_SECRET);
    return {};
  }
  return holdUntilChecked(d, t, key);
}

async function holdUntilChecked(
  d: SendDetails, t: { host: string; port: number; origin: string }, key: string,
): Promise<browser.webRequest.BlockingResponse> {
  // a secret for a site not confirmed in this session: learn and check its certificate first
  const seen = await preflight(t.origin);
  const topLevel = d.type === "main_frame";
  if (seen === undefined || !seen.sha256) {
    if (!SAFE_METHODS.has(d.method.toUpperCase())) {
      const v: SiteVerdict = {
        trusted: false, host: t.host, port: t.port, sha1: "", sha256: "", source: "notaries", results: [],
        reason: "the site's certificate could not be seen before sending (a request without cookies to it failed), so the form was not sent",
        notariesUnreachable: false, sent: HELD, at: now(),
      };
      remember(d.tabId, d.type, d.url, v);
      return block(d, v);
    }
    // nothing learned: the request goes without its secrets, and its response is checked
    carried.set(d.requestId, "Nothing secret: the request's cookies and Authorization header were removed.");
    return { requestHeaders: (d.requestHeaders ?? []).filter((h) => !SECRET_HEADERS.has(h.name.toLowerCase())) };
  }
  const v = knownVerdict(t.host, t.port, seen.sha1, seen.sha256) ??
    await verdictFor(t.host, t.port, seen.sha1, seen.sha256, d.tabId, topLevel);
  if (v.trusted) {
    confirmed.set(key, true);
    carried.set(d.requestId, AFTER_CONFIRMED);
    return {};
  }
  const held = { ...v, sent: HELD };
  remember(d.tabId, d.type, d.url, held);
  return block(d, held);
}

type HeadersDetails = browser.webRequest._OnHeadersReceivedDetails;

async function onHeadersReceived(d: HeadersDetails): Promise<browser.webRequest.BlockingResponse> {
  if (own(d)) {
    // a preflight's answer: its certificate is what the held request waits for
    const p = d.method === "HEAD" ? preflights.get(d.url) : undefined;
    if (p !== undefined) p.resolve(await certificateOf(d.requestId));
    return {};
  }
  const t = target(d.url);
  if (t === undefined) return {};
  if (!isReady) await ready;
  const sent = carried.get(d.requestId) ?? NOTHING_SECRET;
  carried.delete(d.requestId);
  const { host, port } = t;
  if (!configured()) {
    remember(d.tabId, d.type, d.url, unchecked(host, port, "unconfigured", "not configured: no notary is enabled, nothing is checked"));
    return {};
  }
  if (isExempt(host, settings)) {
    remember(d.tabId, d.type, d.url, unchecked(host, port, "exempt", `${host} is on your list of names not checked`));
    return {};
  }
  const { sha1, sha256 } = await certificateOf(d.requestId);
  let v: SiteVerdict;
  if (!sha256) {
    v = { trusted: false, host, port, sha1, sha256, source: "notaries", results: [], reason: "the browser gave no certificate for this response", notariesUnreachable: false, at: now() };
  } else {
    v = knownVerdict(host, port, sha1, sha256) ?? await verdictFor(host, port, sha1, sha256, d.tabId, d.type === "main_frame");
  }
  if (v.trusted) confirmed.set(siteKey(host, port), true);
  v = { ...v, sent };
  remember(d.tabId, d.type, d.url, v);
  return v.trusted ? {} : block(d, v);
}

const FILTER = { urls: ["https://*/*", "wss://*/*"] };
browser.webRequest.onBeforeSendHeaders.addListener(onBeforeSendHeaders, FILTER, ["blocking", "requestHeaders"]);
browser.webRequest.onHeadersReceived.addListener(onHeadersReceived, FILTER, ["blocking"]);
browser.webRequest.onErrorOccurred.addListener((d) => carried.delete(d.requestId), FILTER);

browser.tabs.onRemoved.addListener((tabId) => {
  budget.dropTab(tabId);
  tabs.delete(tabId);
  badges.delete(tabId);
});

browser.runtime.onMessage.addListener(async (msg: BackgroundMessage, sender) => {
  // only the extension's own pages talk to the background
  if (!(sender.url ?? "").startsWith(OWN)) return undefined;
  switch (msg.type) {
    case "block-info":
      return blocked.get(msg.id) ?? null;
    case "trust": {
      const b = blocked.get(msg.id);
      if (!b || !msg.confirmed || !b.sha256) return { ok: false };
      const key = siteKey(b.host, b.port);
      if (msg.mode === "once") trustOnce.add(`${key}|${b.sha256}`);
      else {
        userTrust[key] = [...new Set([...(userTrust[key] ?? []), b.sha256])];
        await write({ userTrust });
      }
      return { ok: true, url: b.url };
    }
    case "tab-state": {
      if (!isReady) await ready;
      const base = { configured: configured(), privateWindows: await browser.extension.isAllowedIncognitoAccess() };
      let found: TabState | undefined;
      if (msg.tabId === undefined && msg.url) {
        // the tab whose page came from that URL (the block page may have replaced it)
        found = [...tabs.values()].reverse().find((t) => t.url === msg.url);
      } else if (msg.tabId !== undefined) found = tabs.get(msg.tabId);
      return { ...base, tab: found ?? null };
    }
    case "forget-cache":
      cache.clear();
      confirmed.clear();
      await write({ cache: [] });
      return { ok: true };
    case "stats":
      return { loads, cacheEntries: cache.size, blockedEntries: blocked.size, waiting: budget.waiting() + pending.size };
    default:
      return undefined;
  }
});
