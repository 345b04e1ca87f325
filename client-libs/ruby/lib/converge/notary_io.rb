# frozen_string_literal: true

require "socket"
require "openssl"

module Converge
  # What one logical notary said.
  NotaryResult = Struct.new(:name, :vote, :kind, :status, :host, :detail, :elapsed, :protocol, :answer, keyword_init: true)

  # Asking notaries over the network: one TLS connection per physical host, pinned to the
  # bundle's certificate (no CA or host name check; OpenSSL still checks the handshake
  # signature against the presented key), one request, the response read until the server
  # closes. All hosts of one logical notary are raced on threads; the first definitive answer
  # wins. Through a bounce relay, one CONNECT names every host of the notary and the relay
  # picks. Every wait is bounded.
  module NotaryIO
    DEFINITIVE = %w[listed status-only mismatch not-listed match].freeze
    SEVERITY = Hash.new(0).merge("signature" => 3, "response" => 3, "malformed" => 3,
                                 "unknown-key" => 3, "bad-signature" => 3, "wrong-target" => 3,
                                 "nonce-mismatch" => 3, "stale" => 3, "pin" => 2).freeze

    class Unreachable < StandardError; end

    # A queue whose pop waits at most a given time (Thread::Queue gained that only in Ruby 3.2).
    class TimedQueue
      def initialize
        @items = []
        @mutex = Mutex.new
        @cond = ConditionVariable.new
      end

      def <<(item)
        @mutex.synchronize do
          @items << item
          @cond.signal
        end
        self
      end

      # The next item, or nil when none came within timeout seconds.
      def pop(timeout)
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
        @mutex.synchronize do
          while @items.empty?
            left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
            return nil if left <= 0

            @cond.wait(@mutex, left)
          end
          @items.shift
        end
      end
    end

    module_function

    def now_mono = Process.clock_gettime(Process::CLOCK_MONOTONIC)

    def left(deadline)
      l = deadline - now_mono
      raise Unreachable, "timed out" if l <= 0

      l
    end

    # The kind of a failed exchange: "timeout" once the notary's own deadline has passed (so the
    # answer does not depend on which thread noticed the deadline first), else "unreachable".
    def lapsed(deadline) = now_mono >= deadline ? "timeout" : "unreachable"

    def dial(host, port, deadline)
      Socket.tcp(host, port, connect_timeout: left(deadline)).tap { |s| s.setsockopt(Socket::IPPROTO_TCP, Socket::TCP_NODELAY, 1) }
    rescue Errno::ETIMEDOUT
      raise Unreachable, "#{host}:#{port}: timed out"
    rescue SystemCallError, SocketError => e
      raise Unreachable, "#{host}:#{port}: #{e.message}"
    end

    def handshake(sock, host, deadline)
      ctx = OpenSSL::SSL::SSLContext.new
      ctx.verify_mode = OpenSSL::SSL::VERIFY_NONE # the bundle's pin decides, right after
      ctx.min_version = OpenSSL::SSL::TLS1_2_VERSION
      ssl = OpenSSL::SSL::SSLSocket.new(sock, ctx)
      ssl.sync_close = true
      ssl.hostname = host unless host.match?(/\A[\d.]+\z|:/)
      loop do
        ssl.connect_nonblock
        break
      rescue IO::WaitReadable
        raise Unreachable, "#{host}: TLS: timed out" unless IO.select([sock], nil, nil, left(deadline))
      rescue IO::WaitWritable
        raise Unreachable, "#{host}: TLS: timed out" unless IO.select(nil, [sock], nil, left(deadline))
      end
      ssl
    rescue OpenSSL::SSL::SSLError, SystemCallError => e
      sock.close
      raise Unreachable, "#{host}: TLS: #{e.message}"
    end

    # The CONNECT head sent to a bounce relay for one notary's hosts.
    def connect_head(dests, port)
      first = dests.first.host
      lines = ["CONNECT #{first}:#{port} HTTP/1.1", "Host: #{first}"]
      dests.drop(1).each { |d| lines << "X-Convergence-Notary: #{d.host}+#{port}" }
      "#{lines.join("\r\n")}\r\n\r\n"
    end

    # Which destination a relay connected to; raises Unreachable otherwise.
    def parse_connect_reply(head, dests)
      lines = head.b.force_encoding(Encoding::ISO_8859_1).split("\r\n")
      parts = lines.first.to_s.split(" ", 3)
      unless parts.length >= 2 && parts[0].start_with?("HTTP/1.") && parts[1] == "200"
        raise Unreachable, "relay refused the tunnel: #{lines.first.to_s[0, 80].inspect}"
      end
      connected = nil
      lines.drop(1).each do |line|
        name, _, value = line.partition(":")
        connected = Legacy.py_strip(value).downcase if Legacy.py_strip(name).casecmp?("x-convergence-notary")
      end
      if connected.nil?
        return dests.first if dests.length == 1

        raise Unreachable, "relay did not name the notary host it connected to"
      end
      host = connected.split("+", 2).first
      dests.find { |d| [host, connected].include?(d.host.downcase) } ||
        raise(Unreachable, "relay connected to an unknown notary host #{connected.inspect}")
    end

    def open_via_relay(relay, dests, bounce_port, deadline)
      last = nil
      relay.hosts.each do |rh|
        sock = nil
        begin
          sock = dial(rh.host, rh.http_port, deadline)
          sock.write(connect_head(dests, bounce_port))
          head = +""
          until head.end_with?("\r\n\r\n")
            raise Unreachable, "relay reply head too large" if head.bytesize >= 8192
            raise Unreachable, "relay: timed out" unless IO.select([sock], nil, nil, left(deadline))

            c = sock.read_nonblock(1, exception: false)
            next if c == :wait_readable
            raise Unreachable, "relay closed the connection" if c.nil?

            head << c
          end
          nh = parse_connect_reply(head, dests)
          return [handshake(sock, nh.host, deadline), nh]
        rescue Unreachable, SystemCallError => e
          sock&.close
          last = e
        end
      end
      raise Unreachable, "no host of relay #{relay.name.inspect} worked: #{last&.message}"
    end

    def read_to_end(ssl, max_bytes, deadline)
      buf = +"".b
      loop do
        chunk = ssl.read_nonblock(16_384, exception: false)
        case chunk
        when :wait_readable
          raise Error.new("timeout", "timed out") unless IO.select([ssl], nil, nil, left(deadline))
        when :wait_writable
          raise Error.new("timeout", "timed out") unless IO.select(nil, [ssl], nil, left(deadline))
        when nil then return buf
        else
          buf << chunk
          raise ResponseError, "response larger than #{max_bytes} bytes" if buf.bytesize > max_bytes
        end
      end
    rescue OpenSSL::SSL::SSLError, SystemCallError => e
      return buf unless buf.empty? # a close without close_notify after some data

      raise Unreachable, e.message
    rescue Unreachable
      raise Error.new("timeout", "timed out")
    end

    def query_host_once(nh, target, port, wanted, o, ext, deadline)
      protocol = ext ? EXTENDED_FORMAT : LEGACY_FORMAT
      label = o[:relay] ? "#{nh.host}:#{o[:bounce_port]} via #{o[:relay].name}" : "#{nh.host}:#{nh.ssl_port}"
      answer = ->(outcome, host) { { outcome: outcome, host: host, protocol: protocol } }
      asked = wanted.first
      nonce = ""
      begin
        request = if ext
                    asked = Extended.request_fingerprint(wanted)
                    nonce = Extended.new_nonce if ext[:nonce]
                    Extended.request_bytes(target, port, asked, nonce, o[:ip], transparency: !ext[:log].nil?)
                  else
                    Legacy.request_bytes(target, port, asked, o[:ip])
                  end
      rescue Error => e
        return answer.(Legacy.failure_of(e, nil), label)
      end
      connect_deadline = [deadline, now_mono + o[:connect_timeout]].min
      begin
        if o[:relay]
          ssl, nh = open_via_relay(o[:relay], o[:relay_dests], o[:bounce_port], connect_deadline)
          label = "#{nh.host}:#{o[:bounce_port]} via #{o[:relay].name}"
        else
          ssl = handshake(dial(nh.host, nh.ssl_port, connect_deadline), nh.host, connect_deadline)
        end
      rescue Unreachable => e
        detail = now_mono >= connect_deadline ? "#{label}: timed out" : e.message
        return answer.(Outcome.new(vote: "unreachable", kind: lapsed(deadline), status: nil, detail: detail), label)
      end
      begin
        peer = ssl.peer_cert
        unless peer && Fingerprint.of(peer.to_der, "sha1") == nh.pin
          return answer.(Outcome.new(vote: "failure", kind: "pin", status: nil, detail: "#{label} presented a certificate other than the pinned one"), label)
        end

        ssl.write(request)
        raw = read_to_end(ssl, o[:max_bytes], deadline)
      rescue ResponseError => e
        return answer.(Legacy.failure_of(e, nil), label)
      rescue Error, Unreachable, SystemCallError, OpenSSL::SSL::SSLError => e
        return answer.(Outcome.new(vote: "unreachable", kind: lapsed(deadline), status: nil, detail: "#{label}: #{e.message}"), label)
      ensure
        ssl&.close
      end
      exp = ext && Extended::Expect.new(host: target, port: port, fingerprint: asked, nonce: nonce, now: ext[:now].call.to_i,
                                        max_skew: ext[:max_skew], bind_ip: true, ip: o[:ip] || "", log: ext[:log])
      answer.(read_answer(raw, nh, wanted, o[:max_bytes], ext, exp), label)
    end

    # The one parse boundary of a notary's answer: whatever its bytes raise in any check
    # (framing, base64, signature, bounds scan, parser, shape) is that notary's failure vote.
    def read_answer(raw, nh, wanted, max_bytes, ext, exp)
      return Legacy.outcome_from_http(raw, wanted, nh.certificate, max_bytes).first if ext.nil?

      Extended.evaluate(Legacy.parse_http_response(raw, max_bytes), Extended.trusted_keys(ext[:keys], exp.now), exp)
    rescue Error => e
      Legacy.failure_of(e, nil)
    rescue EncodingError, ArgumentError, TypeError, RangeError, JSON::JSONError, OpenSSL::OpenSSLError => e
      Outcome.new(vote: "failure", kind: "response", status: nil, detail: "unreadable answer (#{e.class})")
    end

    def query_host(nh, target, port, wanted, o, deadline)
      ext = o[:ext]
      return query_host_once(nh, target, port, wanted, o, nil, deadline) unless ext

      a = query_host_once(nh, target, port, wanted, o, ext, deadline)
      if ext[:fallback] && a[:outcome].kind == "status" && Extended.not_offered?(a[:outcome].status)
        return query_host_once(nh, target, port, wanted, o, nil, deadline)
      end

      a
    end

    # Races every physical host of bundle (or one relayed query naming all of them).
    def ask_notary(bundle, target, port, wanted, notary_timeout, o, total_deadline)
      t0 = now_mono
      deadline = [total_deadline, t0 + notary_timeout].min
      hosts = bundle.hosts
      if o[:relay]
        o = o.merge(relay_dests: bundle.hosts)
        hosts = bundle.hosts.first(1)
      end
      q = TimedQueue.new
      threads = hosts.map do |h|
        Thread.new do
          q << query_host(h, target, port, wanted, o, deadline)
        rescue StandardError => e # never silently: a bug is an unreachable host that says so
          q << { outcome: Outcome.new(vote: "unreachable", kind: "unreachable", status: nil, detail: "#{e.class}: #{e.message}"),
                 host: h.host, protocol: o[:ext] ? EXTENDED_FORMAT : LEGACY_FORMAT }
        end
      end
      got = []
      winner = nil
      hosts.length.times do
        timeout = deadline - now_mono
        break if timeout <= 0

        a = q.pop(timeout)
        break if a.nil?

        if DEFINITIVE.include?(a[:outcome].kind)
          winner = a
          break
        end
        got << a
      end
      threads.each { |t| t.kill if t.alive? } unless winner.nil? && got.length == hosts.length
      best = winner || got.max_by { |a| SEVERITY[a[:outcome].kind] }
      elapsed = now_mono - t0
      if best.nil?
        return NotaryResult.new(name: bundle.name, vote: "unreachable", kind: "timeout", status: nil, host: "",
                                detail: "no answer within #{notary_timeout} s", elapsed: elapsed, protocol: nil)
      end
      oc = best[:outcome]
      NotaryResult.new(name: bundle.name, vote: oc.vote, kind: oc.kind, status: oc.status, host: best[:host],
                       detail: oc.detail, elapsed: elapsed, protocol: best[:protocol], answer: oc.answer)
    end
  end
end
