<?php
declare(strict_types=1);

require __DIR__ . '/../src/autoload.php';
// PSR-18 and Guzzle from the distribution (Debian: php-psr-http-client, php-guzzlehttp-guzzle)
foreach (['/usr/share/php/Psr/Http/Client/autoload.php', '/usr/share/php/GuzzleHttp/autoload.php'] as $f) {
    if (is_file($f)) {
        require_once $f;
    }
}
require __DIR__ . '/Process.php';
require __DIR__ . '/World.php';
require __DIR__ . '/Responder.php';
require __DIR__ . '/Relay.php';
