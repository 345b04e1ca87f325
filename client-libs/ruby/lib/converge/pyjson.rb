# frozen_string_literal: true

require "json"

module Converge
  # JSON at the protocol's edges. JSON.parse keeps what Python's json.loads keeps: key order
  # (first position, last value), integers of any size apart from floats, NaN and Infinity
  # (allow_nan). Two rules depend on that:
  #
  # - legacy recipe (a) re-serialises a parsed body the way Python's json.dumps does with its
  #   default settings (", " and ": " separators, ASCII-only output with \uXXXX escapes,
  #   integers as written, floats as Python's repr);
  # - the extended format is canonical JSON (RFC 8785) over a subset without floats: a verifier
  #   compares canonical(parse(body)) with the body.
  module PyJSON
    MAX_DEPTH = 512
    MAX_SAFE_INTEGER = (2**53) - 1
    MAX_CANONICAL_DEPTH = 16

    module_function

    # The value of JSON text (UTF-8), or nil when it is not JSON.
    def parse(text)
      t = text.dup.force_encoding(Encoding::UTF_8)
      return nil unless t.valid_encoding?

      JSON.parse(t, max_nesting: MAX_DEPTH, allow_nan: true, create_additions: false)
    rescue JSON::ParserError, JSON::NestingError
      nil
    end

    # A float as Python's repr writes it.
    def float_repr(f)
      return "NaN" if f.nan?
      return(f.positive? ? "Infinity" : "-Infinity") if f.infinite?
      return (1.0 / f).negative? ? "-0.0" : "0.0" if f.zero?

      neg = f.negative?
      s = f.abs.to_s # Ruby writes the shortest digits: "123.456" or "1.5e-05" or "1.0e+16"
      if s.include?("e")
        mant, exp = s.split("e")
        exp = exp.to_i
      else
        mant = s
        exp = 0
      end
      int, frac = mant.split(".")
      digits = (int + (frac || "")).sub(/\A0+/, "")
      point = int == "0" ? 0 : int.length # digits before the point
      if int == "0"
        lead = frac[/\A0*/].length
        point = -lead
        digits = frac.sub(/\A0+/, "")
      end
      digits = digits.sub(/0+\z/, "")
      digits = "0" if digits.empty?
      e10 = point + exp - 1 # scientific exponent of the first digit
      out = if e10 >= -4 && e10 < 16
              if e10 >= 0
                k = e10 + 1
                digits.length <= k ? "#{digits}#{'0' * (k - digits.length)}.0" : "#{digits[0, k]}.#{digits[k..]}"
              else
                "0.#{'0' * (-e10 - 1)}#{digits}"
              end
            else
              m = digits.length > 1 ? "#{digits[0]}.#{digits[1..]}" : digits
              format("%se%s%02d", m, e10.negative? ? "-" : "+", e10.abs)
            end
      neg ? "-#{out}" : out
    end

    def py_string(s)
      out = +'"'
      s.encode("UTF-16BE").unpack("n*").each do |u|
        out << case u
               when 0x22 then '\\"'
               when 0x5c then "\\\\"
               when 0x0a then "\\n"
               when 0x0d then "\\r"
               when 0x09 then "\\t"
               when 0x08 then "\\b"
               when 0x0c then "\\f"
               when 0x20..0x7e then u.chr
               else format("\\u%04x", u)
               end
      end
      out << '"'
    end

    # v serialised as Python's json.dumps(v) with default arguments.
    def dumps(v)
      case v
      when nil then "null"
      when true then "true"
      when false then "false"
      when Integer then v.to_s
      when Float then float_repr(v)
      when String then py_string(v)
      when Array then "[#{v.map { |x| dumps(x) }.join(', ')}]"
      when Hash then "{#{v.map { |k, x| "#{py_string(k)}: #{dumps(x)}" }.join(', ')}}"
      else raise ArgumentError, "not a JSON value: #{v.class}"
      end
    end

    def canon_string(s)
      out = +'"'
      s.each_char do |c|
        out << case c
               when '"' then '\\"'
               when "\\" then "\\\\"
               when "\n" then "\\n"
               when "\r" then "\\r"
               when "\t" then "\\t"
               when "\b" then "\\b"
               when "\f" then "\\f"
               else c.ord < 0x20 ? format("\\u%04x", c.ord) : c
               end
      end
      out << '"'
    end

    # v as RFC 8785 canonical JSON, for the subset the extended format uses: objects with ASCII
    # keys, arrays, strings, booleans, null and integers of magnitude at most 2^53 - 1, nested
    # at most 16 deep. nil when the value is outside the subset.
    def canonical(v, depth = 0)
      return nil if depth > MAX_CANONICAL_DEPTH

      case v
      when nil then "null"
      when true then "true"
      when false then "false"
      when Integer then v.abs <= MAX_SAFE_INTEGER ? v.to_s : nil
      when String then canon_string(v)
      when Array
        parts = v.map { |x| canonical(x, depth + 1) }
        parts.include?(nil) ? nil : "[#{parts.join(',')}]"
      when Hash
        return nil unless v.keys.all?(&:ascii_only?)

        parts = v.keys.sort.map do |k|
          x = canonical(v[k], depth + 1)
          return nil if x.nil?

          "#{canon_string(k)}:#{x}"
        end
        "{#{parts.join(',')}}"
      end
    end
  end
end
