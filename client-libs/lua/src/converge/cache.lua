--- The local cache, in the schema of the 2011 add-on so that one file serves every client:
-- fingerprints(id integer primary key, location TEXT, fingerprint TEXT, timestamp INTEGER) with
-- a unique index on (location, fingerprint). WAL and a busy timeout let processes share it.
-- LuaSQL has no bound parameters: every value is escaped by the driver (con:escape) and the
-- values are already restricted (host names, canonical fingerprints, integers).
-- @module converge.cache
local luasql = require "luasql.sqlite3"
local lfs = require "lfs"
local errors = require "converge.errors"

local M = {}
local env

local Cache = {}
Cache.__index = Cache
M.Cache = Cache

local function io_error(d) errors.throw("cache-io", d) end

--- Opens (and, unless `read_only`, creates) a cache file.
function M.open(path, read_only)
  env = env or luasql.sqlite3()
  if not read_only then
    local dir = path:match("^(.*)/[^/]*$")
    if dir and dir ~= "" and not lfs.attributes(dir, "mode") then require("converge.config").mkdir_p(dir) end
  elseif not lfs.attributes(path, "mode") then
    io_error("cannot open cache " .. path .. ": no such file")
  end
  local con, err = env:connect(path)
  if not con then io_error("cannot open cache " .. path .. ": " .. tostring(err)) end
  local self = setmetatable({ path = path, read_only = read_only and true or false, con = con }, Cache)
  local function exec(sql)
    local ok, e = con:execute(sql)
    if not ok then con:close(); io_error("cannot open cache " .. path .. ": " .. tostring(e)) end
    if type(ok) == "userdata" then ok:close() end
  end
  exec("PRAGMA busy_timeout = 5000")
  if read_only then
    exec("PRAGMA query_only = 1")
  else
    exec("PRAGMA journal_mode = WAL")
    exec("PRAGMA synchronous = NORMAL")
    exec("CREATE TABLE IF NOT EXISTS fingerprints (id integer primary key, location TEXT, fingerprint TEXT, timestamp INTEGER)")
    exec("CREATE UNIQUE INDEX IF NOT EXISTS location_fingerprint on fingerprints (location, fingerprint)")
  end
  return self
end

--- The entry's timestamp, or nil when there is none (or it is not an integer).
function Cache:lookup(location, fingerprint)
  local con = self.con
  local cur, err = con:execute("SELECT timestamp, typeof(timestamp) FROM fingerprints WHERE location = '"
    .. con:escape(location) .. "' AND fingerprint = '" .. con:escape(fingerprint) .. "'")
  if not cur then io_error("cache lookup failed: " .. tostring(err)) end
  local ts, t = cur:fetch()
  cur:close()
  if t ~= "integer" then return nil end
  return math.tointeger(tonumber(ts))
end

--- Records a trusted fingerprint at `timestamp` (unix seconds).
function Cache:store(location, fingerprint, timestamp)
  if self.read_only then io_error("cache opened read-only") end
  local con = self.con
  local ok, err = con:execute("INSERT INTO fingerprints (location, fingerprint, timestamp) VALUES ('" .. con:escape(location)
    .. "', '" .. con:escape(fingerprint) .. "', " .. string.format("%d", math.floor(timestamp))
    .. ") ON CONFLICT (location, fingerprint) DO UPDATE SET timestamp = excluded.timestamp")
  if not ok then io_error("cache write failed: " .. tostring(err)) end
end

function Cache:close()
  if self.con then self.con:close(); self.con = nil end
end

return M
