#!/bin/sh
# PID 1 of the QEMU lab guest booted as the student's VM (vm/run.sh --systemd): put the kit where
# Vagrant's synced folder puts it, then hand over to systemd, which starts the VM's services as
# a Vagrant box does -- JupyterLab as the lab user among them -- and then cclab-ctl.service, which
# runs the host's command as root and powers off.
#
# /kit is the host's checkout (9p, read-only here) under a writable layer in memory, so that
# nothing the guest does lands in the checkout.  The student works in the lab user's home
# (~/notebooks, seeded from /kit/notebooks by the JupyterLab unit), as in the Vagrant VM.
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH

mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sys /sys
mount -o remount,rw / 2>/dev/null
mount -t tmpfs -o mode=0755,nosuid,nodev run /run
modprobe -q 9pnet_virtio
modprobe -q overlay
mkdir -p /run/cclab-ctl /mnt/kit-share /mnt/kit-rw /kit
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 ctl /run/cclab-ctl \
  || echo "cclab-student-init: no control share" >/dev/console
if mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=524288 kit /mnt/kit-share; then
  mount -t tmpfs -o mode=0755 kit-rw /mnt/kit-rw
  mkdir -p /mnt/kit-rw/upper /mnt/kit-rw/work
  if ! mount -t overlay overlay \
      -o lowerdir=/mnt/kit-share,upperdir=/mnt/kit-rw/upper,workdir=/mnt/kit-rw/work /kit; then
    echo "cclab-student-init: no overlay on /kit; the kit is read-only" >/dev/console
    mount --bind /mnt/kit-share /kit
  fi
else
  echo "cclab-student-init: no kit share" >/dev/console
fi
exec /lib/systemd/systemd
