--- JSON at the protocol's edges, read the way the Python reference client reads it.
--
-- Parsing is lua-cjson. What it loses matters to two protocol rules (legacy recipe (a)
-- re-serialises a parsed body as Python's `json.dumps` does; extended answers must be RFC 8785
-- canonical): key order, `{}` apart from `[]`, integer literals apart from floats (`443` and
-- `443.0`), and Python's `NaN`/`Infinity`. So a lexical pass over the bytes (tokens only; no
-- values are built) first marks every key with its position, every string with a prefix and
-- every array with a first marker element, and turns every number into a marked string holding
-- its literal; it refuses raw control characters in strings and invalid UTF-8 (as Python does).
-- cjson then parses (depth bounded), and the tree is rebuilt with ordered objects and numbers
-- that keep their literal.
-- @module converge.json
local cjson = require "cjson"

local M = {}
M.MAX_DEPTH = 512
M.MAX_SAFE_INTEGER = 9007199254740991
M.MAX_CANONICAL_DEPTH = 16

local decoder = cjson.new()
decoder.decode_max_depth(M.MAX_DEPTH)
decoder.decode_invalid_numbers(false)

--- The JSON null.
M.null = setmetatable({}, { __tostring = function() return "null" end, __name = "converge.json.null" })

local Object = { __name = "converge.json.object" }
Object.__index = Object
M.Object = Object

