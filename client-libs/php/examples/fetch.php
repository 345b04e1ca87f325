<?php
// Fetch a page only if the notaries see the certificate this machine sees.
//   php examples/fetch.php https://www.example.org/ [CONFIG_DIR]
require __DIR__ . '/../src/autoload.php';

[, $url, $dir] = $argv + [2 => null];
$client = Converge\Client::load($dir);                    // discovered when CONFIG_DIR is absent
try {
    echo file_get_contents($url, false, Converge\Tls::context($url, $client));  // pinned to what the notaries vouch for
} catch (Converge\NotTrusted $e) {
    fwrite(STDERR, $e->getMessage() . "\n");
    exit(1);
}
