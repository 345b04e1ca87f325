-- The transparency log's proofs against a real `notary serve` (spec/log_world.py: its log on by
-- default, `notary bundle` naming it): a match with a valid proof is trusted and its request
-- asks for the proof; relays with the notary's certificate that strip the member or flip a
-- proof hash make that notary's vote log-missing or log-proof, a bundle requiring a witness
-- that never cosigned log-witness. Each failure has its twin (the same relay with a bundle
-- naming no log, or the same witness with no cosignature required).
local client = require "converge.client"
local json = require "converge.json"
local bundle = require "converge.bundle"
local transparency = require "converge.transparency"
local crypto = require "converge.crypto"
local World = require "world"

describe("the transparency log's proofs from a real notary", function()
  local w, index = nil, {}
  setup(function()
    w = World.script("client-libs/lua/spec/log_world.py")
    for i, n in ipairs(w.info.notaries) do index[n.name] = i - 1 end
  end)
  teardown(function() if w then w:stop() end end)

  -- the one notary's vote and kind about the site's genuine certificate
  local function ask(name)
    local c = client.load(w:config_dir({ db = json.null, ["notary-timeout"] = 10, ["total-timeout"] = 15 }, true,
      { index[name] }))
    local v = c:check("127.0.0.1", math.tointeger(w.info.site), w.info.genuine)
    c:close()
    return v.results[1].vote, v.results[1].kind, v.results[1].detail
  end

  it("trusts a match whose proof verifies, asked with \"transparency\": true", function()
    local b = bundle.parse(w.info.notaries[index["Org Log"] + 1].bundle)
    assert.is_truthy(b.transparency and b.transparency.log.name:find("/converge-log/", 1, true))
    local vote, kind, detail = ask("Org Log")
    assert.are.same({ "success", "match" }, { vote, kind }, detail)
    vote, kind, detail = ask("Org Log Record")
    assert.are.same({ "success", "match" }, { vote, kind }, detail)
    assert.are.same({ true }, w:ask("asked"))
  end)

  it("counts a stripped member as log-missing; twin: the bundle names no log", function()
    local vote, kind, detail = ask("Org Log Stripped")
    assert.are.same({ "failure", "log-missing" }, { vote, kind }, detail)
    vote, kind, detail = ask("Org Log Stripped No Log")
    assert.are.same({ "success", "match" }, { vote, kind }, detail)
  end)

  it("counts a changed proof hash as log-proof; twin: the bundle names no log", function()
    local vote, kind, detail = ask("Org Log Altered")
    assert.are.same({ "failure", "log-proof" }, { vote, kind }, detail)
    vote, kind, detail = ask("Org Log Altered No Log")
    assert.are.same({ "success", "match" }, { vote, kind }, detail)
  end)

  it("counts a missing required cosignature as log-witness; twin: none required", function()
    local vote, kind, detail = ask("Org Log Witness")
    assert.are.same({ "failure", "log-witness" }, { vote, kind }, detail)
    vote, kind, detail = ask("Org Log Witness Twin")
    assert.are.same({ "success", "match" }, { vote, kind }, detail)
  end)

  it("refuses a bundle with a malformed transparency member", function()
    local doc = require("cjson").decode(w.info.notaries[1].bundle)
    doc.transparency.log = "localhost+00000000+AAAA"
    local ok, e = pcall(bundle.parse, json.encode(doc))
    assert.is_false(ok)
    assert.are.equal("bundle", e.kind)
    doc = require("cjson").decode(w.info.notaries[1].bundle)
    doc.transparency.min_cosignatures = 1 -- more than the witnesses listed
    assert.is_false((pcall(bundle.parse, json.encode(doc))))
    assert.is_truthy(bundle.parse(w.info.notaries[1].bundle).transparency) -- twin: as made
  end)
end)

describe("the answer split and the member check", function()
  it("keeps the statement before the first ,\"transparency\": and nothing else raises", function()
    local policy = transparency.parse_log_policy({
      log = "notary.test/converge-log/0a0b0c0d+fbc03967+ARCfgfIMm7KRDdmoAMM+CNfWUyF/NWocxHUB3nWQ1heF" })
    local fp = require("converge.fingerprint").parse(string.rep("AB:", 31) .. "AB")
    for _, member in ipairs({ "", "{", "[1]", string.rep("[", 40) .. string.rep("]", 40), '{"index":1e400}',
      '{"checkpoint":"x","entry":"e30=","index":0,"proof":[]}', "\0", "{\"a\":\"\\ud800\"}" }) do
      local ok, e = pcall(transparency.check_member, member, policy, { host = "a", port = 1 }, fp)
      assert.is_false(ok)
      assert.are.equal(transparency.LogError, getmetatable(e), member)
    end
    local ok, e = pcall(transparency.check_member, nil, policy, { host = "a", port = 1 }, fp)
    assert.is_false(ok)
    assert.are.equal("log-missing", e.kind)
    assert.are.equal(32, #crypto.sha256(""))
  end)
end)
