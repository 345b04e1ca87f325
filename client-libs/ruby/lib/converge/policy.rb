# frozen_string_literal: true

module Converge
  # Votes, consensus policies and the local-cache rule (pure functions). With stand-aside on,
  # unreachable notaries do not count; off, they count as failures. With n counted notaries
  # and s successes: consensus s == n, majority s >= ceil(n/2), minority s >= 1; never trusted
  # without a success.
  module Policy
    NAMES = %w[consensus majority minority].freeze
    CACHE_FUTURE_SKEW = 300
    CACHE_MILLISECONDS_ABOVE = 100_000_000_000

    module_function

    # Accepts the three policy names, any case, surrounding space ignored.
    def parse(text)
      p = text.to_s.strip.downcase
      return p if NAMES.include?(p)

      raise ConfigError, "notary-agreement must be consensus, majority or minority, not #{text.inspect}"
    end

    def trusted?(policy, s, f, u, stand_aside)
      counted = s + f + (stand_aside ? 0 : u)
      return false if s < 1

      case policy
      when "consensus" then s == counted
      when "majority" then s >= (counted + 1) / 2
      else true
      end
    end

    def count(votes)
      s = f = u = 0
      votes.each do |v|
        case v
        when "success" then s += 1
        when "failure" then f += 1
        when "unreachable" then u += 1
        when "skipped" then nil
        else raise VoteError, "unknown vote #{v.inspect}"
        end
      end
      [s, f, u]
    end

    # The verdict for a complete set of votes.
    def decide(policy, votes, stand_aside)
      s, f, u = count(votes)
      trusted?(policy, s, f, u, stand_aside)
    end

    # The verdict when no outcome of the pending notaries can change it, else nil.
    def settled(policy, votes, pending, stand_aside)
      s, f, u = count(votes)
      first = trusted?(policy, s, f, u + pending, stand_aside)
      (0..pending).each do |ps|
        (0..(pending - ps)).each do |pf|
          return nil if trusted?(policy, s + ps, f + pf, u + pending - ps - pf, stand_aside) != first
        end
      end
      first
    end

    # "hit", "stale" or "miss" for a stored timestamp (nil: none) at now; lifetime nil = forever.
    def cache_decision(timestamp, now, lifetime)
      return "miss" if timestamp.nil?

      ts = timestamp > CACHE_MILLISECONDS_ABOVE ? timestamp / 1000 : timestamp
      age = now - ts
      return "stale" if age < -CACHE_FUTURE_SKEW
      return "stale" if lifetime && age > lifetime

      "hit"
    end
  end
end
