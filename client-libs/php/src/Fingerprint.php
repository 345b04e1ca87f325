<?php
declare(strict_types=1);

namespace Converge;

/** A certificate digest with its algorithm ("sha1" or "sha256"). */
final class Fingerprint
{
    public const MAX_TEXT = 200;

    public function __construct(public readonly string $algorithm, public readonly string $digest)
    {
    }

    /** The canonical form: upper-case hex, a colon between bytes. */
    public function colonHex(): string
    {
        return implode(':', str_split(strtoupper(bin2hex($this->digest)), 2));
    }

    public function __toString(): string
    {
        return $this->colonHex();
    }

    public function equals(Fingerprint $o): bool
    {
        return $this->algorithm === $o->algorithm && hash_equals($this->digest, $o->digest);
    }

    /** The fingerprint of a DER certificate. */
    public static function of(string $der, string $algorithm = 'sha1'): self
    {
        return new self($algorithm, hash($algorithm === 'sha256' ? 'sha256' : 'sha1', $der, true));
    }

    /**
     * Parses 40 (SHA-1) or 64 (SHA-256) hex digits in any case, either with no separators or
     * with a colon between every pair; surrounding spaces, tabs, CR and LF are ignored.
     *
     * @throws FingerprintException
     */
    public static function parse(mixed $text): self
    {
        if (!is_string($text)) {
            throw new FingerprintException('a fingerprint is a string');
        }
        if (mb_strlen($text, 'UTF-8') > self::MAX_TEXT) {
            throw new FingerprintException('fingerprint longer than ' . self::MAX_TEXT . ' characters');
        }
        $s = trim($text, " \t\r\n");
        if ($s === '') {
            throw new FingerprintException('empty fingerprint');
        }
        if (str_contains($s, ':')) {
            foreach (explode(':', $s) as $g) {
                if (!preg_match('/\A[0-9A-Fa-f]{2}\z/', $g)) {
                    throw new FingerprintException('colon-separated fingerprints need two hex digits per byte');
                }
            }
            $digits = str_replace(':', '', $s);
        } else {
            if (!preg_match('/\A[0-9A-Fa-f]*\z/', $s)) {
                throw new FingerprintException('fingerprint contains a non-hex character');
            }
            if (strlen($s) % 2 !== 0) {
                throw new FingerprintException('odd number of hex digits');
            }
            $digits = $s;
        }
        $digest = hex2bin($digits);
        return match (strlen($digest)) {
            20 => new self('sha1', $digest),
            32 => new self('sha256', $digest),
            default => throw new FingerprintException('a fingerprint has 20 (SHA-1) or 32 (SHA-256) bytes, not ' . strlen($digest)),
        };
    }
}
