/**
 * `.notary` bundles: one logical notary (an organisation) with its physical hosts, each
 * pinned to its TLS certificate; v1 bundles may also offer the extended answer format with
 * its Ed25519 signing keys, and name the notary's transparency log (`transparency`, parsed
 * strictly by {@link parseLogPolicy}: a malformed member is a bundle error).
 *
 * @module
 */
import { fromBase64, fromBase64Url, fromUtf8, toHex, utf8 } from "./bytes.js";
import type { CertificateKey, CryptoProvider } from "./crypto.js";
import { weakKey } from "./ed25519.js";
import { BundleError } from "./errors.js";
import { Fingerprint } from "./fingerprint.js";
import { asInt, asString, isObject, parseJson, type JsonObject, type JsonValue } from "./json.js";
import { parseLogPolicy, type LogPolicy } from "./transparency.js";

/** Largest bundle file accepted (bytes). */
export const MAX_BUNDLE_BYTES = 64 * 1024;
/** Most hosts in one bundle. */
export const MAX_BUNDLE_HOSTS = 16;
/** Most signing keys in one bundle. */
export const MAX_SIGNING_KEYS = 8;
/** The protocol name of the extended answer format. */
export const EXTENDED_FORMAT = "converge-answer/1";
/** The protocol name of the 2011 wire format. */
export const LEGACY_FORMAT = "convergence-v1";

const HOST_RE = /^[A-Za-z0-9._:-]{1,253}$/;
const PEM_RE =
  /^[\t\n\f\r ]*-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+-----END CERTIFICATE-----[\t\n\f\r ]*$/;
const REGION_RE = /^[A-Za-z]{2}$/;

/** One physical host of a notary. */
export interface NotaryHost {
  readonly host: string;
  readonly sslPort: number;
  readonly httpPort: number;
  /** The PEM text of its certificate, as in the bundle. */
  readonly certificatePem: string;
  /** The DER bytes of its certificate. */
  readonly certificateDer: Uint8Array;
  /** The certificate's public key (verifies legacy signatures). */
  readonly key: CertificateKey;
  /** SHA-1 of the certificate: the connection's pin. */
  readonly pin: Fingerprint;
}

/** One Ed25519 key of the extended format. */
export interface SigningKey {
  readonly alg: "ed25519";
  readonly keyId: string;
  /** The raw 32-byte public key. */
  readonly publicKey: Uint8Array;
  readonly status: "current" | "retired";
  /** Retired keys: trusted until this unix time (seconds). */
  readonly validUntil?: number;
}

/** One logical notary, parsed from a `.notary` file. */
export interface Bundle {
  readonly name: string;
  readonly version: 0 | 1;
  readonly hosts: readonly NotaryHost[];
  readonly bundleLocation?: string;
  readonly region?: string;
  readonly protocols: readonly string[];
  readonly signingKeys: readonly SigningKey[];
  /**
   * The notary's transparency log (the bundle's `transparency` member): extended answers are
   * asked with a proof, and a `match` without a valid one is a failure of that notary.
   */
  readonly transparency?: LogPolicy;
}

/** Whether the bundle advertises `converge-answer/1` and carries its signing keys. */
export function offersExtended(b: Bundle): boolean {
  return b.protocols.includes(EXTENDED_FORMAT) && b.signingKeys.length > 0;
}

function port(obj: JsonObject, key: string): number {
  const n = asInt(obj.get(key));
  if (n === undefined || n < 1 || n > 65535) {
    throw new BundleError(`${key} must be an integer port 1..65535`);
  }
  return n;
}

function pemBody(pem: string): Uint8Array | undefined {
  const m = /-----BEGIN CERTIFICATE-----\r?\n([A-Za-z0-9+/=\r\n]+)-----END CERTIFICATE-----/.exec(pem);
  return m ? fromBase64(m[1]!.replace(/[\r\n]/g, "")) : undefined;
}

