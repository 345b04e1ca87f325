// The extension's decision with an injected fetch: answers signed with a real Ed25519 key,
// verified against the bundle's key; replayed, tampered and unsigned answers are not counted;
// nobody answering is the fail-closed state.
import assert from "node:assert/strict";
import { createHash, generateKeyPairSync, sign } from "node:crypto";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { canonicalJson, fromPlain, parseBundle, raceHosts, toBase64Url, type Bundle, type Vote } from "@converge/core";
import { cacheHit, checkWithNotaries, DEFAULT_SETTINGS, isExempt, retryAfterSeconds, siteKey, type Deps } from "../src/engine.js";
import { confirmedRules, defaultRules, exemptPatterns, ownRule } from "../src/credentials.js";
import { Budget, Lru, MAIN_PAUSE_MAX_MS, TabClosed } from "../src/state.js";
import { webCrypto } from "../src/webcrypto.js";

const VECTORS = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "vectors");
const CERT = readFileSync(join(VECTORS, "keys", "test-notary-cert.pem"), "utf8");
const SEEN = "AB:".repeat(31) + "AB";
const OTHER = "CD:".repeat(31) + "CD";
const crypto = webCrypto();

interface Fake {
  bundle: Bundle;
  answer: (req: Record<string, unknown>) => { status: number; body: string };
}

/** A notary's transparency log: the bundle's member, and the member its answers carry (none: undefined). */
interface Log {
  policy?: Record<string, unknown>;
  member?: Record<string, unknown>;
  asked?: unknown[];
}

async function notary(name: string, sees: string, tweak?: (stmt: Record<string, unknown>) => void, extended = true, log: Log = {}): Promise<Fake> {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const raw = publicKey.export({ format: "der", type: "spki" }).subarray(12);
  const kid = createHash("sha256").update(raw).digest().subarray(0, 8).toString("hex");
  const doc: Record<string, unknown> = { version: 1, name, hosts: [{ host: `${name.toLowerCase().replace(/\W/g, "")}.test`, ssl_port: 443, http_port: 80, certificate: CERT }] };
  if (extended) {
    doc["protocols"] = ["converge-answer/1"];
    doc["signing_keys"] = [{ alg: "ed25519", key_id: kid, public_key: toBase64Url(raw), status: "current" }];
  }
  if (log.policy !== undefined) doc["transparency"] = log.policy;
  const bundle = await parseBundle(crypto, JSON.stringify(doc));
  return {
    bundle,
    answer: (req) => {
      const verdict = req["fingerprint"] === sees ? "match" : "mismatch";
      const stmt: Record<string, unknown> = {
        type: "converge-answer/1", key_id: kid, verdict, detail: "", answered_at: Math.trunc(Date.now() / 1000),
        target: { host: req["host"], port: req["port"], ip: null },
        request: { fingerprint: req["fingerprint"], alg: req["alg"], nonce: req["nonce"] },
        cache: "hit", observations: [{ sha256: sees, sha1: "", first_seen: 1, last_seen: 2 }],
      };
      tweak?.(stmt);
      const value = toBase64Url(sign(null, Buffer.from(canonicalJson(fromPlain(stmt))!), privateKey));
      const body = canonicalJson(fromPlain({ statement: stmt, signature: { alg: "ed25519", key_id: kid, value } }))!;
      log.asked?.push(req["transparency"]);
      // the unsigned member follows the statement's bytes (docs/transparency.md, "Clients")
      const member = log.member === undefined ? "" : `,"transparency":${JSON.stringify(log.member)}`;
      return { status: verdict === "match" ? 200 : 409, body: body.slice(0, -1) + member + "}" };
    },
  };
}

function deps(fakes: Fake[], down = new Set<string>(), busy = new Set<string>()): Deps & { asked: string[]; paused: number[] } {
  const asked: string[] = [];
  const paused: number[] = [];
  return {
    asked, paused, busy: (s) => paused.push(s),
    crypto, now: () => Date.now() / 1000, randomInt: (n) => Math.floor(Math.random() * n),
    fetch: async (url, init) => {
      asked.push(url);
      const host = new URL(url).hostname;
      const f = fakes.find((x) => x.bundle.hosts[0]!.host === host)!;
      if (down.has(host)) throw new TypeError("NetworkError when attempting to fetch resource.");
      if (busy.has(host)) return new Response("slow down", { status: 429, headers: { "Retry-After": "7" } });
      const a = f.answer(JSON.parse(String(init.body)) as Record<string, unknown>);
      return new Response(a.body, { status: a.status, headers: { "Content-Type": "application/vnd.converge.answer+json" } });
    },
  };
}

