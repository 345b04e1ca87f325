# frozen_string_literal: true

require "securerandom"

module Converge
  # The extended answer format converge-answer/1, client side: verification of a signed
  # answer in the documented order, each failure named; the request; the reduction to a vote.
  module Extended
    MAX_ANSWER_BYTES = 64 * 1024
    DEFAULT_MAX_SKEW = 300
    MEDIA_TYPE = "application/vnd.converge.answer+json"
    PATH = "/v2/answer"
    # The signed-answer frame: fixed ASCII prefix, key id K, signature V, statement bytes T, final }.
    FRAME = /\A\{"signature":\{"alg":"ed25519","key_id":"([\x20\x21\x23-\x5b\x5d-\x7e]+)","value":"([\x20\x21\x23-\x5b\x5d-\x7e]+)"\},"statement":(.*)\}\z/mn
    VERDICT_STATUS = { "match" => 200, "mismatch" => 409, "unreachable" => 503, "refused" => 403 }.freeze
    VOTES = { "match" => %w[success match], "mismatch" => %w[failure mismatch],
              "unreachable" => %w[unreachable target-unreachable], "refused" => %w[unreachable refused] }.freeze

    # A verified answer.
    Answer = Struct.new(:verdict, :detail, :key_id, :answered_at, :target, :request, :member, keyword_init: true)

    # What an answer is bound to (empty host, nil fingerprint, empty nonce, nil now: unchecked).
    # log: the bundle's transparency policy (a match then needs a valid proof), or nil.
    Expect = Struct.new(:host, :port, :fingerprint, :nonce, :now, :max_skew, :bind_ip, :ip, :log, keyword_init: true)
    # Where the statement ends when the answer carries the log's member.
    MEMBER = ',"transparency":'.b

    module_function

    # The bundle's signing keys trusted at now, by key id.
    def trusted_keys(keys, now) = keys.select { |k| k.trusted_at?(now) }.to_h { |k| [k.key_id, k.public_key] }

    # The host as a notary names it in target.host.
    def expected_host(host)
      bare = host.delete_prefix("[").delete_suffix("]")
      begin
        return Legacy.check_ip(bare)
      rescue TargetError
        nil
      end
      name = host.downcase
      name.end_with?(".") ? name[0..-2] : name
    end

    def reject(reason, message) = raise(AnswerRejected.new(reason, message))

    def ed25519_verify(raw, data, sig)
      OpenSSL::PKey.read(Bundles::ED25519_SPKI_PREFIX + raw).verify(nil, sig, data)
    rescue OpenSSL::PKey::PKeyError
      false
    end

    # Checks an extended answer body in the documented order; raises AnswerRejected.
    def verify_answer(raw, keys, exp)
      m = raw.bytesize <= MAX_ANSWER_BYTES && FRAME.match(raw.b)
      reject("malformed", "answer is not the signed-answer frame") unless m
      kid = m[1]
      # T ends at the first ,"transparency": (the log's member runs from there to the final })
      statement, sep, member = m[3].partition(MEMBER)
      member = nil if sep.empty?
      pub = keys[kid]
      reject("unknown-key", "signing key #{kid} is not trusted") unless pub
      signature = Bundles.unb64url(m[2])
      unless signature && signature.bytesize == 64 && pub.bytesize == 32 && ed25519_verify(pub, statement, signature)
        reject("bad-signature", "signature does not verify")
      end
      stmt = StrictJSON.verified_object(statement)
      reject("malformed", "statement is not a JSON object within the bounds") unless stmt
      unless stmt["type"] == EXTENDED_FORMAT && stmt["key_id"] == kid
        reject("malformed", "not a #{EXTENDED_FORMAT} statement by key #{kid}")
      end
      verdict = stmt["verdict"]
      target = stmt["target"]
      reject("malformed", "statement lacks a verdict or target") unless VERDICT_STATUS.key?(verdict) && target.is_a?(Hash)
      at = stmt["answered_at"]
      reject("malformed", "answered_at must be an integer") unless at.is_a?(Integer)
      if exp.host && !exp.host.empty?
        unless target["host"].is_a?(String) && target["host"] == expected_host(exp.host) && target["port"].is_a?(Integer) && target["port"] == exp.port
          reject("wrong-target", "answer is about another target, not #{exp.host}:#{exp.port}")
        end
      end
      if exp.bind_ip
        tip = target["ip"]
        if exp.ip.nil? || exp.ip.empty?
          reject("wrong-target", "answer is about a probe of an address the client did not name") unless tip.nil?
        elsif tip != expected_host(exp.ip)
          reject("wrong-target", "answer is about a probe of another address, not #{exp.ip}")
        end
      end
      req = stmt["request"].is_a?(Hash) ? stmt["request"] : nil
      if exp.fingerprint && !(req && req["alg"] == exp.fingerprint.algorithm && req["fingerprint"] == exp.fingerprint.colon_hex)
        reject("wrong-target", "answer is about another certificate fingerprint")
      end
      if exp.nonce && !exp.nonce.empty? && !(req && req["nonce"] == exp.nonce)
        reject("nonce-mismatch", "answer does not echo our nonce")
      end
      if exp.now && (exp.now - at).abs > (exp.max_skew || DEFAULT_MAX_SKEW)
        reject("stale", "answer time is #{exp.now - at} s from now (max skew #{exp.max_skew} s)")
      end
      Answer.new(verdict: verdict, detail: stmt["detail"].is_a?(String) ? stmt["detail"] : "", key_id: kid, answered_at: at,
                 target: target, request: req, member: member)
    end

    # Unpadded base64url of 16 random bytes.
    def new_nonce = Bundles.b64url(SecureRandom.random_bytes(16))

    # The JSON body of an extended request.
    def request_body(host, port, fp, nonce, ip = nil, transparency: false)
      Legacy.check_target(host, port)
      body = +%({"host":#{JSON.generate(host)},"port":#{port},"fingerprint":"#{fp.colon_hex}","alg":"#{fp.algorithm}")
      body << %(,"ip":"#{Legacy.check_ip(ip)}") if ip && !ip.empty?
      body << %(,"nonce":"#{nonce}") if nonce && !nonce.empty?
      body << ',"transparency":true' if transparency
      body << "}"
    end

    # The whole HTTP/1.0 request of the extended format.
    def request_bytes(host, port, fp, nonce, ip = nil, transparency: false)
      body = request_body(host, port, fp, nonce, ip, transparency: transparency)
      "POST #{PATH} HTTP/1.0\r\nContent-Type: application/json\r\nAccept: #{MEDIA_TYPE}\r\n" \
        "Connection: close\r\nContent-Length: #{body.bytesize}\r\n\r\n#{body}".b
    end

    # The fingerprint form to ask about: SHA-256 when known, else the first.
    def request_fingerprint(forms) = forms.find { |f| f.algorithm == "sha256" } || forms.first

    # Statuses meaning "this notary does not speak the extended format here".
    def not_offered?(status) = [400, 404, 405, 501].include?(status)

    # Reduces one extended response to a vote.
    def evaluate(resp, keys, exp)
      ctype = resp.headers.fetch("content-type", "").split(";").first.to_s.strip.downcase
      unless VERDICT_STATUS.value?(resp.status) && ctype == MEDIA_TYPE
        return Outcome.new(vote: "unreachable", kind: "status", status: resp.status, detail: "HTTP status #{resp.status}")
      end

      begin
        v = verify_answer(resp.body, keys, exp)
      rescue AnswerRejected => e
        return Outcome.new(vote: "failure", kind: e.reason, status: resp.status, detail: e.message)
      end
      if VERDICT_STATUS[v.verdict] != resp.status
        return Outcome.new(vote: "failure", kind: "response", status: resp.status,
                           detail: "status #{resp.status} with signed verdict #{v.verdict}")
      end

      # a bundle that names a log: a match needs a valid proof of inclusion (docs/transparency.md)
      if exp.log && v.verdict == "match"
        begin
          fp = exp.fingerprint || begin
            Fingerprint.parse(v.request && v.request["fingerprint"])
          rescue Error
            raise AnswerRejected.new("log-entry", "the statement names no fingerprint")
          end
          Transparency.check_member(v.member, exp.log, v.target, fp)
        rescue AnswerRejected => e
          return Outcome.new(vote: "failure", kind: e.reason, status: resp.status, detail: e.message)
        end
      end
      vote, kind = VOTES[v.verdict]
      Outcome.new(vote: vote, kind: kind, status: resp.status, detail: v.detail, answer: resp.body)
    end
  end
end
