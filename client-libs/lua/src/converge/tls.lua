--- TLS connections decided by the notaries, on LuaSec: the handshake completes, converge asks
-- the notaries about the peer's certificate for the origin host:port, and only a certificate
-- they vouch for gives the caller a connection; nothing is sent before that.
--
--     local tls = require "converge.tls"
--     local conn, err = tls.connect("www.example.org", 443)          -- or { proxy = "http://h:p" }
--     if not conn then error(tostring(err)) end                      -- err: a NotTrusted or a message
--
-- Options (every function): client (a converge client; default: the one converge() uses),
-- proxy ("http://[user:pass@]host:port", CONNECT), timeout (seconds), require_ca (the CA chain
-- must verify as well, against cafile or the system store; LuaSec checks no host names).
-- @module converge.tls
local socket = require "socket"
local ssl = require "ssl"
local url = require "socket.url"
local mime = require "mime"
local errors = require "converge.errors"
local crypto = require "converge.crypto"

local M = {}
M.SYSTEM_CA_FILE = "/etc/ssl/certs/ca-certificates.crt"

local contexts = {}

--- The LuaSec client context for `opts` (cached): no CA check (the notaries decide), or with
-- require_ca a verifying one.
function M.context(opts)
  local key = opts.require_ca and ("ca:" .. (opts.cafile or M.SYSTEM_CA_FILE)) or "none"
  if not contexts[key] then
    local params = { mode = "client", protocol = "any", options = { "all", "no_sslv2", "no_sslv3", "no_tlsv1", "no_tlsv1_1" },
      verify = opts.require_ca and { "peer", "fail_if_no_peer_cert" } or "none",
      cafile = opts.require_ca and (opts.cafile or M.SYSTEM_CA_FILE) or nil }
    contexts[key] = assert(ssl.newcontext(params))
  end
  return contexts[key]
end

local function client_of(opts) return opts.client or require("converge.client").shared() end

--- The notaries' decision about `der` for host:port: the verdict when they vouch for it, else
-- nil and a NotTrusted.
function M.decide(host, port, der, opts)
  local ok, v = pcall(function() return client_of(opts):check_certificate(host, port, der) end)
  if not ok then return nil, errors.not_trusted(host, port, nil, errors.is(v) and v.message or tostring(v)) end
  if not v.trusted then return nil, errors.not_trusted(host, port, v) end
  return v
end

--- TLS over a connected LuaSocket TCP object (direct, or a CONNECT tunnel) to host:port: the
-- LuaSec connection when the notaries vouch for the certificate, else nil and a NotTrusted (or
-- a message for a TLS failure). The socket is closed on failure.
function M.wrap(sock, host, port, opts)
  opts = opts or {}
  port = math.tointeger(tonumber(port)) or port -- socket.http gives ports as strings
  local conn, err = ssl.wrap(sock, M.context(opts))
  if not conn then sock:close(); return nil, "TLS: " .. tostring(err) end
  if not host:match("^[%d.]+$") and not host:find(":", 1, true) then conn:sni(host) end
  conn:settimeout(opts.timeout or 30)
  local ok, herr = conn:dohandshake()
  if not ok then conn:close(); return nil, host .. ":" .. port .. ": TLS: " .. tostring(herr) end
  if opts.require_ca and not conn:getpeerverification() then
    conn:close()
    return nil, errors.not_trusted(host, port, nil, "the CA check failed and require_ca is set")
  end
  local cert = conn:getpeercertificate()
  local der = cert and crypto.der_of_pem(cert:pem())
  if not der then conn:close(); return nil, errors.not_trusted(host, port, nil, "no peer certificate") end
  local v, nt = M.decide(host, port, der, opts)
  if not v then conn:close(); return nil, nt end
  return conn, v
end

--- A TCP connection to host:port, through `proxy` (CONNECT) when given: the socket, or nil and
-- a message.
function M.tcp(host, port, proxy, timeout)
  local authority = (host:find(":", 1, true) and ("[" .. host .. "]") or host) .. ":" .. port
  local sock = host:find(":", 1, true) and not proxy and socket.tcp6() or socket.tcp()
  sock:settimeout(timeout or 30)
  if not proxy or proxy == "" then
    local ok, err = sock:connect(host, port)
    if not ok then sock:close(); return nil, authority .. ": " .. tostring(err) end
    return sock
  end
  local p = url.parse(proxy:find("://", 1, true) and proxy or ("http://" .. proxy))
  local ok, err = sock:connect(p.host, tonumber(p.port) or 3128)
  if not ok then sock:close(); return nil, "proxy " .. proxy .. ": " .. tostring(err) end
  local auth = ""
  if p.user then
    auth = "Proxy-Authorization: Basic " .. mime.b64(url.unescape(p.user) .. ":" .. url.unescape(p.password or "")) .. "\r\n"
  end
  sock:send("CONNECT " .. authority .. " HTTP/1.1\r\nHost: " .. authority .. "\r\n" .. auth .. "\r\n")
  local status = sock:receive("*l")
  if not status then sock:close(); return nil, "proxy " .. proxy .. ": no reply to CONNECT" end
  local size = #status
  while true do
    local line = sock:receive("*l")
    if not line then sock:close(); return nil, "proxy " .. proxy .. ": reply head cut short" end
    size = size + #line
    if line == "" then break end
    if size > 16384 then sock:close(); return nil, "proxy " .. proxy .. ": reply head too large" end
  end
  if not status:match("^HTTP/1%.[01] 2%d%d") then
    sock:close()
    return nil, "proxy refused CONNECT " .. authority .. ": " .. status
  end
  return sock
end

--- A TLS connection to host:port that the notaries vouch for (nothing sent yet): the LuaSec
-- connection and the verdict, or nil and a NotTrusted (the notaries refused) or a message.
function M.connect(host, port, opts)
  opts = opts or {}
  local sock, err = M.tcp(host, port, opts.proxy, opts.timeout)
  if not sock then return nil, err end
  return M.wrap(sock, host, port, opts)
end

return M
