// Test helpers: fake notaries (real TLS servers on 127.0.0.1 with the vectors' test-only
// keys, answering in either format), HTTPS sites, and configuration directories.
import { execFileSync } from "node:child_process";
import { createHash, createPrivateKey, generateKeyPairSync, sign, type KeyObject } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { createServer as createHttpsServer, type Server as HttpsServer } from "node:https";
import type { AddressInfo, Socket } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createServer as createTlsServer, type Server as TlsServer, type TLSSocket } from "node:tls";
import { canonicalJson, fromPlain, toBase64Url } from "../src/core/index.js";

const here = dirname(fileURLToPath(import.meta.url));
/** client-libs/ */
export const LIBS = join(here, "..", "..", "..");
export const VECTORS = join(LIBS, "vectors");
const KEYS = join(VECTORS, "keys");

export const NOTARY_KEY = readFileSync(join(KEYS, "test-notary-key.pem"), "utf8");
export const NOTARY_CERT = readFileSync(join(KEYS, "test-notary-cert.pem"), "utf8");
export const OTHER_KEY = readFileSync(join(KEYS, "test-other-key.pem"), "utf8");
export const OTHER_CERT = readFileSync(join(KEYS, "test-other-cert.pem"), "utf8");

export function derOf(pem: string): Buffer {
  const b64 = pem.replace(/-----[^-]+-----/g, "").replace(/\s+/g, "");
  return Buffer.from(b64, "base64");
}

export function colonHex(digest: Buffer): string {
  return digest.toString("hex").toUpperCase().match(/../g)!.join(":");
}

export function sha1Fp(pem: string): string {
  return colonHex(createHash("sha1").update(derOf(pem)).digest());
}

export function sha256Fp(pem: string): string {
  return colonHex(createHash("sha256").update(derOf(pem)).digest());
}

/** The genuine site's certificate is the notary test certificate; the forged one the other. */
export const GENUINE_FP = sha1Fp(NOTARY_CERT);
export const FORGED_FP = sha1Fp(OTHER_CERT);

export type Mode = "listed" | "mismatch" | "hang" | "close" | "garbage" | "extended" | "extended-stale" | "status503";

/** A notary that answers every request the same way; counts the requests it read. */
export class FakeNotary {
  server!: TlsServer;
  port = 0;
  requests: string[] = [];
  mode: Mode;
  readonly name: string;
  readonly edKey: KeyObject;
  readonly edPublicRaw: Buffer;
  readonly keyId: string;
  private readonly sockets = new Set<Socket>();
  /** The fingerprint this notary sees for every target. */
  sees = GENUINE_FP;
  /** Milliseconds to wait before answering. */
  delayMs = 0;
  /** When set, the whole HTTP response (head and body) to every request, whatever the mode. */
  respond: ((request: string) => Buffer) | undefined;

  constructor(name: string, mode: Mode, readonly pemKey = NOTARY_KEY, readonly pemCert = NOTARY_CERT) {
    this.name = name;
    this.mode = mode;
    const { privateKey, publicKey } = generateKeyPairSync("ed25519");
    this.edKey = privateKey;
    this.edPublicRaw = publicKey.export({ format: "der", type: "spki" }).subarray(12);
    this.keyId = createHash("sha256").update(this.edPublicRaw).digest().subarray(0, 8).toString("hex");
  }

