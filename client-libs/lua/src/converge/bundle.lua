--- One logical notary (an organisation), parsed from a .notary file (v1, or the v0 form):
-- name, version, hosts ({host, ssl_port, http_port, certificate (PEM), der, pin}),
-- bundle_location, region, protocols, signing_keys ({key_id, public_key, current,
-- valid_until}), transparency (the notary's log, its witnesses and how many cosignatures a
-- client requires: converge.transparency.parse_log_policy; malformed, a bundle error).
-- @module converge.bundle
local errors = require "converge.errors"
local json = require "converge.json"
local crypto = require "converge.crypto"
local fingerprint = require "converge.fingerprint"

local M = {}
M.EXTENDED_FORMAT = "converge-answer/1"
M.LEGACY_FORMAT = "convergence-v1"
M.MAX_BYTES = 65536
M.MAX_HOSTS = 16
M.MAX_SIGNING_KEYS = 8

local function bad(d) errors.throw("bundle", d) end

--- Whether `host` can name a notary or target: [A-Za-z0-9._:-]{1,253}.
function M.valid_host(host)
  return type(host) == "string" and #host >= 1 and #host <= 253 and host:match("^[A-Za-z0-9._:%-]+$") ~= nil
end

local Bundle = {}
Bundle.__index = Bundle
M.Bundle = Bundle

--- Whether the bundle advertises converge-answer/1 and carries its signing keys.
function Bundle:offers_extended()
  for _, p in ipairs(self.protocols) do
    if p == M.EXTENDED_FORMAT then return #self.signing_keys > 0 end
  end
  return false
end

local function port(obj, key)
  local n = json.int(obj[key])
  if not n or n < 1 or n > 65535 then bad(key .. " must be an integer port 1..65535") end
  return n
end

local function parse_host(v)
  if not json.is_object(v) then bad("a host entry must be an object") end
  local host = v.host
  if not M.valid_host(host) then bad("host must be a DNS name or an IP address") end
  local pem = v.certificate
  local dashes = "%-%-%-%-%-"
  local b64 = type(pem) == "string" and pem:match("^[\t\n\f\r ]*" .. dashes .. "BEGIN CERTIFICATE" .. dashes
    .. "\r?\n([A-Za-z0-9+/=\r\n]+)" .. dashes .. "END CERTIFICATE" .. dashes .. "[\t\n\f\r ]*$")
  if not b64 then bad("certificate of " .. host .. " is not one PEM certificate") end
  local der = crypto.strict_base64((b64:gsub("[\r\n]", "")))
  if not der or not crypto.certificate_parses(der) then bad("certificate of " .. host .. " does not parse") end
  return { host = host, ssl_port = port(v, "ssl_port"), http_port = port(v, "http_port"), certificate = pem, der = der,
    pin = fingerprint.of(der) }
end

--- The key id of a raw Ed25519 public key: the first 8 bytes of its SHA-256, lower-case hex.
function M.key_id_of(raw) return crypto.hex(crypto.sha256(raw):sub(1, 8)) end

local KEY_FIELDS = { alg = true, key_id = true, public_key = true, status = true, valid_until = true }

local function parse_signing_key(k)
  if not json.is_object(k) then bad("a signing key entry must be an object") end
  for name in pairs(k) do
    if not KEY_FIELDS[name] and name ~= json.EMPTY then bad("unknown signing key field " .. string.format("%q", name)) end
  end
  if k.alg ~= "ed25519" then bad("signing key alg must be ed25519") end
  local raw = crypto.unb64url(k.public_key)
  if not raw then bad("signing key public_key must be unpadded base64url") end
  if #raw ~= 32 then bad("an Ed25519 public key has 32 bytes") end
  local weak = crypto.ed25519_weak_key(raw)
  if weak then bad("signing key: " .. weak) end
  local kid = k.key_id
  if kid ~= M.key_id_of(raw) then bad("signing key id does not match its public key") end
  local status, untilv = k.status, k.valid_until
  if status == "current" then
    if untilv ~= nil and untilv ~= json.null then bad("a current signing key has no valid_until") end
    return { key_id = kid, public_key = raw, current = true, valid_until = 0 }
  elseif status == "retired" then
    local u = json.int(untilv)
    if not u or u <= 0 or u > json.MAX_SAFE_INTEGER then bad("a retired signing key needs valid_until (unix seconds)") end
    return { key_id = kid, public_key = raw, current = false, valid_until = u }
  end
  bad("signing key status must be current or retired")
