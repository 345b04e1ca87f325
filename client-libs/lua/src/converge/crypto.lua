--- Digests, base64, certificates and signatures, through luaossl and LuaSocket's mime; Ed25519
-- through converge.ed25519 (csrc/ed25519.c: luaossl cannot verify Ed25519, see there).
-- @module converge.crypto
local digest = require "openssl.digest"
local x509 = require "openssl.x509"
local rand = require "openssl.rand"
local mime = require "mime"
local ed25519 = require "converge.ed25519"

local M = {}

function M.sha1(data) return digest.new("sha1"):final(data) end
function M.sha256(data) return digest.new("sha256"):final(data) end
function M.hex(bytes) return (bytes:gsub(".", function(c) return string.format("%02x", c:byte()) end)) end
function M.unhex(hex) return (hex:gsub("..", function(h) return string.char(tonumber(h, 16)) end)) end
function M.random_bytes(n) return rand.bytes(n) end
--- A uniform random integer in [0, n).
function M.random_below(n) if n <= 1 then return 0 end return rand.uniform(n) end

--- Standard base64 with padding (alphabet and padding checked, trailing bits not), or nil.
function M.strict_base64(t)
  if type(t) ~= "string" or #t % 4 ~= 0 then return nil end
  if not t:match("^[A-Za-z0-9+/]*=?=?$") then return nil end
  if #t == 0 then return "" end
  return (mime.unb64(t))
end

--- Unpadded base64url (trailing bits not checked), or nil.
function M.unb64url(t)
  if type(t) ~= "string" or #t % 4 == 1 or not t:match("^[A-Za-z0-9_%-]*$") then return nil end
  if #t == 0 then return "" end
  local s = t:gsub("-", "+"):gsub("_", "/")
  return (mime.unb64(s .. string.rep("=", (4 - #s % 4) % 4)))
end

function M.b64(bytes) if #bytes == 0 then return "" end return (mime.b64(bytes)) end
function M.b64url(bytes) return (M.b64(bytes):gsub("+", "-"):gsub("/", "_"):gsub("=+$", "")) end

--- The PEM of DER bytes.
function M.pem_of_der(der)
  local b, lines = M.b64(der), {}
  for i = 1, #b, 64 do lines[#lines + 1] = b:sub(i, i + 63) end
  return "-----BEGIN CERTIFICATE-----\n" .. table.concat(lines, "\n") .. "\n-----END CERTIFICATE-----\n"
end

--- The DER of the first PEM certificate in `pem`, or nil.
function M.der_of_pem(pem)
  local b = type(pem) == "string" and pem:match("%-%-%-%-%-BEGIN CERTIFICATE%-%-%-%-%-(.-)%-%-%-%-%-END CERTIFICATE%-%-%-%-%-")
  if not b then return nil end
  b = b:gsub("%s+", "")
  if b:find("[^A-Za-z0-9+/=]") then return nil end
  return (mime.unb64(b))
end

--- Whether DER bytes are exactly one certificate (OpenSSL reads it, nothing after it).
function M.certificate_parses(der)
  local ok, crt = pcall(x509.new, der, "DER")
  if not ok or not crt then return false end
  local ok2, again = pcall(crt.tostring, crt, "DER")
  return ok2 and again == der
end

local rsa_keys = {} -- certificate DER -> public key (a notary's key, parsed once)

--- Whether `sig` is an RSASSA-PKCS1-v1_5 SHA-1 signature of `msg` by the certificate's key.
-- Raises a "signature" error when the certificate holds no RSA key.
function M.rsa_sha1_verify(der, sig, msg)
  local key = rsa_keys[der]
  if not key then
    local ok, crt = pcall(x509.new, der, "DER")
    local pk = ok and crt and crt:getPublicKey()
    if not pk or pk:type() ~= "rsaEncryption" then
      require("converge.errors").throw("signature", "the notary certificate does not hold an RSA key")
    end
    key = pk
    rsa_keys[der] = key
  end
  local ok, good = pcall(key.verify, key, sig, digest.new("sha1"):update(msg))
  return ok and good == true
end

--- Whether `sig` is an Ed25519 signature of `msg` by the raw 32-byte public key.
function M.ed25519_verify(pub, sig, msg)
  local ok, good = pcall(ed25519.verify, pub, sig, msg)
  return ok and good
end

-- The encoded y coordinates (sign bit cleared) of the eight points of small order: 0, 1, p - 1,
-- y8 and p - y8 (p = 2^255 - 19), 32 bytes little-endian each.
local SMALL_ORDER_Y = {}
for _, h in ipairs({
  "0000000000000000000000000000000000000000000000000000000000000000",
  "0100000000000000000000000000000000000000000000000000000000000000",
  "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
  "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
  "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
}) do SMALL_ORDER_Y[M.unhex(h)] = true end

--- Why the 32-byte Ed25519 public key `raw` must not be trusted, or nil: its y (the key with the
-- sign bit, bit 255, cleared) at or above p = 2^255 - 19, or one of the y values of the points
-- of small order (under which some libraries accept R = identity, S = 0 as a signature of any
-- message). Plain byte comparison; points off the curve are not refused.
function M.ed25519_weak_key(raw)
  if type(raw) ~= "string" or #raw ~= 32 then return "an Ed25519 public key has 32 bytes" end
  local y = raw:sub(1, 31) .. string.char(raw:byte(32) & 0x7f)
  if y:byte(32) == 0x7f and y:sub(2, 31) == string.rep("\xff", 30) and y:byte(1) >= 0xed then
    return "an Ed25519 public key not in canonical form"
  end
  if SMALL_ORDER_Y[y] then return "an Ed25519 public key of small order" end
  return nil
end

return M
