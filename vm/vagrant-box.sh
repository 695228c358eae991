#!/usr/bin/env bash
# Build a Vagrant box for the libvirt provider from the kit's QEMU image (vm/build-image.sh):
# the image that `make test` boots, plus what Vagrant expects of a box -- a `vagrant` user that
# logs in with Vagrant's public insecure key and has passwordless sudo, an SSH server, DHCP on the
# first network card (the image already has it) and DNS from it.  The cached image is never
# changed: the box is made from a copy.
#
# The image is a bare ext4 filesystem with no partition table or bootloader, so the box boots
# its kernel directly: the box's own Vagrantfile points vagrant-libvirt at the kernel and initrd
# shipped beside the disk (kernel, initrd, cmd_line root=/dev/vda).
#
# Usage: vm/vagrant-box.sh [--out FILE]
#   --out FILE  where the box goes (default: $cache/vagrant/cclab-<key>.box)
# Then: vagrant box add --name cclab FILE; CCLAB_BOX=cclab vagrant up --provider=libvirt
#
# Environment: CCLAB_VM_REUSE=1 boxes the newest built image even if its inputs changed (as
# vm/run.sh does); CCLAB_VM_CACHE as for the other vm/ scripts.
#
# Notes for the host: libvirt's QEMU reads the kernel and initrd from the box folder inside
# VAGRANT_HOME (default ~/.vagrant.d), so the user QEMU runs as (libvirt-qemu on Debian) must be
# able to reach it, and the 9p synced folder needs the checkout readable by that user (the
# guest only reads /kit: the student's notebooks live in the lab user's home in the VM).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
kit=$(cd "$here/.." && pwd)
. "$here/lib.sh"

out=
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=${2:?--out needs a file}; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (usage: vm/vagrant-box.sh [--out FILE])" ;;
  esac
done

[ "$(id -u)" -eq 0 ] || die "building the box needs root (loop mount, chroot)"
need qemu-img qemu-utils
need unshare util-linux
need losetup util-linux
need e2fsck e2fsprogs

cache=$(cache_dir)
[ "${CCLAB_VM_REUSE:-0}" = 1 ] && [ -e "$cache/current.img" ] || "$here/build-image.sh"

