/**
 * Asking notaries over the network: one TLS connection per physical host, pinned to the
 * bundle's certificate (no CA or host name check), one request, the response read until the
 * server closes. All hosts of one logical notary are raced; the first definitive answer
 * wins. Through a bounce relay, one CONNECT names every host of the notary and the relay
 * picks. Every wait is bounded (connect timeout, notary timeout, response size).
 *
 * @module
 */
import { connect as netConnect, isIP, type Socket } from "node:net";
import { connect as tlsConnect, type TLSSocket } from "node:tls";
import { bytesEqual, fromLatin1, indexOf, latin1 } from "../core/bytes.js";
import { EXTENDED_FORMAT, LEGACY_FORMAT, type Bundle, type NotaryHost, type SigningKey } from "../core/bundle.js";
import { ConvergeError, ResponseError, UnreachableError } from "../core/errors.js";
import {
  evaluateExtended, extendedRequestBytes, newNonce, NOT_OFFERED, requestFingerprint, trustedKeys,
} from "../core/extended.js";
import type { Fingerprint } from "../core/fingerprint.js";
import { outcomeFromHttp, parseHttpResponse, pyStrip, requestBytes, type HttpResponse, type Outcome } from "../core/legacy.js";
import type { Vote } from "../core/policy.js";
import { deadline, raceHosts } from "../core/gather.js";
import type { LogPolicy, Proven } from "../core/transparency.js";
import { nodeCrypto, sha1Sync } from "./crypto.js";

/** What one logical notary said. */
export interface NotaryResult {
  name: string;
  /** success, failure, unreachable, or skipped (the verdict was settled before it answered). */
  vote: Vote;
  /** Why: listed, mismatch, match, signature, pin, unreachable, timeout, settled, ... */
  kind: string;
  /** The HTTP status, or null. */
  status: number | null;
  /** The host that answered (`host:port`, or `host:port via relay`). */
  host: string;
  detail: string;
  /** Milliseconds until this notary's answer. */
  elapsedMs: number;
  /** The notary's Cache-Status header, if any. */
  cacheStatus: string;
  /** `convergence-v1` or `converge-answer/1`; null when it was not asked. */
  protocol: string | null;
  /** The verified extended answer's bytes, if any. */
  answer?: Uint8Array;
  /** What the notary's transparency log proves about its `match`, when the bundle names a log. */
  proven?: Proven;
}

interface HostAnswer {
  outcome: Outcome;
  host: string;
  cacheStatus: string;
  protocol: string;
}

/** How to ask one notary in the extended format. */
export interface ExtQuery {
  keys: readonly SigningKey[];
  nonce: boolean;
  maxSkew: number;
  fallback: boolean;
  now: () => number;
  /**
   * The bundle's transparency log: ask for a proof (`"transparency": true`) and count a
   * `match` without a valid one as a failure of its `log-*` kind.
   */
  log?: LogPolicy;
}

/** Opens a TCP connection (tests replace it). */
export type Dialer = (host: string, port: number) => Socket;

/** The per-check settings a host query needs. */
export interface QueryOptions {
  connectTimeoutMs: number;
  maxBytes: number;
  relay?: Bundle;
  relayDests?: readonly NotaryHost[];
  bouncePort: number;
  ext?: ExtQuery;
  ip?: string;
  dial?: Dialer;
}

const MAX_RELAY_HEAD = 8192;

function onceSettled<T>(socket: Socket, signal: AbortSignal, start: (resolve: (v: T) => void, reject: (e: Error) => void) => void): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let finished = false;
    const finish = (): boolean => {
      if (finished) return false;
      finished = true;
      signal.removeEventListener("abort", onAbort);
      socket.off("error", onError);
      socket.off("close", onClose);
      return true;
    };
    const onAbort = (): void => {
      if (finish()) {
        socket.destroy();
        reject(signal.reason instanceof Error ? signal.reason : new Error("aborted"));
      }
    };
    const onError = (e: Error): void => {
      if (finish()) {
        socket.destroy();
        reject(e);
      }
    };
    const onClose = (): void => {
      if (finish()) reject(new Error("connection closed"));
    };
    if (signal.aborted) {
      onAbort();
      return;
    }
    signal.addEventListener("abort", onAbort, { once: true });
    socket.on("error", onError);
    socket.on("close", onClose);
    start((v) => finish() && resolve(v), (e) => {
      if (finish()) {
        socket.destroy();
        reject(e);
      }
    });
  });
}

