/**
 * The platform-neutral core of the converge client: fingerprints, bundles, both answer
 * formats, the consensus policies, the local-cache rule and the transparency log's proofs
 * (with their shared vectors). It uses no Node API (only
 * `TextEncoder`, `atob`/`btoa` and a {@link CryptoProvider}), so the same code runs in Node
 * and in a browser extension.
 *
 * @module
 */
export * from "./bytes.js";
export * from "./bundle.js";
export * from "./crypto.js";
export * from "./ed25519.js";
export * from "./errors.js";
export * from "./extended.js";
export * from "./fingerprint.js";
export * from "./gather.js";
export * from "./json.js";
export * from "./legacy.js";
export * from "./policy.js";
export * from "./transparency.js";
export * from "./vectors.js";
