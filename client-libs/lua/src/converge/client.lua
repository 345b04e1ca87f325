--- A configuration and its open cache connections; keep one per configuration.
--
--     local client = require("converge.client").load("/etc/converge")   -- nil: discovered
--     local v = client:check("www.example.org", 443, fingerprint)
--     print(v.trusted, v.reason)
--     for _, r in ipairs(v.results) do print(r.name, r.vote, r.kind) end
--
-- A verdict: trusted, host, port, fingerprint, policy, stand_aside, from_cache, results (one per
-- notary asked, in file order: name, vote, kind, status, host, detail, elapsed, protocol),
-- reason, elapsed, relay.
-- @module converge.client
local socket = require "socket"
local errors = require "converge.errors"
local crypto = require "converge.crypto"
local fingerprint = require "converge.fingerprint"
local policy = require "converge.policy"
local bundle = require "converge.bundle"
local config = require "converge.config"
local legacy = require "converge.legacy"
local cache = require "converge.cache"
local notary_io = require "converge.notary_io"

local M = {}
local shared = {}

local Client = {}
Client.__index = Client
M.Client = Client

--- A client for a configuration (`opts`: clock (a function returning unix seconds), random
-- (a function n -> [0, n))).
function M.new(cfg, opts)
  opts = opts or {}
  return setmetatable({ config = cfg, clock = opts.clock or socket.gettime, random = opts.random or crypto.random_below }, Client)
end

--- Loads a configuration directory (discovered when `dir` is nil).
function M.load(dir, opts) return M.new(config.load(dir), opts) end

--- The client converge() uses for a configuration directory (nil: discovered), loaded once.
function M.shared(dir)
  local key = dir and ("dir:" .. dir) or ("env:" .. (os.getenv(config.ENV_VAR) or ""))
  shared[key] = shared[key] or M.load(dir)
  return shared[key]
end

