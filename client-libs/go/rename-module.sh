#!/usr/bin/env bash
# The module path lives in one place, go.mod's `module` line; this script changes it and
# every import of it inside the module (cmd/, examples/, tests, README):
#   ./rename-module.sh example.com/you/converge
set -euo pipefail
cd "$(dirname "$0")"
new=${1:?usage: rename-module.sh NEW/MODULE/PATH}
old=$(go mod edit -json | sed -n 's/^.*"Path": "\(.*\)".*$/\1/p' | head -n 1)
[ "$old" != "$new" ] || exit 0
go mod edit -module "$new"
grep -rlF "\"$old" --include='*.go' --include='*.md' . | while read -r f; do
  sed -i "s|\"$old\"|\"$new\"|g; s|\"$old/|\"$new/|g" "$f"
done
gofmt -l . | { ! grep .; } || { echo "gofmt: files need formatting" >&2; exit 1; }
go build ./...
echo "module path: $old -> $new"
