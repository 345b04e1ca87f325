-- Strict JSON and the bounds scan, fingerprints, framing, bundles,
-- configuration, policies; a fixed-seed fuzz of the response parser.
local lfs = require "lfs"
local json = require "converge.json"
local errors = require "converge.errors"
local fingerprint = require "converge.fingerprint"
local legacy = require "converge.legacy"
local policy = require "converge.policy"
local bundle = require "converge.bundle"
local config = require "converge.config"
local crypto = require "converge.crypto"
local World = require "world"

local KEYS = World.ROOT .. "/client-libs/vectors/keys"
local function slurp(p) local f = assert(io.open(p, "rb")); local s = f:read("a"); f:close(); return s end
local function raises(kind, fn)
  local ok, e = pcall(fn)
  assert.is_false(ok)
  assert.is_true(errors.is(e, kind), tostring(e))
end

describe("JSON", function()
  it("is lua-cjson, strict, the last repeated member counting", function()
    local v = json.decode('{"b": 1, "e": {}, "a": [], "b": 2, "s": "\\u00e9"}')
    assert.are.equal(2, json.int(v.b))
    assert.is_true(json.is_object(v.e))
    assert.is_true(json.is_array(v.a))
    assert.is_false(json.is_array(v.e))
    assert.is_false(json.is_object(v.a))
    assert.are.equal("\u{e9}", v.s)
    for _, bad in ipairs({ "{", "[01]", '["\255"]', '["a\1"]', '["a\n"]', "[1,]", "[NaN]", "[Infinity]", "[0x10]", "{1.5: 1}",
      "{1: 1}", "[1] // c", "/* c */ [1]", "['a']", '["\\q"]', '["\\ud800"]', "[1]\0[", '{"a": 1}\0' }) do
      assert.is_nil(json.decode(bad), bad)
    end
    assert.is_truthy(json.decode('["a\\u0001"]'), "twin: the control character escaped")
  end)

  it("bounds nesting at 32 levels and numbers at 15-digit integers before parsing", function()
    local function nest(n) return string.rep('{"a":', n - 1) .. "{}" .. string.rep("}", n - 1) end
    assert.is_truthy(json.decode_verified(nest(32)))
    assert.is_nil(json.decode_verified(nest(33)))
    assert.is_nil(json.decode_verified(string.rep("[", 100000)))
    assert.is_truthy(json.decode_verified('{"a": "' .. string.rep("[", 100) .. '\\"", "n": -123456789012345}'))
    for _, bad in ipairs({ '{"n": 1234567890123456}', '{"n": 1.5}', '{"n": 1e2}', '{"n": 01}', '{"n": -}',
      '{"n": ' .. string.rep("9", 5000) .. "}", "[1]" }) do
      assert.is_nil(json.decode_verified(bad), bad)
    end
    assert.are.equal(-123456789012345, json.int(json.decode_verified('{"n": -123456789012345}').n))
  end)
end)

describe("fingerprints", function()
  it("are parsed in every accepted form, refused otherwise", function()
    local fp = fingerprint.parse(" ab" .. string.rep("CD", 19) .. "\n")
    assert.are.equal("sha1", fp.algorithm)
    assert.are.equal("AB:" .. string.rep("CD:", 18) .. "CD", fp:colon_hex())
    for _, bad in ipairs({ "", "zz", "ABC", "AB:CD", string.rep("A", 201), "AB::CD" .. string.rep("CD", 18) }) do
      raises("fingerprint", function() fingerprint.parse(bad) end)
    end
  end)
end)

describe("the legacy protocol", function()
  it("writes IP literals in the notary's form", function()
    assert.are.equal("2001:db8::1", legacy.check_ip("2001:0db8:0:0:0:0:0:1"))
    assert.are.equal("::ffff:102:304", legacy.check_ip("::ffff:1.2.3.4"))
    assert.are.equal("1:0:1:0:1:0:1:0", legacy.check_ip("1:0:1:0:1:0:1:0"))
    assert.are.equal("::", legacy.check_ip("::"))
    raises("target", function() legacy.check_ip("01.2.3.4") end)
    raises("target", function() legacy.check_ip("fe80::1%eth0") end)
    raises("target", function() legacy.check_ip("1::2::3") end)
  end)

  it("refuses framing a notary must not send", function()
    local r = legacy.parse_http_response("HTTP/1.0 200 X\r\nA: 1\r\na: 2\r\nContent-Length: 2\r\n\r\nokEXTRA")
    assert.are.equal("1, 2", r.headers.a)
    assert.are.equal("ok", r.body)
    for _, bad in ipairs({ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort",
      "HTTP/2 200\r\n\r\n", "HTTP/1.0 200 OK\r\n Bad: header\r\n\r\n", "HTTP/1.0 200 OK\r\n" }) do
      raises("response", function() legacy.parse_http_response(bad) end)
    end
  end)
end)

