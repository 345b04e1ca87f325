# frozen_string_literal: true

require_relative "lib/converge/version"

Gem::Specification.new do |s|
  s.name = "converge-notary"
  s.version = Converge::VERSION
  s.summary = "Ask Convergence notaries whether the certificate you were shown is the one they see"
  s.description = "converge(): the notaries' verdict on a host's certificate, a TLS hook for " \
                  "OpenSSL::SSL and Net::HTTP, the shared notary configuration and local cache."
  s.authors = ["converge"]
  s.license = "Apache-2.0"
  s.homepage = "https://github.com/converge-notary/converge"
  s.required_ruby_version = ">= 3.1"
  s.files = Dir["lib/**/*.rb"] + ["README.md", "bin/converge-conformance"]
  s.require_paths = ["lib"]
  s.executables = []
  s.add_dependency "sqlite3", ">= 1.4"
  s.add_development_dependency "minitest", ">= 5.15"
end
