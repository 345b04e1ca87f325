// The extension's decision with an injected fetch: answers signed with a real Ed25519 key,
// verified against the bundle's key; replayed, tampered and unsigned answers are not counted;
// nobody answering is the fail-closed state.
import assert from "node:assert/strict";
import { createHash, generateKeyPairSync, sign } from "node:crypto";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { canonicalJson, fromPlain, parseBundle, toBase64Url, type Bundle } from "@converge/core";
import { cacheHit, checkWithNotaries, DEFAULT_SETTINGS, isPrivateAddress, siteKey, type Deps } from "../src/engine.js";
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

async function notary(name: string, sees: string, tweak?: (stmt: Record<string, unknown>) => void, extended = true): Promise<Fake> {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const raw = publicKey.export({ format: "der", type: "spki" }).subarray(12);
  const kid = createHash("sha256").update(raw).digest().subarray(0, 8).toString("hex");
  const doc: Record<string, unknown> = { version: 1, name, hosts: [{ host: `${name.toLowerCase().replace(/\W/g, "")}.test`, ssl_port: 443, http_port: 80, certificate: CERT }] };
  if (extended) {
    doc["protocols"] = ["converge-answer/1"];
    doc["signing_keys"] = [{ alg: "ed25519", key_id: kid, public_key: toBase64Url(raw), status: "current" }];
  }
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
      return { status: verdict === "match" ? 200 : 409, body: canonicalJson(fromPlain({ statement: stmt, signature: { alg: "ed25519", key_id: kid, value } }))! };
    },
  };
}

function deps(fakes: Fake[], down = new Set<string>()): Deps & { asked: string[] } {
  const asked: string[] = [];
  return {
    asked,
    crypto, now: () => Date.now() / 1000, randomInt: (n) => Math.floor(Math.random() * n),
    fetch: async (url, init) => {
      asked.push(url);
      const host = new URL(url).hostname;
      const f = fakes.find((x) => x.bundle.hosts[0]!.host === host)!;
      if (down.has(host)) throw new TypeError("NetworkError when attempting to fetch resource.");
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

test("private addresses, cache rules and site keys", () => {
  for (const ip of ["127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.1.1", "100.64.0.1", "::1", "fd00::1", "fe80::1", "::ffff:192.168.0.1"]) {
    assert.equal(isPrivateAddress(ip), true, ip);
  }
  for (const ip of ["8.8.8.8", "172.32.0.1", "2001:db8::1", "", undefined]) assert.equal(isPrivateAddress(ip), false, String(ip));
  const now = 2_000_000_000;
  assert.equal(cacheHit({ [SEEN]: now - 10 }, "", SEEN, now, 60), true);
  assert.equal(cacheHit({ [SEEN]: now - 100 }, "", SEEN, now, 60), false);
  assert.equal(cacheHit({ [SEEN]: now - 100 }, "", OTHER, now, null), false);
  assert.equal(siteKey("Bank.TEST", 443), "bank.test:443");
  assert.equal(siteKey("[::1]", 8443), "[::1]:8443");
});
