#!/usr/bin/env bash
# Build the QEMU lab image from Debian packages:
#   debootstrap bookworm -> chroot: vm/provision.sh (the script Vagrant runs) -> ext4 image.
# Output (in $CCLAB_VM_CACHE, default ~/.cache/cclab-vm):
#   lab-<key>.img, vmlinuz-<key>, initrd-<key>, and current -> the newest of them.
#   vmlinuz-<key>-6.12, initrd-<key>-6.12: the image's second kernel (vm/run.sh --kernel 6.12);
#   vmlinuz-<key>-6.1 and initrd-<key>-6.1 name the default one.
# <key> hashes every provisioning input (vm/, kmod/, pyproject.toml), so a changed input builds
# a new image and an unchanged one is reused. The debootstrapped and provisioned rootfs is also
# kept, keyed on everything but kmod/, so that a change to the modules only re-runs provisioning.
#
# Usage: vm/build-image.sh [--force] [--print-key]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
kit=$(cd "$here/.." && pwd)
. "$here/lib.sh"

# The image boots Debian 12's 6.1 kernel, the one provisioning builds the kit's modules for and
# the Vagrant box boots. Debian's 6.12 series (bookworm-security) is installed beside it, with the
# kit's DKMS modules built for it too, so that the module tests can run on a newer kernel from the
# same image (make vm-test-kernel2). Only here: vm/provision.sh, which Vagrant runs, stays on 6.1.
DEFAULT_SERIES=6.1
SECOND_SERIES=6.12

force=0
case "${1:-}" in
  --force) force=1 ;;
  --print-key) image_key "$kit"; exit 0 ;;
  "") ;;
  *) die "unknown option $1 (usage: vm/build-image.sh [--force] [--print-key])" ;;
esac

[ "$(id -u)" -eq 0 ] || die "building the image needs root (debootstrap, chroot)"
need debootstrap debootstrap
need mke2fs e2fsprogs
need unshare util-linux

cache=$(cache_dir)
mkdir -p "$cache"
key=$(image_key "$kit")
base_key=$(base_key "$kit")
img=$cache/lab-$key.img
if [ $force -eq 0 ] && [ -f "$img" ] && [ -f "$cache/vmlinuz-$key" ] && [ -f "$cache/initrd-$key" ] \
   && [ -f "$cache/vmlinuz-$key-$SECOND_SERIES" ] && [ -f "$cache/initrd-$key-$SECOND_SERIES" ]; then
  ln -sfn "lab-$key.img" "$cache/current.img"
  echo "[image] up to date: $img"
  exit 0
fi

exec 9>"$cache/.build.lock"
flock -n 9 || { echo "[image] another build is running; waiting for it" >&2; flock 9; }
if [ $force -eq 0 ] && [ -f "$img" ]; then ln -sfn "lab-$key.img" "$cache/current.img"; echo "[image] built meanwhile: $img"; exit 0; fi

t0=$(date +%s)
root=$cache/rootfs-$base_key
work=$cache/.work-$key
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

# The chroot steps run in their own mount namespace: /proc, /sys, /dev and the checkout are
# mounted there only, and vanish with it however the build ends.
in_chroot() {
  unshare --mount --propagation private -- bash -euc '
    root=$1; kit=$2; shift 2
    mount -t proc proc "$root/proc"
    mount -t sysfs sys "$root/sys"
    mount --rbind /dev "$root/dev"
    mkdir -p "$root/run/kit"
    mount --bind "$kit" "$root/run/kit"
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    # pip in the chroot trusts what the build host trusts (a site may intercept TLS).
    cp /etc/ssl/certs/ca-certificates.crt "$root/run/host-ca.crt"
    exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
      LANG=C.UTF-8 PIP_DEFAULT_TIMEOUT=180 PIP_DISABLE_PIP_VERSION_CHECK=1 \
      PIP_CERT=/run/host-ca.crt "$@"
  ' in_chroot "$root" "$kit" "$@"
}

