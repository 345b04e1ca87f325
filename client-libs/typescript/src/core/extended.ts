/**
 * The extended answer format `converge-answer/1`, client side: verification of a signed
 * answer in the documented order with each failure named, the request, and the reduction of
 * a response to a vote.
 *
 * @module
 */
import { fromBase64Url, indexOf, latin1, toBase64Url, utf8 } from "./bytes.js";
import { EXTENDED_FORMAT, type SigningKey } from "./bundle.js";
import type { CryptoProvider } from "./crypto.js";
import { AnswerRejected } from "./errors.js";
import { parseFingerprint, type Fingerprint } from "./fingerprint.js";
import { asInt, asString, isObject, parseVerified, type JsonObject, type JsonValue } from "./json.js";
import { checkIp, checkTarget, isIpLiteral, type HttpResponse, type Outcome } from "./legacy.js";
import type { Vote } from "./policy.js";
import { checkMember, logTargetOf, TRANSPARENCY_MEMBER, type LogPolicy, type Proven } from "./transparency.js";

const MAX_ANSWER_BYTES = 64 * 1024;
/** Seconds an answer's time may differ from the client's clock by default. */
export const DEFAULT_MAX_SKEW = 300;
/** The Content-Type of a signed answer. */
export const ANSWER_MEDIA_TYPE = "application/vnd.converge.answer+json";
/** The request path of the extended format. */
export const ANSWER_PATH = "/v2/answer";

/** The `extended` configuration modes. */
export type ExtendedMode = "off" | "prefer" | "fallback" | "require";

const VERDICTS = new Set(["match", "mismatch", "unreachable", "refused"]);
/** The status a notary sends with each signed verdict. */
export const VERDICT_STATUS: Readonly<Record<string, number>> = { match: 200, mismatch: 409, unreachable: 503, refused: 403 };
/** Statuses meaning "this notary does not speak the extended format here". */
export const NOT_OFFERED = new Set([400, 404, 405, 501]);

/** Whether a key is trusted at `now`: a current key always, a retired one until valid_until. */
export function trustedAt(k: SigningKey, now: number): boolean {
  return k.status === "current" || (k.status === "retired" && now <= (k.validUntil ?? 0));
}

/** The bundle's signing keys trusted at `now`, by key id. */
export function trustedKeys(keys: readonly SigningKey[], now: number): Map<string, Uint8Array> {
  const out = new Map<string, Uint8Array>();
  for (const k of keys) if (trustedAt(k, now)) out.set(k.keyId, k.publicKey);
  return out;
}

/**
 * The host as a notary names it in `target.host`: an IP literal in its compressed form, a
 * DNS name in lower case without a trailing dot.
 */
export function expectedHost(host: string): string {
  const bare = host.replace(/^\[+|\]+$/g, "");
  if (isIpLiteral(bare)) return checkIp(bare);
  const name = host.toLowerCase();
  return name.endsWith(".") ? name.slice(0, -1) : name;
}

/** A verified answer. */
export interface ExtendedAnswer {
  verdict: "match" | "mismatch" | "unreachable" | "refused";
  detail: string;
  keyId: string;
  answeredAt: number;
  cache: string;
  observations: { sha256: string; sha1: string; firstSeen: number; lastSeen: number }[];
  /** The statement's `target`, as signed. */
  target?: JsonObject;
  /** The statement's `request` (the fingerprint and alg asked about, the nonce), as signed. */
  request?: JsonObject;
  /** The transparency member's value as received (not signed), when the answer carries one. */
  member?: Uint8Array;
}

/**
 * What an answer is bound to. An empty `host` skips the target check, no `fingerprint` the
 * fingerprint check, an empty `nonce` the nonce check, no `now` the freshness check.
 */
export interface Expect {
  host?: string;
  port?: number;
  fingerprint?: Fingerprint;
  nonce?: string;
  now?: number;
  maxSkew?: number;
  /** Check `target.ip`: it must be `ip` (or absent when `ip` is empty: the client named none). */
  bindIp?: boolean;
  ip?: string;
}

