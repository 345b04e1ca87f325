package = "converge"
version = "0.1.0-1"
source = {
  url = "git+https://github.com/converge-notary/converge.git",
  dir = "converge/client-libs/lua",
}
description = {
  summary = "Ask Convergence notaries whether the certificate you were shown is the one they see",
  detailed = [[
    converge(host, port, fingerprint) asks independent notaries, in parallel, whether they see
    the same certificate from their own network paths (legacy Convergence v1 answers signed with
    RSA/SHA-1, or converge-answer/1 answers signed with Ed25519), applies a consensus policy and
    keeps the 2011 add-on's SQLite cache. TLS hooks for LuaSec: converge.tls.wrap/connect and an
    ssl.https-compatible converge.https.request that refuses certificates the notaries do not
    vouch for before any request is written.
  ]],
  homepage = "https://github.com/converge-notary/converge",
  license = "Apache-2.0",
}
dependencies = {
  "lua >= 5.3",
  "luasec >= 1.0",
  "luasocket >= 3.0",
  "lua-cjson >= 2.1",
  "luasql-sqlite3 >= 2.6",
  "luaossl >= 20200709",
  "luafilesystem >= 1.8",
}
external_dependencies = {
  OPENSSL = { header = "openssl/evp.h", library = "crypto" },
}
build = {
  type = "builtin",
  modules = {
    ["converge"] = "src/converge/init.lua",
    ["converge.errors"] = "src/converge/errors.lua",
    ["converge.json"] = "src/converge/json.lua",
    ["converge.crypto"] = "src/converge/crypto.lua",
    ["converge.fingerprint"] = "src/converge/fingerprint.lua",
    ["converge.policy"] = "src/converge/policy.lua",
    ["converge.bundle"] = "src/converge/bundle.lua",
    ["converge.config"] = "src/converge/config.lua",
    ["converge.legacy"] = "src/converge/legacy.lua",
    ["converge.extended"] = "src/converge/extended.lua",
    ["converge.transparency"] = "src/converge/transparency.lua",
    ["converge.cache"] = "src/converge/cache.lua",
    ["converge.notary_io"] = "src/converge/notary_io.lua",
    ["converge.client"] = "src/converge/client.lua",
    ["converge.tls"] = "src/converge/tls.lua",
    ["converge.https"] = "src/converge/https.lua",
    ["converge.vectors"] = "src/converge/vectors.lua",
    ["converge.ed25519"] = {
      sources = { "csrc/ed25519.c" },
      libraries = { "crypto" },
      incdirs = { "$(OPENSSL_INCDIR)" },
      libdirs = { "$(OPENSSL_LIBDIR)" },
    },
  },
}
