/**
 * The notary's transparency log, client side (no IO; hashes and Ed25519 through the
 * {@link CryptoProvider}): a bundle's `transparency` member and the check of the proof an
 * extended answer carries (docs/transparency.md, "Clients"; formats c2sp.org/signed-note,
 * c2sp.org/tlog-checkpoint, c2sp.org/tlog-cosignature; hashing RFC 6962, verification as in
 * RFC 9162).
 *
 * For a `match` answer of a bundle that names a log, once every check of the statement has
 * passed, {@link checkMember} checks the member in this order, each failure an
 * {@link AnswerRejected} of the kind named (that notary's failure vote):
 *
 * 1. the member is present, else `log-missing`;
 * 2. the bounds scan and `JSON.parse` give an object with string `checkpoint` and `entry`, an
 *    integer `index` >= 0 and a `proof` array of at most 63 strings, else `log-proof`;
 * 3. `checkpoint` is a signed note (at most 64 KiB, no control character but newline) whose
 *    text is a checkpoint (origin, size in decimal without leading zeros, base64 of a 32-byte
 *    root, optional extension lines), whose origin is the log key's name and which the log key
 *    signed, else `log-checkpoint`; lines by unknown keys are ignored;
 * 4. at least `min_cosignatures` distinct witnesses of the bundle cosigned it; a listed
 *    witness's line that does not verify, or too few, is `log-witness`;
 * 5. `entry` is base64 of a bounded strict JSON object of type `converge-observation/1` whose
 *    `host`, `port` and `ip` are the statement's target and whose `sha256` (or `sha1`, asked
 *    by SHA-1) is the fingerprint asked about, else `log-entry`;
 * 6. every proof hash is base64 of 32 bytes and the path proves `SHA-256(0x00 || entry)` at
 *    `index` in the checkpoint's tree, else `log-proof`.
 *
 * @module
 */
import { bytesEqual, concatBytes, fromBase64, fromHex, toHex, utf8 } from "./bytes.js";
import type { CryptoProvider } from "./crypto.js";
import { weakKey } from "./ed25519.js";
import { AnswerRejected, BundleError, type LogKind } from "./errors.js";
import type { Fingerprint } from "./fingerprint.js";
import { asInt, asString, isObject, parseVerified, type JsonObject, type JsonValue } from "./json.js";

/** The failure kinds of the transparency checks, in check order. */
export const LOG_KINDS: readonly LogKind[] = ["log-missing", "log-proof", "log-checkpoint", "log-witness", "log-entry"];
/** The `type` of a logged entry. */
export const LOG_ENTRY_TYPE = "converge-observation/1";
/** Where the signed statement ends when an answer carries a transparency member. */
export const TRANSPARENCY_MEMBER = ',"transparency":';
/** The signed-note key type of a log's Ed25519 key. */
export const NOTE_KEY_ED25519 = 0x01;
/** The signed-note key type of a witness's cosignature key (c2sp.org/tlog-cosignature). */
export const NOTE_KEY_COSIGNATURE = 0x04;
/** Most hashes in an inclusion proof. */
export const MAX_PROOF_HASHES = 63;
/** Largest signed note accepted (bytes). */
export const MAX_NOTE_BYTES = 64 * 1024;
/** Most witnesses a bundle may name. */
export const MAX_WITNESSES = 32;
const MAX_SIGNATURE_LINES = 100;
const SIG_PREFIX = "\u2014 "; // em dash, space
const SIZE_RE = /^(?:0|[1-9][0-9]{0,19})$/;
const NAME_RE = /^[^+\s\p{C}\p{Z}]+$/u;

/** A signed-note verifier key (`<name>+<8 hex key id>+<base64 of type || 32-byte key>`). */
export interface NoteKey {
  readonly name: string;
  /** The 4-byte key id: SHA-256(name || "\n" || type || key)[:4]. */
  readonly keyId: Uint8Array;
  /** The raw 32-byte Ed25519 public key. */
  readonly publicKey: Uint8Array;
  /** 0x01 (a log's key) or 0x04 (a witness's cosignature key). */
  readonly type: number;
  /** The key as written. */
  readonly vkey: string;
}

