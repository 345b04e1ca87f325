/**
 * Certificate fingerprints: SHA-1 (the 2011 protocol) or SHA-256.
 *
 * @module
 */
import { toColonHex, bytesEqual, fromHex } from "./bytes.js";
import type { CryptoProvider } from "./crypto.js";
import { FingerprintError } from "./errors.js";

/** Bounds the text form of a fingerprint (in characters). */
export const MAX_FINGERPRINT_TEXT = 200;

/** A digest algorithm of a fingerprint. */
export type Algorithm = "sha1" | "sha256";

/** A certificate digest with its algorithm. */
export class Fingerprint {
  readonly algorithm: Algorithm;
  readonly digest: Uint8Array;

  constructor(algorithm: Algorithm, digest: Uint8Array) {
    this.algorithm = algorithm;
    this.digest = digest;
  }

  /** The canonical form: upper-case hex with a colon between bytes. */
  colonHex(): string {
    return toColonHex(this.digest);
  }

  toString(): string {
    return this.colonHex();
  }

  /** Same algorithm and digest. */
  equals(other: Fingerprint): boolean {
    return this.algorithm === other.algorithm && bytesEqual(this.digest, other.digest);
  }
}

/**
 * Parses 40 (SHA-1) or 64 (SHA-256) hex digits in any case, either with no separators or
 * with a colon between every pair; surrounding spaces, tabs, CR and LF are ignored.
 *
 * @throws {@link FingerprintError} for anything else.
 */
export function parseFingerprint(text: string): Fingerprint {
  if (typeof text !== "string") throw new FingerprintError("a fingerprint is a string");
  if ([...text].length > MAX_FINGERPRINT_TEXT) {
    throw new FingerprintError(`fingerprint longer than ${MAX_FINGERPRINT_TEXT} characters`);
  }
  const s = text.replace(/^[ \t\r\n]+|[ \t\r\n]+$/g, "");
  if (s === "") throw new FingerprintError("empty fingerprint");
  let digits: string;
  if (s.includes(":")) {
    const groups = s.split(":");
    for (const g of groups) {
      if (!/^[0-9A-Fa-f]{2}$/.test(g)) {
        throw new FingerprintError("colon-separated fingerprints need two hex digits per byte");
      }
    }
    digits = groups.join("");
  } else {
    if (!/^[0-9A-Fa-f]*$/.test(s)) throw new FingerprintError("fingerprint contains a non-hex character");
    if (s.length % 2 !== 0) throw new FingerprintError("odd number of hex digits");
    digits = s;
  }
  const digest = fromHex(digits);
  if (digest === undefined) throw new FingerprintError("not hex");
  if (digest.length === 20) return new Fingerprint("sha1", digest);
  if (digest.length === 32) return new Fingerprint("sha256", digest);
  throw new FingerprintError(
    `a fingerprint has 20 (SHA-1) or 32 (SHA-256) bytes, not ${digest.length}`,
  );
}

/** The fingerprint of a DER certificate. */
export async function fingerprintOf(
  crypto: CryptoProvider,
  der: Uint8Array,
  algorithm: Algorithm = "sha1",
): Promise<Fingerprint> {
  const digest = algorithm === "sha256" ? await crypto.sha256(der) : await crypto.sha1(der);
  return new Fingerprint(algorithm, digest);
}