function dialTcp(host: string, port: number, signal: AbortSignal, dial?: Dialer): Promise<Socket> {
  const socket = dial ? dial(host, port) : netConnect({ host, port });
  socket.setNoDelay(true);
  return onceSettled<Socket>(socket, signal, (resolve) => {
    if (!socket.connecting && socket.readyState === "open") resolve(socket);
    else socket.once("connect", () => resolve(socket));
  });
}

function startTls(raw: Socket, host: string, signal: AbortSignal): Promise<TLSSocket> {
  const socket = tlsConnect({
    socket: raw,
    // the bundle's pin replaces CA and host name checks; it is checked right after the
    // handshake, before the request is sent
    rejectUnauthorized: false,
    minVersion: "TLSv1.2",
    ...(isIP(host) ? {} : { servername: host }),
  });
  return onceSettled<TLSSocket>(socket, signal, (resolve) => socket.once("secureConnect", () => resolve(socket)));
}

/** The CONNECT head sent to a bounce relay for one notary's hosts. */
export function connectHead(dests: readonly NotaryHost[], port: number): Uint8Array {
  const first = dests[0]!.host;
  const lines = [`CONNECT ${first}:${port} HTTP/1.1`, `Host: ${first}`];
  for (const d of dests.slice(1)) lines.push(`X-Convergence-Notary: ${d.host}+${port}`);
  return fromLatin1(lines.join("\r\n") + "\r\n\r\n");
}

/**
 * Which destination a relay connected to; a status other than 200 or an unknown
 * destination is an {@link UnreachableError}.
 */
export function parseConnectReply(head: Uint8Array, dests: readonly NotaryHost[]): NotaryHost {
  const lines = latin1(head).split("\r\n");
  const parts = lines[0]!.split(" ");
  if (parts.length < 2 || !parts[0]!.startsWith("HTTP/1.") || parts[1] !== "200") {
    throw new UnreachableError(`relay refused the tunnel: ${JSON.stringify(lines[0]!.slice(0, 80))}`);
  }
  let connected: string | undefined;
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(":");
    const name = colon < 0 ? line : line.slice(0, colon);
    if (pyStrip(name).toLowerCase() === "x-convergence-notary") connected = pyStrip(colon < 0 ? "" : line.slice(colon + 1)).toLowerCase();
  }
  if (connected === undefined) {
    if (dests.length === 1) return dests[0]!;
    throw new UnreachableError("relay did not name the notary host it connected to");
  }
  const host = connected.split("+", 1)[0]!;
  for (const d of dests) {
    const h = d.host.toLowerCase();
    if (h === host || h === connected) return d;
  }
  throw new UnreachableError(`relay connected to an unknown notary host ${JSON.stringify(connected)}`);
}

/** Reads a reply head up to the blank line; bytes after it are put back for TLS. */
function readHead(socket: Socket, signal: AbortSignal): Promise<Uint8Array> {
  return onceSettled<Uint8Array>(socket, signal, (resolve, reject) => {
    let buf = new Uint8Array(0);
    const onData = (chunk: Buffer): void => {
      const next = new Uint8Array(buf.length + chunk.length);
      next.set(buf);
      next.set(chunk, buf.length);
      buf = next;
      const end = indexOf(buf, fromLatin1("\r\n\r\n"));
      if (end >= 0) {
        socket.off("data", onData);
        socket.pause();
        const rest = buf.subarray(end + 4);
        if (rest.length > 0) socket.unshift(Buffer.from(rest));
        resolve(buf.subarray(0, end + 4));
      } else if (buf.length >= MAX_RELAY_HEAD) {
        socket.off("data", onData);
        reject(new UnreachableError("relay reply head too large"));
      }
    };
    socket.on("data", onData);
    socket.once("end", () => reject(new UnreachableError("relay closed the connection")));
  });
}

