// End to end through the TLS hooks: real HTTPS servers on 127.0.0.1, real notaries (fakes
// with the vectors' keys). The genuine site loads; the forged one fails before a single
// byte of the request reaches it (the must-fail twin of each hook).
import assert from "node:assert/strict";
import { Agent as HttpsAgent, request, type RequestOptions } from "node:https";
import { connect as netConnect, createServer, type Server, type Socket } from "node:net";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import { createServer as createTlsServer, type Server as TlsServer, type TLSSocket } from "node:tls";
import { Agent as UndiciAgent, ProxyAgent, request as undiciRequest } from "undici";
import {
  checkServerIdentity, CheckServerIdentityAgent, Client, connect, ConvergeAgent, NotTrustedError, undiciConnector, undiciProxyTls,
} from "../src/index.js";
import {
  configDir, FakeNotary, makePki, NOTARY_CERT, NOTARY_KEY, notaries, OTHER_CERT, OTHER_KEY, remoteNotaries, sha1Fp, Site, stopAll,
  type Pki, type RemoteNotaries,
} from "./helpers.js";

let ns: FakeNotary[];
let genuine: Site;
let forged: Site;
let dir: string;
let client: Client;

before(async () => {
  ns = await notaries("listed", "listed");
  genuine = await new Site().start();
  forged = await new Site(OTHER_KEY, OTHER_CERT, "forged").start();
  dir = configDir(ns, { "notary-agreement": "consensus" });
  client = Client.load(dir);
});
after(async () => {
  client.close();
  await stopAll([...ns, genuine, forged]);
});

function get(port: number, agent: ConvergeAgent, extra: Record<string, unknown> = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, path: "/", agent, ...extra }, (res) => {
      let body = "";
      res.on("data", (c: Buffer) => (body += c.toString()));
      res.on("end", () => resolve(body));
    });
    req.on("error", reject);
    req.end();
  });
}

test("https.request through ConvergeAgent: genuine loads, forged refused before the request", async () => {
  const agent = new ConvergeAgent({ client });
  try {
    assert.equal(await get(genuine.port, agent), "genuine");
    const before = forged.bytesIn;
    await assert.rejects(get(forged.port, agent), (e: unknown) => e instanceof NotTrustedError && e.verdict?.trusted === false && /not trusted/.test(e.message));
    assert.equal(forged.requests, 0);
    assert.equal(forged.bytesIn, before); // not one byte of application data
  } finally {
    agent.destroy();
  }
});

test("the agent asks about the origin's port, not the default 443", async () => {
  const seen = ns[0]!.requests.length;
  const agent = new ConvergeAgent({ client });
  try {
    await get(genuine.port, agent, { path: "/port" });
    const asked = ns[0]!.requests.slice(seen).join("");
    // a cached verdict asks nothing; a fresh one names the origin port
    if (asked) assert.match(asked, new RegExp(`\\+${genuine.port} HTTP`));
    assert.ok(client.cachedCertificateSync("127.0.0.1", genuine.port, Buffer.from(genuine.cert.replace(/-----[^-]+-----|\s/g, ""), "base64")));
  } finally {
    agent.destroy();
  }
});

test("connect(): resolves only with a vouched-for socket", async () => {
  const s = await connect({ host: "127.0.0.1", port: genuine.port, client });
  s.end("GET / HTTP/1.0\r\n\r\n");
  const reply = await new Promise<string>((r) => {
    let t = "";
    s.on("data", (d: Buffer) => (t += d.toString()));
    s.on("end", () => r(t));
  });
  assert.match(reply, /genuine$/);
  await assert.rejects(connect({ host: "127.0.0.1", port: forged.port, client }), NotTrustedError);
  assert.equal(forged.requests, 0);
});

