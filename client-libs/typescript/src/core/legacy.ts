/**
 * The legacy (Convergence v1) protocol, client side: the request bytes, the response
 * framing, the signed bytes `S` (the body up to its signature member), RSA/SHA-1 over `S`,
 * the parse of `S` alone and the reduction of an answer to a vote. Pure, apart from the
 * signature check through the crypto provider.
 *
 * @module
 */
import { concatBytes, fromBase64, fromLatin1, indexOf, latin1, lastIndexOf, utf8 } from "./bytes.js";
import type { CertificateKey, CryptoProvider } from "./crypto.js";
import { ConvergeError, ResponseError, SignatureError, TargetError } from "./errors.js";
import { Fingerprint, parseFingerprint } from "./fingerprint.js";
import { asString, isObject, parseVerified, type JsonValue } from "./json.js";
import type { Vote } from "./policy.js";
import type { Proven } from "./transparency.js";

/** Largest response accepted by default (bytes). */
export const MAX_RESPONSE_BYTES = 256 * 1024;
const MAX_HEADER_BYTES = 16 * 1024;
const MAX_HISTORY_ENTRIES = 1000;

const HOST_RE = /^[A-Za-z0-9._:-]{1,253}$/;

/** Refuses a host or port that cannot be put into `/target/<host>+<port>`. */
export function checkTarget(host: string, port: number): void {
  if (typeof host !== "string" || !HOST_RE.test(host) || host.startsWith(".") || host.startsWith("-")) {
    throw new TargetError(`invalid target host ${JSON.stringify(host)}`);
  }
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new TargetError(`invalid target port ${String(port)}`);
  }
}

/** The cache and record key `host:port` (host lower-cased). */
export function location(host: string, port: number): string {
  return `${host.toLowerCase()}:${port}`;
}

// ----------------------------------------------------------------- IP literals

function parseIPv4(s: string): number[] | undefined {
  const parts = s.split(".");
  if (parts.length !== 4) return undefined;
  const out: number[] = [];
  for (const p of parts) {
    if (!/^(?:0|[1-9][0-9]{0,2})$/.test(p)) return undefined;
    const n = Number(p);
    if (n > 255) return undefined;
    out.push(n);
  }
  return out;
}

function parseIPv6(s: string): number[] | undefined {
  if (s.includes("%")) return undefined; // zones are not addresses a notary can connect to
  let head = s;
  let tail4: number[] | undefined;
  const lastColon = s.lastIndexOf(":");
  if (s.slice(lastColon + 1).includes(".")) {
    tail4 = parseIPv4(s.slice(lastColon + 1));
    if (tail4 === undefined) return undefined;
    head = s.slice(0, lastColon + 1) + "0:0"; // two placeholder groups
  }
  const halves = head.split("::");
  if (halves.length > 2) return undefined;
  const groups = (h: string): number[] | undefined => {
    if (h === "") return [];
    const out: number[] = [];
    for (const g of h.split(":")) {
      if (!/^[0-9A-Fa-f]{1,4}$/.test(g)) return undefined;
      out.push(parseInt(g, 16));
    }
    return out;
  };
  const a = groups(halves[0]!);
  const b = halves.length === 2 ? groups(halves[1]!) : [];
  if (a === undefined || b === undefined) return undefined;
  let words: number[];
  if (halves.length === 2) {
    if (a.length + b.length > 7) return undefined;
    words = [...a, ...new Array<number>(8 - a.length - b.length).fill(0), ...b];
  } else {
    if (a.length !== 8) return undefined;
    words = a;
  }
  if (tail4 !== undefined) {
    words[6] = (tail4[0]! << 8) | tail4[1]!;
    words[7] = (tail4[2]! << 8) | tail4[3]!;
  }
  return words;
}

