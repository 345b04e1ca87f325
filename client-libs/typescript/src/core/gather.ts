/**
 * Asking several notaries at once, platform-neutral: a random sample of the enabled ones,
 * asked in parallel, the verdict decided as soon as no pending answer can change it (early
 * return), everything bounded by a total timeout. The Node client and the browser extension
 * both decide this way; only how one notary is asked differs.
 *
 * @module
 */
import { decide, settled, type Policy, type Vote } from "./policy.js";

/** A signal that aborts with `signal` or after `ms`; `done` releases the timer, `abort` stops it all. */
export function deadline(signal: AbortSignal | undefined, ms: number): {
  signal: AbortSignal; done: () => void; timedOut: () => boolean; abort: () => void;
} {
  const ctl = new AbortController();
  let expired = false;
  const timer = setTimeout(() => {
    expired = true;
    ctl.abort(new Error(`timed out after ${ms} ms`));
  }, ms);
  const onAbort = (): void => ctl.abort(signal?.reason);
  if (signal?.aborted) ctl.abort(signal.reason);
  else signal?.addEventListener("abort", onAbort, { once: true });
  return {
    signal: ctl.signal,
    done: () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    },
    timedOut: () => expired,
    abort: () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      ctl.abort(new Error("no longer needed"));
    },
  };
}

/**
 * `quorum` of `items` picked at random (`randomInt(n)` in [0, n)), returned in their
 * original (configuration) order.
 */
export function sample<T>(items: readonly T[], quorum: number, randomInt: (n: number) => number): T[] {
  const idx = items.map((_, i) => i);
  const k = Math.min(quorum, items.length);
  for (let i = 0; i < k; i++) {
    const j = i + randomInt(idx.length - i);
    [idx[i], idx[j]] = [idx[j]!, idx[i]!];
  }
  return idx.slice(0, k).sort((a, b) => a - b).map((i) => items[i]!);
}

/** How to combine the answers. */
export interface GatherOptions {
  policy: Policy;
  standAside: boolean;
  earlyReturn: boolean;
  totalTimeoutMs: number;
  /** The caller's own cancellation (the promise then rejects with its reason). */
  signal?: AbortSignal;
}

/** What {@link gather} found: one slot per notary (undefined: no answer), and the verdict. */
export interface Gathered<R> {
  results: (R | undefined)[];
  /** The verdict from the answers in (settled early, or decided on all of them). */
  trusted: boolean;
  /** The total timeout passed before every notary answered. */
  timedOut: boolean;
  /** Decided early: the slots without an answer were not needed. */
  settledEarly: boolean;
}

/**
 * Asks `n` notaries in parallel (`ask(i, signal)`, which must not reject: failures are
 * votes) and decides. Notaries still pending when the verdict is settled, or when the total
 * timeout passes, are aborted through their signal.
 */
export async function gather<R extends { vote: Vote }>(
  n: number,
  ask: (i: number, signal: AbortSignal) => Promise<R>,
  o: GatherOptions,
): Promise<Gathered<R>> {
  const total = deadline(o.signal, o.totalTimeoutMs);
  const results: (R | undefined)[] = new Array<R | undefined>(n).fill(undefined);
  let early: boolean | undefined;
  let timedOut = false;
  await new Promise<void>((resolve) => {
    let pending = n;
    let done = false;
    const end = (): void => {
      if (done) return;
      done = true;
      total.signal.removeEventListener("abort", onAbort);
      resolve();
    };
    const onAbort = (): void => {
      timedOut = true;
      end();
    };
    if (n === 0) {
      end();
      return;
    }
    total.signal.addEventListener("abort", onAbort, { once: true });
    for (let i = 0; i < n; i++) {
      ask(i, total.signal).then((r) => {
        if (done) return;
        results[i] = r;
        pending--;
        if (o.earlyReturn) {
          const votes = results.filter((x): x is R => x !== undefined).map((x) => x.vote);
          early = settled(o.policy, votes, pending, o.standAside);
          if (early !== undefined) end();
        }
        if (pending === 0) end();
      }, () => {
        pending--;
        if (pending === 0) end();
      });
    }
  });
  total.abort(); // stop what still runs
  if (o.signal?.aborted) throw o.signal.reason instanceof Error ? o.signal.reason : new Error("aborted");
  // a notary cut off by the total timeout is unreachable; one not needed is skipped
  const votes = results.map((r) => r?.vote ?? (timedOut ? "unreachable" : "skipped")).filter((v) => v !== "skipped");
  const settledEarly = early !== undefined && !timedOut;
  const trusted = settledEarly ? early! : decide(o.policy, votes, o.standAside);
  return { results, trusted, timedOut, settledEarly };
}