test("a resumed TLS session has no certificate to check: connect refuses it, the agent never offers one", async () => {
  const first = await connect({ host: "127.0.0.1", port: genuine.port, client });
  first.end("GET / HTTP/1.0\r\n\r\n");
  const session = await new Promise<Buffer>((resolve) => {
    let got: Buffer | undefined;
    first.on("session", (s: Buffer) => (got = s));
    first.on("data", () => undefined);
    first.on("close", () => resolve(got!));
  });
  assert.ok(session);
  await assert.rejects(connect({ host: "127.0.0.1", port: genuine.port, client, session }), /session was resumed/);
  // twin: the same connection without the session is checked and accepted
  (await connect({ host: "127.0.0.1", port: genuine.port, client })).destroy();
  const agent = new ConvergeAgent({ client });
  try {
    assert.equal(await get(genuine.port, agent, { session }), "genuine"); // the agent drops it: a full handshake
  } finally {
    agent.destroy();
  }
});

/** A CONNECT proxy that forwards to whatever port is asked for (or always to `divert`). */
async function proxy(divert?: number): Promise<{ server: Server; port: number; asked: string[] }> {
  const asked: string[] = [];
  const server = createServer((c: Socket) => {
    c.once("data", (d: Buffer) => {
      const line = d.toString("latin1").split("\r\n")[0]!;
      asked.push(line);
      const port = divert ?? Number(/:(\d+) HTTP/.exec(line)![1]);
      const upstream = netConnect(port, "127.0.0.1", () => {
        c.write("HTTP/1.1 200 Connection established\r\n\r\n");
        c.pipe(upstream).pipe(c);
      });
      upstream.on("error", () => c.destroy());
      c.on("error", () => upstream.destroy());
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { server, port: (server.address() as AddressInfo).port, asked };
}

test("through a CONNECT proxy the notaries are asked about the origin; an attacker's proxy is caught", async () => {
  const honest = await proxy();
  const attacker = await proxy(forged.port); // sends every tunnel to the forged server
  const a1 = new ConvergeAgent({ client, proxy: `http://127.0.0.1:${honest.port}` });
  const a2 = new ConvergeAgent({ client, proxy: `http://127.0.0.1:${attacker.port}` });
  try {
    assert.equal(await get(genuine.port, a1), "genuine");
    assert.match(honest.asked[0]!, new RegExp(`^CONNECT 127.0.0.1:${genuine.port} `));
    await assert.rejects(get(genuine.port, a2), NotTrustedError);
    assert.equal(forged.requests, 0);
  } finally {
    a1.destroy();
    a2.destroy();
    honest.server.close();
    attacker.server.close();
  }
});

test("undici: an Agent with the converge connector, direct and through a CONNECT proxy", async () => {
  const agent = new UndiciAgent({ connect: undiciConnector({ client }) });
  const r = await undiciRequest(`https://127.0.0.1:${genuine.port}/`, { dispatcher: agent });
  assert.equal(await r.body.text(), "genuine");
  await assert.rejects(undiciRequest(`https://127.0.0.1:${forged.port}/`, { dispatcher: agent }), NotTrustedError);
  await agent.close();
  const honest = await proxy();
  const viaProxy = new UndiciAgent({ connect: undiciConnector({ client, proxy: `http://127.0.0.1:${honest.port}` }) });
  try {
    const p = await undiciRequest(`https://127.0.0.1:${genuine.port}/`, { dispatcher: viaProxy });
    assert.equal(await p.body.text(), "genuine");
    assert.match(honest.asked.at(-1)!, new RegExp(`^CONNECT 127.0.0.1:${genuine.port} `));
  } finally {
    await viaProxy.close();
    honest.server.close();
  }
  assert.equal(forged.requests, 0);
});

test("checkServerIdentity (synchronous): on top of CA validation; a CA-valid forgery is refused", async () => {
  // the compromised-CA case: the attacker's certificate for site.test chains to a trusted CA
  const pki = makePki("site.test");
  const good = await new Site(pki.genuineKey, pki.genuineCert, "genuine").start();
  const evil = await new Site(pki.forgedKey, pki.forgedCert, "forged").start();
  // notaries in another process: this thread waits while they answer
  const remote = await remoteNotaries(sha1Fp(pki.genuineCert), "listed", "listed");
  const c2 = Client.load(remote.dir({ "notary-agreement": "consensus" }));
  const fetch = (port: number): Promise<string> => new Promise((resolve, reject) => {
    const req = request({
      host: "127.0.0.1", servername: "site.test", port, path: "/", ca: pki.ca, agent: false,
      checkServerIdentity: checkServerIdentity(port, { client: c2 }),
    }, (res) => {
      let b = "";
      res.on("data", (d: Buffer) => (b += d));
      res.on("end", () => resolve(b));
    });
    req.on("error", reject);
    req.end();
  });
  try {
    assert.equal(await fetch(good.port), "genuine"); // a miss: asked from the worker thread
    assert.equal(await fetch(good.port), "genuine"); // then a cache hit
    assert.deepEqual(await remote.counts(), [1, 1]);
    await assert.rejects(fetch(evil.port), NotTrustedError);
    assert.equal(evil.requests, 0);
    // twin: without the hook, CA validation alone accepts the forgery
    const plain = await new Promise<string>((resolve, reject) => {
      const req = request({ host: "127.0.0.1", servername: "site.test", port: evil.port, path: "/", ca: pki.ca, agent: false }, (res) => {
        let b = "";
        res.on("data", (d: Buffer) => (b += d));
        res.on("end", () => resolve(b));
      });
      req.on("error", reject);
      req.end();
    });
    assert.equal(plain, "forged");
  } finally {
    c2.close();
    await stopAll([good, evil, remote]);
  }
});

/**
 * The compromised-CA world: a genuine and a forged site.test, both CA-valid, and two notaries
 * in another process (the synchronous hook blocks this thread) that see the genuine one.
 */
async function caWorld(): Promise<{ pki: Pki; good: Site; evil: Site; remote: RemoteNotaries; c2: Client }> {
  const pki = makePki("site.test");
  const good = await new Site(pki.genuineKey, pki.genuineCert, "genuine").start();
  const evil = await new Site(pki.forgedKey, pki.forgedCert, "forged").start();
  const remote = await remoteNotaries(sha1Fp(pki.genuineCert), "listed", "listed");
  return { pki, good, evil, remote, c2: Client.load(remote.dir({ "notary-agreement": "consensus" })) };
}

/** GET / over https with these options: the body and whether the TLS session was resumed. */
function fetchWith(options: RequestOptions): Promise<{ body: string; resumed: boolean }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", path: "/", servername: "site.test", ...options }, (res) => {
      const resumed = (res.socket as TLSSocket).isSessionReused();
      let b = "";
      res.on("data", (d: Buffer) => (b += d));
      res.on("end", () => resolve({ body: b, resumed }));
    });
    req.on("error", reject);
    req.end();
  });
}

