/**
 * TLS hooks: the notaries' verdict in Node's TLS stack, decided after the handshake and
 * before any application data is written.
 *
 * - {@link ConvergeAgent}: an `https.Agent` for `https.request`, axios (`httpsAgent`), got
 *   (`agent.https`) and anything else that takes an agent; optional CONNECT proxy.
 * - {@link undiciConnector}: the `connect` option of undici's `Agent` and `Pool` (and so
 *   `fetch` with a dispatcher); its `proxy` option tunnels through a CONNECT proxy.
 * - {@link connect}: `tls.connect` that resolves only with a socket the notaries vouch for.
 * - {@link checkServerIdentity}: a synchronous `checkServerIdentity` option for code that
 *   can only pass TLS options (it blocks the thread while the notaries are asked; a cache
 *   hit costs one SQLite lookup), with {@link CheckServerIdentityAgent} for `https` and
 *   {@link undiciProxyTls} for undici's `ProxyAgent`.
 *
 * A refused certificate is a {@link NotTrustedError}, with the verdict saying why. Every
 * hook checks the very connection that carries the request; a socket error during the check
 * refuses that connection.
 *
 * @module
 */
import { Agent as HttpsAgent, type AgentOptions, type RequestOptions } from "node:https";
import type { Duplex } from "node:stream";
import { connect as netConnect, isIP, type Socket } from "node:net";
import {
  checkServerIdentity as tlsCheckServerIdentity, connect as tlsConnect, type ConnectionOptions,
  type PeerCertificate, type TLSSocket,
} from "node:tls";
import { fileURLToPath } from "node:url";
import { MessageChannel, receiveMessageOnPort, Worker, type MessagePort } from "node:worker_threads";
import { Client, sharedClient, type Verdict } from "./client.js";

/** The notaries did not vouch for the server's certificate, or it could not be checked. */
export class NotTrustedError extends Error {
  readonly host: string;
  readonly port: number;
  /** The verdict, when one was reached. */
  readonly verdict: Verdict | undefined;
  /** Always `untrusted` (the error word the conformance CLI prints). */
  readonly code = "untrusted";

  constructor(host: string, port: number, verdict: Verdict | undefined, cause?: unknown) {
    const what = verdict
      ? `certificate not trusted: ${verdict.reason}`
      : `certificate not checked: ${cause instanceof Error ? cause.message : String(cause)}`;
    super(`converge does not trust ${host}:${port}: ${what}`, cause === undefined ? undefined : { cause });
    this.name = "NotTrustedError";
    this.host = host;
    this.port = port;
    this.verdict = verdict;
  }
}

/** Options shared by every hook. */
export interface HookOptions {
  /** The client to ask (default: the one `converge()` uses for `configDir`). */
  client?: Client;
  /** The configuration directory (default: discovered). */
  configDir?: string;
  /** Also demand ordinary CA and host name validation (`ca` or the default roots). */
  requireCA?: boolean;
}

function clientOf(o: HookOptions): Client {
  return o.client ?? sharedClient(o.configDir);
}

function peerDer(socket: TLSSocket): Uint8Array | undefined {
  const cert = socket.getPeerCertificate();
  return cert && "raw" in cert && cert.raw ? new Uint8Array(cert.raw) : undefined;
}

/**
 * Asks the notaries about the peer certificate of a connected TLS socket for `host:port`
 * (the origin, also behind a proxy); resolves with the verdict, or rejects with a
 * {@link NotTrustedError}. The socket is destroyed when the answer is no. An error or a
 * close of the socket while the notaries are asked (a server that resets the connection)
 * refuses it: the error is handled here, never left to crash the process.
 */
