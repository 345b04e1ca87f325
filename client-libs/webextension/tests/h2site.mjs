// An HTTP/2 site for the Firefox tests: node h2site.mjs HOST PORT CERT KEY TEXT. Each request
// is logged on stdout as "METHOD PATH cookie:yes|no HTTP-VERSION"; "ready" once it listens.
import { readFileSync } from "node:fs";
import { createSecureServer } from "node:http2";

const [host, port, cert, key, text] = process.argv.slice(2);
const server = createSecureServer({ cert: readFileSync(cert), key: readFileSync(key), allowHTTP1: true }, (req, res) => {
  console.log(`${req.method} ${req.url} cookie:${req.headers.cookie ? "yes" : "no"} ${req.httpVersion}`);
  const body = `<!doctype html><title>${text}</title><p id='page'>${text} over HTTP/${req.httpVersion}</p>`;
  res.writeHead(200, { "content-type": "text/html; charset=utf-8", "cache-control": "no-store" });
  res.end(req.method === "HEAD" ? undefined : body);
});
server.listen(Number(port), host, () => console.log("ready"));
process.on("SIGTERM", () => server.close(() => process.exit(0)));
