--- An `ssl.https`-compatible request whose connections the notaries decide.
--
--     local https = require "converge.https"
--     local body, code, headers = https.request("https://www.example.org/")   -- was: ssl.https
--     if not body then print(code) end        -- a NotTrusted (tostring: why), or a message
--
-- The same arguments and results as LuaSec's `ssl.https.request` (a URL and an optional body,
-- or a LuaSocket request table with sink, source, headers, method...), plus the fields
-- `client` (a converge client), `proxy` (an HTTP proxy: the tunnel is made with CONNECT and
-- the origin is asked about; `socket.http.PROXY` is used the same way), `timeout` and
-- `require_ca`. Every connection, redirects included, is decided by the notaries after the
-- handshake and before the request is written; a refusal returns nil and the NotTrusted.
-- @module converge.https
local socket = require "socket"
local http = require "socket.http"
local ltn12 = require "ltn12"
local url = require "socket.url"
local tls = require "converge.tls"

local M = {}
M.TIMEOUT = 60

-- Forward calls to the real connection object; `hop` (optional) learns the status code and
-- Location header of the response as socket.http reads them.
local function forward(conn, hop)
  local mt = getmetatable(conn.sock).__index
  for name, method in pairs(mt) do
    if type(method) == "function" and name ~= "connect" and name ~= "settimeout" then
      conn[name] = function(self, ...) return method(self.sock, ...) end
    end
  end
  if not hop then return end
  local receive = conn.receive
  function conn.receive(self, ...)
    local line, err, partial = receive(self, ...)
    if type(line) == "string" and not hop.body then
      local code = line:match("^HTTP/%d%.%d (%d%d%d)")
      if code and tonumber(code) ~= 100 then
        hop.code, hop.head = tonumber(code), true
      elseif hop.head and line == "" then
        hop.head, hop.body = false, true
      elseif hop.head then
        hop.location = line:match("^[Ll][Oo][Cc][Aa][Tt][Ii][Oo][Nn][ \t]*:[ \t]*(.-)[ \t]*$") or hop.location
      end
    end
    return line, err, partial
  end
end

--- A LuaSocket `create` function for socket.http: its connect(host, port) makes the TCP
-- connection (or CONNECT tunnel) and the TLS handshake, and lets the connection through only
-- when the notaries vouch for host:port's certificate.
function M.create(opts, hop)
  return function()
    local conn = { timeout = opts.timeout or M.TIMEOUT }
    function conn:settimeout(t) self.timeout = opts.timeout or t; return 1 end
    function conn:connect(host, port)
      local sock, err = tls.tcp(host, port, opts.proxy, self.timeout)
      socket.try(sock, err)
      local c, verdict_or_err = tls.wrap(sock, host, port, opts)
      socket.try(c, verdict_or_err)
      self.sock = c
      c:settimeout(self.timeout)
      forward(self, hop)
      return 1
    end
    function conn:close() if self.sock then self.sock:close() end return 1 end
    return conn
  end
end

local REDIRECT = { [301] = true, [302] = true, [303] = true, [307] = true, [308] = true }
M.MAX_REDIRECTS = 5

-- The next URL when this hop's answer is a redirect we follow (as socket.http would: GET or
-- HEAD without a body, to https only), else nil.
local function next_url(t, current, hop, limit, hops)
  if not (REDIRECT[hop.code] and hop.location and hop.location ~= "") then return nil end
  if t.redirect == false or t.source or hops >= limit then return nil end
  local method = (t.method or "GET"):upper()
  if method ~= "GET" and method ~= "HEAD" then return nil end
  local target = url.absolute(current, hop.location)
  if not target:match("^https://") then return nil end
  return target
end

--- LuaSec's ssl.https.request, with the notaries deciding (see the module). Redirects are
-- followed here, every hop on a connection of our own checked for the origin (host and port)
-- of that hop's URL: socket.http's own redirects would open the next connection through
-- LuaSec's default https (no verification at all) whenever the request names no scheme.
function M.request(reqt, body)
  local string_form = type(reqt) == "string"
  local chunks = {}
  local t
  if string_form then
    t = { url = reqt, sink = ltn12.sink.table(chunks) }
    if body then
      t.source = ltn12.source.string(body)
      t.method = "POST"
      t.headers = { ["content-length"] = #body, ["content-type"] = "application/x-www-form-urlencoded" }
    end
  else
    t = {}
    for k, v in pairs(reqt) do t[k] = v end
  end
  if type(t.url) ~= "string" or not t.url:match("^https://") then return nil, "not an https:// URL: " .. tostring(t.url) end
  local opts = { client = t.client, proxy = t.proxy or http.PROXY, timeout = t.timeout, require_ca = t.require_ca, cafile = t.cafile }
  local limit = t.maxredirects == false and 20 or math.min(tonumber(t.maxredirects) or M.MAX_REDIRECTS, 20)
  local sink = t.sink
  local current, hops = t.url, 0
  while true do
    local hop = {}
    local h = {}
    -- the caller's fields (URL parts too) for the first hop; later hops are their URL only
    for k, v in pairs(t) do
      if hops == 0 or k == "source" or k == "headers" or k == "method" or k == "step" then h[k] = v end
    end
    h.url, h.redirect, h.create, h.maxredirects, h.proxy = current, false, M.create(opts, hop), nil, nil
    for _, k in ipairs({ "client", "timeout", "require_ca", "cafile" }) do h[k] = nil end
    -- a redirect's own body is dropped; the caller's sink sees only the final answer's
    h.sink = function(chunk, err)
      if next_url(t, current, hop, limit, hops) then return 1 end
      if sink then return sink(chunk, err) end
      return 1
    end
    local saved = http.PROXY
    http.PROXY = nil -- the tunnel is ours: socket.http must connect to the origin, not the proxy
    local ok, res, code, headers, status = pcall(http.request, h)
    http.PROXY = saved
    if not ok then error(res, 0) end
    if not res then return nil, code end
    local target = next_url(t, current, hop, limit, hops)
    if not target then
      if string_form then return table.concat(chunks), code, headers, status end
      return res, code, headers, status
    end
    current, hops = target, hops + 1
  end
end

return M
