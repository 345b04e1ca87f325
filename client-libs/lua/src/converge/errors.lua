--- Typed errors. Every error the library raises for bad input or local IO is a table with
-- `kind` (a stable word shared with the other languages and the vectors: fingerprint, target,
-- config, bundle, cache-io, vote, response, signature; IO kinds unreachable, pin, timeout),
-- `detail` and `message`; `family` is "bad-input" or "io". Notary failures are votes, not errors.
-- @module converge.errors
local M = {}

local IO_KINDS = { unreachable = true, pin = true, ["cache-io"] = true, timeout = true }

local Error = {}
Error.__index = Error
Error.__tostring = function(e) return e.message end
M.Error = Error

--- A new error of `kind` saying `detail`.
function M.new(kind, detail)
  return setmetatable({ kind = kind, detail = detail, message = "converge: " .. kind .. ": " .. detail,
    family = IO_KINDS[kind] and "io" or "bad-input" }, Error)
end

--- Raises a new error (level 0: no position prefix).
function M.throw(kind, detail) error(M.new(kind, detail), 0) end

--- Whether `e` is a converge error (of `kind`, when given).
function M.is(e, kind)
  return getmetatable(e) == Error and (kind == nil or e.kind == kind)
end

local NotTrusted = {}
NotTrusted.__index = NotTrusted
NotTrusted.__tostring = function(e) return e.message end
M.NotTrusted = NotTrusted

--- The notaries did not vouch for a TLS peer's certificate (or it could not be checked):
-- returned or raised by the TLS hooks before any application data is written. Fields: host,
-- port, verdict (when there was one), cause, message, kind = "untrusted".
function M.not_trusted(host, port, verdict, cause)
  local what = verdict and ("certificate not trusted: " .. verdict.reason) or ("certificate not checked: " .. tostring(cause))
  return setmetatable({ kind = "untrusted", host = host, port = port, verdict = verdict, cause = cause,
    message = "converge does not trust " .. host .. ":" .. tostring(port) .. ": " .. what }, NotTrusted)
end

function M.is_not_trusted(e) return getmetatable(e) == NotTrusted end

return M
