/**
 * The background page's bounded state, without any browser API (tested under Node): a
 * least-recently-used map, and the budget that orders notary queries (top-level pages first,
 * a rate for everything else, a per-tab limit with a queue, pauses a notary asks for).
 */

/** A Map that keeps at most `max()` entries, dropping the least recently used. */
export class Lru<K, V> {
  private readonly map = new Map<K, V>();
  constructor(private readonly max: () => number) {}

  get size(): number {
    return this.map.size;
  }

  get(key: K): V | undefined {
    const v = this.map.get(key);
    if (v !== undefined) {
      this.map.delete(key);
      this.map.set(key, v);
    }
    return v;
  }

  has(key: K): boolean {
    return this.map.has(key);
  }

  set(key: K, value: V): void {
    this.map.delete(key);
    this.map.set(key, value);
    this.trim();
  }

  delete(key: K): void {
    this.map.delete(key);
  }

  clear(): void {
    this.map.clear();
  }

  /** Oldest first (the order they are stored and loaded in). */
  entries(): [K, V][] {
    return [...this.map.entries()];
  }

  trim(): void {
    const max = Math.max(1, Math.trunc(this.max()));
    while (this.map.size > max) this.map.delete(this.map.keys().next().value as K);
  }
}

/** The budget's limits (the settings' queryRate, queryBurst, tabConcurrency). */
export interface BudgetLimits {
  queryRate: number;
  queryBurst: number;
  tabConcurrency: number;
}

interface Waiter {
  start: () => void;
  cancel: () => void;
  since: number;
}

/** A queued question dropped because its tab was closed. */
export class TabClosed extends Error {}

/** The longest a top-level page waits out a notary's pause before asking anyway (ms). */
export const MAIN_PAUSE_MAX_MS = 5000;

/**
 * Orders notary queries. A top-level page's query goes at once (during a pause a notary
 * asked for, after at most {@link MAIN_PAUSE_MAX_MS}), and no other starts while it runs;
 * everything else takes a token
 * (`queryRate` per second, up to `queryBurst` saved), at most `tabConcurrency` per tab at
 * once, tabs served in turn, and waits out pauses. So a page with hundreds of hostnames queues
 * behind itself and spends the notaries' rate limits slowly, and another tab's page still
 * gets its answer.
 */
export class Budget {
  private tokens: number;
  private last: number;
  private pausedUntil = 0;
  private readonly main: Waiter[] = [];
  private readonly queues = new Map<number, Waiter[]>();
  private readonly running = new Map<number, number>();
  private mainRunning = 0;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private timerAt = Infinity;

  constructor(private readonly limits: () => BudgetLimits, private readonly clock: () => number = () => Date.now()) {
    this.tokens = limits().queryBurst;
    this.last = clock();
  }

  /** Waits for a turn; returns the function that ends it (call it exactly once). */
  acquire(tabId: number, topLevel: boolean): Promise<() => void> {
    return new Promise((resolve, reject) => {
      const w: Waiter = { since: this.clock(), start: () => undefined, cancel: () => reject(new TabClosed("tab closed")) };
      if (topLevel) {
        w.start = () => {
          this.mainRunning++;
          let ended = false;
          resolve(() => {
            if (ended) return;
            ended = true;
            this.mainRunning--;
            this.pump();
          });
        };
        this.main.push(w);
      } else {
        w.start = () => {
          this.running.set(tabId, (this.running.get(tabId) ?? 0) + 1);
          let ended = false;
          resolve(() => {
            if (ended) return;
            ended = true;
            const n = (this.running.get(tabId) ?? 1) - 1;
            if (n <= 0) this.running.delete(tabId);
            else this.running.set(tabId, n);
            this.pump();
          });
        };
        const q = this.queues.get(tabId) ?? [];
        q.push(w);
        this.queues.set(tabId, q);
      }
      this.pump();
    });
  }

  /** Drops the questions a closed tab still had waiting (they reject with {@link TabClosed}). */
  dropTab(tabId: number): void {
    const q = this.queues.get(tabId);
    this.queues.delete(tabId);
    for (const w of q ?? []) w.cancel();
  }

  /** A notary asked for no query for `seconds`. */
  pause(seconds: number): void {
    this.pausedUntil = Math.max(this.pausedUntil, this.clock() + seconds * 1000);
    this.pump();
  }

  /** Subresource queries running or waiting (all tabs). */
  subresourceLoad(): number {
    let n = 0;
    for (const r of this.running.values()) n += r;
    for (const q of this.queues.values()) n += q.length;
    return n;
  }

  /** Queries waiting (all tabs). */
  waiting(): number {
    let n = this.main.length;
    for (const q of this.queues.values()) n += q.length;
    return n;
  }

  private wake(at: number): void {
    if (at >= this.timerAt) return;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timerAt = at;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.timerAt = Infinity;
      this.pump();
    }, Math.max(1, at - this.clock()));
  }

  private pump(): void {
    const now = this.clock();
    const { queryRate, queryBurst, tabConcurrency } = this.limits();
    const paused = now < this.pausedUntil;
    // top-level pages first
    for (let i = 0; i < this.main.length;) {
      const w = this.main[i]!;
      if (!paused || now - w.since >= MAIN_PAUSE_MAX_MS) {
        this.main.splice(i, 1);
        w.start();
      } else {
        this.wake(Math.min(this.pausedUntil, w.since + MAIN_PAUSE_MAX_MS));
        i++;
      }
    }
    if (paused) {
      if (this.queues.size) this.wake(this.pausedUntil);
      return;
    }
    // while a top-level page's question runs, nothing else starts (its release pumps again)
    if (this.mainRunning > 0) return;
    const limited = queryRate > 0;
    if (limited) {
      this.tokens = Math.min(Math.max(1, queryBurst), this.tokens + ((now - this.last) / 1000) * queryRate);
    }
    this.last = now;
    const per = Math.max(1, tabConcurrency);
    // tabs in turn, one query each per round
    for (let progress = true; progress;) {
      progress = false;
      for (const [tab, q] of [...this.queues]) {
        if ((this.running.get(tab) ?? 0) >= per) continue;
        if (limited && this.tokens < 1) break;
        const w = q.shift()!;
        if (q.length === 0) this.queues.delete(tab);
        if (limited) this.tokens -= 1;
        w.start();
        progress = true;
      }
    }
    if (limited && this.tokens < 1 && this.queues.size) this.wake(now + ((1 - this.tokens) / queryRate) * 1000);
  }
}
