/** Messages between the extension's pages and its background page, and what they store. */
import type { SiteVerdict } from "./engine.js";

/** A bundle as stored: its text (parsed again at start-up) and whether it is enabled. */
export interface StoredBundle {
  name: string;
  text: string;
  enabled: boolean;
  /** Offers converge-answer/1 (only such notaries can be checked from a browser). */
  extended: boolean;
  source: string;
}

/** What the popup shows for a tab: its page's verdict and those of the other sites it used. */
export interface TabState {
  /** The URL the tab's page was loaded from (also when the block page replaced it). */
  url: string;
  main: SiteVerdict | undefined;
  others: SiteVerdict[];
}

/** What the popup asks about a tab, and the extension's state around it. */
export interface TabReport {
  /** At least one notary is enabled (else nothing is checked). */
  configured: boolean;
  /** Firefox lets the extension run in private windows. */
  privateWindows: boolean;
  tab: TabState | null;
}

/** A blocked top-level page, as the block page shows it. */
export type Blocked = SiteVerdict & { url: string };

export type BackgroundMessage =
  | { type: "block-info"; id: string }
  | { type: "trust"; id: string; mode: "once" | "always"; confirmed: boolean }
  | { type: "tab-state"; tabId?: number; url?: string }
  | { type: "forget-cache" }
  | { type: "stats" };
