# frozen_string_literal: true

# The transparency log, live: a real `notary serve` keeps its log (on by default) and
# `notary bundle` names it in the bundle. A match with its proof is trusted, directly and
# through a relay that passes answers as they are (a TLS server with the notary's own
# certificate, relaying to it); twins: the relay strips the member, moves the index, changes
# the checkpoint's root or the logged entry, and that notary's vote is a failure of the kind
# the check names.
require_relative "helpers"
require "open3"

module LiveLog
  ROOT = File.expand_path("../../..", __dir__)
  NOTARY = File.join(ROOT, ".venv", "bin", "notary")

  # the notary (started once, stopped after the run): data dir, port, its bundle
  def self.notary
    @notary ||= begin
      tmp = Dir.mktmpdir("converge-ruby-log")
      port = TCPServer.open("127.0.0.1", 0) { |s| s.addr[1] }
      log = File.join(tmp, "notary.log")
      data = File.join(tmp, "data")
      pid = Process.spawn(NOTARY, "serve", "--data-dir", data, "--listen", "127.0.0.1:#{port}",
                          "--allow-target", "127.0.0.0/8", in: File::NULL, out: log, err: %i[child out])
      Minitest.after_run do
        Process.kill("TERM", pid)
        Process.wait(pid)
        FileUtils.rm_rf(tmp)
      end
      up = 300.times.any? do # at most 30 s
        TCPSocket.new("127.0.0.1", port).close
        File.exist?(File.join(data, "notary.key"))
      rescue SystemCallError
        sleep 0.1
        false
      end
      raise "the notary did not start: #{File.read(log)}" unless up

      out, status = Open3.capture2(NOTARY, "bundle", "--data-dir", data, "--host", "127.0.0.1", "--ssl-port", port.to_s,
                                   "--name", "Org Log")
      raise "notary bundle failed" unless status.success?

      { data: data, port: port, bundle: JSON.parse(out), tmp: tmp }
    end
  end

  def self.body_rewrite(body, mode)
    case mode
    when :strip then (i = body.index(',"transparency":')) ? "#{body[0, i]}}" : body
    when :index then body.sub(/"index":(\d+)/) { %("index":#{Regexp.last_match(1).to_i + 1}) }
    when :root then body.sub(/("checkpoint":"[^"\\]*\\n[0-9]+\\n)(.)/) { Regexp.last_match(1) + (Regexp.last_match(2) == "A" ? "B" : "A") }
    when :entry then body.sub(/("entry":")(.)/) { Regexp.last_match(1) + (Regexp.last_match(2) == "e" ? "f" : "e") }
    else body
    end
  end

  # A relay with the notary's certificate in front of it; mode: how it rewrites each answer
  # (stopped as a Helpers::Site is).
  class Relay < Helpers::Site
    def initialize(notary, mode) # rubocop:disable Lint/MissingSuper
      data = notary[:data]
      tcp = TCPServer.new("127.0.0.1", 0)
      @port = tcp.addr[1]
      @server = OpenSSL::SSL::SSLServer.new(tcp, Helpers.server_context(File.read("#{data}/notary.pem"),
                                                                        File.read("#{data}/notary.key")))
      @thread = Thread.new do
        loop do
          sock = @server.accept
          Thread.new(sock) { |s| serve(s, notary[:port], mode) }
        rescue StandardError
          break if @server.closed?
        end
      end
    end

    def serve(sock, upstream, mode)
      req = Helpers.read_request(sock)
      return unless req

      up = OpenSSL::SSL::SSLSocket.new(TCPSocket.new("127.0.0.1", upstream))
      up.connect
      up.write(req)
      resp = +""
      begin
        resp << up.readpartial(65_536) while resp.bytesize < 262_144
      rescue EOFError, OpenSSL::SSL::SSLError, SystemCallError
        nil
      end
      up.close
      head, body = resp.b.split("\r\n\r\n", 2)
      body = LiveLog.body_rewrite(body.to_s, mode)
      sock.write("#{head.sub(/\r\ncontent-length: *\d+/i, "\r\nContent-Length: #{body.bytesize}")}\r\n\r\n#{body}")
    rescue StandardError
      nil
    ensure
      sock.close
    end
  end
end

class TestLog < Minitest::Test
  def check_through(mode)
    n = LiveLog.notary
    relay = mode && LiveLog::Relay.new(n, mode)
    bundle = JSON.parse(JSON.generate(n[:bundle]))
    bundle["hosts"][0]["ssl_port"] = relay ? relay.port : n[:port]
    dir = Dir.mktmpdir("converge-ruby-logcfg", n[:tmp])
    FileUtils.mkdir_p(["#{dir}/notaries-available", "#{dir}/notaries-enabled"])
    File.write("#{dir}/notaries-available/log.notary", JSON.generate(bundle))
    File.symlink("../notaries-available/log.notary", "#{dir}/notaries-enabled/log.notary")
    File.write("#{dir}/converge.config", '{"db": null, "connect-timeout": 3, "notary-timeout": 12, "total-timeout": 15}')
    pem = File.read("#{n[:data]}/notary.pem")
    Converge::Client.load(dir).check("127.0.0.1", n[:port], Helpers.fp(pem, "sha256"))
  ensure
    relay&.stop
  end

  def assert_vote(v, trusted, kind)
    assert_equal [kind], v.results.map(&:kind), v.results.map(&:detail).inspect
    assert_equal trusted, v.trusted?
  end

  def test_the_bundle_names_the_log
    assert LiveLog.notary[:bundle].key?("transparency")
    assert_kind_of Converge::Transparency::Policy, Converge::Bundles.parse(JSON.generate(LiveLog.notary[:bundle])).transparency
  end

  def test_a_match_with_a_valid_proof_is_trusted = assert_vote(check_through(nil), true, "match")
  def test_a_relay_passing_the_answer_as_it_is = assert_vote(check_through(:pass), true, "match")
  def test_twin_a_relay_strips_the_member = assert_vote(check_through(:strip), false, "log-missing")
  def test_twin_a_relay_moves_the_index = assert_vote(check_through(:index), false, "log-proof")
  def test_twin_a_relay_changes_the_root = assert_vote(check_through(:root), false, "log-checkpoint")
  def test_twin_a_relay_changes_the_entry = assert_vote(check_through(:entry), false, "log-entry")
end
