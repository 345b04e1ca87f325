/**
 * The background page. Every HTTPS and WSS request is watched at two points:
 *
 * - before it leaves, by Firefox itself (declarativeNetRequest rules, credentials.ts): to a
 *   host:port whose certificate has not been confirmed in this session, its `Cookie` and
 *   `Authorization` headers are removed and a request with a body (any method but GET, HEAD,
 *   OPTIONS) is blocked (the static ruleset static/rules.json); a confirmation adds an allow
 *   session rule for that host:port. No listener runs before a request is sent.
 * - when its response headers arrive (webRequest.onHeadersReceived, blocking): the leaf
 *   certificate it came with is checked: the user's own exceptions, then the local cache,
 *   then the notaries. An untrusted response is cancelled before the page gets it; a
 *   top-level one is replaced by the block page. A GET that went without its cookies to a
 *   site confirmed by its own response is sent again, with them.
 *
 * A blocked request with a body (a form) is answered by a credential-less HEAD to the same
 * origin, whose certificate is checked; a top-level one gets a page saying the form was not
 * sent and what was found. Until a notary is enabled nothing is checked (no rules), and the
 * badge and popup say "not configured".
 */
import { parseBundle, type Bundle } from "@converge/core";
import { cacheHit, checkWithNotaries, DEFAULT_SETTINGS, isExempt, siteKey, type Settings, type SiteVerdict } from "./engine.js";
import type { BackgroundMessage, Blocked, StoredBundle, TabState } from "./messages.js";
import { confirmedRules, exemptRules, FIRST_CONFIRMED_ID, FIRST_EXEMPT_ID, MAX_EXEMPT_RULES, OWN_RULE_ID, ownRule, RULESET } from "./credentials.js";
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
/**
 * host:port whose certificate was confirmed in this session (secrets may go to it) -> the id
 * of its first allow rule; oldest first, at most MAX_CONFIRMED (each holds two session rules)
 */
const confirmed = new Map<string, number>();
const MAX_CONFIRMED = 2000;
let nextRuleId = FIRST_CONFIRMED_ID;
let rulesChain: Promise<void> = Promise.resolve();
const pending = new Map<string, Promise<SiteVerdict>>();
const tabs = new Map<number, TabState>();
const blocked = new Lru<string, Blocked>(() => settings.blockedEntries);
/** requestIds sent again once their site was confirmed (at most once each) */
const resent = new Lru<string, true>(() => 1000);
/**
 * URLs whose CORS preflight (OPTIONS) confirmed their site: the request it was made for had
 * its headers decided before that, without its cookies (sent again once, like a first visit)
 */
const preflighted = new Lru<string, true>(() => 1000);
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
  await baseRules();
  refreshBadges();
}

/** Session rule updates, one after the other (each is a message to the browser). */
function updateRules(opts: browser.declarativeNetRequest._UpdateSessionRulesOptions): Promise<void> {
  rulesChain = rulesChain.then(() => browser.declarativeNetRequest.updateSessionRules(opts)).catch((err: unknown) => {
    console.error("converge: session rules not updated", err);
  });
  return rulesChain;
}

/**
 * The static rules (static/rules.json: secrets held back from every site) while configured,
 * off while not; the extension's own requests and the names not checked allowed.
 */
async function baseRules(): Promise<void> {
  try {
    await browser.declarativeNetRequest.updateEnabledRulesets(
      configured() ? { enableRulesetIds: [RULESET] } : { disableRulesetIds: [RULESET] });
  } catch (err) {
    console.error("converge: static rules not switched", err);
  }
  const ids = [OWN_RULE_ID, ...Array.from({ length: MAX_EXEMPT_RULES }, (_, i) => FIRST_EXEMPT_ID + i)];
  return updateRules({ removeRuleIds: ids, addRules: [ownRule(new URL(OWN).hostname), ...exemptRules(settings)] });
}

/** Secrets may go to host:port from now on (its allow rules in place when this resolves). */
function confirm(host: string, port: number): Promise<void> {
  const key = siteKey(host, port);
  const id = confirmed.get(key);
  if (id !== undefined) {
    confirmed.delete(key);
    confirmed.set(key, id);
    return rulesChain;
  }
  const first = nextRuleId;
  nextRuleId += 2;
  confirmed.set(key, first);
  const removeRuleIds: number[] = [];
  for (const [k, old] of confirmed) {
    if (confirmed.size <= Math.min(MAX_CONFIRMED, settings.cacheEntries)) break;
    confirmed.delete(k);
    removeRuleIds.push(old, old + 1);
  }
  return updateRules({ removeRuleIds, addRules: confirmedRules(first, host, port) });
}

