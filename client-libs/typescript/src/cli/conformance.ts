/**
 * The conformance CLI (client-libs/conformance/CLIENT-CLI.md): `info`, `check`, `hook` and
 * `vector`, one JSON object per line on stdout.
 *
 *     converge-conformance info
 *     converge-conformance check --config-dir DIR HOST PORT FINGERPRINT
 *     converge-conformance hook --config-dir DIR [--proxy URL] [--ca-file PEM] [--path P]
 *         [--follow-redirects] [--first URL] [--unhooked-first] HOST PORT
 *     converge-conformance vector FILE
 *
 * @module
 */
import { readFileSync } from "node:fs";
import { type Agent as HttpsAgent, request } from "node:https";
import { isIP } from "node:net";
import { errorKind } from "../core/errors.js";
import { Client } from "../node/client.js";
import { ConvergeAgent, NotTrustedError } from "../node/tls.js";
import { runVectorCase, VECTOR_SCHEMAS } from "../node/vectors.js";

const USAGE = `usage: converge-conformance info
       converge-conformance check --config-dir DIR HOST PORT FINGERPRINT
       converge-conformance hook --config-dir DIR [--proxy URL] [--ca-file PEM] [--path P]
           [--follow-redirects] [--first URL] [--unhooked-first] HOST PORT
       converge-conformance vector FILE
`;

function emit(v: unknown): void {
  // U+2028 and U+2029 are valid in JSON text but end a line for some readers
  process.stdout.write(JSON.stringify(v).replace(/\u2028/g, "\\u2028").replace(/\u2029/g, "\\u2029") + "\n");
}

function portOf(text: string | undefined): number | undefined {
  if (text === undefined || !/^[0-9]{1,5}$/.test(text)) return undefined;
  return Number(text);
}

async function vector(path: string): Promise<number> {
  const doc = JSON.parse(readFileSync(path, "utf8")) as Record<string, unknown>;
  if (!VECTOR_SCHEMAS.includes(String(doc["schema"]))) {
    emit({ error: "unsupported-schema" });
    return 2;
  }
  for (const c of doc["tests"] as Record<string, unknown>[]) emit(await runVectorCase(doc, c));
  return 0;
}

async function check(dir: string, host: string, portText: string, fp: string): Promise<number> {
  const port = portOf(portText);
  if (port === undefined) {
    emit({ error: "usage", message: "PORT must be decimal" });
    return 2;
  }
  let client: Client | undefined;
  try {
    client = Client.load(dir);
    const v = await client.check(host, port, fp);
    emit({
      verdict: v.trusted, cache: v.fromCache, relay: v.relay,
      notaries: v.results.map((r) => ({ name: r.name, outcome: r.vote, kind: r.kind, status: r.status, protocol: r.protocol })),
    });
    return v.trusted ? 0 : 1;
  } catch (err) {
    emit({ error: errorKind(err) ?? "io", message: err instanceof Error ? err.message : String(err) });
    return 2;
  } finally {
    client?.close();
  }
}

/** The `hook` flags and how many values each takes. */
const HOOK_FLAGS: Record<string, number> = {
  "--proxy": 1, "--ca-file": 1, "--path": 1, "--follow-redirects": 0, "--first": 1, "--unhooked-first": 0,
};
/** Redirect hops followed with --follow-redirects. */
const MAX_HOPS = 5;

interface Fetched {
  status: number;
  location: string | undefined;
  body: string;
}

/** One GET of `url` on `agent`; the body read to its end, its first KiB kept. */
function fetchOnce(url: URL, agent: HttpsAgent, ca: Buffer | undefined, timeoutMs: number): Promise<Fetched> {
  if (url.protocol !== "https:") return Promise.reject(new Error(`not an https URL: ${url.href}`));
  return new Promise<Fetched>((resolve, reject) => {
    const options = {
      host: url.hostname.replace(/^\[|\]$/g, ""), port: Number(url.port || 443), path: `${url.pathname}${url.search}`,
      method: "GET", agent, ...(ca ? { ca } : {}), timeout: timeoutMs,
    };
    const req = request(options, (res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on("data", (c: Buffer) => {
        if (size < 1024) chunks.push(c);
        size += c.length;
      });
      res.on("end", () => resolve({
        status: res.statusCode ?? 0, location: res.headers.location,
        body: Buffer.concat(chunks).subarray(0, 1024).toString("utf8"),
      }));
      res.on("error", reject);
    });
    req.on("timeout", () => req.destroy(new Error(`no response within ${timeoutMs} ms`)));
    req.on("error", reject);
    req.end();
  });
}

