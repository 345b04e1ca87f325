<?php
declare(strict_types=1);

/*
 * A stand-in relay in front of a real notary, for the transparency tests: php log_relay.php
 * DATA_DIR NOTARY_PORT MODE serves TLS on 127.0.0.1 with the notary's own certificate and key
 * (DATA_DIR/notary.pem, notary.key), prints its port, relays each request to
 * 127.0.0.1:NOTARY_PORT and answers with the notary's response rewritten by MODE: pass (as it
 * is), strip (the transparency member removed), index (the index moved by one), root (the
 * checkpoint's root changed), entry (the logged entry changed). It stops at end of stdin, after
 * 50 connections or 60 s without one.
 */
[, $data, $upstream, $mode] = $argv;
$ctx = stream_context_create(['ssl' => ['local_cert' => "{$data}/notary.pem", 'local_pk' => "{$data}/notary.key"]]);
$srv = stream_socket_server('tls://127.0.0.1:0', $errno, $error, STREAM_SERVER_BIND | STREAM_SERVER_LISTEN, $ctx);
if ($srv === false) {
    fwrite(STDERR, "log_relay: {$error}\n");
    exit(2);
}
echo (int) substr((string) strrchr(stream_socket_get_name($srv, false), ':'), 1), "\n";

function rewrite(string $resp, string $mode): string
{
    $cut = strpos($resp, "\r\n\r\n");
    if ($cut === false) {
        return $resp;
    }
    $head = substr($resp, 0, $cut);
    $body = substr($resp, $cut + 4);
    $body = match ($mode) {
        'strip' => ($m = strpos($body, ',"transparency":')) === false ? $body : substr($body, 0, $m) . '}',
        'index' => preg_replace_callback('/"index":(\d+)/', static fn ($x) => '"index":' . ((int) $x[1] + 1), $body, 1),
        'root' => preg_replace_callback('/("checkpoint":"[^"\\\\]*\\\\n[0-9]+\\\\n)(.)/', static fn ($x) => $x[1] . ($x[2] === 'A' ? 'B' : 'A'), $body, 1),
        'entry' => preg_replace_callback('/("entry":")(.)/', static fn ($x) => $x[1] . ($x[2] === 'e' ? 'f' : 'e'), $body, 1),
        default => $body,
    };
    $head = preg_replace('/\r\nContent-Length: *\d+/i', "\r\nContent-Length: " . strlen($body), $head);
    return $head . "\r\n\r\n" . $body;
}

for ($served = 0; $served < 50;) {
    $r = [STDIN, $srv];
    $w = $e = null;
    if (stream_select($r, $w, $e, 60) < 1) {
        break;
    }
    if (in_array(STDIN, $r, true) && fgets(STDIN) === false) {
        break;
    }
    if (!in_array($srv, $r, true)) {
        continue;
    }
    $c = @stream_socket_accept($srv, 5);
    if ($c === false) {
        continue;
    }
    $served++;
    stream_set_timeout($c, 5);
    $req = '';
    while (!feof($c) && strlen($req) < 65536) {
        $req .= (string) fread($c, 8192);
        $h = strpos($req, "\r\n\r\n");
        if ($h !== false && preg_match('/\r\nContent-Length: *(\d+)/i', $req, $m) && strlen($req) >= $h + 4 + (int) $m[1]) {
            break;
        }
    }
    $up = @stream_socket_client("tls://127.0.0.1:{$upstream}", $errno, $error, 5, STREAM_CLIENT_CONNECT,
        stream_context_create(['ssl' => ['verify_peer' => false, 'verify_peer_name' => false]]));
    $resp = '';
    if ($up !== false) {
        stream_set_timeout($up, 15);
        fwrite($up, $req);
        while (!feof($up) && strlen($resp) < 262144) {
            $chunk = fread($up, 65536);
            if ($chunk === false || ($chunk === '' && stream_get_meta_data($up)['timed_out'])) {
                break;
            }
            $resp .= $chunk;
        }
        fclose($up);
    }
    fwrite($c, rewrite($resp, $mode));
    fclose($c);
}
