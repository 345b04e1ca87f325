-- The client against real TLS notaries on 127.0.0.1 (fake_world.py): votes, the cache, every
-- notary asked at once, early decisions, every timeout, pins, both formats, bad input.
local socket = require "socket"
local converge = require "converge"
local client = require "converge.client"
local errors = require "converge.errors"
local legacy = require "converge.legacy"
local fingerprint = require "converge.fingerprint"
local World = require "world"

local function kinds(v) local t = {} for i, r in ipairs(v.results) do t[i] = r.kind end return t end
local function votes(v) local t = {} for i, r in ipairs(v.results) do t[i] = r.vote end return t end

describe("the client", function()
  local w
  after_each(function() if w then w:stop(); w = nil end end)

  it("has three notaries confirm, then answers from the cache without the network", function()
    w = World.new("Org A:listed", "Org B:listed", "Org C:listed")
    local c = client.load(w:config_dir({ ["early-return"] = false }))
    local v = c:check("www.example.org", 443, w.info.genuine)
    assert.is_true(v.trusted)
    assert.are.same({ "listed", "listed", "listed" }, kinds(v))
    for _, r in ipairs(v.results) do assert.are.equal("convergence-v1", r.protocol) end
    local want = legacy.request_bytes("www.example.org", 443, fingerprint.parse(w.info.genuine))
    assert.are.same({ want }, w:ask("requests 0"))
    local again = c:check("WWW.example.org", 443, w.info.genuine:lower())
    assert.is_true(again.from_cache and again.trusted)
    assert.are.same({ 1, 1, 1 }, w:ask("count").notaries)
    assert.is_false(c:check("www.example.org", 8443, w.info.genuine).from_cache) -- twin: another port
  end)

  it("finds a forged certificate untrusted and never caches it", function()
    w = World.new("Org A:listed", "Org B:listed")
    local c = client.load(w:config_dir())
    local v = c:check("bank.example", 443, w.info.forged)
    assert.is_false(v.trusted)
    assert.are.same({ "mismatch", "mismatch" }, kinds(v))
    assert.is_false(c:check("bank.example", 443, w.info.forged).from_cache)
  end)

  it("asks the notaries at once", function()
    w = World.new("Org A:listed", "Org B:listed", "Org C:listed")
    for i = 0, 2 do w:ask("delay " .. i .. " 400") end
    local c = client.load(w:config_dir({ ["early-return"] = false }))
    local t0 = socket.gettime()
    assert.is_true(c:check("par.example", 443, w.info.genuine).trusted)
    assert.is_true(socket.gettime() - t0 < 1.1)
  end)

  it("returns early when nothing can change the verdict, and waits without early-return", function()
    w = World.new("Org A:mismatch", "Org B:hang", "Org C:hang")
    local c = client.load(w:config_dir({ ["notary-agreement"] = "consensus", ["notary-timeout"] = 3, ["total-timeout"] = 5 }))
    local t0 = socket.gettime()
    local v = c:check("early.example", 443, w.info.genuine)
    assert.is_false(v.trusted)
    assert.is_true(socket.gettime() - t0 < 1.5)
    assert.are.same({ "mismatch", "settled", "settled" }, kinds(v))
    local late = client.load(w:config_dir({ ["notary-agreement"] = "consensus", ["early-return"] = false, ["notary-timeout"] = 0.5 }))
    assert.are.same({ "mismatch", "timeout", "timeout" }, kinds(late:check("early.example", 443, w.info.genuine)))
  end)

  it("is bounded by the total timeout", function()
    w = World.new("Org A:hang", "Org B:hang")
    local c = client.load(w:config_dir({ ["notary-timeout"] = 10, ["total-timeout"] = 0.6 }))
    local t0 = socket.gettime()
    local v = c:check("slow.example", 443, w.info.genuine)
    local took = socket.gettime() - t0
    assert.is_false(v.trusted)
    assert.is_true(took >= 0.55 and took < 2, tostring(took))
    assert.are.same({ "timeout", "timeout" }, kinds(v))
  end)

  it("counts a wrong pin and garbage as failures", function()
    w = World.new("Org Impostor:listed:other", "Org A:garbage", "Org B:listed")
    local dir = w:config_dir({ ["notary-agreement"] = "consensus", ["early-return"] = false })
    local p = dir .. "/notaries-available/00-Org-Impostor.notary"
    local function slurp(f) local h = assert(io.open(f, "rb")); local s = h:read("a"); h:close(); return s end
    local json = require "converge.json"
    local other = json.encode(slurp(World.ROOT .. "/client-libs/vectors/keys/test-other-cert.pem")):sub(2, -2)
    local mine = json.encode(slurp(World.ROOT .. "/client-libs/vectors/keys/test-notary-cert.pem")):sub(2, -2)
    local text = slurp(p)
    local a, b = text:find(other, 1, true)
    assert.is_truthy(a, "the impostor bundle holds the other certificate")
    local h = assert(io.open(p, "wb")); h:write(text:sub(1, a - 1) .. mine .. text:sub(b + 1)); h:close()
    local v = client.load(dir):check("pin.example", 443, w.info.genuine)
    assert.is_false(v.trusted)
    assert.are.same({ "pin", "response", "listed" }, kinds(v))
    assert.are.equal(0, w:ask("count").notaries[1])
  end)

  it("binds extended answers and keeps them fresh", function()
    w = World.new("Org A:extended", "Org B:extended", "Org C:extended-stale")
    local c = client.load(w:config_dir({ ["early-return"] = false }, true))
    local v = c:check("ext.example", 443, w.info.genuine)
    assert.are.same({ "match", "match", "stale" }, kinds(v))
    assert.is_true(v.trusted)
    assert.is_truthy(w:ask("requests 0")[1]:find('"nonce":"[A-Za-z0-9_-]+"'))
    local off = client.load(w:config_dir({ extended = "off" }, true, { 0 }))
    assert.are.equal("convergence-v1", off:check("ext.example", 443, w.info.genuine).results[1].protocol)
  end)

  it("lets a 503 stand aside, or count as a failure", function()
    w = World.new("Org A:status503", "Org B:listed")
    local c = client.load(w:config_dir({ ["notary-agreement"] = "consensus", ["early-return"] = false }))
    local v = c:check("aside.example", 443, w.info.genuine)
    assert.are.same({ "unreachable", "success" }, votes(v))
    assert.is_true(v.trusted)
    local strict = client.load(w:config_dir({ ["notary-agreement"] = "consensus", ["early-return"] = false, ["stand-aside"] = false }))
    assert.is_false(strict:check("aside.example", 443, w.info.genuine).trusted)
  end)

  it("refuses bad input with a typed error before asking anyone", function()
    w = World.new("Org A:listed")
    local c = client.load(w:config_dir())
    for _, case in ipairs({ { "a b", 443, w.info.genuine, "target" }, { "ok.example", 0, w.info.genuine, "target" },
      { "ok.example", 443, "zz", "fingerprint" }, { "ok.example", 443, w.info.genuine, "target", { ip = "1.2.3" } } }) do
      local ok, e = pcall(c.check, c, case[1], case[2], case[3], case[5])
      assert.is_false(ok)
      assert.is_true(errors.is(e, case[4]), tostring(e))
    end
    assert.are.same({ 0 }, w:ask("count").notaries)
    local ok, e = pcall(function() return client.load(w:config_dir({}, false, {})):check("ok.example", 443, w.info.genuine) end)
    assert.is_false(ok)
    assert.is_true(errors.is(e, "config"))
    assert.is_truthy(tostring(e):find("notaries-enabled", 1, true))
  end)

  it("asks again when a cache entry is stale", function()
    w = World.new("Org A:listed")
    local now = 2000000000
    local c = client.load(w:config_dir({ ["cache-lifetime"] = 60 }), { clock = function() return now end })
    assert.is_false(c:check("stale.example", 443, w.info.genuine).from_cache)
    now = now + 30
    assert.is_true(c:check("stale.example", 443, w.info.genuine).from_cache)
    now = now + 61
    assert.is_false(c:check("stale.example", 443, w.info.genuine).from_cache)
    assert.are.same({ 2 }, w:ask("count").notaries)
  end)

  it("serves converge() with a config_dir, and the ip form", function()
    w = World.new("Org A:listed", "Org B:listed")
    local json = require "converge.json"
    local dir = w:config_dir({ db = json.null })
    local v = converge.converge("ip.example", 443, w.info.genuine, { config_dir = dir, ip = "127.0.0.1" })
    assert.is_true(v.trusted)
    assert.is_truthy(w:ask("requests 0")[1]:find("^POST /target/ip%.example%+443/127%.0%.0%.1 HTTP/1%.0\r\n"))
    assert.is_false(converge.converge("ip.example", 443, w.info.genuine, { config_dir = dir }).from_cache) -- db null: no cache
  end)
end)