/**
 * Fetches https://HOST:PORT/P with https.request on a ConvergeAgent (the README's hook, keep-alive
 * on, as Node's own global agent). Node follows no redirects: with --follow-redirects each
 * `Location` is requested on the same agent. --first is a GET on the same agent. --unhooked-first
 * is a request on the same agent made the way code without the hook makes one (no hook option,
 * CA validation asked for with --ca-file): the agent checks every socket it opens, whoever asks.
 */
async function hook(dir: string, rest: string[]): Promise<number> {
  const opts = new Map<string, string>();
  while (rest.length > 0 && Object.hasOwn(HOOK_FLAGS, rest[0]!) && rest.length > HOOK_FLAGS[rest[0]!]!) {
    const takes = HOOK_FLAGS[rest[0]!]!;
    opts.set(rest[0]!, takes ? rest[1]! : "");
    rest = rest.slice(1 + takes);
  }
  const port = portOf(rest[1]);
  const path = opts.get("--path") ?? "/";
  if (rest.length !== 2 || port === undefined || port < 1 || port > 65535 || !path.startsWith("/")) {
    process.stderr.write(USAGE);
    return 2;
  }
  const host = rest[0]!;
  let url: URL;
  let first: URL | undefined;
  try {
    url = new URL(`https://${isIP(host) === 6 ? `[${host}]` : host}:${port}${path}`);
    if (opts.has("--first")) {
      first = new URL(opts.get("--first")!);
      if (first.protocol !== "https:") throw new Error("--first needs an absolute https:// URL");
    }
  } catch (err) {
    emit({ error: "usage", message: (err as Error).message });
    return 2;
  }
  let client: Client;
  try {
    client = Client.load(dir);
  } catch (err) {
    emit({ error: errorKind(err) ?? "config", message: (err as Error).message });
    return 2;
  }
  let ca: Buffer | undefined;
  if (opts.has("--ca-file")) {
    try {
      ca = readFileSync(opts.get("--ca-file")!);
    } catch (err) {
      client.close();
      emit({ error: "usage", message: `cannot read CA file: ${(err as Error).message}` });
      return 2;
    }
  }
  const agent = new ConvergeAgent({ client, keepAlive: true, ...(opts.has("--proxy") ? { proxy: opts.get("--proxy")! } : {}) });
  const timeoutMs = (client.config.totalTimeout + 10) * 1000;
  let step = "first request: ";
  try {
    if (opts.has("--unhooked-first")) await fetchOnce(url, agent, ca, timeoutMs);
    if (first !== undefined) await fetchOnce(first, agent, ca, timeoutMs);
    step = "";
    let result = await fetchOnce(url, agent, ca, timeoutMs);
    for (let hop = 0; opts.has("--follow-redirects") && hop < MAX_HOPS; hop++) {
      if (result.status < 300 || result.status > 399 || result.location === undefined) break;
      url = new URL(result.location, url);
      result = await fetchOnce(url, agent, ca, timeoutMs);
    }
    emit({ connected: true, status: result.status, body: result.body });
    return 0;
  } catch (err) {
    const untrusted = err instanceof NotTrustedError;
    emit({ connected: false, error: untrusted ? "untrusted" : "io", message: step + (err as Error).message });
    return 1;
  } finally {
    agent.destroy();
    client.close();
  }
}

async function main(args: string[]): Promise<number> {
  if (args[0] === "info" && args.length === 1) {
    emit({ language: "typescript", implementation: "@converge-notary/client (Node)", version: "0.1.0", schemas: VECTOR_SCHEMAS });
    return 0;
  }
  if (args[0] === "check" && args[1] === "--config-dir" && args.length === 6) return check(args[2]!, args[3]!, args[4]!, args[5]!);
  if (args[0] === "hook" && args[1] === "--config-dir" && args.length >= 5) return hook(args[2]!, args.slice(3));
  if (args[0] === "vector" && args.length === 2) return vector(args[1]!);
  process.stderr.write(USAGE);
  return 2;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(`converge-conformance: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
    process.exitCode = 3;
  },
);
