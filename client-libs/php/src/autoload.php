<?php
// PSR-4 autoloading of Converge\ from this directory, for installs without Composer
// (Composer users get the same from composer.json).
declare(strict_types=1);

spl_autoload_register(static function (string $class): void {
    if (str_starts_with($class, 'Converge\\')) {
        $file = __DIR__ . '/' . str_replace('\\', '/', substr($class, 9)) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});
require_once __DIR__ . '/functions.php';
