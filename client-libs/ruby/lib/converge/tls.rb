# frozen_string_literal: true

require "net/http"
require "openssl"

module Converge
  # TLS hooks: the notaries' verdict inside OpenSSL's handshake, so a connection whose
  # certificate they do not vouch for fails before any application data is written.
  #
  # - Converge::TLS.context(host, port): an OpenSSL::SSL::SSLContext whose verify_callback asks
  #   the notaries about the leaf certificate for host:port (OpenSSL::SSL::SSLSocket users);
  # - Converge::HTTP: Net::HTTP with that check (one line: Converge::HTTP instead of Net::HTTP;
  #   proxies included, the origin is asked about).
  module TLS
    module_function

    # A verify_callback for connections to host:port. With require_ca, ordinary CA validation
    # must pass too. The decision (a Verdict, or the error) is kept in state[:verdict]/[:error].
    def callback(host, port, client: nil, require_ca: false, state: {})
      lambda do |preverify_ok, store|
        return require_ca ? preverify_ok : true if store.error_depth.positive?

        der = store.current_cert.to_der
        memo = state[:memo] ||= {}
        return memo[der] if memo.key?(der)

        ok = begin
          c = client || Converge.shared_client
          v = c.check_certificate(host, port, der)
          state[:verdict] = v
          v.trusted? && (!require_ca || preverify_ok)
        rescue StandardError => e
          state[:error] = e
          false
        end
        memo[der] = ok
      end
    end

    # An SSLContext checking the peer of host:port with the notaries (VERIFY_PEER with the
    # converge verify_callback; OpenSSL's CA result counts only with require_ca).
    def context(host, port, client: nil, require_ca: false, state: {})
      ctx = OpenSSL::SSL::SSLContext.new
      ctx.set_params(verify_mode: OpenSSL::SSL::VERIFY_PEER, verify_hostname: require_ca)
      ctx.verify_callback = callback(host, port, client: client, require_ca: require_ca, state: state)
      ctx
    end

    # The NotTrusted for a failed handshake's state.
    def not_trusted(host, port, state, cause = nil)
      NotTrusted.new(host, port, state[:verdict]&.trusted? ? nil : state[:verdict],
                     state[:error]&.message || cause&.message || "no verdict")
    end

    # Connects a TLS socket to host:port (an existing TCP socket may be given, e.g. a CONNECT
    # tunnel) that the notaries vouch for; raises Converge::NotTrusted otherwise.
    def connect(host, port, socket: nil, client: nil, require_ca: false)
      state = {}
      sock = socket || TCPSocket.new(host, port)
      ssl = OpenSSL::SSL::SSLSocket.new(sock, context(host, port, client: client, require_ca: require_ca, state: state))
      ssl.sync_close = true
      ssl.hostname = host unless host.match?(/\A[\d.]+\z|:/)
      begin
        ssl.connect
      rescue OpenSSL::SSL::SSLError => e
        ssl.close
        raise not_trusted(host, port, state, e) if state.key?(:verdict) || state.key?(:error)

        raise
      end
      ssl
    end
  end

  # Net::HTTP whose TLS connections the notaries decide: replace Net::HTTP by Converge::HTTP.
  #
  #   Converge::HTTP.get(URI("https://www.example.org/"))
  #   Converge::HTTP.start("www.example.org", 443, use_ssl: true) { |http| http.get("/") }
  #
  # A certificate the notaries do not vouch for raises Converge::NotTrusted before the request
  # is written. #converge_client= and #converge_require_ca= adjust it.
  class HTTP < Net::HTTP
    attr_accessor :converge_client, :converge_require_ca

    private

    def connect
      if use_ssl?
        @converge_state = {}
        self.verify_mode = OpenSSL::SSL::VERIFY_PEER
        self.verify_hostname = converge_require_ca ? true : false
        self.verify_callback = TLS.callback(address, port, client: converge_client, require_ca: converge_require_ca || false,
                                                          state: @converge_state)
      end
      super
    rescue OpenSSL::SSL::SSLError => e
      raise TLS.not_trusted(address, port, @converge_state, e) if @converge_state && (@converge_state.key?(:verdict) || @converge_state.key?(:error))

      raise
    end
  end
end
