-- The Lua client's benchmark (bench.sh, through client-libs/conformance/bench_language.py):
--   converge-bench CACHE_DIR LEGACY_DIR EXTENDED_DIR HOST PORT FP N_CACHE N_RT
-- One JSON line per measurement: the local-cache hit, legacy and extended round trips.
local socket = require "socket"
local json = require "converge.json"
local client = require "converge.client"

local cache_dir, legacy_dir, ext_dir, host, port, fp, n_cache, n_rt = table.unpack(arg)
port, n_cache, n_rt = math.tointeger(tonumber(port)), math.tointeger(tonumber(n_cache)), math.tointeger(tonumber(n_rt))

local function timed(n, f)
  local out = {}
  for i = 1, n do
    local t0 = socket.gettime()
    f()
    out[i] = (socket.gettime() - t0) * 1e6
  end
  return out
end

local function summary(name, us)
  table.sort(us)
  local function q(p) return us[math.min(#us, math.floor(p * #us) + 1)] end
  local sum = 0
  for _, x in ipairs(us) do sum = sum + x end
  local function r(x) return math.floor(x * 10 + 0.5) / 10 end
  return json.encode({ measurement = name, n = #us, p50_us = r(q(0.5)), p99_us = r(q(0.99)), mean_us = r(sum / #us) })
end

local cached = client.load(cache_dir)
if not cached:check(host, port, fp).trusted then io.stderr:write("the notary does not confirm the target\n"); os.exit(1) end
timed(math.min(n_cache, 1000), function() cached:check(host, port, fp) end)
print(summary("cache hit", timed(n_cache, function() assert(cached:check(host, port, fp).from_cache, "not a cache hit") end)))
for _, m in ipairs({ { "round trip, legacy", legacy_dir }, { "round trip, extended", ext_dir } }) do
  local c = client.load(m[2])
  timed(10, function() c:check(host, port, fp) end)
  print(summary(m[1], timed(n_rt, function() assert(c:check(host, port, fp).trusted, "round trip failed") end)))
end
