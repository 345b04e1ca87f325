/**
 * converge for Node: ask Convergence notaries whether the certificate you were shown for
 * `host:port` is the one they see from their own network paths.
 *
 * - {@link converge} / {@link Client}: a verdict for (host, port, fingerprint);
 * - {@link ConvergeAgent}, {@link undiciConnector}, {@link connect},
 *   {@link checkServerIdentity}: the TLS hooks;
 * - `@converge-notary/client/core`: the platform-neutral core (also used by the browser
 *   extension).
 *
 * @module
 */
export * from "./core/index.js";
export { Client, closeSharedClients, converge, sharedClient } from "./node/client.js";
export type { CheckOptions, ClientOptions, Verdict } from "./node/client.js";
export {
  CONFIG_ENV_VAR, CONFIG_FILE, DEFAULT_CACHE_LIFETIME, SYSTEM_CONFIG_DIR, defaultConfig, discoverConfigDir,
  enabledNotaries, isFlatLayout, listNotaries, loadConfig, parseConfig, whereNotariesAreRead,
} from "./node/config.js";
export type { Config, NotaryFile } from "./node/config.js";
export { LocalCache } from "./node/cache.js";
export { nodeCrypto } from "./node/crypto.js";
export { askNotary, connectHead, parseConnectReply } from "./node/notaryio.js";
export type { Dialer, ExtQuery, NotaryResult, QueryOptions } from "./node/notaryio.js";
export {
  CheckServerIdentityAgent, ConvergeAgent, NotTrustedError, checkServerIdentity, connect, tunnel, undiciConnector,
  undiciProxyTls, verifySocket,
} from "./node/tls.js";
export type { ConvergeAgentOptions, ConvergeConnectOptions, HookOptions, UndiciConnectOptions } from "./node/tls.js";
export { COMPARED_FIELDS, comparedFields, VECTOR_SCHEMAS, runVectorCase } from "./node/vectors.js";
export type { VectorCase, VectorOutput } from "./node/vectors.js";

/** The library's version. */
export const VERSION = "0.1.0";
