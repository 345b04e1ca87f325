/** The toolbar popup: the current tab's verdict and each notary's answer. */
import type { SiteVerdict } from "./engine.js";
import type { TabState } from "./messages.js";
import { byId, describe, el } from "./dom.js";

async function main(): Promise<void> {
  const forUrl = new URLSearchParams(location.search).get("for");
  let state: TabState | null;
  if (forUrl) state = (await browser.runtime.sendMessage({ type: "tab-state", url: forUrl })) as TabState | null;
  else {
    const [tab] = await browser.tabs.query({ active: true, currentWindow: true });
    state = (await browser.runtime.sendMessage({ type: "tab-state", tabId: tab?.id })) as TabState | null;
  }
  const head = byId("popup-verdict");
  const v: SiteVerdict | undefined = state?.main;
  if (!v) {
    head.textContent = "Converge: nothing checked in this tab";
    return;
  }
  const target = `${v.host}:${v.port}`;
  const [word, cls] = v.source === "exempt" ? ["not checked (private address)", "muted"]
    : v.trusted ? ["trusted", "trusted"] : v.notariesUnreachable ? ["untrusted: notaries unreachable", "unreachable"] : ["untrusted", "untrusted"];
  head.textContent = `${target}: ${word}`;
  head.className = cls;
  byId("popup-reason").textContent = v.reason;
  const body = byId("notary-list").querySelector("tbody")!;
  for (const r of v.results) {
    const tr = el("tr");
    tr.append(el("td", r.name), el("td", describe(r.kind, r.vote), r.vote === "success" ? "trusted" : r.vote === "failure" ? "untrusted" : "unreachable"));
    body.append(tr);
  }
  const bad = (state?.others ?? []).filter((o) => !o.trusted);
  if (bad.length) byId("popup-others").textContent = `Blocked on this page: ${bad.map((o) => `${o.host}:${o.port}`).join(", ")}`;
}

void main();