/** A bundle's `transparency` member: the log, its witnesses and the cosignatures required. */
export interface LogPolicy {
  readonly log: NoteKey;
  readonly url?: string;
  readonly witnesses: readonly NoteKey[];
  readonly minCosignatures: number;
}

/** A checkpoint signed by the log (and cosigned by the witnesses named). */
export interface Checkpoint {
  readonly origin: string;
  /** The tree size (exact below 2^53; the proofs are checked on the exact size). */
  readonly size: number;
  readonly root: Uint8Array;
  readonly cosignedBy: readonly string[];
}

/** What a valid member proves: the entry at `index` of the log's tree `checkpoint`. */
export interface Proven {
  readonly index: number;
  readonly entry: JsonObject;
  readonly checkpoint: Checkpoint;
}

/** The statement's target, as the entry must name it. */
export interface LogTarget {
  host: JsonValue | undefined;
  port: JsonValue | undefined;
  ip: JsonValue | undefined;
}

function nameOk(name: string): boolean {
  return NAME_RE.test(name);
}

/** A signed-note key id: the first 4 bytes of SHA-256(name || "\n" || type || key). */
export async function noteKeyId(crypto: CryptoProvider, name: string, type: number, raw: Uint8Array): Promise<Uint8Array> {
  const h = await crypto.sha256(concatBytes([utf8(name), Uint8Array.of(0x0a, type), raw]));
  return h.subarray(0, 4);
}

/**
 * Parses a verifier key of key type `type`; `undefined` when it is not one (a wrong shape,
 * type byte or key id).
 *
 * @throws {@link BundleError} when its Ed25519 key is weak ({@link weakKey})
 */
export async function parseVerifierKey(crypto: CryptoProvider, text: JsonValue | undefined, type: number): Promise<NoteKey | undefined> {
  if (typeof text !== "string" || text.length > 1024) return undefined;
  const a = text.indexOf("+");
  const b = a < 0 ? -1 : text.indexOf("+", a + 1);
  if (b < 0) return undefined;
  const name = text.slice(0, a);
  const hexId = text.slice(a + 1, b);
  if (!nameOk(name) || !/^[0-9a-f]{8}$/.test(hexId)) return undefined;
  const raw = fromBase64(text.slice(b + 1));
  if (raw === undefined || raw.length !== 33 || raw[0] !== type) return undefined;
  const publicKey = raw.slice(1);
  const weak = weakKey(publicKey);
  if (weak !== undefined) {
    throw new BundleError(`${type === NOTE_KEY_ED25519 ? "transparency log" : "witness"} key ${JSON.stringify(name)}: ${weak}`);
  }
  const keyId = fromHex(hexId)!;
  if (!bytesEqual(await noteKeyId(crypto, name, type, publicKey), keyId)) return undefined;
  return { name, keyId, publicKey, type, vkey: text };
}

/**
 * Parses a bundle's `transparency` member strictly.
 *
 * @throws {@link BundleError}
 */
