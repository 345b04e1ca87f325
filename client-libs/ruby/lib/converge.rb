# frozen_string_literal: true

# Ask Convergence notaries whether the certificate you were shown for host:port is the one they
# see from their own network paths. Same contract as the Python, C, Go, Java, TypeScript and
# Rust libraries: the shared configuration directory and .notary bundles, the SQLite cache of
# the 2011 add-on, notaries asked in parallel under the consensus, majority or minority policy
# with stand-aside, legacy Convergence v1 answers and extended converge-answer/1 answers, and
# the bounce relay.
#
#   require "converge"
#   v = Converge.converge("www.example.org", 443, "8F:C0:79:...")
#   Converge::HTTP.get(URI("https://www.example.org/"))   # the TLS hook
module Converge
end

require_relative "converge/version"
require_relative "converge/errors"
require_relative "converge/fingerprint"
require_relative "converge/policy"
require_relative "converge/strict_json"
require_relative "converge/bundle"
require_relative "converge/legacy"
require_relative "converge/extended"
require_relative "converge/transparency"
require_relative "converge/config"
require_relative "converge/cache"
require_relative "converge/notary_io"
require_relative "converge/client"
require_relative "converge/tls"
require_relative "converge/vectors"
