#!/usr/bin/env bash
# `make install` into a temporary prefix, then an application built the way users build one
# (pkg-config, the installed header and shared library) does a real TLS connection that the
# notaries decide: a real `notary serve` and an HTTPS site on loopback (live_site.py).
#   - the installed libconverge.so.0 has its soname and exports the public API only;
#   - the example links against the installed copy (not the build tree) and fetches the page
#     when the notary sees the same certificate; twin: refused when no notary answers.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(cd ../.. && pwd)
tmp=$(mktemp -d)
cleanup() { rm -rf "$tmp"; }
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
# a real notary and HTTPS site; the example is built against the installed copy
"$root/.venv/bin/python" "$root/client-libs/conformance/live_site.py" \
  --trusted "$tmp/https_get {host} {port} / --config-dir {config}" \
  --refused "$tmp/https_get {host} {port} / --config-dir {config}"
