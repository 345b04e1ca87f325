# frozen_string_literal: true

# The strict stock JSON parser and the bounds scan, framing, policies; and a fixed-seed fuzz
# of the response parser (never raises, never votes success unless signed).
require_relative "helpers"

class TestCore < Minitest::Test
  J = Converge::StrictJSON

  def test_json_is_the_strict_stock_parser
    assert_equal({ "a" => 2 }, J.parse('{"a": 1, "a": 2}'))
    ["{", "[NaN]", "[1,]", "{1: 2}", "[1] // c", "[1] /* c */", "[\"\xff\"]", '["\\q"]', '["\\ud800"]'].each do |bad|
      assert_nil J.parse(bad), bad
    end
    assert_equal [1.5, "a/b"], J.parse('[1.5, "a\\/b"]') # files may hold floats; signed bytes may not
  end

  def test_the_bounds_scan
    ['{"a": [1, -12, 0]}', '["[[[", "\\\\"]', "#{'[' * 32}#{']' * 32}", "[123456789012345]", '["1.5e999"]'].each do |ok|
      assert J.walk?(ok, true), ok
    end
    ["#{'[' * 33}#{']' * 33}", "[1234567890123456]", "[1.5]", "[1e2]", "[-0.0]", "[01]", '{"a": 1E5}'].each do |bad|
      refute J.walk?(bad, true), bad
    end
  end

  def test_ip_literals_in_the_notarys_form
    assert_equal "2001:db8::1", Converge::Legacy.check_ip("2001:0db8:0:0:0:0:0:1")
    assert_equal "::ffff:102:304", Converge::Legacy.check_ip("::ffff:1.2.3.4")
    assert_raises(Converge::TargetError) { Converge::Legacy.check_ip("01.2.3.4") }
    assert_raises(Converge::TargetError) { Converge::Legacy.check_ip("fe80::1%eth0") }
  end

  def test_framing_refuses_what_a_notary_must_not_send
    assert_raises(Converge::ResponseError) { Converge::Legacy.parse_http_response("HTTP/1.0 200 X\r\nContent-Length: 10\r\n\r\nshort") }
    assert_raises(Converge::ResponseError) { Converge::Legacy.parse_http_response("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n") }
    r = Converge::Legacy.parse_http_response("HTTP/1.0 200 X\r\nA: 1\r\na: 2\r\nContent-Length: 2\r\n\r\nokEXTRA")
    assert_equal "1, 2", r.headers["a"]
    assert_equal "ok", r.body
  end

  def test_policies
    assert Converge::Policy.decide("consensus", %w[success unreachable], true)
    refute Converge::Policy.decide("consensus", %w[success unreachable], false)
    assert_equal false, Converge::Policy.settled("consensus", %w[failure], 2, true)
    assert_nil Converge::Policy.settled("majority", %w[success], 2, true)
  end

  def test_weak_ed25519_keys
    h = ->(x) { [x].pack("H*") }
    weak = {
      "identity" => h.("01#{'00' * 31}"),
      "identity, sign bit set" => h.("01#{'00' * 30}80"),
      "y8 (order 8)" => h.("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05"),
      "p + 3" => h.("f0#{'ff' * 30}7f")
    }
    weak.each do |what, raw|
      reason = what == "p + 3" ? "not in canonical form" : "of small order"
      assert_equal "an Ed25519 public key #{reason}", Converge::Bundles.weak_key(raw), what
      entry = { "alg" => "ed25519", "key_id" => Converge::Bundles.key_id_of(raw),
                "public_key" => Converge::Bundles.b64url(raw), "status" => "current" }
      e = assert_raises(Converge::BundleError, what) { Converge::Bundles.parse_signing_key(entry) }
      assert_equal "converge: bundle: signing key: an Ed25519 public key #{reason}", e.message
    end
    sound = OpenSSL::PKey.generate_key("ED25519").public_to_der[-32..]
    assert_nil Converge::Bundles.weak_key(sound)
    assert_nil Converge::Bundles.weak_key(h.("eb#{'ff' * 30}7f")) # p - 2: the largest canonical y outside the list
  end

  def test_a_transparency_member_naming_one_key_twice
    keys = JSON.parse(File.read(File.join(Helpers::VECTORS, "transparency.json")))["keys"]
    # witness-1's key under a second name, and the log's key as a witness's, each with its key id
    as_witness = lambda do |name, vkey|
      raw = "\x04".b + Converge::Bundles.strict_base64(vkey.split("+", 3)[2]).byteslice(1, 32)
      id = OpenSSL::Digest::SHA256.digest(name.b + "\n" + raw)[0, 4].unpack1("H*")
      { "name" => name, "vkey" => "#{name}+#{id}+#{[raw].pack('m0')}" }
    end
    w1 = { "name" => "witness.test/witness-1", "vkey" => keys["witness-1"] }
    w2 = { "name" => "witness.test/witness-2", "vkey" => keys["witness-2"] }
    member = ->(ws) { { "log" => keys["log"], "witnesses" => ws, "min_cosignatures" => ws.size } }
    [[w1, as_witness.("witness.test/again", keys["witness-1"])],
     [w1, as_witness.("witness.test/the-log", keys["log"])]].each do |ws|
      e = assert_raises(Converge::BundleError, ws[1]["name"]) { Converge::Transparency.parse_policy(member.(ws)) }
      assert_equal "converge: bundle: transparency names one key twice (two witnesses, or a witness and the log)", e.message
    end
    policy = Converge::Transparency.parse_policy(member.([w1, w2]))
    assert_equal 2, policy.witnesses.size
    assert_equal 2, policy.min_cosignatures
  end

  def test_fuzz_the_response_parser_with_a_fixed_seed
    cert = OpenSSL::X509::Certificate.new(Helpers::NOTARY_CERT)
    key = OpenSSL::PKey.read(Helpers::NOTARY_KEY)
    list = %({"fingerprintList": [{"timestamp": {"start": "1323389219", "finish": "1324691510"}, "fingerprint": "#{Helpers::GENUINE}"}]})
    body = %(#{list[0..-2]}, "signature": "#{[key.sign(OpenSSL::Digest.new('SHA1'), list)].pack('m0')}"})
    good = "HTTP/1.0 200 X\r\nContent-Type: application/json\r\nContent-Length: #{body.bytesize}\r\n\r\n#{body}".b
    wanted = [Converge::Fingerprint.parse(Helpers::GENUINE)]
    assert_equal "listed", Converge::Legacy.outcome_from_http(good, wanted, cert).first.kind
    rng = Random.new(20_111_206)
    tokens = ["{", "}", "[", "]", '"', ",", ":", "\\", "\r\n", "NaN", "1e999", "-0", "\xff".b]
    kinds = Hash.new(0)
    3000.times do
      b = good.dup
      (1 + rng.rand(4)).times do
        at = rng.rand(b.bytesize)
        case rng.rand(10)
        when 0..2 then b.setbyte(at, rng.rand(256))
        when 3..4 then b[at, 1 + rng.rand(8)] = ""
        when 5..7 then b.insert(at, tokens.sample(random: rng).b)
        else
          x, y = [rng.rand(b.bytesize), rng.rand(b.bytesize)].sort
          b.insert(at, b[x...y])
        end
        b = "x".b if b.empty?
      end
      o, r = Converge::Legacy.outcome_from_http(b, wanted, cert)
      kinds[o.kind] += 1
      assert_equal 200, r.status, "only a signed 200 may vote success" if o.vote == "success"
    end
    assert kinds["response"] > 100 && kinds["signature"] > 10, kinds.inspect
  end
end
