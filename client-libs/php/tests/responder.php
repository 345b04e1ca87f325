<?php
declare(strict_types=1);

/*
 * A TLS server on 127.0.0.1 that answers every connection with the raw HTTP response it was
 * last given: php responder.php CERT KEY prints its port, then reads lines on stdin:
 * "answer <base64 of the whole response>" (answers "ok"), "count" (the requests read so far),
 * or end of input (stops). At most 1000 connections; each request read within 5 s.
 */
[, $cert, $key] = $argv;
$ctx = stream_context_create(['ssl' => ['local_cert' => $cert, 'local_pk' => $key]]);
$srv = stream_socket_server('tcp://127.0.0.1:0', $errno, $error, STREAM_SERVER_BIND | STREAM_SERVER_LISTEN, $ctx);
if ($srv === false) {
    fwrite(STDERR, "responder: {$error}\n");
    exit(2);
}
echo (int) substr((string) strrchr(stream_socket_get_name($srv, false), ':'), 1), "\n";
$reply = "HTTP/1.0 503 Nothing yet\r\nContent-Length: 0\r\n\r\n";
$requests = 0;
for ($served = 0; $served < 1000;) {
    $r = [STDIN, $srv];
    $w = $e = null;
    if (stream_select($r, $w, $e, 60) < 1) {
        break;
    }
    if (in_array(STDIN, $r, true)) {
        $line = fgets(STDIN);
        if ($line === false) {
            break;
        }
        [$cmd, $arg] = explode(' ', trim($line), 2) + [1 => ''];
        if ($cmd === 'answer') {
            $reply = (string) base64_decode($arg, true);
        }
        echo $cmd === 'count' ? $requests : 'ok', "\n";
        continue;
    }
    $conn = @stream_socket_accept($srv, 5);
    if ($conn === false) {
        continue;
    }
    $served++;
    stream_set_timeout($conn, 5);
    if (@stream_socket_enable_crypto($conn, true, STREAM_CRYPTO_METHOD_TLS_SERVER) === true) {
        $req = '';
        while (!str_contains($req, "\r\n\r\n") && strlen($req) < 65536 && !feof($conn) && ($chunk = fread($conn, 8192)) !== false && $chunk !== '') {
            $req .= $chunk;
        }
        if (preg_match('/^Content-Length: *([0-9]+)/mi', $req, $m)) {
            $want = strpos($req, "\r\n\r\n") + 4 + (int) $m[1];
            while (strlen($req) < $want && !feof($conn) && ($chunk = fread($conn, 8192)) !== false && $chunk !== '') {
                $req .= $chunk;
            }
        }
        if ($req !== '') {
            $requests++;
            @fwrite($conn, $reply);
        }
    }
    @fclose($conn);
}
