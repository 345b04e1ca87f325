/** The toolbar popup: the current tab's verdict and each notary's answer. */
import type { SiteVerdict } from "./engine.js";
import type { TabReport } from "./messages.js";
import { byId, describe, el, privateWindowsText } from "./dom.js";

async function main(): Promise<void> {
  const forUrl = new URLSearchParams(location.search).get("for");
  let report: TabReport;
  if (forUrl) report = (await browser.runtime.sendMessage({ type: "tab-state", url: forUrl })) as TabReport;
  else {
    const [tab] = await browser.tabs.query({ active: true, currentWindow: true });
    report = (await browser.runtime.sendMessage({ type: "tab-state", tabId: tab?.id })) as TabReport;
  }
  byId("popup-private").textContent = privateWindowsText(report.privateWindows);
  const head = byId("popup-verdict");
  if (!report.configured) {
    head.textContent = "Converge: not configured";
    head.className = "unreachable";
    byId("popup-reason").textContent = "No notary is enabled, so no certificate is checked: pages load as they would without Converge. " +
      "Add a notary in the settings.";
    return;
  }
  const v: SiteVerdict | undefined = report.tab?.main;
  if (!v) {
    head.textContent = "Converge: nothing checked in this tab";
    return;
  }
  const target = `${v.host}:${v.port}`;
  const [word, cls] = v.source === "exempt" ? ["not checked (on your list of names not checked)", "muted"]
    : v.trusted ? ["trusted", "trusted"]
    : v.notaryBusy ? ["untrusted: notary busy", "unreachable"]
    : v.notariesUnreachable ? ["untrusted: notaries unreachable", "unreachable"] : ["untrusted", "untrusted"];
  head.textContent = `${target}: ${word}`;
  head.className = cls;
  byId("popup-reason").textContent = v.reason;
  const body = byId("notary-list").querySelector("tbody")!;
  for (const r of v.results) {
    const tr = el("tr");
    tr.append(el("td", r.name), el("td", describe(r.kind, r.vote), r.vote === "success" ? "trusted" : r.vote === "failure" ? "untrusted" : "unreachable"));
    body.append(tr);
  }
  const bad = (report.tab?.others ?? []).filter((o) => !o.trusted);
  if (bad.length) {
    const shown = bad.slice(0, 20).map((o) => `${o.host}:${o.port} (${o.reason})`).join("; ");
    byId("popup-others").textContent = `Blocked on this page: ${shown}${bad.length > 20 ? `; and ${bad.length - 20} more` : ""}`;
  }
}

void main();
