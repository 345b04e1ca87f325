// Builds the extension (dist/extension/) and the Node tests (dist-test/) with esbuild. The
// core is the TypeScript library's own (client-libs/typescript/src/core), bundled in: one
// copy of the rules for every client.
import { build } from "esbuild";
import { cpSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const core = join(here, "..", "typescript", "src", "core", "index.ts");
const out = join(here, "dist", "extension");
rmSync(join(here, "dist"), { recursive: true, force: true });
rmSync(join(here, "dist-test"), { recursive: true, force: true });
mkdirSync(out, { recursive: true });
cpSync(join(here, "static"), out, { recursive: true });
cpSync(join(here, "icons"), join(out, "icons"), { recursive: true });
await build({
  entryPoints: ["background", "block", "popup", "options"].map((n) => join(here, "src", `${n}.ts`)),
  outdir: out,
  bundle: true,
  format: "iife",
  target: "firefox142",
  alias: { "@converge/core": core },
  legalComments: "none",
  logLevel: "warning",
});
const tests = readdirSync(join(here, "test")).filter((f) => f.endsWith(".test.ts"));
await build({
  entryPoints: tests.map((f) => join(here, "test", f)),
  outdir: join(here, "dist-test"),
  outExtension: { ".js": ".mjs" },
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  alias: { "@converge/core": core },
  external: ["better-sqlite3"],
  banner: { js: "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);" },
  logLevel: "warning",
});
console.log(`built ${out} and ${tests.length} test files`);
