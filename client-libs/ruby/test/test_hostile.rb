# frozen_string_literal: true

# One hostile notary among honest ones (issue #31): a genuine notary and a notary holding its
# real keys that answers each hostile form over real TLS. Every form is that notary's vote with
# the documented kind, the genuine notary's vote is kept and a verdict comes back; each form has
# a twin the same notary answers cleanly.
require_relative "helpers"

class TestHostile < Minitest::Test
  G = Helpers::GENUINE
  X = Helpers::FORGED

  def setup
    @genuine = Helpers::FakeNotary.new("Org A", :listed)
    @hostile = Helpers::FakeNotary.new("Hostile", :raw, cert: Helpers::OTHER_CERT, key: Helpers::OTHER_KEY)
    @port = 10_443
  end

  def teardown
    [@genuine, @hostile].each(&:stop)
  end

  def client(extended)
    Converge::Client.load(Helpers.config_dir([@genuine, @hostile], extended: extended, "notary-agreement" => "majority",
                                                                    "early-return" => false, "extended-nonce" => false))
  end

  def http(body, type = "application/json")
    "HTTP/1.0 200 X\r\nContent-Type: #{type}\r\nContent-Length: #{body.bytesize}\r\n\r\n#{body}".b
  end

  def list(*fps)
    entries = fps.map { |fp| %({"timestamp": {"start": "1323389219", "finish": "1324691510"}, "fingerprint": "#{fp}"}) }
    %({"fingerprintList": [#{entries.join(', ')}]})
  end

  # signed without its final }, then the signature over signed (RSA/SHA-1 with the notary's key).
  def sign(signed)
    %(#{signed[0..-2]}, "signature": "#{[@hostile.key.sign(OpenSSL::Digest.new('SHA1'), signed)].pack('m0')}"})
  end

  # [trusted, the genuine notary's vote/kind, the hostile one's] for the genuine certificate,
  # a new port each time (nothing cached).
  def ask(c, response)
    @hostile.reply = response
    v = c.check("www.example.org", @port += 1, G)
    by = v.results.to_h { |r| [r.name, "#{r.vote}/#{r.kind}"] }
    [v.trusted?, by["Org A"], by["Hostile"]]
  end

  def legacy_forms
    good = list(G)
    member = ->(m) { "#{good[0..-2]}, #{m}}" }
    deep = ->(levels) { member.(%("d": #{'[' * (levels - 1)}#{']' * (levels - 1)})) }
    {
      "genuine (twin)" => [sign(good), "success/listed"],
      "list spliced after the signature" => ["#{sign(list(X))[0..-2]}, \"fingerprintList\": #{good[20..-2]}}", "failure/response"],
      "member after the signature" => ["#{sign(good)[0..-2]}, \"x\": 1}", "failure/response"],
      "bytes after the closing brace" => ["#{sign(good)}\n", "failure/response"],
      "malformed JSON after the signature" => ["#{sign(good)[0..-2]}, ]}", "failure/response"],
      "duplicate list inside S, the last one counts" => [sign("#{list(G)[0..-2]}, #{list(X)[1..]}"), "failure/not-listed"],
      "duplicate list inside S, twin" => [sign("#{list(X)[0..-2]}, #{list(G)[1..]}"), "success/listed"],
      "a 5000-digit integer" => [sign(member.(%("n": 1#{'0' * 4999}))), "failure/response"],
      "a 15-digit integer (twin)" => [sign(member.(%("n": 1#{'0' * 14}))), "success/listed"],
      "a number as member name" => [sign(member.("1: 2")), "failure/response"],
      "nesting 33 levels" => [sign(deep.(33)), "failure/response"],
      "nesting 32 levels (twin)" => [sign(deep.(32)), "success/listed"],
      "a lone surrogate in the fingerprint" => [sign(list("\\ud800")), "failure/response"],
      "NaN" => [sign(member.('"n": NaN')), "failure/response"],
      "a comment" => [sign(member.('"n": 1 /* c */')), "failure/response"],
      "an escape JSON does not define" => [sign(member.('"n": "\\q"')), "failure/response"],
      "a signature over other bytes" => [good[0..-2] + sign(list(X))[(list(X).length - 1)..], "failure/signature"]
    }
  end

  def test_every_hostile_legacy_form_is_that_notarys_failure_and_the_verdict_comes_back
    c = client(false)
    legacy_forms.each do |form, (body, want)|
      assert_equal [true, "success/listed", want], ask(c, http(body)), form
    end
    assert_equal legacy_forms.size, @hostile.count
  end

  # The canonical statement the notary would sign for this check, extra members before the final }.
  def statement(port, extra = "")
    Helpers.canonical("answered_at" => Time.now.to_i, "cache" => "miss", "detail" => nil, "key_id" => @hostile.kid,
                      "observations" => [], "request" => { "alg" => "sha1", "fingerprint" => G, "nonce" => nil },
                      "target" => { "host" => "www.example.org", "ip" => nil, "port" => port },
                      "type" => "converge-answer/1", "verdict" => "match")[0..-2] + "#{extra}}"
  end

  def answer(t, after = "}")
    v = Converge::Bundles.b64url(@hostile.ed.sign(nil, t))
    http(%({"signature":{"alg":"ed25519","key_id":"#{@hostile.kid}","value":"#{v}"},"statement":#{t}#{after}),
         "application/vnd.converge.answer+json")
  end

  def test_every_hostile_extended_form_is_that_notarys_failure_and_the_verdict_comes_back
    c = client(true)
    {
      "genuine (twin)" => ->(p) { [answer(statement(p)), "success/match"] },
      "a member spliced after the statement" => ->(p) { [answer(statement(p), ',"statement":{}}'), "failure/bad-signature"] },
      "bytes after the closing brace" => ->(p) { [answer(statement(p), "}\n"), "failure/malformed"] },
      "a 5000-digit integer" => ->(p) { [answer(statement(p, ",\"n\":1#{'0' * 4999}")), "failure/malformed"] },
      "NaN" => ->(p) { [answer(statement(p, ',"n":NaN')), "failure/malformed"] },
      "a comment" => ->(p) { [answer(statement(p, '/**/')), "failure/malformed"] },
      "a number as member name" => ->(p) { [answer(statement(p, ",1:2")), "failure/malformed"] },
      "nesting 33 levels" => ->(p) { [answer(statement(p, ",\"d\":#{'[' * 32}#{']' * 32}")), "failure/malformed"] },
      "a repeated verdict inside T, the last one counts" => ->(p) { [answer(statement(p, ',"verdict":"mismatch"')), "failure/response"] }
    }.each do |form, make|
      response, want = make.(@port + 1)
      assert_equal [true, "success/match", want], ask(c, response), form
    end
  end
end
