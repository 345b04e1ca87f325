// Every shared vector through the TypeScript library's core with this extension's WebCrypto
// provider (the one Firefox runs): the browser decides by the same rules as every client.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { comparedFields, runVectorCase } from "../../typescript/src/node/vectors.js";
import { subjectPublicKeyInfo, webCrypto } from "../src/webcrypto.js";

const VECTORS = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "vectors");
const crypto = webCrypto();

function diff(c: Record<string, unknown>, out: Record<string, unknown>): string[] {
  return comparedFields(c).filter((f) => f in c && JSON.stringify(c[f]) !== JSON.stringify(out[f] ?? null));
}

// canonical-json.json pins the notary's signer: clients verify bytes and never re-serialise
const NOTARY_ONLY = new Set(["canonical-json.json"]);
for (const f of readdirSync(VECTORS).filter((x) => x.endsWith(".json") && !NOTARY_ONLY.has(x)).sort()) {
  test(`vectors on WebCrypto: ${f}`, async () => {
    const doc = JSON.parse(readFileSync(join(VECTORS, f), "utf8")) as Record<string, unknown> & { tests: Record<string, unknown>[] };
    const failures: string[] = [];
    for (const c of doc.tests) {
      const out = await runVectorCase(doc, c, crypto);
      const d = diff(c, out);
      if (d.length) failures.push(`case ${String(c["id"])}: ${d.join(", ")}: ${JSON.stringify(out)}`);
    }
    assert.equal(doc.tests.length > 0, true);
    assert.deepEqual(failures, []);
  });
}

test("the DER walk refuses what is not one certificate (twin: the test certificate parses)", () => {
  const pem = readFileSync(join(VECTORS, "keys", "test-notary-cert.pem"), "utf8");
  const der = Uint8Array.from(Buffer.from(pem.replace(/-----[^-]+-----|\s/g, ""), "base64"));
  const info = subjectPublicKeyInfo(der);
  assert.ok(info && info.rsa && info.spki.length > 256);
  assert.equal(subjectPublicKeyInfo(der.subarray(0, der.length - 1)), undefined); // truncated
  assert.equal(subjectPublicKeyInfo(Uint8Array.from([...der, 0])), undefined); // trailing byte
  const long = Uint8Array.from(der);
  long[1] = 0x84; // a length of the wrong size
  assert.equal(subjectPublicKeyInfo(long), undefined);
  assert.equal(subjectPublicKeyInfo(new Uint8Array(0)), undefined);
});
