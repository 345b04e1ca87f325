# frozen_string_literal: true

require "json"
require "strscan"

module Converge
  # JSON through Ruby's stock parser (JSON.parse: the last of repeated member names counts,
  # NaN and Infinity refused, non-string member names refused, lone surrogates refused). The
  # json 2.6 that Ruby 3.1 ships has no switch for two extensions it accepts, comments and
  # escapes RFC 8259 does not define (\q); the one walk over the text refuses both, and over
  # what a notary signed it is also the bounds scan (docs/wire-format.md): at most 32 levels
  # open at once, every number an integer of at most 15 digits.
  module StrictJSON
    MAX_DEPTH = 32
    MAX_SAFE_INTEGER = (2**53) - 1
    PARSER_DEPTH = 512
    PLAIN = %r{[^"\[\]{}/\-0-9]+}n
    STRING = %r{"(?>[^"\\]+|\\["\\/bfnrtu])*+"}n
    NUMBER = /[\-+.0-9eE]+/n
    INTEGER = /\A-?(?:0|[1-9][0-9]{0,14})\z/n

    module_function

    # Whether text holds no comment and no escape beyond RFC 8259's; with bounds, also within
    # the bounds scan's limits.
    def walk?(text, bounds)
      ss = StringScanner.new(text.b)
      depth = 0
      until ss.eos?
        next if ss.skip(PLAIN)

        case ss.peek(1)
        when '"' then return false unless ss.skip(STRING)
        when "/" then return false
        when "[", "{"
          depth += 1
          return false if bounds && depth > MAX_DEPTH

          ss.pos += 1
        when "]", "}"
          depth -= 1
          ss.pos += 1
        else return false if !INTEGER.match?(ss.scan(NUMBER)) && bounds
        end
      end
      true
    end

    # The value of strict JSON text (UTF-8), or nil when it is not.
    def parse(text, bounds: false)
      t = text.dup.force_encoding(Encoding::UTF_8)
      return nil unless t.valid_encoding? && walk?(t, bounds)

      JSON.parse(t, max_nesting: PARSER_DEPTH, allow_nan: false, create_additions: false)
    rescue JSON::ParserError, JSON::NestingError
      nil
    end

    # Verified bytes as a JSON object: the bounds scan, then the stock parser; nil when either refuses.
    def verified_object(bytes)
      v = parse(bytes, bounds: true)
      v.is_a?(Hash) ? v : nil
    end
  end
end