describe("policies", function()
  it("decide, settle early and judge cache entries", function()
    assert.is_true(policy.decide("consensus", { "success", "unreachable" }, true))
    assert.is_false(policy.decide("consensus", { "success", "unreachable" }, false))
    assert.is_false(policy.settled("consensus", { "failure" }, 2, true))
    assert.is_nil(policy.settled("majority", { "success" }, 2, true))
    assert.is_false(policy.decide("minority", { "unreachable", "unreachable" }, true))
    assert.are.equal("hit", policy.cache_decision(2000000000000, 2000000100, 600))
    assert.are.equal("stale", policy.cache_decision(2000000000, 2000000000 - 301, nil))
  end)
end)

describe("bundles and configuration", function()
  local pem = slurp(KEYS .. "/test-notary-cert.pem")
  local function v1(name) return json.encode({ version = 1, name = name,
    hosts = json.array({ { host = "n.example", ssl_port = 443, http_port = 80, certificate = pem } }) }) end

  it("refuse what they must", function()
    local b = bundle.parse(v1("Org A"))
    assert.are.equal("Org A", b.name)
    assert.are.equal(443, b.hosts[1].ssl_port)
    raises("bundle", function() bundle.parse('{"version": 1, "name": "x", "hosts": []}') end)
    raises("bundle", function() bundle.parse('{"version": 2}') end)
    raises("bundle", function() bundle.parse(v1("x"):gsub("MII", "MIJ", 1)) end)
    raises("bundle", function() bundle.parse(v1("x"):gsub('"ssl_port":443', '"ssl_port":443.0')) end)
  end)

  it("read the last value of a key, refuse wrong types, re-read changed folders", function()
    local dir = os.tmpname(); os.remove(dir); lfs.mkdir(dir)
    local function write(p, s) local f = assert(io.open(p, "wb")); f:write(s); f:close() end
    write(dir .. "/converge.config", '{"quorum": 3, "quorum": 0}')
    raises("config", function() config.load(dir) end)
    write(dir .. "/converge.config", '{"early-return": 1}')
    raises("config", function() config.load(dir) end)
    write(dir .. "/converge.config", '{"notary-agreement": " Consensus ", "quorum": 2}')
    local cfg = config.load(dir)
    assert.are.equal("consensus", cfg.agreement)
    assert.are.equal(2, cfg.quorum)
    raises("config", function() config.load(dir .. "/missing") end)
    lfs.mkdir(dir .. "/notaries-available"); lfs.mkdir(dir .. "/notaries-enabled")
    for _, n in ipairs({ "A", "B" }) do
      write(dir .. "/notaries-available/" .. n .. ".notary", v1("Org " .. n))
      lfs.link("../notaries-available/" .. n .. ".notary", dir .. "/notaries-enabled/" .. n .. ".notary", true)
    end
    local names = function() local t = {} for i, b in ipairs(cfg:notaries()) do t[i] = b.name end return t end
    assert.are.same({ "Org A", "Org B" }, names())
    os.remove(dir .. "/notaries-enabled/B.notary")
    assert.are.same({ "Org A" }, names())
    os.execute("rm -rf '" .. dir .. "'")
  end)
end)

