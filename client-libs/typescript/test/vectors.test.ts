// Every shared vector file (client-libs/vectors/*.json) through runVectorCase, compared the
// way the conformance runner compares (each field the case states); no expected failures.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { comparedFields, runVectorCase, VECTOR_SCHEMAS } from "../src/node/vectors.js";
import { VECTORS } from "./helpers.js";

type Doc = Record<string, unknown> & { tests: Record<string, unknown>[] };

function load(name: string): Doc {
  return JSON.parse(readFileSync(join(VECTORS, name), "utf8")) as Doc;
}

function diff(c: Record<string, unknown>, out: Record<string, unknown>): string[] {
  return comparedFields(c).filter((f) => f in c && JSON.stringify(c[f]) !== JSON.stringify(out[f] ?? null) &&
    !(c[f] === null && out[f] === undefined));
}

/** The notary's signer is pinned by canonical-json.json: clients verify bytes and never re-serialise. */
const NOTARY_ONLY = new Set(["canonical-json.json"]);
const files = readdirSync(VECTORS).filter((f) => f.endsWith(".json") && !NOTARY_ONLY.has(f)).sort();

test("every vector file has a supported schema", () => {
  assert.ok(files.length >= VECTOR_SCHEMAS.length, `only ${files.length} vector files`);
  for (const f of files) assert.ok(VECTOR_SCHEMAS.includes(String(load(f)["schema"])), f);
});

for (const f of files) {
  test(`vectors: ${f}`, async () => {
    const doc = load(f);
    assert.ok(doc.tests.length > 0);
    const failures: string[] = [];
    for (const c of doc.tests) {
      const out = await runVectorCase(doc, c);
      const d = diff(c, out);
      if (d.length) failures.push(`case ${String(c["id"])} (${String(c["comment"])}): ${d.join(", ")}: got ${JSON.stringify(out)}`);
    }
    assert.deepEqual(failures, []);
  });
}

test("the comparison catches a wrong output (twin)", async () => {
  const doc = load("fingerprints.json");
  const c = doc.tests[0]!;
  const out = await runVectorCase(doc, c);
  assert.deepEqual(diff(c, out), []);
  assert.deepEqual(diff(c, { ...out, canonical: "00" }), ["canonical"]);
  await assert.rejects(runVectorCase({ schema: "converge-vectors/unknown/1", tests: [] }, c));
});

test("transparency.json: every case's output would be caught if its result, kind, size or root were wrong (twin)", async () => {
  const doc = load("transparency.json");
  const flip: Record<string, string> = { valid: "invalid", invalid: "valid", rejected: "valid" };
  let caught = 0;
  for (const c of doc.tests) {
    const out = await runVectorCase(doc, c);
    assert.deepEqual(diff(c, out), [], String(c["id"]));
    assert.ok(diff(c, { ...out, result: flip[String(out["result"])] }).includes("result"), String(c["id"]));
    if ("kind" in c) assert.deepEqual(diff(c, { ...out, kind: "log-other" }), ["kind"]);
    for (const f of ["size", "root"]) {
      if (f in out) assert.deepEqual(diff(c, { ...out, [f]: f === "size" ? 1 + Number(out[f]) : "AAAA" }), [f], `${String(c["id"])} ${f}`);
    }
    caught++;
  }
  assert.equal(caught, 68);
});
