# frozen_string_literal: true

# The client against real TLS notaries on 127.0.0.1 (fakes with the vectors' test keys):
# votes, the cache, parallel queries and early decisions, every timeout, pins, both formats.
require_relative "helpers"

class TestClient < Minitest::Test
  def setup = @started = []
  def teardown = @started.each(&:stop)

  def fake(name, mode, **kw) = Helpers::FakeNotary.new(name, mode, **kw).tap { |n| @started << n }
  def kinds(v) = v.results.map(&:kind)

  def test_three_notaries_confirm_then_a_cache_hit_without_network
    ns = [fake("Org A", :listed), fake("Org B", :listed), fake("Org C", :listed)]
    c = Converge::Client.load(Helpers.config_dir(ns, "early-return" => false))
    v = c.check("www.example.org", 443, Helpers::GENUINE)
    assert v.trusted?
    assert_equal %w[listed listed listed], kinds(v)
    assert(v.results.all? { |r| r.protocol == "convergence-v1" && r.status == 200 })
    want = Converge::Legacy.request_bytes("www.example.org", 443, Converge::Fingerprint.parse(Helpers::GENUINE))
    assert_equal want, ns[0].requests.pop.b
    again = c.check("WWW.example.org", 443, Helpers::GENUINE.downcase)
    assert again.from_cache? && again.trusted?
    assert_equal [0, 1, 1], ns.map(&:count) # (one request taken from the first queue above)
    refute c.check("www.example.org", 8443, Helpers::GENUINE).from_cache? # twin: another port
  end

  def test_a_forged_certificate_is_untrusted_and_never_cached
    ns = [fake("Org A", :listed), fake("Org B", :listed)]
    c = Converge::Client.load(Helpers.config_dir(ns))
    refute c.check("bank.example", 443, Helpers::FORGED).trusted?
    refute c.check("bank.example", 443, Helpers::FORGED).from_cache?
  end

  def test_notaries_are_asked_in_parallel
    ns = [fake("Org A", :listed), fake("Org B", :listed), fake("Org C", :listed)]
    ns.each { |n| n.delay = 0.4 }
    c = Converge::Client.load(Helpers.config_dir(ns, "early-return" => false))
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    assert c.check("par.example", 443, Helpers::GENUINE).trusted?
    assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0, :<, 1.1
  end

  def test_early_return_and_its_twin
    ns = [fake("Org A", :mismatch), fake("Org B", :hang), fake("Org C", :hang)]
    c = Converge::Client.load(Helpers.config_dir(ns, "notary-agreement" => "consensus", "notary-timeout" => 3, "total-timeout" => 5))
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    v = c.check("early.example", 443, Helpers::GENUINE)
    refute v.trusted?
    assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0, :<, 1.5
    assert_equal %w[mismatch settled settled], kinds(v)
    late = Converge::Client.load(Helpers.config_dir(ns, "notary-agreement" => "consensus", "early-return" => false, "notary-timeout" => 0.5))
    assert_equal %w[mismatch timeout timeout], kinds(late.check("early.example", 443, Helpers::GENUINE))
  end

  def test_the_total_timeout_bounds_everything
    ns = [fake("Org A", :hang), fake("Org B", :hang)]
    c = Converge::Client.load(Helpers.config_dir(ns, "notary-timeout" => 10, "total-timeout" => 0.6))
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    v = c.check("slow.example", 443, Helpers::GENUINE)
    took = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
    refute v.trusted?
    assert took >= 0.55 && took < 2, took.to_s
    assert_equal %w[timeout timeout], kinds(v)
  end

  def test_a_wrong_pin_and_garbage_are_failures
    impostor = fake("Org Impostor", :listed, cert: Helpers::OTHER_CERT, key: Helpers::OTHER_KEY)
    ns = [fake("Org A", :garbage), fake("Org B", :listed)]
    dir = Helpers.config_dir([impostor, *ns], "notary-agreement" => "consensus", "early-return" => false)
    f = Dir[File.join(dir, "notaries-available", "*Impostor*")].first
    File.write(f, File.read(f).sub(JSON.generate(Helpers::OTHER_CERT)[1..-2], JSON.generate(Helpers::NOTARY_CERT)[1..-2]))
    v = Converge::Client.load(dir).check("pin.example", 443, Helpers::GENUINE)
    refute v.trusted?
    assert_equal %w[pin response listed], kinds(v)
    assert_equal 0, impostor.count
  end

  def test_extended_answers_are_bound_and_fresh
    ns = [fake("Org A", :extended), fake("Org B", :extended), fake("Org C", :extended_stale)]
    c = Converge::Client.load(Helpers.config_dir(ns, "early-return" => false, extended: true))
    v = c.check("ext.example", 443, Helpers::GENUINE)
    assert_equal %w[match match stale], kinds(v)
    assert(v.results.all? { |r| r.protocol == "converge-answer/1" })
    assert v.trusted?
    assert_match(/"nonce":"[A-Za-z0-9_-]{22}"/, ns[0].requests.pop)
    off = Converge::Client.load(Helpers.config_dir([ns[0]], "extended" => "off", extended: true))
    assert_equal "convergence-v1", off.check("ext.example", 443, Helpers::GENUINE).results[0].protocol
  end

  def test_bad_input_is_a_typed_error_before_any_notary_is_asked
    n = fake("Org A", :listed)
    c = Converge::Client.load(Helpers.config_dir([n]))
    assert_raises(Converge::TargetError) { c.check("a b", 443, Helpers::GENUINE) }
    assert_raises(Converge::TargetError) { c.check("ok.example", 0, Helpers::GENUINE) }
    assert_raises(Converge::FingerprintError) { c.check("ok.example", 443, "zz") }
    assert_equal 0, n.count
    e = assert_raises(Converge::ConfigError) { Converge::Client.load(Helpers.config_dir([])).check("ok.example", 443, Helpers::GENUINE) }
    assert_match(/notaries-enabled/, e.message)
  end

  def test_a_stale_cache_entry_is_asked_again
    n = fake("Org A", :listed)
    now = 2_000_000_000.0
    c = Converge::Client.load(Helpers.config_dir([n], "cache-lifetime" => 60), clock: -> { now })
    refute c.check("stale.example", 443, Helpers::GENUINE).from_cache?
    now += 30
    assert c.check("stale.example", 443, Helpers::GENUINE).from_cache?
    now += 61
    refute c.check("stale.example", 443, Helpers::GENUINE).from_cache?
    assert_equal 2, n.count
  end
end
