#!/bin/sh
# Install the kernel header trees that `make -C kmod build-all` compiles
# against: the newest Debian 12 6.1 header package and the newest 6.12
# (bookworm backports-style "+deb12") header package.  Idempotent: a package
# that is already installed is left alone and nothing is downloaded again.
#
# Usage (as root): kmod/install-build-deps.sh
set -eu

if [ "$(id -u)" -ne 0 ]; then
	echo "install-build-deps: must run as root" >&2
	exit 1
fi

export DEBIAN_FRONTEND=noninteractive

pick() {
	# $1: extended regex matching the package names of one series
	apt-cache search --names-only '^linux-headers-6\.' 2>/dev/null |
		awk '{print $1}' | grep -E "$1" | sort -V | tail -n 1
}

want=""
for series in '^linux-headers-6\.1\.0-[0-9]+-amd64$' \
	      '^linux-headers-6\.12\.[0-9]+\+deb12-amd64$'; do
	pkg=$(pick "$series")
	if [ -z "$pkg" ]; then
		apt-get update -qq
		pkg=$(pick "$series")
	fi
	if [ -z "$pkg" ]; then
		echo "install-build-deps: no package matches $series" >&2
		exit 1
	fi
	if dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null |
	   grep -q 'install ok installed'; then
		echo "install-build-deps: $pkg already installed"
	else
		want="$want $pkg"
	fi
done

# Tools the build and the host harness need.
for tool in make gcc; do
	command -v "$tool" >/dev/null 2>&1 || want="$want $tool"
done

if [ -n "$want" ]; then
	apt-get install -y --no-install-recommends $want
fi
ls -d /usr/src/linux-headers-6.1.*-amd64 /usr/src/linux-headers-6.12.*-amd64
