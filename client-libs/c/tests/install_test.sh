#!/usr/bin/env bash
# `make install` into a temporary prefix, then an application built the way users build one
# (pkg-config, the installed header and shared library) does a real TLS connection that the
# notaries decide: a real `notary serve` and an `openssl s_server` on loopback.
#   - the installed libconverge.so.0 has its soname and exports the public API only;
#   - the example links against the installed copy (not the build tree) and fetches the page
#     when the notary sees the same certificate; twin: refused when no notary answers.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(cd ../.. && pwd)
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ -n "${KEEP_TMP:-}" ]; then echo "kept $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
prefix=$tmp/prefix
make -s install PREFIX="$prefix" >/dev/null

so=$prefix/lib/libconverge.so.0.1.0
soname=$(readelf -d "$so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = libconverge.so.0 ] || { echo "FAIL soname: $soname"; exit 1; }
exported=$(nm -D --defined-only "$so" | awk '{print $3}' | sort)
declared=$(sed -n 's/^CONVERGE_API [^(]*[ *]\(converge[a-z_]*\)(.*/\1/p' include/converge.h | sort)
if [ "$exported" != "$declared" ]; then
  echo "FAIL exported symbols differ from converge.h:"; diff <(echo "$declared") <(echo "$exported") || true
  exit 1
fi
echo "ok installed: soname $soname, $(echo "$exported" | wc -l) symbols exported = the API"

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# the application uses OpenSSL itself (the hook is an OpenSSL callback)
# shellcheck disable=SC2046
cc -std=c11 -O2 examples/https_get.c -o "$tmp/https_get" $(pkg-config --cflags --libs libconverge openssl) \
  -Wl,-rpath,"$prefix/lib"
linked=$(ldd "$tmp/https_get" | awk '/libconverge/ {print $3}')
[ "$linked" = "$prefix/lib/libconverge.so.0" ] || { echo "FAIL links $linked"; exit 1; }
echo "ok example built with pkg-config links $linked"

if [ ! -x "$root/.venv/bin/notary" ]; then
  echo "no $root/.venv/bin/notary (make setup): the live part of the install test is skipped" >&2
  exit 0
fi
free_port() { "$root/.venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 -keyout "$tmp/t.key" \
  -out "$tmp/t.pem" 2>/dev/null
tport=$(free_port)
# a threaded HTTPS server: the notary probes it while the client's handshake waits
"$root/.venv/bin/python" - "$tport" "$tmp/t.pem" "$tmp/t.key" >/dev/null 2>&1 <<'PY' &
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"installed libconverge: page fetched"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
srv = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(sys.argv[2], sys.argv[3])
srv.socket = ctx.wrap_socket(srv.socket, server_side=True, do_handshake_on_connect=False)
srv.serve_forever()
PY
pids+=($!)
nport=$(free_port)
"$root/.venv/bin/notary" serve --data-dir "$tmp/n" --listen "127.0.0.1:$nport" \
  --allow-target 127.0.0.0/8 >"$tmp/notary.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$nport") 2>/dev/null && (exec 3<>"/dev/tcp/127.0.0.1/$tport") 2>/dev/null && break
  sleep 0.1
done
config() { # config DIR BUNDLE_PORT
  mkdir -p "$1/notaries-available" "$1/notaries-enabled"
  "$root/.venv/bin/notary" bundle --data-dir "$tmp/n" --host 127.0.0.1 --ssl-port "$2" \
    --name "Org T" -o "$1/notaries-available/t.notary" >/dev/null
  ln -sf ../notaries-available/t.notary "$1/notaries-enabled/t.notary"
  echo '{"db": null, "connect-timeout": 2, "notary-timeout": 3, "total-timeout": 5}' > "$1/converge.config"
}
config "$tmp/good" "$nport"
if ! "$tmp/https_get" 127.0.0.1 "$tport" / --config-dir "$tmp/good" > "$tmp/page" 2>"$tmp/err"; then
  echo "FAIL the installed library refused a certificate the notary sees:"; cat "$tmp/err" "$tmp/notary.log"
  exit 1
fi
grep -q "page fetched" "$tmp/page" || { echo "FAIL no page"; exit 1; }
echo "ok installed library: the notary confirms the server, the page is fetched"
config "$tmp/dead" "$(free_port)"
if "$tmp/https_get" 127.0.0.1 "$tport" / --config-dir "$tmp/dead" > "$tmp/page" 2>"$tmp/err"; then
  echo "FAIL twin: fetched although no notary answered"; exit 1
fi
grep -q "TLS failed" "$tmp/err" || { echo "FAIL twin: unexpected error"; cat "$tmp/err"; exit 1; }
echo "ok twin: no notary reachable, the handshake is refused"
