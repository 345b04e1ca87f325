-- Fake notaries, HTTPS sites and CONNECT proxies in a process of their own
-- (client-libs/conformance/fake_world.py), real TLS on 127.0.0.1 with the vectors' test keys.
-- Commands go to its stdin (io.popen); answers come back through a FIFO.
local lfs = require "lfs"
local cjson = require "cjson"
local json = require "converge.json"

local World = {}
World.__index = World

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
if here:sub(1, 1) ~= "/" then here = lfs.currentdir() .. "/" .. here end
World.ROOT = here .. "/../../.."

local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

--- fake_world.py with `...` as its arguments.
function World.new(...) return World.script("client-libs/conformance/fake_world.py", ...) end

--- Another world script (a path under the repository) with `...` as its arguments.
function World.script(script, ...)
  local dir = os.tmpname()
  os.remove(dir)
  assert(lfs.mkdir(dir))
  local fifo = dir .. "/out"
  assert(os.execute("mkfifo " .. quote(fifo)))
  local args = {}
  for i, a in ipairs({ ... }) do args[i] = quote(a) end
  local cmd = quote(World.ROOT .. "/.venv/bin/python") .. " " .. quote(World.ROOT .. "/" .. script)
    .. " " .. table.concat(args, " ") .. " > " .. quote(fifo)
  local self = setmetatable({ dir = dir, input = assert(io.popen(cmd, "w")) }, World)
  self.output = assert(io.open(fifo, "r"))
  self.info = cjson.decode((assert(self.output:read("l"), script .. " did not start")))
  return self
end

function World:ask(command)
  self.input:write(command, "\n")
  self.input:flush()
  return cjson.decode((assert(self.output:read("l"), "the world did not answer " .. command)))
end

function World:stop()
  if not self.input then return end
  self.input:write("quit\n")
  self.input:close()
  self.output:close()
  self.input = nil
  os.execute("rm -rf " .. quote(self.dir))
end

-- A configuration directory enabling notaries `indices` (0-based; all by default).
function World:config_dir(settings, extended, indices)
  local dir = os.tmpname()
  os.remove(dir)
  assert(lfs.mkdir(dir))
  lfs.mkdir(dir .. "/notaries-available")
  lfs.mkdir(dir .. "/notaries-enabled")
  local wanted
  if indices then wanted = {} for _, i in ipairs(indices) do wanted[i] = true end end
  for i, n in ipairs(self.info.notaries) do
    if not wanted or wanted[i - 1] then
      local file = string.format("%02d-%s.notary", i - 1, (n.name:gsub(" ", "-")))
      local f = assert(io.open(dir .. "/notaries-available/" .. file, "wb"))
      f:write(extended and n.bundle_extended or n.bundle)
      f:close()
      assert(lfs.link("../notaries-available/" .. file, dir .. "/notaries-enabled/" .. file, true))
    end
  end
  local s = { ["connect-timeout"] = 2, ["notary-timeout"] = 2, ["total-timeout"] = 4 }
  for k, v in pairs(settings or {}) do s[k] = v end
  local f = assert(io.open(dir .. "/converge.config", "wb"))
  f:write(json.encode(s))
  f:close()
  return dir
end

return World
