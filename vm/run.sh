#!/usr/bin/env bash
# Boot the QEMU lab image, run one command as root inside it, and return its output and exit
# status. The checkout is shared read-write into the guest at /kit, and the command runs there,
# with CCLAB_VM_ACCEL set to the accelerator the guest runs under: kvm or tcg (over any --env).
#
# Usage: vm/run.sh [--timeout SEC] [--cpus N] [--mem MIB] [--env NAME=VALUE]...
#                  [--systemd] [--forward PORT] [--kernel SERIES] -- CMD [ARG...]
#
# --systemd boots the guest as the student's VM: systemd as PID 1 and the VM's services as a
# Vagrant box runs them (JupyterLab as the lab user); CMD runs as root once they are up, and
# the checkout is read-only at /kit under a writable layer that stays in the guest.
# --forward PORT forwards the guest's JupyterLab port (8888) to 127.0.0.1:PORT on this host;
# with --systemd, run.sh then prints JupyterLab's address with its token once the guest is up.
# --kernel SERIES boots another of the image's kernels with the same disk: 6.12 (Debian's 6.12
# series, the kit's modules built for it too) or 6.1 (the default).
#
# The image is built first if it is missing or stale (vm/build-image.sh). KVM is used when it
# can run a guest here, otherwise QEMU's software emulation (TCG). Environment:
#   CCLAB_VM_ACCEL  auto (default), kvm or tcg
#   CCLAB_VM_REUSE  1: boot the newest built image even if its inputs changed (inner loop only)
#   CCLAB_VM_LOCK   0: do not wait for other guests started by vm/run.sh (default: one at a time)
#   CCLAB_VM_MEM    guest memory in MiB (default 6144: the guest's /tmp is a tmpfs that holds
#                   the runs' tables and captures, beside notebooks loading them with pandas)
#   CCLAB_VM_BOOT_LIMIT  seconds the guest may take to reach the command before it is booted
#                   again, once (default 300; 900 with --systemd)
#   CCLAB_VM_STALL  seconds without the guest's heartbeat before it is sent an NMI and taken for
#                   frozen: its stacks on the console, exit status 125 (default 180; 0: off)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
kit=$(cd "$here/.." && pwd)
. "$here/lib.sh"

timeout=3600
cpus=${CCLAB_VM_CPUS:-$(nproc)}
mem=${CCLAB_VM_MEM:-6144}
envs=()
init=/usr/local/sbin/cclab-guest-init
forward=
kernel=
while [ $# -gt 0 ]; do
  case "$1" in
    --systemd) init=/usr/local/sbin/cclab-student-init; shift ;;
    --forward) forward=${2:?--forward needs a port}; shift 2 ;;
    --timeout) timeout=${2:?--timeout needs seconds}; shift 2 ;;
    --cpus) cpus=${2:?--cpus needs a number}; shift 2 ;;
    --mem) mem=${2:?--mem needs MiB}; shift 2 ;;
    --env) envs+=("${2:?--env needs NAME=VALUE}"); shift 2 ;;
    --kernel) kernel=${2:?--kernel needs a kernel series, e.g. 6.12}; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (usage: vm/run.sh [--timeout SEC] [--cpus N] [--mem MIB] -- CMD)" ;;
  esac
done
[ $# -gt 0 ] || die "no command given (usage: vm/run.sh [options] -- CMD [ARG...])"
case "$timeout$cpus$mem$forward" in *[!0-9]*) die "--timeout, --cpus, --mem and --forward take whole numbers" ;; esac
[ -z "$kernel" ] || [[ "$kernel" =~ ^[0-9]+\.[0-9]+$ ]] || die "--kernel takes a kernel series such as 6.12, not '$kernel'"
net_opts=()
if [ -n "$forward" ]; then
  # User-mode networking, restricted: the guest reaches nothing; the host's loopback reaches
  # the guest's JupyterLab, and nothing else does.
  net_opts=(-netdev "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:$forward-:8888"
            -device virtio-net-pci,netdev=n0)
fi

need qemu-system-x86_64 qemu-system-x86
cache=$(cache_dir)

