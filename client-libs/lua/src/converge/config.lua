--- The configuration directory shared by every converge client. Discovery: an explicit
-- directory (must exist); $CONVERGE_CONFIG_DIR (must exist when set); ~/.config/converge
-- ($XDG_CONFIG_HOME/converge), if it exists; /usr/local/etc/converge, if it exists. Layout:
-- converge.config (JSON, every key optional), notaries-available/*.notary and
-- notaries-enabled/ symlinks; the 2014 layout (notaries-dir naming the enabled folder) too.
-- @module converge.config
local lfs = require "lfs"
local errors = require "converge.errors"
local json = require "converge.json"
local bundle = require "converge.bundle"
local policy = require "converge.policy"

local M = {}
M.CONFIG_FILE = "converge.config"
M.ENV_VAR = "CONVERGE_CONFIG_DIR"
M.SYSTEM_DIR = "/usr/local/etc/converge"
M.DEFAULT_CACHE_LIFETIME = 604800
M.DEFAULT_MAX_SKEW = 300
M.MAX_RESPONSE_BYTES = 262144
M.MAX_CONFIG_BYTES = 65536
M.MAX_NOTARY_FILES = 64
local KNOWN = {}
for _, k in ipairs({ "db", "userdb", "notaries-dir", "notary-agreement", "quorum", "connect-timeout", "notary-timeout",
  "total-timeout", "cache-lifetime", "stand-aside", "early-return", "bounce", "bounce-port", "max-response-bytes",
  "extended", "extended-nonce", "max-skew" }) do KNOWN[k] = true end

local function bad(d) errors.throw("config", d) end
local function is_dir(p) return lfs.attributes(p, "mode") == "directory" end

--- Creates `dir` and its missing parents.
function M.mkdir_p(dir)
  local path = dir:sub(1, 1) == "/" and "" or "."
  for seg in dir:gmatch("[^/]+") do
    path = path .. "/" .. seg
    if not lfs.attributes(path, "mode") then lfs.mkdir(path) end
  end
end
local function exists(p) return lfs.attributes(p, "mode") ~= nil end

--- Finds the configuration directory (`explicit` may be nil; `env` a table, default os.getenv).
function M.discover(explicit, env)
  local get = env and function(k) return env[k] end or os.getenv
  if explicit ~= nil and explicit ~= "" then
    if not is_dir(explicit) then bad("configuration directory " .. explicit .. " does not exist") end
    return explicit
  end
  local d = get(M.ENV_VAR)
  if d ~= nil and d ~= "" then
    if not is_dir(d) then bad("$" .. M.ENV_VAR .. "=" .. d .. " is not a directory") end
    return d
  end
  local xdg = get("XDG_CONFIG_HOME")
  local user = (xdg ~= nil and xdg ~= "") and (xdg .. "/converge") or ((get("HOME") or "") .. "/.config/converge")
  for _, x in ipairs({ user, M.SYSTEM_DIR }) do
    if is_dir(x) then return x end
  end
  bad("no configuration: set $" .. M.ENV_VAR .. ", or create " .. user .. " or " .. M.SYSTEM_DIR)
end

local function number(raw, key, default, low, high)
  if raw[key] == nil then return default end
  local v = json.number_value(raw[key])
  if not v or v ~= v or v < low or v > high then bad(key .. " must be a number in [" .. low .. ", " .. high .. "]") end
  return v
end

local function int(raw, key, default, low, high, what)
  if raw[key] == nil then return default end
  local v = json.int(raw[key])
  if not v or v < low or v > high then bad(key .. " must be " .. what) end
  return v
end

local function bool(raw, key, default)
  if raw[key] == nil then return default end
  local v = raw[key]
  if type(v) ~= "boolean" then bad(key .. " must be true or false") end
  return v
end

local function path(dir, raw, key, default)
  if raw[key] == nil then return default and (dir .. "/" .. default) or nil end
  local v = raw[key]
  if v == json.null then return nil end
  if type(v) ~= "string" or v == "" then bad(key .. " must be a path") end
  if v == "~" or v:sub(1, 2) == "~/" then v = (os.getenv("HOME") or "") .. v:sub(2) end
  return v:sub(1, 1) == "/" and v or (dir .. "/" .. v)
end

local Config = {}
Config.__index = Config
M.Config = Config

--- Validates the decoded converge.config (an ordered object) of `dir`.
function M.from_raw(dir, raw)
  local unknown = {}
  for k in pairs(raw) do
    if not KNOWN[k] and k ~= json.EMPTY then unknown[#unknown + 1] = k end
  end
  table.sort(unknown)
  if #unknown > 0 then bad("unknown configuration keys: " .. table.concat(unknown, ", ")) end
  local c = setmetatable({ directory = dir }, Config)
  c.bounce_port = int(raw, "bounce-port", 4242, 1, 65535, "an integer port 1..65535")
  if raw["cache-lifetime"] == json.null then
    c.cache_lifetime = nil
  else
    c.cache_lifetime = number(raw, "cache-lifetime", M.DEFAULT_CACHE_LIFETIME, 0, 10 * 365 * 86400)
  end
  c.quorum = int(raw, "quorum", 3, 1, 16, "an integer 1..16")
  c.max_response_bytes = int(raw, "max-response-bytes", M.MAX_RESPONSE_BYTES, 1024, 16 * 1024 * 1024, "an integer 1024..16777216")
  c.extended = "prefer"
  if raw["extended"] ~= nil then
    local e = raw["extended"]
    if e ~= "off" and e ~= "prefer" and e ~= "fallback" and e ~= "require" then
      bad("extended must be one of off, prefer, fallback, require")
    end
    c.extended = e
  end
  c.max_skew = int(raw, "max-skew", M.DEFAULT_MAX_SKEW, 0, 86400, "an integer 0..86400 (seconds)")
  c.extended_nonce = bool(raw, "extended-nonce", true)
  c.agreement = "majority"
  if raw["notary-agreement"] ~= nil then
    local a = raw["notary-agreement"]
    if type(a) ~= "string" then bad("notary-agreement must be a string") end
    c.agreement = policy.parse(a)
  end
  c.db = path(dir, raw, "db", "cache.sqlite3")
  c.userdb = path(dir, raw, "userdb", nil)
  c.notaries_dir = path(dir, raw, "notaries-dir", ".")
  c.connect_timeout = number(raw, "connect-timeout", 3.0, 0.01, 600)
  c.notary_timeout = number(raw, "notary-timeout", 5.0, 0.01, 600)
  c.total_timeout = number(raw, "total-timeout", 10.0, 0.01, 3600)
  c.stand_aside = bool(raw, "stand-aside", true)
  c.early_return = bool(raw, "early-return", true)
  c.bounce = bool(raw, "bounce", false)
  return c
end

local function read_file(p, limit)
  local f = io.open(p, "rb")
  if not f then return nil end
  local data = f:read(limit and (limit + 1) or "a") or ""
  f:close()
  return data
end

--- Discovers (`explicit` may be nil) and loads a configuration directory.
function M.load(explicit, env)
  local dir = M.discover(explicit, env)
  local f = dir .. "/" .. M.CONFIG_FILE
  local raw = {}
  if exists(f) then
    local text = read_file(f, M.MAX_CONFIG_BYTES)
    if not text then bad("cannot read " .. f) end
    if #text > M.MAX_CONFIG_BYTES then bad(f .. " larger than " .. M.MAX_CONFIG_BYTES .. " bytes") end
    local v = json.decode(text)
    if not json.is_object(v) then bad(f .. " must hold a JSON object") end
    raw = v
  end
  return M.from_raw(dir, raw)
end

local function notary_files(dir)
  local out = {}
  if not is_dir(dir) then return out end
  for name in lfs.dir(dir) do
    if name:sub(-7) == ".notary" then out[#out + 1] = dir .. "/" .. name end
  end
  table.sort(out)
  return out
end

local function subfolders(dir) return is_dir(dir .. "/notaries-available") or is_dir(dir .. "/notaries-enabled") end

--- Whether `dir` is the 2014 libraries' layout: .notary files and neither subfolder.
function M.is_flat(dir) return not subfolders(dir) and #notary_files(dir) > 0 end

--- Where list_notaries looks, for "no notaries enabled" messages.
function M.where_read(dir)
  if dir == nil then return "no notaries-dir" end
  local standard = dir .. "/notaries-enabled/"
  return subfolders(dir) and standard or (standard .. " and " .. dir .. "/*.notary")
end

local function normalize(p)
  local parts = {}
  for seg in p:gmatch("[^/]+") do
    if seg == ".." then
      if #parts > 0 then parts[#parts] = nil end
    elseif seg ~= "." then
      parts[#parts + 1] = seg
    end
  end
  return "/" .. table.concat(parts, "/")
end

local function absolute(p)
  if p:sub(1, 1) == "/" then return normalize(p) end
  return normalize((lfs.currentdir() or "/") .. "/" .. p)
end

--- The file a path finally names (symlinks followed, at most 16), or nil when it does not exist.
local function realpath(p)
  p = absolute(p)
  for _ = 1, 16 do
    local target = lfs.symlinkattributes(p, "target")
    if lfs.symlinkattributes(p, "mode") ~= "link" or not target then
      return exists(p) and p or nil
    end
    p = target:sub(1, 1) == "/" and normalize(target) or normalize(p:match("^(.*)/[^/]*$") .. "/" .. target)
  end
  return nil
end

--- Every bundle in `dir`, sorted by file name: a list of {bundle, enabled, path}.
function M.list_notaries(dir)
  local targets, extra = {}, {}
  local flat = M.is_flat(dir)
  if flat then
    for _, p in ipairs(notary_files(dir)) do
      if exists(p) then extra[#extra + 1] = p end
    end
  elseif is_dir(dir .. "/notaries-enabled") then
    for _, p in ipairs(notary_files(dir .. "/notaries-enabled")) do
      if lfs.symlinkattributes(p, "mode") == "link" then
        local r = realpath(p)
        if r then targets[r] = true end
      elseif exists(p) then
        extra[#extra + 1] = p
      end
    end
  end
  local files = (not flat and is_dir(dir .. "/notaries-available")) and notary_files(dir .. "/notaries-available") or {}
  if #files + #extra > M.MAX_NOTARY_FILES then bad("more than " .. M.MAX_NOTARY_FILES .. " notary bundles") end
  local is_extra = {}
  for _, p in ipairs(extra) do is_extra[p] = true end
  local out = {}
  local all = {}
  for _, p in ipairs(files) do all[#all + 1] = p end
  for _, p in ipairs(extra) do all[#all + 1] = p end
  for _, p in ipairs(all) do
    local data = read_file(p)
    if not data then bad("cannot read " .. p) end
    local ok, b = pcall(bundle.parse, data)
    if not ok then
      if errors.is(b) then errors.throw("bundle", p .. ": " .. b.detail) end
      error(b, 0)
    end
    local r = realpath(p)
    out[#out + 1] = { bundle = b, enabled = is_extra[p] or (r ~= nil and targets[r] == true), path = p }
  end
  return out
end

-- What list_notaries read depends on: the folders and every .notary file in them.
local function signature(dir)
  local paths = { dir, dir .. "/notaries-enabled", dir .. "/notaries-available" }
  for i = 1, 3 do
    for _, p in ipairs(notary_files(paths[i])) do paths[#paths + 1] = p end
  end
  local parts = {}
  for _, p in ipairs(paths) do
    local a = lfs.attributes(p)
    parts[#parts + 1] = p .. ":" .. (a and (a.ino .. ":" .. a.size .. ":" .. a.modification .. ":" .. a.change) or "-")
  end
  return table.concat(parts, "\0")
end

--- The enabled logical notaries, de-duplicated by name (the first file wins). The bundles are
-- parsed again only when a file or folder changed.
function Config:notaries()
  local found = {}
  if self.bundles then
    found = self.bundles
  elseif self.notaries_dir then
    local sig = signature(self.notaries_dir)
    if not (self._read and self._read[1] == sig) then
      local list = {}
      for _, f in ipairs(M.list_notaries(self.notaries_dir)) do
        if f.enabled then list[#list + 1] = f.bundle end
      end
      self._read = { sig, list }
    end
    found = self._read[2]
  end
  local seen, out = {}, {}
  for _, b in ipairs(found) do
    if not seen[b.name] then seen[b.name] = true; out[#out + 1] = b end
  end
  return out
end

return M