/** A TLS server (the genuine certificate) that resets every connection `afterMs` after its handshake. */
async function resetter(afterMs: number): Promise<{ server: TlsServer; port: number; resets: number }> {
  const state = { server: undefined as unknown as TlsServer, port: 0, resets: 0 };
  state.server = createTlsServer({ key: NOTARY_KEY, cert: NOTARY_CERT });
  state.server.on("secureConnection", (s: TLSSocket) => {
    s.on("error", () => undefined);
    setTimeout(() => {
      state.resets++;
      (s as unknown as { _parent: Socket })._parent.resetAndDestroy(); // an RST on the TCP connection
    }, afterMs);
  });
  await new Promise<void>((r) => state.server.listen(0, "127.0.0.1", r));
  state.port = (state.server.address() as AddressInfo).port;
  return state;
}

test("a server that resets the connection during the notary check: every hook refuses it, the process survives", async () => {
  const slow = await notaries("listed", "listed");
  for (const n of slow) n.delayMs = 600; // the check is still running when the reset comes
  const c = Client.load(configDir(slow, { "notary-agreement": "consensus" }));
  const servers: { server: TlsServer }[] = [];
  const server = async (): Promise<number> => {
    const r = await resetter(150);
    servers.push(r);
    return r.port;
  };
  try {
    // twin: the reset really arrives after the handshake and kills a process that does not listen
    const port0 = await server();
    const { execFile } = await import("node:child_process");
    const crash = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      execFile(process.execPath, ["-e",
        `require("node:tls").connect({ host: "127.0.0.1", port: ${port0}, rejectUnauthorized: false }).on("secureConnect", () => setTimeout(() => {}, 3000));`],
      { timeout: 10_000 }, (err, _out, stderr) => resolve({ code: err ? (err as { code?: number }).code ?? -1 : 0, stderr }));
    });
    assert.notEqual(crash.code, 0);
    assert.match(crash.stderr, /ECONNRESET/);
    const asked = slow[0]!.requests.length;
    await assert.rejects(connect({ host: "127.0.0.1", port: await server(), client: c }),
      (e: unknown) => e instanceof NotTrustedError && /during the notary check/.test(e.message));
    assert.ok(slow[0]!.requests.length > asked); // the notaries were being asked
    const agent = new ConvergeAgent({ client: c });
    try {
      await assert.rejects(get(await server(), agent), (e: unknown) => e instanceof NotTrustedError && /during the notary check/.test(e.message));
    } finally {
      agent.destroy();
    }
    const via = await proxy(); // the tunnel carries the reset (the proxy closes the client side)
    const tunnelled = new ConvergeAgent({ client: c, proxy: `http://127.0.0.1:${via.port}` });
    try {
      await assert.rejects(get(await server(), tunnelled), (e: unknown) => e instanceof NotTrustedError && /during the notary check/.test(e.message));
    } finally {
      tunnelled.destroy();
      via.server.close();
    }
    const ua = new UndiciAgent({ connect: undiciConnector({ client: c }) });
    try {
      await assert.rejects(undiciRequest(`https://127.0.0.1:${await server()}/`, { dispatcher: ua }), /during the notary check/);
    } finally {
      await ua.close();
    }
  } finally {
    c.close();
    for (const s of servers) s.server.close();
    await stopAll(slow);
  }
});