export async function verifySocket(socket: TLSSocket, host: string, port: number, o: HookOptions = {}): Promise<Verdict> {
  const lost = new AbortController();
  const onError = (e: Error): void => lost.abort(new Error(`connection failed during the notary check: ${e.message}`, { cause: e }));
  const onClose = (): void => lost.abort(new Error("connection closed during the notary check"));
  socket.on("error", onError);
  socket.once("close", onClose);
  const failed = new Promise<never>((_resolve, reject) => {
    lost.signal.addEventListener("abort", () => reject(lost.signal.reason as Error), { once: true });
  });
  failed.catch(() => undefined);
  try {
    if (socket.destroyed) throw new Error("connection closed before the notary check");
    const der = peerDer(socket);
    if (der === undefined && socket.isSessionReused()) {
      throw new Error("the TLS session was resumed: Node keeps no certificate to check for it (do not pass session)");
    }
    if (der === undefined) throw new Error("no peer certificate");
    if (o.requireCA) {
      if (!socket.authorized) throw new Error(`CA validation failed: ${String(socket.authorizationError)}`);
      const bad = tlsCheckServerIdentity(host, socket.getPeerCertificate());
      if (bad) throw bad;
    }
    const client = clientOf(o);
    const budget = AbortSignal.any([AbortSignal.timeout((client.config.totalTimeout + 1) * 1000), lost.signal]);
    const verdict = await Promise.race([client.checkCertificate(host, port, der, { signal: budget }), failed]);
    if (lost.signal.aborted) throw lost.signal.reason as Error;
    if (!verdict.trusted) throw new NotTrustedError(host, port, verdict);
    return verdict;
  } catch (err) {
    socket.on("error", () => undefined); // whatever the socket still reports is answered here
    socket.destroy();
    if (err instanceof NotTrustedError) throw err;
    throw new NotTrustedError(host, port, undefined, err);
  } finally {
    socket.off("error", onError);
    socket.off("close", onClose);
  }
}

