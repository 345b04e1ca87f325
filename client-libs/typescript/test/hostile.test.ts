// One hostile notary among honest ones (docs/wire-format.md, "One parse boundary"): a
// genuine notary and one answering each hostile form, both real TLS servers on 127.0.0.1.
// Every check comes back with a verdict holding the genuine notary's vote and the vote the
// hostile bytes deserve; each form has its twin (the same bytes made well-formed), which the
// same notary gets counted for.
import assert from "node:assert/strict";
import { createPrivateKey, sign } from "node:crypto";
import { after, before, test } from "node:test";
import { Client, toBase64Url } from "../src/index.js";
import { configDir, FakeNotary, FORGED_FP, GENUINE_FP, NOTARY_KEY, notaries, stopAll } from "./helpers.js";

const RSA = createPrivateKey(NOTARY_KEY);
const A = GENUINE_FP; // the fingerprint asked about; the genuine notary lists it
const E = FORGED_FP;

const entry = (fp: string): string => `{"timestamp": {"start": "1323389219", "finish": "1324691510"}, "fingerprint": "${fp}"}`;
/** Signed bytes S: a history of `fp`, then `extra` members. */
const list = (fp: string, extra = ""): string => `{"fingerprintList": [${entry(fp)}]${extra}}`;

/** S framed as a notary frames it: S without its `}`, the signature member, `}`. */
function framed(s: Buffer | string, tail = '"}', signed: Buffer | string = s): Buffer {
  const S = Buffer.from(s);
  const sig = sign("sha1", Buffer.from(signed), RSA).toString("base64");
  return Buffer.concat([S.subarray(0, S.length - 1), Buffer.from(`, "signature": "${sig}`), Buffer.from(tail)]);
}

function http(status: number, body: Buffer, type = "application/json"): Buffer {
  return Buffer.concat([Buffer.from(`HTTP/1.0 ${status} X\r\nContent-Type: ${type}\r\nContent-Length: ${body.length}\r\n\r\n`), body]);
}

type Want = [vote: string, kind: string];
/** name, the hostile body, what it must count as; its twin's body and what that counts as. */
type LegacyForm = [string, Buffer, Want, Buffer, Want];

const LISTED: Want = ["success", "listed"];
const RESPONSE: Want = ["failure", "response"];
const MATCH: Want = ["success", "match"];
const deep = (n: number): string => "[".repeat(n) + "]".repeat(n);

const LEGACY: LegacyForm[] = [
  // the notary signed a history without A; the attacker appends a list holding A
  ["a list spliced after the signature", framed(list(E), `", "fingerprintList": [${entry(A)}]}`), RESPONSE,
    framed(list(E)), ["failure", "not-listed"]],
  ["a list replacing the signed one after a second signature member",
    Buffer.concat([framed(list(E)).subarray(0, -1), Buffer.from(`, "signature": "AAAA", "fingerprintList": [${entry(A)}]}`)]),
    RESPONSE, framed(list(A)), LISTED],
  ["a member after the signature", framed(list(A), '", "x": 1}'), RESPONSE, framed(list(A, ', "x": 1')), LISTED],
  ["a newline after the closing brace", framed(list(A), '"}\n'), RESPONSE, framed(list(A)), LISTED],
  ["malformed JSON after the signature", framed(list(A), '"}}'), RESPONSE, framed(list(A)), LISTED],
  ["repeated names in S: the last counts", framed(`{"fingerprintList": [${entry(A)}], "fingerprintList": [${entry(E)}]}`),
    ["failure", "not-listed"], framed(`{"fingerprintList": [${entry(E)}], "fingerprintList": [${entry(A)}]}`), LISTED],
  ["a 5000-digit integer in S", framed(list(A, `, "n": ${"9".repeat(5000)}`)), RESPONSE,
    framed(list(A, `, "n": ${"9".repeat(15)}`)), LISTED],
  ["a float in S", framed(list(A, ', "n": 1.5')), RESPONSE, framed(list(A, ', "n": 15')), LISTED],
  ["a number as a member name", framed(list(A, ", 1.5: 1")), RESPONSE, framed(list(A, ', "1.5": 1')), LISTED],
  ["33 levels open", framed(list(A, `, "d": ${deep(32)}`)), RESPONSE, framed(list(A, `, "d": ${deep(31)}`)), LISTED],
  ["a lone surrogate in the fingerprint", framed(list("\\ud800" + A.slice(1))), RESPONSE,
    framed(list(A, ', "x": "\\ud800"')), LISTED],
  ["5000 levels open", framed(list(A, `, "d": ${deep(5000)}`)), RESPONSE, framed(list(A, `, "d": ${deep(2)}`)), LISTED],
  ["NaN in S", framed(list(A, ', "x": NaN')), RESPONSE, framed(list(A, ', "x": null')), LISTED],
  ["a raw control character in a string of S", framed(list(A, ', "x": "\u0001"')), RESPONSE,
    framed(list(A, ', "x": "\\u0001"')), LISTED],
  ["a comment in S", framed(list(A, ' /* c */')), RESPONSE, framed(list(A, " ")), LISTED],
  ["bytes that are not UTF-8 in S", framed(Buffer.concat([Buffer.from(list(A, ', "x": "').slice(0, -1)), Buffer.from([0xff, 0x22, 0x7d])])),
    RESPONSE, framed(list(A, ', "x": "\u00e9"')), LISTED],
  ["1001 history entries", framed(`{"fingerprintList": [${Array(1001).fill(entry(A)).join(", ")}]}`), RESPONSE,
    framed(`{"fingerprintList": [${Array(1000).fill(entry(A)).join(", ")}]}`), LISTED],
  ["S altered after signing", framed(list(A), '"}', list(E)), ["failure", "signature"], framed(list(A)), LISTED],
];