export async function parseLogPolicy(crypto: CryptoProvider, v: JsonValue | undefined): Promise<LogPolicy> {
  if (!isObject(v)) throw new BundleError("transparency must be an object");
  for (const k of v.keys()) {
    if (!["log", "url", "witnesses", "min_cosignatures"].includes(k)) {
      throw new BundleError(`unknown transparency field ${JSON.stringify(k)}`);
    }
  }
  const log = await parseVerifierKey(crypto, v.get("log"), NOTE_KEY_ED25519);
  if (log === undefined) throw new BundleError("transparency log must be a verifier key <name>+<8 hex>+<base64 of 0x01 || Ed25519 key>");
  const url = v.get("url");
  if (url !== undefined && url !== null &&
      (typeof url !== "string" || !url.startsWith("https://") || [...url].length > 2048)) {
    throw new BundleError("transparency url must be an https:// URL");
  }
  const ws = v.has("witnesses") ? v.get("witnesses") : [];
  if (!Array.isArray(ws) || ws.length > MAX_WITNESSES) {
    throw new BundleError(`transparency witnesses must be a list of at most ${MAX_WITNESSES}`);
  }
  const witnesses: NoteKey[] = [];
  const seen = new Set<string>();
  for (const w of ws) {
    if (!isObject(w) || w.size !== 2 || !w.has("name") || !w.has("vkey")) {
      throw new BundleError("a witness is an object with name and vkey");
    }
    const key = await parseVerifierKey(crypto, w.get("vkey"), NOTE_KEY_COSIGNATURE);
    if (key === undefined) throw new BundleError("a witness vkey must be <name>+<8 hex>+<base64 of 0x04 || Ed25519 key>");
    if (key.name !== w.get("name")) throw new BundleError(`witness name ${JSON.stringify(w.get("name"))} is not its key's name`);
    const id = `${key.name}\n${toHex(key.keyId)}`;
    if (seen.has(id)) throw new BundleError("a witness is listed twice");
    seen.add(id);
    witnesses.push(key);
  }
  // One key under two names: a cosignature does not sign the witness's name, so one key
  // would count as two witnesses (or the log would cosign its own checkpoints).
  const raws = new Set([log, ...witnesses].map((k) => toHex(k.publicKey)));
  if (raws.size !== witnesses.length + 1) {
    throw new BundleError("transparency names one key twice (two witnesses, or a witness and the log)");
  }
  const need = v.has("min_cosignatures") ? asInt(v.get("min_cosignatures")) : 0;
  if (need === undefined || need < 0 || need > witnesses.length) {
    throw new BundleError(`min_cosignatures must be an integer from 0 to ${witnesses.length}`);
  }
  return { log, ...(typeof url === "string" ? { url } : {}), witnesses, minCosignatures: need };
}

// ---------------------------------------------------------------------------- hashing

/** RFC 6962 leaf hash: SHA-256(0x00 || entry). */
export async function leafHash(crypto: CryptoProvider, entry: Uint8Array): Promise<Uint8Array> {
  return crypto.sha256(concatBytes([Uint8Array.of(0), entry]));
}

/** RFC 6962 interior node hash: SHA-256(0x01 || left || right). */
export async function nodeHash(crypto: CryptoProvider, left: Uint8Array, right: Uint8Array): Promise<Uint8Array> {
  return crypto.sha256(concatBytes([Uint8Array.of(1), left, right]));
}

/** RFC 6962, 2.1: the root of the leaf hashes `leaves`. */
export async function treeRoot(crypto: CryptoProvider, leaves: readonly Uint8Array[]): Promise<Uint8Array> {
  if (leaves.length === 0) return crypto.sha256(new Uint8Array(0));
  if (leaves.length === 1) return leaves[0]!;
  let k = 1;
  while (k * 2 < leaves.length) k *= 2; // the largest power of two below the size
  return nodeHash(crypto, await treeRoot(crypto, leaves.slice(0, k)), await treeRoot(crypto, leaves.slice(k)));
}

/** RFC 9162, 2.1.3.2: whether `proof` puts leaf hash `leaf` at `index` of the tree of `size` with `root`. */
export async function verifyInclusion(
  crypto: CryptoProvider, leaf: Uint8Array, index: number | bigint, size: number | bigint,
  proof: readonly Uint8Array[], root: Uint8Array,
): Promise<boolean> {
  let fn = BigInt(index);
  let sn = BigInt(size) - 1n;
  if (fn < 0n || fn > sn) return false;
  if (proof.some((p) => p.length !== 32) || leaf.length !== 32) return false;
  let r = leaf;
  for (const p of proof) {
    if (sn === 0n) return false;
    if ((fn & 1n) === 1n || fn === sn) {
      r = await nodeHash(crypto, p, r);
      while ((fn & 1n) === 0n && fn !== 0n) {
        fn >>= 1n;
        sn >>= 1n;
      }
    } else {
      r = await nodeHash(crypto, r, p);
    }
    fn >>= 1n;
    sn >>= 1n;
  }
  return sn === 0n && bytesEqual(r, root);
}