test("checkServerIdentity: only on connections it checks; keep-alive reuse and resumed sessions of other agents refused", async () => {
  const { pki, good, evil, remote, c2 } = await caWorld();
  const hook = checkServerIdentity(443, { client: c2 });
  const ca = pki.ca;
  const plain = [new HttpsAgent({ keepAlive: true }), new HttpsAgent({ keepAlive: false }), new HttpsAgent({ keepAlive: false })];
  const ours = [new CheckServerIdentityAgent({ client: c2, keepAlive: true }), new CheckServerIdentityAgent({ client: c2, keepAlive: false })];
  try {
    // twins, the holes of a shared agent: unhooked code connects first, then the hooked request
    // (4) reuses its keep-alive socket, (5) resumes its TLS session: the check never runs
    const [keep, resume, fresh] = plain as [HttpsAgent, HttpsAgent, HttpsAgent];
    assert.equal((await fetchWith({ port: evil.port, ca, agent: keep })).body, "forged");
    assert.equal((await fetchWith({ port: evil.port, ca, agent: keep, checkServerIdentity: hook })).body, "forged");
    assert.equal((await fetchWith({ port: evil.port, ca, agent: resume })).resumed, false);
    const resumed = await fetchWith({ port: evil.port, ca, agent: resume, checkServerIdentity: hook });
    assert.deepEqual(resumed, { body: "forged", resumed: true });
    // where it runs (a full handshake) through such an agent, the hook refuses the configuration
    const evilBefore = evil.requests;
    await assert.rejects(fetchWith({ port: good.port, ca, agent: fresh, checkServerIdentity: hook }), /refused configuration/);
    await assert.rejects(fetchWith({ port: good.port, ca, agent: false, checkServerIdentity: hook, session: Buffer.alloc(0) } as RequestOptions),
      /refused configuration/);
    // CheckServerIdentityAgent: every socket it opens is checked, even for code that passes no hook
    const [ka, nk] = ours as [CheckServerIdentityAgent, CheckServerIdentityAgent];
    await assert.rejects(fetchWith({ port: evil.port, ca, agent: ka }), NotTrustedError);
    await assert.rejects(fetchWith({ port: evil.port, ca, agent: ka, checkServerIdentity: () => undefined }), NotTrustedError);
    assert.equal(evil.requests, evilBefore);
    assert.equal((await fetchWith({ port: good.port, ca, agent: ka })).body, "genuine");
    assert.equal((await fetchWith({ port: good.port, ca, agent: ka })).body, "genuine"); // its own checked socket, reused
    // and it keeps no session: every new connection is a full handshake, checked (twin: `resume` above)
    assert.deepEqual(await fetchWith({ port: good.port, ca, agent: nk }), { body: "genuine", resumed: false });
    assert.deepEqual(await fetchWith({ port: good.port, ca, agent: nk }), { body: "genuine", resumed: false });
    await assert.rejects(fetchWith({ port: evil.port, ca, agent: nk }), NotTrustedError);
    await assert.rejects(fetchWith({ port: good.port, ca, agent: nk, rejectUnauthorized: false }), /refuses rejectUnauthorized: false/);
    assert.equal(evil.requests, evilBefore);
  } finally {
    for (const a of [...plain, ...ours]) a.destroy();
    c2.close();
    await stopAll([good, evil, remote]);
  }
});

