<?php
declare(strict_types=1);

namespace Converge;

/**
 * JSON through PHP's stock parser (json_decode, object mode: {} stays apart from [], the last
 * of repeated member names counts; NaN, comments, trailing commas, non-string member names and
 * invalid UTF-8 are refused). What a notary signed is bounds-scanned before it is parsed
 * (docs/wire-format.md, "The bounds scan").
 */
final class Json
{
    /** Levels a notary answer may open at once. */
    public const MAX_DEPTH = 32;
    public const MAX_SAFE_INTEGER = 9007199254740991;
    private const PARSER_DEPTH = 512;

    /** A sentinel for "not JSON" (json_decode's null is also a value). */
    public static function invalid(): \stdClass
    {
        static $x;
        return $x ??= new \stdClass();
    }

    /** The value of strict JSON text (objects as stdClass), or self::invalid(). */
    public static function parse(string $text): mixed
    {
        try {
            return json_decode($text, false, self::PARSER_DEPTH, JSON_THROW_ON_ERROR);
        } catch (\JsonException) {
            return self::invalid();
        }
    }

    /**
     * The bounds scan over verified bytes: outside strings at most MAX_DEPTH levels of [ and {
     * open at once, and every number token an integer of at most 15 digits.
     */
    public static function withinBounds(string $t): bool
    {
        $n = strlen($t);
        $depth = 0;
        for ($i = 0; ($i += strcspn($t, '"[]{}-0123456789', $i)) < $n;) {
            $c = $t[$i];
            if ($c === '"') {
                for ($i++; $i < $n; $i += 2) {
                    $i += strcspn($t, '"\\', $i);
                    if ($i >= $n || $t[$i] === '"') {
                        break;
                    }
                    // a backslash: skip it and the byte after it
                }
                $i = min($i + 1, $n);
            } elseif ($c === '[' || $c === '{') {
                if (++$depth > self::MAX_DEPTH) {
                    return false;
                }
                $i++;
            } elseif ($c === ']' || $c === '}') {
                $depth--;
                $i++;
            } else {
                $len = strspn($t, '-+.0123456789eE', $i);
                if (!preg_match('/\A-?(?:0|[1-9][0-9]{0,14})\z/', substr($t, $i, $len))) {
                    return false;
                }
                $i += $len;
            }
        }
        return true;
    }

    /** Verified bytes as a JSON object: the bounds scan, then the stock parser; null when either refuses. */
    public static function verifiedObject(string $bytes): ?\stdClass
    {
        if (!self::withinBounds($bytes)) {
            return null;
        }
        $v = self::parse($bytes);
        return $v instanceof \stdClass && $v !== self::invalid() ? $v : null;
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