/** Answer kinds that end the race between one notary's hosts at once: a host has looked. */
export const DEFINITIVE_KINDS: ReadonlySet<string> = new Set(["listed", "status-only", "mismatch", "not-listed", "match"]);

/** Failures that mean a host answered but its answer did not verify. */
const VERIFICATION_KINDS: ReadonlySet<string> = new Set([
  "signature", "response", "malformed", "unknown-key", "bad-signature", "wrong-target",
  "nonce-mismatch", "stale", "log-missing", "log-proof", "log-checkpoint", "log-witness", "log-entry",
]);

/**
 * Which non-definitive answer speaks for a notary when none of its hosts gave a definitive
 * one (higher wins; ties go to the first in): an answer that failed verification (3), a
 * host whose TLS pin did not match (2), any other answer that counts as a vote (1), a host
 * not reached (0).
 */
export function failureRank(kind: string, vote: Vote): number {
  if (VERIFICATION_KINDS.has(kind)) return 3;
  if (kind === "pin") return 2;
  return vote === "unreachable" ? 0 : 1;
}

/**
 * Races the physical hosts of one logical notary (`ask(host, signal)` must not reject:
 * failures are answers). The first definitive answer wins at once; otherwise, when every
 * host has answered or `signal` aborts, the highest {@link failureRank} among the answers in
 * (the first in on a tie); undefined when none came in. Hosts still running when the race
 * is decided are aborted. One rule for the Node client and the browser extension.
 */
export async function raceHosts<H, A>(
  hosts: readonly H[],
  ask: (host: H, signal: AbortSignal) => Promise<A>,
  view: (a: A) => { kind: string; vote: Vote },
  signal: AbortSignal,
): Promise<A | undefined> {
  const ctl = new AbortController();
  const got: A[] = [];
  const onAbort = (): void => ctl.abort(signal.reason);
  const winner = await new Promise<A | undefined>((resolve) => {
    let pending = hosts.length;
    let done = false;
    const end = (w: A | undefined): void => {
      if (done) return;
      done = true;
      signal.removeEventListener("abort", onEnd);
      resolve(w);
    };
    const onEnd = (): void => end(undefined);
    if (pending === 0 || signal.aborted) {
      end(undefined);
      return;
    }
    signal.addEventListener("abort", onEnd, { once: true });
    signal.addEventListener("abort", onAbort, { once: true });
    for (const h of hosts) {
      ask(h, ctl.signal).then((a) => {
        if (done) return;
        got.push(a);
        pending--;
        if (DEFINITIVE_KINDS.has(view(a).kind)) end(a);
        else if (pending === 0) end(undefined);
      }, () => {
        pending--;
        if (pending === 0) end(undefined);
      });
    }
  });
  signal.removeEventListener("abort", onAbort);
  ctl.abort(new Error("race decided"));
  if (winner !== undefined) return winner;
  let best: A | undefined;
  for (const a of got) {
    if (best === undefined || failureRank(view(a).kind, view(a).vote) > failureRank(view(best).kind, view(best).vote)) best = a;
  }
  return best;
}
