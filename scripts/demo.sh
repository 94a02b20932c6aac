#!/usr/bin/env bash
# Builds toh-exec and runs it on the embedded default policy (no policy file:
# read-only, workspace = the working directory) in a scratch workspace: an allowed
# read, then a denied write with its marker.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
if [ "$(id -u)" = 0 ] && ! command -v bwrap >/dev/null; then
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
fi
go build -o bin/toh-exec ./cmd/toh-exec
bin=$PWD/bin/toh-exec
ws=$(mktemp -d)
trap 'rm -rf "$ws"' EXIT
cd "$ws"
echo "hello from the workspace" > notes.txt
nopolicy="$ws/.no-policy-file.json" # absent: the embedded default applies

echo "\$ toh-exec -- cat notes.txt"
"$bin" --policy "$nopolicy" -- cat notes.txt
echo "\$ toh-exec -c 'echo hi > new.txt'"
status=0
"$bin" --policy "$nopolicy" -c 'echo hi > new.txt' || status=$?
echo "(exit status $status)"
if [ -e new.txt ]; then echo "BUG: new.txt was written"; exit 1; fi
echo "new.txt does not exist: the write was denied"