--- A new ordered object (keys in order, map of values).
function M.object(keys, map) return setmetatable({ keys = keys or {}, map = map or {} }, Object) end
function Object:get(k) return self.map[k] end
function Object:has(k) return self.map[k] ~= nil end
function Object:count() return #self.keys end
--- A copy without `key`.
function Object:without(key)
  local keys, map = {}, {}
  for _, k in ipairs(self.keys) do
    if k ~= key then keys[#keys + 1] = k; map[k] = self.map[k] end
  end
  return M.object(keys, map)
end

local Number = { __name = "converge.json.number" }
Number.__index = Number
M.Number = Number

local Array = { __name = "converge.json.array" }
M.Array = Array

--- A number as written: `literal`, `int` (an integer literal).
function M.number(literal)
  return setmetatable({ literal = literal, int = literal:match("^%-?0$") ~= nil or literal:match("^%-?[1-9]%d*$") ~= nil }, Number)
end

function M.is_object(v) return getmetatable(v) == Object end
function M.is_array(v) return getmetatable(v) == Array end
function M.is_number(v) return getmetatable(v) == Number end
function M.is_string(v) return type(v) == "string" end

local function strtod(s)
  if s == "NaN" then return 0 / 0 end
  if s == "Infinity" then return math.huge end
  if s == "-Infinity" then return -math.huge end
  return tonumber(s) + 0.0
end

--- The double value of a number (integer or float literal), else nil.
function M.number_value(v)
  if getmetatable(v) ~= Number then return nil end
  return strtod(v.literal)
end

--- The integer an integer literal stands for, else nil. Literals beyond 18 digits come back as
-- +-1e19, outside every range the protocol accepts.
function M.int(v)
  if getmetatable(v) ~= Number or not v.int then return nil end
  local digits = v.literal:gsub("^%-", "")
  if #digits > 18 then return v.literal:sub(1, 1) == "-" and -1e19 or 1e19 end
  return math.tointeger(tonumber(v.literal))
end

local function number_end(t, i)
  -- the longest JSON number, NaN, Infinity or -Infinity at i; nil when none
  local j = i
  if t:sub(j, j) == "-" then j = j + 1 end
  for _, word in ipairs({ "Infinity", "NaN" }) do
    if t:sub(j, j + #word - 1) == word and (word ~= "NaN" or j == i) then return j + #word - 1 end
  end
  local a, b = t:find("^0", j)
  if not a then a, b = t:find("^[1-9]%d*", j) end
  if not a then return nil end
  local c, d = t:find("^%.%d+", b + 1)
  if c then b = d end
  c, d = t:find("^[eE][+-]?%d+", b + 1)
  if c then b = d end
  return b
end

local function mark(t)
  local out, n, seq, i = {}, #t, 0, 1
  while i <= n do
    local a, b = t:find('^[^"%-0-9NI%[]+', i)
    if a then
      out[#out + 1] = t:sub(a, b)
      i = b + 1
    else
      local c = t:sub(i, i)
      if c == '"' then
        local j, e = i + 1, nil
        repeat
          local q = t:find('["\\]', j)
          if not q then return nil end -- unterminated: not JSON
          if t:sub(q, q) == "\\" then j = q + 2 else e = q end
        until e
        local body = t:sub(i + 1, e - 1)
        if body:find("[%z\1-\31]") then return nil end -- Python refuses raw control characters
        if t:find("^[ \t\r\n]*:", e + 1) then
          out[#out + 1] = '"\\u0002' .. seq .. '\\u0003' .. body .. '"'
          seq = seq + 1
        else
          out[#out + 1] = '"\\u0000' .. body .. '"'
        end
        i = e + 1
      elseif c == "[" then
        out[#out + 1] = t:find("^[ \t\r\n]*%]", i + 1) and '["\\u0004"' or '["\\u0004",'
        i = i + 1
      else
        local e = number_end(t, i)
        if e and not t:find("^[%w%.+%-]", e + 1) then
          out[#out + 1] = '"\\u0001' .. t:sub(i, e) .. '"'
          i = e + 1
        else
          return nil -- outside strings these characters only begin numbers: not JSON
        end
      end
    end
  end
  return table.concat(out)
end

local function rebuild(v)
  local tv = type(v)
  if tv == "string" then
    local m = v:byte(1)
    if m == 1 then return M.number(v:sub(2)) end
    return v:sub(2)
  end
  if v == cjson.null then return M.null end
  if tv ~= "table" then return v end -- a boolean
  if v[1] == "\4" then
    local arr = setmetatable({}, Array)
    for k = 2, #v do arr[k - 1] = rebuild(v[k]) end
    return arr
  end
  local entries = {}
  for k, x in pairs(v) do
    local pos, name = k:match("^\2(%d+)\3(.*)$")
    entries[#entries + 1] = { tonumber(pos), name, x }
  end
  table.sort(entries, function(a, b) return a[1] < b[1] end)
  local keys, map = {}, {}
  for _, e in ipairs(entries) do
    if map[e[2]] == nil then keys[#keys + 1] = e[2] end
    map[e[2]] = rebuild(e[3])
  end
  return M.object(keys, map)
end

--- Python's `json.loads(bytes)`: the value and true, or nil and false when the text is not JSON
-- (or nests deeper than 512).
function M.parse(bytes)
  if type(bytes) ~= "string" or not utf8.len(bytes) then return nil, false end
  local marked = mark(bytes)
  if not marked then return nil, false end
  local ok, raw = pcall(decoder.decode, marked)
  if not ok then return nil, false end
  return rebuild(raw), true
end

-- ------------------------------------------------------------------ Python json.dumps

--- A float as Python's repr writes it.
function M.float_repr(f)
  if f ~= f then return "NaN" end
  if f == math.huge then return "Infinity" end
  if f == -math.huge then return "-Infinity" end
  if f == 0 then return (1 / f < 0) and "-0.0" or "0.0" end
  local s
  for p = 1, 17 do
    s = string.format("%." .. (p - 1) .. "e", f)
    if tonumber(s) == f then break end
  end
  local neg, mant, exp = s:match("^(%-?)([%d%.]+)e([+-]%d+)$")
  local digits = mant:gsub("%.", ""):gsub("0+$", "")
  if digits == "" then digits = "0" end
  exp = tonumber(exp)
  local out
  if exp >= -4 and exp < 16 then
    if exp >= 0 then
      if #digits <= exp + 1 then
        out = digits .. string.rep("0", exp + 1 - #digits) .. ".0"
      else
        out = digits:sub(1, exp + 1) .. "." .. digits:sub(exp + 2)
      end
    else
      out = "0." .. string.rep("0", -exp - 1) .. digits
    end
  else
    local m = #digits > 1 and (digits:sub(1, 1) .. "." .. digits:sub(2)) or digits
    out = string.format("%se%s%02d", m, exp < 0 and "-" or "+", math.abs(exp))
  end
  return neg .. out
end

local PY_ESC = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t", ["\b"] = "\\b", ["\f"] = "\\f" }

local function py_string(s)
  local out = { '"' }
  for _, c in utf8.codes(s) do
    local ch = utf8.char(c)
    if PY_ESC[ch] then
      out[#out + 1] = PY_ESC[ch]
    elseif c >= 0x20 and c <= 0x7e then
      out[#out + 1] = ch
    elseif c > 0xffff then
      local u = c - 0x10000
      out[#out + 1] = string.format("\\u%04x\\u%04x", 0xd800 + (u >> 10), 0xdc00 + (u & 0x3ff))
    else
      out[#out + 1] = string.format("\\u%04x", c)
    end
  end
  out[#out + 1] = '"'
  return table.concat(out)
end

--- `v` serialised as Python's `json.dumps(v)` with default arguments.
function M.py_dumps(v)
  if v == M.null then return "null" end
  if v == true then return "true" end
  if v == false then return "false" end
  if type(v) == "string" then return py_string(v) end
  local mt = getmetatable(v)
  if mt == Number then
    if v.int then return (v.literal:gsub("^%-(0+)$", "0")) end
    return M.float_repr(strtod(v.literal))
  end
  if mt == Array then
    local parts = {}
    for i = 1, #v do parts[i] = M.py_dumps(v[i]) end
    return "[" .. table.concat(parts, ", ") .. "]"
  end
  if mt == Object then
    local parts = {}
    for i, k in ipairs(v.keys) do parts[i] = py_string(k) .. ": " .. M.py_dumps(v.map[k]) end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  error("not a JSON value", 2)
end

--- A Lua value as ASCII JSON text (for output: arrays are tables with the Array metatable or
-- non-empty sequences, other tables objects with sorted keys; json.null and nil are null;
-- invalid UTF-8 in strings becomes U+FFFD).
function M.encode(v)
  if v == nil or v == M.null then return "null" end
  local t = type(v)
  if t == "boolean" then return tostring(v) end
  if t == "number" then
    if math.type(v) == "integer" then return tostring(v) end
    if v == math.floor(v) and math.abs(v) < 2^53 then return string.format("%d", v) end
    return M.float_repr(v)
  end
  if t == "string" then
    if not utf8.len(v) then
      local out, i = {}, 1
      while i <= #v do
        local ok, cp = pcall(utf8.codepoint, v, i)
        if ok then
          local ch = utf8.char(cp)
          out[#out + 1] = ch
          i = i + #ch
        else
          out[#out + 1] = "\u{FFFD}"
          i = i + 1
        end
      end
      v = table.concat(out)
    end
    return py_string(v)
  end
  local mt = getmetatable(v)
  if mt == Number then return M.py_dumps(v) end
  if mt == Object then return M.py_dumps(v) end
  if mt == Array or (mt == nil and #v > 0) then
    local parts = {}
    for i = 1, #v do parts[i] = M.encode(v[i]) end
    return "[" .. table.concat(parts, ",") .. "]"
  end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  local parts = {}
  for i, k in ipairs(keys) do parts[i] = py_string(k) .. ":" .. M.encode(v[k]) end
  return "{" .. table.concat(parts, ",") .. "}"
end

--- A table marked as a JSON array (so that an empty one is written as []).
function M.array(t) return setmetatable(t or {}, Array) end

-- ------------------------------------------------------------------ RFC 8785

local C_ESC = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t", ["\b"] = "\\b", ["\f"] = "\\f" }

local function canon_string(s)
  return '"' .. s:gsub('[%z\1-\31"\\]', function(c) return C_ESC[c] or string.format("\\u%04x", c:byte()) end) .. '"'
end

--- `v` as RFC 8785 canonical JSON for the subset the extended format uses: objects with ASCII
-- keys, arrays, strings, booleans, null and integers of magnitude at most 2^53 - 1, nested at
-- most 16 deep. nil when the value is outside the subset.
function M.canonical(v, depth)
  depth = depth or 0
  if depth > M.MAX_CANONICAL_DEPTH then return nil end
  if v == M.null then return "null" end
  if v == true then return "true" end
  if v == false then return "false" end
  if type(v) == "string" then return canon_string(v) end
  local mt = getmetatable(v)
  if mt == Number then
    if not v.int then return nil end
    local digits = v.literal:gsub("^%-", "")
    if #digits > 16 then return nil end
    local n = math.tointeger(tonumber(v.literal))
    if not n or math.abs(n) > M.MAX_SAFE_INTEGER then return nil end
    return tostring(n)
  end
  if mt == Array then
    local parts = {}
    for i = 1, #v do
      local c = M.canonical(v[i], depth + 1)
      if not c then return nil end
      parts[i] = c
    end
    return "[" .. table.concat(parts, ",") .. "]"
  end
  if mt == Object then
    local keys = {}
    for i, k in ipairs(v.keys) do
      if k:find("[\128-\255]") then return nil end
      keys[i] = k
    end
    table.sort(keys)
    local parts = {}
    for i, k in ipairs(keys) do
      local c = M.canonical(v.map[k], depth + 1)
      if not c then return nil end
      parts[i] = canon_string(k) .. ":" .. c
    end
    return "{" .. table.concat(parts, ",") .. "}"
  end
  return nil
end

return M
