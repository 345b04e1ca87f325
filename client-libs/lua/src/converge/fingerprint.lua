--- A certificate digest with its algorithm ("sha1" or "sha256").
-- @module converge.fingerprint
local errors = require "converge.errors"
local crypto = require "converge.crypto"

local M = {}
M.MAX_TEXT = 200

local Fingerprint = {}
Fingerprint.__index = Fingerprint
Fingerprint.__tostring = function(f) return f:colon_hex() end
M.Fingerprint = Fingerprint

function M.new(algorithm, digest) return setmetatable({ algorithm = algorithm, digest = digest }, Fingerprint) end

--- The canonical form: upper-case hex, a colon between bytes.
function Fingerprint:colon_hex()
  return (crypto.hex(self.digest):upper():gsub("(..)", "%1:"):sub(1, -2))
end

function Fingerprint:equals(o) return self.algorithm == o.algorithm and self.digest == o.digest end

--- The fingerprint of a DER certificate (`algorithm` "sha1", the default, or "sha256").
function M.of(der, algorithm)
  algorithm = algorithm or "sha1"
  return M.new(algorithm, algorithm == "sha256" and crypto.sha256(der) or crypto.sha1(der))
end

local function bad(d) errors.throw("fingerprint", d) end

--- Parses 40 (SHA-1) or 64 (SHA-256) hex digits in any case, with no separators or a colon
-- between every pair; surrounding spaces, tabs, CR and LF are ignored. Raises a "fingerprint"
-- error otherwise.
function M.parse(text)
  if type(text) ~= "string" then bad("a fingerprint is a string") end
  if (utf8.len(text) or #text) > M.MAX_TEXT then bad("fingerprint longer than " .. M.MAX_TEXT .. " characters") end
  local s = text:gsub("^[ \t\r\n]+", ""):gsub("[ \t\r\n]+$", "")
  if s == "" then bad("empty fingerprint") end
  local digits
  if s:find(":", 1, true) then
    for g in (s .. ":"):gmatch("(.-):") do
      if not g:match("^%x%x$") then bad("colon-separated fingerprints need two hex digits per byte") end
    end
    digits = s:gsub(":", "")
  else
    if not s:match("^%x*$") then bad("fingerprint contains a non-hex character") end
    if #s % 2 == 1 then bad("odd number of hex digits") end
    digits = s
  end
  local d = crypto.unhex(digits)
  if #d == 20 then return M.new("sha1", d) end
  if #d == 32 then return M.new("sha256", d) end
  bad("a fingerprint has 20 (SHA-1) or 32 (SHA-256) bytes, not " .. #d)
end

return M
