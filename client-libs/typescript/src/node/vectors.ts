/**
 * The shared test vectors (client-libs/vectors/*.json) through this library:
 * {@link runVectorCase} computes this implementation's output for one case, in the fields
 * CLIENT-CLI.md names. The conformance CLI prints these outputs; the tests compare them.
 *
 * @module
 */
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fromHex, pemToDer, utf8 } from "../core/bytes.js";
import { offersExtended, parseBundle, parseSigningKeys } from "../core/bundle.js";
import type { CertificateKey, CryptoProvider } from "../core/crypto.js";
import { AnswerRejected, ConvergeError, TargetError } from "../core/errors.js";
import { fromPlain } from "../core/json.js";
import { DEFAULT_MAX_SKEW, trustedKeys, verifyAnswer, type Expect } from "../core/extended.js";
import { parseFingerprint, type Fingerprint } from "../core/fingerprint.js";
import { MAX_RESPONSE_BYTES, outcomeFromHttp, requestBytes, verifySignedBody } from "../core/legacy.js";
import { cacheDecision, decide, parsePolicy, settled } from "../core/policy.js";
import { runTransparencyCase, TRANSPARENCY_SCHEMA, TRANSPARENCY_TYPE_FIELDS } from "../core/vectors.js";
import { enabledNotaries, loadConfig } from "./config.js";
import { nodeCrypto } from "./crypto.js";

/** The vector schemas this implementation understands. */
export const VECTOR_SCHEMAS = [
  "converge-vectors/fingerprints/1",
  "converge-vectors/requests/1",
  "converge-vectors/legacy-signatures/1",
  "converge-vectors/notary-responses/1",
  "converge-vectors/bundles/1",
  "converge-vectors/consensus/1",
  "converge-vectors/cache/1",
  "converge-vectors/extended-answers/1",
  "converge-vectors/config/1",
  TRANSPARENCY_SCHEMA,
];

/** One case of a vector file (or the whole file), as JSON data. */
export type VectorCase = Record<string, unknown>;
/** This implementation's output for one case. */
export type VectorOutput = Record<string, unknown>;



function bytesOf(c: VectorCase, name: string): Uint8Array {
  const h = c[`${name}_hex`];
  if (typeof h === "string") {
    const b = fromHex(h);
    if (b === undefined) throw new Error(`case ${String(c["id"])}: ${name}_hex is not hex`);
    return b;
  }
  const s = c[name];
  if (typeof s !== "string") throw new Error(`case ${String(c["id"])} has no ${name}`);
  return utf8(s);
}

function str(c: VectorCase | undefined, name: string): string {
  const s = c?.[name];
  return typeof s === "string" ? s : "";
}

async function vectorKey(crypto: CryptoProvider, doc: VectorCase, name: string): Promise<CertificateKey> {
  const certs = doc["certificates"] as Record<string, string> | undefined;
  const der = pemToDer(certs?.[name] ?? "");
  const key = der === undefined ? undefined : await crypto.certificateKey(der);
  if (key === undefined) throw new Error(`vector certificate ${JSON.stringify(name)} missing`);
  return key;
}

function invalid(out: VectorOutput, err: unknown): VectorOutput {
  if (err instanceof ConvergeError) return { ...out, result: "invalid", error: err.kind };
  throw err;
}

/**
 * This implementation's output for one case of a vector file (`doc` is the whole file). An
 * exception means the case itself is unusable (a harness problem), never a rule violation,
 * which is reported in the output.
 */
export async function runVectorCase(doc: VectorCase, c: VectorCase, crypto: CryptoProvider = nodeCrypto): Promise<VectorOutput> {
  const schema = doc["schema"];
  const out: VectorOutput = { id: c["id"] };
  switch (schema) {
    case "converge-vectors/fingerprints/1": {
      try {
        const fp = parseFingerprint(str(c, "input"));
        return { ...out, result: "valid", algorithm: fp.algorithm, canonical: fp.colonHex() };
      } catch (err) {
        return invalid(out, err);
      }
    }
    case "converge-vectors/requests/1": {
      try {
        const fp = parseFingerprint(str(c, "fingerprint"));
        const port = c["port"];
        if (typeof port !== "number" || !Number.isInteger(port)) throw new TargetError("invalid target port");
        const req = requestBytes(str(c, "host"), port, fp, str(c, "ip") || undefined);
        return { ...out, result: "valid", request: new TextDecoder().decode(req) };
      } catch (err) {
        return invalid(out, err);
      }
    }
    case "converge-vectors/legacy-signatures/1": {
      const body = bytesOf(c, "body");
      const key = await vectorKey(crypto, doc, str(c, "certificate"));
      try {
        const signed = await verifySignedBody(crypto, body, key, MAX_RESPONSE_BYTES);
        return { ...out, result: "valid", signed_bytes: new TextDecoder().decode(signed.signedBytes) };
      } catch (err) {
        return invalid(out, err);
      }
    }
    case "converge-vectors/notary-responses/1": {
      const wanted: Fingerprint[] = [];
      try {
        for (const x of (c["fingerprints"] as unknown[] | undefined) ?? []) wanted.push(parseFingerprint(String(x)));
      } catch (err) {
        return invalid(out, err);
      }
      const raw = bytesOf(c, "raw");
      const key = await vectorKey(crypto, doc, str(c, "certificate"));
      const { outcome } = await outcomeFromHttp(crypto, raw, wanted, key, MAX_RESPONSE_BYTES);
      return { ...out, result: outcome.vote, kind: outcome.kind };
    }
    case "converge-vectors/bundles/1": {
      try {
        const b = await parseBundle(crypto, bytesOf(c, "bundle"));
        return {
          ...out, result: "valid", name: b.name, version: b.version,
          hosts: b.hosts.map((h) => ({ host: h.host, ssl_port: h.sslPort, http_port: h.httpPort, pin: h.pin.colonHex() })),
        };
      } catch (err) {
        return invalid(out, err);
      }
    }
    case "converge-vectors/consensus/1": {
      let policy;
      try {
        policy = parsePolicy(str(c, "policy"));
      } catch (err) {
        return invalid(out, err);
      }
      const votes = ((c["votes"] as unknown[] | undefined) ?? []).map(String);
      const standAside = c["stand_aside"] === true;
      const pending = typeof c["pending"] === "number" ? c["pending"] : 0;
      if (pending > 0) {
        const v = settled(policy, votes, pending, standAside);
        return { ...out, result: v === undefined ? "unsettled" : v ? "trusted" : "untrusted" };
      }
      return { ...out, result: decide(policy, votes, standAside) ? "trusted" : "untrusted" };
    }
    case "converge-vectors/cache/1": {
      const ts = typeof c["timestamp"] === "number" ? c["timestamp"] : null;
      const now = typeof c["now"] === "number" ? c["now"] : 0;
      const lifetime = typeof c["lifetime"] === "number" ? c["lifetime"] : null;
      return { ...out, result: cacheDecision(ts, now, lifetime) };
    }
    case "converge-vectors/extended-answers/1":
      return extendedCase(crypto, doc, c, out);
    case "converge-vectors/config/1": {
      try {
        return { ...out, result: "valid", enabled: await configCase(c) };
      } catch (err) {
        return invalid(out, err);
      }
    }
    case TRANSPARENCY_SCHEMA:
      return runTransparencyCase(crypto, doc, c);
    default:
      throw new Error(`unknown vector schema ${JSON.stringify(schema)}`);
  }
}