# kernel_of SERIES: the newest kernel release of that series installed in the rootfs (6.1 ->
# 6.1.0-NN-amd64; 6.1 does not match 6.12.x), or nothing.
kernel_of() {
  local k best=
  for k in $(ls -1 "$root/lib/modules" 2>/dev/null | sort -V); do
    case "$k" in "$1".[0-9]*) [ -f "$root/boot/vmlinuz-$k" ] && best=$k ;; esac
  done
  printf '%s' "$best"
}

if [ ! -f "$root/.cclab-base-done" ]; then
  rm -rf "$root" "$root.tmp"
  echo "[image] debootstrap bookworm -> $root"
  mirror=${CCLAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
  debootstrap --variant=minbase --include=ca-certificates,systemd-sysv,udev \
    bookworm "$root.tmp" "$mirror" > "$work/debootstrap.log" 2>&1 \
    || { tail -n 20 "$work/debootstrap.log" >&2; rm -rf "$root.tmp"; die "debootstrap failed (log above)"; }
  mv "$root.tmp" "$root"
  cat > "$root/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
  echo "[image] debootstrap done after $(( $(date +%s) - t0 )) s"
fi

echo "[image] provisioning (vm/provision.sh) in the chroot"
# The full output goes to a log; its summary lines are shown as they come. A kept rootfs has the
# second kernel too: provisioning is told to build the modules for the 6.1 one, not the newest.
plog=$cache/provision.log
kver=$(kernel_of "$DEFAULT_SERIES")
if ! in_chroot env CCLAB_KIT=/run/kit CCLAB_KIT_MOUNT=/kit CCLAB_USER=lab ${kver:+CCLAB_KVER=$kver} \
    bash /run/kit/vm/provision.sh > "$plog" 2>&1 < /dev/null; then
  tail -n 30 "$plog" >&2
  die "provisioning failed (last lines above; full log: $plog)"
fi
grep -E '^\[provision\]' "$plog" | sed 's/^/  /'
echo "[image] provisioned after $(( $(date +%s) - t0 )) s"
kver=$(kernel_of "$DEFAULT_SERIES")
[ -n "$kver" ] || die "provisioning installed no $DEFAULT_SERIES kernel (/lib/modules: $(ls "$root/lib/modules" | xargs))"

# The second kernel and its headers (meta packages: the newest of the series; no -dbg packages).
klog=$cache/kernel2.log
if ! in_chroot env DEBIAN_FRONTEND=noninteractive bash -euc '
    missing=
    for p in "linux-image-$1-amd64" "linux-headers-$1-amd64"; do
      dpkg-query -W -f="\${Status}" "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
    done
    [ -n "$missing" ] || { echo "linux-image-$1-amd64 already installed"; exit 0; }
    apt-get update -q
    apt-get install -y -q --no-install-recommends -o Dpkg::Options::=--force-unsafe-io $missing
    apt-get clean
  ' kernel2 "$SECOND_SERIES" > "$klog" 2>&1 < /dev/null; then
  tail -n 30 "$klog" >&2
  die "installing the $SECOND_SERIES kernel failed (last lines above; full log: $klog)"
fi
touch "$root/.cclab-base-done"

# The kit's modules for the second kernel, as provisioning builds them for the first (it removes
# every kernel's build when it registers the sources again, so this runs each time).
kver2=$(kernel_of "$SECOND_SERIES")
[ -n "$kver2" ] || die "no $SECOND_SERIES kernel in the rootfs after installing it (log: $klog)"
dkms_conf=$kit/kmod/dkms.conf
if [ -f "$dkms_conf" ]; then
  . "$here/kmod-dkms.sh"
  pkg=$(kmod_package "$dkms_conf") || die "$dkms_conf lacks PACKAGE_NAME or PACKAGE_VERSION"
  name=${pkg% *} ver=${pkg#* }
  in_chroot bash -euc '. /run/kit/vm/kmod-dkms.sh; kmod_build_install "$@"' dkms2 \
    "$name" "$ver" "$kver2" < /dev/null || die "DKMS build of $name $ver failed for $kver2 (its output above)"
  echo "[image] kit modules $name $ver built and installed for $kver2"
fi

# The guest side of vm/run.sh: an init that runs one command and powers off.
install -m 0755 "$here/guest-init.sh" "$root/usr/local/sbin/cclab-guest-init"
# The student's VM (vm/run.sh --systemd): an init that mounts the kit as Vagrant's synced folder
# would and hands over to systemd; a unit that runs the host's command once the VM is up; DHCP on
# the user-mode network that forwards JupyterLab's port to the host.
install -m 0755 "$here/student-init.sh" "$root/usr/local/sbin/cclab-student-init"
install -m 0755 "$here/heartbeat.sh" "$root/usr/local/sbin/cclab-heartbeat"
cat > "$root/etc/systemd/system/cclab-ctl.service" <<'EOF'
[Unit]
Description=Run the command vm/run.sh --systemd was given, then power off
ConditionPathExists=/run/cclab-ctl/cmd
After=multi-user.target cclab-jupyter.service

[Service]
Type=oneshot
WorkingDirectory=/kit
Environment=PATH=/opt/cclab/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
Environment=HOME=/root LANG=C.UTF-8 PY_COLORS=0
ExecStart=/bin/bash -c 'cp /etc/cclab/jupyter-token /run/cclab-ctl/jupyter-token 2>/dev/null; cut -d" " -f1 /proc/uptime > /run/cclab-ctl/started; cclab-heartbeat </dev/null >/dev/null 2>&1 & [ -f /run/cclab-ctl/env ] && . /run/cclab-ctl/env; bash /run/cclab-ctl/cmd </dev/null >/dev/console 2>&1; echo $? > /run/cclab-ctl/rc; sync'
ExecStartPost=/bin/systemctl --no-block poweroff
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
EOF
cat > "$root/etc/systemd/network/50-cclab-user.network" <<'EOF'
[Match]
Name=en* eth*

[Network]
DHCP=ipv4
EOF
in_chroot systemctl enable cclab-ctl.service systemd-networkd.service >/dev/null 2>&1 \
  || die "cannot enable the student VM's units"
echo cclab-lab > "$root/etc/hostname"
# The name resolves (sudo looks it up, and says so on every call when it cannot).
grep -q 'cclab-lab' "$root/etc/hosts" 2>/dev/null || printf '127.0.1.1\tcclab-lab\n' >> "$root/etc/hosts"
rm -f "$root/etc/resolv.conf"
in_chroot apt-get clean

cp "$root/boot/vmlinuz-$kver" "$work/vmlinuz"
cp "$root/boot/initrd.img-$kver" "$work/initrd"
cp "$root/boot/vmlinuz-$kver2" "$work/vmlinuz2"
cp "$root/boot/initrd.img-$kver2" "$work/initrd2"

# Size the image to the tree plus headroom for results and module builds.
used_mb=$(du -sm --exclude=./proc --exclude=./sys "$root" | cut -f1)
size_mb=$(( used_mb + used_mb / 4 + 1024 ))
echo "[image] writing ext4 image (${size_mb} MiB)"
mke2fs -q -t ext4 -L cclab-root -E root_owner=0:0 -d "$root" "$work/lab.img" "${size_mb}M" >/dev/null

mv "$work/vmlinuz" "$cache/vmlinuz-$key"
mv "$work/initrd" "$cache/initrd-$key"
ln -sfn "vmlinuz-$key" "$cache/vmlinuz-$key-$DEFAULT_SERIES"
ln -sfn "initrd-$key" "$cache/initrd-$key-$DEFAULT_SERIES"
mv "$work/vmlinuz2" "$cache/vmlinuz-$key-$SECOND_SERIES"
mv "$work/initrd2" "$cache/initrd-$key-$SECOND_SERIES"
mv "$work/lab.img" "$img"
ln -sfn "lab-$key.img" "$cache/current.img"
# Keep only the newest image and rootfs: they are large.
find "$cache" -maxdepth 1 \( -name 'lab-*.img' -o -name 'vmlinuz-*' -o -name 'initrd-*' \) \
  ! -name "*$key*" -delete
for d in "$cache"/rootfs-*; do
  [ "$d" = "$root" ] || rm -rf "$d"
done
echo "[image] built $img for kernel $kver (and $kver2: vm/run.sh --kernel $SECOND_SERIES) in $(( $(date +%s) - t0 )) s (target: 600 s)"
