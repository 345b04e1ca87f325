/**
 * The cryptography the protocol needs, behind one interface so that the same core runs on
 * Node's `crypto` ({@link https://nodejs.org/api/crypto.html}) and on WebCrypto in a browser.
 *
 * @module
 */

/** A parsed certificate's public key, as the provider represents it. */
export interface CertificateKey {
  /** `rsa` for an RSA key (the legacy signatures need one), else the key's type. */
  readonly type: string;
  /** The provider's own handle of the key. */
  readonly handle: unknown;
}

/** Hashes and signature checks. Every method is asynchronous (WebCrypto is). */
export interface CryptoProvider {
  /** SHA-1 of `data`. */
  sha1(data: Uint8Array): Promise<Uint8Array>;
  /** SHA-256 of `data`. */
  sha256(data: Uint8Array): Promise<Uint8Array>;
  /** The public key of a DER X.509 certificate; `undefined` when it does not parse. */
  certificateKey(der: Uint8Array): Promise<CertificateKey | undefined>;
  /** RSASSA-PKCS1-v1_5 with SHA-1. */
  verifyRsaSha1(key: CertificateKey, data: Uint8Array, signature: Uint8Array): Promise<boolean>;
  /** Ed25519 with a raw 32-byte public key. */
  verifyEd25519(rawKey: Uint8Array, data: Uint8Array, signature: Uint8Array): Promise<boolean>;
  /** `n` random bytes. */
  randomBytes(n: number): Uint8Array;
}
