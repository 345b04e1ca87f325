// Fetch a page only if the notaries see the certificate this machine sees.
//   node examples/fetch.mjs https://www.example.org/ [CONFIG_DIR]
import https from "node:https";
import { ConvergeAgent } from "@converge-notary/client";

const [url, configDir] = process.argv.slice(2);
const agent = new ConvergeAgent({ configDir });     // discovered when CONFIG_DIR is absent
https.get(url, { agent }, (res) => res.pipe(process.stdout))
  .on("error", (err) => { console.error(err.message); process.exitCode = 1; });
