# frozen_string_literal: true

require "json"
require "tmpdir"
require "fileutils"

module Converge
  # The shared test vectors through this library: run_case computes this implementation's
  # output for one case, in the fields CLIENT-CLI.md names.
  module Vectors
    SCHEMAS = %w[converge-vectors/fingerprints/1 converge-vectors/requests/1 converge-vectors/legacy-signatures/1
                 converge-vectors/notary-responses/1 converge-vectors/bundles/1 converge-vectors/consensus/1
                 converge-vectors/cache/1 converge-vectors/extended-answers/1 converge-vectors/config/1
                 converge-vectors/transparency/1].freeze
    COMPARED = %w[result error kind algorithm canonical request signed_bytes name version
                  hosts verdict extended enabled].freeze

    module_function

    # The fields compared for a case: COMPARED, and the outputs of the transparency case types
    # (a tree's root, a checkpoint's size and root; inputs of the other types).
    def compared(c) = COMPARED + { "tree" => %w[root], "checkpoint" => %w[size root] }.fetch(c["type"], [])

    # A list of base64 hashes of 32 bytes, or nil.
    def hashes(list)
      return nil unless list.is_a?(Array)

      out = list.map { |t| t.is_a?(String) ? Bundles.strict_base64(t) : nil }
      out.all? { |h| h&.bytesize == 32 } ? out.map(&:b) : nil
    end

    # converge-vectors/transparency/1: tree, inclusion, consistency, checkpoint, answer.
    def transparency_case(doc, c)
      case c["type"]
      when "tree"
        leaves = doc["entries"][0, c["size"]].map { |e| Transparency.leaf_hash(e.unpack1("m0")) }
        { "result" => "valid", "root" => [Transparency.tree_root(leaves)].pack("m0") }
      when "inclusion"
        h = hashes([c["leaf"], c["root"]])
        p = hashes(c["proof"])
        ok = h && p && Transparency.verify_inclusion?(h[0], c["index"], c["size"], p, h[1])
        { "result" => ok ? "valid" : "invalid" }
      when "consistency"
        h = hashes([c["old_root"], c["new_root"]])
        p = hashes(c["proof"])
        ok = h && p && Transparency.verify_consistency?(c["old_size"], c["new_size"], h[0], h[1], p)
        { "result" => ok ? "valid" : "invalid" }
      when "checkpoint"
        policy = Transparency::Policy.new(log: Transparency.parse_vkey(c["log"], 0x01),
                                          witnesses: c["witnesses"].map { |w| Transparency.parse_vkey(w, 0x04) },
                                          min_cosignatures: c["min_cosignatures"])
        begin
          ck = Transparency.open_checkpoint(c["checkpoint"], policy)
          { "result" => "valid", "size" => ck.size, "root" => [ck.root].pack("m0") }
        rescue AnswerRejected => e
          { "result" => "invalid", "kind" => e.reason }
        end
      when "answer"
        exp = c["expect"]
        fp = Fingerprint.parse(exp["sha256"] || exp["sha1"])
        member = c["transparency"].nil? ? nil : JSON.generate(c["transparency"])
        target = { "host" => exp["host"], "port" => exp["port"], "ip" => exp["ip"] }
        begin
          Transparency.check_member(member, Transparency.parse_policy(c["bundle"]), target, fp)
          { "result" => "valid" }
        rescue AnswerRejected => e
          { "result" => "rejected", "kind" => e.reason }
        end
      else raise ArgumentError, "unknown transparency case type #{c['type'].inspect}"
      end
    end

    def bytes(c, name)
      return [c["#{name}_hex"]].pack("H*") if c["#{name}_hex"].is_a?(String)
      raise ArgumentError, "case has no #{name}" unless c[name].is_a?(String)

      c[name].b
    end

    def certificate(doc, name)
      OpenSSL::X509::Certificate.new(doc.dig("certificates", name) || raise(ArgumentError, "certificate #{name} missing"))
    end

    def invalid(out, err) = out.merge("result" => "invalid", "error" => err.kind)

    # This implementation's output for one case of a vector file (doc: the whole file).
    def run_case(doc, c)
      out = { "id" => c["id"] }
      case doc["schema"]
      when "converge-vectors/fingerprints/1"
        fp = Fingerprint.parse(c["input"])
        out.merge("result" => "valid", "algorithm" => fp.algorithm, "canonical" => fp.colon_hex)
      when "converge-vectors/requests/1"
        fp = Fingerprint.parse(c["fingerprint"])
        req = Legacy.request_bytes(c["host"], c["port"], fp, c["ip"])
        out.merge("result" => "valid", "request" => req.dup.force_encoding(Encoding::UTF_8))
      when "converge-vectors/legacy-signatures/1"
        signed = Legacy.split_signed_body(bytes(c, "body"))[0]
        Legacy.read_signed_body(bytes(c, "body"), certificate(doc, c["certificate"]))
        out.merge("result" => "valid", "signed_bytes" => signed.dup.force_encoding(Encoding::UTF_8))
      when "converge-vectors/notary-responses/1"
        wanted = (c["fingerprints"] || []).map { |x| Fingerprint.parse(x) }
        o, = Legacy.outcome_from_http(bytes(c, "raw"), wanted, certificate(doc, c["certificate"]))
        out.merge("result" => o.vote, "kind" => o.kind)
      when "converge-vectors/bundles/1"
        b = Bundles.parse(bytes(c, "bundle"))
        out.merge("result" => "valid", "name" => b.name, "version" => b.version,
                  "hosts" => b.hosts.map { |h| { "host" => h.host, "ssl_port" => h.ssl_port, "http_port" => h.http_port, "pin" => h.pin.colon_hex } })
      when "converge-vectors/consensus/1"
        policy = Policy.parse(c["policy"])
        votes = c["votes"] || []
        pending = c["pending"] || 0
        word = ->(t) { t ? "trusted" : "untrusted" }
        r = if pending.positive?
              v = Policy.settled(policy, votes, pending, c["stand_aside"] == true)
              v.nil? ? "unsettled" : word.(v)
            else
              word.(Policy.decide(policy, votes, c["stand_aside"] == true))
            end
        out.merge("result" => r)
      when "converge-vectors/cache/1"
        out.merge("result" => Policy.cache_decision(c["timestamp"], c["now"], c["lifetime"]))
      when "converge-vectors/extended-answers/1"
        extended_case(doc, c, out)
      when "converge-vectors/config/1"
        out.merge("result" => "valid", "enabled" => config_case(c))
      when "converge-vectors/transparency/1"
        out.merge(transparency_case(doc, c))
      else raise ArgumentError, "unknown vector schema #{doc['schema'].inspect}"
      end
    rescue Error => e
      invalid(out, e)
    end

    def config_case(c)
      Dir.mktmpdir("converge-vector-") do |root|
        (c["files"] || {}).each do |rel, text|
          p = File.join(root, rel)
          FileUtils.mkdir_p(File.dirname(p))
          File.write(p, text)
        end
        (c["links"] || {}).each do |rel, target|
          p = File.join(root, rel)
          FileUtils.mkdir_p(File.dirname(p))
          File.symlink(target, p)
        end
        Configuration.load(root, {}).notaries.map(&:name).sort
      end
    end

    def extended_case(doc, c, out)
      case c["type"]
      when "bundle"
        begin
          out.merge("result" => "valid", "extended" => Bundles.parse(bytes(c, "bundle")).offers_extended?)
        rescue Error => e
          out.merge("result" => "invalid", "kind" => e.kind)
        end
      when "answer"
        exp = c["expect"] || {}
        entries = (c["bundle_keys"] || []).map { |n| doc.dig("signing_keys", n) }
        keys = Bundles.parse_signing_keys(StrictJSON.parse(JSON.generate(entries)))
        now = exp["now"] || 0
        e = Extended::Expect.new(host: exp["host"] || "", port: exp["port"], nonce: exp["nonce"] || "", now: now,
                                 max_skew: exp["max_skew"] || Extended::DEFAULT_MAX_SKEW, bind_ip: exp.key?("ip"), ip: exp["ip"] || "")
        e.fingerprint = Fingerprint.parse(exp["fingerprint"]) if exp["fingerprint"].is_a?(String)
        begin
          v = Extended.verify_answer(bytes(c, "answer"), Extended.trusted_keys(keys, now), e)
          out.merge("result" => "valid", "verdict" => v.verdict)
        rescue AnswerRejected => r
          out.merge("result" => "rejected", "kind" => r.reason)
        end
      else raise ArgumentError, "unknown case type #{c['type'].inspect}"
      end
    end
  end
end
