/**
 * Votes, consensus policies and the local-cache rule (pure functions).
 *
 * With stand-aside on, unreachable notaries do not count; off, they count as failures. With
 * `n` counted notaries and `s` successes:
 *
 * - consensus: `s == n` and `s >= 1`
 * - majority: `s >= ceil(n/2)` and `s >= 1`
 * - minority: `s >= 1`
 *
 * Nobody asked, or everybody standing aside, is never trusted.
 *
 * @module
 */
import { ConfigError, VoteError } from "./errors.js";

/** The consensus rule. */
export type Policy = "consensus" | "majority" | "minority";

/** One notary's answer reduced to a vote (`skipped`: settled before it answered). */
export type Vote = "success" | "failure" | "unreachable" | "skipped";

/** Accepts the three policy names, any case, surrounding space ignored. */
export function parsePolicy(text: string): Policy {
  const p = String(text).trim().toLowerCase();
  if (p === "consensus" || p === "majority" || p === "minority") return p;
  throw new ConfigError(
    `notary-agreement must be consensus, majority or minority, not ${JSON.stringify(text)}`,
  );
}

function trusted(p: Policy, s: number, f: number, u: number, standAside: boolean): boolean {
  const counted = s + f + (standAside ? 0 : u);
  if (s < 1) return false;
  if (p === "consensus") return s === counted;
  if (p === "majority") return s >= Math.floor((counted + 1) / 2);
  return true;
}

function count(votes: readonly string[]): [number, number, number] {
  let s = 0;
  let f = 0;
  let u = 0;
  for (const v of votes) {
    if (v === "success") s++;
    else if (v === "failure") f++;
    else if (v === "unreachable") u++;
    else throw new VoteError(`unknown vote ${JSON.stringify(v)}`);
  }
  return [s, f, u];
}

/** The verdict for a complete set of votes (`success`, `failure`, `unreachable`). */
export function decide(policy: Policy, votes: readonly string[], standAside: boolean): boolean {
  const [s, f, u] = count(votes);
  return trusted(policy, s, f, u, standAside);
}

/**
 * The verdict when no outcome of the `pending` notaries can change it, else `undefined`
 * (every split of the pending notaries is tried).
 */
export function settled(
  policy: Policy,
  votes: readonly string[],
  pending: number,
  standAside: boolean,
): boolean | undefined {
  const [s, f, u] = count(votes);
  const first = trusted(policy, s, f, u + pending, standAside);
  for (let ps = 0; ps <= pending; ps++) {
    for (let pf = 0; pf <= pending - ps; pf++) {
      if (trusted(policy, s + ps, f + pf, u + pending - ps - pf, standAside) !== first) {
        return undefined;
      }
    }
  }
  return first;
}

/** Entries further in the future than this (seconds) are stale. */
export const CACHE_FUTURE_SKEW = 300;
const CACHE_MILLISECONDS_ABOVE = 100_000_000_000;

/** A local-cache decision. */
export type CacheDecision = "hit" | "stale" | "miss";

/**
 * Whether a stored entry (its timestamp; `undefined`/`null`: none) is usable at `now` (unix
 * seconds); `lifetime` in seconds, `null` = entries never expire. Timestamps above 10^11 are
 * JavaScript milliseconds (the 2011 add-on wrote those).
 */
export function cacheDecision(
  timestamp: number | null | undefined,
  now: number,
  lifetime: number | null,
): CacheDecision {
  if (timestamp === null || timestamp === undefined) return "miss";
  let ts = timestamp;
  if (ts > CACHE_MILLISECONDS_ABOVE) ts = Math.trunc(ts / 1000);
  const age = now - ts;
  if (age < -CACHE_FUTURE_SKEW) return "stale";
  if (lifetime !== null && age > lifetime) return "stale";
  return "hit";
}
