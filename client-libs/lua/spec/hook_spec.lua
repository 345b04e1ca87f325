-- End to end through every hook: the genuine site loads; the forged one fails before a single
-- byte of the request reaches it (the must-fail twin): converge.https.request (LuaSocket's http
-- over LuaSec) and converge.tls.connect; through a CONNECT proxy the origin is asked about and
-- an attacker's proxy is caught.
local https = require "converge.https"
local tls = require "converge.tls"
local client = require "converge.client"
local errors = require "converge.errors"
local json = require "converge.json"
local World = require "world"

describe("the TLS hooks", function()
  local w, c, site
  setup(function()
    w = World.new("Org A:listed", "Org B:listed", "--site", "genuine=genuine", "--site", "forged=forged",
      "--proxy", "honest=honest", "--proxy", "evil=forged")
    c = client.load(w:config_dir({ ["notary-agreement"] = "consensus" }))
    site = w.info.sites
  end)
  teardown(function() w:stop() end)

  local function url(name) return "https://127.0.0.1:" .. math.tointeger(site[name]) .. "/" end
  local function forged_requests() return w:ask("count").sites.forged end

  it("https.request: the genuine site loads, the forged one is refused before the request", function()
    local body, code = https.request({ url = url("genuine"), client = c, sink = nil })
    assert.are.equal(1, body)
    assert.are.equal(200, code)
    local chunks = {}
    local ok, err = https.request({ url = url("forged"), client = c, sink = require("ltn12").sink.table(chunks) })
    assert.is_nil(ok)
    assert.is_true(errors.is_not_trusted(err), tostring(err))
    assert.is_false(err.verdict.trusted)
    assert.is_truthy(tostring(err):find("converge does not trust 127.0.0.1:" .. math.tointeger(site.forged), 1, true))
    assert.are.equal(0, forged_requests())
    -- twin of the twin: LuaSec's own https with no verification reaches the forged site
    local plain = require("ssl.https").request({ url = url("forged"), verify = "none", sink = require("ltn12").sink.table(chunks) })
    assert.are.equal(1, plain)
    assert.are.equal(1, forged_requests())
  end)

  it("through a CONNECT proxy asks about the origin, and catches an attacker's proxy", function()
    local fresh = client.load(w:config_dir({ ["notary-agreement"] = "consensus", db = json.null })) -- no cache
    local chunks = {}
    local honest = "http://127.0.0.1:" .. math.tointeger(w.info.proxies.honest)
    local ok, code = https.request({ url = url("genuine"), client = fresh, proxy = honest, sink = require("ltn12").sink.table(chunks) })
    assert.are.equal(1, ok, tostring(code))
    assert.are.equal("genuine", table.concat(chunks))
    assert.is_truthy(w:ask("count").proxies.honest[1]:find("^CONNECT 127%.0%.0%.1:" .. math.tointeger(site.genuine) .. " "))
    local asked = w:ask("requests 0")
    assert.is_truthy(asked[#asked]:find("+" .. math.tointeger(site.genuine) .. " HTTP", 1, true), "the origin's port")
    local before = forged_requests()
    local evil = "http://127.0.0.1:" .. math.tointeger(w.info.proxies.evil)
    local bad, err = https.request({ url = url("genuine"), client = fresh, proxy = evil })
    assert.is_nil(bad)
    assert.is_true(errors.is_not_trusted(err), tostring(err))
    assert.are.equal(before, forged_requests())
  end)

  it("tls.connect gives only a vouched-for connection", function()
    local conn, v = tls.connect("127.0.0.1", math.tointeger(site.genuine), { client = c })
    assert.is_truthy(conn, tostring(v))
    assert.is_true(v.trusted)
    conn:send("GET / HTTP/1.0\r\n\r\n")
    local all = conn:receive("*a")
    conn:close()
    assert.is_truthy(all:find("genuine$"))
    local before = forged_requests()
    local no, err = tls.connect("127.0.0.1", math.tointeger(site.forged), { client = c })
    assert.is_nil(no)
    assert.is_true(errors.is_not_trusted(err))
    assert.is_truthy(tostring(err):find("certificate not trusted: 0 of 2 notaries confirm", 1, true))
    local honest = "http://127.0.0.1:" .. math.tointeger(w.info.proxies.honest)
    local via = tls.connect("127.0.0.1", math.tointeger(site.genuine), { client = c, proxy = honest })
    assert.is_truthy(via)
    via:close()
    assert.are.equal(before, forged_requests())
  end)

  it("require_ca adds the CA check to the notaries' decision", function()
    local strict, err = tls.connect("127.0.0.1", math.tointeger(site.genuine), { client = c, require_ca = true,
      cafile = World.ROOT .. "/client-libs/vectors/keys/test-other-cert.pem" })
    assert.is_nil(strict)
    assert.is_truthy(err)
  end)
end)