describe("weak Ed25519 keys", function()
  it("are refused by plain byte comparison; a generated key is not", function()
    local weak = {
      { "identity", "01" .. ("00"):rep(31), "of small order" },
      { "identity, sign bit set", "01" .. ("00"):rep(30) .. "80", "of small order" },
      { "y8 (order 8)", "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05", "of small order" },
      { "p + 3", "f0" .. ("ff"):rep(30) .. "7f", "not in canonical form" },
    }
    for _, w in ipairs(weak) do
      local raw = crypto.unhex(w[2])
      assert.are.equal("an Ed25519 public key " .. w[3], crypto.ed25519_weak_key(raw), w[1])
      local entry = { alg = "ed25519", key_id = bundle.key_id_of(raw), public_key = crypto.b64url(raw), status = "current" }
      local ok, e = pcall(bundle.parse_signing_keys, json.array({ entry }))
      assert.is_false(ok, w[1])
      assert.is_true(errors.is(e, "bundle"), tostring(e))
      assert.are.equal("signing key: an Ed25519 public key " .. w[3], e.detail)
    end
    local pem = require("openssl.pkey").new({ type = "ED25519" }):toPEM("public")
    local der = crypto.strict_base64((pem:match("KEY%-%-%-%-%-\n(.-)\n%-%-%-%-%-END"):gsub("\n", "")))
    assert.are.equal(44, #der)
    assert.is_nil(crypto.ed25519_weak_key(der:sub(-32)))
    assert.is_nil(crypto.ed25519_weak_key(crypto.unhex("eb" .. ("ff"):rep(30) .. "7f"))) -- p - 2: the largest canonical y outside the list
  end)
end)

describe("a transparency member naming one key twice", function()
  it("is refused (two witnesses, or a witness and the log); two distinct witnesses parse", function()
    local transparency = require "converge.transparency"
    local keys = json.decode(slurp(World.ROOT .. "/client-libs/vectors/transparency.json")).keys
    -- a vkey's key under another name, as a witness's (type 0x04) key with that name's key id
    local function as_witness(name, vkey)
      local raw = crypto.strict_base64(vkey:match("^[^+]*%+[^+]*%+(.*)$")):sub(2)
      local id = transparency.key_id(name, transparency.COSIGNATURE_TYPE, raw)
      return { name = name, vkey = name .. "+" .. crypto.hex(id) .. "+" .. crypto.b64("\4" .. raw) }
    end
    local w1 = { name = "witness.test/witness-1", vkey = keys["witness-1"] }
    local w2 = { name = "witness.test/witness-2", vkey = keys["witness-2"] }
    local function member(ws) return { log = keys.log, witnesses = json.array(ws), min_cosignatures = #ws } end
    for _, ws in ipairs({ { w1, as_witness("witness.test/again", keys["witness-1"]) },
                          { w1, as_witness("witness.test/the-log", keys.log) } }) do
      local ok, e = pcall(transparency.parse_log_policy, member(ws))
      assert.is_false(ok, ws[2].name)
      assert.is_true(errors.is(e, "bundle"), tostring(e))
      assert.are.equal("transparency names one key twice (two witnesses, or a witness and the log)", e.detail)
    end
    local parsed = transparency.parse_log_policy(member({ w1, w2 }))
    assert.are.equal(2, #parsed.witnesses)
    assert.are.equal(2, parsed.min_cosignatures)
  end)
end)

describe("the response parser", function()
  it("survives a fixed-seed fuzz; only a signed 200 votes success", function()
    local der = crypto.der_of_pem(slurp(KEYS .. "/test-notary-cert.pem"))
    local pkey = require "openssl.pkey"
    local digest = require "openssl.digest"
    local key = pkey.new(slurp(KEYS .. "/test-notary-key.pem"))
    local fp = fingerprint.of(der):colon_hex()
    local list = '{"fingerprintList": [{"timestamp": {"start": "1323389219", "finish": "1324691510"}, "fingerprint": "' .. fp .. '"}]}'
    local sig = key:sign(digest.new("sha1"):update(list))
    local body = list:sub(1, -2) .. ', "signature": "' .. crypto.b64(sig) .. '"}'
    local good = "HTTP/1.0 200 X\r\nContent-Type: application/json\r\nContent-Length: " .. #body .. "\r\n\r\n" .. body
    local wanted = { fingerprint.parse(fp) }
    assert.are.equal("listed", legacy.outcome_from_http(good, wanted, der).kind)
    math.randomseed(20111206)
    local tokens = { "{", "}", "[", "]", '"', ",", ":", "\\", "\r\n", "NaN", "1e999", "-0", "\255" }
    local kinds, wrong = {}, {}
    for _ = 1, 3000 do
      local b = good
      for _ = 1, math.random(1, 4) do
        local at = math.random(1, #b)
        local op = math.random(0, 9)
        if op <= 2 then b = b:sub(1, at - 1) .. string.char(math.random(0, 255)) .. b:sub(at + 1)
        elseif op <= 4 then b = b:sub(1, at - 1) .. b:sub(at + math.random(1, 8))
        elseif op <= 7 then b = b:sub(1, at - 1) .. tokens[math.random(#tokens)] .. b:sub(at)
        else local from = math.random(1, #b); b = b:sub(1, at - 1) .. b:sub(from, from + math.random(0, 40)) .. b:sub(at) end
        if b == "" then b = "x" end
      end
      local ok, o, r = pcall(legacy.outcome_from_http, b, wanted, der)
      if not ok then
        wrong[#wrong + 1] = "raised: " .. tostring(o)
      else
        kinds[o.kind] = (kinds[o.kind] or 0) + 1
        if o.vote == "success" and not (r and r.status == 200) then wrong[#wrong + 1] = "a success without a signed 200" end
      end
    end
    assert.are.same({}, wrong)
    assert.is_true((kinds.response or 0) > 100, json.encode(kinds))
    assert.is_true((kinds.signature or 0) > 10, json.encode(kinds))
  end)
end)

