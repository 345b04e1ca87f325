<?php
declare(strict_types=1);

namespace Converge;

/**
 * cURL, decided by the notaries: options() asks them about the certificate the server presents
 * for the URL's origin (a handshake of its own, nothing sent) and returns cURL options that
 * turn CA validation off in favour of that decision and pin the vouched certificate's public
 * key (CURLOPT_PINNEDPUBLICKEY), so the request's own handshake fails unless the server
 * presents that key.
 *
 *     $ch = curl_init($url);
 *     curl_setopt_array($ch, \Converge\Curl::options($url));
 *     $body = curl_exec($ch);
 */
final class Curl
{
    /** @return array<int,mixed> */
    public static function options(string $url, ?Client $client = null, ?string $proxy = null): array
    {
        $client ??= Client::shared();
        [$host, $port] = Tls::origin($url);
        [$s, $der] = Tls::handshake($host, $port, $proxy, $client->config->totalTimeout);
        fclose($s);
        Tls::requireTrusted($client, $host, $port, $der);
        $key = openssl_pkey_get_public(Bundle::pem($der));
        $spki = Bundle::pemToDerKey(openssl_pkey_get_details($key)['key']);
        $opts = [
            CURLOPT_SSL_VERIFYPEER => false, // the notaries decided; the pin below binds the request to it
            CURLOPT_SSL_VERIFYHOST => 0,
            CURLOPT_PINNEDPUBLICKEY => 'sha256//' . base64_encode(hash('sha256', $spki, true)),
            CURLOPT_FOLLOWLOCATION => false, // the pin is for this origin: check the next URL with options of its own
        ];
        if ($proxy !== null && $proxy !== '') {
            $opts[CURLOPT_PROXY] = $proxy;
            $opts[CURLOPT_HTTPPROXYTUNNEL] = true;
        }
        return $opts;
    }
}