const S = { ...DEFAULT_SETTINGS, notaryTimeoutMs: 1000, totalTimeoutMs: 2000 };

test("notaries that see the same certificate: trusted, with what each saw", async () => {
  const fakes = [await notary("Org A", SEEN), await notary("Org B", SEEN)];
  const v = await checkWithNotaries(fakes.map((f) => f.bundle), "bank.test", 443, "", SEEN, { ...S, policy: "consensus", earlyReturn: false }, deps(fakes));
  assert.equal(v.trusted, true);
  assert.deepEqual(v.results.map((r) => r.kind), ["match", "match"]);
  assert.equal(v.results[0]!.observations[0]!.sha256, SEEN);
  // twin: a forged certificate is untrusted, and the notaries say what they saw instead
  const w = await checkWithNotaries(fakes.map((f) => f.bundle), "bank.test", 443, "", OTHER, { ...S, policy: "consensus", earlyReturn: false }, deps(fakes));
  assert.equal(w.trusted, false);
  assert.deepEqual(w.results.map((r) => r.kind), ["mismatch", "mismatch"]);
  assert.equal(w.notariesUnreachable, false);
});

test("replayed, retargeted or stale answers are not counted", async () => {
  const replay = await notary("Org R", SEEN, (st) => ((st["request"] as Record<string, unknown>)["nonce"] = "AAAAAAAAAAAAAAAAAAAAAA"));
  const other = await notary("Org T", SEEN, (st) => ((st["target"] as Record<string, unknown>)["host"] = "elsewhere.test"));
  const stale = await notary("Org S", SEEN, (st) => (st["answered_at"] = 1_000_000_000));
  const fakes = [replay, other, stale];
  const v = await checkWithNotaries(fakes.map((f) => f.bundle), "bank.test", 443, "", SEEN, { ...S, policy: "minority", earlyReturn: false }, deps(fakes));
  assert.equal(v.trusted, false);
  assert.deepEqual(v.results.map((r) => r.kind), ["nonce-mismatch", "wrong-target", "stale"]);
});

test("nobody answers: fail closed, and the verdict says the notaries are unreachable", async () => {
  const fakes = [await notary("Org A", SEEN), await notary("Org B", SEEN)];
  const v = await checkWithNotaries(fakes.map((f) => f.bundle), "bank.test", 443, "", SEEN, S,
    deps(fakes, new Set(fakes.map((f) => f.bundle.hosts[0]!.host))));
  assert.equal(v.trusted, false);
  assert.equal(v.notariesUnreachable, true);
  assert.match(v.reason, /notaries unreachable/);
  // a legacy-only notary cannot be checked from a browser: it stands aside, never confirms
  const legacy = await notary("Org L", SEEN, undefined, false);
  const d = deps([legacy]);
  const w = await checkWithNotaries([legacy.bundle], "bank.test", 443, "", SEEN, S, d);
  assert.equal(w.trusted, false);
  assert.equal(w.results[0]!.kind, "legacy-only");
  assert.deepEqual(d.asked, []);
});

test("a notary answering 429 is busy, not unreachable, and its Retry-After is honoured", async () => {
  const fakes = [await notary("Org A", SEEN), await notary("Org B", SEEN)];
  const d = deps(fakes, new Set(), new Set(fakes.map((f) => f.bundle.hosts[0]!.host)));
  const v = await checkWithNotaries(fakes.map((f) => f.bundle), "bank.test", 443, "", SEEN, S, d);
  assert.equal(v.trusted, false);
  assert.equal(v.notaryBusy, true);
  assert.match(v.reason, /notary busy/);
  assert.deepEqual(v.results.map((r) => r.kind), ["busy", "busy"]);
  assert.deepEqual(d.paused, [7, 7]);
  // twin: a notary that is down is unreachable, not busy
  const w = await checkWithNotaries(fakes.map((f) => f.bundle), "bank.test", 443, "", SEEN, S,
    deps(fakes, new Set(fakes.map((f) => f.bundle.hosts[0]!.host))));
  assert.equal(w.notaryBusy, false);
  assert.match(w.reason, /notaries unreachable/);
  assert.equal(retryAfterSeconds("7", 0), 7);
  assert.equal(retryAfterSeconds("100000", 0), 60);
  assert.equal(retryAfterSeconds("soon", 0), 1);
  assert.equal(retryAfterSeconds(new Date(30_000).toUTCString(), 0), 30);
});