# The image the last build made current.
img=$(readlink -f "$cache/current.img")
key=${img##*/lab-}; key=${key%.img}
[ -f "$img" ] && [ -f "$cache/vmlinuz-$key" ] && [ -f "$cache/initrd-$key" ] \
  || die "no complete image for key $key in $cache: run vm/build-image.sh"
[ -n "$out" ] || out=$cache/vagrant/cclab-$key.box
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")

t0=$(date +%s)
work=$(mktemp -d "$cache/.vagrant-box.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "[box] copying the image $img"
cp "$cache/vmlinuz-$key" "$work/vmlinuz"
cp "$cache/initrd-$key" "$work/initrd"
cp --sparse=always "$img" "$work/root.img"

# What runs in the copy, in a chroot.  The insecure public key is Vagrant's well-known one:
# Vagrant logs in with it once and replaces it with a key of its own on the first `vagrant up`.
mkdir -p "$work/payload" "$work/mnt"
cat > "$work/payload/vagrant.pub" <<'EOF'
ssh-rsa AAAAB3NzaC1yc2EAAAABIwAAAQEA6NF8iallvQVp22WDkTkyrtvp9eWW6A8YVr+kz4TjGYe7gHzIw+niNltGEFHzD8+v1I2YJ6oXevct1YeS0o9HZyN1Q9qgCgzUFtdOKLv6IedplqoPkcmF0aYet2PkEDo3MlTBckFXPITAMzF8dJSIFo9D8HfdOV0IAdx4O7PtixWKn5y2hMNG0zQPyUecp4pzC6kivAIhyfHilFR61RGL+GPXQ2MWZWFYbAGjyiYJnAmCP3NOTd0jMZEnDkbUvxhMmBYSdETk1rRgm+R4LOzFUGaHqHDLKLX+FIPKcF96hrucXzcWyLbIbEgE98OHlnVYCzRdK8jlqm8tehUc9c9WhQ== vagrant insecure public key
EOF
cat > "$work/payload/inside.sh" <<'EOF'
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
# An SSH server, and a resolver that takes its DNS servers from DHCP (systemd-networkd).
apt-get update -q
apt-get install -y -q --no-install-recommends -o Dpkg::Options::=--force-unsafe-io \
  openssh-server systemd-resolved
systemctl enable ssh.service systemd-resolved.service systemd-networkd.service >/dev/null 2>&1
# Each VM gets its own host keys, made at its first boot.
rm -f /etc/ssh/ssh_host_*
mkdir -p /etc/systemd/system/ssh.service.d
cat > /etc/systemd/system/ssh.service.d/cclab-host-keys.conf <<'UNIT'
[Service]
ExecStartPre=
ExecStartPre=/usr/bin/ssh-keygen -A
ExecStartPre=/usr/sbin/sshd -t
UNIT
# The vagrant user: Vagrant's insecure key, passwordless sudo (Vagrant needs it to set the
# hostname and mount the synced folder).
# uid 1000, as in the common boxes: a 9p synced folder shows the host's owners, and a student's
# own files (uid 1000 on most hosts) are then the vagrant user's.  The image's lab user moves.
if ! id vagrant >/dev/null 2>&1; then
  holder=$(getent passwd 1000 | cut -d: -f1 || true)
  if [ -n "$holder" ]; then
    usermod -u 1001 "$holder"
    find / -xdev -uid 1000 -exec chown -h 1001 {} +
    if [ "$(getent group 1000 | cut -d: -f1)" = "$holder" ]; then
      groupmod -g 1001 "$holder"
      find / -xdev -gid 1000 -exec chgrp -h 1001 {} +
    fi
  fi
  useradd --create-home --shell /bin/bash --uid 1000 --user-group vagrant
fi
echo vagrant:vagrant | chpasswd
install -d -m 0700 -o vagrant -g vagrant /home/vagrant/.ssh
install -m 0600 -o vagrant -g vagrant /run/box/vagrant.pub /home/vagrant/.ssh/authorized_keys
echo 'vagrant ALL=(ALL) NOPASSWD: ALL' > /etc/sudoers.d/vagrant
chmod 0440 /etc/sudoers.d/vagrant
visudo -cqf /etc/sudoers.d/vagrant
apt-get clean
rm -rf /var/lib/apt/lists/*
ln -sfn ../run/systemd/resolve/stub-resolv.conf /etc/resolv.conf
EOF

echo "[box] adding the vagrant user, openssh-server and systemd-resolved"
# The loop mount and the chroot's mounts live in a mount namespace of their own: they vanish
# (and the loop device is released) however this ends.
if ! unshare --mount --propagation private -- bash -euc '
    img=$1; root=$2; payload=$3
    mount -o loop "$img" "$root"
    mount -t proc proc "$root/proc"
    mount -t sysfs sys "$root/sys"
    mount --rbind /dev "$root/dev"
    mount -t tmpfs -o mode=0755 run "$root/run"
    mkdir -p "$root/run/box"
    mount --bind "$payload" "$root/run/box"
    rm -f "$root/etc/resolv.conf"
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    cp /etc/ssl/certs/ca-certificates.crt "$root/run/host-ca.crt"
    chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
      bash /run/box/inside.sh
    umount -R "$root/run" "$root/dev" "$root/sys" "$root/proc"
    umount "$root"
  ' vagrant-box "$work/root.img" "$work/mnt" "$work/payload" > "$work/chroot.log" 2>&1; then
  tail -n 30 "$work/chroot.log" >&2
  die "adding the Vagrant parts to the image failed (last lines above)"
fi
e2fsck -fy "$work/root.img" >/dev/null 2>&1 || [ $? -le 1 ] || die "e2fsck found errors in the box's filesystem"

echo "[box] converting to qcow2"
mkdir -p "$work/box"
qemu-img convert -O qcow2 "$work/root.img" "$work/box/box.img"
rm -f "$work/root.img"
mv "$work/vmlinuz" "$work/initrd" "$work/box/"
bytes=$(qemu-img info --output=json "$work/box/box.img" | python3 -c 'import json,sys; print(json.load(sys.stdin)["virtual-size"])')
gib=$(( (bytes + (1 << 30) - 1) >> 30 ))
cat > "$work/box/metadata.json" <<EOF
{"provider": "libvirt", "format": "qcow2", "virtual_size": $gib}
EOF
cat > "$work/box/info.json" <<EOF
{"name": "cclab", "description": "The cclab lab VM: Debian 12 with the kit's packages (image $key)"}
EOF
cat > "$work/box/Vagrantfile" <<'EOF'
# The cclab box: a bare ext4 disk (no partition table, no bootloader), booted with the kernel
# and initrd that ship beside it.
Vagrant.configure("2") do |config|
  config.vm.provider :libvirt do |lv|
    lv.disk_bus = "virtio"
    lv.kernel = File.join(__dir__, "vmlinuz")
    lv.initrd = File.join(__dir__, "initrd")
    lv.cmd_line = "root=/dev/vda rw console=ttyS0 net.ifnames=1 trace_options=norecord-cmd"
  end
end
EOF
chmod 0644 "$work/box/"*

echo "[box] writing $out"
tar -C "$work/box" -cf "$out.tmp" metadata.json info.json Vagrantfile vmlinuz initrd box.img
mv "$out.tmp" "$out"
echo "[box] built $out ($(du -h "$out" | cut -f1), disk $gib GiB, image $key) in $(( $(date +%s) - t0 )) s"
