/**
 * The local cache, in the schema of the 2011 add-on so that one file serves every client:
 *
 *     fingerprints(id integer primary key, location TEXT, fingerprint TEXT, timestamp INTEGER)
 *     unique index location_fingerprint on (location, fingerprint)
 *
 * `location` is `host:port`, `fingerprint` the canonical colon hex, `timestamp` the unix
 * seconds of the last trusted verdict. WAL journal and a busy timeout let several processes
 * share it. Synchronous (better-sqlite3): a hit is one indexed lookup, no event-loop turn.
 *
 * @module
 */
import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import Database from "better-sqlite3";
import { CacheIOError } from "../core/errors.js";

const SCHEMA = [
  "CREATE TABLE IF NOT EXISTS fingerprints (id integer primary key, location TEXT, fingerprint TEXT, timestamp INTEGER)",
  "CREATE UNIQUE INDEX IF NOT EXISTS location_fingerprint on fingerprints (location, fingerprint)",
];
const BUSY_TIMEOUT_MS = 5000;

/** One open connection to a cache file. */
export class LocalCache {
  readonly path: string;
  readonly readOnly: boolean;
  private db: Database.Database;
  private lookupStmt: Database.Statement<[string, string], { timestamp: unknown; type: string }>;
  private storeStmt: Database.Statement<[string, string, number]> | undefined;

  /** Opens (and, unless `readOnly`, creates) a cache file. */
  constructor(path: string, readOnly = false) {
    this.path = path;
    this.readOnly = readOnly;
    try {
      if (!readOnly) mkdirSync(dirname(path), { recursive: true });
      this.db = new Database(path, { readonly: readOnly, fileMustExist: readOnly, timeout: BUSY_TIMEOUT_MS });
      if (!readOnly) {
        this.db.pragma("journal_mode = WAL");
        this.db.pragma("synchronous = NORMAL");
        for (const stmt of SCHEMA) this.db.exec(stmt);
      }
      this.lookupStmt = this.db.prepare("SELECT timestamp, typeof(timestamp) AS type FROM fingerprints WHERE location = ? AND fingerprint = ?");
      this.storeStmt = readOnly ? undefined : this.db.prepare(
        "INSERT INTO fingerprints (location, fingerprint, timestamp) VALUES (?, ?, ?) " +
        "ON CONFLICT (location, fingerprint) DO UPDATE SET timestamp = excluded.timestamp");
    } catch (err) {
      throw new CacheIOError(`cannot open cache ${path}: ${(err as Error).message}`, err);
    }
  }

  /** The entry's timestamp, or null when there is none (a miss is not an error). */
  lookup(location: string, fingerprint: string): number | null {
    let row: { timestamp: unknown; type: string } | undefined;
    try {
      row = this.lookupStmt.get(location, fingerprint);
    } catch (err) {
      throw new CacheIOError(`cache lookup failed: ${(err as Error).message}`, err);
    }
    if (row === undefined || row.type !== "integer") return null; // a REAL or TEXT: unusable
    const ts = row.timestamp;
    if (typeof ts === "number" && Number.isInteger(ts)) return ts;
    if (typeof ts === "bigint") return Number(ts);
    return null; // not an integer: unusable, as in the Python client
  }

  /** Records a trusted fingerprint at `timestamp` (unix seconds). */
  store(location: string, fingerprint: string, timestamp: number): void {
    if (this.storeStmt === undefined) throw new CacheIOError("cache opened read-only");
    try {
      this.storeStmt.run(location, fingerprint, Math.trunc(timestamp));
    } catch (err) {
      throw new CacheIOError(`cache write failed: ${(err as Error).message}`, err);
    }
  }

  /** Closes the connection. */
  close(): void {
    try {
      this.db.close();
    } catch {
      // already closed
    }
  }
}
