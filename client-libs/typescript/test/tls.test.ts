// End to end through the TLS hooks: real HTTPS servers on 127.0.0.1, real notaries (fakes
// with the vectors' keys). The genuine site loads; the forged one fails before a single
// byte of the request reaches it (the must-fail twin of each hook).
import assert from "node:assert/strict";
import { request } from "node:https";
import { connect as netConnect, createServer, type Server, type Socket } from "node:net";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import { Agent as UndiciAgent, request as undiciRequest } from "undici";
import { checkServerIdentity, Client, connect, ConvergeAgent, NotTrustedError, undiciConnector } from "../src/index.js";
import { configDir, FakeNotary, makePki, notaries, OTHER_CERT, OTHER_KEY, remoteNotaries, sha1Fp, Site, stopAll } from "./helpers.js";

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
