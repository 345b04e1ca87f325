--- The extended answer format converge-answer/1, client side: verification of a signed answer
-- in the documented order, each failure named; the request; the reduction to a vote. The
-- statement T ends at the first `,"transparency":` after the fixed prefix; the member's value
-- (from there to the final brace) is checked by converge.transparency for a `match` of a bundle
-- that names a log (`evaluate` with `exp.log`), each failure a `log-*` kind.
-- @module converge.extended
local json = require "converge.json"
local crypto = require "converge.crypto"
local bundle = require "converge.bundle"
local legacy = require "converge.legacy"
local transparency = require "converge.transparency"

local M = {}
M.DEFAULT_MAX_SKEW = 300
M.MEDIA_TYPE = "application/vnd.converge.answer+json"
M.PATH = "/v2/answer"
M.MAX_ANSWER_BYTES = 65536
local VERDICT_STATUS = { match = 200, mismatch = 409, unreachable = 503, refused = 403 }
local VOTES = { match = { "success", "match" }, mismatch = { "failure", "mismatch" },
  unreachable = { "unreachable", "target-unreachable" }, refused = { "unreachable", "refused" } }

--- The bundle's signing keys trusted at `now`: {key_id = raw public key}.
function M.trusted_keys(keys, now)
  local out = {}
  for _, k in ipairs(keys) do
    if bundle.key_trusted_at(k, now) then out[k.key_id] = k.public_key end
  end
  return out
end

--- The host as a notary names it in target.host.
function M.expected_host(host)
  local ok, ip = pcall(legacy.check_ip, (host:gsub("^%[", ""):gsub("%]$", "")))
  if ok then return ip end
  return (host:lower():gsub("%.$", ""))
end

local Rejected = {}
Rejected.__index = Rejected
Rejected.__tostring = function(r) return "answer rejected (" .. r.reason .. "): " .. r.message end
M.Rejected = Rejected

local function reject(reason, message) error(setmetatable({ reason = reason, message = message }, Rejected), 0) end
local function str(v) return type(v) == "string" and v or nil end

