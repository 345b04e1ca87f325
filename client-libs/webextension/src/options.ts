/** The options page: import bundles (file or URL), enable them, set the policy and exemptions. */
import { offersExtended, parseBundle } from "@converge/core";
import { DEFAULT_SETTINGS, type Settings } from "./engine.js";
import type { StoredBundle } from "./messages.js";
import { byId, el, privateWindowsText } from "./dom.js";
import { webCrypto } from "./webcrypto.js";

const crypto = webCrypto();
const MAX_BUNDLE_BYTES = 64 * 1024;

async function current(): Promise<{ settings: Settings; bundles: StoredBundle[] }> {
  const got = await browser.storage.local.get(["settings", "bundles"]);
  return {
    settings: { ...DEFAULT_SETTINGS, ...(got["settings"] as Partial<Settings> | undefined) },
    bundles: (got["bundles"] as StoredBundle[] | undefined) ?? [],
  };
}

function status(id: string, text: string): void {
  byId(id).textContent = text;
}

async function importText(text: string, source: string): Promise<string> {
  const b = await parseBundle(crypto, text); // throws a BundleError saying what is wrong
  const { bundles } = await current();
  const extended = offersExtended(b);
  const entry: StoredBundle = { name: b.name, text, enabled: extended, extended, source };
  const rest = bundles.filter((x) => x.name !== b.name);
  await browser.storage.local.set({ bundles: [...rest, entry] });
  return extended ? `imported ${b.name}` : `imported ${b.name}, disabled: it does not sign answers for browsers`;
}

/** An operator's bundle list: `{"bundles": ["https://...", ...]}` (at most 32); else undefined. */
function bundleList(text: string): string[] | undefined {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof doc !== "object" || doc === null || Array.isArray(doc) || !("bundles" in doc) || "hosts" in doc) return undefined;
  const list = (doc as { bundles: unknown }).bundles;
  if (!Array.isArray(list)) return undefined;
  return list.filter((u): u is string => typeof u === "string" && u.startsWith("https://")).slice(0, 32);
}

async function render(): Promise<void> {
  const { settings, bundles } = await current();
  const body = byId("notaries").querySelector("tbody")!;
  body.replaceChildren();
  for (const b of bundles) {
    const tr = el("tr");
    const box = el("input");
    box.type = "checkbox";
    box.checked = b.enabled;
    box.disabled = !b.extended;
    box.dataset["name"] = b.name;
    box.className = "enable-notary";
    box.addEventListener("change", async () => {
      const { bundles: now } = await current();
      await browser.storage.local.set({ bundles: now.map((x) => (x.name === b.name ? { ...x, enabled: box.checked } : x)) });
      status("save-status", "saved");
    });
    const td = el("td");
    td.append(box);
    let hosts = "";
    try {
      hosts = (await parseBundle(crypto, b.text)).hosts.map((h) => `${h.host}:${h.sslPort}`).join(", ");
    } catch {
      hosts = "(damaged)";
    }
    const remove = el("button", "Remove");
    remove.className = "remove-notary";
    remove.addEventListener("click", async () => {
      const { bundles: now } = await current();
      await browser.storage.local.set({ bundles: now.filter((x) => x.name !== b.name) });
      await render();
    });
    const actions = el("td");
    actions.append(remove);
    tr.append(td, el("td", b.extended ? b.name : `${b.name} (legacy only: not usable here)`), el("td", hosts), actions);
    body.append(tr);
  }
  byId<HTMLSelectElement>("policy").value = settings.policy;
  byId<HTMLInputElement>("quorum").value = String(settings.quorum);
  byId<HTMLInputElement>("stand-aside").checked = settings.standAside;
  byId<HTMLTextAreaElement>("exempt-names").value = settings.exemptNames.join("\n");
  byId<HTMLInputElement>("exempt-local").checked = settings.exemptLocalNames;
  byId<HTMLInputElement>("cache-entries").value = String(settings.cacheEntries);
  byId<HTMLInputElement>("query-rate").value = String(settings.queryRate);
  const on = bundles.some((b) => b.enabled);
  byId("config-status").textContent = on ? "" : "Not configured: no notary is enabled, so nothing is checked.";
  const first = new URLSearchParams(location.search).has("first-run");
  byId("first-run").hidden = !(first || !on);
  byId("private-windows").textContent = privateWindowsText(await browser.extension.isAllowedIncognitoAccess());
  const st = (await browser.runtime.sendMessage({ type: "stats" })) as { loads: number; cacheEntries: number; blockedEntries: number; waiting: number };
  const stats = byId("stats");
  stats.textContent = `${st.cacheEntries} sites remembered, ${st.blockedEntries} blocked pages kept, ${st.waiting} notary questions waiting or running; settings read ${st.loads} times.`;
  stats.dataset["loads"] = String(st.loads);
  stats.dataset["cacheEntries"] = String(st.cacheEntries);
  stats.dataset["waiting"] = String(st.waiting);
  byId<HTMLInputElement>("cache-days").value = settings.cacheLifetime === null ? "3650" : String(Math.round(settings.cacheLifetime / 86400));
}

