--- The shared test vectors through this library: run_case computes this implementation's output
-- for one case, in the fields CLIENT-CLI.md names. Vector files are read with cjson (`doc`);
-- JSON nulls there are cjson.null.
-- @module converge.vectors
local cjson = require "cjson"
local lfs = require "lfs"
local errors = require "converge.errors"
local json = require "converge.json"
local crypto = require "converge.crypto"
local fingerprint = require "converge.fingerprint"
local policy = require "converge.policy"
local bundle = require "converge.bundle"
local config = require "converge.config"
local legacy = require "converge.legacy"
local extended = require "converge.extended"
local transparency = require "converge.transparency"

local M = {}
M.SCHEMAS = {}
for _, s in ipairs({ "fingerprints", "requests", "legacy-signatures", "notary-responses", "bundles", "consensus", "cache",
  "extended-answers", "config", "transparency" }) do M.SCHEMAS[#M.SCHEMAS + 1] = "converge-vectors/" .. s .. "/1" end
M.COMPARED = { "result", "error", "kind", "algorithm", "canonical", "request", "signed_bytes",
  "name", "version", "hosts", "verdict", "extended", "enabled" }

local function v(x) if x == cjson.null then return nil end return x end

local function bytes(c, name)
  if type(c[name .. "_hex"]) == "string" then return crypto.unhex(c[name .. "_hex"]) end
  if type(c[name]) ~= "string" then error("case has no " .. name, 0) end
  return c[name]
end

local function certificate(doc, name)
  return crypto.der_of_pem(doc.certificates[name] or "") or error("certificate " .. tostring(name) .. " missing", 0)
end

-- cjson reads every number as a float: ports and counts as integers again
local function integer(x)
  if type(x) == "number" then return math.tointeger(x) or x end
  return v(x)
end

local function rm_rf(p)
  local mode = lfs.symlinkattributes(p, "mode")
  if mode == "directory" then
    for n in lfs.dir(p) do
      if n ~= "." and n ~= ".." then rm_rf(p .. "/" .. n) end
    end
    lfs.rmdir(p)
  elseif mode then
    os.remove(p)
  end
end

local function config_case(c)
  local root = os.tmpname()
  os.remove(root)
  lfs.mkdir(root)
  local function parent(p) config.mkdir_p(p:match("^(.*)/[^/]*$")) end
  local ok, names = pcall(function()
    for rel, text in pairs(v(c.files) or {}) do
      parent(root .. "/" .. rel)
      local f = assert(io.open(root .. "/" .. rel, "wb"))
      f:write(text)
      f:close()
    end
    for rel, target in pairs(v(c.links) or {}) do
      parent(root .. "/" .. rel)
      assert(lfs.link(target, root .. "/" .. rel, true))
    end
    local out = {}
    for _, b in ipairs(config.load(root, {}):notaries()) do out[#out + 1] = b.name end
    table.sort(out)
    return out
  end)
  rm_rf(root)
  if not ok then error(names, 0) end
  return json.array(names)
end

local function extended_case(doc, c)
  local t = c.type
  if t == "bundle" then
    local ok, b = pcall(bundle.parse, bytes(c, "bundle"))
    if not ok then
      if errors.is(b) then return { result = "invalid", kind = b.kind } end
      error(b, 0)
    end
    return { result = "valid", extended = b:offers_extended() }
  elseif t == "answer" then
    local exp = v(c.expect) or {}
    local entries = {}
    for i, n in ipairs(v(c.bundle_keys) or {}) do entries[i] = doc.signing_keys[n] end
    local keys = bundle.parse_signing_keys(entries)
    local now = integer(exp.now) or 0
    local e = { host = v(exp.host) or "", port = integer(exp.port), nonce = v(exp.nonce) or "", now = now,
      max_skew = integer(exp.max_skew) or extended.DEFAULT_MAX_SKEW, bind_ip = exp.ip ~= nil, ip = v(exp.ip) or "" }
    if type(exp.fingerprint) == "string" then e.fingerprint = fingerprint.parse(exp.fingerprint) end
    local ok, r = pcall(extended.verify_answer, bytes(c, "answer"), extended.trusted_keys(keys, now), e)
    if not ok then
      if getmetatable(r) == extended.Rejected then return { result = "rejected", kind = r.reason } end
      error(r, 0)
    end
    return { result = "valid", verdict = r.verdict }
  end
  error("unknown case type " .. tostring(t), 0)
end

local function hashes(list, size)
  local out = {}
  for i, t in ipairs(v(list) or {}) do
    out[i] = crypto.strict_base64(t) or error("not base64", 0)
    if size and #out[i] ~= size then error("a hash of the wrong length", 0) end
  end
  return out
end

-- one case of converge-vectors/transparency/1 (see the file's description)
local function transparency_case(doc, c)
  local t = c.type
  if t == "tree" then
    local leaves = {}
    for i = 1, integer(c.size) do leaves[i] = transparency.leaf_hash(crypto.strict_base64(doc.entries[i])) end
    return { result = "valid", root = crypto.b64(transparency.tree_root(leaves)) }
  elseif t == "checkpoint" then
    local ok, r = pcall(function()
      local ws = {}
      for i, w in ipairs(v(c.witnesses) or {}) do ws[i] = transparency.parse_vkey(w, transparency.COSIGNATURE_TYPE) end
      local p = { log = transparency.parse_vkey(c.log, transparency.ED25519_TYPE), witnesses = ws,
        min_cosignatures = integer(c.min_cosignatures) }
      return transparency.open_checkpoint(v(c.checkpoint), p)
    end)
    if not ok then
      if getmetatable(r) == transparency.LogError then return { result = "invalid", kind = r.kind } end
      error(r, 0)
    end
    return { result = "valid", size = r.size, root = crypto.b64(r.root) }
  elseif t == "answer" then
    local exp = c.expect
    local fp = fingerprint.parse(v(exp.sha256) or v(exp.sha1))
    local member = v(c.transparency)
    local raw = member ~= nil and json.encode(member) or nil
    local target = { host = v(exp.host), port = integer(exp.port), ip = v(exp.ip) }
    local ok, r = pcall(transparency.check_member, raw, transparency.parse_log_policy(c.bundle), target, fp)
    if not ok then
      if getmetatable(r) == transparency.LogError then return { result = "rejected", kind = r.kind } end
      error(r, 0)
    end
    return { result = "valid" }
  elseif t == "inclusion" or t == "consistency" then
    local ok = pcall(function()
      if t == "inclusion" then
        local leaf, root = hashes({ c.leaf }, 32)[1], hashes({ c.root }, 32)[1]
        transparency.verify_inclusion(leaf, integer(c.index), integer(c.size), hashes(c.proof), root)
      else
        local roots = hashes({ c.old_root, c.new_root }, 32)
        transparency.verify_consistency(integer(c.old_size), integer(c.new_size), roots[1], roots[2], hashes(c.proof))
      end
    end)
    return { result = ok and "valid" or "invalid" }
  end
  error("unknown transparency case type " .. tostring(t), 0)
end

--- The output fields of a case type beyond COMPARED (transparency/1: `size` and `root` are
-- inputs of the other types).
function M.compared(c)
  if c.type == "tree" then return { "root" } end
  if c.type == "checkpoint" then return { "size", "root" } end
  return {}
end

local function run(doc, c)
  local schema = doc.schema
  if schema == "converge-vectors/fingerprints/1" then
    local fp = fingerprint.parse(v(c.input))
    return { result = "valid", algorithm = fp.algorithm, canonical = fp:colon_hex() }
  elseif schema == "converge-vectors/requests/1" then
    local fp = fingerprint.parse(v(c.fingerprint))
    return { result = "valid", request = legacy.request_bytes(v(c.host), integer(c.port), fp, v(c.ip)) }
  elseif schema == "converge-vectors/legacy-signatures/1" then
    local s = legacy.verified_bytes(bytes(c, "body"), certificate(doc, c.certificate))
    legacy.entries_of(s)
    return { result = "valid", signed_bytes = s }
  elseif schema == "converge-vectors/notary-responses/1" then
    local wanted = {}
    for i, x in ipairs(v(c.fingerprints) or {}) do wanted[i] = fingerprint.parse(x) end
    local o = legacy.outcome_from_http(bytes(c, "raw"), wanted, certificate(doc, c.certificate))
    return { result = o.vote, kind = o.kind }
  elseif schema == "converge-vectors/bundles/1" then
    local b = bundle.parse(bytes(c, "bundle"))
    local hosts = {}
    for i, h in ipairs(b.hosts) do
      hosts[i] = { host = h.host, ssl_port = h.ssl_port, http_port = h.http_port, pin = h.pin:colon_hex() }
    end
    return { result = "valid", name = b.name, version = b.version, hosts = hosts }
  elseif schema == "converge-vectors/consensus/1" then
    local p = policy.parse(v(c.policy))
    local aside = c.stand_aside == true
    local pending = integer(c.pending) or 0
    local function word(t) return t and "trusted" or "untrusted" end
    if pending > 0 then
      local r = policy.settled(p, v(c.votes) or {}, pending, aside)
      return { result = r == nil and "unsettled" or word(r) }
    end
    return { result = word(policy.decide(p, v(c.votes) or {}, aside)) }
  elseif schema == "converge-vectors/cache/1" then
    return { result = policy.cache_decision(integer(c.timestamp), integer(c.now), integer(c.lifetime)) }
  elseif schema == "converge-vectors/extended-answers/1" then
    return extended_case(doc, c)
  elseif schema == "converge-vectors/transparency/1" then
    return transparency_case(doc, c)
  elseif schema == "converge-vectors/config/1" then
    return { result = "valid", enabled = config_case(c) }
  end
  error("unknown vector schema " .. tostring(schema), 0)
end

--- This implementation's output for one case ({id, result, ...} for the fields of the schema).
function M.run_case(doc, c)
  local ok, out = pcall(run, doc, c)
  if not ok then
    if errors.is(out) then out = { result = "invalid", error = out.kind } else error(out, 0) end
  end
  out.id = c.id
  return out
end

return M
