# frozen_string_literal: true

require "pathname"

module Converge
  # Everything a check needs (see Config.load for discovery and the keys).
  Config = Struct.new(:directory, :db, :user_db, :notaries_dir, :agreement, :quorum, :connect_timeout,
                      :notary_timeout, :total_timeout, :cache_lifetime, :stand_aside, :early_return,
                      :max_response_bytes, :bounce, :bounce_port, :extended, :extended_nonce, :max_skew,
                      :bundles, keyword_init: true) do
    # The defaults of every key (no directory, no cache, no notaries).
    def self.defaults
      new(directory: nil, db: nil, user_db: nil, notaries_dir: nil, agreement: "majority", quorum: 3,
          connect_timeout: 3.0, notary_timeout: 5.0, total_timeout: 10.0, cache_lifetime: DEFAULT_CACHE_LIFETIME,
          stand_aside: true, early_return: true, max_response_bytes: Legacy::MAX_RESPONSE_BYTES, bounce: false,
          bounce_port: 4242, extended: "prefer", extended_nonce: true, max_skew: Extended::DEFAULT_MAX_SKEW, bundles: nil)
    end

    # The enabled logical notaries, de-duplicated by name (the first file wins).
    def notaries
      found = if bundles then bundles
              elsif notaries_dir then Configuration.list_notaries(notaries_dir).select { |f| f[:enabled] }.map { |f| f[:bundle] }
              else []
              end
      found.uniq(&:name)
    end
  end

  DEFAULT_CACHE_LIFETIME = 7 * 24 * 3600
  CONFIG_FILE = "converge.config"
  CONFIG_ENV_VAR = "CONVERGE_CONFIG_DIR"
  SYSTEM_CONFIG_DIR = "/usr/local/etc/converge"

  # The configuration directory shared by every converge client. Discovery: an explicit
  # directory (must exist); $CONVERGE_CONFIG_DIR (must exist when set); ~/.config/converge
  # ($XDG_CONFIG_HOME/converge), if it exists; /usr/local/etc/converge, if it exists.
  module Configuration
    MAX_CONFIG_BYTES = 64 * 1024
    MAX_NOTARY_FILES = 64
    KNOWN_KEYS = %w[db userdb notaries-dir notary-agreement quorum connect-timeout notary-timeout total-timeout
                    cache-lifetime stand-aside early-return bounce bounce-port max-response-bytes extended
                    extended-nonce max-skew].freeze

    module_function

    def user_dir(env)
      return File.join(env["XDG_CONFIG_HOME"], "converge") if env["XDG_CONFIG_HOME"] && !env["XDG_CONFIG_HOME"].empty?

      File.join(env["HOME"] || Dir.home, ".config", "converge")
    end

    # Finds the configuration directory (explicit may be nil).
    def discover(explicit = nil, env = ENV)
      if explicit && !explicit.to_s.empty?
        raise ConfigError, "configuration directory #{explicit} does not exist" unless File.directory?(explicit)

        return explicit.to_s
      end
      d = env[CONFIG_ENV_VAR]
      if d && !d.empty?
        raise ConfigError, "$#{CONFIG_ENV_VAR}=#{d} is not a directory" unless File.directory?(d)

        return d
      end
      [user_dir(env), SYSTEM_CONFIG_DIR].each { |x| return x if File.directory?(x) }
      raise ConfigError, "no configuration: set $#{CONFIG_ENV_VAR}, or create #{user_dir(env)} or #{SYSTEM_CONFIG_DIR}"
    end

    def number(raw, key, default, low, high)
      return default unless raw.key?(key)

      v = raw[key]
      raise ConfigError, "#{key} must be a number in [#{low}, #{high}]" unless v.is_a?(Numeric) && !v.to_f.nan? && v.between?(low, high)

      v.to_f
    end

    def int(raw, key, default, low, high, what)
      return default unless raw.key?(key)

      v = raw[key]
      raise ConfigError, "#{key} must be #{what}" unless v.is_a?(Integer) && v.between?(low, high)

      v
    end

    def bool(raw, key, default)
      return default unless raw.key?(key)
      raise ConfigError, "#{key} must be true or false" unless [true, false].include?(raw[key])

      raw[key]
    end

    def path(dir, raw, key, default)
      return default && File.join(dir, default) unless raw.key?(key)

      v = raw[key]
      return nil if v.nil?
      raise ConfigError, "#{key} must be a path" unless v.is_a?(String) && !v.empty?

      v = File.join(Dir.home, v[1..]) if v == "~" || v.start_with?("~/")
      Pathname.new(v).absolute? ? v : File.join(dir, v)
    end

    # Validates the decoded converge.config of dir.
    def parse(dir, raw)
      unknown = raw.keys.reject { |k| KNOWN_KEYS.include?(k) }.sort
      raise ConfigError, "unknown configuration keys: #{unknown.join(', ')}" unless unknown.empty?

      c = Config.defaults
      c.directory = dir
      c.bounce_port = int(raw, "bounce-port", 4242, 1, 65_535, "an integer port 1..65535")
      c.cache_lifetime = raw.key?("cache-lifetime") && raw["cache-lifetime"].nil? ? nil : number(raw, "cache-lifetime", DEFAULT_CACHE_LIFETIME, 0, 10 * 365 * 86_400)
      c.quorum = int(raw, "quorum", 3, 1, 16, "an integer 1..16")
      c.max_response_bytes = int(raw, "max-response-bytes", Legacy::MAX_RESPONSE_BYTES, 1024, 16 * 1024 * 1024, "an integer 1024..16777216")
      if raw.key?("extended")
        raise ConfigError, "extended must be one of off, prefer, fallback, require" unless %w[off prefer fallback require].include?(raw["extended"])

        c.extended = raw["extended"]
      end
      c.max_skew = int(raw, "max-skew", Extended::DEFAULT_MAX_SKEW, 0, 86_400, "an integer 0..86400 (seconds)")
      c.extended_nonce = bool(raw, "extended-nonce", true)
      if raw.key?("notary-agreement")
        raise ConfigError, "notary-agreement must be a string" unless raw["notary-agreement"].is_a?(String)

        c.agreement = Policy.parse(raw["notary-agreement"])
      end
      c.db = path(dir, raw, "db", "cache.sqlite3")
      c.user_db = path(dir, raw, "userdb", nil)
      c.notaries_dir = path(dir, raw, "notaries-dir", ".")
      c.connect_timeout = number(raw, "connect-timeout", 3.0, 0.01, 600)
      c.notary_timeout = number(raw, "notary-timeout", 5.0, 0.01, 600)
      c.total_timeout = number(raw, "total-timeout", 10.0, 0.01, 3600)
      c.stand_aside = bool(raw, "stand-aside", true)
      c.early_return = bool(raw, "early-return", true)
      c.bounce = bool(raw, "bounce", false)
      c
    end

    # Discovers (explicit may be nil) and loads a configuration directory.
    def load(explicit = nil, env = ENV)
      dir = discover(explicit, env)
      f = File.join(dir, CONFIG_FILE)
      raw = {}
      if File.exist?(f)
        raise ConfigError, "#{f} larger than #{MAX_CONFIG_BYTES} bytes" if File.size(f) > MAX_CONFIG_BYTES

        v = StrictJSON.parse(File.binread(f))
        raise ConfigError, "#{f} must hold a JSON object" unless v.is_a?(Hash)

        raw = v
      end
      parse(dir, raw)
    rescue SystemCallError => e
      raise ConfigError, "cannot read #{f}: #{e.message}"
    end

    def subfolders?(dir) = File.directory?(File.join(dir, "notaries-available")) || File.directory?(File.join(dir, "notaries-enabled"))

    def notary_files(dir)
      Dir.children(dir).select { |n| n.end_with?(".notary") }.sort.map { |n| File.join(dir, n) }
    rescue SystemCallError
      []
    end

    # Whether dir is the 2014 libraries' layout: .notary files and neither subfolder.
    def flat?(dir) = !subfolders?(dir) && !notary_files(dir).empty?

    # Where list_notaries looks, for "no notaries enabled" messages.
    def where_read(dir)
      return "no notaries-dir" if dir.nil?

      standard = "#{File.join(dir, 'notaries-enabled')}/"
      subfolders?(dir) ? standard : "#{standard} and #{File.join(dir, '*.notary')}"
    end

    def real(p)
      File.realpath(p)
    rescue SystemCallError
      nil
    end

    # Every bundle in dir, sorted by file name, with whether it is enabled.
    def list_notaries(dir)
      avail = File.join(dir, "notaries-available")
      enabled_dir = File.join(dir, "notaries-enabled")
      targets = {}
      extra = []
      flat = flat?(dir)
      if flat
        extra = notary_files(dir).select { |p| File.exist?(p) }
      elsif File.directory?(enabled_dir)
        notary_files(enabled_dir).each do |p|
          if File.symlink?(p)
            r = real(p)
            targets[r] = true if r
          elsif File.exist?(p)
            extra << p
          end
        end
      end
      files = !flat && File.directory?(avail) ? notary_files(avail) : []
      raise ConfigError, "more than #{MAX_NOTARY_FILES} notary bundles" if files.length + extra.length > MAX_NOTARY_FILES

      (files + extra).map do |p|
        data = begin
          File.binread(p)
        rescue SystemCallError => e
          raise ConfigError, "cannot read #{p}: #{e.message}"
        end
        bundle = begin
          Bundles.parse(data)
        rescue BundleError => e
          raise BundleError, "#{p}: #{e.detail}"
        end
        { bundle: bundle, enabled: extra.include?(p) || targets.key?(real(p)), path: p }
      end
    end
  end
end
