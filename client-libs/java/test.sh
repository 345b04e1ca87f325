#!/usr/bin/env bash
# Build and test the Java client: mvn test package (JUnit 5: unit tests, every shared vector
# file, loopback TLS tests), the conformance CLI launcher at bin/converge-conformance, then the
# shared conformance runner for the Java CLI only (scripts/test-all runs the whole runner too).
# CONVERGE_JAVA_SKIP_CONFORMANCE=1 (or CONVERGE_SKIP_CONFORMANCE=1, set by scripts/test-all,
# which runs the shared runner once for every language afterwards) skips the runner step.
set -euo pipefail
cd "$(dirname "$0")"
HERE=$(pwd)
ROOT=$(cd ../.. && pwd)
for tool in java mvn; do
  if ! command -v "$tool" >/dev/null; then
    echo "$tool is not installed (scripts/install-system-deps installs a JDK and Maven)" >&2
    exit 1
  fi
done
# no ANSI colour escapes in logs: batch mode, colour off, and any escape Maven still emits removed
nocolour() { sed -u 's/\x1b\[[0-9;]*m//g'; }
echo "== java: $(java -version 2>&1 | head -1); $(mvn -B -v 2>/dev/null | head -1 | nocolour)"
mvn_rc=0
mvn -q -B -Dstyle.color=never test package 2>&1 | nocolour || mvn_rc=${PIPESTATUS[0]}
# JUnit's counts from Surefire's reports (mvn -q prints none)
"$ROOT/.venv/bin/python" - target/surefire-reports <<'PY' || true
import pathlib, sys, xml.etree.ElementTree as ET
tests = failed = skipped = 0
for f in pathlib.Path(sys.argv[1]).glob("TEST-*.xml"):
    root = ET.parse(f).getroot()
    tests += int(root.get("tests", 0))
    failed += int(root.get("failures", 0)) + int(root.get("errors", 0))
    skipped += int(root.get("skipped", 0))
print(f"java: {tests - failed - skipped} passed, {failed} failed, {skipped} skipped")
PY
[ "$mvn_rc" = 0 ] || exit "$mvn_rc"
echo "== mvn install; an application that depends on io.github.converge-notary:converge-client:0.1.0"
mvn -q -B -Dstyle.color=never install -DskipTests 2>&1 | nocolour
(cd it/consumer && mvn -q -B -Dstyle.color=never package dependency:build-classpath \
  -Dmdep.outputFile=target/classpath.txt 2>&1 | nocolour)
consumer_cp=$(cat it/consumer/target/classpath.txt)
case "$consumer_cp" in
  *"/io/github/converge-notary/converge-client/0.1.0/converge-client-0.1.0.jar"*) ;;
  *) echo "FAIL the consumer did not resolve the library from the local repository: $consumer_cp"; exit 1 ;;
esac
"$ROOT/.venv/bin/python" "$ROOT/client-libs/conformance/live_site.py" \
  --trusted "java -cp $HERE/it/consumer/target/converge-consumer-1.0.jar:$consumer_cp example.Fetch {config} {host} {port}" \
  --refused "java -cp $HERE/it/consumer/target/converge-consumer-1.0.jar:$consumer_cp example.Fetch {config} {host} {port}"
mkdir -p bin
cat > bin/converge-conformance <<LAUNCHER
#!/bin/sh
exec java -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto \\
  -cp "$HERE/target/converge-client-0.1.0.jar:$HERE/target/lib/*" org.converge.ConformanceCli "\$@"
LAUNCHER
chmod +x bin/converge-conformance
bin/converge-conformance info
if [ "${CONVERGE_JAVA_SKIP_CONFORMANCE:-}" = 1 ] || [ "${CONVERGE_SKIP_CONFORMANCE:-}" = 1 ]; then
  echo "== conformance runner skipped here (CONVERGE_SKIP_CONFORMANCE or CONVERGE_JAVA_SKIP_CONFORMANCE is 1)"
elif [ -x "$ROOT/.venv/bin/python" ]; then
  echo "== conformance runner, Java CLI"
  (cd "$ROOT" && .venv/bin/python -m pytest -q -p no:cacheprovider client-libs/conformance \
    -k "java and not python")
else
  echo "== conformance runner skipped: $ROOT/.venv is not set up (make setup)" >&2
  exit 1
fi
