/**
 * The background page: every HTTPS response is held (webRequest.onHeadersReceived,
 * blocking) until the leaf certificate it came with is checked: the user's own exceptions,
 * then the local cache, then the notaries. An untrusted response is cancelled before the page
 * gets it; a top-level one is replaced by the block page.
 */
import { parseBundle, type Bundle } from "@converge/core";
import { cacheHit, checkWithNotaries, DEFAULT_SETTINGS, isPrivateAddress, siteKey, type Settings, type SiteVerdict } from "./engine.js";
import type { BackgroundMessage, StoredBundle, TabState } from "./messages.js";
import { webCrypto } from "./webcrypto.js";

const crypto = webCrypto();
const OWN = browser.runtime.getURL("");

let settings: Settings = { ...DEFAULT_SETTINGS };
let stored: StoredBundle[] = [];
let enabled: Bundle[] = [];
/** host:port -> fingerprint -> unix seconds of the last confirmation */
let cache: Record<string, Record<string, number>> = {};
/** host:port -> fingerprints the user chose to trust always */
let userTrust: Record<string, string[]> = {};
/** host:port|fingerprint the user chose to trust for this session */
const trustOnce = new Set<string>();
const pending = new Map<string, Promise<SiteVerdict>>();
const tabs = new Map<number, TabState>();
const blocked = new Map<string, SiteVerdict & { url: string }>();
let blockSeq = 0;
let saveTimer: ReturnType<typeof setTimeout> | undefined;

async function load(): Promise<void> {
  const got = await browser.storage.local.get(["settings", "bundles", "cache", "userTrust"]);
  settings = { ...DEFAULT_SETTINGS, ...(got["settings"] as Partial<Settings> | undefined) };
  stored = (got["bundles"] as StoredBundle[] | undefined) ?? [];
  cache = (got["cache"] as typeof cache | undefined) ?? {};
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
}

let isReady = false;
const ready = load().then(() => {
  isReady = true;
});
browser.storage.onChanged.addListener((changes, area) => {
  if (area === "local" && (changes["settings"] || changes["bundles"] || changes["userTrust"] || (changes["cache"] && !saveTimer))) {
    void load();
  }
});

function saveCache(): void {
  if (saveTimer !== undefined) return;
  saveTimer = setTimeout(() => {
    saveTimer = undefined;
    void browser.storage.local.set({ cache });
  }, 500);
}

function now(): number {
  return Date.now() / 1000;
}

/** The user's exceptions and the cache, without waiting for anything (the common case). */
function knownVerdict(host: string, port: number, sha1: string, sha256: string): SiteVerdict | undefined {
  const key = siteKey(host, port);
  const base = { host, port, sha1, sha256, results: [], notariesUnreachable: false, at: now() };
  if (trustOnce.has(`${key}|${sha256}`) || userTrust[key]?.includes(sha256)) {
    return { ...base, trusted: true, source: "user", reason: "you chose to trust this certificate" };
  }
  if (cacheHit(cache[key], sha1, sha256, now(), settings.cacheLifetime)) {
    return { ...base, trusted: true, source: "cache", reason: "confirmed by the notaries earlier (local cache)" };
  }
  return undefined;
}

async function verdictFor(host: string, port: number, sha1: string, sha256: string): Promise<SiteVerdict> {
  if (!isReady) await ready;
  const known = knownVerdict(host, port, sha1, sha256);
  if (known !== undefined) return known;
  const key = siteKey(host, port);
  const dedupe = `${key}|${sha256}`;
  let p = pending.get(dedupe);
  if (p === undefined) {
    p = checkWithNotaries(enabled, host, port, sha1, sha256, settings, {
      fetch: (url, init) => fetch(url, init), crypto, now,
      randomInt: (n) => globalThis.crypto.getRandomValues(new Uint32Array(1))[0]! % n,
    }).then((v) => {
      if (v.trusted) {
        cache[key] = { ...(cache[key] ?? {}), [sha1]: Math.trunc(now()), [sha256]: Math.trunc(now()) };
        saveCache();
      }
      return v;
    }).finally(() => pending.delete(dedupe));
    pending.set(dedupe, p);
  }
  return p;
}

const badges = new Map<number, string>();

