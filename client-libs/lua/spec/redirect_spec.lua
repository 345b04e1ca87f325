-- converge.https follows redirects only on connections of its own, each checked for the
-- origin (host and port) of its hop: a genuine chain of absolute redirects works; an absolute
-- same-origin redirect followed by an intercepted connection (another certificate) is refused
-- before the request is written; a redirect to another port is checked for that port.
-- Real TLS on 127.0.0.1 (spec/hostile_world.py).
local https = require "converge.https"
local client = require "converge.client"
local errors = require "converge.errors"
local ltn12 = require "ltn12"
local World = require "world"

describe("converge.https redirects", function()
  local w, c, site
  setup(function()
    w = World.script("client-libs/lua/spec/hostile_world.py", "Org A:listed", "Org B:listed",
      "--site", "redir=redirector", "--site", "other=redirector", "--site", "switch=switch", "--site", "forged=forged")
    c = client.load(w:config_dir({ ["notary-agreement"] = "consensus" }))
    site = w.info.sites
  end)
  teardown(function() w:stop() end)

  local function url(name, path) return "https://127.0.0.1:" .. math.tointeger(site[name]) .. path end
  local function get(u)
    local chunks = {}
    local ok, code = https.request({ url = u, client = c, sink = ltn12.sink.table(chunks) })
    return ok, code, table.concat(chunks)
  end

  it("follow a genuine chain of absolute redirects, the caller's sink seeing only the final body", function()
    local ok, code, body = get(url("redir", "/chain"))
    assert.are.equal(1, ok, tostring(code))
    assert.are.equal(200, code)
    assert.are.equal("end", body)
  end)

  it("refuse an intercepted connection after an absolute same-origin redirect", function()
    w:ask("reset")
    local ok, err, body = get(url("switch", "/same"))
    assert.is_nil(ok)
    assert.is_true(errors.is_not_trusted(err), tostring(err))
    assert.is_truthy(tostring(err):find("127.0.0.1:" .. math.tointeger(site.switch), 1, true))
    assert.are.equal("", body)
    assert.are.equal(0, w:ask("count").forged_reads.switch, "the forged hop read no request")
    -- twin: without the notaries (LuaSec, no verification) the same hop is read by the forgery
    w:ask("reset")
    local plain = require("ssl.https").request({ url = url("switch", "/same"), verify = "none", sink = ltn12.sink.table({}) })
    assert.are.equal(1, plain)
    assert.are.equal(1, w:ask("count").forged_reads.switch)
  end)

  it("check a redirect to another port for that port", function()
    local before = w:ask("count").sites.forged
    local ok, err = get(url("redir", "/to/" .. math.tointeger(site.forged)))
    assert.is_nil(ok)
    assert.is_true(errors.is_not_trusted(err), tostring(err))
    assert.is_truthy(tostring(err):find("127.0.0.1:" .. math.tointeger(site.forged), 1, true))
    assert.are.equal(before, w:ask("count").sites.forged)
    -- twin: a redirect to another genuine origin is followed, and the notaries were asked about it
    local ok2, code, body = get(url("redir", "/to/" .. math.tointeger(site.other)))
    assert.are.equal(1, ok2, tostring(code))
    assert.are.equal("end", body)
    local asked = w:ask("requests 0")
    local found = false
    for _, r in ipairs(asked) do found = found or r:find("+" .. math.tointeger(site.other) .. " HTTP", 1, true) ~= nil end
    assert.is_true(found, "the notaries were asked about the other port: " .. table.concat(asked, " | "))
  end)

  it("check a redirect to another host name for that name", function()
    local ok, code, body = get(url("redir", "/host/" .. math.tointeger(site.other)))
    assert.are.equal(1, ok, tostring(code))
    assert.are.equal("end", body)
    local want = "/target/localhost+" .. math.tointeger(site.other) .. " HTTP"
    local found = false
    for _, r in ipairs(w:ask("requests 0")) do found = found or r:find(want, 1, true) ~= nil end
    assert.is_true(found, "the notaries were asked about localhost")
    -- twin: the same redirect to the forged server's port is refused for localhost:port
    local before = w:ask("count").sites.forged
    local no, err = get(url("redir", "/host/" .. math.tointeger(site.forged)))
    assert.is_nil(no)
    assert.is_truthy(tostring(err):find("localhost:" .. math.tointeger(site.forged), 1, true), tostring(err))
    assert.are.equal(before, w:ask("count").sites.forged)
  end)
end)
