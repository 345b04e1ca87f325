#!/usr/bin/env bash
# Test the Perl client: perl -c and podchecker on every module, prove (every shared vector,
# real TLS notaries and HTTPS sites on loopback from client-libs/conformance/fake_world.py, every
# hook: LWP, HTTP::Tiny, IO::Socket::SSL, through a CONNECT proxy; a fixed-seed fuzz), the
# distribution builds and installs the CPAN way (Makefile.PL), the example against a real notary
# (live_site.py), then the shared conformance runner for this CLI (skipped when scripts/test-all
# runs it for every language).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
command -v perl >/dev/null || { echo "perl is not installed (scripts/install-system-deps)" >&2; exit 1; }
echo "== perl: $(perl -e 'printf "%vd", $^V'), IO::Socket::SSL $(perl -MIO::Socket::SSL -e 'print $IO::Socket::SSL::VERSION'), CryptX $(perl -MCryptX -e 'print $CryptX::VERSION')"
for f in lib/Converge.pm lib/Converge/*.pm lib/Converge/HTTP/*.pm bin/converge-conformance bin/converge-bench examples/fetch.pl; do
  perl -Ilib -c "$f" 2>&1 | grep -v ' syntax OK$' || true
done
podchecker lib/Converge.pm lib/Converge/*.pm lib/Converge/HTTP/*.pm 2>&1 | grep -v 'pod syntax OK' && { echo "podchecker found problems" >&2; exit 1; }
log=$(mktemp)
rc=0
prove -l -v t/ > "$log" 2>&1 || rc=$?
grep -E '^(not ok|ok|#   Failed)' "$log" | grep -v '^ok' || true
tail -n 3 "$log"
# one count line for the make test summary: the top-level test points of every file
passed=$(grep -cE '^ok ' "$log" || true)
failed=$(grep -cE '^not ok ' "$log" || true)
skipped=$(grep -cE '^ok .* # skip' "$log" || true)
rm -f "$log"
[ "$rc" = 0 ] || { echo "perl: $((passed - skipped)) passed, $failed failed, $skipped skipped"; exit "$rc"; }
echo "== the distribution builds and installs (perl Makefile.PL && make && make install)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r lib t Makefile.PL cpanfile README.md "$tmp/"
(cd "$tmp" && perl Makefile.PL >/dev/null && make >/dev/null && make install DESTDIR="$tmp/root" >/dev/null)
inc=$(dirname "$(find "$tmp/root" -name Converge.pm | head -n 1)")
(cd / && perl -I"$inc" -MConverge -MConverge::UserAgent -e 'exit($Converge::VERSION ? 0 : 1)')
echo "== the README example against a real notary"
"$ROOT/.venv/bin/python" "$ROOT/client-libs/conformance/live_site.py" \
  --trusted "perl -I$PWD/lib $PWD/examples/fetch.pl https://{host}:{port}/ {config}" \
  --refused "perl -I$PWD/lib $PWD/examples/fetch.pl https://{host}:{port}/ {config}"
if [ "${CONVERGE_SKIP_CONFORMANCE:-}" = 1 ]; then
  echo "== conformance runner skipped here (CONVERGE_SKIP_CONFORMANCE is 1)"
else
  echo "== conformance runner, Perl CLI"
  (cd "$ROOT" && .venv/bin/python -m pytest -q -p no:cacheprovider client-libs/conformance -k "perl]")
fi
echo "perl: $((passed - skipped)) passed, $failed failed, $skipped skipped"
