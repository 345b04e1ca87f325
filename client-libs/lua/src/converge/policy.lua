--- Votes, consensus policies and the local-cache rule (pure functions). With stand-aside on,
-- unreachable notaries do not count; off, they count as failures. With n counted notaries and s
-- successes: consensus s == n, majority s >= ceil(n/2), minority s >= 1; never trusted without
-- a success.
-- @module converge.policy
local errors = require "converge.errors"

local M = {}
M.CACHE_FUTURE_SKEW = 300
M.CACHE_MILLISECONDS_ABOVE = 100000000000

--- Accepts the three policy names, any case, surrounding space ignored.
function M.parse(text)
  local p = type(text) == "string" and text:lower():gsub("^%s+", ""):gsub("%s+$", "") or nil
  if p == "consensus" or p == "majority" or p == "minority" then return p end
  errors.throw("config", "notary-agreement must be consensus, majority or minority, not " .. string.format("%q", tostring(text)))
end

local function trusted(p, s, f, u, aside)
  local counted = s + f + (aside and 0 or u)
  if s < 1 then return false end
  if p == "consensus" then return s == counted end
  if p == "majority" then return s >= (counted + 1) // 2 end
  return true
end

local function count(votes)
  local s, f, u = 0, 0, 0
  for _, v in ipairs(votes) do
    if v == "success" then s = s + 1
    elseif v == "failure" then f = f + 1
    elseif v == "unreachable" then u = u + 1
    elseif v ~= "skipped" then errors.throw("vote", "unknown vote " .. string.format("%q", tostring(v))) end
  end
  return s, f, u
end

--- The verdict (a boolean) for a complete list of votes.
function M.decide(policy, votes, aside)
  local s, f, u = count(votes)
  return trusted(policy, s, f, u, aside)
end

--- The verdict when no outcome of the pending notaries can change it, else nil.
function M.settled(policy, votes, pending, aside)
  local s, f, u = count(votes)
  local first = trusted(policy, s, f, u + pending, aside)
  for ps = 0, pending do
    for pf = 0, pending - ps do
      if trusted(policy, s + ps, f + pf, u + pending - ps - pf, aside) ~= first then return nil end
    end
  end
  return first
end

--- "hit", "stale" or "miss" for a stored timestamp (nil: none) at `now`; `lifetime` nil = forever.
function M.cache_decision(ts, now, lifetime)
  if ts == nil then return "miss" end
  if ts > M.CACHE_MILLISECONDS_ABOVE then ts = ts // 1000 end
  local age = now - ts
  if age < -M.CACHE_FUTURE_SKEW then return "stale" end
  if lifetime ~= nil and age > lifetime then return "stale" end
  return "hit"
end

return M