/** RFC 9162, 2.1.4.2: whether `proof` shows the tree of `oldSize` is a prefix of the tree of `newSize`. */
export async function verifyConsistency(
  crypto: CryptoProvider, oldSize: number | bigint, newSize: number | bigint,
  oldRoot: Uint8Array, newRoot: Uint8Array, proof: readonly Uint8Array[],
): Promise<boolean> {
  const old = BigInt(oldSize);
  const nw = BigInt(newSize);
  if (old < 0n || old > nw || proof.some((p) => p.length !== 32)) return false;
  if (old === nw || old === 0n) return proof.length === 0 && (old !== nw || bytesEqual(oldRoot, newRoot));
  const path = (old & (old - 1n)) === 0n ? [oldRoot, ...proof] : [...proof];
  if (path.length === 0) return false;
  let fn = old - 1n;
  let sn = nw - 1n;
  while ((fn & 1n) === 1n) {
    fn >>= 1n;
    sn >>= 1n;
  }
  let fr = path[0]!;
  let sr = path[0]!;
  for (const c of path.slice(1)) {
    if (sn === 0n) return false;
    if ((fn & 1n) === 1n || fn === sn) {
      fr = await nodeHash(crypto, c, fr);
      sr = await nodeHash(crypto, c, sr);
      while ((fn & 1n) === 0n && fn !== 0n) {
        fn >>= 1n;
        sn >>= 1n;
      }
    } else {
      sr = await nodeHash(crypto, sr, c);
    }
    fn >>= 1n;
    sn >>= 1n;
  }
  return sn === 0n && bytesEqual(fr, oldRoot) && bytesEqual(sr, newRoot);
}

// ---------------------------------------------------------------------------- notes

class NoteError extends Error {}

interface SigLine {
  name: string;
  keyId: Uint8Array;
  sig: Uint8Array;
}

function splitNote(note: string): { text: string; sigs: SigLine[] } {
  if (utf8(note).length > MAX_NOTE_BYTES) throw new NoteError(`note larger than ${MAX_NOTE_BYTES} bytes`);
  // control characters but newline, and lone surrogates (not UTF-8)
  if (/[\x00-\x09\x0b-\x1f\x7f-\x9f]|\p{Cs}/u.test(note)) throw new NoteError("control character in the note");
  const cut = note.lastIndexOf("\n\n");
  if (cut < 0 || !note.endsWith("\n")) throw new NoteError("not a signed note");
  const lines = note.slice(cut + 2, -1).split("\n");
  if (lines.length > MAX_SIGNATURE_LINES) throw new NoteError("too many signature lines");
  const sigs: SigLine[] = [];
  for (const line of lines) {
    const rest = line.startsWith(SIG_PREFIX) ? line.slice(SIG_PREFIX.length) : undefined;
    const sp = rest === undefined ? -1 : rest.indexOf(" ");
    if (rest === undefined || sp < 0 || !nameOk(rest.slice(0, sp))) throw new NoteError("malformed signature line");
    const raw = fromBase64(rest.slice(sp + 1));
    if (raw === undefined) throw new NoteError("signature is not base64");
    if (raw.length < 5) throw new NoteError("signature too short");
    sigs.push({ name: rest.slice(0, sp), keyId: raw.subarray(0, 4), sig: raw.subarray(4) });
  }
  return { text: note.slice(0, cut + 1), sigs };
}

