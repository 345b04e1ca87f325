# frozen_string_literal: true

require "openssl"

module Converge
  # A certificate digest with its algorithm ("sha1" or "sha256").
  class Fingerprint
    MAX_TEXT = 200

    attr_reader :algorithm, :digest

    def initialize(algorithm, digest)
      @algorithm = algorithm
      @digest = digest.b
    end

    # The canonical form: upper-case hex, a colon between bytes.
    def colon_hex
      digest.unpack1("H*").upcase.scan(/../).join(":")
    end
    alias to_s colon_hex

    def ==(other)
      other.is_a?(Fingerprint) && algorithm == other.algorithm && digest == other.digest
    end
    alias eql? ==

    def hash = [algorithm, digest].hash

    # The fingerprint of a DER certificate.
    def self.of(der, algorithm = "sha1")
      d = algorithm == "sha256" ? OpenSSL::Digest::SHA256.digest(der) : OpenSSL::Digest::SHA1.digest(der)
      new(algorithm, d)
    end

    # Parses 40 (SHA-1) or 64 (SHA-256) hex digits in any case, either with no separators or
    # with a colon between every pair; surrounding spaces, tabs, CR and LF are ignored.
    # Raises FingerprintError for anything else.
    def self.parse(text)
      raise FingerprintError, "a fingerprint is a string" unless text.is_a?(String)
      raise FingerprintError, "fingerprint longer than #{MAX_TEXT} characters" if text.length > MAX_TEXT

      s = text.gsub(/\A[ \t\r\n]+|[ \t\r\n]+\z/, "")
      raise FingerprintError, "empty fingerprint" if s.empty?

      if s.include?(":")
        groups = s.split(":", -1)
        unless groups.all? { |g| g.match?(/\A[0-9A-Fa-f]{2}\z/) }
          raise FingerprintError, "colon-separated fingerprints need two hex digits per byte"
        end

        digits = groups.join
      else
        raise FingerprintError, "fingerprint contains a non-hex character" unless s.match?(/\A[0-9A-Fa-f]*\z/)
        raise FingerprintError, "odd number of hex digits" if s.length.odd?

        digits = s
      end
      digest = [digits].pack("H*")
      case digest.bytesize
      when 20 then new("sha1", digest)
      when 32 then new("sha256", digest)
      else raise FingerprintError, "a fingerprint has 20 (SHA-1) or 32 (SHA-256) bytes, not #{digest.bytesize}"
      end
    end
  end
end