test("exemptions: only names the user lists or opts into, never an address", () => {
  const none = { exemptNames: [], exemptLocalNames: false };
  for (const h of ["bank.test", "127.0.0.1", "10.1.2.3", "printer", "nas.local", "router.home.arpa", "::1"]) {
    assert.equal(isExempt(h, none), false, h); // the default: every name is checked
  }
  const listed = { exemptNames: ["intranet.example", "*.corp.example", "10.0.0.5"], exemptLocalNames: false };
  assert.equal(isExempt("Intranet.Example.", listed), true);
  assert.equal(isExempt("wiki.corp.example", listed), true);
  assert.equal(isExempt("10.0.0.5", listed), true);
  // twins: a name that only ends like a listed one, the parent of a wildcard, another address
  assert.equal(isExempt("evilintranet.example", listed), false);
  assert.equal(isExempt("corp.example", listed), false);
  assert.equal(isExempt("xcorp.example", listed), false);
  assert.equal(isExempt("10.0.0.6", listed), false);
  const local = { exemptNames: [], exemptLocalNames: true };
  for (const h of ["printer", "nas.local", "router.home.arpa"]) assert.equal(isExempt(h, local), true, h);
  for (const h of ["bank.example", "local.example", "127.0.0.1", "::1", "10.0.0.1"]) assert.equal(isExempt(h, local), false, h);
});

test("session rules: secrets stripped and bodies blocked by default, allowed per confirmed host:port", () => {
  const base = defaultRules();
  assert.deepEqual(base.map((r) => [r.id, r.priority, r.action.type, r.condition.urlFilter]), [
    [1, 1, "modifyHeaders", "|https://"], [2, 1, "block", "|https://"], [3, 1, "modifyHeaders", "|wss://"], [4, 1, "block", "|wss://"],
  ]);
  for (const r of base) assert.ok(r.condition.resourceTypes.includes("main_frame")); // pages too, not only subresources
  // the static ruleset Firefox applies from the extension's start says exactly this
  const file = JSON.parse(readFileSync(join(dirname(fileURLToPath(import.meta.url)), "..", "static", "rules.json"), "utf8"));
  assert.deepEqual(file, base);
  const manifest = JSON.parse(readFileSync(join(dirname(fileURLToPath(import.meta.url)), "..", "static", "manifest.json"), "utf8"));
  assert.deepEqual(manifest.declarative_net_request.rule_resources, [{ id: "secrets", enabled: true, path: "rules.json" }]);
  // twin: a rules file that lets cookies through is caught
  assert.notDeepEqual(file.map((r: { action: object }) => ({ ...r, action: { type: "allow" } })), base);
  assert.deepEqual(ownRule("own-uuid").condition.initiatorDomains, ["own-uuid"]);
  assert.equal(ownRule("own-uuid").priority, 2);
  assert.deepEqual(base[0]!.action.requestHeaders?.map((h) => h.header), ["cookie", "authorization"]);
  assert.deepEqual(base[1]!.condition.excludedRequestMethods, ["get", "head", "options"]);
  // an allow rule is a prefix of that host:port's URLs and of no other's
  const allows = (host: string, port: number, url: string): boolean =>
    confirmedRules(1000, host, port).some((r) => url.startsWith(r.condition.urlFilter!.slice(1)));
  assert.ok(confirmedRules(1000, "good.test", 443).every((r) => r.priority === 2 && r.action.type === "allow"));
  assert.deepEqual(confirmedRules(1000, "good.test", 443).map((r) => r.id), [1000, 1001]);
  for (const [host, port, url] of [
    ["good.test", 443, "https://good.test/account"], ["good.test", 443, "wss://good.test/ws"],
    ["good.test", 8443, "https://good.test:8443/"], ["::1", 8443, "https://[::1]:8443/"], ["[::1]", 443, "wss://[::1]/"],
  ] as const) assert.ok(allows(host, port, new URL(url).href), url);
  // twins: another port, a longer name, a subdomain, the name in a path
  for (const url of ["https://good.test:8443/", "https://good.test.evil/", "https://a.good.test/", "https://evil/?https://good.test/"]) {
    assert.equal(allows("good.test", 443, new URL(url).href), false, url);
  }
});

test("session rules: the names not checked match exactly what isExempt exempts", () => {
  const settings = [
    { exemptNames: [], exemptLocalNames: false },
    { exemptNames: ["intranet.example", "*.corp.example", "10.0.0.5"], exemptLocalNames: false },
    { exemptNames: [], exemptLocalNames: true },
  ];
  const hosts = ["bank.test", "intranet.example", "evilintranet.example", "wiki.corp.example", "corp.example", "xcorp.example",
    "10.0.0.5", "10.0.0.6", "127.0.0.1", "[::1]", "printer", "nas.local", "router.home.arpa", "local.example", "nas.local.evil"];
  for (const s of settings) {
    const res = exemptPatterns(s).map((p) => new RegExp(p));
    for (const h of hosts) {
      for (const url of [`https://${h}/x`, `wss://${h}:8443/`]) {
        const href = new URL(url).href;
        assert.equal(res.some((r) => r.test(href)), isExempt(new URL(url).hostname, s), `${href} ${JSON.stringify(s)}`);
      }
    }
  }
});

test("the per-notary host race: first definitive answer wins, else the most telling failure", async () => {
  type A = { host: string; kind: string; vote: Vote; ms: number };
  const race = (answers: A[], ms = 1000): Promise<A | undefined> => {
    const ctl = new AbortController();
    const t = setTimeout(() => ctl.abort(), ms);
    return raceHosts(answers, (a, sig) => new Promise<A>((resolve, reject) => {
      const x = setTimeout(() => resolve(a), a.ms);
      sig.addEventListener("abort", () => { clearTimeout(x); reject(new Error("aborted")); });
    }), (a) => a, ctl.signal).finally(() => clearTimeout(t));
  };
  const down: A = { host: "a", kind: "unreachable", vote: "unreachable", ms: 1 };
  const bad: A = { host: "b", kind: "bad-signature", vote: "failure", ms: 5 };
  const refused: A = { host: "c", kind: "refused", vote: "failure", ms: 2 };
  const match: A = { host: "d", kind: "match", vote: "success", ms: 20 };
  assert.equal((await race([down, bad, refused, match]))?.host, "d");
  assert.equal((await race([down, refused, bad]))?.host, "b");
  assert.equal((await race([down, refused]))?.host, "c");
  assert.equal((await race([down]))?.host, "a");
  // cut off by the deadline: the answers in so far; none in: undefined
  assert.equal((await race([down, { ...match, ms: 5000 }], 50))?.host, "a");
  assert.equal(await race([{ ...match, ms: 5000 }], 50), undefined);
});

test("LRU: bounded, least recently used dropped first", () => {
  let max = 3;
  const l = new Lru<string, number>(() => max);
  for (const [i, k] of ["a", "b", "c", "d"].entries()) l.set(k, i);
  assert.deepEqual(l.entries().map(([k]) => k), ["b", "c", "d"]);
  l.get("b");
  l.set("e", 9);
  assert.deepEqual(l.entries().map(([k]) => k), ["d", "b", "e"]);
  max = 1;
  l.trim();
  assert.deepEqual(l.entries().map(([k]) => k), ["e"]);
});

test("budget: top-level pages first, a rate and a per-tab limit for the rest, pauses honoured", async () => {
  let now = 0;
  const limits = { queryRate: 10, queryBurst: 2, tabConcurrency: 1 };
  const b = new Budget(() => limits, () => now);
  const order: string[] = [];
  const started = (name: string, tab: number, top: boolean): Promise<() => void> =>
    b.acquire(tab, top).then((release) => {
      order.push(name);
      return release;
    });
  const r1 = started("t1-a", 1, false);
  const r2 = started("t1-b", 1, false);
  const r3 = started("t2-a", 2, false);
  const m = started("main", 3, true);
  await Promise.resolve();
  await new Promise((r) => setTimeout(r, 0));
  // tab 1 has one in flight (its limit), tab 2 took the second token; tab 1's second waits
  assert.deepEqual(order, ["t1-a", "t2-a", "main"]);
  now += 100; // one token back
  (await r1)();
  await new Promise((r) => setTimeout(r, 0));
  assert.deepEqual(order, ["t1-a", "t2-a", "main"]); // the top-level question still runs
  (await m)();
  await new Promise((r) => setTimeout(r, 0));
  assert.deepEqual(order, ["t1-a", "t2-a", "main", "t1-b"]);
  (await r2)();
  (await r3)();
  // a pause: subresources wait it out; a top-level page waits at most MAIN_PAUSE_MAX_MS
  now += 10_000;
  b.pause(30);
  const sub = started("sub", 1, false);
  const top = started("top", 4, true);
  const closed = b.acquire(9, false);
  await new Promise((r) => setTimeout(r, 0));
  assert.equal(order.length, 4);
  assert.equal(b.waiting(), 3);
  b.dropTab(9); // its tab closed: dropped, not asked
  await assert.rejects(closed, TabClosed);
  now += MAIN_PAUSE_MAX_MS;
  await new Promise((r) => setTimeout(r, MAIN_PAUSE_MAX_MS + 50)); // the budget's own timer fires
  assert.deepEqual(order.slice(4), ["top"]);
  (await top)();
  now += 30_000;
  b.pause(0);
  await sub;
  assert.deepEqual(order.slice(4), ["top", "sub"]);
});

test("cache rules and site keys", () => {
  const now = 2_000_000_000;
  assert.equal(cacheHit({ [SEEN]: now - 10 }, "", SEEN, now, 60), true);
  assert.equal(cacheHit({ [SEEN]: now - 100 }, "", SEEN, now, 60), false);
  assert.equal(cacheHit({ [SEEN]: now - 100 }, "", OTHER, now, null), false);
  assert.equal(siteKey("Bank.TEST", 443), "bank.test:443");
  assert.equal(siteKey("[::1]", 8443), "[::1]:8443");
});

// The shared vectors' valid proof (transparency.json): its entry is www.example.org:443 (no
// address) showing the certificate whose SHA-256 is `sha256`, in a log cosigned by one witness.
const TLOG = (JSON.parse(readFileSync(join(VECTORS, "transparency.json"), "utf8")) as {
  tests: { type: string; result?: string; transparency: Record<string, unknown>; expect: Record<string, unknown>; bundle: Record<string, unknown> }[];
}).tests.find((c) => c.type === "answer" && c.result === "valid")!;
const LOGGED = TLOG.expect["sha256"] as string;
const LOGGED_HOST = TLOG.expect["host"] as string;

async function logged(member: Record<string, unknown> | undefined, policy: Record<string, unknown> | null = TLOG.bundle): Promise<{ kind: string; trusted: boolean; asked: unknown[] }> {
  const asked: unknown[] = [];
  const f = await notary("Org Log", LOGGED, undefined, true, { ...(policy === null ? {} : { policy }), ...(member === undefined ? {} : { member }), asked });
  const v = await checkWithNotaries([f.bundle], LOGGED_HOST, 443, "", LOGGED, { ...S, quorum: 1 }, deps([f]));
  return { kind: v.results[0]!.kind, trusted: v.trusted, asked };
}

test("a bundle naming a log: answers are asked with a proof, and one with a valid proof is trusted", async () => {
  const ok = await logged(TLOG.transparency);
  assert.deepEqual(ok, { kind: "match", trusted: true, asked: [true] });
});

test("a bundle naming a log: a match whose proof is missing or altered is that notary's failure", async () => {
  const missing = await logged(undefined);
  assert.deepEqual(missing, { kind: "log-missing", trusted: false, asked: [true] });
  const proof = [...(TLOG.transparency["proof"] as string[])];
  const h = Buffer.from(proof[0]!, "base64");
  h[0]! ^= 1;
  proof[0] = h.toString("base64");
  const altered = await logged({ ...TLOG.transparency, proof });
  assert.deepEqual(altered, { kind: "log-proof", trusted: false, asked: [true] });
  // the entry is bound to the asked certificate: a match for another one with this proof is refused
  const f = await notary("Org Log", SEEN, undefined, true, { policy: TLOG.bundle, member: TLOG.transparency });
  const v = await checkWithNotaries([f.bundle], LOGGED_HOST, 443, "", SEEN, { ...S, quorum: 1 }, deps([f]));
  assert.deepEqual([v.results[0]!.kind, v.trusted], ["log-entry", false]);
});

test("a bundle without a log: no proof asked, and an answer without one is trusted", async () => {
  const plain = await logged(undefined, null);
  assert.deepEqual(plain, { kind: "match", trusted: true, asked: [undefined] });
});
