--- Asking notaries over the network: every host of every chosen notary at once, from one Lua
-- thread, with non-blocking LuaSocket/LuaSec connections and socket.select. Each host is a
-- state machine (connect, the bounce relay's CONNECT and its reply head, TLS, the pin checked
-- before anything is sent, the request, the response read until the server closes), every step
-- bounded by the connect and notary deadlines. Within a notary the first definitive answer
-- wins; run returns as soon as no pending answer can change the verdict.
-- @module converge.notary_io
local socket = require "socket"
local ssl = require "ssl"
local errors = require "converge.errors"
local crypto = require "converge.crypto"
local bundle = require "converge.bundle"
local fingerprint = require "converge.fingerprint"
local legacy = require "converge.legacy"
local extended = require "converge.extended"

local M = {}
M.now = socket.gettime

local DEFINITIVE = { listed = true, ["status-only"] = true, mismatch = true, ["not-listed"] = true, match = true }
local SEVERITY = { signature = 3, response = 3, malformed = 3, ["unknown-key"] = 3,
  ["bad-signature"] = 3, ["wrong-target"] = 3, ["nonce-mismatch"] = 3, stale = 3, pin = 2,
  ["log-missing"] = 3, ["log-proof"] = 3, ["log-checkpoint"] = 3, ["log-witness"] = 3, ["log-entry"] = 3 }

-- one client context for every notary connection: the bundle's pin decides, before sending
local context
local function tls_context()
  if not context then
    context = assert(ssl.newcontext({ mode = "client", protocol = "any", verify = "none",
      options = { "all", "no_sslv2", "no_sslv3", "no_tlsv1", "no_tlsv1_1" } }))
  end
  return context
end

--- The CONNECT head sent to a bounce relay for one notary's hosts.
function M.connect_head(dests, port)
  local first = dests[1].host
  local lines = { "CONNECT " .. first .. ":" .. port .. " HTTP/1.1", "Host: " .. first }
  for i = 2, #dests do lines[#lines + 1] = "X-Convergence-Notary: " .. dests[i].host .. "+" .. port end
  return table.concat(lines, "\r\n") .. "\r\n\r\n"
end

