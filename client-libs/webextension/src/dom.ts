/** Small DOM helpers for the extension's pages (text only: no HTML is ever parsed). */
export function el<K extends keyof HTMLElementTagNameMap>(tag: K, text?: string, cls?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}

export function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  const e = document.getElementById(id);
  if (!e) throw new Error(`#${id} missing`);
  return e as T;
}

/** A notary answer in words. */
export function describe(kind: string, vote: string): string {
  const words: Record<string, string> = {
    match: "sees the same certificate",
    mismatch: "sees a different certificate",
    "target-unreachable": "could not reach the site",
    refused: "declined to look at this address",
    unreachable: "could not be reached",
    timeout: "did not answer in time",
    busy: "notary busy (asked this browser to slow down)",
    "legacy-only": "does not sign its answers for browsers",
    settled: "not needed (decided without it)",
    malformed: "sent a malformed answer (not counted)",
    "unknown-key": "answer signed by an unknown key (not counted)",
    "bad-signature": "answer with a bad signature (not counted)",
    "wrong-target": "answer about another site or certificate (not counted)",
    "nonce-mismatch": "a replayed answer (not counted)",
    stale: "an old answer (not counted)",
    response: "answer that contradicts itself (not counted)",
    status: "no signed answer",
    "log-missing": "answer without the proof its transparency log requires (not counted)",
    "log-proof": "answer with an invalid transparency log proof (not counted)",
    "log-checkpoint": "answer with a log checkpoint not signed by its log (not counted)",
    "log-witness": "answer with a log checkpoint its witnesses did not cosign (not counted)",
    "log-entry": "answer whose log entry is about another site or certificate (not counted)",
  };
  return words[kind] ?? `${vote} (${kind})`;
}

/** Whether Firefox runs the extension in private windows, in words. */
export function privateWindowsText(allowed: boolean): string {
  return allowed
    ? "Private windows: checked (Converge is allowed to run in private windows)."
    : "Private windows: NOT checked. Firefox does not run Converge in private windows unless you allow it: " +
      "about:addons, Converge, \"Run in Private Windows\", Allow.";
}
