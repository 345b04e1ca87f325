# frozen_string_literal: true

# Every shared vector file through Converge::Vectors.run_case, compared the way the
# conformance runner compares (each field the case states); no expected failures.
require_relative "helpers"

class TestVectors < Minitest::Test
  def load(name) = JSON.parse(File.read(File.join(Helpers::VECTORS, name)))

  def diff(c, out) = Converge::Vectors.compared(c).select { |f| c.key?(f) && c[f] != out[f] }

  # canonical-json.json tests the notary's encoder: clients never re-serialise.
  NOTARY_ONLY = "canonical-json.json"

  Dir.children(Helpers::VECTORS).select { |n| n.end_with?(".json") && n != NOTARY_ONLY }.sort.each do |name|
    define_method("test_vectors_#{name.tr('.-', '__')}") do
      doc = load(name)
      assert_includes Converge::Vectors::SCHEMAS, doc["schema"]
      refute_empty doc["tests"]
      failures = doc["tests"].filter_map do |c|
        out = Converge::Vectors.run_case(doc, c)
        d = diff(c, out)
        "case #{c['id']} (#{c['comment']}): #{d}: #{out}" unless d.empty?
      end
      assert_empty failures
    end
  end

  def test_the_comparison_catches_a_wrong_output
    doc = load("fingerprints.json")
    c = doc["tests"][0]
    out = Converge::Vectors.run_case(doc, c)
    assert_empty diff(c, out)
    assert_equal ["canonical"], diff(c, out.merge("canonical" => "00"))
    tr = load("transparency.json")
    tr["tests"].select { |t| %w[tree checkpoint].include?(t["type"]) && t.key?("root") }.each do |t|
      out = Converge::Vectors.run_case(tr, t)
      assert_equal ["root"], diff(t, out.merge("root" => ["\0" * 32].pack("m0"))), "case #{t['id']}"
    end
    assert_raises(ArgumentError) { Converge::Vectors.run_case({ "schema" => "converge-vectors/unknown/1" }, c) }
  end
end
