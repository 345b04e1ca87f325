/**
 * The {@link CryptoProvider} on Node's `crypto`.
 *
 * @module
 */
import { createHash, createPublicKey, randomBytes, verify, X509Certificate, type KeyObject } from "node:crypto";
import type { CertificateKey, CryptoProvider } from "../core/crypto.js";

// DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410) before the 32 key bytes
const ED25519_SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");

const edKeys = new Map<string, KeyObject>();

function edKey(raw: Uint8Array): KeyObject {
  const id = Buffer.from(raw).toString("hex");
  let k = edKeys.get(id);
  if (k === undefined) {
    k = createPublicKey({ key: Buffer.concat([ED25519_SPKI_PREFIX, raw]), format: "der", type: "spki" });
    if (edKeys.size > 1024) edKeys.clear();
    edKeys.set(id, k);
  }
  return k;
}

/** SHA-1 of `data` (synchronous). */
export function sha1Sync(data: Uint8Array): Uint8Array {
  return new Uint8Array(createHash("sha1").update(data).digest());
}

/** SHA-256 of `data` (synchronous). */
export function sha256Sync(data: Uint8Array): Uint8Array {
  return new Uint8Array(createHash("sha256").update(data).digest());
}

/** Node's crypto behind the core's interface. */
export const nodeCrypto: CryptoProvider = {
  async sha1(data) {
    return sha1Sync(data);
  },
  async sha256(data) {
    return sha256Sync(data);
  },
  async certificateKey(der): Promise<CertificateKey | undefined> {
    try {
      const key = new X509Certificate(der).publicKey;
      return { type: key.asymmetricKeyType ?? "unknown", handle: key };
    } catch {
      return undefined;
    }
  },
  async verifyRsaSha1(key, data, signature) {
    try {
      return verify("sha1", data, key.handle as KeyObject, signature);
    } catch {
      return false;
    }
  },
  async verifyEd25519(raw, data, signature) {
    try {
      return verify(null, data, edKey(raw), signature);
    } catch {
      return false;
    }
  },
  randomBytes(n) {
    return new Uint8Array(randomBytes(n));
  },
};
