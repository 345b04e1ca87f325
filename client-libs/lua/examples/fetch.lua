-- Fetch a page only if the notaries see the certificate this machine sees.
--   lua5.4 examples/fetch.lua https://www.example.org/ [CONFIG_DIR]
local https = require "converge.https"          -- was: require "ssl.https"
local client = require("converge.client").load(arg[2])   -- discovered when CONFIG_DIR is absent
local chunks = {}
local ok, code = https.request({ url = arg[1], client = client, sink = require("ltn12").sink.table(chunks) })
if not ok then                                   -- a NotTrusted (refused before the request) or an IO error
  io.stderr:write(tostring(code), "\n")
  os.exit(1)
end
io.write(table.concat(chunks))