  async start(): Promise<this> {
    this.server = createTlsServer({ key: this.pemKey, cert: this.pemCert }, (s) => this.serve(s));
    this.server.on("connection", (s: Socket) => {
      this.sockets.add(s);
      s.on("close", () => this.sockets.delete(s));
    });
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    this.port = (this.server.address() as AddressInfo).port;
    return this;
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  bundle(extended = false): string {
    const doc: Record<string, unknown> = {
      version: 1, name: this.name,
      hosts: [{ host: "127.0.0.1", ssl_port: this.port, http_port: this.port, certificate: this.pemCert }],
    };
    if (extended) {
      doc["protocols"] = ["converge-answer/1"];
      doc["signing_keys"] = [{ alg: "ed25519", key_id: this.keyId, public_key: toBase64Url(this.edPublicRaw), status: "current" }];
    }
    return JSON.stringify(doc, null, 2);
  }

  private serve(socket: TLSSocket): void {
    let buf = Buffer.alloc(0);
    socket.on("error", () => undefined);
    socket.on("data", (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      const end = buf.indexOf("\r\n\r\n");
      if (end < 0) return;
      const length = Number(/content-length: *(\d+)/i.exec(buf.subarray(0, end).toString("latin1"))?.[1] ?? 0);
      if (buf.length < end + 4 + length) return;
      const text = buf.subarray(0, end + 4 + length).toString("latin1");
      this.requests.push(text);
      if (this.delayMs > 0) setTimeout(() => this.answer(socket, text), this.delayMs);
      else this.answer(socket, text);
    });
  }

  private answer(socket: TLSSocket, request: string): void {
    if (this.respond) {
      socket.end(this.respond(request));
      return;
    }
    const m = this.mode;
    if (m === "hang") return;
    if (m === "close") {
      socket.destroy();
      return;
    }
    if (m === "garbage") {
      socket.end("SSH-2.0-nope\r\n\r\n");
      return;
    }
    if (m === "status503") {
      socket.end("HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n");
      return;
    }
    if (request.startsWith("POST /v2/answer")) {
      const body = JSON.parse(request.slice(request.indexOf("\r\n\r\n") + 4)) as Record<string, unknown>;
      const asked = String(body["fingerprint"]);
      const seen = body["alg"] === "sha256" ? sha256Fp(NOTARY_CERT) : this.sees;
      const verdict = asked === seen ? "match" : "mismatch";
      const statement = {
        type: "converge-answer/1", key_id: this.keyId, verdict, detail: "",
        answered_at: Math.trunc(Date.now() / 1000) - (m === "extended-stale" ? 3600 : 0),
        target: { host: String(body["host"]).toLowerCase(), port: body["port"], ip: body["ip"] ?? null },
        request: { fingerprint: asked, alg: body["alg"], ...(body["nonce"] ? { nonce: body["nonce"] } : {}) },
        cache: "miss", observations: [],
      };
      const stmtText = canonicalJson(fromPlain(statement))!;
      const value = toBase64Url(sign(null, Buffer.from(stmtText), this.edKey));
      const answer = canonicalJson(fromPlain({ statement, signature: { alg: "ed25519", key_id: this.keyId, value } }))!;
      const status = verdict === "match" ? "200 OK" : "409 Conflict";
      socket.end(`HTTP/1.0 ${status}\r\nContent-Type: application/vnd.converge.answer+json\r\nContent-Length: ${Buffer.byteLength(answer)}\r\n\r\n${answer}`);
      return;
    }
    if (m === "extended" || m === "extended-stale") {
      socket.end("HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n");
      return;
    }
    const fp = /fingerprint=([0-9A-F:]+)/.exec(request)?.[1] ?? "";
    const status = m === "mismatch" || fp !== this.sees ? 409 : 200;
    const list = `{"fingerprintList": [{"timestamp": {"start": "1323389219", "finish": "1324691510"}, "fingerprint": "${this.sees}"}]}`;
    const sig = sign("sha1", Buffer.from(list), createPrivateKey(this.pemKey)).toString("base64");
    const body = `${list.slice(0, -1)}, "signature": "${sig}"}`;
    socket.end(`HTTP/1.0 ${status} X\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
  }
}

/** A configuration directory enabling these notaries, with settings in converge.config. */
export function configDir(notaries: FakeNotary[], settings: Record<string, unknown> = {}, extended = false): string {
  const dir = mkdtempSync(join(tmpdir(), "converge-ts-"));
  mkdirSync(join(dir, "notaries-available"));
  mkdirSync(join(dir, "notaries-enabled"));
  notaries.forEach((n, i) => {
    const file = `${String(i).padStart(2, "0")}-${n.name.replace(/\W+/g, "-")}.notary`;
    writeFileSync(join(dir, "notaries-available", file), n.bundle(extended));
    symlinkSync(join("..", "notaries-available", file), join(dir, "notaries-enabled", file));
  });
  writeFileSync(join(dir, "converge.config"), JSON.stringify({ "connect-timeout": 2, "notary-timeout": 2, "total-timeout": 4, ...settings }));
  return dir;
}

/** An HTTPS site on 127.0.0.1 answering "genuine" (or the given body); counts requests. */
export class Site {
  server!: HttpsServer;
  port = 0;
  requests = 0;
  /** Bytes received on any connection (application data after the handshake). */
  bytesIn = 0;

  constructor(readonly key = NOTARY_KEY, readonly cert = NOTARY_CERT, readonly body = "genuine") {}

  async start(): Promise<this> {
    this.server = createHttpsServer({ key: this.key, cert: this.cert }, (_req, res) => {
      this.requests++;
      res.end(this.body);
    });
    this.server.on("secureConnection", (s: TLSSocket) => s.on("data", (d: Buffer) => (this.bytesIn += d.length)));
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    this.port = (this.server.address() as AddressInfo).port;
    return this;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

/** Starts fake notaries; returns them and a stop function. */
export async function notaries(...modes: Mode[]): Promise<FakeNotary[]> {
  const out: FakeNotary[] = [];
  for (const [i, m] of modes.entries()) out.push(await new FakeNotary(`Org ${String.fromCharCode(65 + i)}`, m).start());
  return out;
}

export async function stopAll(xs: { stop(): Promise<void> }[]): Promise<void> {
  await Promise.all(xs.map((x) => x.stop()));
}

/** A CA with two leaves for the same name: the genuine site's and an attacker's. */
export interface Pki {
  ca: string;
  genuineKey: string;
  genuineCert: string;
  forgedKey: string;
  forgedCert: string;
}

/** Makes a {@link Pki} for `name` with the openssl tool. */
export function makePki(name = "site.test"): Pki {
  const d = mkdtempSync(join(tmpdir(), "converge-pki-"));
  const run = (...args: string[]): void => {
    execFileSync("openssl", args, { cwd: d, stdio: "ignore" });
  };
  run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "30",
    "-subj", "/CN=converge test CA", "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign");
  writeFileSync(join(d, "ext"), `subjectAltName=DNS:${name}\nbasicConstraints=CA:FALSE\n`);
  for (const leaf of ["genuine", "forged"]) {
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", `${leaf}.key`, "-out", `${leaf}.csr`, "-subj", `/CN=${name}`);
    run("x509", "-req", "-in", `${leaf}.csr`, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", `${leaf}.pem`,
      "-days", "30", "-extfile", "ext");
  }
  const r = (f: string): string => readFileSync(join(d, f), "utf8");
  return { ca: r("ca.pem"), genuineKey: r("genuine.key"), genuineCert: r("genuine.pem"), forgedKey: r("forged.key"), forgedCert: r("forged.pem") };
}

/** Fake notaries in another process: their bundles, a request count, and stop. */
export interface RemoteNotaries {
  dir: (settings?: Record<string, unknown>) => string;
  counts: () => Promise<number[]>;
  stop: () => Promise<void>;
}

export async function remoteNotaries(sees: string, ...modes: Mode[]): Promise<RemoteNotaries> {
  const { spawn } = await import("node:child_process");
  const child = spawn(process.execPath, [join(here, "fake-notary-main.js"), sees, ...modes], { stdio: ["pipe", "pipe", "inherit"] });
  const lines: string[] = [];
  const waiters: ((l: string) => void)[] = [];
  let buf = "";
  child.stdout.on("data", (d: Buffer) => {
    buf += d.toString();
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      const w = waiters.shift();
      if (w) w(line);
      else lines.push(line);
    }
  });
  const next = (): Promise<string> => new Promise((r) => (lines.length ? r(lines.shift()!) : waiters.push(r)));
  const info = JSON.parse(await next()) as { name: string; port: number; bundle: string }[];
  return {
    dir: (settings = {}) => {
      const dir = mkdtempSync(join(tmpdir(), "converge-ts-"));
      mkdirSync(join(dir, "notaries-available"));
      mkdirSync(join(dir, "notaries-enabled"));
      info.forEach((n, i) => {
        const file = `${i}.notary`;
        writeFileSync(join(dir, "notaries-available", file), n.bundle);
        symlinkSync(join("..", "notaries-available", file), join(dir, "notaries-enabled", file));
      });
      writeFileSync(join(dir, "converge.config"), JSON.stringify({ "connect-timeout": 2, "notary-timeout": 2, "total-timeout": 4, ...settings }));
      return dir;
    },
    counts: async () => {
      child.stdin.write("count\n");
      return JSON.parse(await next()) as number[];
    },
    stop: async () => {
      child.stdin.end();
      await new Promise((r) => child.once("exit", r));
    },
  };
}