function badge(tabId: number, v: SiteVerdict | undefined): void {
  if (tabId < 0) return;
  const [text, color, title]: [string, string, string] = v === undefined ? ["", "#888888", "Converge"]
    : v.source === "exempt" ? ["", "#888888", "Converge: private address, not checked"]
    : v.trusted ? ["ok", "#1a7f37", `Converge: ${v.host}:${v.port} confirmed`]
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

function remember(tabId: number, type: string, url: string, v: SiteVerdict): void {
  if (tabId < 0) return;
  if (type === "main_frame") tabs.set(tabId, { url, main: v, others: [] });
  else {
    const t = tabs.get(tabId);
    if (t && !t.others.some((o) => o.host === v.host && o.port === v.port)) t.others.push(v);
  }
  const t = tabs.get(tabId);
  const worst = t ? [t.main, ...t.others].find((x) => x && !x.trusted) ?? t.main : v;
  badge(tabId, worst);
}

/** Firefox also reports the address the response came from (details.ip). */
type Details = browser.webRequest._OnHeadersReceivedDetails & { ip?: string };

async function onHeadersReceived(details: Details): Promise<browser.webRequest.BlockingResponse> {
  // the extension's own requests (to notaries) are not checked
  if ((details.originUrl ?? "").startsWith(OWN) || (details.documentUrl ?? "").startsWith(OWN)) return {};
  const url = new URL(details.url);
  if (url.protocol !== "https:") return {};
  if (!isReady) await ready;
  const host = url.hostname.replace(/^\[|\]$/g, "");
  const port = url.port ? Number(url.port) : 443;
  if (settings.exemptPrivate && isPrivateAddress(details.ip)) {
    remember(details.tabId, details.type, details.url, {
      trusted: true, host, port, sha1: "", sha256: "", source: "exempt", results: [],
      reason: `${details.ip} is a private address (exempt)`, notariesUnreachable: false, at: now(),
    });
    return {};
  }
  let sha1 = "";
  let sha256 = "";
  try {
    const info = await browser.webRequest.getSecurityInfo(details.requestId, {});
    const leaf = info.certificates?.[0];
    sha1 = leaf?.fingerprint.sha1 ?? "";
    sha256 = leaf?.fingerprint.sha256 ?? "";
  } catch {
    // no security info: refused below
  }
  let v: SiteVerdict;
  if (!sha256) {
    v = { trusted: false, host, port, sha1, sha256, source: "notaries", results: [], reason: "the browser gave no certificate for this response", notariesUnreachable: false, at: now() };
  } else {
    v = knownVerdict(host, port, sha1, sha256) ?? await verdictFor(host, port, sha1, sha256);
  }
  remember(details.tabId, details.type, details.url, v);
  if (v.trusted) return {};
  if (details.type === "main_frame" && details.tabId >= 0) {
    const id = String(++blockSeq);
    blocked.set(id, { ...v, url: details.url });
    const page = browser.runtime.getURL(`block.html?id=${id}`);
    setTimeout(() => void browser.tabs.update(details.tabId, { url: page }).catch(() => undefined), 0);
  }
  return { cancel: true };
}

browser.webRequest.onHeadersReceived.addListener(onHeadersReceived, { urls: ["https://*/*"] }, ["blocking"]);

browser.tabs.onRemoved.addListener((tabId) => {
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
      if (!b || !msg.confirmed) return { ok: false };
      const key = siteKey(b.host, b.port);
      if (msg.mode === "once") trustOnce.add(`${key}|${b.sha256}`);
      else {
        userTrust[key] = [...new Set([...(userTrust[key] ?? []), b.sha256])];
        await browser.storage.local.set({ userTrust });
      }
      return { ok: true, url: b.url };
    }
    case "tab-state": {
      let tabId = msg.tabId;
      if (tabId === undefined && msg.url) {
        // the tab whose page came from that URL (the block page may have replaced it)
        return [...tabs.values()].reverse().find((t) => t.url === msg.url) ?? null;
      }
      return tabId === undefined ? null : tabs.get(tabId) ?? null;
    }
    case "forget-cache":
      cache = {};
      await browser.storage.local.set({ cache });
      return { ok: true };
    default:
      return undefined;
  }
});
