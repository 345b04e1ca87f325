// The platform-neutral core: the stock JSON parser and the bounds scan, framing,
// policies; and a fixed-seed fuzz of the response parser (never throws, never trusts).
import assert from "node:assert/strict";
import { createPrivateKey, generateKeyPairSync, sign } from "node:crypto";
import { test } from "node:test";
import {
  boundsScan, canonicalJson, checkIp, decide, expectedHost, Fingerprint, fromPlain, MAX_JSON_DEPTH, outcomeFromHttp,
  fromHex, parseFingerprint, parseHttpResponse, parseJson, parseVerified, ResponseError, settled, utf8, weakKey,
} from "../src/core/index.js";
import { nodeCrypto } from "../src/node/crypto.js";
import { derOf, GENUINE_FP, NOTARY_CERT, NOTARY_KEY } from "./helpers.js";

test("JSON: the stock parser, strict; the last repeated name counts; names are only data", () => {
  const v = parseJson('{"b": 1, "a": [true, null, "\\u00e9"], "b": 2}');
  assert.ok(v instanceof Map);
  assert.equal(v.get("b"), 2); // the last of repeated names
  assert.deepEqual(v.get("a"), [true, null, "é"]);
  const named = parseJson('{"__proto__": 1, "constructor": "x"}') as Map<string, unknown>;
  assert.deepEqual([...named.keys()].sort(), ["__proto__", "constructor"]);
  assert.equal((parseJson("{}") as Map<string, unknown>).get("constructor"), undefined); // no prototype lookups
  // refused: number keys, NaN, Infinity, comments, trailing commas, single quotes, bad literals
  for (const bad of ['{1.5: 1}', '{1: 1}', "[NaN]", "[Infinity]", '{"a": 1 /* c */}', '{"a": 1,}', "['a']", '{"a": tru}', ""]) {
    assert.equal(parseJson(bad), undefined, bad);
  }
  assert.ok(parseJson('{"a": 1}') !== undefined); // twin of the refusals
  // unscanned text (bundles, configuration) nested absurdly deep: an answer, never an exception
  assert.doesNotThrow(() => parseJson("[".repeat(60_000) + "]".repeat(60_000)));
});

