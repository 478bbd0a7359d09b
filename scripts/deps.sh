#!/bin/sh
# deps.sh — install the Debian packages MemDecay builds and tests with.
# Skips everything already installed; uses sudo when not root.
set -eu

PKGS="build-essential cmake pkg-config git liburing-dev check libsubunit-dev \
libzmq3-dev clang libclang-rt-14-dev python3 python3-venv python3-pip \
libmicrohttpd-dev prometheus systemd groff man-db strace dpkg-dev libjansson-dev"

missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && { echo "deps: all Debian packages present"; exit 0; }

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing
