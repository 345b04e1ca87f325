// The client against real TLS notaries on 127.0.0.1 (fakes with the vectors' test keys):
// votes, the cache, parallel queries and early decisions, every timeout, pins, both formats.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { Client, ConfigError, FingerprintError, parseFingerprint, requestBytes, TargetError } from "../src/index.js";
import { configDir, FakeNotary, FORGED_FP, GENUINE_FP, notaries, OTHER_CERT, OTHER_KEY, stopAll } from "./helpers.js";

const started: FakeNotary[] = [];
after(() => stopAll(started));

async function three(...modes: Parameters<typeof notaries>): Promise<FakeNotary[]> {
  const ns = await notaries(...modes);
  started.push(...ns);
  return ns;
}

test("three notaries confirm: trusted, in configuration order, then a cache hit without network", async () => {
  const ns = await three("listed", "listed", "listed");
  const client = Client.load(configDir(ns, { "early-return": false }));
  try {
    const v = await client.check("www.example.org", 443, GENUINE_FP);
    assert.equal(v.trusted, true);
    assert.deepEqual(v.results.map((r) => [r.name, r.vote, r.kind, r.status, r.protocol]), [
      ["Org A", "success", "listed", 200, "convergence-v1"],
      ["Org B", "success", "listed", 200, "convergence-v1"],
      ["Org C", "success", "listed", 200, "convergence-v1"],
    ]);
    // the exact bytes of the 2011 add-on reached each notary
    const want = new TextDecoder("latin1").decode(requestBytes("www.example.org", 443, parseFingerprint(GENUINE_FP)));
    assert.deepEqual(ns.map((n) => n.requests), [[want], [want], [want]]);
    const again = await client.check("WWW.example.org", 443, GENUINE_FP.toLowerCase());
    assert.equal(again.fromCache, true);
    assert.equal(again.trusted, true);
    assert.deepEqual(ns.map((n) => n.requests.length), [1, 1, 1]);
    // twin: another port is another location, asked again
    assert.equal((await client.check("www.example.org", 8443, GENUINE_FP)).fromCache, false);
  } finally {
    client.close();
  }
});

test("a forged certificate: every notary sees another one; untrusted and never cached", async () => {
  const ns = await three("listed", "listed", "listed");
  const client = Client.load(configDir(ns));
  try {
    const v = await client.check("bank.example", 443, FORGED_FP);
    assert.equal(v.trusted, false);
    assert.ok(v.results.every((r) => r.kind === "mismatch" || r.kind === "settled"));
    assert.equal((await client.check("bank.example", 443, FORGED_FP)).fromCache, false);
  } finally {
    client.close();
  }
});

test("notaries are asked in parallel", async () => {
  const ns = await three("listed", "listed", "listed");
  for (const n of ns) n.delayMs = 400;
  const client = Client.load(configDir(ns, { "early-return": false }));
  try {
    const t0 = performance.now();
    const v = await client.check("par.example", 443, GENUINE_FP);
    const ms = performance.now() - t0;
    assert.equal(v.trusted, true);
    assert.ok(ms < 1100, `three 400 ms notaries took ${ms.toFixed(0)} ms`);
  } finally {
    client.close();
  }
});

test("early return: consensus is settled by the first failure; the hanging notary is skipped", async () => {
  const ns = await three("mismatch", "hang", "hang");
  const client = Client.load(configDir(ns, { "notary-agreement": "consensus", "notary-timeout": 3, "total-timeout": 5 }));
  try {
    const t0 = performance.now();
    const v = await client.check("early.example", 443, GENUINE_FP);
    assert.equal(v.trusted, false);
    assert.ok(performance.now() - t0 < 1500);
    assert.deepEqual(v.results.map((r) => r.kind), ["mismatch", "settled", "settled"]);
  } finally {
    client.close();
  }
  // twin: without early return the hanging notaries are waited for (their notary timeout)
  const late = Client.load(configDir(ns, { "notary-agreement": "consensus", "early-return": false, "notary-timeout": 0.5, "total-timeout": 5 }));
  try {
    const v = await late.check("early.example", 443, GENUINE_FP);
    assert.deepEqual(v.results.map((r) => r.kind), ["mismatch", "timeout", "timeout"]);
  } finally {
    late.close();
  }
});