function formatIPv6(w: number[]): string {
  // RFC 5952: the longest run (at least two) of zero groups becomes ::, the first on a tie
  let best = -1;
  let bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (w[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && w[j] === 0) j++;
    if (j - i > bestLen) {
      best = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (x: number[]): string => x.map((g) => g.toString(16)).join(":");
  if (bestLen < 2) return hex(w);
  return `${hex(w.slice(0, best))}::${hex(w.slice(best + bestLen))}`;
}

/** Whether `text` is an IPv4 or IPv6 literal. */
export function isIpLiteral(text: string): boolean {
  return parseIPv4(text) !== undefined || (text.includes(":") && parseIPv6(text) !== undefined);
}

/**
 * An IP address literal in its compressed form (IPv6 as RFC 5952, every group in hex, as
 * the notary's Python writes addresses), or a {@link TargetError}.
 */
export function checkIp(ip: string): string {
  const v4 = parseIPv4(ip);
  if (v4 !== undefined) return v4.join(".");
  const v6 = ip.includes(":") ? parseIPv6(ip) : undefined;
  if (v6 === undefined) throw new TargetError(`invalid target address ${JSON.stringify(ip)}`);
  return formatIPv6(v6);
}

/**
 * The exact request the 2011 add-on sends. An `ip` asks the notary to connect to that
 * address (`/target/<host>+<port>/<ip>`).
 */
export function requestBytes(host: string, port: number, fp: Fingerprint, ip?: string): Uint8Array {
  checkTarget(host, port);
  const suffix = ip ? "/" + checkIp(ip) : "";
  const body = "fingerprint=" + fp.colonHex();
  const head =
    `POST /target/${host.toLowerCase()}+${port}${suffix} HTTP/1.0\r\n` +
    "Content-Type: application/x-www-form-urlencoded\r\n" +
    "Connection: close\r\n" +
    `Content-Length: ${body.length}\r\n\r\n`;
  return utf8(head + body);
}

// ----------------------------------------------------------------- responses

/** A split HTTP/1.x response; header names lower-cased, repeated headers joined by ", ". */
export interface HttpResponse {
  status: number;
  headers: Map<string, string>;
  body: Uint8Array;
}

const STATUS_LINE = /^HTTP\/1\.[01] ([0-9]{3})(?: .*)?$/s;
const PY_SPACE = "[ \\t\\n\\r\\v\\f\\x1c\\x1d\\x1e\\x1f\\x85\\xa0]";
const PY_STRIP = new RegExp(`^${PY_SPACE}+|${PY_SPACE}+$`, "g");

/** What Python's `str.strip()` strips from latin-1 text. */
export function pyStrip(s: string): string {
  return s.replace(PY_STRIP, "");
}

/**
 * Splits a complete response read until the server closed. Chunked coding is refused; a
 * Content-Length longer than the body is a truncated response; bytes after it are ignored.
 *
 * @throws {@link ResponseError}
 */
export function parseHttpResponse(raw: Uint8Array, maxBytes = MAX_RESPONSE_BYTES): HttpResponse {
  if (raw.length > maxBytes) throw new ResponseError(`response larger than ${maxBytes} bytes`);
  let sep = indexOf(raw, fromLatin1("\r\n\r\n"));
  let sepLen = 4;
  if (sep < 0) {
    sep = indexOf(raw, fromLatin1("\n\n"));
    sepLen = 2;
  }
  if (sep < 0) throw new ResponseError("response has no end of headers");
  if (sep > MAX_HEADER_BYTES) throw new ResponseError("response headers too large");
  const lines = latin1(raw.subarray(0, sep)).replace(/\r\n/g, "\n").split("\n");
  const m = STATUS_LINE.exec(lines[0]!);
  if (!m) throw new ResponseError(`bad status line ${JSON.stringify(lines[0]!.slice(0, 80))}`);
  const status = Number(m[1]);
  const headers = new Map<string, string>();
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(":");
    const name = colon < 0 ? "" : line.slice(0, colon);
    if (colon < 0 || name === "" || name !== pyStrip(name)) {
      throw new ResponseError(`bad header line ${JSON.stringify(line.slice(0, 80))}`);
    }
    const key = name.toLowerCase();
    const value = pyStrip(line.slice(colon + 1));
    const old = headers.get(key);
    headers.set(key, old === undefined ? value : `${old}, ${value}`);
  }
  let body = raw.subarray(sep + sepLen);
  if ((headers.get("transfer-encoding") ?? "").toLowerCase().includes("chunked")) {
    throw new ResponseError("chunked transfer coding is not allowed on notary responses");
  }
  const cl = headers.get("content-length");
  if (cl !== undefined) {
    if (!/^[0-9]{1,12}$/.test(cl)) throw new ResponseError(`bad Content-Length ${JSON.stringify(cl.slice(0, 20))}`);
    const n = Number(cl);
    if (n > body.length) throw new ResponseError("truncated response body");
    body = body.subarray(0, n);
  }
  return { status, headers, body };
}

/** One fingerprint of a notary's history for a target. */
export interface HistoryEntry {
  fingerprint: Fingerprint;
  start: number;
  finish: number;
}

/** A verified 200/409 body: the signed bytes `S` and what they say. */
export interface SignedList {
  entries: HistoryEntry[];
  signature: Uint8Array;
  /** `S`: the body before its signature member, then `}` (what the signature covers). */
  signedBytes: Uint8Array;
}

/** Whether `fp` is in the signed history. */
export function lists(s: SignedList, fp: Fingerprint): boolean {
  return s.entries.some((e) => e.fingerprint.equals(fp));
}

function timestamp(v: JsonValue | undefined, what: string): number {
  const s = asString(v);
  if (s !== undefined && /^[0-9]{1,12}$/.test(s)) return Number(s);
  if (typeof v === "number" && Number.isInteger(v) && v >= 0 && v < 1_000_000_000_000) return v;
  throw new ResponseError(`${what} is not a decimal unix time`);
}

const SIG_MARKER = utf8(', "signature": "');
const SIG_TAIL = /^[A-Za-z0-9+/]+={0,2}$/;

/**
 * Step 1: `S` and the signature of a body that is `S` without its final `}`, then
 * `, "signature": "<base64>"}` as its very last bytes.
 *
 * @throws {@link ResponseError} for any other shape; {@link SignatureError} when the base64
 * does not decode
 */
export function splitSignedBody(body: Uint8Array, maxBytes = MAX_RESPONSE_BYTES): { signedBytes: Uint8Array; signature: Uint8Array } {
  if (body.length > maxBytes) throw new ResponseError(`body larger than ${maxBytes} bytes`);
  const i = lastIndexOf(body, SIG_MARKER);
  if (i < 0) throw new ResponseError("body has no signature member");
  const from = i + SIG_MARKER.length;
  const n = body.length;
  if (n - from < 3 || body[n - 2] !== 0x22 || body[n - 1] !== 0x7d || !SIG_TAIL.test(latin1(body.subarray(from, n - 2)))) {
    throw new ResponseError("the signature member is not the last bytes of the body");
  }
  const signature = fromBase64(latin1(body.subarray(from, n - 2)));
  if (signature === undefined) throw new SignatureError("signature is not base64");
  return { signedBytes: concatBytes([body.subarray(0, i), utf8("}")]), signature };
}

/**
 * Steps 3-5: the history in signed bytes `S` (bounds scan, `JSON.parse`, shape). Call it
 * on bytes whose signature verified.
 *
 * @throws {@link ResponseError}
 */
export function parseSignedBytes(signed: Uint8Array): HistoryEntry[] {
  const obj = parseVerified(signed);
  if (obj === undefined) throw new ResponseError("signed bytes are not bounded strict JSON");
  if (!isObject(obj)) throw new ResponseError("signed bytes are not a JSON object");
  const fl = obj.get("fingerprintList");
  if (!Array.isArray(fl)) throw new ResponseError("fingerprintList missing or not a list");
  if (fl.length > MAX_HISTORY_ENTRIES) throw new ResponseError(`more than ${MAX_HISTORY_ENTRIES} history entries`);
  const entries: HistoryEntry[] = [];
  for (const item of fl) {
    if (!isObject(item)) throw new ResponseError("history entry is not an object");
    const ts = item.get("timestamp");
    if (!isObject(ts)) throw new ResponseError("history entry has no timestamp object");
    const fpText = asString(item.get("fingerprint"));
    if (fpText === undefined) throw new ResponseError("history entry has no fingerprint");
    let fp: Fingerprint;
    try {
      fp = parseFingerprint(fpText);
    } catch (err) {
      throw new ResponseError(`history entry fingerprint: ${(err as Error).message}`);
    }
    entries.push({ fingerprint: fp, start: timestamp(ts.get("start"), "start"), finish: timestamp(ts.get("finish"), "finish") });
  }
  return entries;
}

/**
 * The one parse boundary of a 200/409 body: split it, verify RSASSA-PKCS1-v1_5 with SHA-1
 * over `S` with the pinned certificate's key, then parse `S` alone.
 *
 * @throws {@link ResponseError} or {@link SignatureError}, and nothing else whatever the bytes
 */
export async function verifySignedBody(
  crypto: CryptoProvider,
  body: Uint8Array,
  key: CertificateKey,
  maxBytes = MAX_RESPONSE_BYTES,
): Promise<SignedList> {
  try {
    const { signedBytes, signature } = splitSignedBody(body, maxBytes);
    if (key.type !== "rsa") throw new SignatureError("the notary certificate does not hold an RSA key");
    let ok = false;
    try {
      ok = await crypto.verifyRsaSha1(key, signedBytes, signature);
    } catch {
      ok = false; // the crypto library refused the input: it does not verify
    }
    if (!ok) throw new SignatureError("signature does not verify against the notary's certificate");
    return { entries: parseSignedBytes(signedBytes), signature, signedBytes };
  } catch (err) {
    if (err instanceof ResponseError || err instanceof SignatureError) throw err;
    throw new ResponseError(`unreadable body: ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}`);
  }
}

/** One notary's answer reduced to a vote; `kind` says why. */
export interface Outcome {
  vote: Vote;
  /**
   * listed, status-only, mismatch, not-listed, response, signature, inconclusive, status;
   * the extended kinds (match, ...); or an IO kind (unreachable, timeout, pin).
   */
  kind: string;
  /** The HTTP status, or null when there was none. */
  status: number | null;
  detail: string;
  history?: HistoryEntry[];
  /** A verified extended answer (its bytes). */
  answer?: Uint8Array;
  /** What the notary's transparency log proves about that answer, when its bundle names a log. */
  proven?: Proven;
}

function failureOf(err: unknown, status: number | null): Outcome {
  if (err instanceof ConvergeError) return { vote: "failure", kind: err.kind, status, detail: err.message };
  throw err;
}

/**
 * Reduces one response (status and body) to a vote. `wanted` holds the forms of the asked
 * certificate's fingerprint (the asked one first).
 */
export async function evaluate(
  crypto: CryptoProvider,
  status: number,
  body: Uint8Array,
  wanted: readonly Fingerprint[],
  key: CertificateKey,
  maxBytes = MAX_RESPONSE_BYTES,
): Promise<Outcome> {
  if (status === 200 || status === 409) {
    let signed: SignedList;
    try {
      signed = await verifySignedBody(crypto, body, key, maxBytes);
    } catch (err) {
      return failureOf(err, status);
    }
    const history = signed.entries;
    if (status === 409) return { vote: "failure", kind: "mismatch", status, detail: "notary sees another certificate", history };
    if (wanted.some((fp) => lists(signed, fp))) return { vote: "success", kind: "listed", status, detail: "", history };
    const algs = new Set(history.map((e) => e.fingerprint.algorithm));
    if (!wanted.some((fp) => algs.has(fp.algorithm)) && history.length > 0) {
      // a v1 list carries SHA-1 only; asked by SHA-256 alone the pinned 200 decides
      return { vote: "success", kind: "status-only", status, detail: "list holds no fingerprint of the asked kind", history };
    }
    return { vote: "failure", kind: "not-listed", status, detail: "200 without the fingerprint in the signed list", history };
  }
  if (status === 303) return { vote: "unreachable", kind: "inconclusive", status, detail: "notary could not decide" };
  return { vote: "unreachable", kind: "status", status, detail: `HTTP status ${status}` };
}

/**
 * Reduces a whole response (read until the server closed) to a vote; framing errors are
 * failures of kind `response` (the pinned notary itself sent them).
 */
export async function outcomeFromHttp(
  crypto: CryptoProvider,
  raw: Uint8Array,
  wanted: readonly Fingerprint[],
  key: CertificateKey,
  maxBytes = MAX_RESPONSE_BYTES,
): Promise<{ outcome: Outcome; response?: HttpResponse }> {
  let response: HttpResponse;
  try {
    response = parseHttpResponse(raw, maxBytes);
  } catch (err) {
    return { outcome: failureOf(err, null) };
  }
  return { outcome: await evaluate(crypto, response.status, response.body, wanted, key, MAX_RESPONSE_BYTES), response };
}
