# frozen_string_literal: true

require "securerandom"

module Converge
  # The decision for one (host, port, fingerprint).
  Verdict = Struct.new(:trusted, :host, :port, :fingerprint, :policy, :stand_aside, :from_cache, :results,
                       :reason, :elapsed, :relay, keyword_init: true) do
    alias_method :trusted?, :trusted
    alias_method :from_cache?, :from_cache
  end

  # A configuration and its open cache connections; thread-safe. Keep one per configuration.
  class Client
    attr_reader :config

    # Loads a configuration directory (discovered when dir is nil).
    def self.load(dir = nil, **opts) = new(Configuration.load(dir), **opts)

    # clock: unix seconds (tests); random: an integer in [0, n).
    def initialize(config, clock: -> { Time.now.to_f }, random: ->(n) { SecureRandom.random_number(n) })
      @config = config
      @clock = clock
      @random = random
      @mutex = Mutex.new
      @caches = nil
      @writer = nil
    end

    def open_caches
      @mutex.synchronize do
        return @caches if @caches

        caches = []
        writer = nil
        if config.user_db
          writer = LocalCache.new(config.user_db)
          caches << writer
        end
        if config.db
          if writer.nil?
            writer = LocalCache.new(config.db)
            caches << writer
          elsif File.exist?(config.db)
            begin
              caches << LocalCache.new(config.db, read_only: true) # an unreadable shared cache only costs queries
            rescue CacheIOError
              nil
            end
          end
        end
        @writer = writer
        @caches = caches
      end
    end

    # Closes the cache connections (reopened when used again).
    def close
      @mutex.synchronize do
        @caches&.each(&:close)
        @caches = nil
        @writer = nil
      end
    end

    def self.forms(fingerprint, certificate_der)
      fp = Fingerprint.parse(fingerprint)
      out = [fp]
      if certificate_der
        %w[sha1 sha256].each do |alg|
          alt = Fingerprint.of(certificate_der, alg)
          raise FingerprintError, "the certificate does not match the fingerprint" if alt.algorithm == fp.algorithm && alt != fp

          out << alt unless out.include?(alt)
        end
      end
      out
    end

    def cached?(loc, fps)
      now = @clock.call
      open_caches.any? do |cache|
        fps.any? { |fp| Policy.cache_decision(cache.lookup(loc, fp.colon_hex), now, config.cache_lifetime) == "hit" }
      end
    end

    # The local cache's answer for a DER certificate without asking any notary.
    def cached_certificate?(host, port, der)
      Legacy.check_target(host, port)
      cached?(Legacy.location(host, port), Client.forms(Fingerprint.of(der).colon_hex, der))
    end

    def remember(loc, fps)
      open_caches
      w = @writer
      fps.each { |fp| w.store(loc, fp.colon_hex, @clock.call.to_i) } if w
    end

    # Asks for a verdict on (host, port, fingerprint). A local cache hit costs one indexed
    # SQLite lookup. Raises Converge::Error for bad input or cache IO; notary failures are votes.
    # certificate: the DER certificate (matched by SHA-1 and SHA-256); ip: ask the notaries to
    # connect to this address.
    def check(host, port, fingerprint, certificate: nil, ip: nil)
      t0 = NotaryIO.now_mono
      Legacy.check_target(host, port)
      Legacy.check_ip(ip) if ip && !ip.empty?
      fps = Client.forms(fingerprint, certificate)
      if cached?(Legacy.location(host, port), fps)
        return Verdict.new(trusted: true, host: host, port: port, fingerprint: fps.first.colon_hex, policy: config.agreement,
                           stand_aside: config.stand_aside, from_cache: true, results: [], reason: "local cache hit",
                           elapsed: NotaryIO.now_mono - t0, relay: nil)
      end
      ask(host, port, fps, t0, ip && !ip.empty? ? ip : nil)
    end

    # check with the DER certificate: matched by SHA-1 and SHA-256 both.
    def check_certificate(host, port, der, ip: nil) = check(host, port, Fingerprint.of(der).colon_hex, certificate: der, ip: ip)

    private

    def ask(host, port, fps, t0, ip)
      cfg = config
      notaries = cfg.notaries
      raise ConfigError, "no notaries enabled (looked in #{Configuration.where_read(cfg.notaries_dir)})" if notaries.empty?

      if cfg.extended == "require"
        notaries = notaries.select(&:offers_extended?)
        raise ConfigError, "extended is require but no enabled notary's bundle offers #{EXTENDED_FORMAT}" if notaries.empty?
      end
      relay = nil
      if cfg.bounce
        raise ConfigError, "bounce needs two enabled notaries: one relays, one votes" if notaries.length < 2

        notaries = notaries.dup
        relay = notaries.delete_at(@random.call(notaries.length))
      end
      idx = (0...notaries.length).to_a
      k = [cfg.quorum, notaries.length].min
      k.times do |i|
        j = i + @random.call(idx.length - i)
        idx[i], idx[j] = idx[j], idx[i]
      end
      chosen = idx.first(k).sort.map { |i| notaries[i] }
      total_deadline = t0 + cfg.total_timeout
      base = { connect_timeout: cfg.connect_timeout, max_bytes: cfg.max_response_bytes, relay: relay,
               bounce_port: cfg.bounce_port, ip: ip, ext: nil }
      q = NotaryIO::TimedQueue.new
      threads = chosen.each_with_index.map do |b, i|
        o = base
        if cfg.extended != "off" && b.offers_extended?
          o = base.merge(ext: { keys: b.signing_keys, nonce: cfg.extended_nonce, max_skew: cfg.max_skew,
                                fallback: cfg.extended == "fallback" && b.transparency.nil?, now: @clock, log: b.transparency })
        end
        Thread.new { q << [i, NotaryIO.ask_notary(b, host, port, fps, cfg.notary_timeout, o, total_deadline)] }
      end
      results = Array.new(k)
      pending = k
      early = nil
      timed_out = false
      while pending.positive?
        left = total_deadline - NotaryIO.now_mono
        if left <= 0
          timed_out = true
          break
        end
        item = q.pop(left)
        if item.nil?
          timed_out = true
          break
        end
        results[item[0]] = item[1]
        pending -= 1
        next unless cfg.early_return

        early = Policy.settled(cfg.agreement, results.compact.map(&:vote), pending, cfg.stand_aside)
        break unless early.nil?
      end
      threads.each { |t| t.kill if t.alive? }
      ordered = results.each_with_index.map do |r, i|
        r || if timed_out
               NotaryResult.new(name: chosen[i].name, vote: "unreachable", kind: "timeout", status: nil, host: "",
                                detail: "no answer within #{cfg.total_timeout} s", elapsed: NotaryIO.now_mono - t0)
             else
               NotaryResult.new(name: chosen[i].name, vote: "skipped", kind: "settled", status: nil, host: "",
                                detail: "verdict settled before this notary answered", elapsed: 0)
             end
      end
      votes = ordered.map(&:vote).reject { |v| v == "skipped" }
      verdict = !early.nil? && !timed_out ? early : Policy.decide(cfg.agreement, votes, cfg.stand_aside)
      remember(Legacy.location(host, port), fps) if verdict
      s = votes.count("success")
      aside = cfg.stand_aside ? "unreachable stand aside" : "unreachable count as failure"
      Verdict.new(trusted: verdict, host: host, port: port, fingerprint: fps.first.colon_hex, policy: cfg.agreement,
                  stand_aside: cfg.stand_aside, from_cache: false, results: ordered,
                  reason: "#{s} of #{k} notaries confirm (#{cfg.agreement}, #{aside})", elapsed: NotaryIO.now_mono - t0,
                  relay: relay&.name)
    end
  end

  @shared = {}
  @shared_mutex = Mutex.new

  # The client converge uses for a configuration directory (nil: discovered), loaded once.
  def self.shared_client(config_dir = nil)
    key = config_dir || "env:#{ENV.fetch(CONFIG_ENV_VAR, '')}"
    @shared_mutex.synchronize { @shared[key] ||= Client.load(config_dir) }
  end

  # Asks whether fingerprint (SHA-1 or SHA-256, any case, colons optional) is the certificate
  # the notaries see for host:port, with the discovered configuration ($CONVERGE_CONFIG_DIR,
  # ~/.config/converge, /usr/local/etc/converge) or config_dir.
  #
  #   v = Converge.converge("www.example.org", 443, "8F:C0:79:...")
  #   raise v.reason unless v.trusted?
  def self.converge(host, port, fingerprint, config_dir: nil, **opts)
    shared_client(config_dir).check(host, port, fingerprint, **opts)
  end
end
