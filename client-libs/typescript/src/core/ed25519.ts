/**
 * The rule every converge client applies to the Ed25519 public keys a bundle names (signing
 * keys, the transparency log's key, witnesses' keys) when the bundle is read: a weak key makes
 * the bundle invalid. Under a key of small order, OpenSSL, Go's crypto/ed25519 and others
 * accept `R = identity, S = 0` as a signature of any message while libsodium refuses it;
 * refusing the key itself makes every client decide the same, whatever its Ed25519 library.
 *
 * @module
 */
import { bytesEqual, fromHex } from "./bytes.js";

/** The length of a raw Ed25519 public key. */
export const ED25519_KEY_BYTES = 32;

/**
 * The y coordinates (32 bytes, little-endian, the sign bit cleared) of the eight points of
 * small order: 0 (order 4), 1 (the identity), p - 1 (order 2), y8 and p - y8 (order 8).
 */
const SMALL_ORDER_Y: readonly Uint8Array[] = [
  "0000000000000000000000000000000000000000000000000000000000000000",
  "0100000000000000000000000000000000000000000000000000000000000000",
  "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
  "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
  "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
].map((h) => fromHex(h)!);

/**
 * Why the raw Ed25519 public key `raw` must not be trusted, or `undefined` when it may be.
 *
 * Weak: y (the key with bit 255, the sign of x, cleared) at or above the field prime
 * p = 2^255 - 19 ("not in canonical form"), or y of one of the points of small order. Plain
 * byte comparisons; a key off the curve is not refused here.
 */
export function weakKey(raw: Uint8Array): string | undefined {
  if (raw.length !== ED25519_KEY_BYTES) return "an Ed25519 public key has 32 bytes";
  const y = Uint8Array.from(raw);
  y[31]! &= 0x7f;
  // y >= p exactly when its top byte is 0x7f, the 30 bytes below are 0xff and the lowest >= 0xed
  if (y[31] === 0x7f && y.subarray(1, 31).every((b) => b === 0xff) && y[0]! >= 0xed) {
    return "an Ed25519 public key not in canonical form";
  }
  if (SMALL_ORDER_Y.some((s) => bytesEqual(s, y))) return "an Ed25519 public key of small order";
  return undefined;
}
