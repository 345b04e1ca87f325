# frozen_string_literal: true

require "ipaddr"

module Converge
  # One notary's answer reduced to a vote; kind says why (listed, status-only, mismatch,
  # not-listed, response, signature, inconclusive, status, the extended kinds, or an IO kind).
  Outcome = Struct.new(:vote, :kind, :status, :detail, :answer, keyword_init: true)

  # A split HTTP/1.x response; header names lower-cased, repeated headers joined by ", ".
  HttpResponse = Struct.new(:status, :headers, :body, keyword_init: true)

  # The history a verified 200/409 body lists.
  SignedList = Struct.new(:entries, keyword_init: true) do
    def lists?(fp) = entries.any? { |e| e[:fingerprint] == fp }
  end

  # The legacy (Convergence v1) protocol, client side (pure).
  module Legacy
    MAX_RESPONSE_BYTES = 256 * 1024
    MAX_HEADER_BYTES = 16 * 1024
    MAX_HISTORY_ENTRIES = 1000
    SIGNATURE_MEMBER = ', "signature": "'.b
    SIGNATURE_TAIL = %r{\A([A-Za-z0-9+/]+={0,2})"\}\z}n
    PY_SPACE = "[ \\t\\n\\r\\v\\f\\x1c\\x1d\\x1e\\x1f\\u0085\\u00a0]"
    PY_STRIP = /\A#{PY_SPACE}+|#{PY_SPACE}+\z/

    module_function

    # Refuses a host or port that cannot be put into /target/<host>+<port>.
    def check_target(host, port)
      unless host.is_a?(String) && host.match?(Bundles::HOST_RE) && !host.start_with?(".", "-")
        raise TargetError, "invalid target host #{host.inspect}"
      end
      raise TargetError, "invalid target port #{port}" unless port.is_a?(Integer) && port.between?(1, 65_535)
    end

    # The cache and record key host:port (host lower-cased).
    def location(host, port) = "#{host.downcase}:#{port}"

    # An IP address literal in its compressed form, or a TargetError.
    def check_ip(ip)
      raise TargetError, "invalid target address #{ip.inspect}" unless ip.is_a?(String) && !ip.include?("%") && !ip.include?("/")
      if ip.include?(".") && !ip.include?(":") && ip.split(".").any? { |o| o.length > 1 && o.start_with?("0") }
        raise TargetError, "invalid target address #{ip.inspect}"
      end

      a = IPAddr.new(ip)
      return a.to_s if a.ipv4?

      words = a.hton.unpack("n8")
      best = -1
      best_len = 0
      i = 0
      while i < 8
        if words[i].zero?
          j = i
          j += 1 while j < 8 && words[j].zero?
          (best = i; best_len = j - i) if j - i > best_len
          i = j
        else
          i += 1
        end
      end
      hex = ->(ws) { ws.map { |w| w.to_s(16) }.join(":") }
      best_len < 2 ? hex.(words) : "#{hex.(words[0, best])}::#{hex.(words[(best + best_len)..])}"
    rescue IPAddr::Error
      raise TargetError, "invalid target address #{ip.inspect}"
    end

    # The exact request the 2011 add-on sends; ip asks the notary to connect to that address.
    def request_bytes(host, port, fp, ip = nil)
      check_target(host, port)
      suffix = ip.nil? || ip.empty? ? "" : "/#{check_ip(ip)}"
      body = "fingerprint=#{fp.colon_hex}"
      "POST /target/#{host.downcase}+#{port}#{suffix} HTTP/1.0\r\n" \
        "Content-Type: application/x-www-form-urlencoded\r\nConnection: close\r\n" \
        "Content-Length: #{body.bytesize}\r\n\r\n#{body}".b
    end

    def py_strip(s) = s.gsub(PY_STRIP, "")

    # Splits a complete response read until the server closed; raises ResponseError.
    def parse_http_response(raw, max_bytes = MAX_RESPONSE_BYTES)
      raw = raw.b
      raise ResponseError, "response larger than #{max_bytes} bytes" if raw.bytesize > max_bytes

      sep = raw.index("\r\n\r\n")
      sep_len = 4
      if sep.nil?
        sep = raw.index("\n\n")
        sep_len = 2
      end
      raise ResponseError, "response has no end of headers" if sep.nil?
      raise ResponseError, "response headers too large" if sep > MAX_HEADER_BYTES

      lines = raw[0, sep].force_encoding(Encoding::ISO_8859_1).encode(Encoding::UTF_8).gsub("\r\n", "\n").split("\n", -1)
      m = %r{\AHTTP/1\.[01] ([0-9]{3})(?: .*)?\z}m.match(lines[0])
      raise ResponseError, "bad status line #{lines[0][0, 80].inspect}" unless m

      headers = {}
      lines[1..].each do |line|
        name, sep2, value = line.partition(":")
        raise ResponseError, "bad header line #{line[0, 80].inspect}" if sep2.empty? || name.empty? || name != py_strip(name)

        key = name.downcase
        value = py_strip(value)
        headers[key] = headers.key?(key) ? "#{headers[key]}, #{value}" : value
      end
      body = raw[(sep + sep_len)..]
      raise ResponseError, "chunked transfer coding is not allowed on notary responses" if headers.fetch("transfer-encoding", "").downcase.include?("chunked")

      if (cl = headers["content-length"])
        raise ResponseError, "bad Content-Length #{cl[0, 20].inspect}" unless cl.match?(/\A[0-9]{1,12}\z/)
        raise ResponseError, "truncated response body" if cl.to_i > body.bytesize

        body = body[0, cl.to_i]
      end
      HttpResponse.new(status: m[1].to_i, headers: headers, body: body)
    end

    def timestamp(v, what)
      return v.to_i if v.is_a?(String) && v.match?(/\A[0-9]{1,12}\z/)
      return v if v.is_a?(Integer) && v >= 0 && v < 1_000_000_000_000

      raise ResponseError, "#{what} is not a decimal unix time"
    end

    # Splits a 200/409 body into the signed bytes S and the signature (base64 text): the body
    # must be S without its final }, then `, "signature": "<base64>"}` and nothing after it.
    def split_signed_body(body, max_bytes = MAX_RESPONSE_BYTES)
      b = body.b
      raise ResponseError, "body larger than #{max_bytes} bytes" if b.bytesize > max_bytes

      i = b.rindex(SIGNATURE_MEMBER)
      m = i && SIGNATURE_TAIL.match(b[(i + SIGNATURE_MEMBER.bytesize)..])
      raise ResponseError, "body does not end with the signature member" unless m

      ["#{b[0, i]}}".b, m[1]]
    end

    # Checks the RSASSA-PKCS1-v1_5 SHA-1 signature (base64 text) over the signed bytes.
    def verify_signed(signed, signature, certificate)
      key = certificate.public_key
      raise SignatureError, "the notary certificate does not hold an RSA key" unless key.is_a?(OpenSSL::PKey::RSA)

      raw = Bundles.strict_base64(signature)
      ok = begin
        raw && key.verify(OpenSSL::Digest.new("SHA1"), raw, signed)
      rescue OpenSSL::PKey::PKeyError
        false
      end
      raise SignatureError, "signature does not verify against the notary's certificate" unless ok
    end

    # The history in verified signed bytes: the bounds scan, the stock parser, the shape.
    def parse_signed_list(signed)
      obj = StrictJSON.verified_object(signed)
      raise ResponseError, "signed bytes are not a JSON object within the bounds" unless obj

      fl = obj["fingerprintList"]
      raise ResponseError, "fingerprintList missing or not a list" unless fl.is_a?(Array)
      raise ResponseError, "more than #{MAX_HISTORY_ENTRIES} history entries" if fl.length > MAX_HISTORY_ENTRIES

      entries = fl.map do |item|
        ts = item.is_a?(Hash) ? item["timestamp"] : nil
        raise ResponseError, "history entry is not an object with a timestamp object" unless ts.is_a?(Hash)

        fp_text = item["fingerprint"]
        raise ResponseError, "history entry has no fingerprint" unless fp_text.is_a?(String)

        begin
          fp = Fingerprint.parse(fp_text)
        rescue FingerprintError => e
          raise ResponseError, "history entry fingerprint: #{e.detail}"
        end
        { fingerprint: fp, start: timestamp(ts["start"], "start"), finish: timestamp(ts["finish"], "finish") }
      end
      SignedList.new(entries: entries)
    end

    # Reads a 200/409 body: framing, signature, bounds, parse and shape, in that order.
    def read_signed_body(body, certificate, max_bytes = MAX_RESPONSE_BYTES)
      signed, signature = split_signed_body(body, max_bytes)
      verify_signed(signed, signature, certificate)
      parse_signed_list(signed)
    end

    def failure_of(err, status) = Outcome.new(vote: "failure", kind: err.kind, status: status, detail: err.detail)

    # Reduces one response (status and body) to a vote; wanted: the asked certificate's forms.
    def evaluate(status, body, wanted, certificate, max_bytes = MAX_RESPONSE_BYTES)
      case status
      when 200, 409
        begin
          signed = read_signed_body(body, certificate, max_bytes)
        rescue Error => e
          return failure_of(e, status)
        end
        return Outcome.new(vote: "failure", kind: "mismatch", status: status, detail: "notary sees another certificate") if status == 409
        return Outcome.new(vote: "success", kind: "listed", status: status, detail: "") if wanted.any? { |fp| signed.lists?(fp) }

        algs = signed.entries.map { |e| e[:fingerprint].algorithm }
        if wanted.none? { |fp| algs.include?(fp.algorithm) } && !signed.entries.empty?
          return Outcome.new(vote: "success", kind: "status-only", status: status, detail: "list holds no fingerprint of the asked kind")
        end

        Outcome.new(vote: "failure", kind: "not-listed", status: status, detail: "200 without the fingerprint in the signed list")
      when 303 then Outcome.new(vote: "unreachable", kind: "inconclusive", status: status, detail: "notary could not decide")
      else Outcome.new(vote: "unreachable", kind: "status", status: status, detail: "HTTP status #{status}")
      end
    end

    # Reduces a whole response (read until the server closed) to [outcome, response or nil].
    def outcome_from_http(raw, wanted, certificate, max_bytes = MAX_RESPONSE_BYTES)
      resp = parse_http_response(raw, max_bytes)
      [evaluate(resp.status, resp.body, wanted, certificate, MAX_RESPONSE_BYTES), resp]
    rescue Error => e
      [failure_of(e, nil), nil]
    end
  end
end
