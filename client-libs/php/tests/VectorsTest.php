<?php
declare(strict_types=1);

namespace Converge\Tests;

use Converge\Vectors;
use PHPUnit\Framework\TestCase;

/** Every shared vector file through Vectors::runCase, compared as the conformance runner compares. */
final class VectorsTest extends TestCase
{
    private const DIR = __DIR__ . '/../../vectors';
    /** Canonical JSON is the notary's encoder; clients never re-serialise. */
    private const NOTARY_ONLY = 'canonical-json.json';

    /** @return array<string, array{string}> */
    public static function files(): array
    {
        $out = [];
        foreach (glob(self::DIR . '/*.json') as $f) {
            if (basename($f) !== self::NOTARY_ONLY) {
                $out[basename($f)] = [$f];
            }
        }
        return $out;
    }

    private static function diff(array $c, array $out): array
    {
        return array_values(array_filter(Vectors::compared($c), static fn ($f) => array_key_exists($f, $c) && $c[$f] !== ($out[$f] ?? null)));
    }

    /** @dataProvider files */
    public function testEveryCaseOfTheFilePasses(string $file): void
    {
        $doc = json_decode((string) file_get_contents($file), true, 512, JSON_THROW_ON_ERROR);
        $this->assertContains($doc['schema'], Vectors::SCHEMAS);
        $this->assertNotEmpty($doc['tests']);
        $failures = [];
        foreach ($doc['tests'] as $c) {
            $out = Vectors::runCase($doc, $c);
            $d = self::diff($c, $out);
            if ($d !== []) {
                $failures[] = "case {$c['id']} ({$c['comment']}): " . implode(',', $d) . ': ' . json_encode($out);
            }
        }
        $this->assertSame([], $failures);
    }

    public function testTheComparisonCatchesAWrongOutput(): void
    {
        $doc = json_decode((string) file_get_contents(self::DIR . '/fingerprints.json'), true);
        $c = $doc['tests'][0];
        $out = Vectors::runCase($doc, $c);
        $this->assertSame([], self::diff($c, $out));
        $this->assertSame(['canonical'], self::diff($c, ['canonical' => '00'] + $out));
        $tr = json_decode((string) file_get_contents(self::DIR . '/transparency.json'), true);
        foreach ($tr['tests'] as $c) {
            if (in_array($c['type'], ['tree', 'checkpoint'], true) && isset($c['root'])) {
                $out = Vectors::runCase($tr, $c);
                $this->assertSame(['root'], self::diff($c, ['root' => base64_encode(str_repeat("\0", 32))] + $out), "case {$c['id']}");
            }
        }
        $this->expectException(\InvalidArgumentException::class);
        Vectors::runCase(['schema' => 'converge-vectors/unknown/1'], $c);
    }
}