let ns: FakeNotary[];
let genuine: FakeNotary;
let hostile: FakeNotary;
let legacyClient: Client;
let extendedClient: Client;
let n = 0;

before(async () => {
  ns = await notaries("listed", "listed");
  [genuine, hostile] = ns as [FakeNotary, FakeNotary];
  // every notary's answer is reported (no early return); a new host per check (no cache hit)
  const settings = { "notary-agreement": "consensus", "early-return": false };
  legacyClient = Client.load(configDir(ns, { ...settings, extended: "off" }));
  extendedClient = Client.load(configDir(ns, { ...settings, extended: "require" }, true));
});
after(async () => {
  legacyClient.close();
  extendedClient.close();
  await stopAll(ns);
});

/** The hostile notary's vote in a verdict (which must come back, with the genuine vote). */
async function verdictWith(client: Client, answer: (request: string) => Buffer): Promise<[string, string][]> {
  hostile.respond = answer;
  const v = await client.check(`site${++n}.example`, 443, A);
  const votes = v.results.map((r) => [r.name, r.vote, r.kind] as [string, string, string]);
  assert.equal(v.trusted, votes.every((r) => r[1] === "success"), JSON.stringify(votes));
  const g = votes.find((r) => r[0] === genuine.name)!;
  assert.deepEqual(g.slice(1), client === legacyClient ? LISTED : MATCH);
  const h = votes.find((r) => r[0] === hostile.name)!;
  return [[h[1], h[2]]];
}

for (const [name, bad, want, twin, twinWant] of LEGACY) {
  test(`legacy, one hostile notary beside a genuine one: ${name}`, async () => {
    assert.deepEqual(await verdictWith(legacyClient, () => http(200, bad)), [want]);
    assert.deepEqual(await verdictWith(legacyClient, () => http(200, twin)), [twinWant]); // the twin
  });
}

interface Req {
  host: string;
  port: number;
  fingerprint: string;
  alg: string;
  nonce?: string;
}

/** Statement bytes T as a notary writes them, with `extra` members at the end. */
function statement(req: Req, keyId: string, extra = "", answeredAt = String(Math.trunc(Date.now() / 1000))): string {
  return `{"answered_at":${answeredAt},"cache":"miss","detail":"","key_id":"${keyId}","observations":[],` +
    `"request":{"alg":"${req.alg}","fingerprint":"${req.fingerprint}","nonce":${JSON.stringify(req.nonce ?? null)}},` +
    `"target":{"host":"${req.host.toLowerCase()}","ip":null,"port":${req.port}},"type":"converge-answer/1","verdict":"match"${extra}}`;
}

/** An extended answer over T (signed over `signed`), as the hostile notary's HTTP response. */
function answer(h: FakeNotary, t: string, o: { signed?: string; keyId?: string; prefix?: string; after?: string; status?: number } = {}): Buffer {
  const value = toBase64Url(sign(null, Buffer.from(o.signed ?? t), h.edKey));
  const prefix = o.prefix ?? `{"signature":{"alg":"ed25519","key_id":"${o.keyId ?? h.keyId}","value":"${value}"},"statement":`;
  return http(o.status ?? 200, Buffer.from(`${prefix}${t}}${o.after ?? ""}`), "application/vnd.converge.answer+json");
}

