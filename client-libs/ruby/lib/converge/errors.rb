# frozen_string_literal: true

module Converge
  # Every error this library raises. #kind is a stable word shared with the other languages'
  # libraries and the test vectors; #family is :bad_input (the data is wrong) or :io.
  class Error < StandardError
    IO_KINDS = %w[unreachable pin cache-io timeout].freeze

    attr_reader :kind

    def initialize(kind, message)
      @kind = kind
      super("converge: #{kind}: #{message}")
    end

    # :bad_input or :io
    def family
      IO_KINDS.include?(kind) ? :io : :bad_input
    end

    # The message without the kind.
    def detail
      message.sub(/\Aconverge: [^:]+: /, "")
    end
  end

  # A fingerprint that is not 40 or 64 hex digits (optionally colon-separated).
  class FingerprintError < Error; def initialize(m) = super("fingerprint", m); end
  # A host or port that cannot be asked about.
  class TargetError < Error; def initialize(m) = super("target", m); end
  # A notary response that does not follow the protocol.
  class ResponseError < Error; def initialize(m) = super("response", m); end
  # A legacy signature that does not verify against the notary's pinned certificate.
  class SignatureError < Error; def initialize(m) = super("signature", m); end
  # A .notary bundle that is not valid.
  class BundleError < Error; def initialize(m) = super("bundle", m); end
  # A configuration that is not valid.
  class ConfigError < Error; def initialize(m) = super("config", m); end
  # The local cache database could not be opened, read or written.
  class CacheIOError < Error; def initialize(m) = super("cache-io", m); end
  # An unknown vote.
  class VoteError < Error; def initialize(m) = super("vote", m); end

  # An extended answer that failed verification; #reason names the check.
  class AnswerRejected < StandardError
    attr_reader :reason

    def initialize(reason, message)
      @reason = reason
      super("converge: answer rejected (#{reason}): #{message}")
    end
  end

  # The notaries did not vouch for a TLS peer's certificate (or it could not be checked);
  # raised by the TLS hooks before any application data is written.
  class NotTrusted < StandardError
    attr_reader :host, :port, :verdict

    def initialize(host, port, verdict, cause_message = nil)
      @host = host
      @port = port
      @verdict = verdict
      what = verdict ? "certificate not trusted: #{verdict.reason}" : "certificate not checked: #{cause_message}"
      super("converge does not trust #{host}:#{port}: #{what}")
    end
  end
end
