/** The block page: what this browser saw, what each notary saw, why it was blocked. */
import type { Blocked } from "./messages.js";
import { byId, describe, el } from "./dom.js";

async function main(): Promise<void> {
  const id = new URLSearchParams(location.search).get("id") ?? "";
  const v = (await browser.runtime.sendMessage({ type: "block-info", id })) as Blocked | null;
  const verdict = byId("converge-verdict");
  if (!v) {
    verdict.textContent = "Converge: untrusted (the details are gone: reload the page to check again)";
    return;
  }
  const target = `${v.host}:${v.port}`;
  if (v.held && v.trusted) {
    verdict.textContent = `Converge: not sent: ${target}: the form was held back`;
    byId("converge-why").textContent = "This site's certificate had not been confirmed in this browser session when the " +
      "page sent it a form, so Converge did not let the form leave. It has been checked since: the notaries see the " +
      "certificate this browser was shown. Go back and send the form again.";
  } else if (v.notaryBusy) {
    verdict.textContent = `Converge: untrusted: ${target}: notary busy`;
    byId("converge-why").textContent = "The notaries asked this browser to slow down (too many questions at once), " +
      "so nobody confirmed the certificate this browser was shown. Converge fails closed: the page was not loaded. " +
      "Reload in a moment.";
  } else if (v.notariesUnreachable) {
    verdict.textContent = `Converge: untrusted: ${target}: notaries unreachable`;
    byId("converge-why").textContent = "No notary gave a verified answer, so nobody could confirm the certificate this " +
      "browser was shown. Converge fails closed: the page was not loaded. Check your connection to the notaries, or " +
      "whether something on your network blocks them.";
  } else {
    verdict.textContent = `Converge: untrusted: ${target}`;
    byId("converge-why").textContent = `The notaries do not see the certificate this browser was shown: ${v.reason}. ` +
      "Someone between this browser and the site may be intercepting the connection.";
  }
  byId("seen-sha256").textContent = v.sha256 || "(none)";
  byId("seen-sha1").textContent = v.sha1 || "(none)";
  byId("seen-url").textContent = v.url;
  byId("sent").textContent = v.sent ?? "Nothing secret: the request carried no cookie, no Authorization header and no body.";
  const body = byId("notaries").querySelector("tbody")!;
  for (const r of v.results) {
    const tr = el("tr");
    tr.append(el("td", r.name), el("td", describe(r.kind, r.vote), r.vote === "success" ? "trusted" : r.vote === "failure" ? "untrusted" : "unreachable"));
    const saw = el("td");
    if (r.observations.length) {
      for (const o of r.observations.slice(0, 3)) saw.append(el("div", `SHA-256 ${o.sha256}`, "fp"));
    } else saw.append(el("span", r.detail, "muted"));
    tr.append(saw);
    body.append(tr);
  }
  const confirm = byId<HTMLInputElement>("confirm-risk");
  const once = byId<HTMLButtonElement>("trust-once");
  const always = byId<HTMLButtonElement>("trust-always");
  confirm.addEventListener("change", () => {
    once.disabled = always.disabled = !confirm.checked;
  });
  for (const [button, mode] of [[once, "once"], [always, "always"]] as const) {
    button.addEventListener("click", async () => {
      if (!confirm.checked) return;
      const r = (await browser.runtime.sendMessage({ type: "trust", id, mode, confirmed: true })) as { ok: boolean; url?: string };
      if (r.ok && r.url) location.replace(r.url);
    });
  }
}

void main();
