/**
 * The conformance CLI (client-libs/conformance/CLIENT-CLI.md): `info`, `check`, `hook` and
 * `vector`, one JSON object per line on stdout.
 *
 *     converge-conformance info
 *     converge-conformance check --config-dir DIR HOST PORT FINGERPRINT
 *     converge-conformance hook --config-dir DIR [--proxy URL] [--ca-file PEM] HOST PORT
 *     converge-conformance vector FILE
 *
 * @module
 */
import { readFileSync } from "node:fs";
import { request } from "node:https";
import { errorKind } from "../core/errors.js";
import { Client } from "../node/client.js";
import { ConvergeAgent, NotTrustedError } from "../node/tls.js";
import { runVectorCase, VECTOR_SCHEMAS } from "../node/vectors.js";

const USAGE = `usage: converge-conformance info
       converge-conformance check --config-dir DIR HOST PORT FINGERPRINT
       converge-conformance hook --config-dir DIR [--proxy URL] [--ca-file PEM] HOST PORT
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

/** Fetches https://HOST:PORT/ with https.request on a ConvergeAgent (the README's hook). */
async function hook(dir: string, rest: string[]): Promise<number> {
  const opts = new Map<string, string>();
  while (rest.length >= 2 && (rest[0] === "--proxy" || rest[0] === "--ca-file")) {
    opts.set(rest[0], rest[1]!);
    rest = rest.slice(2);
  }
  const port = portOf(rest[1]);
  if (rest.length !== 2 || port === undefined || port < 1 || port > 65535) {
    process.stderr.write(USAGE);
    return 2;
  }
  const host = rest[0]!;
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
      emit({ error: "usage", message: `cannot read CA file: ${(err as Error).message}` });
      return 2;
    }
  }
  const agent = new ConvergeAgent({ client, ...(opts.has("--proxy") ? { proxy: opts.get("--proxy")! } : {}) });
  const timeoutMs = (client.config.totalTimeout + 10) * 1000;
  try {
    const result = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request({ host, port, path: "/", method: "GET", agent, ...(ca ? { ca } : {}), timeout: timeoutMs }, (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (c: Buffer) => {
          if (size < 1024) chunks.push(c);
          size += c.length;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).subarray(0, 1024).toString("utf8") }));
        res.on("error", reject);
      });
      req.on("timeout", () => req.destroy(new Error(`no response within ${timeoutMs} ms`)));
      req.on("error", reject);
      req.end();
    });
    emit({ connected: true, status: result.status, body: result.body });
    return 0;
  } catch (err) {
    const untrusted = err instanceof NotTrustedError;
    emit({ connected: false, error: untrusted ? "untrusted" : "io", message: (err as Error).message });
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