end

--- Parses a list of signing key entries (a bundle's signing_keys).
function M.parse_signing_keys(v)
  if not json.is_array(v) or #v == 0 then bad("signing_keys must be a non-empty list") end
  if #v > M.MAX_SIGNING_KEYS then bad("more than " .. M.MAX_SIGNING_KEYS .. " signing keys") end
  local out, seen, current = {}, {}, 0
  for _, x in ipairs(v) do
    local k = parse_signing_key(x)
    if seen[k.key_id] then bad("signing key ids repeat") end
    seen[k.key_id] = true
    if k.current then current = current + 1 end
    out[#out + 1] = k
  end
  if current ~= 1 then bad("signing_keys must hold exactly one current key") end
  return out
end

--- A signing key is trusted always when current, while now <= valid_until when retired.
function M.key_trusted_at(k, now) return k.current or now <= k.valid_until end

--- Parses and validates a .notary file (bytes); raises a "bundle" error otherwise.
function M.parse(data)
  if #data > M.MAX_BYTES then bad("bundle larger than " .. M.MAX_BYTES .. " bytes") end
  -- the bounds scan too: every number of a bundle is a short integer (ports, version, times)
  local obj = json.scan(data) and json.decode(data)
  if not json.is_object(obj) then bad("bundle is not a JSON object") end
  local version = 0
  if obj.version ~= nil then
    local v = json.number_value(obj.version)
    if not v or (v ~= 0 and v ~= 1) then bad("unsupported bundle version") end
    version = math.tointeger(v)
  end
  if version == 0 then
    local h = parse_host(obj)
    return setmetatable({ name = h.host, version = 0, hosts = { h }, protocols = {}, signing_keys = {} }, Bundle)
  end
  local name = obj.name
  if type(name) ~= "string" or not name:find("%S") or (utf8.len(name) or #name) > 200 then bad("name must be a non-empty string") end
  local hosts = obj.hosts
  if not json.is_array(hosts) or #hosts == 0 then bad("hosts must be a non-empty list") end
  if #hosts > M.MAX_HOSTS then bad("more than " .. M.MAX_HOSTS .. " hosts") end
  local loc = obj.bundle_location
  if loc == json.null then loc = nil end
  if loc ~= nil and not (type(loc) == "string" and loc:sub(1, 8) == "https://" and loc:sub(-7) == ".notary"
      and (utf8.len(loc) or #loc) <= 2048) then
    bad("bundle_location must be an https:// URL ending in .notary")
  end
  local region = obj.region
  if region == json.null then region = nil end
  if region ~= nil and not (type(region) == "string" and region:match("^%a%a$")) then bad("region must be an ISO-3166 alpha-2 code") end
  local parsed = {}
  for i, h in ipairs(hosts) do parsed[i] = parse_host(h) end
  local protocols = {}
  if obj.protocols ~= nil then
    local p = obj.protocols
    if not json.is_array(p) or #p > 16 then bad("protocols must be a list of at most 16 strings") end
    for _, x in ipairs(p) do
      if type(x) ~= "string" or #x < 1 or (utf8.len(x) or #x) > 64 then bad("protocols must be a list of short strings") end
      protocols[#protocols + 1] = x
    end
  end
  local keys = obj.signing_keys ~= nil and M.parse_signing_keys(obj.signing_keys) or {}
  local log = obj.transparency ~= nil and require("converge.transparency").parse_log_policy(obj.transparency) or nil
  local b = setmetatable({ name = name, version = 1, hosts = parsed, bundle_location = loc,
    region = region and region:upper(), protocols = protocols, signing_keys = keys, transparency = log }, Bundle)
  for _, p in ipairs(protocols) do
    if p == M.EXTENDED_FORMAT and #keys == 0 then
      bad("protocols lists " .. M.EXTENDED_FORMAT .. " but the bundle has no signing_keys")
    end
  end
  return b
end

return M
