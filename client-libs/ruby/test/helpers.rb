# frozen_string_literal: true

# Test helpers: fake notaries (real TLS servers on 127.0.0.1 with the vectors' test-only keys,
# answering in either format), HTTPS sites and configuration directories.

$LOAD_PATH.unshift File.expand_path("../lib", __dir__)
require "minitest/autorun"
require "converge"
require "socket"
require "tmpdir"
require "fileutils"

module Helpers
  VECTORS = File.expand_path("../../vectors", __dir__)
  KEYS = File.join(VECTORS, "keys")

  def self.read(name) = File.read(File.join(KEYS, name))

  NOTARY_CERT = read("test-notary-cert.pem")
  NOTARY_KEY = read("test-notary-key.pem")
  OTHER_CERT = read("test-other-cert.pem")
  OTHER_KEY = read("test-other-key.pem")

  def self.fp(pem, alg = "sha1") = Converge::Fingerprint.of(OpenSSL::X509::Certificate.new(pem).to_der, alg).colon_hex

  GENUINE = fp(NOTARY_CERT)
  FORGED = fp(OTHER_CERT)

  # The notary's canonical JSON (RFC 8785) for the ASCII test statements: keys sorted, no spaces.
  def self.canonical(v)
    sorted = lambda do |x|
      case x
      when Hash then x.keys.sort.to_h { |k| [k, sorted.(x[k])] }
      when Array then x.map(&sorted)
      else x
      end
    end
    JSON.generate(sorted.(v))
  end

  def self.server_context(cert, key)
    ctx = OpenSSL::SSL::SSLContext.new
    ctx.cert = OpenSSL::X509::Certificate.new(cert)
    ctx.key = OpenSSL::PKey.read(key)
    ctx
  end

  # Reads one HTTP request (head and Content-Length body) from io.
  def self.read_request(io)
    buf = +""
    until (head_end = buf.index("\r\n\r\n"))
      chunk = io.readpartial(4096)
      buf << chunk
    end
    len = buf[0, head_end][/content-length: *(\d+)/i, 1].to_i
    buf << io.readpartial(4096) while buf.bytesize < head_end + 4 + len
    buf
  rescue EOFError, IOError, SystemCallError, OpenSSL::SSL::SSLError
    nil
  end

  # A notary answering every request the same way; counts the requests it read.
  class FakeNotary
    attr_reader :name, :port, :requests, :cert
    attr_accessor :mode, :sees, :delay, :reply
    attr_reader :key, :ed, :kid

    def initialize(name, mode, cert: NOTARY_CERT, key: NOTARY_KEY, sees: GENUINE)
      @name = name
      @mode = mode
      @cert = cert
      @key = OpenSSL::PKey.read(key)
      @sees = sees
      @delay = 0
      @requests = Queue.new
      @ed = OpenSSL::PKey.generate_key("ED25519")
      @ed_raw = @ed.public_to_der[-32..]
      @kid = Converge::Bundles.key_id_of(@ed_raw)
      tcp = TCPServer.new("127.0.0.1", 0)
      @port = tcp.addr[1]
      @server = OpenSSL::SSL::SSLServer.new(tcp, Helpers.server_context(cert, key))
      @server.start_immediately = false
      @thread = Thread.new { accept_loop(tcp) }
    end

    def count = @requests.size

    def bundle(extended: false)
      doc = { "version" => 1, "name" => name,
              "hosts" => [{ "host" => "127.0.0.1", "ssl_port" => port, "http_port" => port, "certificate" => cert }] }
      if extended
        doc["protocols"] = ["converge-answer/1"]
        doc["signing_keys"] = [{ "alg" => "ed25519", "key_id" => @kid, "public_key" => Converge::Bundles.b64url(@ed_raw), "status" => "current" }]
      end
      JSON.pretty_generate(doc)
    end

    def stop
      @thread.kill
      @server.close
    rescue StandardError
      nil
    end

    private

    def accept_loop(_tcp)
      loop do
        sock = @server.accept
        Thread.new(sock) { |s| serve(s) }
      rescue StandardError
        break if @server.closed?
      end
    end

    def serve(sock)
      sock.accept
      req = Helpers.read_request(sock)
      return unless req

      @requests << req
      sleep @delay if @delay.positive?
      reply = answer(req)
      if reply
        sock.write(reply)
      elsif mode == :hang
        sleep 30
      end
    rescue StandardError
      nil
    ensure
      sock.close rescue nil # rubocop:disable Style/RescueModifier
    end

    def answer(req)
      return nil if mode == :hang
      return reply if mode == :raw
      return "SSH-2.0-nope\r\n\r\n" if mode == :garbage

      body_text = req[(req.index("\r\n\r\n") + 4)..]
      if req.start_with?("POST /v2/answer")
        body = JSON.parse(body_text)
        seen = body["alg"] == "sha256" ? Helpers.fp(NOTARY_CERT, "sha256") : sees
        verdict = body["fingerprint"] == seen ? "match" : "mismatch"
        request = { "fingerprint" => body["fingerprint"], "alg" => body["alg"] }
        request["nonce"] = body["nonce"] if body["nonce"]
        stmt = { "type" => "converge-answer/1", "key_id" => @kid, "verdict" => verdict, "detail" => "",
                 "answered_at" => Time.now.to_i - (mode == :extended_stale ? 3600 : 0),
                 "target" => { "host" => body["host"].downcase, "port" => body["port"], "ip" => body["ip"] },
                 "request" => request, "cache" => "miss", "observations" => [] }
        value = Converge::Bundles.b64url(@ed.sign(nil, Helpers.canonical(stmt)))
        answer = Helpers.canonical("statement" => stmt, "signature" => { "alg" => "ed25519", "key_id" => @kid, "value" => value })
        status = verdict == "match" ? "200 OK" : "409 Conflict"
        return "HTTP/1.0 #{status}\r\nContent-Type: application/vnd.converge.answer+json\r\nContent-Length: #{answer.bytesize}\r\n\r\n#{answer}"
      end
      return "HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n" if %i[extended extended_stale].include?(mode)

      fp = body_text.delete_prefix("fingerprint=")
      status = mode == :mismatch || fp != sees ? 409 : 200
      list = %({"fingerprintList": [{"timestamp": {"start": "1323389219", "finish": "1324691510"}, "fingerprint": "#{sees}"}]})
      sig = [@key.sign(OpenSSL::Digest.new("SHA1"), list)].pack("m0")
      body = %(#{list[0..-2]}, "signature": "#{sig}"})
      "HTTP/1.0 #{status} X\r\nContent-Type: application/json\r\nContent-Length: #{body.bytesize}\r\n\r\n#{body}"
    end
  end

  # A configuration directory enabling these notaries.
  def self.config_dir(notaries, extended: false, **settings)
    dir = Dir.mktmpdir("converge-rb-")
    FileUtils.mkdir_p([File.join(dir, "notaries-available"), File.join(dir, "notaries-enabled")])
    notaries.each_with_index do |n, i|
      file = format("%02d-%s.notary", i, n.name.tr(" ", "-"))
      File.write(File.join(dir, "notaries-available", file), n.bundle(extended: extended))
      File.symlink("../notaries-available/#{file}", File.join(dir, "notaries-enabled", file))
    end
    File.write(File.join(dir, "converge.config"),
               JSON.generate({ "connect-timeout" => 2, "notary-timeout" => 2, "total-timeout" => 4 }.merge(settings.transform_keys(&:to_s))))
    dir
  end

  # An HTTPS site on 127.0.0.1 answering body; counts requests and the bytes it read.
  class Site
    attr_reader :port, :requests

    def initialize(cert: NOTARY_CERT, key: NOTARY_KEY, body: "genuine")
      tcp = TCPServer.new("127.0.0.1", 0)
      @port = tcp.addr[1]
      @requests = Queue.new
      server = OpenSSL::SSL::SSLServer.new(tcp, Helpers.server_context(cert, key))
      server.start_immediately = false
      @server = server
      @thread = Thread.new do
        loop do
          s = server.accept
          Thread.new(s) do |c|
            c.accept
            if (req = Helpers.read_request(c))
              @requests << req
              c.write("HTTP/1.1 200 OK\r\nContent-Length: #{body.bytesize}\r\nConnection: close\r\n\r\n#{body}")
            end
          rescue StandardError
            nil
          ensure
            c.close rescue nil # rubocop:disable Style/RescueModifier
          end
        rescue StandardError
          break if server.closed?
        end
      end
    end

    def stop
      @thread.kill
      @server.close
    rescue StandardError
      nil
    end
  end
end