function checkpointText(text: string): { origin: string; size: bigint; root: Uint8Array } {
  const lines = text.slice(0, -1).split("\n");
  if (lines.length < 3 || lines.some((l) => l === "")) throw new NoteError("a checkpoint has origin, size and root lines");
  if (!SIZE_RE.test(lines[1]!)) throw new NoteError("size is not a decimal without leading zeros");
  const root = fromBase64(lines[2]!);
  if (root === undefined || root.length !== 32) throw new NoteError("root is not base64 of 32 bytes");
  return { origin: lines[0]!, size: BigInt(lines[1]!), root };
}

async function verifyEd(crypto: CryptoProvider, key: Uint8Array, msg: Uint8Array, sig: Uint8Array): Promise<boolean> {
  if (sig.length !== 64) return false;
  try {
    return await crypto.verifyEd25519(key, msg, sig);
  } catch {
    return false;
  }
}

/** Whether `key` signed (its first line decides); a NoteError when that line does not verify. */
async function signedBy(crypto: CryptoProvider, key: NoteKey, sigs: readonly SigLine[], text: Uint8Array, cosig: boolean): Promise<boolean> {
  const line = sigs.find((s) => s.name === key.name && bytesEqual(s.keyId, key.keyId));
  if (line === undefined) return false;
  let ok: boolean;
  if (cosig) {
    let t = 0n;
    for (const b of line.sig.subarray(0, 8)) t = t * 256n + BigInt(b);
    ok = line.sig.length === 72 &&
      await verifyEd(crypto, key.publicKey, concatBytes([utf8(`cosignature/v1\ntime ${t}\n`), text]), line.sig.subarray(8));
  } else {
    ok = await verifyEd(crypto, key.publicKey, text, line.sig);
  }
  if (!ok) throw new NoteError(`the signature line of ${key.name} does not verify`);
  return true;
}

/**
 * Steps 3 and 4: the checkpoint `note`, signed by the policy's log and cosigned by at least
 * `minCosignatures` of its witnesses.
 *
 * @throws {@link AnswerRejected} `log-checkpoint` or `log-witness`, and nothing else
 */
export async function openCheckpoint(crypto: CryptoProvider, note: JsonValue | undefined, policy: LogPolicy): Promise<Checkpoint> {
  return (await openExact(crypto, note, policy)).checkpoint;
}

