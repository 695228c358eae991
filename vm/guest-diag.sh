#!/bin/sh
# In the lab guest, around the in-VM suite: `start` records, in a tracing instance of its own,
# every fatal signal sent (signal:signal_generate) and every exit of a process named python*;
# `report` prints the signals sent to python processes and the kernel's error lines.  A
# notebook kernel that dies without a word (nbclient's DeadKernelError) shows up there with the
# process that signalled it.
T=/sys/kernel/tracing/instances/cclab-diag
case "$1" in
  start)
    mkdir -p "$T" 2>/dev/null || { echo "[diag] no tracefs: signals not recorded"; exit 0; }
    echo 4096 > "$T/buffer_size_kb"
    echo 'sig == 1 || sig == 6 || sig == 9 || sig == 11 || sig == 15' > "$T/events/signal/signal_generate/filter"
    echo 1 > "$T/events/signal/signal_generate/enable"
    ;;
  report)
    if [ -d "$T" ]; then
      echo "[diag] fatal signals sent to python processes during the suite:"
      grep 'signal_generate' "$T/trace" | grep 'comm=python' || echo "  none"
      rmdir "$T" 2>/dev/null || true
    fi
    echo "[diag] guest memory at the end:"; free -m
    dmesg | grep -iE "out of memory|oom-kill|killed process|segfault|traps:|general protection|soft lockup|Oops|BUG:|RIP:" || true
    ;;
  *) echo "usage: vm/guest-diag.sh start|report" >&2; exit 2 ;;
esac
