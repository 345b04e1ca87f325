/**
 * Byte helpers that work the same in Node and in a browser (no Buffer).
 *
 * @module
 */

const HEX_UPPER = "0123456789ABCDEF";
const HEX_LOWER = "0123456789abcdef";

const utf8Encoder = new TextEncoder();
const utf8Strict = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** UTF-8 bytes of a string. */
export function utf8(text: string): Uint8Array {
  return utf8Encoder.encode(text);
}

/** The string of strictly valid UTF-8 bytes, or `undefined` when they are not valid UTF-8. */
export function fromUtf8(bytes: Uint8Array): string | undefined {
  try {
    return utf8Strict.decode(bytes);
  } catch {
    return undefined;
  }
}

/** Each byte as the code point of the same value (ISO-8859-1), as HTTP heads are read. */
export function latin1(bytes: Uint8Array): string {
  let out = "";
  const step = 8192;
  for (let i = 0; i < bytes.length; i += step) {
    out += String.fromCharCode(...bytes.subarray(i, i + step));
  }
  return out;
}

/** Bytes of a string of code points below 256 (the inverse of {@link latin1}). */
export function fromLatin1(text: string): Uint8Array {
  const out = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) out[i] = text.charCodeAt(i) & 0xff;
  return out;
}

/** Lower-case hex. */
export function toHex(bytes: Uint8Array): string {
  let out = "";
  for (const b of bytes) out += HEX_LOWER[b >> 4]! + HEX_LOWER[b & 15]!;
  return out;
}

/** Upper-case hex with a colon between bytes (the fingerprint form of the protocol). */
export function toColonHex(bytes: Uint8Array): string {
  const parts: string[] = [];
  for (const b of bytes) parts.push(HEX_UPPER[b >> 4]! + HEX_UPPER[b & 15]!);
  return parts.join(":");
}

/** Bytes of an even-length hex string (any case); `undefined` when it is not hex. */
export function fromHex(text: string): Uint8Array | undefined {
  if (text.length % 2 !== 0 || !/^[0-9A-Fa-f]*$/.test(text)) return undefined;
  const out = new Uint8Array(text.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(text.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/** Whether two byte arrays are equal. */
export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** The concatenation of byte arrays. */
export function concatBytes(parts: readonly Uint8Array[]): Uint8Array {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint8Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** The last index of `needle` in `hay`, or -1. */
export function lastIndexOf(hay: Uint8Array, needle: Uint8Array): number {
  outer: for (let i = hay.length - needle.length; i >= 0; i--) {
    for (let j = 0; j < needle.length; j++) if (hay[i + j] !== needle[j]) continue outer;
    return i;
  }
  return -1;
}

/** The first index of `needle` in `hay`, or -1. */
export function indexOf(hay: Uint8Array, needle: Uint8Array, from = 0): number {
  outer: for (let i = from; i <= hay.length - needle.length; i++) {
    for (let j = 0; j < needle.length; j++) if (hay[i + j] !== needle[j]) continue outer;
    return i;
  }
  return -1;
}

function binaryString(bytes: Uint8Array): string {
  return latin1(bytes);
}

/**
 * Standard base64 with padding, validated as Python's `b64decode(validate=True)` does (the
 * alphabet and the padding are checked, the unused trailing bits are not); `undefined` when
 * it is not such base64.
 */
export function fromBase64(text: string): Uint8Array | undefined {
  if (text.length % 4 !== 0 || !/^[A-Za-z0-9+/]*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(text)) {
    return undefined;
  }
  try {
    return fromLatin1(atob(text));
  } catch {
    return undefined;
  }
}

/** Standard base64 with padding. */
export function toBase64(bytes: Uint8Array): string {
  return btoa(binaryString(bytes));
}

/** Unpadded base64url (unused trailing bits are not checked); `undefined` when invalid. */
export function fromBase64Url(text: string): Uint8Array | undefined {
  if (text.length % 4 === 1 || !/^[A-Za-z0-9_-]*$/.test(text)) return undefined;
  const std = text.replace(/-/g, "+").replace(/_/g, "/");
  const padded = std + "===".slice(0, (4 - (std.length % 4)) % 4);
  try {
    return fromLatin1(atob(padded));
  } catch {
    return undefined;
  }
}

/** Unpadded base64url. */
export function toBase64Url(bytes: Uint8Array): string {
  return toBase64(bytes).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** The DER bytes of the first PEM block of `label` (default CERTIFICATE), or `undefined`. */
export function pemToDer(pem: string, label = "CERTIFICATE"): Uint8Array | undefined {
  const m = new RegExp(`-----BEGIN ${label}-----([A-Za-z0-9+/=\\s]+)-----END ${label}-----`).exec(pem);
  if (!m) return undefined;
  return fromBase64(m[1]!.replace(/\s+/g, ""));
}