async function openExact(crypto: CryptoProvider, note: JsonValue | undefined, policy: LogPolicy): Promise<{ checkpoint: Checkpoint; size: bigint }> {
  let text: Uint8Array;
  let sigs: SigLine[];
  let ck: { origin: string; size: bigint; root: Uint8Array };
  try {
    if (typeof note !== "string") throw new NoteError("the checkpoint is not text");
    const split = splitNote(note);
    sigs = split.sigs;
    ck = checkpointText(split.text);
    if (ck.origin !== policy.log.name) throw new NoteError(`origin ${JSON.stringify(ck.origin)} is not the log's ${JSON.stringify(policy.log.name)}`);
    text = utf8(split.text);
    if (!(await signedBy(crypto, policy.log, sigs, text, false))) throw new NoteError("no signature by the log's key");
  } catch (err) {
    throw new AnswerRejected("log-checkpoint", `checkpoint: ${err instanceof Error ? err.message : String(err)}`);
  }
  const cosignedBy: string[] = [];
  for (const w of policy.witnesses) {
    try {
      if (await signedBy(crypto, w, sigs, text, true)) cosignedBy.push(w.name);
    } catch (err) {
      throw new AnswerRejected("log-witness", `checkpoint: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  if (cosignedBy.length < policy.minCosignatures) {
    throw new AnswerRejected("log-witness",
      `checkpoint cosigned by ${cosignedBy.length} of the bundle's witnesses, ${policy.minCosignatures} required`);
  }
  return { checkpoint: { origin: ck.origin, size: Number(ck.size), root: ck.root, cosignedBy }, size: ck.size };
}

// ---------------------------------------------------------------------------- the member

function sameValue(got: JsonValue | undefined, want: JsonValue | undefined): boolean {
  const g = got ?? null;
  const w = want ?? null;
  if (g !== null && typeof g === "object") return false;
  return g === w;
}

/**
 * Checks an answer's `transparency` member (its raw bytes as received, `undefined` when
 * absent) for the statement's `target` and the fingerprint asked about (steps 1-6 above).
 *
 * @throws {@link AnswerRejected} of a `log-*` kind, and nothing else whatever the bytes
 */
export async function checkMember(
  crypto: CryptoProvider,
  member: Uint8Array | undefined,
  policy: LogPolicy,
  target: LogTarget,
  fingerprint: Fingerprint,
): Promise<Proven> {
  if (member === undefined) throw new AnswerRejected("log-missing", "the answer carries no proof of inclusion in the log");
  try {
    // step 2
    const obj = parseVerified(member);
    const index = isObject(obj) ? asInt(obj.get("index")) : undefined;
    const proofTexts = isObject(obj) ? obj.get("proof") : undefined;
    if (!isObject(obj) || asString(obj.get("checkpoint")) === undefined || asString(obj.get("entry")) === undefined ||
        index === undefined || index < 0 || !Array.isArray(proofTexts) || proofTexts.length > MAX_PROOF_HASHES ||
        !proofTexts.every((p) => typeof p === "string")) {
      throw new AnswerRejected("log-proof", "transparency member is not an object with checkpoint, entry, index and proof");
    }
    // steps 3, 4
    const { checkpoint: ck, size } = await openExact(crypto, obj.get("checkpoint"), policy);
    // step 5
    const entryBytes = fromBase64(asString(obj.get("entry"))!);
    const entry = entryBytes === undefined ? undefined : parseVerified(entryBytes);
    if (entryBytes === undefined || entry === undefined) throw new AnswerRejected("log-entry", "the logged entry is not base64 of bounded strict JSON");
    if (!isObject(entry) || entry.get("type") !== LOG_ENTRY_TYPE) throw new AnswerRejected("log-entry", `the logged entry is not a ${LOG_ENTRY_TYPE}`);
    for (const name of ["host", "port", "ip"] as const) {
      if (!sameValue(entry.get(name), target[name])) {
        throw new AnswerRejected("log-entry", `the logged entry's ${name} is ${JSON.stringify(entry.get(name) ?? null)}, not ${JSON.stringify(target[name] ?? null)}`);
      }
    }
    if (entry.get(fingerprint.algorithm) !== fingerprint.colonHex()) {
      throw new AnswerRejected("log-entry", "the logged entry is about another certificate");
    }
    // step 6
    const proof: Uint8Array[] = [];
    for (const p of proofTexts as string[]) {
      const h = fromBase64(p);
      if (h === undefined || h.length !== 32) throw new AnswerRejected("log-proof", "inclusion proof: a hash is not base64 of 32 bytes");
      proof.push(h);
    }
    if (!(await verifyInclusion(crypto, await leafHash(crypto, entryBytes), index, size, proof, ck.root))) {
      throw new AnswerRejected("log-proof", `inclusion proof does not put the entry at ${index} of the tree of ${ck.size}`);
    }
    return { index, entry, checkpoint: ck };
  } catch (err) {
    if (err instanceof AnswerRejected) throw err;
    throw new AnswerRejected("log-proof", `unreadable transparency member: ${err instanceof Error ? err.message : String(err)}`);
  }
}

/**
 * The statement's `target` as a {@link LogTarget} (its `host`, `port` and `ip`; an absent
 * `ip` is `null`).
 */
export function logTargetOf(target: JsonValue | undefined): LogTarget {
  const t = isObject(target) ? target : new Map<string, JsonValue>();
  return { host: t.get("host"), port: t.get("port"), ip: t.get("ip") ?? null };
}
