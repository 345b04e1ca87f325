/**
 * The shared vectors of the transparency log (client-libs/vectors/transparency.json, schema
 * `converge-vectors/transparency/1`) through the core with any {@link CryptoProvider}, so the
 * Node client and the browser extension run them on their own crypto.
 *
 * @module
 */
import { fromBase64, toBase64, utf8 } from "./bytes.js";
import type { CryptoProvider } from "./crypto.js";
import { AnswerRejected } from "./errors.js";
import { parseFingerprint } from "./fingerprint.js";
import { fromPlain } from "./json.js";
import {
  checkMember, leafHash, NOTE_KEY_COSIGNATURE, NOTE_KEY_ED25519, openCheckpoint, parseLogPolicy, parseVerifierKey,
  treeRoot, verifyConsistency, verifyInclusion, type NoteKey,
} from "./transparency.js";

/** The schema of the transparency vectors. */
export const TRANSPARENCY_SCHEMA = "converge-vectors/transparency/1";

/** The output fields of a transparency case type beyond `result` and `kind`. */
export const TRANSPARENCY_TYPE_FIELDS: Readonly<Record<string, readonly string[]>> = {
  tree: ["root"],
  checkpoint: ["size", "root"],
};

/** One vector case (or the whole file), or an output, as JSON data. */
export type TransparencyCase = Record<string, unknown>;
type Case = TransparencyCase;

function hashes(texts: unknown, exact: boolean): Uint8Array[] | undefined {
  if (!Array.isArray(texts)) return undefined;
  const out: Uint8Array[] = [];
  for (const t of texts) {
    const h = typeof t === "string" ? fromBase64(t) : undefined;
    if (h === undefined || (exact && h.length !== 32)) return undefined;
    out.push(h);
  }
  return out;
}

function int(c: Case, name: string): number {
  const n = c[name];
  if (typeof n !== "number" || !Number.isSafeInteger(n)) throw new Error(`case ${String(c["id"])}: ${name} is not an integer`);
  return n;
}

/**
 * This implementation's output for one case of `converge-vectors/transparency/1` (`doc` is
 * the whole file): tree -> result + root; inclusion, consistency -> result; checkpoint ->
 * result valid + size + root, or invalid + kind; answer -> result valid, or rejected + kind.
 * An exception means the case itself is unusable.
 */
export async function runTransparencyCase(crypto: CryptoProvider, doc: TransparencyCase, c: TransparencyCase): Promise<TransparencyCase> {
  const out: Case = { id: c["id"] };
  const type = c["type"];
  switch (type) {
    case "tree": {
      const entries = (doc["entries"] as unknown[] | undefined) ?? [];
      const leaves: Uint8Array[] = [];
      for (const e of entries.slice(0, int(c, "size"))) {
        const b = typeof e === "string" ? fromBase64(e) : undefined;
        if (b === undefined) throw new Error("an entry is not base64");
        leaves.push(await leafHash(crypto, b));
      }
      return { ...out, result: "valid", root: toBase64(await treeRoot(crypto, leaves)) };
    }
    case "inclusion": {
      const leaf = hashes([c["leaf"]], true);
      const root = hashes([c["root"]], true);
      const proof = hashes(c["proof"], false);
      const ok = leaf !== undefined && root !== undefined && proof !== undefined &&
        await verifyInclusion(crypto, leaf[0]!, int(c, "index"), int(c, "size"), proof, root[0]!);
      return { ...out, result: ok ? "valid" : "invalid" };
    }
    case "consistency": {
      const roots = hashes([c["old_root"], c["new_root"]], true);
      const proof = hashes(c["proof"], false);
      const ok = roots !== undefined && proof !== undefined &&
        await verifyConsistency(crypto, int(c, "old_size"), int(c, "new_size"), roots[0]!, roots[1]!, proof);
      return { ...out, result: ok ? "valid" : "invalid" };
    }
    case "checkpoint": {
      const log = await parseVerifierKey(crypto, fromPlain(c["log"]), NOTE_KEY_ED25519);
      const witnesses: NoteKey[] = [];
      for (const w of (c["witnesses"] as unknown[] | undefined) ?? []) {
        const k = await parseVerifierKey(crypto, fromPlain(w), NOTE_KEY_COSIGNATURE);
        if (k === undefined) throw new Error(`case ${String(c["id"])}: a witness key does not parse`);
        witnesses.push(k);
      }
      if (log === undefined) throw new Error(`case ${String(c["id"])}: the log key does not parse`);
      try {
        const ck = await openCheckpoint(crypto, fromPlain(c["checkpoint"]), { log, witnesses, minCosignatures: int(c, "min_cosignatures") });
        return { ...out, result: "valid", size: ck.size, root: toBase64(ck.root) };
      } catch (err) {
        if (err instanceof AnswerRejected) return { ...out, result: "invalid", kind: err.reason };
        throw err;
      }
    }
    case "answer": {
      const exp = (c["expect"] as Case | undefined) ?? {};
      const fpText = exp["sha256"] ?? exp["sha1"];
      const fp = parseFingerprint(typeof fpText === "string" ? fpText : "");
      const policy = await parseLogPolicy(crypto, fromPlain(c["bundle"]));
      const m = c["transparency"];
      const member = m === null || m === undefined ? undefined : utf8(JSON.stringify(m));
      const target = { host: fromPlain(exp["host"] ?? null), port: fromPlain(exp["port"] ?? null), ip: fromPlain(exp["ip"] ?? null) };
      try {
        await checkMember(crypto, member, policy, target, fp);
        return { ...out, result: "valid" };
      } catch (err) {
        if (err instanceof AnswerRejected) return { ...out, result: "rejected", kind: err.reason };
        throw err;
      }
    }
    default:
      throw new Error(`unknown transparency case type ${JSON.stringify(type)}`);
  }
}
