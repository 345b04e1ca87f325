-- One hostile notary among honest ones never takes a verdict down: a genuine notary and one
-- that answers each hostile form (legacy and extended, client-libs/lua/spec/hostile_world.py),
-- real TLS on 127.0.0.1. Every check returns a verdict in which the genuine notary's vote is
-- intact and the hostile one's is the vote its form deserves; each hostile form has its twin
-- (the same change made harmless), which must be answered cleanly.
local client = require "converge.client"
local World = require "world"

-- form -> the hostile notary's expected vote and kind
local LEGACY = {
  honest = { "success", "listed" },
  splice = { "failure", "response" }, ["splice-twin"] = { "failure", "not-listed" },
  ["member-after"] = { "failure", "response" },
  ["bytes-after"] = { "failure", "response" },
  ["garbage-after"] = { "failure", "response" },
  ["duplicate-last"] = { "success", "listed" }, ["duplicate-first"] = { "failure", "not-listed" },
  bignum = { "failure", "response" }, int15 = { "success", "listed" },
  ["number-key"] = { "failure", "response" }, ["string-key"] = { "success", "listed" },
  nest33 = { "failure", "response" }, nest32 = { "success", "listed" }, nest5000 = { "failure", "response" },
  nan = { "failure", "response" }, null = { "success", "listed" },
  ["nul-byte"] = { "failure", "response" },
  surrogate = { "failure", "response" },
}
local EXTENDED = {
  ["ext-honest"] = { "success", "match" },
  ["ext-bignum"] = { "failure", "malformed" }, ["ext-int15"] = { "success", "match" },
  ["ext-number-key"] = { "failure", "malformed" },
  ["ext-nest33"] = { "failure", "malformed" }, ["ext-nest32"] = { "success", "match" },
  ["ext-nan"] = { "failure", "malformed" },
  ["ext-splice"] = { "failure", "bad-signature" },
}

describe("a hostile notary among honest ones", function()
  local w
  setup(function() w = World.script("client-libs/lua/spec/hostile_world.py", "Org A:listed", "Org H:hostile") end)
  teardown(function() w:stop() end)

  local function run(forms, extended, known)
    -- minority: the genuine notary's success alone trusts the certificate, whatever the other says
    local settings = { ["notary-agreement"] = "minority", ["early-return"] = false, db = require("converge.json").null }
    local c = client.load(w:config_dir(settings, extended))
    local seen = 0
    for form, want in pairs(forms) do
      assert.is_truthy(known[form], form)
      assert.is_true(w:ask("form 1 " .. form).ok)
      local ok, v = pcall(c.check, c, form .. ".example", 443, w.info.genuine)
      assert.is_true(ok, form .. ": check raised " .. tostring(v))
      assert.is_true(v.trusted, form)
      local a, h = v.results[1], v.results[2]
      assert.are.same({ "success", extended and "match" or "listed" }, { a.vote, a.kind }, form .. ": the genuine notary's vote")
      assert.are.same(want, { h.vote, h.kind }, form .. ": " .. tostring(h.detail))
      seen = seen + 1
    end
    return seen
  end

  local function set(list) local t = {} for _, x in ipairs(list) do t[x] = true end return t end

  it("answers every legacy form with the right votes", function()
    assert.are.equal(#w.info.legacy_forms, run(LEGACY, false, set(w.info.legacy_forms)))
  end)

  it("answers every extended form with the right votes", function()
    assert.are.equal(#w.info.extended_forms, run(EXTENDED, true, set(w.info.extended_forms)))
  end)

  it("would be noticed: a hostile vote counted as the genuine one fails the comparison (the twin)", function()
    assert.has_error(function() run({ splice = { "success", "listed" } }, false, set(w.info.legacy_forms)) end)
  end)
end)
