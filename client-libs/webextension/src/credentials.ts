/**
 * Secrets go only to sites confirmed in this session, enforced by Firefox itself with
 * declarativeNetRequest session rules (applied in the browser's network code: no message to
 * the extension per request, unlike a blocking webRequest listener):
 *
 * - priority 1, every https:// and wss:// request: the `Cookie` and `Authorization` headers
 *   removed, and a request with a body (any method but GET, HEAD and OPTIONS) blocked;
 * - priority 2, one `allow` rule per confirmed host:port and scheme, and the names the user
 *   left unchecked: a higher-priority allow rule sets the priority-1 rules aside.
 *
 * The extension's own requests (notary questions, the credential-less HEAD) are left alone.
 */
import type { Settings } from "./engine.js";

/** The parts of declarativeNetRequest's Rule used here (the Node tests have no `browser`). */
export interface Rule {
  id: number;
  priority: number;
  action: {
    type: "modifyHeaders" | "block" | "allow";
    requestHeaders?: { header: string; operation: "remove" }[];
  };
  condition: {
    urlFilter?: string;
    regexFilter?: string;
    resourceTypes: ResourceType[];
    initiatorDomains?: string[];
    excludedRequestMethods?: string[];
  };
}
type ResourceType =
  | "main_frame" | "sub_frame" | "stylesheet" | "script" | "image" | "object" | "object_subrequest" | "xmlhttprequest"
  | "xslt" | "ping" | "beacon" | "xml_dtd" | "font" | "media" | "websocket" | "csp_report" | "imageset"
  | "web_manifest" | "speculative" | "json" | "other";

export const ALL_TYPES: ResourceType[] = [
  "main_frame", "sub_frame", "stylesheet", "script", "image", "object", "object_subrequest", "xmlhttprequest",
  "xslt", "ping", "beacon", "xml_dtd", "font", "media", "websocket", "csp_report", "imageset", "web_manifest",
  "speculative", "json", "other",
];
export const SCHEMES = ["https", "wss"] as const;
/** Session rule ids: 1 the extension's own requests, 10-999 the names not checked, 1000 and up confirmations. */
export const FIRST_EXEMPT_ID = 10;
export const FIRST_CONFIRMED_ID = 1000;
export const MAX_EXEMPT_RULES = 400;

/**
 * The priority-1 rules: strip Cookie and Authorization, block bodies. They are the static
 * ruleset static/rules.json (in force from the extension's start, before the background page
 * has read anything; a Node test checks the file says this), switched off while not configured.
 */
export function defaultRules(): Rule[] {
  const rules: Rule[] = [];
  let id = 1;
  for (const scheme of SCHEMES) {
    const base = { urlFilter: `|${scheme}://`, resourceTypes: ALL_TYPES };
    rules.push({
      id: id++, priority: 1,
      action: {
        type: "modifyHeaders",
        requestHeaders: [{ header: "cookie", operation: "remove" }, { header: "authorization", operation: "remove" }],
      },
      condition: base,
    });
    rules.push({
      id: id++, priority: 1, action: { type: "block" },
      condition: { ...base, excludedRequestMethods: ["get", "head", "options"] },
    });
  }
  return rules;
}

export const RULESET = "secrets";
export const OWN_RULE_ID = 1;

/** The extension's own requests (notary questions, the HEAD) are not the static rules' business. */
export function ownRule(ownHost: string): Rule {
  return {
    id: OWN_RULE_ID, priority: 2, action: { type: "allow" },
    condition: { initiatorDomains: [ownHost], resourceTypes: ALL_TYPES },
  };
}

/** The URL prefix of a host:port in a request URL ("host" alone for 443, "[v6]:port"). */
export function authority(host: string, port: number): string {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  const name = h.includes(":") ? `[${h}]` : h;
  return port === 443 ? name : `${name}:${port}`;
}

/** Two allow rules (https, wss) for a confirmed host:port, ids `id` and `id + 1`. */
export function confirmedRules(id: number, host: string, port: number): Rule[] {
  return SCHEMES.map((scheme, i) => ({
    id: id + i, priority: 2, action: { type: "allow" as const },
    condition: { urlFilter: `|${scheme}://${authority(host, port)}/`, resourceTypes: ALL_TYPES },
  }));
}

function escape(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** Regular expressions matching the URLs of the names the user left unchecked (engine.isExempt). */
export function exemptPatterns(s: Pick<Settings, "exemptNames" | "exemptLocalNames">): string[] {
  const port = "(:[0-9]+)?/";
  const out: string[] = [];
  for (const raw of s.exemptNames) {
    const e = raw.trim().toLowerCase().replace(/\.$/, "");
    if (!e || !/^(\*\.)?[a-z0-9_.-]+$/.test(e)) continue;
    out.push(e.startsWith("*.") ? `^(https|wss)://[^/:@]+${escape(e.slice(1))}${port}` : `^(https|wss)://${escape(e)}${port}`);
  }
  if (s.exemptLocalNames) {
    out.push(`^(https|wss)://[a-z0-9_-]*[a-z_-][a-z0-9_-]*${port}`); // single-label names (not a number)
    out.push(`^(https|wss)://[^/:@\\[]+\\.(local|home\\.arpa)${port}`);
  }
  return out.slice(0, MAX_EXEMPT_RULES);
}

export function exemptRules(s: Pick<Settings, "exemptNames" | "exemptLocalNames">): Rule[] {
  return exemptPatterns(s).map((regexFilter, i) => ({
    id: FIRST_EXEMPT_ID + i, priority: 2, action: { type: "allow" as const },
    condition: { regexFilter, resourceTypes: ALL_TYPES },
  }));
}
