--- The legacy (Convergence v1) protocol, client side (pure): the request bytes, the response
-- framing, the signed bytes S (the body without its signature member), RSA/SHA-1 verification
-- over S, the stock parse of S alone and the reduction of an
-- answer to a vote (an outcome: vote, kind, status, detail).
-- @module converge.legacy
local errors = require "converge.errors"
local json = require "converge.json"
local crypto = require "converge.crypto"
local bundle = require "converge.bundle"
local fingerprint = require "converge.fingerprint"

local M = {}
M.MAX_RESPONSE_BYTES = 262144
M.MAX_HEADER_BYTES = 16384
M.MAX_HISTORY_ENTRIES = 1000
local PY_SPACE = "[ \t\n\r\11\12\28\29\30\31\133\160]"

local function q(s) return string.format("%q", tostring(s)) end

--- An outcome: one notary's answer reduced to a vote.
function M.outcome(vote, kind, status, detail, answer)
  return { vote = vote, kind = kind, status = status, detail = detail or "", answer = answer }
end

function M.failure_of(e, status) return M.outcome("failure", e.kind, status, e.detail) end

--- Refuses a host or port that cannot be put into /target/<host>+<port>.
function M.check_target(host, port)
  if not bundle.valid_host(host) or host:match("^[.%-]") then errors.throw("target", "invalid target host " .. q(host)) end
  if math.type(port) ~= "integer" or port < 1 or port > 65535 then errors.throw("target", "invalid target port " .. q(port)) end
end

--- The cache and record key host:port (host lower-cased).
function M.location(host, port) return host:lower() .. ":" .. port end

