/**
 * The worker behind the synchronous `checkServerIdentity`: it asks the notaries with an
 * ordinary asynchronous client while the calling thread waits on a shared flag.
 *
 * @module
 */
import { workerData, type MessagePort } from "node:worker_threads";
import { Client } from "./client.js";

const { port, flag } = workerData as { port: MessagePort; flag: Int32Array };
const clients = new Map<string, Client>();

port.on("message", (m: { configDir: string; host: string; port: number; der: Uint8Array }) => {
  void (async () => {
    let reply: { trusted: boolean; reason: string; error?: string };
    try {
      let client = clients.get(m.configDir);
      if (client === undefined) {
        client = Client.load(m.configDir);
        clients.set(m.configDir, client);
      }
      const v = await client.checkCertificate(m.host, m.port, m.der);
      reply = { trusted: v.trusted, reason: v.reason };
    } catch (err) {
      reply = { trusted: false, reason: "", error: err instanceof Error ? err.message : String(err) };
    }
    port.postMessage(reply);
    Atomics.store(flag, 0, 1);
    Atomics.notify(flag, 0);
  })();
});