/** Creates the case's files and links in a fresh directory and loads it: the enabled names. */
async function configCase(c: VectorCase): Promise<string[]> {
  const root = mkdtempSync(join(tmpdir(), "converge-vector-"));
  try {
    for (const [rel, text] of Object.entries((c["files"] as Record<string, string> | undefined) ?? {})) {
      const p = join(root, rel);
      mkdirSync(dirname(p), { recursive: true });
      writeFileSync(p, String(text));
    }
    for (const [rel, target] of Object.entries((c["links"] as Record<string, string> | undefined) ?? {})) {
      const p = join(root, rel);
      mkdirSync(dirname(p), { recursive: true });
      symlinkSync(String(target), p);
    }
    const cfg = loadConfig(root, {});
    return (await enabledNotaries(cfg)).map((b) => b.name).sort();
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

async function extendedCase(crypto: CryptoProvider, doc: VectorCase, c: VectorCase, out: VectorOutput): Promise<VectorOutput> {
  const type = str(c, "type");
  if (type === "bundle") {
    try {
      const b = await parseBundle(crypto, bytesOf(c, "bundle"));
      return { ...out, result: "valid", extended: offersExtended(b) };
    } catch (err) {
      if (err instanceof ConvergeError) return { ...out, result: "invalid", kind: err.kind };
      throw err;
    }
  }
  if (type !== "answer") throw new Error(`unknown case type ${JSON.stringify(type)}`);
  const exp = (c["expect"] as VectorCase | undefined) ?? {};
  const all = (doc["signing_keys"] as Record<string, unknown> | undefined) ?? {};
  const entries = ((c["bundle_keys"] as unknown[] | undefined) ?? []).map((n) => all[String(n)]);
  let keys;
  try {
    keys = await parseSigningKeys(crypto, fromPlain(entries));
  } catch (err) {
    return invalid(out, err);
  }
  const now = typeof exp["now"] === "number" ? exp["now"] : 0;
  const e: Expect = { host: str(exp, "host"), nonce: str(exp, "nonce"), now, maxSkew: DEFAULT_MAX_SKEW };
  if (typeof exp["port"] === "number") e.port = exp["port"];
  if ("ip" in exp) {
    e.bindIp = true;
    e.ip = str(exp, "ip");
  }
  if (typeof exp["max_skew"] === "number") e.maxSkew = exp["max_skew"];
  if (typeof exp["fingerprint"] === "string") {
    try {
      e.fingerprint = parseFingerprint(exp["fingerprint"]);
    } catch (err) {
      return invalid(out, err);
    }
  }
  try {
    const v = await verifyAnswer(crypto, bytesOf(c, "answer"), trustedKeys(keys, now), e);
    return { ...out, result: "valid", verdict: v.verdict };
  } catch (err) {
    if (err instanceof AnswerRejected) return { ...out, result: "rejected", kind: err.reason };
    throw err;
  }
}

/** The fields the runner compares, when the case states them. */
export const COMPARED_FIELDS = [
  "result", "error", "kind", "algorithm", "canonical", "request", "signed_bytes",
  "name", "version", "hosts", "verdict", "extended", "enabled",
];

/**
 * The fields compared for case `c`, when it states them: {@link COMPARED_FIELDS}, and the
 * output fields of its transparency case type (tree: root; checkpoint: size and root; in
 * the other types these names are inputs).
 */
export function comparedFields(c: VectorCase): readonly string[] {
  return [...COMPARED_FIELDS, ...(TRANSPARENCY_TYPE_FIELDS[String(c["type"])] ?? [])];
}