async function saveSettings(): Promise<void> {
  const { settings } = await current();
  const quorum = Math.min(16, Math.max(1, Number(byId<HTMLInputElement>("quorum").value) || 3));
  const days = Math.min(3650, Math.max(0, Number(byId<HTMLInputElement>("cache-days").value) || 0));
  const next: Settings = {
    ...settings,
    policy: byId<HTMLSelectElement>("policy").value as Settings["policy"],
    quorum,
    standAside: byId<HTMLInputElement>("stand-aside").checked,
    exemptNames: byId<HTMLTextAreaElement>("exempt-names").value.split(/\s+/).filter((x) => x.length > 0).slice(0, 1000),
    exemptLocalNames: byId<HTMLInputElement>("exempt-local").checked,
    cacheEntries: Math.min(100000, Math.max(10, Number(byId<HTMLInputElement>("cache-entries").value) || DEFAULT_SETTINGS.cacheEntries)),
    queryRate: Math.min(1000, Math.max(0, Number(byId<HTMLInputElement>("query-rate").value) || 0)),
    cacheLifetime: days * 86400,
  };
  await browser.storage.local.set({ settings: next });
  status("save-status", "saved");
}

byId<HTMLInputElement>("import-bundle").addEventListener("change", async (ev) => {
  const files = [...((ev.target as HTMLInputElement).files ?? [])];
  const said: string[] = [];
  for (const f of files) {
    try {
      if (f.size > MAX_BUNDLE_BYTES) throw new Error(`${f.name} is larger than ${MAX_BUNDLE_BYTES} bytes`);
      said.push(await importText(await f.text(), f.name));
    } catch (err) {
      said.push(`${f.name}: ${(err as Error).message}`);
    }
  }
  status("import-status", said.join("; "));
  await render();
});

byId("import-url-button").addEventListener("click", async () => {
  const url = byId<HTMLInputElement>("import-url").value.trim();
  try {
    if (!url.startsWith("https://")) throw new Error("bundles are fetched over https:// only");
    const res = await fetch(url, { cache: "no-store", credentials: "omit", redirect: "error" });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    const text = await res.text();
    if (text.length > MAX_BUNDLE_BYTES) throw new Error("bundle too large");
    const list = bundleList(text);
    if (list === undefined) status("import-status", await importText(text, url));
    else {
      const said: string[] = [];
      for (const u of list) {
        try {
          const r = await fetch(u, { cache: "no-store", credentials: "omit", redirect: "error" });
          if (!r.ok) throw new Error(`HTTP ${r.status}`);
          const t = await r.text();
          if (t.length > MAX_BUNDLE_BYTES) throw new Error("bundle too large");
          said.push(await importText(t, u));
        } catch (err) {
          said.push(`${u}: ${(err as Error).message}`);
        }
      }
      status("import-status", said.join("; "));
    }
  } catch (err) {
    status("import-status", `${url}: ${(err as Error).message}`);
  }
  await render();
});

for (const id of ["policy", "quorum", "stand-aside", "exempt-names", "exempt-local", "cache-entries", "query-rate", "cache-days"]) {
  byId(id).addEventListener("change", () => void saveSettings());
}
byId("forget-cache").addEventListener("click", async () => {
  await browser.runtime.sendMessage({ type: "forget-cache" });
  status("save-status", "forgotten");
});

void render();
