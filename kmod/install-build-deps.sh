#!/bin/sh
# Install what `make -C kmod build-all` compiles with, from Debian 12's own
# archive only:
#
#  - amd64: the newest Debian 12 6.1 header package and the newest 6.12
#    ("+deb12") header package, installed as usual;
#  - arm64 (cross build): the cross compiler gcc-12-aarch64-linux-gnu and the
#    same two series' arm64 header trees.
#
# The arm64 header packages cannot be installed with dpkg on an amd64 host:
# they depend on gcc-12:arm64, which would replace the host's gcc-12, and the
# 6.12 one also on the arm64 kernel image package.  Their files are plain data, though:
# the arch-specific tree (.config, generated headers, Module.symvers) plus
# symbolic links to the architecture-independent "-common" tree and to the
# kbuild tools (scripts/, tools/), which are host programs.  So the script
# enables the arm64 architecture in dpkg (for the package lists only),
# downloads each arm64 header package with apt-get (signature and hash
# checked as for any install), unpacks it under $ARM64_ROOT (default
# /usr/local/lib/cclab-arm64), and installs the "-common" package and the
# host's linux-kbuild package that it depends on.  Debian's header Makefile
# cross-compiles with $(CROSS_COMPILE)gcc-12.
#
# Idempotent: installed packages are left alone, a tree already unpacked from
# the same package version is kept, and nothing is downloaded again.  Trees of
# other versions under $ARM64_ROOT are removed.
#
# Usage (as root, on an amd64 Debian 12 host): kmod/install-build-deps.sh
set -eu

ARM64_ROOT=${ARM64_ROOT:-/usr/local/lib/cclab-arm64}

die() {
	echo "install-build-deps: $*" >&2
	exit 1
}

[ "$(id -u)" -eq 0 ] || die "must run as root"
command -v dpkg >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 ||
	die "needs dpkg and apt-get (a Debian 12 host)"
host_arch=$(dpkg --print-architecture)
[ "$host_arch" = amd64 ] ||
	die "host architecture is $host_arch; the kit's module builds run on amd64"
case "$ARM64_ROOT" in
/?*) ;;
*) die "ARM64_ROOT must be an absolute path, not '$ARM64_ROOT'" ;;
esac

export DEBIAN_FRONTEND=noninteractive

updated=""
update_lists() {
	if [ -z "$updated" ]; then
		apt-get update -qq || die "apt-get update failed"
		updated=1
	fi
}

if ! dpkg --print-foreign-architectures | grep -qx arm64; then
	echo "install-build-deps: enabling the arm64 architecture in dpkg (package lists for the cross build's headers)"
	dpkg --add-architecture arm64
	update_lists
fi

names=""
list_names() {
	names=$(apt-cache search --names-only '^linux-headers-6\.' 2>/dev/null | awk '{print $1}')
}
list_names

# pick_series REGEX: set $picked to the newest package of the series, updating
# the lists once if none is known yet.
picked=""
pick_series() {
	picked=$(echo "$names" | grep -E "$1" | sort -V | tail -n 1)
	if [ -z "$picked" ] && [ -z "$updated" ]; then
		update_lists
		list_names
		picked=$(echo "$names" | grep -E "$1" | sort -V | tail -n 1)
	fi
	[ -n "$picked" ] || die "no package matches $1"
}