/** Reads until the server closes, at most `maxBytes`; a reset after some data keeps it. */
function readToEnd(socket: TLSSocket, maxBytes: number, signal: AbortSignal): Promise<Uint8Array> {
  return new Promise<Uint8Array>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let finished = false;
    const finish = (err: Error | null): void => {
      if (finished) return;
      finished = true;
      signal.removeEventListener("abort", onAbort);
      socket.destroy();
      if (err) reject(err);
      else resolve(new Uint8Array(Buffer.concat(chunks)));
    };
    const onAbort = (): void => finish(signal.reason instanceof Error ? signal.reason : new Error("aborted"));
    if (signal.aborted) {
      onAbort();
      return;
    }
    signal.addEventListener("abort", onAbort, { once: true });
    socket.on("data", (chunk: Buffer) => {
      chunks.push(chunk);
      size += chunk.length;
      if (size > maxBytes) finish(new ResponseError(`response larger than ${maxBytes} bytes`));
    });
    socket.on("end", () => finish(null));
    socket.on("error", (e) => finish(size > 0 ? null : e));
    socket.on("close", () => finish(null));
    socket.resume();
  });
}

async function openDirect(nh: NotaryHost, o: QueryOptions, signal: AbortSignal): Promise<TLSSocket> {
  const raw = await dialTcp(nh.host, nh.sslPort, signal, o.dial);
  return startTls(raw, nh.host, signal);
}

async function openViaRelay(o: QueryOptions, signal: AbortSignal): Promise<{ tls: TLSSocket; host: NotaryHost }> {
  let last: unknown;
  for (const rh of o.relay!.hosts) {
    let raw: Socket | undefined;
    try {
      raw = await dialTcp(rh.host, rh.httpPort, signal, o.dial);
      raw.write(connectHead(o.relayDests!, o.bouncePort));
      const head = await readHead(raw, signal);
      const host = parseConnectReply(head, o.relayDests!);
      return { tls: await startTls(raw, host.host, signal), host };
    } catch (err) {
      raw?.destroy();
      last = err;
      if (signal.aborted) break;
    }
  }
  throw new UnreachableError(`no host of relay ${JSON.stringify(o.relay!.name)} worked: ${(last as Error)?.message ?? "no hosts"}`);
}

function unreachable(detail: string, host: string, protocol: string): HostAnswer {
  return { outcome: { vote: "unreachable", kind: "unreachable", status: null, detail }, host, cacheStatus: "", protocol };
}

async function queryHostOnce(
  nh: NotaryHost, target: string, port: number, wanted: readonly Fingerprint[], o: QueryOptions,
  ext: ExtQuery | undefined, signal: AbortSignal,
): Promise<HostAnswer> {
  const protocol = ext ? EXTENDED_FORMAT : LEGACY_FORMAT;
  let label = o.relay ? `${nh.host}:${o.bouncePort} via ${o.relay.name}` : `${nh.host}:${nh.sslPort}`;
  let request: Uint8Array;
  let asked = wanted[0]!;
  let nonce = "";
  try {
    if (ext === undefined) {
      request = requestBytes(target, port, asked, o.ip);
    } else {
      asked = requestFingerprint(wanted);
      if (ext.nonce) nonce = newNonce(nodeCrypto);
      request = extendedRequestBytes(target, port, asked, nonce, o.ip, ext.log !== undefined);
    }
  } catch (err) {
    if (err instanceof ConvergeError) {
      return { outcome: { vote: "failure", kind: err.kind, status: null, detail: err.message }, host: label, cacheStatus: "", protocol };
    }
    throw err;
  }
  const connect = deadline(signal, o.connectTimeoutMs);
  let socket: TLSSocket;
  try {
    if (o.relay === undefined) {
      socket = await openDirect(nh, o, connect.signal);
    } else {
      const r = await openViaRelay(o, connect.signal);
      socket = r.tls;
      nh = r.host;
      label = `${nh.host}:${o.bouncePort} via ${o.relay.name}`;
    }
  } catch (err) {
    const timedOut = connect.timedOut() && !signal.aborted;
    connect.done();
    return unreachable(timedOut ? `${label}: timed out` : `${label}: ${(err as Error).message}`, label, protocol);
  }
  connect.done();
  const cert = socket.getPeerCertificate();
  const raw = cert && "raw" in cert && cert.raw ? new Uint8Array(cert.raw) : undefined;
  if (raw === undefined || !bytesEqual(sha1Sync(raw), nh.pin.digest)) {
    socket.destroy();
    return {
      outcome: { vote: "failure", kind: "pin", status: null, detail: `${label} presented a certificate other than the pinned one` },
      host: label, cacheStatus: "", protocol,
    };
  }
  let body: Uint8Array;
  try {
    socket.write(request);
    body = await readToEnd(socket, o.maxBytes, signal);
  } catch (err) {
    socket.destroy();
    if (err instanceof ResponseError) {
      return { outcome: { vote: "failure", kind: "response", status: null, detail: err.message }, host: label, cacheStatus: "", protocol };
    }
    return unreachable(signal.aborted ? `${label}: timed out` : `${label}: ${(err as Error).message}`, label, protocol);
  }
  let outcome: Outcome;
  let resp: HttpResponse | undefined;
  if (ext === undefined) {
    ({ outcome, response: resp } = await outcomeFromHttp(nodeCrypto, body, wanted, nh.key, o.maxBytes));
  } else {
    const now = Math.trunc(ext.now());
    try {
      resp = parseHttpResponse(body, o.maxBytes);
      outcome = await evaluateExtended(nodeCrypto, resp, trustedKeys(ext.keys, now), {
        host: target, port, fingerprint: asked, nonce, now, maxSkew: ext.maxSkew, bindIp: true, ip: o.ip ?? "",
      }, ext.log);
    } catch (err) {
      if (!(err instanceof ConvergeError)) throw err;
      outcome = { vote: "failure", kind: err.kind, status: null, detail: err.message };
    }
  }
  return { outcome, host: label, cacheStatus: resp?.headers.get("cache-status") ?? "", protocol };
}