-- K and V: runs of printable ASCII without `"` or `\`
local RUN = "([ !\35-\91%]\94-\126]+)"
local PREFIX = '^{"signature":{"alg":"ed25519","key_id":"' .. RUN .. '","value":"' .. RUN .. '"},"statement":()'

--- Checks an extended answer body in the documented order: the fixed prefix and final brace,
-- the key, Ed25519 over the statement bytes T as received, then T alone parsed (bounds scan,
-- cjson) and its shape. `exp`: host, port, fingerprint, nonce, now, max_skew, bind_ip, ip
-- (each optional). Returns {verdict, detail, key_id, answered_at}; raises a Rejected {reason,
-- message} on the first failure.
function M.verify_answer(raw, keys, exp)
  if type(raw) ~= "string" or #raw > M.MAX_ANSWER_BYTES then reject("malformed", "answer too large") end
  local kid, value, from = raw:match(PREFIX)
  if not kid or raw:sub(-1) ~= "}" or from > #raw then
    reject("malformed", "answer is not the fixed prefix, the statement and a final brace")
  end
  local body = raw:sub(from, -2)
  local cut = body:find(',"transparency":', 1, true)
  local t = cut and body:sub(1, cut - 1) or body
  local member = cut and body:sub(cut + #',"transparency":') or nil
  local pub = keys[kid]
  if not pub then reject("unknown-key", "signing key " .. kid .. " is not trusted") end
  local signature = crypto.unb64url(value)
  if not (signature and #signature == 64 and #pub == 32 and crypto.ed25519_verify(pub, signature, t)) then
    reject("bad-signature", "signature does not verify")
  end
  local stmt, err = json.decode_verified(t)
  if not stmt then reject("malformed", "statement: " .. err) end
  if stmt.type ~= bundle.EXTENDED_FORMAT then reject("malformed", "not a " .. bundle.EXTENDED_FORMAT .. " statement") end
  if stmt.key_id ~= kid then reject("malformed", "key ids of statement and signature differ") end
  local verdict, target, at = str(stmt.verdict), stmt.target, json.int(stmt.answered_at)
  if not (verdict and VERDICT_STATUS[verdict] and json.is_object(target)) then
    reject("malformed", "statement lacks a verdict or target")
  end
  if not at then reject("malformed", "answered_at must be an integer") end
  if exp.host and exp.host ~= "" then
    local th, tp = str(target.host), json.int(target.port)
    if not (th and tp and th == M.expected_host(exp.host) and tp == exp.port) then
      reject("wrong-target", "answer is about another target, not " .. exp.host .. ":" .. tostring(exp.port or ""))
    end
  end
  if exp.bind_ip then
    local tip = target.ip
    if exp.ip == nil or exp.ip == "" then
      if tip ~= nil and tip ~= json.null then reject("wrong-target", "answer is about a probe of an address the client did not name") end
    elseif str(tip) == nil or tip ~= M.expected_host(exp.ip) then
      reject("wrong-target", "answer is about a probe of another address, not " .. exp.ip)
    end
  end
  local req = stmt.request
  if not json.is_object(req) then req = nil end
  local fp = exp.fingerprint
  if fp and not (req and req.alg == fp.algorithm and req.fingerprint == fp:colon_hex()) then
    reject("wrong-target", "answer is about another certificate fingerprint")
  end
  if exp.nonce and exp.nonce ~= "" and not (req and req.nonce == exp.nonce) then
    reject("nonce-mismatch", "answer does not echo our nonce")
  end
  if exp.now then
    local skew = exp.max_skew or M.DEFAULT_MAX_SKEW
    if math.abs(exp.now - at) > skew then
      reject("stale", "answer time is " .. (exp.now - at) .. " s from now (max skew " .. skew .. " s)")
    end
  end
  return { verdict = verdict, detail = str(stmt.detail) or "", key_id = kid, answered_at = at, target = target,
    member = member }
end

--- Unpadded base64url of 16 random bytes.
function M.new_nonce() return crypto.b64url(crypto.random_bytes(16)) end

local function json_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c) return string.format("\\u%04x", c:byte()) end) .. '"'
end

--- The JSON body of an extended request (`proof`: ask for a proof of inclusion in the log).
function M.request_body(host, port, fp, nonce, ip, proof)
  legacy.check_target(host, port)
  local body = '{"host":' .. json_string(host) .. ',"port":' .. port .. ',"fingerprint":"' .. fp:colon_hex()
    .. '","alg":"' .. fp.algorithm .. '"'
  if ip ~= nil and ip ~= "" then body = body .. ',"ip":"' .. legacy.check_ip(ip) .. '"' end
  if nonce ~= nil and nonce ~= "" then body = body .. ',"nonce":"' .. nonce .. '"' end
  if proof then body = body .. ',"transparency":true' end
  return body .. "}"
end

--- The whole HTTP/1.0 request of the extended format.
function M.request_bytes(host, port, fp, nonce, ip, proof)
  local body = M.request_body(host, port, fp, nonce, ip, proof)
  return "POST " .. M.PATH .. " HTTP/1.0\r\nContent-Type: application/json\r\nAccept: " .. M.MEDIA_TYPE
    .. "\r\nConnection: close\r\nContent-Length: " .. #body .. "\r\n\r\n" .. body
end

--- The fingerprint form to ask about: SHA-256 when known, else the first.
function M.request_fingerprint(forms)
  for _, f in ipairs(forms) do
    if f.algorithm == "sha256" then return f end
  end
  return forms[1]
end

--- Statuses meaning "this notary does not speak the extended format here".
function M.not_offered(s) return s == 400 or s == 404 or s == 405 or s == 501 end

--- Reduces one extended response ({status, headers, body}) to a vote; with `exp.log` (the
-- bundle names a transparency log) a `match` must carry a valid proof of inclusion, else it is
-- a failure of that `log-*` kind.
function M.evaluate(resp, keys, exp)
  local ctype = ((resp.headers["content-type"] or ""):match("^[^;]*")):lower():gsub("^%s+", ""):gsub("%s+$", "")
  local st = resp.status
  local known = false
  for _, s in pairs(VERDICT_STATUS) do known = known or s == st end
  if not known or ctype ~= M.MEDIA_TYPE then return legacy.outcome("unreachable", "status", st, "HTTP status " .. st) end
  -- the one parse boundary: whatever verification raises on hostile bytes is this notary's failure
  local ok, v = pcall(M.verify_answer, resp.body, keys, exp)
  if not ok then
    if getmetatable(v) == Rejected then return legacy.outcome("failure", v.reason, st, v.message) end
    return legacy.outcome("failure", "malformed", st, "unreadable answer: " .. tostring(v))
  end
  if VERDICT_STATUS[v.verdict] ~= st then
    return legacy.outcome("failure", "response", st, "status " .. st .. " with signed verdict " .. v.verdict)
  end
  if exp.log and v.verdict == "match" then
    local okl, e = pcall(transparency.check_member, v.member, exp.log, v.target, exp.fingerprint)
    if not okl then
      if getmetatable(e) == transparency.LogError then return legacy.outcome("failure", e.kind, st, e.message) end
      return legacy.outcome("failure", "log-proof", st, "unreadable transparency member: " .. tostring(e))
    end
  end
  local vote = VOTES[v.verdict]
  return legacy.outcome(vote[1], vote[2], st, v.detail, resp.body)
end

return M
