# The kit's kernel modules under DKMS: shell functions sourced (not run) by vm/provision.sh, which
# registers and builds them for the lab VM's kernel, by vm/build-image.sh, which builds them for
# the image's second kernel, and by the tests of both.  Defining them does nothing else.

# kmod_source_files DIR: the module sources DKMS is handed, the files its build reads (dkms.conf,
# Kbuild, Makefile and the C sources and headers; not kmod/test, the docs or build products),
# NUL-separated in one order.  Both the copy into /usr/src and kmod_sources_hash take this list,
# so equal hashes mean two folders hold the same sources.
kmod_source_files() {
  ( cd "$1" && find . -maxdepth 1 -type f \( -name dkms.conf -o -name Kbuild -o -name Makefile \
      -o -name '*.c' -o -name '*.h' \) ! -name '*.mod.c' -print0 | LC_ALL=C sort -z )
}

# kmod_sources_hash DIR: one SHA-256 over those files' names and contents; fails if DIR is missing.
kmod_sources_hash() {
  [ -d "$1" ] || return 1
  ( cd "$1" && kmod_source_files . | xargs -0 -r sha256sum ) | sha256sum | cut -d' ' -f1
}

# kmod_package CONF: "NAME VERSION" from a dkms.conf; fails if either is missing.
kmod_package() {
  local name ver
  name=$(sed -n 's/^PACKAGE_NAME="\?\([^"]*\)"\?/\1/p' "$1")
  ver=$(sed -n 's/^PACKAGE_VERSION="\?\([^"]*\)"\?/\1/p' "$1")
  [ -n "$name" ] && [ -n "$ver" ] || return 1
  printf '%s %s\n' "$name" "$ver"
}

# kmod_current KMOD NAME VER KVER SRC: whether DKMS has the module sources in the folder KMOD
# (NAME VER, registered from SRC) built and installed for kernel KVER, every module KMOD's
# dkms.conf names in place.
kmod_current() {
  local want have m
  want=$(kmod_sources_hash "$1") && have=$(kmod_sources_hash "$5") || return 1
  [ "$want" = "$have" ] || return 1
  dkms status -m "$2" -v "$3" -k "$4" 2>/dev/null | grep ': installed' > /dev/null || return 1
  for m in $(sed -n 's/^BUILT_MODULE_NAME\[[0-9]*\]="\?\([^"]*\)"\?/\1/p' "$1/dkms.conf"); do
    modinfo -k "$4" -n "$m" 2>/dev/null | grep "/$4/updates/dkms/" > /dev/null || return 1
  done
}

# kmod_build_install NAME VER KVER: dkms build and install for kernel KVER, quietly; on failure
# DKMS's output and the build's make.log go to stderr and the status is 1.  (When the kernel's
# headers were installed after the sources were added, DKMS may have built them already: dkms
# build then says so and does nothing.)
kmod_build_install() {
  local out
  if ! out=$(dkms build -m "$1" -v "$2" -k "$3" 2>&1); then
    printf '%s\n' "$out" >&2
    cat "/var/lib/dkms/$1/$2/build/make.log" >&2 2>/dev/null
    return 1
  fi
  out=$(dkms install -m "$1" -v "$2" -k "$3" --force 2>&1) || { printf '%s\n' "$out" >&2; return 1; }
}
