/**
 * JSON at the protocol's edges, read the way the Python reference client reads it.
 *
 * Parsing is `JSON.parse`. Three things it loses matter to the protocol: the order of keys
 * that look like array indices (JavaScript moves them first), whether a number was written
 * as an integer or a float (`443` and `443.0`, `1e2` and `100`) and integers beyond 2^53.
 * Python keeps all three, and two rules depend on them:
 *
 * - legacy recipe (a) re-serialises a parsed body the way Python's `json.dumps` does with its
 *   default settings (key order kept, `", "` and `": "` separators, ASCII-only output with
 *   `\uXXXX` escapes, integers as written, floats as Python's `repr`);
 * - the extended format is canonical JSON (RFC 8785) over a subset without floats: a
 *   verifier compares canonical(parse(body)) with the body.
 *
 * So before `JSON.parse` a lexical pass over the text (tokens only; no values are built)
 * marks every string with a prefix character (keys then never look like indices, and keep
 * their order) and turns every number that is not a safe integer literal, and Python's
 * `NaN` and `Infinity`, into a marked string holding its literal; it also bounds the depth.
 * The parsed tree is then rebuilt with {@link JsonObject} maps and {@link JsonNumber}s.
 *
 * @module
 */

/** Deepest nesting accepted anywhere. */
export const MAX_JSON_DEPTH = 512;

/** A number `JSON.parse` cannot represent exactly: a float literal, a big integer, NaN or Infinity. */
export class JsonNumber {
  /** The literal as written (`443.0`, `1e2`, `123456789012345678901`, `NaN`). */
  readonly literal: string;
  /** Its value as a double (Python's `float(literal)`). */
  readonly value: number;
  /** Written as an integer (Python reads it as an int). */
  readonly integer: boolean;

  constructor(literal: string) {
    this.literal = literal;
    this.integer = /^-?(?:0|[1-9][0-9]*)$/.test(literal);
    this.value = literal === "NaN" ? NaN : Number(literal);
  }
}

/** A JSON object: keys in their first position, each with its last value (as Python's dict). */
export type JsonObject = Map<string, JsonValue>;

/** A parsed value. Safe integers are numbers; other numbers are {@link JsonNumber}s. */
export type JsonValue = null | boolean | number | string | JsonNumber | JsonValue[] | JsonObject;

const STRING_MARK = "\u0000";
const NUMBER_MARK = "\u0001";

/**
 * The text with every string prefixed by STRING_MARK and every number that is not a safe
 * integer literal (and NaN, Infinity, -Infinity) replaced by a NUMBER_MARK string; or
 * `undefined` when it nests deeper than `maxDepth`. Malformed text is left for JSON.parse to
 * refuse.
 */
function mark(text: string, maxDepth: number): string | undefined {
  const out: string[] = [];
  let depth = 0;
  let last = 0;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      out.push(text.slice(last, i + 1), "\\u0000");
      last = i + 1; // the string's content follows the mark
      for (i++; i < n; i++) {
        const d = text.charCodeAt(i);
        if (d === 0x5c) i++;
        else if (d === 0x22) break;
      }
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > maxDepth) return undefined;
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    } else if (c === 0x2d || (c >= 0x30 && c <= 0x39) || c === 0x4e || c === 0x49) {
      let j = i + 1;
      if (c === 0x4e || c === 0x49 || (c === 0x2d && text.charCodeAt(j) === 0x49)) {
        const word = ["NaN", "Infinity", "-Infinity"].find((w) => text.startsWith(w, i));
        if (word === undefined) continue; // not JSON: JSON.parse says so
        j = i + word.length;
      } else {
        while (j < n && /[0-9eE+\-.]/.test(text[j]!)) j++;
      }
      const literal = text.slice(i, j);
      const safe = /^-?(?:0|[1-9][0-9]{0,15})$/.test(literal) && Number.isSafeInteger(Number(literal));
      if (!safe) {
        if (!/^(?:-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|NaN|-?Infinity)$/.test(literal)) {
          continue; // not a JSON number: JSON.parse refuses the text
        }
        out.push(text.slice(last, i), `"\\u0001${literal}"`);
        last = j;
      }
      i = j - 1;
    }
  }
  out.push(text.slice(last));
  return out.join("");
}