[ "${CCLAB_VM_REUSE:-0}" = 1 ] && [ -e "$cache/current.img" ] || "$here/build-image.sh"

# One guest at a time: two TCG guests on a small host would distort each other's timing.
if [ "${CCLAB_VM_LOCK:-1}" = 1 ]; then
  exec 8>"$cache/.run.lock"
  flock -n 8 || { echo "[vm] another guest is running; waiting for it to finish" >&2; flock 8; }
fi

# The image the last build made current (chosen under the lock: a build may replace it).
img=$(readlink -f "$cache/current.img")
key=${img##*/lab-}; key=${key%.img}
[ -f "$img" ] || die "no image at $img: run vm/build-image.sh"
vmlinuz=$cache/vmlinuz-$key
initrd=$cache/initrd-$key
if [ -n "$kernel" ]; then
  vmlinuz=$cache/vmlinuz-$key-$kernel
  initrd=$cache/initrd-$key-$kernel
  [ -f "$vmlinuz" ] && [ -f "$initrd" ] \
    || die "the image lab-$key.img has no $kernel kernel: no vmlinuz-$key-$kernel and initrd-$key-$kernel in $cache (vm/build-image.sh adds 6.12 to the default 6.1)"
fi

# KVM only when it can really run a guest: /dev/kvm may exist where it cannot. The probe boots
# the kernel with no root filesystem under KVM; it must get as far as its panic. The verdict is
# kept per host kernel.
kvm_usable() {
  [ -w /dev/kvm ] || return 1
  local verdict=$cache/kvm-verdict-$(uname -r) log
  if [ ! -f "$verdict" ]; then
    log=$(mktemp)
    ( timeout 30 qemu-system-x86_64 -accel kvm -cpu host -M pc -m 256 -nodefaults -display none \
      -no-reboot -kernel "$cache/vmlinuz-$key" -append "console=ttyS0 panic=-1" \
      -serial "file:$log" </dev/null >/dev/null 2>&1 ) 2>/dev/null || true
    if grep -q 'Kernel panic' "$log"; then echo usable > "$verdict"; else echo unusable > "$verdict"; fi
    rm -f "$log"
  fi
  [ "$(cat "$verdict")" = usable ]
}
accel=${CCLAB_VM_ACCEL:-auto}
if [ "$accel" = auto ]; then
  if kvm_usable; then accel=kvm; else accel=tcg; fi
fi
case "$accel" in
  kvm) accel_opts=(-accel kvm -cpu host) ;;
  # No AVX2 under software emulation: QEMU 7.2's emulated AVX2 gather raised a general protection
  # fault inside numpy's SIMD code (vgather*, _multiarray_umath), killing a lab notebook's kernel
  # with SIGSEGV now and then, late in long sessions; without AVX2 numpy takes its SSE/AVX paths.
  tcg) accel_opts=(-accel tcg,thread=multi -cpu max,avx2=off,avx512f=off) ;;
  *) die "CCLAB_VM_ACCEL must be auto, kvm or tcg, not $accel" ;;
esac

ctl=$(mktemp -d "${TMPDIR:-/tmp}/cclab-vm.XXXXXX")
qpid=
stop_guest() {
  if [ -n "$qpid" ] && kill -0 "$qpid" 2>/dev/null; then
    kill "$qpid" 2>/dev/null || true
    sleep 1
    kill -9 "$qpid" 2>/dev/null || true
    wait "$qpid" 2>/dev/null || true
  fi
  qpid=
}
cleanup() {
  stop_guest
  rm -rf "$ctl"
}
trap cleanup EXIT
trap 'echo "[vm] interrupted" >&2; exit 130' INT
trap 'echo "[vm] terminated" >&2; exit 143' TERM

{
  echo "#!/bin/bash"
  printf '%q ' "$@"
  echo
} > "$ctl/cmd"
: > "$ctl/env"
for e in ${envs[@]+"${envs[@]}"}; do
  case "$e" in [A-Za-z_]*=*) printf 'export %s=%q\n' "${e%%=*}" "${e#*=}" >> "$ctl/env" ;;
    *) die "--env takes NAME=VALUE, not $e" ;; esac