async function parseHost(crypto: CryptoProvider, v: JsonValue | undefined): Promise<NotaryHost> {
  if (!isObject(v)) throw new BundleError("a host entry must be an object");
  const host = asString(v.get("host"));
  if (host === undefined || !HOST_RE.test(host)) {
    throw new BundleError("host must be a DNS name or an IP address");
  }
  const pem = asString(v.get("certificate"));
  if (pem === undefined || !PEM_RE.test(pem)) {
    throw new BundleError(`certificate of ${host} is not one PEM certificate`);
  }
  const der = pemBody(pem);
  const key = der === undefined ? undefined : await crypto.certificateKey(der);
  if (der === undefined || key === undefined) {
    throw new BundleError(`certificate of ${host} does not parse`);
  }
  const sslPort = port(v, "ssl_port");
  const httpPort = port(v, "http_port");
  return {
    host, sslPort, httpPort, certificatePem: pem, certificateDer: der, key,
    pin: new Fingerprint("sha1", await crypto.sha1(der)),
  };
}

/** The key id of a raw Ed25519 public key: the first 8 bytes of its SHA-256, lower-case hex. */
export async function keyIdOf(crypto: CryptoProvider, raw: Uint8Array): Promise<string> {
  return toHex((await crypto.sha256(raw)).subarray(0, 8));
}

async function parseSigningKey(crypto: CryptoProvider, v: JsonValue | undefined): Promise<SigningKey> {
  if (!isObject(v)) throw new BundleError("a signing key entry must be an object");
  for (const k of v.keys()) {
    if (!["alg", "key_id", "public_key", "status", "valid_until"].includes(k)) {
      throw new BundleError(`unknown signing key field ${JSON.stringify(k)}`);
    }
  }
  if (asString(v.get("alg")) !== "ed25519") throw new BundleError("signing key alg must be ed25519");
  const text = asString(v.get("public_key"));
  const raw = text === undefined ? undefined : fromBase64Url(text);
  if (raw === undefined) throw new BundleError("signing key public_key must be unpadded base64url");
  if (raw.length !== 32) throw new BundleError("an Ed25519 public key has 32 bytes");
  const weak = weakKey(raw);
  if (weak !== undefined) throw new BundleError(`signing key: ${weak}`);
  const keyId = asString(v.get("key_id"));
  if (keyId === undefined || keyId !== (await keyIdOf(crypto, raw))) {
    throw new BundleError(`signing key id ${JSON.stringify(keyId ?? null)} does not match its public key`);
  }
  const status = asString(v.get("status"));
  const until = v.get("valid_until");
  if (status === "current") {
    if (until !== undefined && until !== null) throw new BundleError("a current signing key has no valid_until");
    return { alg: "ed25519", keyId, publicKey: raw, status };
  }
  if (status === "retired") {
    const n = asInt(until);
    if (n === undefined || n <= 0) {
      throw new BundleError("a retired signing key needs valid_until (unix seconds)");
    }
    return { alg: "ed25519", keyId, publicKey: raw, status, validUntil: n };
  }
  throw new BundleError("signing key status must be current or retired");
}

/** Parses a list of signing key entries (a bundle's `signing_keys`). */
export async function parseSigningKeys(crypto: CryptoProvider, v: JsonValue | undefined): Promise<SigningKey[]> {
  if (!Array.isArray(v) || v.length === 0) throw new BundleError("signing_keys must be a non-empty list");
  if (v.length > MAX_SIGNING_KEYS) throw new BundleError(`more than ${MAX_SIGNING_KEYS} signing keys`);
  const out: SigningKey[] = [];
  const seen = new Set<string>();
  let current = 0;
  for (const x of v) {
    const k = await parseSigningKey(crypto, x);
    if (seen.has(k.keyId)) throw new BundleError("signing key ids repeat");
    seen.add(k.keyId);
    if (k.status === "current") current++;
    out.push(k);
  }
  if (current !== 1) throw new BundleError("signing_keys must hold exactly one current key");
  return out;
}