test("weak Ed25519 keys: small order or not canonical, sign bit ignored (twin: sound keys pass)", () => {
  const hex = (h: string): Uint8Array => fromHex(h)!;
  const order = "an Ed25519 public key of small order";
  const canonical = "an Ed25519 public key not in canonical form";
  const zeros = "00".repeat(30);
  assert.equal(weakKey(hex(`01${zeros}00`)), order); // the identity
  assert.equal(weakKey(hex(`01${zeros}80`)), order); // the identity, sign bit set
  assert.equal(weakKey(hex("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05")), order); // y8
  assert.equal(weakKey(hex(`f0${"ff".repeat(30)}7f`)), canonical); // p + 3
  assert.equal(weakKey(hex(`01${zeros}`)), "an Ed25519 public key has 32 bytes");
  // twins: a generated key, the fixed key of RFC 8032 test 1 and p - 2 (canonical, not of small order)
  const der = generateKeyPairSync("ed25519").publicKey.export({ format: "der", type: "spki" });
  assert.equal(weakKey(Uint8Array.from(der.subarray(der.length - 32))), undefined);
  assert.equal(weakKey(hex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")), undefined); // RFC 8032, test 1
  assert.equal(weakKey(hex(`eb${"ff".repeat(30)}7f`)), undefined);
});

test("bounds scan: at most 32 levels, integers of at most 15 digits, strings skipped", () => {
  const nest = (n: number): string => "[".repeat(n) + "]".repeat(n);
  assert.equal(boundsScan(nest(MAX_JSON_DEPTH)), true);
  assert.equal(boundsScan(nest(MAX_JSON_DEPTH + 1)), false);
  assert.equal(boundsScan(`{"a": ${"[".repeat(31)}${"]".repeat(31)}}`), true); // the object is level 1
  assert.equal(boundsScan(`{"a": ${"[".repeat(32)}${"]".repeat(32)}}`), false);
  for (const ok of ["[999999999999999]", "[-999999999999999]", "[0]", "[-0]", '["1.5", "1e2", "\\"1.5"]', '{"[[[": 1}']) {
    assert.equal(boundsScan(ok), true, ok);
  }
  for (const bad of ["[1000000000000000]", "[1.5]", "[1e2]", "[01]", "[-]", "[1-2]", `[${"9".repeat(5000)}]`, '["a\\\\", 1.0]']) {
    assert.equal(boundsScan(bad), false, bad);
  }
  assert.equal(parseVerified(utf8('{"a": [1]}')) instanceof Map, true);
  assert.equal(parseVerified(Uint8Array.from([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d])), undefined); // not UTF-8
  assert.equal(parseVerified(utf8('{"a": 1.0}')), undefined); // the scan refuses what JSON.parse would take
  assert.ok(parseJson('{"a": 1.0}') !== undefined);
});

test("answers are written with JSON.stringify: sorted names, no white space, integers only", () => {
  assert.equal(canonicalJson(parseJson('{"b": [1, "\\u00e9"], "a": {"y": null, "x": true}}')!), '{"a":{"x":true,"y":null},"b":[1,"é"]}');
  assert.equal(canonicalJson(fromPlain({ z: 1, a: [-0] })), '{"a":[0],"z":1}');
  assert.equal(canonicalJson(fromPlain([1.5])), undefined);
});

test("IP literals in the notary's compressed form", () => {
  assert.equal(checkIp("2001:0db8:0:0:0:0:0:1"), "2001:db8::1");
  assert.equal(checkIp("0:0:0:0:0:0:0:0"), "::");
  assert.equal(checkIp("1:0:0:1:0:0:0:1"), "1:0:0:1::1");
  assert.equal(checkIp("::ffff:1.2.3.4"), "::ffff:102:304");
  assert.equal(expectedHost("[2001:db8::1]"), "2001:db8::1");
  assert.equal(expectedHost("WWW.Example.ORG."), "www.example.org");
  assert.throws(() => checkIp("01.2.3.4"));
  assert.throws(() => checkIp("1::2::3"));
});

test("response framing refuses what the pinned notary must not send", () => {
  assert.throws(() => parseHttpResponse(utf8("HTTP/1.0 200 X\r\nContent-Length: 10\r\n\r\nshort")), ResponseError);
  assert.throws(() => parseHttpResponse(utf8("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")), ResponseError);
  assert.throws(() => parseHttpResponse(utf8("HTTP/1.0 200 X\r\n bad: header\r\n\r\n")), ResponseError);
  const r = parseHttpResponse(utf8("HTTP/1.0 200 X\r\nA: 1\r\na: 2\r\nContent-Length: 2\r\n\r\nokEXTRA"));
  assert.equal(r.headers.get("a"), "1, 2");
  assert.equal(new TextDecoder().decode(r.body), "ok");
});

test("policies: consensus, majority, minority; early decisions only when settled", () => {
  assert.equal(decide("consensus", ["success", "unreachable"], true), true);
  assert.equal(decide("consensus", ["success", "unreachable"], false), false);
  assert.equal(decide("majority", ["success", "failure"], true), true);
  assert.equal(decide("majority", ["success", "failure", "failure"], true), false);
  assert.equal(decide("minority", [], true), false);
  assert.equal(settled("consensus", ["failure"], 2, true), false);
  assert.equal(settled("majority", ["success"], 2, true), undefined);
  assert.throws(() => decide("majority", ["maybe"], true));
});

test("fingerprints: both forms, any case, refused otherwise", () => {
  const fp = parseFingerprint(GENUINE_FP.toLowerCase().replace(/:/g, ""));
  assert.equal(fp.colonHex(), GENUINE_FP);
  assert.ok(fp.equals(new Fingerprint("sha1", fp.digest)));
  for (const bad of ["", "zz", "AB:C", "A".repeat(41), "AB:CD:".repeat(10)]) assert.throws(() => parseFingerprint(bad), bad);
});

/** xorshift32: a fixed-seed generator, so that a failure replays. */
function rng(seed: number): () => number {
  let x = seed >>> 0;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 0x100000000;
  };
}

test("fuzz: 3000 mutated responses never throw and never vote success unless signed", async () => {
  const key = (await nodeCrypto.certificateKey(derOf(NOTARY_CERT)))!;
  const list = `{"fingerprintList": [{"timestamp": {"start": "1323389219", "finish": "1324691510"}, "fingerprint": "${GENUINE_FP}"}]}`;
  const sig = sign("sha1", Buffer.from(list), createPrivateKey(NOTARY_KEY)).toString("base64");
  const body = `${list.slice(0, -1)}, "signature": "${sig}"}`;
  const good = utf8(`HTTP/1.0 200 X\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
  const wanted = [parseFingerprint(GENUINE_FP)];
  assert.equal((await outcomeFromHttp(nodeCrypto, good, wanted, key)).outcome.kind, "listed");
  const rand = rng(20111206);
  const kinds = new Map<string, number>();
  const tokens = ["{", "}", "[", "]", '"', ",", ":", "\\", "\r\n", "NaN", "1e999", "-0", "\u0000", "\u00ff", "9".repeat(30)];
  for (let i = 0; i < 3000; i++) {
    const b = Array.from(good);
    const edits = 1 + Math.floor(rand() * 4);
    for (let e = 0; e < edits; e++) {
      const at = Math.floor(rand() * b.length);
      const op = rand();
      if (op < 0.3) b[at] = Math.floor(rand() * 256);
      else if (op < 0.5) b.splice(at, 1 + Math.floor(rand() * 8));
      else if (op < 0.8) b.splice(at, 0, ...utf8(tokens[Math.floor(rand() * tokens.length)]!));
      else b.splice(at, 0, ...b.slice(Math.floor(rand() * b.length), Math.floor(rand() * b.length)));
    }
    const raw = Uint8Array.from(b);
    const { outcome } = await outcomeFromHttp(nodeCrypto, raw, wanted, key);
    kinds.set(outcome.kind, (kinds.get(outcome.kind) ?? 0) + 1);
    if (outcome.vote === "success") {
      // only a response whose signed list still verifies may vote success
      const r = parseHttpResponse(raw);
      assert.ok([200].includes(r.status));
    }
  }
  assert.ok((kinds.get("response") ?? 0) > 100, JSON.stringify([...kinds]));
  assert.ok((kinds.get("signature") ?? 0) > 10, JSON.stringify([...kinds]));
});
