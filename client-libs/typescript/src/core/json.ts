/**
 * JSON through the stock parser, `JSON.parse` (strict RFC 8259: no `NaN`/`Infinity`,
 * comments, trailing commas or non-string member names; the last of repeated member names
 * counts). Objects become {@link JsonObject} maps so that a member name such as
 * `__proto__` or `constructor` is only ever data.
 *
 * Bytes a signature covers (a legacy answer's `S`, an extended statement `T`) pass the
 * bounds scan first ({@link boundsScan}; docs/wire-format.md, "The bounds scan"): at most
 * {@link MAX_JSON_DEPTH} levels open at once and every number an integer of at most 15
 * digits, so every number read from a notary is an exact integer below 2^53.
 *
 * @module
 */
import { fromUtf8 } from "./bytes.js";

/** Most levels the bounds scan lets be open at once (the top-level object is level 1). */
export const MAX_JSON_DEPTH = 32;

/** A JSON object: each member name with its (last) value. */
export type JsonObject = Map<string, JsonValue>;

/** A parsed value. */
export type JsonValue = null | boolean | number | string | JsonValue[] | JsonObject;

const INTEGER = /^-?(?:0|[1-9][0-9]{0,14})$/;

function numberChar(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || c === 0x2d || c === 0x2b || c === 0x2e || c === 0x65 || c === 0x45;
}

/**
 * The bounds scan: whether `text` opens at most `maxDepth` levels at once and holds no
 * number token (a maximal run of `-+.0-9eE` starting with `-` or a digit, outside strings)
 * other than an integer of at most 15 digits. It produces no values; anything else is left
 * to the parser.
 */
export function boundsScan(text: string, maxDepth = MAX_JSON_DEPTH): boolean {
  let depth = 0;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      for (i++; i < n; i++) {
        const d = text.charCodeAt(i);
        if (d === 0x5c) i++;
        else if (d === 0x22) break;
      }
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > maxDepth) return false;
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    } else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
      let j = i + 1;
      while (j < n && numberChar(text.charCodeAt(j))) j++;
      if (!INTEGER.test(text.slice(i, j))) return false;
      i = j - 1;
    }
  }
  return true;
}

/** Plain JavaScript data (as `JSON.parse` returns it) as a {@link JsonValue}. */
export function fromPlain(v: unknown): JsonValue {
  if (v === null || typeof v === "boolean" || typeof v === "string") return v;
  if (typeof v === "number") return v === 0 ? 0 : v; // -0 is the integer 0
  if (Array.isArray(v)) return v.map(fromPlain);
  if (v instanceof Map) return v as JsonObject;
  const m: JsonObject = new Map();
  for (const [k, x] of Object.entries(v as object)) m.set(k, fromPlain(x));
  return m;
}

/** `JSON.parse(text)` as a {@link JsonValue}; `undefined` when the text is not JSON. */
export function parseJson(text: string): JsonValue | undefined {
  try {
    return fromPlain(JSON.parse(text));
  } catch {
    return undefined; // a SyntaxError, or a RangeError on absurd nesting
  }
}

/**
 * Signed bytes as JSON: strict UTF-8, the bounds scan, then `JSON.parse`; `undefined` when
 * any of them refuses.
 */
export function parseVerified(bytes: Uint8Array): JsonValue | undefined {
  const text = fromUtf8(bytes);
  if (text === undefined || !boundsScan(text)) return undefined;
  return parseJson(text);
}

/** Whether `v` is an object. */
export function isObject(v: JsonValue | undefined): v is JsonObject {
  return v instanceof Map;
}

/** `v` when it is a string, else `undefined`. */
export function asString(v: JsonValue | undefined): string | undefined {
  return typeof v === "string" ? v : undefined;
}

/** `v` when it is an integer that a double holds exactly (a safe integer), else `undefined`. */
export function asInt(v: JsonValue | undefined): number | undefined {
  return typeof v === "number" && Number.isSafeInteger(v) ? v : undefined;
}

/**
 * `v` written the way a notary writes its answers (member names sorted, no white space,
 * integers only: RFC 8785 for the format's subset) with `JSON.stringify`, for producing
 * answers in tests and tools. Verification never re-serialises anything. `undefined` when
 * `v` holds a number that is not a safe integer.
 */
export function canonicalJson(v: JsonValue): string | undefined {
  let ok = true;
  const text = JSON.stringify(v, (_k, x: unknown) => {
    if (x instanceof Map) return Object.fromEntries([...(x as JsonObject)].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
    if (typeof x === "number" && !Number.isSafeInteger(x)) ok = false;
    return x;
  });
  return ok ? text : undefined;
}
