-- The conformance CLI (client-libs/conformance/CLIENT-CLI.md): info, check, hook and vector,
-- one JSON object per line on stdout. Run through bin/converge-conformance (it sets the paths).
local cjson = require "cjson"
local converge = require "converge"
local errors = require "converge.errors"
local vectors = require "converge.vectors"

local USAGE = "usage: converge-conformance info\n"
  .. "       converge-conformance check --config-dir DIR HOST PORT FINGERPRINT\n"
  .. "       converge-conformance hook --config-dir DIR [--proxy URL] [--ca-file PEM] HOST PORT\n"
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

-- Fetches https://HOST:PORT/ with converge.https.request (the README's hook).
local function hook(dir, rest)
  local opt = {}
  while #rest >= 2 and (rest[1] == "--proxy" or rest[1] == "--ca-file") do
    opt[rest[1]] = rest[2]
    table.remove(rest, 1); table.remove(rest, 1)
  end
  local port = rest[2] and rest[2]:match("^%d%d?%d?%d?%d?$") and math.tointeger(tonumber(rest[2]))
  if #rest ~= 2 or not port or port < 1 or port > 65535 then io.stderr:write(USAGE); return 2 end
  local okc, client = pcall(converge.client.load, dir)
  if not okc then
    if errors.is(client) then emit({ error = client.kind, message = client.message }); return 2 end
    error(client, 0)
  end
  local host = rest[1]
  local url = "https://" .. (host:find(":", 1, true) and ("[" .. host .. "]") or host) .. ":" .. port .. "/"
  local https = require "converge.https"
  local chunks = {}
  local sink = function(chunk) if chunk then chunks[#chunks + 1] = chunk end return 1 end
  local ok, status, _, _, err = https.request({ url = url, sink = sink, client = client, proxy = opt["--proxy"],
    timeout = client.config.total_timeout + 10 })
  client:close()
  if not ok then
    if errors.is_not_trusted(status) then
      emit({ connected = false, error = "untrusted", message = status.message })
    else
      emit({ connected = false, error = "io", message = tostring(status or err) })
    end
    return 1
  end
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
