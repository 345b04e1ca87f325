# frozen_string_literal: true

require "base64"
require "openssl"

module Converge
  # One physical host of a notary; pin is the SHA-1 of its certificate.
  NotaryHost = Struct.new(:host, :ssl_port, :http_port, :certificate_pem, :certificate, :pin, keyword_init: true)

  # One Ed25519 key of the extended format.
  SigningKey = Struct.new(:key_id, :public_key, :current, :valid_until, keyword_init: true) do
    # A current key always, a retired one while now <= valid_until.
    def trusted_at?(now) = current || now <= valid_until
  end

  # One logical notary (an organisation), parsed from a .notary file.
  Bundle = Struct.new(:name, :version, :hosts, :bundle_location, :region, :protocols, :signing_keys, :transparency,
                      keyword_init: true) do
    # Whether the bundle advertises converge-answer/1 and carries its signing keys.
    def offers_extended? = protocols.include?(EXTENDED_FORMAT) && !signing_keys.empty?
  end

  EXTENDED_FORMAT = "converge-answer/1"
  LEGACY_FORMAT = "convergence-v1"

  # .notary bundles: v1, or the version-less v0 form.
  module Bundles
    MAX_BYTES = 64 * 1024
    MAX_HOSTS = 16
    MAX_SIGNING_KEYS = 8
    HOST_RE = /\A[A-Za-z0-9._:-]{1,253}\z/
    PEM_RE = /\A[\t\n\f\r ]*-----BEGIN CERTIFICATE-----\r?\n([A-Za-z0-9+\/=\r\n]+)-----END CERTIFICATE-----[\t\n\f\r ]*\z/
    ED25519_SPKI_PREFIX = ["302a300506032b6570032100"].pack("H*")
    # The encoded y coordinates (sign bit cleared) of the eight points of small order: 0, 1,
    # p - 1, y8 and p - y8 (p = 2^255 - 19), 32 bytes little-endian each.
    SMALL_ORDER_Y = %w[
      0000000000000000000000000000000000000000000000000000000000000000
      0100000000000000000000000000000000000000000000000000000000000000
      ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f
      26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05
      c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a
    ].map { |h| [h].pack("H*") }.freeze

    module_function

    def port(obj, key)
      n = obj[key]
      raise BundleError, "#{key} must be an integer port 1..65535" unless n.is_a?(Integer) && n.between?(1, 65_535)

      n
    end

    def strict_base64(text)
      return nil unless (text.length % 4).zero? && text.match?(%r{\A[A-Za-z0-9+/]*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?\z})

      text.unpack1("m")
    end

    # The certificate of a DER string, or nil when it does not parse as one certificate.
    def certificate(der)
      cert = OpenSSL::X509::Certificate.new(der)
      cert.to_der == der ? cert : nil
    rescue OpenSSL::X509::CertificateError
      nil
    end

    def parse_host(v)
      raise BundleError, "a host entry must be an object" unless v.is_a?(Hash)

      host = v["host"]
      raise BundleError, "host must be a DNS name or an IP address" unless host.is_a?(String) && host.match?(HOST_RE)

      pem = v["certificate"]
      m = pem.is_a?(String) && PEM_RE.match(pem)
      raise BundleError, "certificate of #{host} is not one PEM certificate" unless m

      der = strict_base64(m[1].delete("\r\n"))
      cert = der && certificate(der)
      raise BundleError, "certificate of #{host} does not parse" unless cert

      NotaryHost.new(host: host, ssl_port: port(v, "ssl_port"), http_port: port(v, "http_port"),
                     certificate_pem: pem, certificate: cert, pin: Fingerprint.of(der, "sha1"))
    end

    # The key id of a raw Ed25519 public key: the first 8 bytes of its SHA-256, lower-case hex.
    def key_id_of(raw) = OpenSSL::Digest::SHA256.digest(raw)[0, 8].unpack1("H*")

    # Unpadded base64url (unused trailing bits not checked), or nil.
    def unb64url(text)
      return nil unless text.is_a?(String) && text.length % 4 != 1 && text.match?(/\A[A-Za-z0-9_-]*\z/)

      padded = text + ("=" * ((4 - (text.length % 4)) % 4))
      padded.tr("-_", "+/").unpack1("m")
    end

    def b64url(bytes) = Base64.urlsafe_encode64(bytes, padding: false)

    # Why the 32-byte Ed25519 public key raw must not be trusted, or nil: its y (the key with
    # the sign bit, bit 255, cleared) at or above p = 2^255 - 19, or one of the y values of the
    # points of small order (under which some libraries accept R = identity, S = 0 as a
    # signature of any message). Plain byte comparison; points off the curve are not refused.
    def weak_key(raw)
      return "an Ed25519 public key has 32 bytes" unless raw.is_a?(String) && raw.bytesize == 32

      y = raw.b
      y.setbyte(31, y.getbyte(31) & 0x7f)
      if y.getbyte(31) == 0x7f && y.byteslice(1, 30).each_byte.all?(0xff) && y.getbyte(0) >= 0xed
        return "an Ed25519 public key not in canonical form"
      end
      return "an Ed25519 public key of small order" if SMALL_ORDER_Y.include?(y)

      nil
    end

    def parse_signing_key(k)
      raise BundleError, "a signing key entry must be an object" unless k.is_a?(Hash)

      k.each_key do |name|
        unless %w[alg key_id public_key status valid_until].include?(name)
          raise BundleError, "unknown signing key field #{name.inspect}"
        end
      end
      raise BundleError, "signing key alg must be ed25519" unless k["alg"] == "ed25519"

      raw = unb64url(k["public_key"])
      raise BundleError, "signing key public_key must be unpadded base64url" unless raw
      raise BundleError, "an Ed25519 public key has 32 bytes" unless raw.bytesize == 32

      weak = weak_key(raw)
      raise BundleError, "signing key: #{weak}" if weak

      kid = k["key_id"]
      raise BundleError, "signing key id #{kid.inspect} does not match its public key" unless kid == key_id_of(raw)

      case k["status"]
      when "current"
        raise BundleError, "a current signing key has no valid_until" unless k["valid_until"].nil?

        SigningKey.new(key_id: kid, public_key: raw, current: true, valid_until: 0)
      when "retired"
        u = k["valid_until"]
        unless u.is_a?(Integer) && u.positive? && u <= StrictJSON::MAX_SAFE_INTEGER
          raise BundleError, "a retired signing key needs valid_until (unix seconds)"
        end

        SigningKey.new(key_id: kid, public_key: raw, current: false, valid_until: u)
      else raise BundleError, "signing key status must be current or retired"
      end
    end

    # Parses a list of signing key entries (a bundle's signing_keys).
    def parse_signing_keys(v)
      raise BundleError, "signing_keys must be a non-empty list" unless v.is_a?(Array) && !v.empty?
      raise BundleError, "more than #{MAX_SIGNING_KEYS} signing keys" if v.length > MAX_SIGNING_KEYS

      keys = []
      v.each do |x|
        k = parse_signing_key(x)
        raise BundleError, "signing key ids repeat" if keys.any? { |o| o.key_id == k.key_id }

        keys << k
      end
      raise BundleError, "signing_keys must hold exactly one current key" unless keys.count(&:current) == 1

      keys
    end

    def parse_protocols(v)
      raise BundleError, "protocols must be a list of at most 16 strings" unless v.is_a?(Array) && v.length <= 16

      v.map do |x|
        raise BundleError, "protocols must be a list of short strings" unless x.is_a?(String) && x.length.between?(1, 64)

        x
      end
    end

    # Parses and validates a .notary file; raises BundleError.
    def parse(data)
      raise BundleError, "bundle larger than #{MAX_BYTES} bytes" if data.bytesize > MAX_BYTES

      obj = StrictJSON.parse(data)
      raise BundleError, "bundle is not a JSON object" unless obj.is_a?(Hash)

      version = 0
      if obj.key?("version")
        v = obj["version"]
        unless [0, 1].include?(v) && (v.is_a?(Integer) || v.is_a?(Float))
          raise BundleError, "unsupported bundle version"
        end

        version = v.to_i
      end
      if version.zero?
        h = parse_host(obj)
        return Bundle.new(name: h.host, version: 0, hosts: [h], protocols: [], signing_keys: [])
      end
      name = obj["name"]
      raise BundleError, "name must be a non-empty string" unless name.is_a?(String) && !name.strip.empty? && name.length <= 200

      hosts = obj["hosts"]
      raise BundleError, "hosts must be a non-empty list" unless hosts.is_a?(Array) && !hosts.empty?
      raise BundleError, "more than #{MAX_HOSTS} hosts" if hosts.length > MAX_HOSTS

      loc = obj["bundle_location"]
      unless loc.nil? || (loc.is_a?(String) && loc.start_with?("https://") && loc.end_with?(".notary") && loc.length <= 2048)
        raise BundleError, "bundle_location must be an https:// URL ending in .notary"
      end

      region = obj["region"]
      unless region.nil? || (region.is_a?(String) && region.match?(/\A[A-Za-z]{2}\z/))
        raise BundleError, "region must be an ISO-3166 alpha-2 code"
      end

      parsed_hosts = hosts.map { |h| parse_host(h) }
      protocols = obj.key?("protocols") ? parse_protocols(obj["protocols"]) : []
      keys = obj.key?("signing_keys") ? parse_signing_keys(obj["signing_keys"]) : []
      if protocols.include?(EXTENDED_FORMAT) && keys.empty?
        raise BundleError, "protocols lists #{EXTENDED_FORMAT} but the bundle has no signing_keys"
      end

      log = obj.key?("transparency") ? Transparency.parse_policy(obj["transparency"]) : nil
      Bundle.new(name: name, version: 1, hosts: parsed_hosts, bundle_location: loc, region: region&.upcase,
                 protocols: protocols, signing_keys: keys, transparency: log)
    end
  end
end