function Client:caches()
  if self._caches then return self._caches end
  local cfg, list, writer = self.config, {}, nil
  if cfg.userdb then writer = cache.open(cfg.userdb); list[#list + 1] = writer end
  if cfg.db then
    if not writer then
      writer = cache.open(cfg.db)
      list[#list + 1] = writer
    else
      local ok, ro = pcall(cache.open, cfg.db, true) -- an unreadable shared cache only costs queries
      if ok then list[#list + 1] = ro end
    end
  end
  self._writer = writer
  self._caches = list
  return list
end

--- Closes the cache connections (reopened when used again).
function Client:close()
  for _, c in ipairs(self._caches or {}) do c:close() end
  self._caches, self._writer = nil, nil
end

local function forms(fp_text, der)
  local fp = fingerprint.parse(fp_text)
  local out = { fp }
  if der then
    for _, alg in ipairs({ "sha1", "sha256" }) do
      local alt = fingerprint.of(der, alg)
      if alt.algorithm == fp.algorithm and not alt:equals(fp) then
        errors.throw("fingerprint", "the certificate does not match the fingerprint")
      end
      local dup = false
      for _, f in ipairs(out) do dup = dup or f:equals(alt) end
      if not dup then out[#out + 1] = alt end
    end
  end
  return out
end

function Client:cached(loc, fps)
  local now = self.clock()
  for _, c in ipairs(self:caches()) do
    for _, fp in ipairs(fps) do
      if policy.cache_decision(c:lookup(loc, fp:colon_hex()), now, self.config.cache_lifetime) == "hit" then return true end
    end
  end
  return false
end

--- The local cache's answer for a DER certificate, without asking any notary.
function Client:cached_certificate(host, port, der)
  legacy.check_target(host, port)
  return self:cached(legacy.location(host, port), forms(fingerprint.of(der):colon_hex(), der))
end

--- A verdict on (host, port, fingerprint). A local cache hit costs one indexed SQLite lookup.
-- Raises a converge error for bad input or cache IO; notary failures are votes. `opts`:
-- certificate (the DER: matched by SHA-1 and SHA-256), ip (ask the notaries to connect to
-- this address).
function Client:check(host, port, fp_text, opts)
  opts = opts or {}
  local t0 = socket.gettime()
  legacy.check_target(host, port)
  local ip = (opts.ip ~= nil and opts.ip ~= "") and opts.ip or nil
  if ip then legacy.check_ip(ip) end
  local fps = forms(fp_text, opts.certificate)
  local cfg = self.config
  if self:cached(legacy.location(host, port), fps) then
    return { trusted = true, host = host, port = port, fingerprint = fps[1]:colon_hex(), policy = cfg.agreement,
      stand_aside = cfg.stand_aside, from_cache = true, results = {}, reason = "local cache hit", elapsed = socket.gettime() - t0 }
  end
  return self:ask(host, port, fps, t0, ip)
end

--- check() with the DER certificate: matched by SHA-1 and SHA-256 both.
function Client:check_certificate(host, port, der, opts)
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  o.certificate = der
  return self:check(host, port, fingerprint.of(der):colon_hex(), o)
end

function Client:ask(host, port, fps, t0, ip)
  local cfg = self.config
  local notaries = cfg:notaries()
  if #notaries == 0 then errors.throw("config", "no notaries enabled (looked in " .. config.where_read(cfg.notaries_dir) .. ")") end
  if cfg.extended == "require" then
    local keep = {}
    for _, b in ipairs(notaries) do if b:offers_extended() then keep[#keep + 1] = b end end
    notaries = keep
    if #notaries == 0 then
      errors.throw("config", "extended is require but no enabled notary's bundle offers " .. bundle.EXTENDED_FORMAT)
    end
  end
  local relay
  if cfg.bounce then
    if #notaries < 2 then errors.throw("config", "bounce needs two enabled notaries: one relays, one votes") end
    relay = table.remove(notaries, self.random(#notaries) + 1)
  end
  local idx = {}
  for i = 1, #notaries do idx[i] = i end
  local k = math.min(cfg.quorum, #notaries)
  for i = 1, k do
    local j = i + self.random(#idx - i + 1)
    idx[i], idx[j] = idx[j], idx[i]
  end
  local picked = { table.unpack(idx, 1, k) }
  table.sort(picked)
  local chosen = {}
  for i, n in ipairs(picked) do chosen[i] = notaries[n] end
  local total_deadline = t0 + cfg.total_timeout
  local jobs = {}
  for _, b in ipairs(chosen) do
    local ext
    if cfg.extended ~= "off" and b:offers_extended() then
      ext = { keys = b.signing_keys, nonce = cfg.extended_nonce, max_skew = cfg.max_skew, now = self.clock,
        log = b.transparency }
    end
    local deadline = math.min(total_deadline, socket.gettime() + cfg.notary_timeout)
    local o = { connect_timeout = cfg.connect_timeout, max_bytes = cfg.max_response_bytes, relay = relay,
      relay_dests = b.hosts, bounce_port = cfg.bounce_port, ip = ip }
    local hosts = relay and { b.hosts[1] } or b.hosts
    local queries = {}
    for i, h in ipairs(hosts) do queries[i] = notary_io.query(h, host, port, fps, o, ext, deadline) end
    -- never legacy for a notary whose bundle names a log: the legacy answer carries no proof
    local fallback = cfg.extended == "fallback" and b.transparency == nil
    jobs[#jobs + 1] = { bundle = b, queries = queries, deadline = deadline, fallback = fallback }
  end
  local settle = function() return nil end
  if cfg.early_return then
    settle = function(results, pending)
      local votes = {}
      for _, r in ipairs(results) do if r then votes[#votes + 1] = r.vote end end
      return policy.settled(cfg.agreement, votes, pending, cfg.stand_aside)
    end
  end
  local run = notary_io.run(jobs, total_deadline, settle)
  local ordered, votes = {}, {}
  for i, b in ipairs(chosen) do
    local r = run.results[i]
    if not r then
      if run.timed_out then
        r = notary_io.result({ name = b.name, vote = "unreachable", kind = "timeout",
          detail = "no answer within " .. cfg.total_timeout .. " s", elapsed = socket.gettime() - t0 })
      else
        r = notary_io.result({ name = b.name, vote = "skipped", kind = "settled",
          detail = "verdict settled before this notary answered", elapsed = 0 })
      end
    end
    ordered[i] = r
    if r.vote ~= "skipped" then votes[#votes + 1] = r.vote end
  end
  local verdict
  if run.early ~= nil and not run.timed_out then verdict = run.early else verdict = policy.decide(cfg.agreement, votes, cfg.stand_aside) end
  if verdict and #self:caches() > 0 and self._writer then
    for _, fp in ipairs(fps) do self._writer:store(legacy.location(host, port), fp:colon_hex(), math.floor(self.clock())) end
  end
  local s = 0
  for _, v in ipairs(votes) do if v == "success" then s = s + 1 end end
  local aside = cfg.stand_aside and "unreachable stand aside" or "unreachable count as failure"
  return { trusted = verdict, host = host, port = port, fingerprint = fps[1]:colon_hex(), policy = cfg.agreement,
    stand_aside = cfg.stand_aside, from_cache = false, results = ordered,
    reason = s .. " of " .. k .. " notaries confirm (" .. cfg.agreement .. ", " .. aside .. ")",
    elapsed = socket.gettime() - t0, relay = relay and relay.name or nil }
end

return M