/** host:port showed a certificate that was not trusted: secrets no longer go to it. */
function unconfirm(key: string): Promise<void> {
  const id = confirmed.get(key);
  if (id === undefined) return rulesChain;
  confirmed.delete(key);
  return updateRules({ removeRuleIds: [id, id + 1] });
}

function unconfirmAll(): Promise<void> {
  const removeRuleIds = [...confirmed.values()].flatMap((id) => [id, id + 1]);
  confirmed.clear();
  return updateRules({ removeRuleIds });
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

/** tabId -> the problem its badge shows ("" or absent: the window's badge) */
const badges = new Map<number, string>();

/**
 * A tab's badge: "!" untrusted, "?" notaries unreachable or busy, set only for a problem (the
 * popup says what was confirmed; the window's badge reads "off" while not configured). Firefox
 * clears a tab's own badge whenever the tab navigates, which is after its page's response was
 * checked: so a page's own verdict is shown by the block page (it asks for its tab's badge
 * when it opens), and its subresources' problems as they are found.
 */
function badge(tabId: number, v: SiteVerdict | undefined): void {
  if (tabId < 0) return;
  const [text, color, title]: [string, string, string] = !configured() || v === undefined || v.trusted ? ["", "", ""]
    : v.notaryBusy ? ["?", "#b35900", `Converge: ${v.host}:${v.port} blocked, notary busy`]
    : v.notariesUnreachable ? ["?", "#b35900", `Converge: ${v.host}:${v.port} blocked, notaries unreachable`]
    : ["!", "#cf222e", `Converge: ${v.host}:${v.port} untrusted`];
  // each call is a message to the browser: only when the badge changes
  const key = text && `${text}|${title}`;
  if ((badges.get(tabId) ?? "") === key) return;
  badges.set(tabId, key);
  // null: the tab shows the window's badge again
  void browser.browserAction.setBadgeText({ tabId, text: text || null }).catch(() => undefined);
  void browser.browserAction.setBadgeBackgroundColor({ tabId, color: color || null }).catch(() => undefined);
  void browser.browserAction.setTitle({ tabId, title: title || null }).catch(() => undefined);
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
  if (type === "main_frame") {
    tabs.set(tabId, { url, main: v, others: [] });
    // the tab is about to navigate, which clears its badge (a blocked page's is set by the
    // block page)
    badges.delete(tabId);
    return;
  }
  const t = tabs.get(tabId);
  if (t && !t.others.some((o) => o.host === v.host && o.port === v.port)) {
    t.others.push(v);
    if (t.others.length > 200) t.others.splice(0, t.others.length - 200);
  }
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
const STRIPPED = "Nothing secret: this site's certificate had not been confirmed in this session, so the request went without cookies and without an Authorization header, and a request with a body (a form) would not have been sent.";
const HELD = "Nothing secret: the request with a body (a form) was held back, not sent, as this site had not been confirmed in this session; only a HEAD request without cookies went to the site, to see its certificate.";
const AFTER_CONFIRMED = "The request may have gone with its cookies and body: this site's certificate had been confirmed earlier in this session, and a browser shows an extension a connection's certificate only once the request was sent on it.";

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
  const { host, port } = t;
  if (!configured()) {
    remember(d.tabId, d.type, d.url, unchecked(host, port, "unconfigured", "not configured: no notary is enabled, nothing is checked"));
    return {};
  }
  if (isExempt(host, settings)) {
    remember(d.tabId, d.type, d.url, unchecked(host, port, "exempt", `${host} is on your list of names not checked`));
    return {};
  }
  const key = siteKey(host, port);
  const wasConfirmed = confirmed.has(key);
  // a preflighted request went without its cookies even if its preflight confirmed the site
  const afterPreflight = wasConfirmed && d.method !== "OPTIONS" && preflighted.get(d.url) !== undefined;
  if (afterPreflight) preflighted.delete(d.url);
  const { sha1, sha256 } = await certificateOf(d.requestId);
  let v: SiteVerdict;
  if (!sha256) {
    v = { trusted: false, host, port, sha1, sha256, source: "notaries", results: [], reason: "the browser gave no certificate for this response", notariesUnreachable: false, at: now() };
  } else {
    v = knownVerdict(host, port, sha1, sha256) ?? await verdictFor(host, port, sha1, sha256, d.tabId, d.type === "main_frame");
  }
  v = { ...v, sent: wasConfirmed && !afterPreflight ? AFTER_CONFIRMED : STRIPPED };
  remember(d.tabId, d.type, d.url, v);
  if (!v.trusted) {
    await unconfirm(key);
    return block(d, v);
  }
  if (wasConfirmed && !afterPreflight) {
    void confirm(host, port); // most recently used
    return {};
  }
  await confirm(host, port);
  if (d.method === "OPTIONS" && !wasConfirmed) preflighted.set(d.url, true);
  // it went without its cookies: once more, with them (its allow rule is in place now)
  if (d.method === "GET" && d.type !== "websocket" && !resent.has(d.requestId) && await hasCookies(d)) {
    resent.set(d.requestId, true);
    return { redirectUrl: d.url };
  }
  return {};
}

/** Whether the browser holds a cookie it would send with this request (when in doubt: yes). */
async function hasCookies(d: HeadersDetails): Promise<boolean> {
  try {
    const store = (d as { cookieStoreId?: string }).cookieStoreId;
    const found = await browser.cookies.getAll({ url: d.url, partitionKey: {}, ...(store ? { storeId: store } : {}) });
    return found.length > 0;
  } catch {
    return true;
  }
}

type ErrorDetails = browser.webRequest._OnErrorOccurredDetails;

/**
 * A request with a body to a site not confirmed in this session was blocked by the default
 * rule: a credential-less HEAD shows the site's certificate, which is checked (a genuine site
 * is confirmed, so the form can be sent again); a top-level one gets a page saying so.
 */
async function onErrorOccurred(d: ErrorDetails): Promise<void> {
  resent.delete(d.requestId);
  if (own(d) || SAFE_METHODS.has(d.method.toUpperCase())) return;
  const t = target(d.url);
  if (t === undefined) return;
  if (!isReady) await ready;
  if (!configured() || isExempt(t.host, settings) || confirmed.has(siteKey(t.host, t.port))) return;
  const seen = await preflight(t.origin);
  let v: SiteVerdict;
  if (seen === undefined || !seen.sha256) {
    v = {
      trusted: false, host: t.host, port: t.port, sha1: "", sha256: "", source: "notaries", results: [],
      reason: "the site's certificate could not be seen (a request without cookies to it failed)",
      notariesUnreachable: false, at: now(),
    };
  } else {
    v = knownVerdict(t.host, t.port, seen.sha1, seen.sha256) ??
      await verdictFor(t.host, t.port, seen.sha1, seen.sha256, d.tabId, d.type === "main_frame");
    if (v.trusted) await confirm(t.host, t.port);
  }
  v = { ...v, sent: HELD, held: true };
  remember(d.tabId, d.type, d.url, v);
  block(d, v);
}

const FILTER = { urls: ["https://*/*", "wss://*/*"] };
browser.webRequest.onHeadersReceived.addListener(onHeadersReceived, FILTER, ["blocking"]);
browser.webRequest.onErrorOccurred.addListener((d) => void onErrorOccurred(d), FILTER);

browser.tabs.onRemoved.addListener((tabId) => {
  budget.dropTab(tabId);
  tabs.delete(tabId);
  badges.delete(tabId);
});

browser.runtime.onMessage.addListener(async (msg: BackgroundMessage, sender) => {
  // only the extension's own pages talk to the background
  if (!(sender.url ?? "").startsWith(OWN)) return undefined;
  switch (msg.type) {
    case "block-info": {
      const b = blocked.get(msg.id);
      const tabId = sender.tab?.id;
      if (b !== undefined && tabId !== undefined) {
        badges.delete(tabId); // this page's navigation cleared it
        badge(tabId, b);
      }
      return b ?? null;
    }
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
      await unconfirmAll();
      await write({ cache: [] });
      return { ok: true };
    case "stats":
      return { loads, cacheEntries: cache.size, blockedEntries: blocked.size, waiting: budget.waiting() + pending.size };
    default:
      return undefined;
  }
});
