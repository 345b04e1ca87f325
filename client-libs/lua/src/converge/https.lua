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
local tls = require "converge.tls"

local M = {}
M.TIMEOUT = 60

-- Forward calls to the real connection object.
local function forward(conn)
  local mt = getmetatable(conn.sock).__index
  for name, method in pairs(mt) do
    if type(method) == "function" and name ~= "connect" and name ~= "settimeout" then
      conn[name] = function(self, ...) return method(self.sock, ...) end
    end
  end
end

--- A LuaSocket `create` function for socket.http: its connect(host, port) makes the TCP
-- connection (or CONNECT tunnel) and the TLS handshake, and lets the connection through only
-- when the notaries vouch for host:port's certificate.
function M.create(opts)
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
      forward(self)
      return 1
    end
    function conn:close() if self.sock then self.sock:close() end return 1 end
    return conn
  end
end

--- LuaSec's ssl.https.request, with the notaries deciding (see the module).
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
  if not t.url:match("^https://") then return nil, "not an https:// URL: " .. tostring(t.url) end
  local opts = { client = t.client, proxy = t.proxy or http.PROXY, timeout = t.timeout, require_ca = t.require_ca, cafile = t.cafile }
  t.client, t.proxy, t.timeout, t.require_ca, t.cafile = nil, nil, nil, nil, nil
  t.create = M.create(opts)
  local saved = http.PROXY
  http.PROXY = nil -- the tunnel is ours: socket.http must connect to the origin, not the proxy
  local ok, res, code, headers, status = pcall(http.request, t)
  http.PROXY = saved
  if not ok then error(res, 0) end
  if res and string_form then return table.concat(chunks), code, headers, status end
  return res, code, headers, status
end

return M
