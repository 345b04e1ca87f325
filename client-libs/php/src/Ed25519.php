<?php
declare(strict_types=1);

namespace Converge;

/**
 * The weak-key rule for a bundle's Ed25519 public keys (signing keys, the transparency log's
 * and witnesses' keys): a key of small order or with y encoded at or above the field prime is
 * refused when the bundle is read, by plain byte comparison, the same rule in every client.
 * Under a key of small order some Ed25519 libraries accept `R = identity, S = 0` as a signature
 * of any message; sodium refuses it, but no client relies on its library to.
 */
final class Ed25519
{
    public const KEY_BYTES = 32;

    /**
     * The y coordinates of the eight points of small order (orders 1, 2, 4 and 8), 32 bytes
     * little-endian with bit 255 (the sign of x) clear: 0, 1, p - 1, y8 and p - y8.
     */
    private const SMALL_ORDER_Y = [
        '0000000000000000000000000000000000000000000000000000000000000000',
        '0100000000000000000000000000000000000000000000000000000000000000',
        'ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
        '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05',
        'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a',
    ];

    /** Why the raw Ed25519 public key must not be trusted, or null when it is sound. */
    public static function weakKey(string $raw): ?string
    {
        if (strlen($raw) !== self::KEY_BYTES) {
            return 'an Ed25519 public key has 32 bytes';
        }
        $y = substr($raw, 0, 31) . chr(ord($raw[31]) & 0x7f);
        // y >= p = 2^255 - 19: top byte 0x7f, bytes 1..30 all 0xff, the lowest at least 0xed
        if ($y[31] === "\x7f" && substr($y, 1, 30) === str_repeat("\xff", 30) && ord($y[0]) >= 0xed) {
            return 'an Ed25519 public key not in canonical form';
        }
        if (in_array(bin2hex($y), self::SMALL_ORDER_Y, true)) {
            return 'an Ed25519 public key of small order';
        }
        return null;
    }
}