done
# The command knows how its guest runs: the in-VM tests tell an artefact of QEMU's software
# emulation from the kernel's own findings (tests/vm/test_kmod.py, test_dmesg_clean_after_matrix).
printf 'export CCLAB_VM_ACCEL=%q\n' "$accel" >> "$ctl/env"

# The guest's boot under software emulation hung once (2 vCPUs busy for 10 minutes, the command
# never started): a guest that has not reached the command within boot_limit seconds is stopped
# and booted again, once. qemu dies with this script (setpriv --pdeathsig) and does not inherit
# the lock, so a caller that kills this script leaves no guest running and no lock held.
# (Boots take 20-35 s; --systemd waits for JupyterLab too, so it gets longer.)
boot_limit=300
[ "$init" = /usr/local/sbin/cclab-guest-init ] || boot_limit=900
boot_limit=${CCLAB_VM_BOOT_LIMIT:-$boot_limit}
case "$boot_limit" in *[!0-9]*|'') die "CCLAB_VM_BOOT_LIMIT takes whole seconds" ;; esac
boots=0
# A CPU stuck in the kernel for a minute (softlockup_panic, after 2 x watchdog_thresh) ends the
# guest with its stack on the console (panic turns the console verbose): a lab seen hanging in
# a browser test (CPU#1 stuck for 11 min in a python3 task, 28 Nov 2026) would otherwise wait
# out the test's hour with nothing to show, and the report's stack is below loglevel 3.
# A guest stuck where the soft-lockup watchdog cannot see it (a CPU spinning with interrupts
# off, a share that no longer answers) is taken apart through QEMU's monitor, a socket in the
# control folder: an NMI panics it (unknown_nmi_panic), and the panic prints every CPU's stack
# (panic_print=64) and the memory's state (2) on the console.  The guest's heartbeat
# (vm/heartbeat.sh: its uptime written into the control folder every 5 s) tells when: one older
# than CCLAB_VM_STALL seconds (default 180; 0 turns this off) sends the NMI.  A lab seen frozen in
# CI (both vCPUs busy, nothing on the console, JupyterLab silent for 15 min) showed nothing else.
# trace_options=norecord-cmd: enabling or disabling any trace event would otherwise register
# or remove tracefs' own probes on the scheduler's tracepoints, rewriting __schedule while the
# other vCPU runs it; one such rewrite froze a make test guest for good (cclab/measure.py,
# no_cmdline_recording).
stall=${CCLAB_VM_STALL:-180}
case "$stall" in *[!0-9]*|'') die "CCLAB_VM_STALL takes whole seconds (0: no stall watch)" ;; esac
# (The monitor reads a command once it has shown its prompt, and a client that writes and hangs
# up before the next prompt may have sent nothing: so each prompt is waited for.)
send_nmi() {
  python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(sys.argv[1])
def prompt():
    seen = b""
    while not seen.endswith(b"(qemu) "):
        got = s.recv(4096)
        if not got:
            raise SystemExit(1)
        seen += got
prompt()
s.sendall(b"nmi\n")
prompt()' "$ctl/monitor.sock" 2>/dev/null
}
nmi_at=
start_guest() {
boots=$((boots + 1))
t0=$(date +%s.%N)
[ $boots -gt 1 ] || t_first=$t0
setpriv --pdeathsig KILL -- \
qemu-system-x86_64 "${accel_opts[@]}" -M pc -smp "$cpus" -m "$mem" \
  -nodefaults -display none -no-reboot \
  -chardev stdio,id=con,signal=off -serial chardev:con \
  -kernel "$vmlinuz" -initrd "$initrd" \
  -append "root=/dev/vda rw console=ttyS0 quiet loglevel=3 init=$init panic=-1 softlockup_panic=1 watchdog_thresh=30 unknown_nmi_panic=1 panic_print=66 trace_options=norecord-cmd tsc=reliable systemd.mask=serial-getty@ttyS0.service systemd.show_status=0" \
  ${net_opts[@]+"${net_opts[@]}"} \
  -drive "file=$img,if=virtio,format=raw,snapshot=on" \
  -device virtio-rng-pci \
  -virtfs "local,path=$kit,mount_tag=kit,security_model=none,id=kit" \
  -virtfs "local,path=$ctl,mount_tag=ctl,security_model=none,id=ctl" \
  -monitor "unix:$ctl/monitor.sock,server=on,wait=off" \
  </dev/null 8>&- &
qpid=$!
}
start_guest