--- Which destination a relay connected to (raises a message when none).
function M.parse_connect_reply(head, dests)
  local lines = {}
  for line in head:gmatch("(.-)\r\n") do lines[#lines + 1] = line end
  local first = lines[1] or ""
  local proto, code = first:match("^(%S+) (%S+)")
  if not (proto and proto:match("^HTTP/1%.") and code == "200") then
    error("relay refused the tunnel: " .. string.format("%q", first:sub(1, 80)), 0)
  end
  local connected
  for i = 2, #lines do
    local line = lines[i]
    local colon = line:find(":", 1, true)
    local name = colon and line:sub(1, colon - 1) or line
    if legacy.py_strip(name):lower() == "x-convergence-notary" then
      connected = legacy.py_strip(colon and line:sub(colon + 1) or ""):lower()
    end
  end
  if not connected then
    if #dests == 1 then return dests[1] end
    error("relay did not name the notary host it connected to", 0)
  end
  local host = connected:match("^([^+]*)")
  for _, d in ipairs(dests) do
    if d.host:lower() == host or d.host:lower() == connected then return d end
  end
  error("relay connected to an unknown notary host " .. string.format("%q", connected), 0)
end

-- ------------------------------------------------------------------ one host

local Query = {}
Query.__index = Query
M.Query = Query

local function min(a, b) return a < b and a or b end

--- A question to one physical host (nh) about target:port; `o`: connect_timeout, max_bytes,
-- relay, relay_dests, bounce_port, ip; `ext`: keys, nonce, max_skew, now (nil: legacy).
function M.query(nh, target, port, wanted, o, ext, deadline)
  local self = setmetatable({ nh = nh, target = target, port = port, wanted = wanted, o = o, ext = ext, deadline = deadline,
    state = "connect", buffer = {}, size = 0, head = "", written = 0, nonce = "", asked = wanted[1], want = "write",
    protocol = ext and bundle.EXTENDED_FORMAT or bundle.LEGACY_FORMAT }, Query)
  local relay = o.relay
  self.label = relay and (nh.host .. ":" .. o.bounce_port .. " via " .. relay.name) or (nh.host .. ":" .. nh.ssl_port)
  self.connect_deadline = min(deadline, M.now() + o.connect_timeout)
  local ok, err = pcall(function()
    if ext then
      self.asked = extended.request_fingerprint(wanted)
      self.nonce = ext.nonce and extended.new_nonce() or ""
      self.request = extended.request_bytes(target, port, self.asked, self.nonce, o.ip, ext.log ~= nil)
    else
      self.request = legacy.request_bytes(target, port, self.asked, o.ip)
    end
  end)
  if not ok then
    if not errors.is(err) then error(err, 0) end
    self.outcome = legacy.failure_of(err, nil)
    return self
  end
  local host, p = nh.host, nh.ssl_port
  if relay then host, p = relay.hosts[1].host, relay.hosts[1].http_port end
  local sock = host:find(":", 1, true) and socket.tcp6() or socket.tcp()
  sock:settimeout(0)
  sock:setoption("tcp-nodelay", true)
  local cok, cerr = sock:connect(host, p)
  if not cok and cerr ~= "timeout" then
    sock:close()
    return self:unreachable(self.label .. ": " .. tostring(cerr))
  end
  self.sock = sock
  return self
end

function Query:unreachable(detail)
  self.outcome = legacy.outcome("unreachable", "unreachable", nil, detail)
  self:close()
  return self
end

function Query:close()
  if self.sock then self.sock:close(); self.sock = nil end
end

function Query:done() return self.outcome ~= nil end

--- The socket and whether to wait for reading, writing.
function Query:waits_on()
  local st = self.state
  if st == "connect" or st == "relay-write" or st == "write" then return self.sock, false, true end
  if st == "tls" then return self.sock, self.want == "read", self.want ~= "read" end
  return self.sock, true, false
end

--- The time by which this query must progress.
function Query:next_deadline()
  local st = self.state
  if st == "connect" or st == "relay-write" or st == "relay-read" or st == "tls" then return self.connect_deadline end
  return self.deadline
end

--- Called when the clock passed next_deadline().
function Query:expire()
  if not self:done() then self:unreachable(self.label .. ": timed out") end
end

function Query:start_tls()
  local conn, err = ssl.wrap(self.sock, tls_context())
  if not conn then return self:unreachable(self.label .. ": TLS: " .. tostring(err)) end
  local host = self.nh.host
  if not host:match("^[%d.]+$") and not host:find(":", 1, true) then conn:sni(host) end
  conn:settimeout(0)
  self.sock = conn
  self.state = "tls"
  self.want = "write"
  return self:step()
end

--- Progresses as far as the socket allows without blocking.
function Query:step()
  if self:done() or not self.sock then return end
  local s, st = self.sock, self.state
  if st == "connect" then
    if not s:getpeername() then
      local _, err = s:getoption("error")
      if err and err ~= "" and err ~= "Success" then return self:unreachable(self.label .. ": " .. tostring(err)) end
      return -- still connecting
    end
    if self.o.relay then
      self.head = M.connect_head(self.o.relay_dests, self.o.bounce_port)
      self.state = "relay-write"
      return self:step()
    end
    return self:start_tls()
  elseif st == "relay-write" then
    local last, err, partial = s:send(self.head, self.written + 1)
    if not last then
      if err ~= "timeout" then return self:unreachable(self.label .. ": relay: write failed: " .. tostring(err)) end
      last = partial
    end
    self.written = last
    if self.written >= #self.head then self.written = 0; self.state = "relay-read" end
    return
  elseif st == "relay-read" then
    local head = table.concat(self.buffer)
    while head:sub(-4) ~= "\r\n\r\n" do
      if #head >= 8192 then return self:unreachable("relay reply head too large") end
      local c, err = s:receive(1) -- one byte at a time: TLS starts right after the head
      if not c then
        if err == "timeout" then self.buffer = { head }; return end
        return self:unreachable("relay closed the connection")
      end
      head = head .. c
    end
    local ok, nh = pcall(M.parse_connect_reply, head, self.o.relay_dests)
    if not ok then return self:unreachable(tostring(nh)) end
    self.nh = nh
    self.label = nh.host .. ":" .. self.o.bounce_port .. " via " .. self.o.relay.name
    self.buffer = {}
    return self:start_tls()
  elseif st == "tls" then
    local ok, err = s:dohandshake()
    if not ok then
      if err == "wantread" then self.want = "read"; return end
      if err == "wantwrite" or err == "timeout" then self.want = "write"; return end
      return self:unreachable(self.label .. ": TLS: " .. tostring(err))
    end
    local cert = s:getpeercertificate()
    local der = cert and crypto.der_of_pem(cert:pem())
    if not (der and fingerprint.of(der):equals(self.nh.pin)) then
      self.outcome = legacy.outcome("failure", "pin", nil, self.label .. " presented a certificate other than the pinned one")
      self:close()
      return
    end
    self.state = "write"
    self.written = 0
    return self:step()
  elseif st == "write" then
    local last, err, partial = s:send(self.request, self.written + 1)
    if not last then
      if err ~= "timeout" and err ~= "wantwrite" and err ~= "wantread" then
        return self:unreachable(self.label .. ": write failed: " .. tostring(err))
      end
      last = partial or self.written
    end
    self.written = last
    if self.written >= #self.request then self.state = "read" end
    return
  end
  -- read until the server closes
  while true do
    local data, err, partial = s:receive(65536)
    local chunk = data or partial
    if chunk and #chunk > 0 then
      self.buffer[#self.buffer + 1] = chunk
      self.size = self.size + #chunk
      if self.size > self.o.max_bytes then
        self.outcome = legacy.outcome("failure", "response", nil, "response larger than " .. self.o.max_bytes .. " bytes")
        self:close()
        return
      end
    end
    if not data then
      if err == "wantread" or err == "timeout" or err == "wantwrite" then return end
      if err == "closed" or self.size > 0 then return self:finish() end -- a close without close_notify after some data
      return self:unreachable(self.label .. ": " .. tostring(err))
    end
  end
end

function Query:finish()
  self:close()
  local raw = table.concat(self.buffer)
  if not self.ext then
    self.outcome = legacy.outcome_from_http(raw, self.wanted, self.nh.der, self.o.max_bytes)
    return
  end
  local now = math.floor(self.ext.now())
  local ok, resp = pcall(legacy.parse_http_response, raw, self.o.max_bytes)
  if not ok then
    -- the one parse boundary: whatever the framing raises is this notary's failure
    self.outcome = errors.is(resp) and legacy.failure_of(resp, nil)
      or legacy.outcome("failure", "response", nil, "unreadable response: " .. tostring(resp))
    return
  end
  self.outcome = extended.evaluate(resp, extended.trusted_keys(self.ext.keys, now), {
    host = self.target, port = self.port, fingerprint = self.asked, nonce = self.nonce, now = now,
    max_skew = self.ext.max_skew, bind_ip = true, ip = self.o.ip or "", log = self.ext.log })
end

--- A fresh legacy query for the same host (extended fallback).
function Query:legacy_twin()
  return M.query(self.nh, self.target, self.port, self.wanted, self.o, nil, self.deadline)
end

-- ------------------------------------------------------------------ all notaries

--- One logical notary's part in a verdict: name, vote, kind, status, host, detail, elapsed,
-- protocol, answer.
function M.result(t) t.host = t.host or ""; t.detail = t.detail or ""; return t end

local function notary_result(job, now, t0)
  local done, winner = {}, nil
  for _, q in ipairs(job.queries) do
    if q:done() then
      done[#done + 1] = q
      if not winner and DEFINITIVE[q.outcome.kind] then winner = q end
    end
  end
  if not winner and #done < #job.queries and now < job.deadline then return nil end
  if not winner then
    for _, q in ipairs(done) do
      if not winner or (SEVERITY[q.outcome.kind] or 0) > (SEVERITY[winner.outcome.kind] or 0) then winner = q end
    end
  end
  if not winner then
    return M.result({ name = job.bundle.name, vote = "unreachable", kind = "timeout", detail = "no answer in time", elapsed = now - t0 })
  end
  local o = winner.outcome
  return M.result({ name = job.bundle.name, vote = o.vote, kind = o.kind, status = o.status, host = winner.label,
    detail = o.detail, elapsed = now - t0, protocol = winner.protocol, answer = o.answer })
end

--- Asks the chosen notaries at once. `jobs`: per notary {bundle, queries, deadline, fallback};
-- `settle(results, pending)` decides early (nil: go on). Returns {results (a result or false
-- per job), timed_out, early}.
function M.run(jobs, total_deadline, settle)
  local t0 = M.now()
  local results = {}
  for i = 1, #jobs do results[i] = false end
  local early, timed_out = nil, false
  while true do
    local now = M.now()
    local pending = 0
    for i, job in ipairs(jobs) do
      if not results[i] then
        for qi, q in ipairs(job.queries) do
          -- a connect step that ran out of time is an unreachable host; the notary's own
          -- deadline leaves what is still pending unanswered (a timeout, below)
          if not q:done() and now >= q:next_deadline() and q:next_deadline() < job.deadline then q:expire() end
          if q:done() and job.fallback and q.ext and q.outcome.kind == "status" and extended.not_offered(q.outcome.status) then
            job.queries[qi] = q:legacy_twin()
          end
        end
        results[i] = notary_result(job, now, t0) or false
        if results[i] then
          for _, q in ipairs(job.queries) do q:close() end
          local left = 0
          for k = 1, #jobs do if not results[k] then left = left + 1 end end
          early = settle(results, left)
          if early ~= nil then break end
        else
          pending = pending + 1
        end
      end
    end
    if early ~= nil or pending == 0 then break end
    if now >= total_deadline then timed_out = true; break end
    local rd, wr = {}, {}
    local next_at = total_deadline
    for i, job in ipairs(jobs) do
      if not results[i] then
        next_at = min(next_at, job.deadline)
        for _, q in ipairs(job.queries) do
          if not q:done() then
            local s, r, w = q:waits_on()
            next_at = min(next_at, q:next_deadline())
            if s then
              if r then rd[#rd + 1] = s end
              if w then wr[#wr + 1] = s end
            end
          end
        end
      end
    end
    local wait = next_at - M.now()
    if wait < 0 then wait = 0 end
    if #rd > 0 or #wr > 0 then socket.select(rd, wr, wait) else socket.sleep(min(wait, 0.05)) end
    for i, job in ipairs(jobs) do
      if not results[i] then
        for _, q in ipairs(job.queries) do q:step() end
      end
    end
  end
  for _, job in ipairs(jobs) do
    for _, q in ipairs(job.queries) do q:close() end
  end
  return { results = results, timed_out = timed_out, early = early }
end

return M
