# Fetch a page only if the notaries see the certificate this machine sees.
#   ruby -Ilib examples/fetch.rb https://www.example.org/ [CONFIG_DIR]
require "converge"

url = URI(ARGV[0])
http = Converge::HTTP.new(url.host, url.port)           # Net::HTTP; the notaries decide TLS
http.use_ssl = true
http.converge_client = Converge::Client.load(ARGV[1])   # discovered when CONFIG_DIR is absent
begin
  print http.start { |h| h.get(url.request_uri).body }
rescue Converge::NotTrusted => e
  abort e.message
end