function rebuild(v: unknown): JsonValue {
  if (typeof v === "string") {
    if (v.startsWith(NUMBER_MARK)) return new JsonNumber(v.slice(1));
    return v.startsWith(STRING_MARK) ? v.slice(1) : v;
  }
  if (v === null || typeof v === "boolean" || typeof v === "number") {
    return v === 0 ? 0 : (v as number | boolean | null); // -0 is the integer 0
  }
  if (Array.isArray(v)) return v.map(rebuild);
  const m: JsonObject = new Map();
  for (const [k, x] of Object.entries(v as object)) m.set(k.slice(1), rebuild(x));
  return m;
}

/**
 * Python's `json.loads(text)`: NaN and Infinity accepted, key order and number literals
 * kept; `undefined` when the text is not JSON or nests deeper than `maxDepth`.
 */
export function parseJson(text: string, maxDepth = MAX_JSON_DEPTH): JsonValue | undefined {
  const marked = mark(text, maxDepth);
  if (marked === undefined) return undefined;
  let raw: unknown;
  try {
    raw = JSON.parse(marked);
  } catch {
    return undefined;
  }
  return rebuild(raw);
}

/** Whether `v` is an object. */
export function isObject(v: JsonValue | undefined): v is JsonObject {
  return v instanceof Map;
}

/** `v` when it is a string, else `undefined`. */
export function asString(v: JsonValue | undefined): string | undefined {
  return typeof v === "string" ? v : undefined;
}

/**
 * The integer `v` is, when it was written as an integer literal that fits in a double
 * exactly (safe integers), else `undefined`.
 */
export function asInt(v: JsonValue | undefined): number | undefined {
  return typeof v === "number" ? v : undefined;
}

/** The integer `v` was written as, as a bigint (any size), else `undefined`. */
export function asBigInt(v: JsonValue | undefined): bigint | undefined {
  if (typeof v === "number") return BigInt(v);
  if (v instanceof JsonNumber && v.integer) return BigInt(v.literal);
  return undefined;
}

/** The value of a number (int or float) as a double, else `undefined`. */
export function asNumber(v: JsonValue | undefined): number | undefined {
  if (typeof v === "number") return v;
  if (v instanceof JsonNumber) return v.value;
  return undefined;
}

/** `v` without `key` (a shallow copy; `v` must be an object). */
export function without(v: JsonObject, key: string): JsonObject {
  const m: JsonObject = new Map(v);
  m.delete(key);
  return m;
}

// ------------------------------------------------------------------ Python json.dumps

/** A float as Python's `repr` writes it. */
export function pyFloatRepr(f: number): string {
  if (Number.isNaN(f)) return "NaN";
  if (f === Infinity) return "Infinity";
  if (f === -Infinity) return "-Infinity";
  if (f === 0) return Object.is(f, -0) ? "-0.0" : "0.0";
  // the shortest digits that read back as f: JavaScript and Python choose the same ones
  const e = f.toExponential(); // [-]d.ddde±X
  const neg = e.startsWith("-");
  const [mant, expText] = (neg ? e.slice(1) : e).split("e") as [string, string];
  const exp = Number(expText);
  const digits = mant.replace(".", "");
  let out: string;
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      out = digits.length <= exp + 1
        ? digits + "0".repeat(exp + 1 - digits.length) + ".0"
        : digits.slice(0, exp + 1) + "." + digits.slice(exp + 1);
    } else {
      out = "0." + "0".repeat(-exp - 1) + digits;
    }
  } else {
    const m = digits.length > 1 ? digits[0] + "." + digits.slice(1) : digits;
    const a = Math.abs(exp);
    out = `${m}e${exp < 0 ? "-" : "+"}${a < 10 ? "0" : ""}${a}`;
  }
  return neg ? "-" + out : out;
}

