# frozen_string_literal: true

require "openssl"

module Converge
  # The notary's transparency log, client side (docs/transparency.md, "Clients"): the bundle's
  # `transparency` member, RFC 6962 hashing with RFC 9162 proof verification, signed-note
  # checkpoints (c2sp.org/signed-note, tlog-checkpoint, tlog-cosignature; Ed25519 by OpenSSL)
  # and the six checks of an answer's member, each failure an AnswerRejected of the kind
  # log-missing, log-proof, log-checkpoint, log-witness or log-entry. Pure: no IO.
  module Transparency
    MAX_PROOF = 63
    MAX_NOTE = 64 * 1024
    MAX_SIGNATURE_LINES = 100
    MAX_WITNESSES = 32
    ENTRY_TYPE = "converge-observation/1"
    SIG_PREFIX = "\u2014 "

    # A signed-note verifier key.
    NoteKey = Struct.new(:name, :id, :pub, keyword_init: true)
    # A bundle's transparency member.
    Policy = Struct.new(:log, :url, :witnesses, :min_cosignatures, keyword_init: true)
    # A checkpoint that passed steps 3 and 4.
    Checkpoint = Struct.new(:size, :root, :cosigned, keyword_init: true)

    module_function

    def valid_name?(name)
      name.is_a?(String) && !name.empty? && name.valid_encoding? && !name.match?(/[\s+\p{C}]/)
    end

    # `<name>+<8 hex key id>+<base64(type || 32-byte key)>`; raises ArgumentError.
    def parse_vkey(text, type)
      raise ArgumentError, "a verifier key is a short string" unless text.is_a?(String) && text.bytesize <= 1024

      name, hex, b64 = text.split("+", 3)
      unless b64 && valid_name?(name) && hex.match?(/\A[0-9a-f]{8}\z/)
        raise ArgumentError, "not <name>+<8 hex>+<base64 key>"
      end

      raw = Bundles.strict_base64(b64)
      raise ArgumentError, format("not a type 0x%02x Ed25519 key", type) unless raw && raw.bytesize == 33 && raw.getbyte(0) == type

      weak = Bundles.weak_key(raw.byteslice(1, 32))
      raise ArgumentError, weak if weak

      id = OpenSSL::Digest::SHA256.digest(name.b + "\n" + raw)[0, 4]
      raise ArgumentError, "the key id does not match the key" unless id.unpack1("H*") == hex

      NoteKey.new(name: name, id: id, pub: raw[1..])
    end

    # The bundle's transparency member; raises BundleError.
    def parse_policy(obj)
      raise BundleError, "transparency must be an object" unless obj.is_a?(Hash)

      unknown = obj.keys - %w[log url witnesses min_cosignatures]
      raise BundleError, "unknown transparency fields: #{unknown.sort.join(', ')}" unless unknown.empty?

      log = begin
        parse_vkey(obj["log"], 0x01)
      rescue ArgumentError => e
        raise BundleError, "transparency log key: #{e.message}"
      end
      url = obj["url"]
      unless url.nil? || (url.is_a?(String) && url.start_with?("https://") && url.bytesize <= 2048)
        raise BundleError, "transparency url must be an https:// URL"
      end

      ws = obj.fetch("witnesses", [])
      unless ws.is_a?(Array) && ws.size <= MAX_WITNESSES
        raise BundleError, "transparency witnesses must be a list of at most #{MAX_WITNESSES}"
      end

      witnesses = ws.map do |w|
        raise BundleError, "a witness is an object with name and vkey" unless w.is_a?(Hash) && w.keys.sort == %w[name vkey]

        k = begin
          parse_vkey(w["vkey"], 0x04)
        rescue ArgumentError => e
          raise BundleError, "witness key: #{e.message}"
        end
        raise BundleError, "witness name is not its key's name" unless w["name"] == k.name

        k
      end
      raise BundleError, "a witness is listed twice" unless witnesses.map { |w| [w.name, w.id] }.uniq.size == witnesses.size
      # One key under two names: a cosignature does not sign the witness's name, so one key would
      # count as two witnesses (or the log would cosign its own checkpoints).
      keys = [log, *witnesses].map(&:pub)
      raise BundleError, "transparency names one key twice (two witnesses, or a witness and the log)" unless keys.uniq.size == keys.size

      need = obj.fetch("min_cosignatures", 0)
      unless need.is_a?(Integer) && need.between?(0, witnesses.size)
        raise BundleError, "min_cosignatures must be an integer from 0 to #{witnesses.size}"
      end

      Policy.new(log: log, url: url, witnesses: witnesses, min_cosignatures: need)
    end

    def leaf_hash(entry) = OpenSSL::Digest::SHA256.digest("\x00".b + entry.b)
    def node_hash(left, right) = OpenSSL::Digest::SHA256.digest("\x01".b + left + right)

    # RFC 6962 2.1: the root of the leaf hashes.
    def tree_root(leaves)
      return OpenSSL::Digest::SHA256.digest("") if leaves.empty?
      return leaves[0] if leaves.size == 1

      k = 1
      k *= 2 while k * 2 < leaves.size
      node_hash(tree_root(leaves[0, k]), tree_root(leaves[k..]))
    end

    # RFC 9162 2.1.3.2.
    def verify_inclusion?(leaf, index, size, proof, root)
      return false unless index.between?(0, size - 1) && proof.all? { |p| p.bytesize == 32 }

      fn = index
      sn = size - 1
      r = leaf
      proof.each do |p|
        return false if sn.zero?

        if fn.odd? || fn == sn
          r = node_hash(p, r)
          while fn.even? && fn.positive?
            fn >>= 1
            sn >>= 1
          end
        else
          r = node_hash(r, p)
        end
        fn >>= 1
        sn >>= 1
      end
      sn.zero? && r == root
    end

    # RFC 9162 2.1.4.2.
    def verify_consistency?(old, new, old_root, new_root, proof)
      return false unless old.between?(0, new) && proof.all? { |p| p.bytesize == 32 }
      return proof.empty? && (old != new || old_root == new_root) if old == new || old.zero?

      path = (old & (old - 1)).zero? ? [old_root, *proof] : proof
      return false if path.empty?

      fn = old - 1
      sn = new - 1
      while fn.odd?
        fn >>= 1
        sn >>= 1
      end
      fr = sr = path[0]
      path[1..].each do |c|
        return false if sn.zero?

        if fn.odd? || fn == sn
          fr = node_hash(c, fr)
          sr = node_hash(c, sr)
          while fn.even? && fn.positive?
            fn >>= 1
            sn >>= 1
          end
        else
          sr = node_hash(sr, c)
        end
        fn >>= 1
        sn >>= 1
      end
      sn.zero? && fr == old_root && sr == new_root
    end

    def ed25519?(pub, sig, msg) = sig.bytesize == 64 && Extended.ed25519_verify(pub, msg, sig)

    # 1 when the key signed (its first line verifies), 0 without a line, -1 when it fails.
    def signed_by(key, sigs, text, cosig)
      sigs.each do |name, raw|
        next unless name == key.name && raw[0, 4] == key.id

        sig = raw[4..]
        return ed25519?(key.pub, sig, text) ? 1 : -1 unless cosig
        return -1 unless sig.bytesize == 72

        t = sig[0, 8].unpack1("Q>")
        return ed25519?(key.pub, sig[8..], "cosignature/v1\ntime #{t}\n".b + text) ? 1 : -1
      end
      0
    end

    def bad_checkpoint(message) = raise(AnswerRejected.new("log-checkpoint", "checkpoint: #{message}"))

    # Steps 3 and 4: the checkpoint signed by the log and cosigned by enough witnesses.
    def open_checkpoint(note, policy)
      bad_checkpoint("not a note") unless note.is_a?(String)
      note = note.b
      bad_checkpoint("larger than #{MAX_NOTE} bytes") if note.bytesize > MAX_NOTE
      u = note.dup.force_encoding(Encoding::UTF_8)
      bad_checkpoint("not UTF-8") unless u.valid_encoding?
      bad_checkpoint("control character in the note") if u.match?(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/)
      cut = note.rindex("\n\n")
      bad_checkpoint("not a signed note") unless cut && note.end_with?("\n")
      text = note[0, cut + 1]
      lines = note[cut + 2...-1].to_s.split("\n", -1)
      lines = [""] if lines.empty?
      bad_checkpoint("too many signature lines") if lines.size > MAX_SIGNATURE_LINES
      prefix = SIG_PREFIX.b
      sigs = lines.map do |line|
        name, sep, b64 = line.start_with?(prefix) ? line.byteslice(prefix.bytesize..).partition(" ") : []
        name = name&.force_encoding(Encoding::UTF_8)
        bad_checkpoint("malformed signature line") unless sep == " " && valid_name?(name)
        raw = Bundles.strict_base64(b64)
        bad_checkpoint("a signature is not base64 of a key id and a signature") unless raw && raw.bytesize >= 5
        [name, raw.b]
      end
      tl = text[0...-1].split("\n", -1)
      bad_checkpoint("a checkpoint has origin, size and root lines") if tl.size < 3 || tl.include?("")
      bad_checkpoint("size is not a decimal without leading zeros") unless tl[1].match?(/\A(?:0|[1-9][0-9]{0,19})\z/)
      root = Bundles.strict_base64(tl[2])
      bad_checkpoint("root is not 32 bytes") unless root && root.bytesize == 32
      bad_checkpoint("origin is not the log's name") unless tl[0].force_encoding(Encoding::UTF_8) == policy.log.name
      r = signed_by(policy.log, sigs, text, false)
      bad_checkpoint(r.negative? ? "the log's signature does not verify" : "no signature by the log's key") unless r == 1
      cosigned = policy.witnesses.sum do |w|
        r = signed_by(w, sigs, text, true)
        raise AnswerRejected.new("log-witness", "checkpoint: the cosignature of #{w.name} does not verify") if r.negative?

        r
      end
      if cosigned < policy.min_cosignatures
        raise AnswerRejected.new("log-witness",
                                 "checkpoint cosigned by #{cosigned} of the bundle's witnesses, #{policy.min_cosignatures} required")
      end

      Checkpoint.new(size: tl[1].to_i, root: root.b, cosigned: cosigned)
    end

    # The six checks of an answer's member (its raw bytes, nil when absent) for the statement's
    # target and the fingerprint asked about; raises AnswerRejected of a log-* kind.
    def check_member(member, policy, target, fp)
      raise AnswerRejected.new("log-missing", "the answer carries no proof of inclusion in the log") if member.nil?

      obj = StrictJSON.verified_object(member)
      index = obj && obj["index"]
      proof = obj && obj["proof"]
      unless obj && obj["checkpoint"].is_a?(String) && obj["entry"].is_a?(String) && index.is_a?(Integer) &&
             index >= 0 && proof.is_a?(Array) && proof.size <= MAX_PROOF && proof.all?(String)
        raise AnswerRejected.new("log-proof", "transparency member lacks checkpoint, entry, index or proof")
      end

      ck = open_checkpoint(obj["checkpoint"], policy)
      raw = Bundles.strict_base64(obj["entry"])
      entry = raw && StrictJSON.verified_object(raw)
      unless entry && entry["type"] == ENTRY_TYPE
        raise AnswerRejected.new("log-entry", "the logged entry is not base64 of a #{ENTRY_TYPE} object")
      end

      %w[host port ip].each do |k|
        got = entry[k]
        want = target.is_a?(Hash) ? target[k] : nil
        next if got == want && got.instance_of?(want.class)

        raise AnswerRejected.new("log-entry", "the logged entry's #{k} is not the statement's")
      end
      raise AnswerRejected.new("log-entry", "the logged entry is about another certificate") unless entry[fp.algorithm] == fp.colon_hex

      hashes = proof.map { |p| Bundles.strict_base64(p) }
      raise AnswerRejected.new("log-proof", "inclusion proof: a hash is not 32 bytes in base64") unless hashes.all? { |h| h&.bytesize == 32 }
      unless verify_inclusion?(leaf_hash(raw), index, ck.size, hashes.map(&:b), ck.root)
        raise AnswerRejected.new("log-proof", "inclusion proof does not put the entry at #{index} in the tree of #{ck.size}")
      end

      ck
    end
  end
end
