--- The notary's transparency log, client side (pure): the bundle's `transparency` member and
-- the check of an extended answer's proof of inclusion (docs/transparency.md, "Clients";
-- formats c2sp.org/signed-note, tlog-checkpoint, tlog-cosignature; RFC 6962 hashing, RFC 9162
-- verification). SHA-256 through luaossl, Ed25519 through converge.ed25519.
--
-- `check_member` checks, in this order, each failure a `LogError` {kind, message}:
-- 1 the member is present (`log-missing`); 2 the bounds scan and cjson give an object with
-- string `checkpoint` and `entry`, an integer `index` >= 0 and a `proof` array of at most 63
-- strings (`log-proof`); 3 the checkpoint is a signed note whose text is a checkpoint of the
-- log key's origin, signed by the log key (`log-checkpoint`; lines by unknown keys are
-- ignored); 4 at least `min_cosignatures` distinct bundle witnesses cosigned it and no listed
-- witness's line fails (`log-witness`); 5 the entry is base64 of a `converge-observation/1`
-- object about the statement's target and the asked fingerprint (`log-entry`); 6 the proof
-- puts SHA-256(0x00 || entry) at `index` in the checkpoint's tree (`log-proof`).
-- @module converge.transparency
local errors = require "converge.errors"
local json = require "converge.json"
local crypto = require "converge.crypto"

local M = {}
M.LOG_KINDS = { "log-missing", "log-proof", "log-checkpoint", "log-witness", "log-entry" }
M.ENTRY_TYPE = "converge-observation/1"
M.HASH_SIZE = 32
M.MAX_PROOF = 63
M.MAX_NOTE = 65536
M.MAX_SIGNATURE_LINES = 100
M.MAX_WITNESSES = 32
M.ED25519_TYPE = 0x01
M.COSIGNATURE_TYPE = 0x04
local SIG_PREFIX = "\u{2014} "

local LogError = {}
LogError.__index = LogError
LogError.__tostring = function(e) return "transparency (" .. e.kind .. "): " .. e.message end
M.LogError = LogError

local function fail(kind, message) error(setmetatable({ kind = kind, message = message }, LogError), 0) end

-- a malformed input inside one step: a plain string error, mapped to that step's kind
local function invalid(message) error({ invalid = message }, 0) end

-- runs f; a step's own `invalid` becomes `kind`, any other error too (the one parse boundary)
local function step(kind, f, ...)
  local r = table.pack(pcall(f, ...))
  if r[1] then return table.unpack(r, 2, r.n) end
  local e = r[2]
  if getmetatable(e) == LogError then error(e, 0) end
  fail(kind, type(e) == "table" and e.invalid or tostring(e))
end

-- ---------------------------------------------------------------- keys

--- Whether a key or signature line name is acceptable: UTF-8, no '+', no space or control.
function M.valid_name(name)
  if type(name) ~= "string" or name == "" or not utf8.len(name) then return false end
  if name:find("[\0-\32+\127]") or name:find("\194[\128-\160]") then return false end
  for _, cp in utf8.codes(name) do
    if (cp >= 0x2000 and cp <= 0x200A) or cp == 0x2028 or cp == 0x2029 or cp == 0x202F or cp == 0x205F
        or cp == 0x3000 or cp == 0x1680 then return false end
  end
  return true
end

--- The 4-byte key id of a signed-note key: SHA-256(name || "\n" || type || key)[:4].
function M.key_id(name, typ, raw) return crypto.sha256(name .. "\n" .. string.char(typ) .. raw):sub(1, 4) end

--- `<name>+<8 hex>+<base64(type || 32-byte key)>` to {name, key_id, public_key, type, vkey};
-- raises a plain error message otherwise.
function M.parse_vkey(text, typ)
  if type(text) ~= "string" or #text > 1024 then invalid("a verifier key is a short string") end
  local name, hex, b64 = text:match("^([^+]*)%+([^+]*)%+(.*)$")
  if not name or not M.valid_name(name) or not hex:match("^%x%x%x%x%x%x%x%x$") or hex:find("[A-F]") then
    invalid(text .. " is not <name>+<8 hex>+<base64 key>")
  end
  local raw = crypto.strict_base64(b64)
  if not raw or #raw ~= 33 or raw:byte(1) ~= typ then invalid(text .. " is not a type " .. typ .. " Ed25519 key") end
  local key = raw:sub(2)
  local weak = crypto.ed25519_weak_key(key)
  if weak then invalid(text .. ": " .. weak) end
  if M.key_id(name, typ, key) ~= crypto.unhex(hex) then invalid(text .. ": the key id does not match the key") end
  return { name = name, key_id = crypto.unhex(hex), public_key = key, type = typ, vkey = text }
