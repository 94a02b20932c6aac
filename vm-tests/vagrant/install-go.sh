#!/usr/bin/env bash
# Installs the Go toolchain that go.mod names into /usr/local/go, from the
# distribution archives on go.dev, checked against the SHA-256 published beside them.
# Linux and macOS guests; bash 3.2 compatible (macOS's /bin/bash).
#
#   install-go.sh GO_MOD
#
# GO_MOD is the path of the synced checkout's go.mod: its "go 1.X.Y" line is the
# version (distribution golang packages are too old: bookworm has 1.19, noble 1.22).
# An installed /usr/local/go of that exact version is kept.
set -euo pipefail

die() { printf 'install-go: %s\n' "$*" >&2; exit 1; }

gomod=${1:?usage: install-go.sh GO_MOD}
[ -r "$gomod" ] || die "cannot read $gomod (is the checkout synced? vagrant rsync NAME)"
version=$(awk '$1 == "go" { print $2; exit }' "$gomod")
case "$version" in
	1.*.*) ;;
	1.*) version="$version.0" ;; # "go 1.26" means the first release, go1.26.0
	*) die "no 'go 1.X.Y' line in $gomod" ;;
esac

if [ -x /usr/local/go/bin/go ] && [ "$(/usr/local/go/bin/go env GOVERSION 2>/dev/null)" = "go$version" ]; then
	echo "install-go: go$version already in /usr/local/go"
	exit 0
fi

case "$(uname -s)" in
	Linux) os=linux ;;
	Darwin) os=darwin ;;
	*) die "unsupported OS $(uname -s)" ;;
esac
case "$(uname -m)" in
	x86_64 | amd64) arch=amd64 ;;
	aarch64 | arm64) arch=arm64 ;;
	*) die "unsupported architecture $(uname -m)" ;;
esac

archive="go$version.$os-$arch.tar.gz"
url="https://dl.google.com/go/$archive"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "install-go: downloading $url"
curl -fsSL --retry 3 -o "$work/$archive" "$url" || die "downloading $url failed"
curl -fsSL --retry 3 -o "$work/$archive.sha256" "$url.sha256" || die "downloading $url.sha256 failed"
want=$(awk '{ print $1; exit }' "$work/$archive.sha256")
if command -v sha256sum >/dev/null; then
	got=$(sha256sum "$work/$archive" | awk '{ print $1 }')
else
	got=$(shasum -a 256 "$work/$archive" | awk '{ print $1 }')
fi
if [ -z "$want" ] || [ "$got" != "$want" ]; then
	die "$archive: sha256 $got, published ${want:-nothing}"
fi

rm -rf /usr/local/go
mkdir -p /usr/local
tar -C /usr/local -xzf "$work/$archive"
echo "install-go: $(/usr/local/go/bin/go version)"
