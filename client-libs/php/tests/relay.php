<?php
declare(strict_types=1);

/*
 * A TCP relay on 127.0.0.1 that switches upstream between connections (check-then-use):
 * php relay.php FIRST_PORT THEN_PORT prints its port; its first connection is relayed to
 * 127.0.0.1:FIRST_PORT, every later one to 127.0.0.1:THEN_PORT. It stops at end of stdin, after
 * 100 connections or 60 s without traffic.
 */
[, $first, $then] = $argv;
$srv = stream_socket_server('tcp://127.0.0.1:0', $errno, $error);
if ($srv === false) {
    fwrite(STDERR, "relay: {$error}\n");
    exit(2);
}
echo (int) substr((string) strrchr(stream_socket_get_name($srv, false), ':'), 1), "\n";
$peer = [];   // stream id => the stream it is relayed to
$streams = [];
$accepted = 0;
while (true) {
    $r = array_merge([STDIN, $srv], array_values($streams));
    $w = $e = null;
    if (stream_select($r, $w, $e, 60) < 1) {
        break;
    }
    foreach ($r as $s) {
        if ($s === STDIN) {
            if (fgets(STDIN) === false) {
                exit(0);
            }
        } elseif ($s === $srv) {
            $c = @stream_socket_accept($srv, 5);
            if ($c === false || $accepted >= 100) {
                continue;
            }
            $up = @stream_socket_client('tcp://127.0.0.1:' . ($accepted++ === 0 ? $first : $then), $errno, $error, 5);
            if ($up === false) {
                fclose($c);
                continue;
            }
            $streams[(int) $c] = $c;
            $streams[(int) $up] = $up;
            $peer[(int) $c] = $up;
            $peer[(int) $up] = $c;
        } elseif (isset($streams[(int) $s])) {
            $data = fread($s, 65536);
            $other = $peer[(int) $s];
            if ($data === false || $data === '') {
                foreach ([$s, $other] as $x) {
                    unset($streams[(int) $x], $peer[(int) $x]);
                    fclose($x);
                }
                continue;
            }
            fwrite($other, $data);
        }
    }
}