# Report the boot time once the guest reaches the command; stop the guest at the time limit.
booted=0
while true; do
while kill -0 "$qpid" 2>/dev/null; do
  now=$(date +%s.%N)
  if [ $booted -eq 0 ] && [ -s "$ctl/started" ]; then
    booted=1
    awk -v a="$now" -v b="$t0" -v acc="$accel" 'BEGIN { printf "[vm] booted to the command in %.1f s (%s, target: 60 s)\n", a - b, acc }' >&2
    # the student's VM: the address to open, with the token JupyterLab asks for
    if [ -n "$forward" ] && [ -s "$ctl/jupyter-token" ]; then
      echo "[vm] JupyterLab: http://127.0.0.1:$forward/lab?token=$(cat "$ctl/jupyter-token")" >&2
    fi
  fi
  if [ $booted -eq 0 ] && awk -v a="$now" -v b="$t0" -v t="$boot_limit" 'BEGIN { exit !(a - b > t) }'; then
    stop_guest
    if [ $boots -ge 2 ]; then
      echo "[vm] the guest did not reach the command in $boot_limit s, twice: giving up" >&2
      exit 125
    fi
    echo "[vm] the guest did not reach the command in $boot_limit s (its boot hung): booting it again" >&2
    start_guest
    continue
  fi
  if [ $booted -eq 1 ] && [ "$stall" -gt 0 ] && [ -z "$nmi_at" ] && [ -e "$ctl/alive" ]; then
    age=$(( $(date +%s) - $(stat -c %Y "$ctl/alive" 2>/dev/null || date +%s) ))
    if [ "$age" -gt "$stall" ]; then
      echo "[vm] the guest stopped answering (no heartbeat for $age s): NMI sent; its stacks follow on the console" >&2
      send_nmi || echo "[vm] the NMI could not be sent (QEMU's monitor did not answer)" >&2
      nmi_at=$(date +%s)
    fi
  fi
  if [ -n "$nmi_at" ] && [ $(( $(date +%s) - nmi_at )) -gt 60 ]; then
    echo "[vm] the guest did not stop within 60 s of the NMI: stopping it" >&2
    stop_guest
    break
  fi
  if awk -v a="$now" -v b="$t_first" -v t="$timeout" 'BEGIN { exit !(a - b > t) }'; then
    echo "[vm] time limit of $timeout s reached: stopping the guest" >&2
    cleanup
    exit 124
  fi
  sleep 0.5
done
[ -z "$qpid" ] || wait "$qpid" || true
qpid=
# A guest that stopped before it reached the command died while booting: the 6.12 kernel under
# software emulation once took an int3 while it patched its own text (sched_clock_cpu, 2 Dec
# 2026; the console above shows such an oops).  It is booted again, once, like a hung boot.
if [ $booted -eq 0 ] && [ -z "$nmi_at" ] && [ $boots -lt 2 ] && [ ! -s "$ctl/rc" ]; then
  echo "[vm] the guest stopped before it reached the command (its boot failed; the console above says how): booting it again" >&2
  start_guest
  continue
fi
break
done
if [ -n "$nmi_at" ]; then
  echo "[vm] the guest froze: its heartbeat stopped for over $stall s (CCLAB_VM_STALL); the console above has its stacks" >&2
  exit 125
fi
if [ ! -s "$ctl/rc" ]; then
  echo "[vm] the guest stopped without reporting an exit status" >&2
  exit 125
fi
rc=$(cat "$ctl/rc")
awk -v a="$(date +%s.%N)" -v b="$t0" -v rc="$rc" 'BEGIN { printf "[vm] command exited with status %s after %.0f s\n", rc, a - b }' >&2
exit "$rc"