const PREFIX = /^\{"signature":\{"alg":"ed25519","key_id":"([\x20\x21\x23-\x5b\x5d-\x7e]+)","value":"([\x20\x21\x23-\x5b\x5d-\x7e]+)"\},"statement":/;

const MEMBER_BYTES = utf8(TRANSPARENCY_MEMBER);

/**
 * Step 1: the key id `K`, the signature `V` and the statement bytes `T` of an answer: the
 * fixed prefix, `T`, a final `}`. `T` ends at the first `,"transparency":` after the prefix,
 * if any; the transparency member's value (`member`, not signed) runs from there to the final
 * `}` (docs/wire-format.md, "Verifying").
 *
 * @throws {@link AnswerRejected} `malformed`
 */
export function splitAnswer(raw: Uint8Array): { keyId: string; value: string; statement: Uint8Array; member?: Uint8Array } {
  if (raw.length > MAX_ANSWER_BYTES) throw new AnswerRejected("malformed", `answer larger than ${MAX_ANSWER_BYTES} bytes`);
  // the prefix is ASCII: matching the first bytes as latin-1 is matching the bytes
  const m = PREFIX.exec(latin1(raw));
  if (m === null || raw.length < m[0].length + 1 || raw[raw.length - 1] !== 0x7d) {
    throw new AnswerRejected("malformed", "answer does not have the canonical answer shape");
  }
  const body = raw.subarray(m[0].length, raw.length - 1);
  const cut = indexOf(body, MEMBER_BYTES);
  if (cut < 0) return { keyId: m[1]!, value: m[2]!, statement: body };
  return { keyId: m[1]!, value: m[2]!, statement: body.subarray(0, cut), member: body.subarray(cut + MEMBER_BYTES.length) };
}

/**
 * Steps 4-5: the bounds scan, `JSON.parse` and the shape of statement bytes `T` signed
 * under key id `keyId`. Call it on bytes whose signature verified.
 *
 * @throws {@link AnswerRejected} `malformed`
 */
export function parseStatement(keyId: string, signed: Uint8Array): JsonObject {
  const stmt = parseVerified(signed);
  if (!isObject(stmt)) throw new AnswerRejected("malformed", "statement is not a bounded strict JSON object");
  if (asString(stmt.get("type")) !== EXTENDED_FORMAT) throw new AnswerRejected("malformed", `not a ${EXTENDED_FORMAT} statement`);
  if (asString(stmt.get("key_id")) !== keyId) throw new AnswerRejected("malformed", "key ids of statement and signature differ");
  const verdict = asString(stmt.get("verdict"));
  if (verdict === undefined || !VERDICTS.has(verdict) || !isObject(stmt.get("target"))) {
    throw new AnswerRejected("malformed", "statement lacks a verdict or target");
  }
  if (asInt(stmt.get("answered_at")) === undefined) throw new AnswerRejected("malformed", "answered_at must be an integer");
  return stmt;
}

function bind(stmt: JsonObject, exp: Expect): void {
  const target = stmt.get("target") as JsonObject;
  if (exp.host) {
    const th = asString(target.get("host"));
    const tp = asInt(target.get("port"));
    if (th === undefined || tp === undefined || th !== expectedHost(exp.host) || tp !== exp.port) {
      throw new AnswerRejected("wrong-target", `answer is about another target, not ${exp.host}:${exp.port}`);
    }
  }
  if (exp.bindIp) {
    const tip = target.get("ip");
    if (!exp.ip) {
      if (tip !== undefined && tip !== null) {
        throw new AnswerRejected("wrong-target", "answer is about a probe of an address the client did not name");
      }
    } else if (asString(tip) !== expectedHost(exp.ip)) {
      throw new AnswerRejected("wrong-target", `answer is about a probe of another address, not ${exp.ip}`);
    }
  }
  const request = stmt.get("request");
  const req = isObject(request) ? request : undefined;
  if (exp.fingerprint !== undefined) {
    if (req === undefined || asString(req.get("alg")) !== exp.fingerprint.algorithm ||
        asString(req.get("fingerprint")) !== exp.fingerprint.colonHex()) {
      throw new AnswerRejected("wrong-target", "answer is about another certificate fingerprint");
    }
  }
  if (exp.nonce) {
    if (req === undefined || asString(req.get("nonce")) !== exp.nonce) {
      throw new AnswerRejected("nonce-mismatch", "answer does not echo our nonce");
    }
  }
}

/**
 * The one parse boundary of an extended answer, in the documented order: malformed (the
 * fixed prefix), unknown-key, bad-signature (Ed25519 over the statement bytes as received),
 * malformed (bounds scan, parse, shape), wrong-target, nonce-mismatch, stale.
 *
 * @throws {@link AnswerRejected}, and nothing else whatever the bytes
 */
export async function verifyAnswer(
  crypto: CryptoProvider,
  raw: Uint8Array,
  keys: ReadonlyMap<string, Uint8Array>,
  exp: Expect,
): Promise<ExtendedAnswer> {
  let stmt: JsonObject;
  let kid: string;
  let member: Uint8Array | undefined;
  try {
    const split = splitAnswer(raw);
    kid = split.keyId;
    member = split.member;
    const pub = keys.get(kid);
    if (pub === undefined) throw new AnswerRejected("unknown-key", `signing key ${kid} is not trusted`);
    const signature = fromBase64Url(split.value);
    let ok = false;
    if (signature !== undefined && signature.length === 64 && pub.length === 32) {
      try {
        ok = await crypto.verifyEd25519(pub, split.statement, signature);
      } catch {
        ok = false; // the crypto library refused the input: it does not verify
      }
    }
    if (!ok) throw new AnswerRejected("bad-signature", "signature does not verify");
    stmt = parseStatement(kid, split.statement);
    bind(stmt, exp);
  } catch (err) {
    if (err instanceof AnswerRejected) throw err;
    throw new AnswerRejected("malformed", `unreadable answer: ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}`);
  }
  const at = asInt(stmt.get("answered_at"))!;
  if (exp.now !== undefined) {
    const skew = exp.maxSkew ?? DEFAULT_MAX_SKEW;
    if (Math.abs(exp.now - at) > skew) {
      throw new AnswerRejected("stale", `answer time is ${exp.now - at} s from now (max skew ${skew} s)`);
    }
  }
  const observations: ExtendedAnswer["observations"] = [];
  const obs = stmt.get("observations");
  if (Array.isArray(obs)) {
    for (const o of obs) {
      const m = isObject(o) ? o : new Map<string, JsonValue>();
      observations.push({
        sha256: asString(m.get("sha256")) ?? "", sha1: asString(m.get("sha1")) ?? "",
        firstSeen: asInt(m.get("first_seen")) ?? 0, lastSeen: asInt(m.get("last_seen")) ?? 0,
      });
    }
  }
  return {
    verdict: asString(stmt.get("verdict")) as ExtendedAnswer["verdict"], detail: asString(stmt.get("detail")) ?? "",
    keyId: kid, answeredAt: at, cache: asString(stmt.get("cache")) ?? "", observations,
    target: stmt.get("target") as JsonObject,
    ...(isObject(stmt.get("request")) ? { request: stmt.get("request") as JsonObject } : {}),
    ...(member === undefined ? {} : { member }),
  };
}

/**
 * The transparency member of a verified answer checked against the bundle's log (steps 1-6
 * of docs/transparency.md, "Clients"): the entry must name the statement's target and
 * `fingerprint`, the one asked about (default: the statement's `request`).
 *
 * @throws {@link AnswerRejected} of a `log-*` kind, and nothing else
 */
export async function checkLog(
  crypto: CryptoProvider, answer: ExtendedAnswer, log: LogPolicy, fingerprint?: Fingerprint,
): Promise<Proven> {
  let fp = fingerprint;
  if (fp === undefined) {
    const alg = asString(answer.request?.get("alg"));
    try {
      fp = parseFingerprint(asString(answer.request?.get("fingerprint")) ?? "");
    } catch {
      throw new AnswerRejected("log-entry", "the statement names no fingerprint");
    }
    if (fp.algorithm !== alg) throw new AnswerRejected("log-entry", "the statement's fingerprint is not of its alg");
  }
  return checkMember(crypto, answer.member, log, logTargetOf(answer.target), fp);
}

/** Unpadded base64url of 16 random bytes. */
export function newNonce(crypto: CryptoProvider): string {
  return toBase64Url(crypto.randomBytes(16));
}

/**
 * The JSON body of an extended request (what a browser POSTs to `/v2/answer`);
 * `transparency`: ask for a proof of inclusion in the notary's log (`"transparency": true`),
 * as a client does of a notary whose bundle names a log.
 */
export function extendedRequestBody(host: string, port: number, fp: Fingerprint, nonce: string, ip?: string, transparency = false): string {
  checkTarget(host, port);
  let body = `{"host":${JSON.stringify(host)},"port":${port},"fingerprint":"${fp.colonHex()}","alg":"${fp.algorithm}"`;
  if (ip) body += `,"ip":"${checkIp(ip)}"`;
  if (nonce) body += `,"nonce":"${nonce}"`;
  if (transparency) body += `,"transparency":true`;
  return body + "}";
}

/** The whole HTTP/1.0 request of the extended format (`transparency`: see {@link extendedRequestBody}). */
export function extendedRequestBytes(host: string, port: number, fp: Fingerprint, nonce: string, ip?: string, transparency = false): Uint8Array {
  const body = extendedRequestBody(host, port, fp, nonce, ip, transparency);
  const head =
    `POST ${ANSWER_PATH} HTTP/1.0\r\nContent-Type: application/json\r\nAccept: ${ANSWER_MEDIA_TYPE}\r\n` +
    `Connection: close\r\nContent-Length: ${utf8(body).length}\r\n\r\n`;
  return utf8(head + body);
}

/** The fingerprint form to ask about: SHA-256 when known, else the first. */
export function requestFingerprint(forms: readonly Fingerprint[]): Fingerprint {
  return forms.find((f) => f.algorithm === "sha256") ?? forms[0]!;
}

const EXT_VOTES: Record<string, [Vote, string]> = {
  match: ["success", "match"],
  mismatch: ["failure", "mismatch"],
  unreachable: ["unreachable", "target-unreachable"],
  refused: ["unreachable", "refused"], // it says nothing about the certificate
};

/**
 * Reduces one extended response to a vote: a verification failure is a failure of the kind
 * it names; a status that does not fit the signed verdict is a `response` failure; a
 * response without a signed answer is an unreachable `status`. With `log` (the bundle names a
 * transparency log) a `match` must carry a valid proof of inclusion ({@link checkLog}), else
 * it is a failure of that `log-*` kind.
 */
export async function evaluateExtended(
  crypto: CryptoProvider,
  resp: HttpResponse,
  keys: ReadonlyMap<string, Uint8Array>,
  exp: Expect,
  log?: LogPolicy,
): Promise<Outcome> {
  const ctype = (resp.headers.get("content-type") ?? "").split(";", 1)[0]!.trim().toLowerCase();
  const signed = Object.values(VERDICT_STATUS).includes(resp.status);
  if (!signed || ctype !== ANSWER_MEDIA_TYPE) {
    return { vote: "unreachable", kind: "status", status: resp.status, detail: `HTTP status ${resp.status}` };
  }
  let v: ExtendedAnswer;
  try {
    v = await verifyAnswer(crypto, resp.body, keys, exp);
  } catch (err) {
    if (err instanceof AnswerRejected) return { vote: "failure", kind: err.reason, status: resp.status, detail: err.message };
    throw err;
  }
  if (VERDICT_STATUS[v.verdict] !== resp.status) {
    return { vote: "failure", kind: "response", status: resp.status, detail: `status ${resp.status} with signed verdict ${v.verdict}` };
  }
  let proven: Proven | undefined;
  if (log !== undefined && v.verdict === "match") {
    try {
      proven = await checkLog(crypto, v, log, exp.fingerprint);
    } catch (err) {
      if (err instanceof AnswerRejected) return { vote: "failure", kind: err.reason, status: resp.status, detail: err.message };
      throw err;
    }
  }
  const [vote, kind] = EXT_VOTES[v.verdict]!;
  return { vote, kind, status: resp.status, detail: v.detail, answer: resp.body, ...(proven === undefined ? {} : { proven }) };
}
