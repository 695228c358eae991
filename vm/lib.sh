# Shared by the vm/ scripts (sourced, not run).

die() { printf '%s: %s\n' "$(basename "$0")" "$*" >&2; exit 1; }

# need COMMAND PACKAGE: one line naming the package when a host prerequisite is missing.
need() {
  command -v "$1" >/dev/null 2>&1 || die "$1 not found: install it with 'apt-get install $2'"
}

cache_dir() { printf "%s\n" "${CCLAB_VM_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/cclab-vm}"; }

# Hash of the listed files' paths and contents, build artifacts excluded: in a git checkout the
# files git does not ignore (tracked or new), so `make check` rebuilding kmod/test/harness does not
# change the image; elsewhere every file but the usual build outputs.
_hash_tree() {
  local kit=$1; shift
  (cd "$kit" && _tree_files "$@" | LC_ALL=C sort -u \
    | while read -r f; do [ -f "$f" ] || continue; printf '%s\n' "$f"; cat "$f"; done) | sha256sum | cut -c1-16
}
_tree_files() {
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files --cached --others --exclude-standard -- "$@"
  else
    find "$@" -type f ! -name '*.o' ! -name '*.ko' ! -name '*.mod*' ! -name '.*.cmd' \
      ! -name 'Module.symvers' ! -name 'modules.order' ! -path '*/test/build/*' \
      ! -path '*/test/harness' ! -path '*/__pycache__/*' ! -name '*.pyc' 2>/dev/null
  fi
}

# Everything that goes into the rootfs apart from the kit's kernel modules.
base_key() { _hash_tree "$1" vm/provision.sh vm/kmod-dkms.sh vm/requirements.txt vm/build-image.sh; }

# Every provisioning input: the image is rebuilt when any of them changes.
image_key() { _hash_tree "$1" vm/provision.sh vm/kmod-dkms.sh vm/requirements.txt vm/build-image.sh vm/guest-init.sh vm/student-init.sh vm/heartbeat.sh vm/lib.sh kmod; }
