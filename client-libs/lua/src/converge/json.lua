--- JSON at the protocol's edges: lua-cjson, configured strictly, behind the bounds scan.
--
-- A notary answer is parsed only after its signature verified, and exactly the bytes that
-- verified (docs/wire-format.md, "The bounds scan" and "One parse boundary"): `scan` bounds
-- nesting (32 levels) and numbers (integers of at most 15 digits), then `decode` parses with
-- cjson. cjson is told to refuse NaN, Infinity and hex numbers and to stop at 64 levels; it
-- keeps the last of repeated member names and refuses comments, trailing commas and member
-- names that are not strings. What cjson 2.1.0 does not refuse itself is refused before it
-- runs: invalid UTF-8 (lone surrogates included), raw control characters in strings and NUL
-- bytes (cjson would stop reading at the first NUL). cjson 2.1.0 also decodes `{}` and `[]`
-- alike, so an empty object is handed to it with one member named "\0" (an object is a table
-- with string keys, an array one with integer keys or none).
-- Values: tables, strings, booleans, numbers (floats; `int` gives the integer) and `null`.
-- @module converge.json
local cjson = require "cjson"

local M = {}
M.MAX_DEPTH = 32
M.MAX_SAFE_INTEGER = 9007199254740991
--- The member name an empty object is given (see the module).
M.EMPTY = "\0"

local decoder = cjson.new()
decoder.decode_max_depth(64)
decoder.decode_invalid_numbers(false)

--- The JSON null.
M.null = cjson.null

local Array = { __name = "converge.json.array" }
M.Array = Array

--- A table marked as a JSON array for `encode` (so that an empty one is written as []).
function M.array(t) return setmetatable(t or {}, Array) end

function M.is_object(v) return type(v) == "table" and next(v) ~= nil and v[1] == nil end
function M.is_array(v) return type(v) == "table" and (next(v) == nil or v[1] ~= nil) end

--- The integer a number stands for, else nil.
function M.int(v) return type(v) == "number" and math.tointeger(v) or nil end

--- A number's value, else nil.
function M.number_value(v) return type(v) == "number" and v or nil end

--- The bounds scan (the same in every client): outside strings at most 32 levels of `[`/`{`
-- open at once, and every number token an integer of at most 15 digits. It produces no values.
function M.scan(t)
  local depth, i, n = 0, 1, #t
  while i <= n do
    local a = t:find('["%[{%]}%-0-9]', i)
    if not a then return true end
    local c = t:sub(a, a)
    if c == '"' then
      local j = a + 1
      while true do
        local q = t:find('["\\]', j)
        if not q then return false end
        if t:sub(q, q) == "\\" then j = q + 2 else i = q + 1; break end
      end
    elseif c == "[" or c == "{" then
      depth = depth + 1
      if depth > M.MAX_DEPTH then return false end
      i = a + 1
    elseif c == "]" or c == "}" then
      depth = depth - 1
      i = a + 1
    else
      local _, e = t:find("^[%-+.0-9eE]+", a)
      local tok = t:sub(a, e)
      if not (tok:match("^%-?0$") or tok:match("^%-?[1-9]%d*$") and #tok:gsub("^%-", "") <= 15) then return false end
      i = e + 1
    end
  end
  return true
end

-- What cjson does not refuse itself, then empty objects given a member (see the module).
local function prepared(t)
  if not utf8.len(t) or t:find("%z") then return nil end
  local out, i, n = {}, 1, #t
  while i <= n do
    local a = t:find('["{]', i)
    if not a then break end
    if t:sub(a, a) == '"' then
      local j, e = a + 1, nil
      repeat
        local q = t:find('["\\]', j)
        if not q then return nil end
        if t:sub(q, q) == "\\" then j = q + 2 else e = q end
      until e
      if t:sub(a + 1, e - 1):find("[\1-\31]") then return nil end
      out[#out + 1] = t:sub(i, e)
      i = e + 1
    else
      local _, close = t:find("^{[ \t\r\n]*}", a)
      out[#out + 1] = t:sub(i, a)
      if close then out[#out + 1] = '"\\u0000":null' end
      i = a + 1
    end
  end
  out[#out + 1] = t:sub(i)
  return table.concat(out)
end

--- Strict RFC 8259 JSON text to a value: the value, or nil and a message.
function M.decode(t)
  if type(t) ~= "string" then return nil, "not text" end
  local text = prepared(t)
  if not text then return nil, "not JSON: invalid UTF-8 or a control character in a string" end
  local ok, v = pcall(decoder.decode, text)
  if not ok then return nil, "not JSON: " .. tostring(v) end
  return v
end

--- Verified bytes (a legacy `S` or an extended statement `T`) to an object: the bounds scan,
-- then `decode`; nil and a message otherwise.
function M.decode_verified(t)
  if not M.scan(t) then return nil, "nesting deeper than 32 or a number that is not a short integer" end
  local v, err = M.decode(t)
  if v == nil then return nil, err end
  if not M.is_object(v) then return nil, "not a JSON object" end
  return v
end

--- A Lua value as JSON text (for output: arrays are tables with the Array
-- metatable or non-empty sequences, other tables objects with sorted keys; null and nil are
-- null; invalid UTF-8 in strings becomes U+FFFD).
function M.encode(v)
  if v == nil or v == M.null then return "null" end
  local t = type(v)
  if t == "number" then
    if math.type(v) == "float" and v == math.floor(v) and math.abs(v) < 2 ^ 53 then v = math.tointeger(v) end
    return math.type(v) == "integer" and tostring(v) or cjson.encode(v)
  end
  if t == "string" then
    if not utf8.len(v) then
      local out, i = {}, 1
      while i <= #v do
        local ok, cp = pcall(utf8.codepoint, v, i)
        local ch = ok and utf8.char(cp) or "\u{FFFD}"
        out[#out + 1] = ch
        i = i + (ok and #ch or 1)
      end
      v = table.concat(out)
    end
    return (cjson.encode(v):gsub("\\/", "/"))
  end
  if t ~= "table" then return tostring(v) end
  if getmetatable(v) == Array or (getmetatable(v) == nil and #v > 0) then
    local parts = {}
    for i = 1, #v do parts[i] = M.encode(v[i]) end
    return "[" .. table.concat(parts, ",") .. "]"
  end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  local parts = {}
  for i, k in ipairs(keys) do parts[i] = M.encode(k) .. ":" .. M.encode(v[k]) end
  return "{" .. table.concat(parts, ",") .. "}"
end

return M
