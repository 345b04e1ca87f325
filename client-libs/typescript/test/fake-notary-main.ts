// Fake notaries in a process of their own (for the synchronous hook, which blocks the
// calling thread while the notaries answer). argv: SEES_FINGERPRINT MODE...; prints one JSON
// line {name, port, bundle, requests} per notary, then serves until stdin closes; on "count"
// it prints the request counts.
import { FakeNotary, type Mode } from "./helpers.js";

const [sees, ...modes] = process.argv.slice(2);
const ns: FakeNotary[] = [];
for (const [i, m] of modes.entries()) {
  const n = await new FakeNotary(`Org ${String.fromCharCode(65 + i)}`, m as Mode).start();
  n.sees = sees!;
  ns.push(n);
}
process.stdout.write(JSON.stringify(ns.map((n) => ({ name: n.name, port: n.port, bundle: n.bundle() }))) + "\n");
process.stdin.on("data", () => process.stdout.write(JSON.stringify(ns.map((n) => n.requests.length)) + "\n"));
process.stdin.on("end", () => process.exit(0));
