-- Every shared vector file through converge.vectors.run_case, compared the way the conformance
-- runner compares (each field the case states); no expected failures.
local lfs = require "lfs"
local cjson = require "cjson"
local json = require "converge.json"
local vectors = require "converge.vectors"
local World = require "world"

local DIR = World.ROOT .. "/client-libs/vectors"

local function load(name)
  local f = assert(io.open(DIR .. "/" .. name, "rb"))
  local doc = cjson.decode(f:read("a"))
  f:close()
  return doc
end

-- JSON text of a value read by cjson (nulls, numbers as floats) or produced by run_case
local function canon(v)
  if v == cjson.null or v == json.null or v == nil then return "null" end
  if type(v) == "number" then return json.encode(math.tointeger(v) or v) end
  if type(v) == "table" and getmetatable(v) == nil then
    if #v > 0 or next(v) == nil then
      local parts = {}
      for i, x in ipairs(v) do parts[i] = canon(x) end
      if #v > 0 or getmetatable(v) == json.Array then return "[" .. table.concat(parts, ",") .. "]" end
      return "[]"
    end
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys)
    local parts = {}
    for i, k in ipairs(keys) do parts[i] = json.encode(k) .. ":" .. canon(v[k]) end
    return "{" .. table.concat(parts, ",") .. "}"
  end
  if type(v) == "table" and getmetatable(v) == json.Array then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = canon(x) end
    return "[" .. table.concat(parts, ",") .. "]"
  end
  return json.encode(v)
end

local function diff(c, out)
  local d = {}
  local fields = { table.unpack(vectors.COMPARED) }
  for _, f in ipairs(vectors.compared(c)) do fields[#fields + 1] = f end
  for _, f in ipairs(fields) do
    if c[f] ~= nil and canon(c[f]) ~= canon(out[f]) then d[#d + 1] = f end
  end
  return d
end

describe("the shared vectors", function()
  local files = {}
  for name in lfs.dir(DIR) do
    -- canonical-json.json tests the notary's encoder: clients have none and must not run it
    if name:match("%.json$") and name ~= "canonical-json.json" then files[#files + 1] = name end
  end
  table.sort(files)

  it("are all there", function() assert.is_true(#files >= 9) end)

  for _, name in ipairs(files) do
    local doc = load(name)
    local known = false
    for _, s in ipairs(vectors.SCHEMAS) do known = known or s == doc.schema end
    -- every shared vector file's schema is implemented: a new one fails until it is
    if not known then
      it(name .. ": schema " .. tostring(doc.schema) .. " is implemented", function() assert.is_true(known) end)
    else it("pass every case of " .. name, function()
      assert.is_true(#doc.tests > 0)
      local failures = {}
      for _, c in ipairs(doc.tests) do
        local out = vectors.run_case(doc, c)
        local d = diff(c, out)
        if #d > 0 then failures[#failures + 1] = "case " .. tostring(c.id) .. ": " .. table.concat(d, ",") .. ": " .. json.encode(out) end
      end
      assert.are.same({}, failures)
    end) end
  end

  it("comparison catches a wrong output (the must-fail twin)", function()
    local doc = load("fingerprints.json")
    local c = doc.tests[1]
    local out = vectors.run_case(doc, c)
    assert.are.same({}, diff(c, out))
    out.canonical = "00"
    assert.are.same({ "canonical" }, diff(c, out))
    assert.has_error(function() vectors.run_case({ schema = "converge-vectors/unknown/1" }, c) end)
  end)
end)
