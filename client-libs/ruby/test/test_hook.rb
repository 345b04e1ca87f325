# frozen_string_literal: true

# End to end through the TLS hooks: the genuine site loads; the forged one fails before a
# single byte of the request reaches it (the must-fail twin), with Converge::HTTP directly and
# through a CONNECT proxy (the origin is asked about), and with Converge::TLS.connect.
require_relative "helpers"

class TestHook < Minitest::Test
  def setup
    @ns = [Helpers::FakeNotary.new("Org A", :listed), Helpers::FakeNotary.new("Org B", :listed)]
    @client = Converge::Client.load(Helpers.config_dir(@ns, "notary-agreement" => "consensus"))
    @genuine = Helpers::Site.new
    @forged = Helpers::Site.new(cert: Helpers::OTHER_CERT, key: Helpers::OTHER_KEY, body: "forged")
  end

  def teardown = [*@ns, @genuine, @forged].each(&:stop)

  def get(port, proxy_port: nil)
    http = Converge::HTTP.new("127.0.0.1", port, proxy_port && "127.0.0.1", proxy_port)
    http.use_ssl = true
    http.converge_client = @client
    http.start { |h| h.get("/").body }
  end

  def proxy(divert: nil)
    tcp = TCPServer.new("127.0.0.1", 0)
    asked = Queue.new
    Thread.new do
      loop do
        c = begin
          tcp.accept
        rescue IOError, SystemCallError
          break # the test closed the proxy
        end
        Thread.new(c) do |conn|
          head = +""
          head << conn.readpartial(1) until head.end_with?("\r\n\r\n")
          line = head.lines.first
          asked << line
          up = TCPSocket.new("127.0.0.1", divert || line.split[1].split(":").last.to_i)
          conn.write("HTTP/1.1 200 Connection established\r\n\r\n")
          t = Thread.new { IO.copy_stream(up, conn) rescue nil } # rubocop:disable Style/RescueModifier
          IO.copy_stream(conn, up) rescue nil # rubocop:disable Style/RescueModifier
          t.join(1)
        rescue StandardError
          nil
        end
      end
    end
    [tcp.addr[1], asked, tcp]
  end

  def test_converge_http_genuine_loads_forged_refused_before_the_request
    assert_equal "genuine", get(@genuine.port)
    e = assert_raises(Converge::NotTrusted) { get(@forged.port) }
    refute e.verdict.trusted
    assert_equal 0, @forged.requests.size
  end

  def test_through_a_connect_proxy_the_origin_is_asked_about_and_an_attackers_proxy_is_caught
    port, asked, tcp = proxy
    assert_equal "genuine", get(@genuine.port, proxy_port: port)
    assert_match(/\ACONNECT 127\.0\.0\.1:#{@genuine.port} /, asked.pop)
    assert_match(/\+#{@genuine.port} HTTP/, @ns[0].requests.pop)
    evil, _, tcp2 = proxy(divert: @forged.port)
    assert_raises(Converge::NotTrusted) { get(@genuine.port, proxy_port: evil) }
    assert_equal 0, @forged.requests.size
  ensure
    tcp&.close
    tcp2&.close
  end

  def test_tls_connect_gives_only_a_vouched_for_socket
    s = Converge::TLS.connect("127.0.0.1", @genuine.port, client: @client)
    s.write("GET / HTTP/1.0\r\n\r\n")
    assert_match(/genuine\z/, s.read)
    s.close
    assert_raises(Converge::NotTrusted) { Converge::TLS.connect("127.0.0.1", @forged.port, client: @client) }
    assert_equal 0, @forged.requests.size
  end
end