end

local function bad(message) errors.throw("bundle", message) end

local POLICY_FIELDS = { log = true, url = true, witnesses = true, min_cosignatures = true, [json.EMPTY] = true }

--- The bundle's `transparency` member to {log, url, witnesses, min_cosignatures}; raises a
-- "bundle" error on anything malformed.
function M.parse_log_policy(obj)
  if not json.is_object(obj) then bad("transparency must be an object") end
  for k in pairs(obj) do
    if not POLICY_FIELDS[k] then bad("unknown transparency field " .. string.format("%q", tostring(k))) end
  end
  local ok, log = pcall(M.parse_vkey, obj.log, M.ED25519_TYPE)
  if not ok then bad("transparency log key: " .. tostring(type(log) == "table" and log.invalid or log)) end
  local url = obj.url
  if url == json.null then url = nil end
  if url ~= nil and not (type(url) == "string" and url:sub(1, 8) == "https://" and #url <= 2048) then
    bad("transparency url must be an https:// URL")
  end
  local ws = obj.witnesses
  if ws == nil then ws = {} end
  if not json.is_array(ws) or #ws > M.MAX_WITNESSES then
    bad("transparency witnesses must be a list of at most " .. M.MAX_WITNESSES)
  end
  local witnesses, seen = {}, {}
  for _, w in ipairs(ws) do
    local n = 0
    if json.is_object(w) then for _ in pairs(w) do n = n + 1 end end
    if n ~= 2 or w.name == nil or w.vkey == nil then bad("a witness is an object with name and vkey") end
    local okw, k = pcall(M.parse_vkey, w.vkey, M.COSIGNATURE_TYPE)
    if not okw then bad("witness key: " .. tostring(type(k) == "table" and k.invalid or k)) end
    if k.name ~= w.name then bad("witness name is not its key's name") end
    if seen[k.name .. "\0" .. k.key_id] then bad("a witness is listed twice") end
    seen[k.name .. "\0" .. k.key_id] = true
    witnesses[#witnesses + 1] = k
  end
  -- One key under two names: a cosignature does not sign the witness's name, so one key would
  -- count as two witnesses (or the log would cosign its own checkpoints).
  local keys = { [log.public_key] = true }
  for _, k in ipairs(witnesses) do
    if keys[k.public_key] then bad("transparency names one key twice (two witnesses, or a witness and the log)") end
    keys[k.public_key] = true
  end
  local need = obj.min_cosignatures
  if need == nil then need = 0 end
  need = json.int(need)
  if not need or need < 0 or need > #witnesses then
    bad("min_cosignatures must be an integer from 0 to " .. #witnesses)
  end
  return { log = log, url = url, witnesses = witnesses, min_cosignatures = need }
end

-- ---------------------------------------------------------------- hashing

function M.leaf_hash(entry) return crypto.sha256("\0" .. entry) end
local function node_hash(l, r) return crypto.sha256("\1" .. l .. r) end

--- RFC 6962, 2.1: the root of the leaf hashes `leaves` (from index i to j, inclusive).
function M.tree_root(leaves, i, j)
  i, j = i or 1, j or #leaves
  local n = j - i + 1
  if n <= 0 then return crypto.sha256("") end
  if n == 1 then return leaves[i] end
  local k = 1
  while k * 2 < n do k = k * 2 end
  return node_hash(M.tree_root(leaves, i, i + k - 1), M.tree_root(leaves, i + k, j))
end

local function check_hashes(proof)
  for _, p in ipairs(proof) do
    if #p ~= M.HASH_SIZE then invalid("a proof hash is not 32 bytes") end
  end
end

--- RFC 9162, 2.1.3.2: whether `proof` puts `leaf` at `index` of the tree of `size` with `root`;
-- raises a plain error otherwise.
function M.verify_inclusion(leaf, index, size, proof, root)
  if math.type(index) ~= "integer" or math.type(size) ~= "integer" or index < 0 or index >= size then
    invalid("index is not in the tree")
  end
  check_hashes(proof)
  local fn, sn, r = index, size - 1, leaf
  for _, p in ipairs(proof) do
    if sn == 0 then invalid("inclusion proof too long") end
    if fn & 1 == 1 or fn == sn then
      r = node_hash(p, r)
      while fn & 1 == 0 and fn ~= 0 do fn, sn = fn >> 1, sn >> 1 end
    else
      r = node_hash(r, p)
    end
    fn, sn = fn >> 1, sn >> 1
  end
  if sn ~= 0 or r ~= root then invalid("inclusion proof does not lead to the root") end
  return true
end

--- RFC 9162, 2.1.4.2: whether tree `old` (root `old_root`) is a prefix of tree `new`.
function M.verify_consistency(old, new, old_root, new_root, proof)
  if old < 0 or old > new then invalid("old size is not within the new one") end
  check_hashes(proof)
  if old == new or old == 0 then
    if #proof > 0 or (old == new and old_root ~= new_root) then invalid("no proof between these trees") end
    return true
  end
  local path = {}
  if old & (old - 1) == 0 then path[1] = old_root end
  for _, p in ipairs(proof) do path[#path + 1] = p end
  if #path == 0 then invalid("consistency proof is empty") end
  local fn, sn = old - 1, new - 1
  while fn & 1 == 1 do fn, sn = fn >> 1, sn >> 1 end
  local fr, sr = path[1], path[1]
  for i = 2, #path do
    local c = path[i]
    if sn == 0 then invalid("consistency proof too long") end
    if fn & 1 == 1 or fn == sn then
      fr, sr = node_hash(c, fr), node_hash(c, sr)
      while fn & 1 == 0 and fn ~= 0 do fn, sn = fn >> 1, sn >> 1 end
    else
      sr = node_hash(sr, c)
    end
    fn, sn = fn >> 1, sn >> 1
  end
  if sn ~= 0 or fr ~= old_root or sr ~= new_root then invalid("consistency proof does not lead to both roots") end
  return true
end

-- ---------------------------------------------------------------- notes

-- an unsigned 64-bit integer in decimal
local function unsigned(t)
  if t >= 0 then return tostring(t) end
  local q = (t >> 1) // 5
  return string.format("%d%d", q, t - q * 10)
end

local function split_note(note)
  if #note > M.MAX_NOTE then invalid("note larger than " .. M.MAX_NOTE .. " bytes") end
  if not utf8.len(note) then invalid("the note is not UTF-8") end
  if note:find("[\0-\9\11-\31\127]") or note:find("\194[\128-\159]") then invalid("control character in the note") end
  local cut
  local from = 1
  while true do
    local a = note:find("\n\n", from, true)
    if not a then break end
    cut, from = a, a + 1
  end
  if not cut or note:sub(-1) ~= "\n" then invalid("not a signed note") end
  local text = note:sub(1, cut)
  local body = note:sub(cut + 2, -2)
  local sigs = {}
  for line in (body .. "\n"):gmatch("(.-)\n") do
    if #sigs >= M.MAX_SIGNATURE_LINES then invalid("too many signature lines") end
    local name, b64 = nil, nil
    if line:sub(1, #SIG_PREFIX) == SIG_PREFIX then name, b64 = line:sub(#SIG_PREFIX + 1):match("^([^ ]*) (.*)$") end
    if not name or not M.valid_name(name) then invalid("malformed signature line") end
    local raw = crypto.strict_base64(b64)
    if not raw then invalid("signature is not base64") end
    if #raw < 5 then invalid("signature too short") end
    sigs[#sigs + 1] = { name = name, key_id = raw:sub(1, 4), sig = raw:sub(5) }
  end
  return text, sigs
end

-- whether `key` signed (its first line verifies); an error if that line does not verify
local function signed_by(key, sigs, text, cosignature)
  for _, s in ipairs(sigs) do
    if s.name == key.name and s.key_id == key.key_id then
      local ok
      if cosignature then
        if #s.sig ~= 72 then invalid("a cosignature is 8 + 64 bytes") end
        local t = string.unpack(">i8", s.sig)
        ok = crypto.ed25519_verify(key.public_key, s.sig:sub(9), "cosignature/v1\ntime " .. unsigned(t) .. "\n" .. text)
      else
        ok = crypto.ed25519_verify(key.public_key, s.sig, text)
      end
      if not ok then invalid("the signature line of " .. key.name .. " does not verify") end
      return true
    end
  end
  return false
end

local function open_signed(note, policy)
  if type(note) ~= "string" then invalid("the checkpoint is not text") end
  local text, sigs = split_note(note)
  local lines = {}
  for line in text:gmatch("(.-)\n") do
    if line == "" then invalid("a checkpoint has origin, size and root lines") end
    lines[#lines + 1] = line
  end
  if #lines < 3 then invalid("a checkpoint has origin, size and root lines") end
  if not (lines[2] == "0" or lines[2]:match("^[1-9]%d*$") and #lines[2] <= 20) then
    invalid("size is not a decimal without leading zeros")
  end
  local root = crypto.strict_base64(lines[3])
  if not root or #root ~= M.HASH_SIZE then invalid("root is not 32 bytes") end
  if lines[1] ~= policy.log.name then invalid("origin is not the log's " .. policy.log.name) end
  if not signed_by(policy.log, sigs, text, false) then invalid("no signature by the log's key") end
  -- a size beyond 64 bits stays a float: no proof of at most 63 hashes reaches it
  return { origin = lines[1], size = math.tointeger(tonumber(lines[2])) or tonumber(lines[2]), root = root },
    text, sigs
end

--- Steps 3 and 4: the checkpoint {origin, size, root, cosigned_by}, signed by the log and
-- cosigned by enough of the bundle's witnesses; raises a LogError log-checkpoint or log-witness.
function M.open_checkpoint(note, policy)
  local ck, text, sigs = step("log-checkpoint", function() return open_signed(note, policy) end)
  ck.cosigned_by = {}
  for _, w in ipairs(policy.witnesses) do
    if step("log-witness", signed_by, w, sigs, text, true) then ck.cosigned_by[#ck.cosigned_by + 1] = w.name end
  end
  if #ck.cosigned_by < policy.min_cosignatures then
    fail("log-witness", "checkpoint cosigned by " .. #ck.cosigned_by .. " of the bundle's witnesses, "
      .. policy.min_cosignatures .. " required")
  end
  return ck
end

-- ---------------------------------------------------------------- the member

local function null(v) if v == json.null then return nil end return v end

local function check(member, policy, target, fp)
  local obj = step("log-proof", function()
    local o, err = json.decode_verified(member)
    if not o then invalid("transparency member is not bounded strict JSON: " .. err) end
    local index = json.int(o.index)
    if type(o.checkpoint) ~= "string" or type(o.entry) ~= "string" or not index or index < 0
        or not json.is_array(o.proof) or #o.proof > M.MAX_PROOF then
      invalid("transparency member lacks checkpoint, entry, index or proof")
    end
    for k in pairs(o.proof) do
      if math.type(k) ~= "integer" or type(o.proof[k]) ~= "string" then invalid("a proof hash is not a string") end
    end
    return o
  end)
  local ck = M.open_checkpoint(obj.checkpoint, policy)
  local entry_bytes, entry = step("log-entry", function()
    local raw = crypto.strict_base64(obj.entry)
    if not raw then invalid("the logged entry is not base64") end
    local e, err = json.decode_verified(raw)
    if not e then invalid("the logged entry is not JSON: " .. err) end
    if e.type ~= M.ENTRY_TYPE then invalid("the logged entry is not a " .. M.ENTRY_TYPE) end
    for _, name in ipairs({ "host", "port", "ip" }) do
      local got, want = null(e[name]), null(target[name])
      if got ~= want or type(got) ~= type(want) then invalid("the logged entry's " .. name .. " is not the answer's") end
    end
    if e[fp.algorithm] ~= fp:colon_hex() then invalid("the logged entry is about another certificate") end
    return raw, e
  end)
  step("log-proof", function()
    local proof = {}
    for i, p in ipairs(obj.proof) do
      proof[i] = crypto.strict_base64(p) or invalid("a proof hash is not base64")
    end
    M.verify_inclusion(M.leaf_hash(entry_bytes), json.int(obj.index), ck.size, proof, ck.root)
  end)
  return { index = json.int(obj.index), entry = entry, checkpoint = ck }
end

--- Checks an answer's transparency member (its bytes as received, nil when absent) for the
-- statement's `target` (host, port, ip) and the fingerprint `fp` asked about. Returns
-- {index, entry, checkpoint}; raises a LogError {kind, message} and nothing else.
function M.check_member(member, policy, target, fp)
  if member == nil then fail("log-missing", "the answer carries no proof of inclusion in the log") end
  return step("log-proof", check, member, policy, target, fp)
end

return M
