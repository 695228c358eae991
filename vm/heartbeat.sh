#!/bin/sh
# The guest's heartbeat for vm/run.sh: every few seconds, the guest's uptime written into the
# control share.  run.sh takes a heartbeat older than CCLAB_VM_STALL seconds for a frozen guest
# and sends it an NMI, so that the stuck CPUs' stacks reach the console.  Started by
# cclab-guest-init and by the student VM's cclab-ctl unit, beside the host's command.
echo $$ > /run/cclab-heartbeat.pid
while :; do
  cut -d' ' -f1 /proc/uptime > /run/cclab-ctl/alive 2>/dev/null
  sleep 5
done