test("ConvergeAgent with keep-alive: requests made without any hook option get a checked socket or none; only checked sockets are reused", async () => {
  const { pki, good, evil, remote, c2 } = await caWorld();
  const ca = pki.ca;
  let handshakes = 0;
  good.server.on("secureConnection", () => handshakes++);
  const agent = new ConvergeAgent({ client: c2, keepAlive: true });
  const plain = new HttpsAgent({ keepAlive: true });
  try {
    // twin: on a plain keep-alive agent, code that only asks for CA validation keeps the forged
    // socket open, and the next request on that agent gets it (issue 37, row 4)
    assert.equal((await fetchWith({ port: evil.port, ca, agent: plain })).body, "forged");
    assert.equal((await fetchWith({ port: evil.port, ca, agent: plain })).body, "forged");
    assert.equal(evil.requests, 2);
    // the same code on the ConvergeAgent (its own CA validation and checkServerIdentity): refused,
    // nothing pooled, and the request after it is refused again before a byte is written
    await assert.rejects(fetchWith({ port: evil.port, ca, agent, checkServerIdentity: () => undefined }), NotTrustedError);
    await assert.rejects(fetchWith({ port: evil.port, ca, agent, rejectUnauthorized: true }), NotTrustedError);
    await assert.rejects(fetchWith({ port: evil.port, ca, agent }), NotTrustedError);
    assert.equal(evil.requests, 2);
    // the genuine site: a socket opened for such code was checked, and is the one reused
    assert.equal((await fetchWith({ port: good.port, ca, agent, checkServerIdentity: () => undefined })).body, "genuine");
    assert.equal((await fetchWith({ port: good.port, ca, agent })).body, "genuine");
    assert.equal(handshakes, 1);
  } finally {
    agent.destroy();
    plain.destroy();
    c2.close();
    await stopAll([good, evil, remote]);
  }
});

test("undici ProxyAgent: a connect option is ignored by undici (twin); requestTls: undiciProxyTls() checks the origin behind the proxy", async () => {
  const { pki, good, evil, remote, c2 } = await caWorld();
  const via = await proxy();
  const uri = `http://127.0.0.1:${via.port}`;
  const tls = { ca: pki.ca, servername: "site.test" };
  const ignored = new ProxyAgent({ uri, connect: undiciConnector({ client: c2 }), requestTls: tls });
  const checked = new ProxyAgent({ uri, requestTls: undiciProxyTls({ client: c2, tls }) });
  const bare = new ProxyAgent({ uri, requestTls: { ...tls, checkServerIdentity: checkServerIdentity(443, { client: c2 }) } });
  const get2 = async (port: number, dispatcher: ProxyAgent): Promise<string> =>
    (await undiciRequest(`https://127.0.0.1:${port}/`, { dispatcher })).body.text();
  try {
    assert.equal(await get2(evil.port, ignored), "forged"); // twin: CA validation only
    const before = evil.requests;
    await assert.rejects(get2(evil.port, checked), /converge does not trust/);
    assert.equal(evil.requests, before);
    assert.equal(await get2(good.port, checked), "genuine");
    assert.match(via.asked.at(-1)!, new RegExp(`^CONNECT 127.0.0.1:${good.port} `));
    await assert.rejects(get2(good.port, bare), /refused configuration/); // undici would resume sessions
    assert.throws(() => undiciProxyTls({ client: c2, tls: { rejectUnauthorized: false } }), /refuses rejectUnauthorized/);
  } finally {
    await Promise.all([ignored.close(), checked.close(), bare.close()]);
    via.server.close();
    c2.close();
    await stopAll([good, evil, remote]);
  }
});