const request = (text: string): Req => JSON.parse(text.slice(text.indexOf("\r\n\r\n") + 4)) as Req;

type ExtForm = [string, (r: Req, h: FakeNotary) => Buffer, Want, (r: Req, h: FakeNotary) => Buffer];
const MALFORMED: Want = ["failure", "malformed"];

const EXTENDED: ExtForm[] = [
  ["repeated names in T: the last counts", (r, h) => answer(h, statement(r, h.keyId, ',"verdict":"mismatch"'), { status: 409 }),
    ["failure", "mismatch"], (r, h) => answer(h, statement(r, h.keyId, ',"verdict":"match"'))],
  ["a 5000-digit integer in T", (r, h) => answer(h, statement(r, h.keyId, `,"n":${"9".repeat(5000)}`)), MALFORMED,
    (r, h) => answer(h, statement(r, h.keyId, `,"n":${"9".repeat(15)}`))],
  ["a float answered_at", (r, h) => answer(h, statement(r, h.keyId, "", `${Math.trunc(Date.now() / 1000)}.0`)), MALFORMED,
    (r, h) => answer(h, statement(r, h.keyId))],
  ["a number as a member name in T", (r, h) => answer(h, statement(r, h.keyId, ",1.5:1")), MALFORMED,
    (r, h) => answer(h, statement(r, h.keyId, ',"1.5":1'))],
  ["33 levels open in T", (r, h) => answer(h, statement(r, h.keyId, `,"d":${deep(32)}`)), MALFORMED,
    (r, h) => answer(h, statement(r, h.keyId, `,"d":${deep(31)}`))],
  ["NaN in T", (r, h) => answer(h, statement(r, h.keyId, ',"x":NaN')), MALFORMED, (r, h) => answer(h, statement(r, h.keyId, ',"x":null'))],
  ["5000 levels open in T", (r, h) => answer(h, statement(r, h.keyId, `,"d":${deep(5000)}`)), MALFORMED,
    (r, h) => answer(h, statement(r, h.keyId, `,"d":${deep(2)}`))],
  ["a raw control character in T", (r, h) => answer(h, statement(r, h.keyId, ',"x":"\u0001"')), MALFORMED,
    (r, h) => answer(h, statement(r, h.keyId, ',"x":"\\u0001"'))],
  ["a byte after the final brace", (r, h) => answer(h, statement(r, h.keyId), { after: "\n" }), MALFORMED,
    (r, h) => answer(h, statement(r, h.keyId))],
  ["white space in the prefix", (r, h) => answer(h, statement(r, h.keyId), {
    prefix: `{"signature": {"alg":"ed25519","key_id":"${h.keyId}","value":"${toBase64Url(sign(null, Buffer.from(statement(r, h.keyId)), h.edKey))}"},"statement":`,
  }), MALFORMED, (r, h) => answer(h, statement(r, h.keyId))],
  ["T altered after signing", (r, h) => answer(h, statement(r, h.keyId, ',"x":2'), { signed: statement(r, h.keyId, ',"x":1') }),
    ["failure", "bad-signature"], (r, h) => answer(h, statement(r, h.keyId, ',"x":2'))],
  ["a key id the bundle does not hold", (r, h) => answer(h, statement(r, "00112233aabbccdd"), { keyId: "00112233aabbccdd" }),
    ["failure", "unknown-key"], (r, h) => answer(h, statement(r, h.keyId))],
  ["a lone surrogate in T's detail is only data", (r, h) => answer(h, statement(r, h.keyId).replace('"detail":""', '"detail":"\\ud800"')),
    MATCH, (r, h) => answer(h, statement(r, h.keyId, ',"n":1.5'))],
];

for (const [name, bad, want, twin] of EXTENDED) {
  test(`extended, one hostile notary beside a genuine one: ${name}`, async () => {
    assert.deepEqual(await verdictWith(extendedClient, (t) => bad(request(t), hostile)), [want]);
    const twinWant = want === MATCH ? MALFORMED : MATCH;
    assert.deepEqual(await verdictWith(extendedClient, (t) => twin(request(t), hostile)), [twinWant]); // the twin
  });
}