installed() {
	dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

want=""
add_want() {
	if installed "$1"; then
		echo "install-build-deps: $1 already installed"
	else
		want="$want $1"
	fi
}

# amd64 header packages, installed normally.
for series in '^linux-headers-6\.1\.0-[0-9]+-amd64$' \
	      '^linux-headers-6\.12\.[0-9]+\+deb12-amd64$'; do
	pick_series "$series"
	add_want "$picked"
done

# arm64 header packages: only downloaded and unpacked (below); what they depend
# on that an amd64 host can install is installed here.
arm64_pkgs=""
for series in '^linux-headers-6\.1\.0-[0-9]+-arm64$' \
	      '^linux-headers-6\.12\.[0-9]+\+deb12-arm64$'; do
	pick_series "$series"
	pkg=$picked
	info=$(apt-cache show --no-all-versions "$pkg:arm64" 2>/dev/null) ||
		die "apt-cache show $pkg:arm64 failed"
	ver=$(echo "$info" | sed -n 's/^Version: //p')
	deps=$(echo "$info" | sed -n 's/^Depends: //p' | tr ',|' '\n\n' | sed 's/^ *//')
	common=$(echo "$deps" | sed -n 's/^\(linux-headers-[^ ]*-common\)\( .*\)*$/\1/p')
	kbuild=$(echo "$deps" | sed -n 's/^\(linux-kbuild-[^ ]*\)\( .*\)*$/\1/p')
	kbuild_min=$(echo "$deps" | sed -n 's/^linux-kbuild-[^ ]* (>= \(.*\))$/\1/p')
	[ -n "$common" ] && [ -n "$kbuild" ] ||
		die "cannot read the -common and linux-kbuild dependencies of $pkg:arm64"
	add_want "$common"
	# One linux-kbuild-6.1 serves every 6.1 ABI: it must be new enough.
	have=$(dpkg-query -W -f='${Version}' "$kbuild:$host_arch" 2>/dev/null || true)
	if [ -n "$have" ] && [ -n "$kbuild_min" ] &&
	   dpkg --compare-versions "$have" lt "$kbuild_min"; then
		want="$want $kbuild:$host_arch"
	else
		add_want "$kbuild:$host_arch"
	fi
	arm64_pkgs="$arm64_pkgs $pkg=$ver"
done

# The cross compiler the arm64 headers name (CC = $(CROSS_COMPILE)gcc-12), and
# the tools the builds and the host harness need.
add_want gcc-12-aarch64-linux-gnu
for tool in make gcc; do
	command -v "$tool" >/dev/null 2>&1 || want="$want $tool"
done

if [ -n "$want" ]; then
	# shellcheck disable=SC2086
	apt-get install -y --no-install-recommends $want ||
		die "apt-get install of$want failed"
fi

# Unpack each arm64 header tree under $ARM64_ROOT/usr/src, where its relative
# links ../../lib/linux-kbuild-*/ resolve to $ARM64_ROOT/usr/lib/linux-kbuild-*,
# itself a link to the host's kbuild tools.
mkdir -p "$ARM64_ROOT/usr/src" "$ARM64_ROOT/usr/lib"
keep=""
for pv in $arm64_pkgs; do
	pkg=${pv%%=*}
	ver=${pv#*=}
	tree=$pkg
	dest=$ARM64_ROOT/usr/src/$tree
	keep="$keep $tree"
	if [ -f "$dest/.cclab-deb" ] && [ "$(cat "$dest/.cclab-deb")" = "$pkg:arm64 $ver" ]; then
		echo "install-build-deps: $pkg:arm64 $ver already unpacked in $dest"
		continue
	fi
	tmp=$(mktemp -d)
	# apt fetches as the unprivileged _apt user when it can write the folder.
	chown _apt "$tmp" 2>/dev/null || true
	if ! (cd "$tmp" && apt-get download -q "$pkg:arm64=$ver" >/dev/null); then
		rm -rf "$tmp"
		die "apt-get download $pkg:arm64=$ver failed"
	fi
	mkdir "$tmp/x"
	dpkg-deb -x "$tmp"/*.deb "$tmp/x" || { rm -rf "$tmp"; die "cannot unpack $pkg:arm64"; }
	[ -d "$tmp/x/usr/src/$tree" ] || { rm -rf "$tmp"; die "$pkg:arm64 has no usr/src/$tree"; }
	echo "$pkg:arm64 $ver" > "$tmp/x/usr/src/$tree/.cclab-deb"
	rm -rf "$dest"
	mv "$tmp/x/usr/src/$tree" "$dest"
	rm -rf "$tmp"
	echo "install-build-deps: unpacked $pkg:arm64 $ver in $dest"
done

# Link the kbuild tools each tree names, and check that every link resolves.
for tree in $keep; do
	dest=$ARM64_ROOT/usr/src/$tree
	for l in scripts tools; do
		target=$(readlink "$dest/$l") || die "$dest/$l is not a link"
		case "$target" in
		../../lib/linux-kbuild-*/*) ;;
		*) die "$dest/$l points to $target, not ../../lib/linux-kbuild-*" ;;
		esac
		kb=${target#../../lib/}
		kb=${kb%%/*}
		[ -d "/usr/lib/$kb" ] || die "/usr/lib/$kb missing (host linux-kbuild package)"
		ln -sfn "/usr/lib/$kb" "$ARM64_ROOT/usr/lib/$kb"
	done
	inc=$(sed -n 's/^include //p' "$dest/Makefile")
	[ -f "$inc" ] || die "$dest/Makefile includes $inc, which is missing"
	[ -x "$dest/scripts/mod/modpost" ] || die "$dest/scripts/mod/modpost is missing"
done

# Remove trees (and kbuild links) of other versions.
for d in "$ARM64_ROOT"/usr/src/linux-headers-*; do
	[ -e "$d" ] || continue
	case " $keep " in
	*" ${d##*/} "*) ;;
	*) echo "install-build-deps: removing older $d"; rm -rf "$d" ;;
	esac
done
for l in "$ARM64_ROOT"/usr/lib/linux-kbuild-*; do
	[ -L "$l" ] || continue
	used=""
	for tree in $keep; do
		case "$(readlink "$ARM64_ROOT/usr/src/$tree/scripts")" in
		"../../lib/${l##*/}/"*) used=1 ;;
		esac
	done
	[ -n "$used" ] || rm -f "$l"
done

ls -d /usr/src/linux-headers-6.1.*-amd64 /usr/src/linux-headers-6.12.*-amd64 \
	"$ARM64_ROOT"/usr/src/linux-headers-6.1.*-arm64 \
	"$ARM64_ROOT"/usr/src/linux-headers-6.12.*-arm64
