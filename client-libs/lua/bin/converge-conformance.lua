-- The conformance CLI (client-libs/conformance/CLIENT-CLI.md): info, check, hook and vector,
-- one JSON object per line on stdout. Run through bin/converge-conformance (it sets the paths).
local cjson = require "cjson"
local converge = require "converge"
local errors = require "converge.errors"
local vectors = require "converge.vectors"

local USAGE = "usage: converge-conformance info\n"
  .. "       converge-conformance check --config-dir DIR HOST PORT FINGERPRINT\n"
  .. "       converge-conformance hook --config-dir DIR [--proxy URL] [--ca-file PEM] [--path P]\n"
  .. "           [--follow-redirects] [--first URL] [--unhooked-first] HOST PORT\n"
  .. "       converge-conformance vector FILE\n"

local json = require "converge.json"

-- ASCII JSON: U+2028 and U+2029 end a line for some readers
local function emit(t)
  io.stdout:write(json.encode(t), "\n")
  io.stdout:flush()
end

local array = json.array

local function vector(path)
  local f = assert(io.open(path, "rb"))
  local doc = cjson.decode(f:read("a"))
  f:close()
  local known = false
  for _, s in ipairs(vectors.SCHEMAS) do known = known or s == doc.schema end
  if not known then emit({ error = "unsupported-schema" }); return 2 end
  for _, c in ipairs(doc.tests) do
    local out = vectors.run_case(doc, c)
    if out.enabled then array(out.enabled) end
    if out.hosts then array(out.hosts) end
    emit(out)
  end
  return 0
end

local function check(dir, host, port_text, fp)
  if not port_text:match("^%d%d?%d?%d?%d?$") then emit({ error = "usage", message = "PORT must be decimal" }); return 2 end
  local ok, v = pcall(function()
    local client = converge.client.load(dir)
    local v = client:check(host, math.tointeger(tonumber(port_text)), fp)
    client:close()
    return v
  end)
  if not ok then
    if errors.is(v) then emit({ error = v.kind, message = v.message }); return 2 end
    error(v, 0)
  end
  local notaries = {}
  for i, r in ipairs(v.results) do
    notaries[i] = { name = r.name, outcome = r.vote, kind = r.kind, status = r.status or json.null, protocol = r.protocol or json.null }
  end
  emit({ verdict = v.trusted, cache = v.from_cache, relay = v.relay or json.null, notaries = array(notaries) })
  return v.trusted and 0 or 1
end

local HOOK_FLAGS = { ["--proxy"] = 1, ["--ca-file"] = 1, ["--path"] = 1, ["--first"] = 1,
  ["--follow-redirects"] = 0, ["--unhooked-first"] = 0 }

