#!/usr/bin/env bash
# Build the QEMU lab image from Debian packages:
#   debootstrap bookworm -> chroot: vm/provision.sh (the script Vagrant runs) -> ext4 image.
# Output (in $CCLAB_VM_CACHE, default ~/.cache/cclab-vm):
#   lab-<key>.img, vmlinuz-<key>, initrd-<key>, and current -> the newest of them.
# <key> hashes every provisioning input (vm/, kmod/, pyproject.toml), so a changed input builds
# a new image and an unchanged one is reused. The debootstrapped and provisioned rootfs is also
# kept, keyed on everything but kmod/, so that a change to the modules only re-runs provisioning.
#
# Usage: vm/build-image.sh [--force] [--print-key]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
kit=$(cd "$here/.." && pwd)
. "$here/lib.sh"

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
if [ $force -eq 0 ] && [ -f "$img" ] && [ -f "$cache/vmlinuz-$key" ] && [ -f "$cache/initrd-$key" ]; then
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
# The full output goes to a log; its summary lines are shown as they come.
plog=$cache/provision.log
if ! in_chroot env CCLAB_KIT=/run/kit CCLAB_KIT_MOUNT=/kit CCLAB_USER=lab \
    bash /run/kit/vm/provision.sh > "$plog" 2>&1 < /dev/null; then
  tail -n 30 "$plog" >&2
  die "provisioning failed (last lines above; full log: $plog)"
fi
grep -E '^\[provision\]' "$plog" | sed 's/^/  /'
echo "[image] provisioned after $(( $(date +%s) - t0 )) s"
touch "$root/.cclab-base-done"

# The guest side of vm/run.sh: an init that runs one command and powers off.
install -m 0755 "$here/guest-init.sh" "$root/usr/local/sbin/cclab-guest-init"
# The student's VM (vm/run.sh --systemd): an init that mounts the kit as Vagrant's synced folder
# would and hands over to systemd; a unit that runs the host's command once the VM is up; DHCP on
# the user-mode network that forwards JupyterLab's port to the host.
install -m 0755 "$here/student-init.sh" "$root/usr/local/sbin/cclab-student-init"
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
ExecStart=/bin/bash -c 'cp /etc/cclab/jupyter-token /run/cclab-ctl/jupyter-token 2>/dev/null; cut -d" " -f1 /proc/uptime > /run/cclab-ctl/started; [ -f /run/cclab-ctl/env ] && . /run/cclab-ctl/env; bash /run/cclab-ctl/cmd </dev/null >/dev/console 2>&1; echo $? > /run/cclab-ctl/rc; sync'
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

kver=$(ls -1 "$root/lib/modules" | sort -V | tail -n1)
cp "$root/boot/vmlinuz-$kver" "$work/vmlinuz"
cp "$root/boot/initrd.img-$kver" "$work/initrd"

# Size the image to the tree plus headroom for results and module builds.
used_mb=$(du -sm --exclude=./proc --exclude=./sys "$root" | cut -f1)
size_mb=$(( used_mb + used_mb / 4 + 1024 ))
echo "[image] writing ext4 image (${size_mb} MiB)"
mke2fs -q -t ext4 -L cclab-root -E root_owner=0:0 -d "$root" "$work/lab.img" "${size_mb}M" >/dev/null

mv "$work/vmlinuz" "$cache/vmlinuz-$key"
mv "$work/initrd" "$cache/initrd-$key"
mv "$work/lab.img" "$img"
ln -sfn "lab-$key.img" "$cache/current.img"
# Keep only the newest image and rootfs: they are large.
find "$cache" -maxdepth 1 \( -name 'lab-*.img' -o -name 'vmlinuz-*' -o -name 'initrd-*' \) \
  ! -name "*$key*" -delete
for d in "$cache"/rootfs-*; do
  [ "$d" = "$root" ] || rm -rf "$d"
done
echo "[image] built $img for kernel $kver in $(( $(date +%s) - t0 )) s (target: 600 s)"
