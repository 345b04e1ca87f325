<?php
declare(strict_types=1);

namespace Converge;

/**
 * JSON at the protocol's edges. json_decode in object mode keeps what the rules need: key
 * order (first position, last value), {} apart from [], integers apart from floats. Two rules
 * depend on that: legacy recipe (a) re-serialises a parsed body the way Python's json.dumps
 * does (", " and ": ", ASCII-only \uXXXX escapes, integers as written, floats as Python's
 * repr), and the extended format is canonical JSON (RFC 8785) over a subset without floats.
 */
final class PyJson
{
    public const MAX_DEPTH = 512;
    public const MAX_SAFE_INTEGER = 9007199254740991;
    public const MAX_CANONICAL_DEPTH = 16;

    /** A sentinel for "not JSON" (json_decode's null is also a value). */
    public static function invalid(): \stdClass
    {
        static $x;
        return $x ??= new \stdClass();
    }

    /** The value of JSON text (objects as stdClass), or self::invalid(). */
    public static function parse(string $text): mixed
    {
        if (!mb_check_encoding($text, 'UTF-8')) {
            return self::invalid();
        }
        try {
            return json_decode($text, false, self::MAX_DEPTH, JSON_THROW_ON_ERROR);
        } catch (\JsonException) {
            return self::invalid();
        }
    }

    /** A float as Python's repr writes it. */
    public static function floatRepr(float $f): string
    {
        if (is_nan($f)) {
            return 'NaN';
        }
        if (is_infinite($f)) {
            return $f > 0 ? 'Infinity' : '-Infinity';
        }
        if ($f == 0.0) {
            return (fdiv(1.0, $f) < 0) ? '-0.0' : '0.0';
        }
        $neg = $f < 0;
        $s = strtolower(var_export(abs($f), true)); // the shortest digits: "123.456" or "1.5e-5" or "1.0e+16"
        [$mant, $exp] = str_contains($s, 'e') ? explode('e', $s) : [$s, '0'];
        [$int, $frac] = array_pad(explode('.', $mant), 2, '');
        if ($int === '0') {
            $lead = strlen($frac) - strlen(ltrim($frac, '0'));
            $point = -$lead;
            $digits = ltrim($frac, '0');
        } else {
            $point = strlen($int);
            $digits = $int . $frac;
        }
        $digits = rtrim($digits, '0');
        if ($digits === '') {
            $digits = '0';
        }
        $e10 = $point + (int) $exp - 1;
        if ($e10 >= -4 && $e10 < 16) {
            if ($e10 >= 0) {
                $k = $e10 + 1;
                $out = strlen($digits) <= $k ? $digits . str_repeat('0', $k - strlen($digits)) . '.0'
                    : substr($digits, 0, $k) . '.' . substr($digits, $k);
            } else {
                $out = '0.' . str_repeat('0', -$e10 - 1) . $digits;
            }
        } else {
            $m = strlen($digits) > 1 ? $digits[0] . '.' . substr($digits, 1) : $digits;
            $out = sprintf('%se%s%02d', $m, $e10 < 0 ? '-' : '+', abs($e10));
        }
        return $neg ? '-' . $out : $out;
    }

    private static function pyString(string $s): string
    {
        $out = '"';
        foreach (unpack('n*', mb_convert_encoding($s, 'UTF-16BE', 'UTF-8')) ?: [] as $u) {
            $out .= match (true) {
                $u === 0x22 => '\\"',
                $u === 0x5c => '\\\\',
                $u === 0x0a => '\\n',
                $u === 0x0d => '\\r',
                $u === 0x09 => '\\t',
                $u === 0x08 => '\\b',
                $u === 0x0c => '\\f',
                $u >= 0x20 && $u <= 0x7e => chr($u),
                default => sprintf('\\u%04x', $u),
            };
        }
        return $out . '"';
    }

    /** $v serialised as Python's json.dumps($v) with default arguments. */
    public static function dumps(mixed $v): string
    {
        return match (true) {
            $v === null => 'null',
            $v === true => 'true',
            $v === false => 'false',
            is_int($v) => (string) $v,
            is_float($v) => self::floatRepr($v),
            is_string($v) => self::pyString($v),
            is_array($v) => '[' . implode(', ', array_map([self::class, 'dumps'], $v)) . ']',
            $v instanceof \stdClass => '{' . implode(', ', array_map(
                static fn ($k) => self::pyString((string) $k) . ': ' . self::dumps($v->{$k}),
                array_keys(get_object_vars($v)),
            )) . '}',
            default => throw new \InvalidArgumentException('not a JSON value'),
        };
    }

    private static function canonString(string $s): string
    {
        $out = '"';
        foreach (mb_str_split($s, 1, 'UTF-8') as $c) {
            $o = mb_ord($c, 'UTF-8');
            $out .= match (true) {
                $c === '"' => '\\"',
                $c === '\\' => '\\\\',
                $c === "\n" => '\\n',
                $c === "\r" => '\\r',
                $c === "\t" => '\\t',
                $c === "\x08" => '\\b',
                $c === "\x0c" => '\\f',
                $o < 0x20 => sprintf('\\u%04x', $o),
                default => $c,
            };
        }
        return $out . '"';
    }

    /**
     * $v as RFC 8785 canonical JSON, for the subset the extended format uses: objects with ASCII
     * keys, arrays, strings, booleans, null and integers of magnitude at most 2^53 - 1, nested at
     * most 16 deep. null when the value is outside the subset.
     */
    public static function canonical(mixed $v, int $depth = 0): ?string
    {
        if ($depth > self::MAX_CANONICAL_DEPTH) {
            return null;
        }
        if ($v === null) {
            return 'null';
        }
        if (is_bool($v)) {
            return $v ? 'true' : 'false';
        }
        if (is_int($v)) {
            return abs($v) <= self::MAX_SAFE_INTEGER ? (string) $v : null;
        }
        if (is_string($v)) {
            return self::canonString($v);
        }
        if (is_array($v)) {
            $parts = [];
            foreach ($v as $x) {
                $c = self::canonical($x, $depth + 1);
                if ($c === null) {
                    return null;
                }
                $parts[] = $c;
            }
            return '[' . implode(',', $parts) . ']';
        }
        if ($v instanceof \stdClass) {
            $keys = array_map('strval', array_keys(get_object_vars($v)));
            foreach ($keys as $k) {
                if (preg_match('/[^\x00-\x7f]/', $k)) {
                    return null;
                }
            }
            sort($keys, SORT_STRING);
            $parts = [];
            foreach ($keys as $k) {
                $c = self::canonical($v->{$k}, $depth + 1);
                if ($c === null) {
                    return null;
                }
                $parts[] = self::canonString($k) . ':' . $c;
            }
            return '{' . implode(',', $parts) . '}';
        }
        return null; // floats
    }

    /** Whether $o (a decoded object) has the property $k. */
    public static function has(mixed $o, string $k): bool
    {
        return $o instanceof \stdClass && property_exists($o, $k);
    }

    /** The property $k of a decoded object, or null. */
    public static function get(mixed $o, string $k): mixed
    {
        return $o instanceof \stdClass && property_exists($o, $k) ? $o->{$k} : null;
    }
}