local function ipv4(s)
  local parts = {}
  for p in (s .. "."):gmatch("(.-)%.") do parts[#parts + 1] = p end
  if #parts ~= 4 then return nil end
  local out = {}
  for i, p in ipairs(parts) do
    if not p:match("^%d%d?%d?$") or (#p > 1 and p:sub(1, 1) == "0") or tonumber(p) > 255 then return nil end
    out[i] = tonumber(p)
  end
  return out
end

local function ipv6_words(s)
  local head, tail = s, nil
  local a = s:find("::", 1, true)
  if a then
    head, tail = s:sub(1, a - 1), s:sub(a + 2)
    if tail:find("::", 1, true) then return nil end
  end
  local function groups(part, allow_v4)
    local out = {}
    if part == "" then return out end
    local items = {}
    for g in (part .. ":"):gmatch("(.-):") do items[#items + 1] = g end
    for i, g in ipairs(items) do
      if i == #items and allow_v4 and g:find(".", 1, true) then
        local v4 = ipv4(g)
        if not v4 then return nil end
        out[#out + 1] = v4[1] * 256 + v4[2]
        out[#out + 1] = v4[3] * 256 + v4[4]
      elseif g:match("^%x%x?%x?%x?$") then
        out[#out + 1] = tonumber(g, 16)
      else
        return nil
      end
    end
    return out
  end
  local h = groups(head, tail == nil)
  local t = tail and groups(tail, true) or {}
  if not h or not t then return nil end
  if tail == nil then return #h == 8 and h or nil end
  if #h + #t > 7 then return nil end
  local w = {}
  for _, x in ipairs(h) do w[#w + 1] = x end
  for _ = 1, 8 - #h - #t do w[#w + 1] = 0 end
  for _, x in ipairs(t) do w[#w + 1] = x end
  return w
end

--- An IP address literal in its compressed form (IPv6 every group in hex), else a "target" error.
function M.check_ip(ip)
  if type(ip) ~= "string" or ip:find("%", 1, true) then errors.throw("target", "invalid target address " .. q(ip)) end
  if not ip:find(":", 1, true) then
    local v4 = ipv4(ip)
    if not v4 then errors.throw("target", "invalid target address " .. q(ip)) end
    return table.concat(v4, ".")
  end
  local w = ipv6_words(ip)
  if not w then errors.throw("target", "invalid target address " .. q(ip)) end
  local best, len = -1, 0
  local i = 1
  while i <= 8 do
    if w[i] ~= 0 then
      i = i + 1
    else
      local j = i
      while j <= 8 and w[j] == 0 do j = j + 1 end
      if j - i > len then best, len = i, j - i end
      i = j
    end
  end
  local function hex(from, to)
    local parts = {}
    for k = from, to do parts[#parts + 1] = string.format("%x", w[k]) end
    return table.concat(parts, ":")
  end
  if len < 2 then return hex(1, 8) end
  return hex(1, best - 1) .. "::" .. hex(best + len, 8)
end

--- The exact request the 2011 add-on sends; `ip` asks the notary to connect to that address.
function M.request_bytes(host, port, fp, ip)
  M.check_target(host, port)
  local suffix = (ip ~= nil and ip ~= "") and ("/" .. M.check_ip(ip)) or ""
  local body = "fingerprint=" .. fp:colon_hex()
  return "POST /target/" .. host:lower() .. "+" .. port .. suffix .. " HTTP/1.0\r\n"
    .. "Content-Type: application/x-www-form-urlencoded\r\nConnection: close\r\n"
    .. "Content-Length: " .. #body .. "\r\n\r\n" .. body
end

--- What Python's str.strip() strips from latin-1 text.
function M.py_strip(s) return (s:gsub("^" .. PY_SPACE .. "+", ""):gsub(PY_SPACE .. "+$", "")) end

local function latin1_q(s)
  local u = s:gsub("[\128-\255]", function(c) return utf8.char(c:byte()) end)
  return string.format("%q", u)
end

local function bad(d) errors.throw("response", d) end

--- Splits a complete response read until the server closed: {status, headers, body}.
function M.parse_http_response(raw, max)
  max = max or M.MAX_RESPONSE_BYTES
  if #raw > max then bad("response larger than " .. max .. " bytes") end
  local sep, seplen = raw:find("\r\n\r\n", 1, true), 4
  if not sep then sep, seplen = raw:find("\n\n", 1, true), 2 end
  if not sep then bad("response has no end of headers") end
  if sep - 1 > M.MAX_HEADER_BYTES then bad("response headers too large") end
  local head = raw:sub(1, sep - 1):gsub("\r\n", "\n")
  local lines = {}
  for line in (head .. "\n"):gmatch("(.-)\n") do lines[#lines + 1] = line end
  local status = lines[1]:match("^HTTP/1%.[01] (%d%d%d)$") or lines[1]:match("^HTTP/1%.[01] (%d%d%d) ")
  if not status then bad("bad status line " .. latin1_q(lines[1]:sub(1, 80))) end
  local headers = {}
  for i = 2, #lines do
    local line = lines[i]
    local colon = line:find(":", 1, true)
    local name = colon and line:sub(1, colon - 1) or ""
    if not colon or name == "" or name ~= M.py_strip(name) then bad("bad header line " .. latin1_q(line:sub(1, 80))) end
    local key = name:lower()
    local value = M.py_strip(line:sub(colon + 1))
    headers[key] = headers[key] and (headers[key] .. ", " .. value) or value
  end
  local body = raw:sub(sep + seplen)
  if (headers["transfer-encoding"] or ""):lower():find("chunked", 1, true) then
    bad("chunked transfer coding is not allowed on notary responses")
  end
  local cl = headers["content-length"]
  if cl then
    if not cl:match("^%d+$") or #cl > 12 then bad("bad Content-Length " .. latin1_q(cl:sub(1, 20))) end
    if tonumber(cl) > #body then bad("truncated response body") end
    body = body:sub(1, tonumber(cl))
  end
  return { status = tonumber(status), headers = headers, body = body }
end

local function timestamp(v, what)
  if type(v) == "string" and v:match("^%d+$") and #v <= 12 then return tonumber(v) end
  local n = json.int(v)
  if n and n >= 0 and n < 1000000000000 then return n end
  bad(what .. " is not a decimal unix time")
end

local MARK = ', "signature": "'

--- Step 1 of the contract: a 200/409 body is the signed bytes without their final `}`, then
-- `, "signature": "<base64>"}` and nothing else. Returns S and the signature text.
function M.split_body(body, max)
  max = max or M.MAX_RESPONSE_BYTES
  if #body > max then bad("body larger than " .. max .. " bytes") end
  local i, from = nil, 1
  while true do
    local a = body:find(MARK, from, true)
    if not a then break end
    i, from = a, a + 1
  end
  if not i then bad("body has no trailing signature member") end
  local b64 = body:sub(i + #MARK):match('^([A-Za-z0-9+/]+=?=?)"}$')
  if not b64 then bad("the signature member is not the last bytes of the body") end
  return body:sub(1, i - 1) .. "}", b64
end

--- Splits a body and checks its RSASSA-PKCS1-v1_5 SHA-1 signature over S: S, else a
-- "response" or "signature" error.
function M.verified_bytes(body, der, max)
  local s, b64 = M.split_body(body, max)
  local signature = crypto.strict_base64(b64)
  if not (signature and crypto.rsa_sha1_verify(der, signature, s)) then
    errors.throw("signature", "signature does not verify against the notary's certificate")
  end
  return s
end

--- The history entries ({fp, start, finish}...) of verified bytes S: the bounds scan, the
-- stock parse, the shape; else a "response" error.
function M.entries_of(s)
  local obj, err = json.decode_verified(s)
  if not obj then bad("signed bytes: " .. err) end
  local fl = obj.fingerprintList
  if not json.is_array(fl) then bad("fingerprintList missing or not a list") end
  if #fl > M.MAX_HISTORY_ENTRIES then bad("more than " .. M.MAX_HISTORY_ENTRIES .. " history entries") end
  local entries = {}
  for _, item in ipairs(fl) do
    if not json.is_object(item) then bad("history entry is not an object") end
    local ts = item.timestamp
    if not json.is_object(ts) then bad("history entry has no timestamp object") end
    local fp_text = item.fingerprint
    if type(fp_text) ~= "string" then bad("history entry has no fingerprint") end
    local okp, fp = pcall(fingerprint.parse, fp_text)
    if not okp then bad("history entry fingerprint: " .. (errors.is(fp) and fp.detail or "invalid")) end
    entries[#entries + 1] = { fp, timestamp(ts.start, "start"), timestamp(ts.finish, "finish") }
  end
  return entries
end

--- Reduces one response (status and body) to a vote; `wanted`: the asked certificate's forms.
function M.evaluate(status, body, wanted, der, max)
  if status == 200 or status == 409 then
    -- the one parse boundary: whatever these raise on hostile bytes is this notary's failure
    local ok, entries = pcall(function() return M.entries_of(M.verified_bytes(body, der, max)) end)
    if not ok then
      if errors.is(entries) then return M.failure_of(entries, status) end
      return M.outcome("failure", "response", status, "unreadable answer: " .. tostring(entries))
    end
    if status == 409 then return M.outcome("failure", "mismatch", status, "notary sees another certificate") end
    for _, fp in ipairs(wanted) do
      for _, e in ipairs(entries) do
        if e[1]:equals(fp) then return M.outcome("success", "listed", status, "") end
      end
    end
    local algs = {}
    for _, e in ipairs(entries) do algs[e[1].algorithm] = true end
    local any = false
    for _, fp in ipairs(wanted) do any = any or algs[fp.algorithm] == true end
    if not any and #entries > 0 then
      return M.outcome("success", "status-only", status, "list holds no fingerprint of the asked kind")
    end
    return M.outcome("failure", "not-listed", status, "200 without the fingerprint in the signed list")
  end
  if status == 303 then return M.outcome("unreachable", "inconclusive", status, "notary could not decide") end
  return M.outcome("unreachable", "status", status, "HTTP status " .. status)
end

--- Reduces a whole response to (outcome, response or nil).
function M.outcome_from_http(raw, wanted, der, max)
  local ok, r = pcall(M.parse_http_response, raw, max)
  if not ok then
    if errors.is(r) then return M.failure_of(r, nil), nil end
    return M.outcome("failure", "response", nil, "unreadable response: " .. tostring(r)), nil
  end
  return M.evaluate(r.status, r.body, wanted, der, M.MAX_RESPONSE_BYTES), r
end

return M