/** A CONNECT tunnel through an HTTP proxy to `host:port`: the socket after the proxy's 2xx. */
export function tunnel(proxy: string | URL, host: string, port: number, timeoutMs = 30_000): Promise<Socket> {
  const u = typeof proxy === "string" ? new URL(proxy) : proxy;
  if (u.protocol !== "http:") return Promise.reject(new Error(`unsupported proxy scheme ${u.protocol} (http:// only)`));
  const authority = `${isIP(host) === 6 ? `[${host}]` : host}:${port}`;
  return new Promise<Socket>((resolve, reject) => {
    const socket = netConnect({ host: u.hostname.replace(/^\[|\]$/g, ""), port: Number(u.port || 80) });
    const timer = setTimeout(() => fail(new Error(`proxy ${u.host}: no answer within ${timeoutMs} ms`)), timeoutMs);
    let head = Buffer.alloc(0);
    const fail = (e: Error): void => {
      clearTimeout(timer);
      socket.destroy();
      reject(e);
    };
    socket.once("error", fail);
    socket.once("connect", () => {
      const auth = u.username
        ? `Proxy-Authorization: Basic ${Buffer.from(`${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`).toString("base64")}\r\n`
        : "";
      socket.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n${auth}\r\n`);
    });
    const onData = (chunk: Buffer): void => {
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf("\r\n\r\n");
      if (end < 0) {
        if (head.length > 16384) fail(new Error("proxy reply head too large"));
        return;
      }
      socket.off("data", onData);
      socket.off("error", fail);
      clearTimeout(timer);
      const status = /^HTTP\/1\.[01] (\d{3})/.exec(head.subarray(0, end).toString("latin1"));
      if (!status || status[1]![0] !== "2") {
        socket.destroy();
        reject(new Error(`proxy refused CONNECT ${authority}: ${head.subarray(0, Math.min(end, 80)).toString("latin1").split("\r\n")[0]}`));
        return;
      }
      socket.pause();
      const rest = head.subarray(end + 4);
      if (rest.length) socket.unshift(rest);
      resolve(socket);
    };
    socket.on("data", onData);
  });
}

/** Options of {@link connect}: `tls.connect`'s, plus the hook's and an optional proxy. */
export type ConvergeConnectOptions = ConnectionOptions & HookOptions & {
  host: string;
  port?: number;
  /** An HTTP proxy (`http://host:port`) to tunnel through with CONNECT. */
  proxy?: string | URL;
};

/**
 * `tls.connect` whose promise resolves only once the notaries vouch for the server's
 * certificate for `host:port`: nothing can be written to the socket before that. Rejects
 * with a {@link NotTrustedError} (or the connection's own error).
 */
export async function connect(options: ConvergeConnectOptions): Promise<TLSSocket> {
  const { client, configDir, requireCA, proxy, ...tlsOptions } = options;
  const host = options.host;
  const port = options.port ?? 443;
  let raw: Socket | undefined = tlsOptions.socket as Socket | undefined;
  if (proxy !== undefined && raw === undefined) raw = await tunnel(proxy, host, port);
  const socket: TLSSocket = tlsConnect({
    ...tlsOptions,
    host,
    port,
    ...(raw === undefined ? {} : { socket: raw }),
    ...(tlsOptions.servername !== undefined || isIP(host) ? {} : { servername: host }),
    // the notaries decide (with requireCA, CA validation as well, in verifySocket)
    rejectUnauthorized: false,
  });
  // an error of the tunnel under TLS is an error of the TLS socket (handled by its listeners)
  if (raw !== undefined && raw !== tlsOptions.socket) raw.on("error", (e) => socket.destroy(e));
  await new Promise<void>((resolve, reject) => {
    socket.once("secureConnect", () => {
      socket.off("error", reject);
      resolve();
    });
    socket.once("error", reject);
  });
  await verifySocket(socket, host, port, {
    ...(client === undefined ? {} : { client }),
    ...(configDir === undefined ? {} : { configDir }),
    ...(requireCA === undefined ? {} : { requireCA }),
  });
  return socket;
}

/** Options of {@link ConvergeAgent}. */
export type ConvergeAgentOptions = AgentOptions & HookOptions & {
  /** An HTTP proxy (`http://host:port`) every connection tunnels through with CONNECT. */
  proxy?: string | URL;
};

/**
 * An `https.Agent` whose connections are checked with the notaries before the request is
 * written: `https.request(url, { agent })`, axios `{ httpsAgent: agent }`, got
 * `{ agent: { https: agent } }`. Through `proxy` the notaries are asked about the origin.
 *
 * @example
 * ```ts
 * import https from "node:https";
 * import { ConvergeAgent } from "@converge-notary/client";
 * const agent = new ConvergeAgent();                  // discovered configuration
 * https.get("https://www.example.org/", { agent }, (res) => res.pipe(process.stdout));
 * ```
 */
export class ConvergeAgent extends HttpsAgent {
  private readonly hook: HookOptions;
  private readonly proxy: string | URL | undefined;

  constructor(options: ConvergeAgentOptions = {}) {
    const { client, configDir, requireCA, proxy, ...agentOptions } = options;
    super(agentOptions);
    this.hook = {
      ...(client === undefined ? {} : { client }),
      ...(configDir === undefined ? {} : { configDir }),
      ...(requireCA === undefined ? {} : { requireCA }),
    };
    this.proxy = proxy;
  }

  /** Called by the agent for each new connection; answers through the callback. */
  override createConnection(options: RequestOptions, callback?: (err: Error | null, stream: Duplex) => void): undefined {
    const tlsOptions = options as ConnectionOptions & { host?: string; port?: number | string };
    const host = (tlsOptions.host ?? "localhost").replace(/^\[|\]$/g, "");
    const port = Number(tlsOptions.port ?? 443);
    // a full handshake every time: a resumed session has no certificate to check
    connect({ ...tlsOptions, session: undefined, ...this.hook, host, port, ...(this.proxy === undefined ? {} : { proxy: this.proxy }) })
      .then((socket) => callback?.(null, socket), (err: Error) => callback?.(err, undefined as unknown as Duplex));
    return undefined;
  }
}

/** The options undici passes to its `connect` function. */
export interface UndiciConnectOptions {
  hostname: string;
  host?: string;
  protocol: string;
  port: string | number;
  servername?: string | null;
  localAddress?: string | null;
  httpSocket?: Socket;
}

/**
 * undici's `connect` option: `new Agent({ connect: undiciConnector() })` (also for `fetch`
 * with that agent as its `dispatcher`). For a proxy give `proxy` here: undici's own
 * `ProxyAgent` makes the TLS connection to the origin itself and validates it by CA only.
 */
export function undiciConnector(o: HookOptions & { tls?: ConnectionOptions; proxy?: string | URL } = {}) {
  const { tls, ...hook } = o;
  return (opts: UndiciConnectOptions, callback: (...args: [null, Socket] | [Error, null]) => void): void => {
    const host = opts.hostname.replace(/^\[|\]$/g, "");
    if (opts.protocol !== "https:") {
      const s = netConnect({ host, port: Number(opts.port || 80) });
      s.once("connect", () => callback(null, s)).once("error", (e) => callback(e, null));
      return;
    }
    const port = Number(opts.port || 443);
    connect({
      ...(tls ?? {}), ...hook, host, port, ALPNProtocols: ["http/1.1"],
      ...(opts.servername ? { servername: opts.servername } : {}),
      ...(opts.httpSocket ? { socket: opts.httpSocket } : {}),
    }).then((s) => callback(null, s), (e: Error) => callback(e, null));
  };
}

// --------------------------------------------------------------- synchronous check

interface SyncReply {
  trusted: boolean;
  reason: string;
  error?: string;
}

class SyncChecker {
  private readonly worker: Worker;
  private readonly port: MessagePort;
  private readonly flag: Int32Array;

  constructor() {
    const channel = new MessageChannel();
    this.flag = new Int32Array(new SharedArrayBuffer(4));
    this.worker = new Worker(fileURLToPath(new URL("./sync-worker.js", import.meta.url)), {
      workerData: { port: channel.port2, flag: this.flag },
      transferList: [channel.port2],
    });
    this.worker.unref();
    this.port = channel.port1;
    this.port.unref();
  }

  check(configDir: string, host: string, port: number, der: Uint8Array, timeoutMs: number): SyncReply {
    Atomics.store(this.flag, 0, 0);
    this.port.postMessage({ configDir, host, port, der });
    const state = Atomics.wait(this.flag, 0, 0, timeoutMs);
    const m = receiveMessageOnPort(this.port);
    if (state === "timed-out" || m === undefined) return { trusted: false, reason: "", error: `no verdict within ${timeoutMs} ms` };
    return m.message as SyncReply;
  }
}

let syncChecker: SyncChecker | undefined;

/** Marks TLS options whose connection reuse and session resumption this library controls. */
const CHECKED = Symbol.for("converge.checked-connection");

/** Options a `checkServerIdentity` is called with (Node calls it as a method of them). */
type CalledWith = Record<string | symbol, unknown> | undefined;

/**
 * A synchronous `checkServerIdentity` for code that can only pass TLS options. Node calls it
 * only after CA validation succeeded (and replaces its host name check with it), so it adds
 * the notaries' verdict to the CA's: it catches a CA-valid forgery (a compromised or coerced
 * CA), but it cannot accept a certificate no CA vouches for; use {@link ConvergeAgent} or
 * {@link connect} for that. The host name is checked as Node would, then a local-cache hit
 * answers at once; a miss asks the notaries from a worker thread while this thread waits (at
 * most the configuration's total-timeout). Returns the error that refuses the connection, or
 * undefined. The origin's port is the connection's own (`port` when Node does not say it).
 *
 * Node does not call it for a socket an agent reuses, nor for a resumed TLS session. So it
 * refuses (with an error naming the safe integration) to run where sockets or sessions it did
 * not check could be used instead: through an `https.Agent` (use
 * {@link CheckServerIdentityAgent}, or `agent: false`) and where a TLS session is offered
 * (undici: use {@link undiciProxyTls}). Plain `tls.connect` without `session` is safe.
 */
export function checkServerIdentity(port = 443, o: HookOptions = {}): (hostname: string, cert: PeerCertificate) => Error | undefined {
  return function check(this: CalledWith, hostname: string, cert: PeerCertificate): Error | undefined {
    const opts = this;
    const origin = typeof opts?.["port"] === "number" || typeof opts?.["port"] === "string" ? Number(opts["port"]) : port;
    const p = Number.isInteger(origin) && origin >= 1 && origin <= 65535 ? origin : port;
    const host = hostname.replace(/^\[|\]$/g, "");
    try {
      // an agent of its own for one request (agent: false) neither reuses nor resumes
      const sharedAgent = opts?.["_agentKey"] !== undefined && opts["agent"] !== false;
      if (opts !== undefined && opts[CHECKED] !== true && (sharedAgent || "session" in opts)) {
        return new NotTrustedError(host, p, undefined, new Error(
          "refused configuration: checkServerIdentity cannot check sockets an agent reuses or TLS sessions it resumes; " +
          "use new CheckServerIdentityAgent() (or agent: false) with https, undiciProxyTls() with undici, or ConvergeAgent"));
      }
      const der = cert?.raw ? new Uint8Array(cert.raw) : undefined;
      if (der === undefined) return new NotTrustedError(host, p, undefined, new Error("no peer certificate"));
      const bad = tlsCheckServerIdentity(hostname, cert); // replaced by this function: do it
      if (bad) return bad;
      const client = clientOf(o);
      if (client.cachedCertificateSync(host, p, der)) return undefined;
      const dir = client.config.directory || (o.configDir ?? "");
      if (!dir) return new NotTrustedError(host, p, undefined, new Error("the synchronous check needs a configuration directory"));
      syncChecker ??= new SyncChecker();
      const r = syncChecker.check(dir, host, p, der, (client.config.totalTimeout + 2) * 1000);
      if (r.error !== undefined) return new NotTrustedError(host, p, undefined, new Error(r.error));
      if (!r.trusted) return new NotTrustedError(host, p, undefined, new Error(r.reason));
      return undefined;
    } catch (err) {
      return new NotTrustedError(host, p, undefined, err);
    }
  };
}

/**
 * An `https.Agent` for {@link checkServerIdentity}: every connection it opens is checked
 * (whatever the request's own options say), it keeps no TLS sessions (a resumed session would
 * skip the check), and it refuses `rejectUnauthorized: false` (Node then ignores what
 * `checkServerIdentity` returns). Its keep-alive sockets were all checked for their origin.
 * CA validation applies first, as with {@link checkServerIdentity}.
 */
export class CheckServerIdentityAgent extends HttpsAgent {
  private readonly hook: HookOptions;

  constructor(options: AgentOptions & HookOptions = {}) {
    const { client, configDir, requireCA: _ca, ...agentOptions } = options;
    super({ ...agentOptions, maxCachedSessions: 0 });
    this.hook = { ...(client === undefined ? {} : { client }), ...(configDir === undefined ? {} : { configDir }) };
  }

  /** Opens a TLS connection with the check, without a session to resume. */
  override createConnection(options: RequestOptions, callback?: (err: Error | null, stream: Duplex) => void): Duplex | undefined {
    if ((options as ConnectionOptions).rejectUnauthorized === false) {
      callback?.(new Error("CheckServerIdentityAgent refuses rejectUnauthorized: false (the check could not refuse anything); use ConvergeAgent"),
        undefined as unknown as Duplex);
      return undefined;
    }
    const create = (HttpsAgent.prototype as unknown as { createConnection: (o: object) => Duplex }).createConnection;
    return create.call(this, {
      ...options, session: undefined, checkServerIdentity: checkServerIdentity(Number(options.port ?? 443), this.hook), [CHECKED]: true,
    });
  }
}

/**
 * TLS options for undici's `ProxyAgent` (`new ProxyAgent({ uri, requestTls: undiciProxyTls() })`):
 * the origin behind the proxy is checked with {@link checkServerIdentity} (after CA
 * validation) on every connection, and no TLS session is kept. undici's `ProxyAgent` ignores a
 * `connect` option, so {@link undiciConnector} cannot work there; for the notaries alone to
 * decide through a proxy, use `new Agent({ connect: undiciConnector({ proxy }) })`.
 */
export function undiciProxyTls(o: HookOptions & { tls?: ConnectionOptions } = {}): ConnectionOptions & { maxCachedSessions: 0 } {
  const { tls, ...hook } = o;
  if (tls?.rejectUnauthorized === false) throw new Error("undiciProxyTls refuses rejectUnauthorized: false (the check could not refuse anything)");
  return { ...(tls ?? {}), checkServerIdentity: checkServerIdentity(443, hook), maxCachedSessions: 0, [CHECKED]: true } as ConnectionOptions & { maxCachedSessions: 0 };
}
