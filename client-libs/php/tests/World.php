<?php
declare(strict_types=1);

namespace Converge\Tests;

/**
 * Fake notaries, HTTPS sites and CONNECT proxies in a process of their own
 * (client-libs/conformance/fake_world.py): PHP has no threads to serve them in-process.
 */
final class World
{
    private Process $p;
    /** @var array<string,mixed> */
    public array $info;

    /** @param list<string> $args e.g. ["Org A:listed", "--site", "genuine=genuine"] */
    public function __construct(array $args)
    {
        $root = dirname(__DIR__, 3);
        $cmd = array_merge([$root . '/.venv/bin/python', $root . '/client-libs/conformance/fake_world.py'], $args);
        $this->p = new Process($cmd);
        $this->info = json_decode($this->p->line(), true, 512, JSON_THROW_ON_ERROR);
    }

    /** @return mixed */
    public function ask(string $command)
    {
        return json_decode($this->p->send($command), true, 512, JSON_THROW_ON_ERROR);
    }

    public function stop(): void
    {
        $this->p->stop('quit');
    }

    /** A configuration directory enabling notaries $indices (all by default). @param array<string,mixed> $settings */
    public function configDir(array $settings = [], bool $extended = false, ?array $indices = null): string
    {
        $dir = sys_get_temp_dir() . '/converge-php-' . bin2hex(random_bytes(6));
        mkdir("{$dir}/notaries-available", 0o755, true);
        mkdir("{$dir}/notaries-enabled");
        foreach ($this->info['notaries'] as $i => $n) {
            if ($indices !== null && !in_array($i, $indices, true)) {
                continue;
            }
            $file = sprintf('%02d-%s.notary', $i, str_replace(' ', '-', $n['name']));
            file_put_contents("{$dir}/notaries-available/{$file}", $extended ? $n['bundle_extended'] : $n['bundle']);
            symlink("../notaries-available/{$file}", "{$dir}/notaries-enabled/{$file}");
        }
        file_put_contents("{$dir}/converge.config", json_encode($settings + ['connect-timeout' => 2, 'notary-timeout' => 2, 'total-timeout' => 4]));
        return $dir;
    }
}