/**
 * Asks one physical host (or, through a relay, whichever destination the relay reaches).
 * IO failures become outcomes, never errors. With `o.ext` the extended format is used, and
 * with `o.ext.fallback` the legacy one when the host does not offer it (a failed verification
 * never falls back).
 */
async function queryHost(nh: NotaryHost, target: string, port: number, wanted: readonly Fingerprint[], o: QueryOptions, signal: AbortSignal): Promise<HostAnswer> {
  if (o.ext === undefined) return queryHostOnce(nh, target, port, wanted, o, undefined, signal);
  const a = await queryHostOnce(nh, target, port, wanted, o, o.ext, signal);
  if (o.ext.fallback && a.outcome.kind === "status" && a.outcome.status !== null && NOT_OFFERED.has(a.outcome.status)) {
    return queryHostOnce(nh, target, port, wanted, o, undefined, signal);
  }
  return a;
}

/** Races every physical host of `b` (or one relayed query naming all of them). */
export async function askNotary(
  b: Bundle, target: string, port: number, wanted: readonly Fingerprint[], notaryTimeoutMs: number,
  o: QueryOptions, signal: AbortSignal,
): Promise<NotaryResult> {
  const t0 = performance.now();
  const limit = deadline(signal, notaryTimeoutMs);
  let hosts = b.hosts;
  let opts = o;
  if (o.relay !== undefined) {
    hosts = b.hosts.slice(0, 1);
    opts = { ...o, relayDests: b.hosts };
  }
  // the first definitive answer wins; else the answer that says most (the shared rule)
  const best = await raceHosts(hosts, (h, sig) => queryHost(h, target, port, wanted, opts, sig), (a) => a.outcome, limit.signal);
  limit.done();
  const elapsedMs = performance.now() - t0;
  if (best === undefined) {
    return {
      name: b.name, vote: "unreachable", kind: "timeout", status: null, host: "",
      detail: `no answer within ${notaryTimeoutMs / 1000} s`, elapsedMs, cacheStatus: "", protocol: null,
    };
  }
  const oc = best.outcome;
  return {
    name: b.name, vote: oc.vote, kind: oc.kind, status: oc.status, host: best.host, detail: oc.detail,
    elapsedMs, cacheStatus: best.cacheStatus, protocol: best.protocol,
    ...(oc.answer === undefined ? {} : { answer: oc.answer }),
    ...(oc.proven === undefined ? {} : { proven: oc.proven }),
  };
}