function parseProtocols(v: JsonValue | undefined): string[] {
  if (!Array.isArray(v) || v.length > 16) {
    throw new BundleError("protocols must be a list of at most 16 strings");
  }
  return v.map((x) => {
    const s = asString(x);
    const n = s === undefined ? 0 : [...s].length;
    if (s === undefined || n === 0 || n > 64) throw new BundleError("protocols must be a list of short strings");
    return s;
  });
}

/**
 * Parses and validates a `.notary` file (v1, or the version-less v0 form).
 *
 * @throws {@link BundleError}
 */
export async function parseBundle(crypto: CryptoProvider, data: Uint8Array | string): Promise<Bundle> {
  const bytes = typeof data === "string" ? utf8(data) : data;
  if (bytes.length > MAX_BUNDLE_BYTES) throw new BundleError(`bundle larger than ${MAX_BUNDLE_BYTES} bytes`);
  const text = fromUtf8(bytes);
  const obj = text === undefined ? undefined : parseJson(text);
  if (obj === undefined) throw new BundleError("bundle is not JSON");
  if (!isObject(obj)) throw new BundleError("bundle is not a JSON object");
  let version: 0 | 1 = 0;
  if (obj.has("version")) {
    const v = obj.get("version");
    const n = typeof v === "number" ? v : undefined;
    if (n !== 0 && n !== 1) throw new BundleError("unsupported bundle version");
    version = n;
  }
  if (version === 0) {
    const h = await parseHost(crypto, obj);
    return { name: h.host, version: 0, hosts: [h], protocols: [], signingKeys: [] };
  }
  const name = asString(obj.get("name"));
  if (name === undefined || name.trim() === "" || [...name].length > 200) {
    throw new BundleError("name must be a non-empty string");
  }
  const hosts = obj.get("hosts");
  if (!Array.isArray(hosts) || hosts.length === 0) throw new BundleError("hosts must be a non-empty list");
  if (hosts.length > MAX_BUNDLE_HOSTS) throw new BundleError(`more than ${MAX_BUNDLE_HOSTS} hosts`);
  let bundleLocation: string | undefined;
  const loc = obj.get("bundle_location");
  if (loc !== undefined && loc !== null) {
    const s = asString(loc);
    if (s === undefined || !s.startsWith("https://") || !s.endsWith(".notary") || [...s].length > 2048) {
      throw new BundleError("bundle_location must be an https:// URL ending in .notary");
    }
    bundleLocation = s;
  }
  let region: string | undefined;
  const reg = obj.get("region");
  if (reg !== undefined && reg !== null) {
    const s = asString(reg);
    if (s === undefined || !REGION_RE.test(s)) throw new BundleError("region must be an ISO-3166 alpha-2 code");
    region = s.toUpperCase();
  }
  const parsedHosts: NotaryHost[] = [];
  for (const h of hosts) parsedHosts.push(await parseHost(crypto, h));
  const protocols = obj.has("protocols") ? parseProtocols(obj.get("protocols")) : [];
  const signingKeys = obj.has("signing_keys") ? await parseSigningKeys(crypto, obj.get("signing_keys")) : [];
  if (protocols.includes(EXTENDED_FORMAT) && signingKeys.length === 0) {
    throw new BundleError(`protocols lists ${EXTENDED_FORMAT} but the bundle has no signing_keys`);
  }
  const transparency = obj.has("transparency") ? await parseLogPolicy(crypto, obj.get("transparency")) : undefined;
  const out: Bundle = {
    name, version: 1, hosts: parsedHosts, protocols, signingKeys,
    ...(transparency === undefined ? {} : { transparency }),
    ...(bundleLocation === undefined ? {} : { bundleLocation }),
    ...(region === undefined ? {} : { region }),
  };
  return out;
}
