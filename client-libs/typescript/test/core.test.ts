// The platform-neutral core: JSON as Python reads and writes it, canonical JSON, framing,
// policies; and a fixed-seed fuzz of the response parser (never throws, never trusts).
import assert from "node:assert/strict";
import { createPrivateKey, sign } from "node:crypto";
import { test } from "node:test";
import {
  canonicalJson, checkIp, decide, expectedHost, Fingerprint, fromPlain, JsonNumber, outcomeFromHttp,
  parseFingerprint, parseHttpResponse, parseJson, pyDumps, pyFloatRepr, ResponseError, settled, utf8,
} from "../src/core/index.js";
import { nodeCrypto } from "../src/node/crypto.js";
import { derOf, GENUINE_FP, NOTARY_CERT, NOTARY_KEY } from "./helpers.js";

test("JSON is read as Python reads it: key order, number literals, NaN", () => {
  const v = parseJson('{"b": 1, "2": 2.0, "1": 1e2, "a": NaN, "big": 123456789012345678901, "b": -0}');
  assert.ok(v instanceof Map);
  assert.deepEqual([...v.keys()], ["b", "2", "1", "a", "big"]); // first position, last value
  assert.equal(v.get("b"), 0);
  assert.ok(v.get("2") instanceof JsonNumber && !(v.get("2") as JsonNumber).integer);
  assert.equal(pyDumps(v), '{"b": 0, "2": 2.0, "1": 100.0, "a": NaN, "big": 123456789012345678901}');
  // twin: plain JSON.parse would have reordered the keys and lost the literals
  assert.notEqual(JSON.stringify(JSON.parse('{"b": 1, "2": 2.0}')), '{"b":1,"2":2.0}');
});

test("strings survive marking: escapes, quotes, keys that look like marks", () => {
  const v = parseJson('{"\\u0000x": "a\\"b\\\\", "k": ["\\u0001NaN", "\\ud800"]}') as Map<string, unknown>;
  assert.deepEqual([...v.keys()], ["\u0000x", "k"]);
  assert.equal(v.get("\u0000x"), 'a"b\\');
  assert.deepEqual(v.get("k"), ["\u0001NaN", "\ud800"]);
  assert.equal(parseJson('{"a": tru}'), undefined);
  assert.equal(parseJson("[".repeat(600) + "]".repeat(600)), undefined); // too deep
  assert.ok(parseJson("[".repeat(500) + "]".repeat(500)) !== undefined);
});

test("Python's float repr", () => {
  const cases: [number, string][] = [[1, "1.0"], [0.1, "0.1"], [1e16, "1e+16"], [1.5e-5, "1.5e-05"], [123456.789, "123456.789"],
    [-0, "-0.0"], [1e-4, "0.0001"], [Infinity, "Infinity"]];
  for (const [x, want] of cases) assert.equal(pyFloatRepr(x), want, String(x));
});

test("canonical JSON: sorted keys, integers only, no lone surrogates", () => {
  assert.equal(canonicalJson(parseJson('{"b": [1, "\\u00e9"], "a": {"y": null, "x": true}}')!), '{"a":{"x":true,"y":null},"b":[1,"é"]}');
  for (const bad of ["[1.0]", "[1e2]", "[9007199254740992]", '{"é": 1}', '["\\udc00"]', "[NaN]"]) {
    assert.equal(canonicalJson(parseJson(bad)!), undefined, bad);
  }
  assert.equal(canonicalJson(fromPlain({ z: 1, a: [-0] })), '{"a":[0],"z":1}');
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
