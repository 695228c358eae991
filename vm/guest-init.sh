#!/bin/sh
# PID 1 of the QEMU lab guest started by vm/run.sh: mount what the labs need, run the one
# command the host asked for, record its exit status and power off. No systemd: a command is
# reached in seconds, and nothing else runs beside the experiment.
PATH=/opt/cclab/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
HOME=/root
LANG=C.UTF-8
# Plain output: it goes to a serial console and from there into logs.
PY_COLORS=0
export PATH HOME LANG PY_COLORS

mnt() { mountpoint -q "$3" 2>/dev/null || { mkdir -p "$3"; mount -t "$1" "$2" "$3"; }; }
mnt proc proc /proc
mnt sysfs sys /sys
mnt devtmpfs dev /dev
mnt devpts devpts /dev/pts
mnt tmpfs shm /dev/shm
mnt tmpfs run /run
mnt tmpfs tmp /tmp
mnt cgroup2 cgroup2 /sys/fs/cgroup
mnt tracefs tracefs /sys/kernel/tracing
mnt debugfs debugfs /sys/kernel/debug
mount -o remount,rw / 2>/dev/null

modprobe -q 9pnet_virtio
mkdir -p /kit /run/cclab-ctl
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 ctl /run/cclab-ctl || { echo "cclab-guest: no control share" >/dev/console; echo o >/proc/sysrq-trigger; }
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 kit /kit || echo "cclab-guest: no kit share" >/dev/console
cut -d' ' -f1 /proc/uptime > /run/cclab-ctl/started

hostname "$(cat /etc/hostname 2>/dev/null || echo cclab-lab)"
ip link set lo up
sysctl -q --system >/dev/null 2>&1
grep -hv '^#' /etc/modules-load.d/*.conf 2>/dev/null | while read -r m; do [ -n "$m" ] && modprobe -q "$m"; done
[ -f /run/cclab-ctl/env ] && . /run/cclab-ctl/env

cd /kit 2>/dev/null || cd /
cclab-heartbeat </dev/null >/dev/null 2>&1 &
bash /run/cclab-ctl/cmd </dev/null >/dev/console 2>&1
echo $? > /run/cclab-ctl/rc
sync
# Power off.  The waiting process starts before the request: once the power-off is under way,
# starting a program can fail (its disk is already shut down), and PID 1 must never exit.
sleep 60 &
echo o > /proc/sysrq-trigger
while :; do wait; done
