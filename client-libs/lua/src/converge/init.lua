--- converge: ask independent notaries whether they see the certificate you see.
--
--     local converge = require "converge"
--     local v = converge.converge("www.example.org", 443, "AB:CD:...")   -- SHA-1 or SHA-256
--     print(v.trusted, v.reason)
--
-- @module converge
local M = {}
M.VERSION = "0.1.0"

M.errors = require "converge.errors"
M.client = require "converge.client"

--- The notaries' verdict on (host, port, fingerprint). `opts`: config_dir (else discovered),
-- ip (ask the notaries to connect to this address), certificate (the DER: matched by SHA-1 and
-- SHA-256), client (a client to use). Raises a converge error (kind fingerprint, target,
-- config, bundle, cache-io) for bad input; notary failures are votes in the verdict.
function M.converge(host, port, fingerprint, opts)
  opts = opts or {}
  local c = opts.client or M.client.shared(opts.config_dir)
  return c:check(host, port, fingerprint, opts)
end

--- converge() for a DER certificate (matched by SHA-1 and SHA-256).
function M.converge_certificate(host, port, der, opts)
  opts = opts or {}
  local c = opts.client or M.client.shared(opts.config_dir)
  return c:check_certificate(host, port, der, opts)
end

return M