-- GET `u` the way code of the application without the hook would: socket.http over a LuaSec
-- connection that validates the CA chain against `cafile` only, through the same proxy (a
-- CONNECT tunnel: LuaSec's own https has no proxy), asking for keep-alive and leaving the
-- connection open (socket.http's close is a no-op here). Returns socket.http's results.
local kept = {}
local function unhooked_get(u, proxy, cafile, timeout)
  local socket = require "socket"
  local ssl = require "ssl"
  local http = require "socket.http"
  local tls = require "converge.tls"
  local ctx = assert(ssl.newcontext({ mode = "client", protocol = "any", verify = { "peer", "fail_if_no_peer_cert" },
    cafile = cafile or tls.SYSTEM_CA_FILE, options = { "all", "no_sslv2", "no_sslv3" } }))
  local function create()
    local conn = {}
    conn.settimeout = function() return 1 end
    function conn:connect(host, port)
      local sock = socket.try(tls.tcp(host, port, proxy, timeout))
      local c = socket.try(ssl.wrap(sock, ctx))
      if not host:match("^[%d.]+$") and not host:find(":", 1, true) then c:sni(host) end
      c:settimeout(timeout)
      socket.try(c:dohandshake())
      self.sock = c
      kept[#kept + 1] = c
      return 1
    end
    for _, name in ipairs({ "send", "receive", "getfd", "dirty" }) do
      conn[name] = function(self, ...) return self.sock[name](self.sock, ...) end
    end
    conn.close = function() return 1 end -- kept alive, as a pooling client of the application would
    return conn
  end
  local saved = http.PROXY
  http.PROXY = nil
  local ok, res, code = pcall(http.request, { url = u, create = create, redirect = false,
    headers = { connection = "keep-alive" }, sink = function() return 1 end })
  http.PROXY = saved
  if not ok then return nil, res end
  return res, code
end

-- Fetches https://HOST:PORT/P with converge.https.request (the README's hook), following
-- redirects with its own redirect handling (`redirect`) when asked; `--first` goes through the
-- same request function and converge client first (LuaSec keeps no client TLS session: there is
-- no cache to turn on), `--unhooked-first` through plain socket.http beside it (converge.https
-- keeps no connection that unhooked code could share).
local function hook(dir, rest)
  local opt = {}
  while rest[1] and HOOK_FLAGS[rest[1]] and #rest > HOOK_FLAGS[rest[1]] do
    local flag = table.remove(rest, 1)
    opt[flag] = HOOK_FLAGS[flag] == 0 or table.remove(rest, 1)
  end
  local path = opt["--path"] or "/"
  local port = rest[2] and rest[2]:match("^%d%d?%d?%d?%d?$") and math.tointeger(tonumber(rest[2]))
  if #rest ~= 2 or not port or port < 1 or port > 65535 or path:sub(1, 1) ~= "/" then io.stderr:write(USAGE); return 2 end
  local okc, client = pcall(converge.client.load, dir)
  if not okc then
    if errors.is(client) then emit({ error = client.kind, message = client.message }); return 2 end
    error(client, 0)
  end
  local host = rest[1]
  local url = "https://" .. (host:find(":", 1, true) and ("[" .. host .. "]") or host) .. ":" .. port .. path
  local https = require "converge.https"
  local timeout = client.config.total_timeout + 10
  local function failed(status, err, step)
    if errors.is_not_trusted(status) then
      emit({ connected = false, error = "untrusted", message = step .. status.message })
    else
      emit({ connected = false, error = "io", message = step .. tostring(status or err) })
    end
    client:close()
    return 1
  end
  if opt["--unhooked-first"] then
    local ok, err = unhooked_get(url, opt["--proxy"], opt["--ca-file"], timeout)
    if not ok then return failed(err, nil, "first request: ") end
  end
  if opt["--first"] then
    local ok, status, _, _, err = https.request({ url = opt["--first"], sink = function() return 1 end, client = client,
      proxy = opt["--proxy"], timeout = timeout, redirect = false })
    if not ok then return failed(status, err, "first request: ") end
  end
  local chunks = {}
  local sink = function(chunk) if chunk then chunks[#chunks + 1] = chunk end return 1 end
  local ok, status, _, _, err = https.request({ url = url, sink = sink, client = client, proxy = opt["--proxy"],
    timeout = timeout, redirect = opt["--follow-redirects"] == true })
  if not ok then return failed(status, err, "") end
  client:close()
  local body = table.concat(chunks):sub(1, 1024)
  emit({ connected = true, status = status, body = body })
  return 0
end

local a = arg
local code
if #a == 1 and a[1] == "info" then
  emit({ language = "lua", implementation = "converge-notary/client", version = converge.VERSION, schemas = array(vectors.SCHEMAS) })
  code = 0
elseif #a == 6 and a[1] == "check" and a[2] == "--config-dir" then
  code = check(a[3], a[4], a[5], a[6])
elseif #a >= 5 and a[1] == "hook" and a[2] == "--config-dir" then
  code = hook(a[3], { table.unpack(a, 4) })
elseif #a == 2 and a[1] == "vector" then
  code = vector(a[2])
else
  io.stderr:write(USAGE)
  code = 2
end
os.exit(code)