function pyString(s: string): string {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0x22) out += '\\"';
    else if (c === 0x5c) out += "\\\\";
    else if (c === 0x0a) out += "\\n";
    else if (c === 0x0d) out += "\\r";
    else if (c === 0x09) out += "\\t";
    else if (c === 0x08) out += "\\b";
    else if (c === 0x0c) out += "\\f";
    else if (c >= 0x20 && c <= 0x7e) out += s[i];
    else out += "\\u" + c.toString(16).padStart(4, "0");
  }
  return out + '"';
}

/** `v` serialised as Python's `json.dumps(v)` with default arguments. */
export function pyDumps(v: JsonValue): string {
  if (v === null) return "null";
  if (v === true) return "true";
  if (v === false) return "false";
  if (typeof v === "number") return String(v);
  if (v instanceof JsonNumber) {
    return v.integer ? (v.literal === "-0" ? "0" : BigInt(v.literal).toString()) : pyFloatRepr(v.value);
  }
  if (typeof v === "string") return pyString(v);
  if (Array.isArray(v)) return "[" + v.map(pyDumps).join(", ") + "]";
  const parts: string[] = [];
  for (const [k, x] of v) parts.push(pyString(k) + ": " + pyDumps(x));
  return "{" + parts.join(", ") + "}";
}

// ------------------------------------------------------------------ canonical JSON

/** Deepest nesting canonical JSON accepts (the root is depth 0). */
export const MAX_CANONICAL_DEPTH = 16;

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/**
 * `v` as RFC 8785 canonical JSON, for the subset the extended format uses: objects with
 * ASCII keys, arrays, strings (no lone surrogates), booleans, null and integers of magnitude
 * at most 2^53 - 1, nested at most 16 deep. `undefined` when the value is outside the subset.
 */
export function canonicalJson(v: JsonValue): string | undefined {
  let ok = true;
  const walk = (x: JsonValue, depth: number): string => {
    if (!ok) return "";
    if (depth > MAX_CANONICAL_DEPTH || x instanceof JsonNumber) {
      ok = false;
      return "";
    }
    if (x === null) return "null";
    if (typeof x === "boolean") return x ? "true" : "false";
    if (typeof x === "number") return String(x);
    if (typeof x === "string") {
      if (LONE_SURROGATE.test(x)) ok = false;
      return JSON.stringify(x);
    }
    if (Array.isArray(x)) return "[" + x.map((y) => walk(y, depth + 1)).join(",") + "]";
    const keys = [...x.keys()];
    for (const k of keys) if (!/^[\x00-\x7f]*$/.test(k)) ok = false;
    keys.sort(); // UTF-16 code unit order, as RFC 8785 sorts
    return "{" + keys.map((k) => JSON.stringify(k) + ":" + walk(x.get(k)!, depth + 1)).join(",") + "}";
  };
  const text = walk(v, 0);
  return ok ? text : undefined;
}

/** Plain JavaScript data (objects, arrays, strings, numbers) as a {@link JsonValue}. */
export function fromPlain(v: unknown): JsonValue {
  if (v === null || typeof v === "boolean" || typeof v === "string") return v;
  if (typeof v === "number") return Number.isSafeInteger(v) ? v : new JsonNumber(String(v));
  if (Array.isArray(v)) return v.map(fromPlain);
  if (v instanceof Map) return v as JsonObject;
  const m: JsonObject = new Map();
  for (const [k, x] of Object.entries(v as object)) m.set(k, fromPlain(x));
  return m;
}

/** A {@link JsonValue} as plain JavaScript data (for output). */
export function toPlain(v: JsonValue): unknown {
  if (v instanceof JsonNumber) return v.value;
  if (Array.isArray(v)) return v.map(toPlain);
  if (v instanceof Map) {
    const o: Record<string, unknown> = {};
    for (const [k, x] of v) o[k] = toPlain(x);
    return o;
  }
  return v;
}
