/**
 * The core's crypto provider on WebCrypto (`crypto.subtle`), as a browser has it: SHA-1 and
 * SHA-256, RSASSA-PKCS1-v1_5 with SHA-1 (legacy answers) and Ed25519 (extended answers).
 * WebCrypto cannot read a certificate, so the subject public key is taken out of the DER by a
 * strict walk of the certificate's outer structure (lengths checked against the enclosing
 * element, nothing trailing).
 */
import type { CertificateKey, CryptoProvider } from "@converge/core";

interface Tlv {
  tag: number;
  start: number; // first byte of the element (its tag)
  body: number; // first byte of the contents
  end: number; // one past the last byte
}

/** One DER element at `at` inside [at, limit); undefined when malformed. */
function tlv(der: Uint8Array, at: number, limit: number): Tlv | undefined {
  if (at + 2 > limit) return undefined;
  const tag = der[at]!;
  if ((tag & 0x1f) === 0x1f) return undefined; // high tag numbers do not occur here
  let len = der[at + 1]!;
  let body = at + 2;
  if (len & 0x80) {
    const n = len & 0x7f;
    if (n === 0 || n > 4 || body + n > limit) return undefined;
    len = 0;
    for (let i = 0; i < n; i++) len = len * 256 + der[body + i]!;
    if (len < 128 || (n > 1 && der[body] === 0)) return undefined; // not the shortest form
    body += n;
  }
  const end = body + len;
  if (end > limit) return undefined;
  return { tag, start: at, body, end };
}

function children(der: Uint8Array, parent: Tlv): Tlv[] | undefined {
  const out: Tlv[] = [];
  for (let at = parent.body; at < parent.end; ) {
    const c = tlv(der, at, parent.end);
    if (c === undefined) return undefined;
    out.push(c);
    at = c.end;
  }
  return out;
}

const RSA_OID = Uint8Array.from([0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01]);

/** The SubjectPublicKeyInfo of a DER certificate, and whether it is RSA; undefined if malformed. */
export function subjectPublicKeyInfo(der: Uint8Array): { spki: Uint8Array; rsa: boolean } | undefined {
  const cert = tlv(der, 0, der.length);
  if (cert === undefined || cert.tag !== 0x30 || cert.end !== der.length) return undefined;
  const parts = children(der, cert);
  if (parts === undefined || parts.length !== 3 || parts[0]!.tag !== 0x30 || parts[1]!.tag !== 0x30 || parts[2]!.tag !== 0x03) {
    return undefined;
  }
  const tbs = children(der, parts[0]!);
  if (tbs === undefined) return undefined;
  let i = 0;
  if (tbs[0]?.tag === 0xa0) i = 1; // [0] EXPLICIT version
  // serialNumber, signature, issuer, validity, subject, subjectPublicKeyInfo
  const want = [0x02, 0x30, 0x30, 0x30, 0x30, 0x30];
  for (let k = 0; k < want.length; k++) if (tbs[i + k]?.tag !== want[k]) return undefined;
  const spki = tbs[i + 5]!;
  const alg = children(der, spki)?.[0];
  const oid = alg === undefined ? undefined : children(der, alg)?.[0];
  const rsa = oid !== undefined && oid.tag === 0x06 && oid.end - oid.body === RSA_OID.length &&
    RSA_OID.every((b, j) => der[oid.body + j] === b);
  return { spki: der.slice(spki.start, spki.end), rsa };
}

function buf(b: Uint8Array): ArrayBuffer {
  return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength) as ArrayBuffer;
}

/** The provider. `subtle` defaults to the global one (a browser's, or Node's). */
export function webCrypto(subtle: SubtleCrypto = globalThis.crypto.subtle): CryptoProvider {
  return {
    async sha1(data) {
      return new Uint8Array(await subtle.digest("SHA-1", buf(data)));
    },
    async sha256(data) {
      return new Uint8Array(await subtle.digest("SHA-256", buf(data)));
    },
    async certificateKey(der): Promise<CertificateKey | undefined> {
      const info = subjectPublicKeyInfo(der);
      if (info === undefined) return undefined;
      if (!info.rsa) return { type: "other", handle: undefined };
      try {
        const key = await subtle.importKey("spki", buf(info.spki), { name: "RSASSA-PKCS1-v1_5", hash: "SHA-1" }, false, ["verify"]);
        return { type: "rsa", handle: key };
      } catch {
        return undefined;
      }
    },
    async verifyRsaSha1(key, data, signature) {
      try {
        return await subtle.verify("RSASSA-PKCS1-v1_5", key.handle as CryptoKey, buf(signature), buf(data));
      } catch {
        return false;
      }
    },
    async verifyEd25519(raw, data, signature) {
      try {
        const key = await subtle.importKey("raw", buf(raw), { name: "Ed25519" }, false, ["verify"]);
        return await subtle.verify({ name: "Ed25519" }, key, buf(signature), buf(data));
      } catch {
        return false;
      }
    },
    randomBytes(n) {
      return globalThis.crypto.getRandomValues(new Uint8Array(n));
    },
  };
}