test("every notary hangs: the total timeout bounds the check, nothing is trusted", async () => {
  const ns = await three("hang", "hang", "hang");
  const client = Client.load(configDir(ns, { "notary-timeout": 10, "total-timeout": 0.6 }));
  try {
    const t0 = performance.now();
    const v = await client.check("slow.example", 443, GENUINE_FP);
    const ms = performance.now() - t0;
    assert.equal(v.trusted, false);
    assert.ok(ms >= 550 && ms < 2000, `${ms}`);
    assert.deepEqual(v.results.map((r) => r.kind), ["timeout", "timeout", "timeout"]);
  } finally {
    client.close();
  }
});

test("a notary with another certificate than its pin is a failure vote; garbage is a response failure", async () => {
  const impostor = await new FakeNotary("Org Impostor", "listed", OTHER_KEY, OTHER_CERT).start();
  const ns = await three("garbage", "listed");
  started.push(impostor);
  const dir = configDir([impostor, ...ns], { "notary-agreement": "consensus", "early-return": false });
  // the impostor's bundle must pin the genuine notary certificate: rewrite it
  const { readFileSync, writeFileSync, readdirSync } = await import("node:fs");
  const f = `${dir}/notaries-available/${readdirSync(`${dir}/notaries-available`)[0]}`;
  writeFileSync(f, readFileSync(f, "utf8").replace(JSON.stringify(OTHER_CERT).slice(1, -1), JSON.stringify(ns[1]!.pemCert).slice(1, -1)));
  const client = Client.load(dir);
  try {
    const v = await client.check("pin.example", 443, GENUINE_FP);
    assert.equal(v.trusted, false);
    const kinds = Object.fromEntries(v.results.map((r) => [r.name, r.kind]));
    assert.equal(kinds["Org Impostor"], "pin");
    assert.equal(kinds["Org A"], "response");
    assert.equal(impostor.requests.length, 0); // nothing was sent to it
  } finally {
    client.close();
  }
});

test("extended answers: preferred when offered, bound to target, nonce and time", async () => {
  const ns = await three("extended", "extended", "extended-stale");
  const client = Client.load(configDir(ns, { "early-return": false }, true));
  try {
    const v = await client.check("ext.example", 443, GENUINE_FP);
    assert.deepEqual(v.results.map((r) => [r.kind, r.protocol]), [
      ["match", "converge-answer/1"], ["match", "converge-answer/1"], ["stale", "converge-answer/1"],
    ]);
    assert.equal(v.trusted, true); // majority of three: two matches
    assert.match(ns[0]!.requests[0]!, /"nonce":"[A-Za-z0-9_-]{22}"/);
    // twin: legacy only when switched off
    const off = Client.load(configDir(ns, { extended: "off" }, true));
    const w = await off.check("ext.example", 443, GENUINE_FP);
    off.close();
    assert.ok(w.results.every((r) => r.protocol === "convergence-v1" || r.protocol === null));
  } finally {
    client.close();
  }
});

test("bad input is a typed error before any notary is asked", async () => {
  const ns = await three("listed");
  const client = Client.load(configDir(ns));
  try {
    await assert.rejects(client.check("a b", 443, GENUINE_FP), TargetError);
    await assert.rejects(client.check("ok.example", 0, GENUINE_FP), TargetError);
    await assert.rejects(client.check("ok.example", 443, "zz"), FingerprintError);
    assert.equal(ns[0]!.requests.length, 0);
  } finally {
    client.close();
  }
  const empty = Client.load(configDir([]));
  await assert.rejects(empty.check("ok.example", 443, GENUINE_FP), (e: unknown) => e instanceof ConfigError && /notaries-enabled/.test(e.message));
  empty.close();
});

test("a stale cache entry is asked again", async () => {
  const ns = await three("listed");
  let now = 2_000_000_000;
  const dir = configDir(ns, { "cache-lifetime": 60 });
  const client = Client.load(dir, { now: () => now });
  try {
    assert.equal((await client.check("stale.example", 443, GENUINE_FP)).fromCache, false);
    now += 30;
    assert.equal((await client.check("stale.example", 443, GENUINE_FP)).fromCache, true);
    now += 61;
    assert.equal((await client.check("stale.example", 443, GENUINE_FP)).fromCache, false);
    assert.equal(ns[0]!.requests.length, 2);
  } finally {
    client.close();
  }
});
