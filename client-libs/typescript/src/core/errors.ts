/**
 * Errors of the converge client. Every error the library throws is a {@link ConvergeError}
 * with a stable {@link ConvergeError.kind} shared with the other languages' libraries and the
 * test vectors, and a {@link ConvergeError.family}: `bad-input` (the data is wrong; retrying
 * does not help) or `io` (a connection, the TLS handshake, a pin, a timeout or the cache
 * database failed).
 *
 * @module
 */

/** The error kinds shared with the other libraries and the vectors. */
export type ErrorKind =
  | "fingerprint"
  | "target"
  | "response"
  | "signature"
  | "bundle"
  | "config"
  | "unreachable"
  | "pin"
  | "cache-io"
  | "timeout"
  | "vote";

/** Which kind of failure: wrong data, or a failed IO step. */
export type ErrorFamily = "bad-input" | "io";

const FAMILY: Record<ErrorKind, ErrorFamily> = {
  fingerprint: "bad-input",
  target: "bad-input",
  response: "bad-input",
  signature: "bad-input",
  bundle: "bad-input",
  config: "bad-input",
  vote: "bad-input",
  unreachable: "io",
  pin: "io",
  "cache-io": "io",
  timeout: "io",
};

/** The base class of every error this library throws. */
export class ConvergeError extends Error {
  /** A stable word saying what failed (see {@link ErrorKind}). */
  readonly kind: ErrorKind;
  /** `bad-input` or `io`. */
  readonly family: ErrorFamily;

  constructor(kind: ErrorKind, message: string, options?: { cause?: unknown }) {
    super(`converge: ${kind}: ${message}`, options);
    this.name = new.target.name;
    this.kind = kind;
    this.family = FAMILY[kind];
  }
}

/** A fingerprint that is not 40 or 64 hex digits (optionally colon-separated). */
export class FingerprintError extends ConvergeError {
  constructor(message: string) {
    super("fingerprint", message);
  }
}

/** A host or port that cannot be asked about. */
export class TargetError extends ConvergeError {
  constructor(message: string) {
    super("target", message);
  }
}

/** A notary response that does not follow the protocol (framing, body shape). */
export class ResponseError extends ConvergeError {
  constructor(message: string) {
    super("response", message);
  }
}

/** A legacy signature that does not verify against the notary's pinned certificate. */
export class SignatureError extends ConvergeError {
  constructor(message: string) {
    super("signature", message);
  }
}

/** A `.notary` bundle that is not valid. */
export class BundleError extends ConvergeError {
  constructor(message: string) {
    super("bundle", message);
  }
}

/** A configuration directory or `converge.config` that is not valid. */
export class ConfigError extends ConvergeError {
  constructor(message: string) {
    super("config", message);
  }
}

/** The local cache database could not be opened, read or written. */
export class CacheIOError extends ConvergeError {
  constructor(message: string, cause?: unknown) {
    super("cache-io", message, cause === undefined ? undefined : { cause });
  }
}

/** A notary could not be reached (connection refused or reset, TLS failure). */
export class UnreachableError extends ConvergeError {
  constructor(message: string, cause?: unknown) {
    super("unreachable", message, cause === undefined ? undefined : { cause });
  }
}

/** A notary presented a certificate other than the one its bundle pins. */
export class PinError extends ConvergeError {
  constructor(message: string) {
    super("pin", message);
  }
}

/** A wait ran over its bound. */
export class TimeoutError extends ConvergeError {
  constructor(message: string) {
    super("timeout", message);
  }
}

/** An unknown vote was given to the policy functions. */
export class VoteError extends ConvergeError {
  constructor(message: string) {
    super("vote", message);
  }
}

/**
 * Why the transparency member of a `match` answer was refused (docs/transparency.md,
 * "Clients"), in check order.
 */
export type LogKind = "log-missing" | "log-proof" | "log-checkpoint" | "log-witness" | "log-entry";

/**
 * Why an extended answer (`converge-answer/1`) was rejected, in verification order; then,
 * for a bundle that names a transparency log, the {@link LogKind} of its proof.
 */
export type RejectReason =
  | "malformed"
  | "unknown-key"
  | "bad-signature"
  | "wrong-target"
  | "nonce-mismatch"
  | "stale"
  | LogKind;

/** An extended answer that failed verification; {@link AnswerRejected.reason} names the check. */
export class AnswerRejected extends Error {
  readonly reason: RejectReason;

  constructor(reason: RejectReason, message: string) {
    super(`converge: answer rejected (${reason}): ${message}`);
    this.name = "AnswerRejected";
    this.reason = reason;
  }
}

/** The kind of a converge error, or `undefined` for any other value. */
export function errorKind(err: unknown): ErrorKind | undefined {
  return err instanceof ConvergeError ? err.kind : undefined;
}
