#!/usr/bin/env bash
# Provision the lab VM. One script for every way the kit gets a VM:
#   - Vagrant runs it inside the student's box (Debian 12, Ubuntu 22.04 or 24.04);
#   - vm/build-image.sh runs it in a chroot of a fresh Debian 12 rootfs for the QEMU image.
# It is idempotent: running it again changes nothing that is already in place.
#
# Environment:
#   CCLAB_KIT      the checkout, as seen from where this script runs   (default: parent of vm/)
#   CCLAB_KIT_MOUNT where the checkout appears when the VM runs       (default: /kit)
#   CCLAB_USER     the lab user that runs JupyterLab and captures      (default: lab)
#   CCLAB_KVER     kernel to build modules for (default: the running one if its modules are
#                  installed, else the newest installed linux-image)
set -euo pipefail

say() { printf '[provision] %s\n' "$*"; }
die() { printf 'provision: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (try: sudo $0)"

KIT=${CCLAB_KIT:-$(cd "$(dirname "$0")/.." && pwd)}
KIT_MOUNT=${CCLAB_KIT_MOUNT:-/kit}
VENV=/opt/cclab/venv
export DEBIAN_FRONTEND=noninteractive

. /etc/os-release
case "${ID}:${VERSION_ID:-}" in
  debian:12|ubuntu:22.04|ubuntu:24.04) ;;
  *) die "unsupported distribution ${PRETTY_NAME:-$ID}: the kit supports Debian 12, Ubuntu 22.04 and 24.04" ;;
esac

# The lab user is the students' own account, never a box's vagrant user: a Vagrant box lets
# vagrant run anything as root (Vagrant needs that), and the notebook kernel must not.
LAB_USER=${CCLAB_USER:-lab}

# ---------------------------------------------------------------- packages
# dpkg: skip documentation and man pages (smaller, faster image), no man-db rebuilds.
if [ ! -f /etc/dpkg/dpkg.cfg.d/cclab-nodoc ]; then
  cat > /etc/dpkg/dpkg.cfg.d/cclab-nodoc <<'EOF'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
EOF
fi
echo 'man-db man-db/auto-update boolean false' | debconf-set-selections
# tshark: let members of the wireshark group capture, without asking.
echo 'wireshark-common wireshark-common/install-setuid boolean true' | debconf-set-selections

kernel_pkgs=()
if [ "$ID" = debian ]; then
  # The Debian kernel and its headers; in a chroot this is the kernel the image boots.
  kernel_pkgs=(linux-image-amd64 linux-headers-amd64)
  [ "$(dpkg --print-architecture)" = arm64 ] && kernel_pkgs=(linux-image-arm64 linux-headers-arm64)
fi

pkgs=(
  "${kernel_pkgs[@]}"
  build-essential dkms kmod bc
  iproute2 ethtool iputils-ping iperf3 tshark tcpdump procps psmisc
  mininet cgroup-tools
  python3 python3-venv python3-pip python3-setuptools
  git ca-certificates sudo systemd-sysv udev
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${#missing[@]} packages"
  apt-get update -q
  apt-get install -y -q --no-install-recommends -o Dpkg::Options::=--force-unsafe-io "${missing[@]}"
else
  say "packages already installed"
fi

# Headers for the running kernel (Vagrant boxes), when it differs from the meta package's.
if [ -z "${CCLAB_KVER:-}" ] && [ -d "/lib/modules/$(uname -r)" ] && [ ! -e "/lib/modules/$(uname -r)/build" ]; then
  apt-get install -y -q --no-install-recommends "linux-headers-$(uname -r)" \
    || die "no headers package for the running kernel $(uname -r)"
fi

# ---------------------------------------------------------------- the lab user
if ! id "$LAB_USER" >/dev/null 2>&1; then
  useradd --create-home --shell /bin/bash "$LAB_USER"
  say "created user $LAB_USER"
fi
getent group wireshark >/dev/null || groupadd --system wireshark
usermod -aG wireshark "$LAB_USER"
if [ -x /usr/bin/dumpcap ]; then
  chgrp wireshark /usr/bin/dumpcap
  chmod 0750 /usr/bin/dumpcap
  setcap cap_net_raw,cap_net_admin+eip /usr/bin/dumpcap 2>/dev/null || chmod u+s /usr/bin/dumpcap
fi
# The labs create namespaces, shape links and set module parameters, which need root; the
# notebook kernel does not run as root.  The lab user may run one command as root, and only
# that one: the lab command (labs/lab_command.py), through a root-owned wrapper that fixes the
# interpreter and the kit it runs, with Python in isolated mode (no PYTHONPATH, no user site).
# sudo resets the environment.  (A Vagrant box's own sudoers file gives its vagrant user more;
# that is the box's, for Vagrant itself, and JupyterLab does not run as vagrant.)
install -d -m 0755 /usr/local/sbin
# Mininet imports distutils.  Where the Python still has its own (before 3.12), the lab command
# takes that one: setuptools' shim in the venv would otherwise import all of setuptools for it,
# about 3 s of every lab run under software emulation.
stdlib_distutils=
if python3 -c 'import sys; sys.exit(sys.version_info >= (3, 12))'; then   # the venv's own Python
  stdlib_distutils="env SETUPTOOLS_USE_DISTUTILS=stdlib "
fi
cat > /usr/local/sbin/cclab-lab-run <<EOF
#!/bin/sh
# The lab user's one privileged command (/etc/sudoers.d/cclab): see $KIT_MOUNT/labs/lab_command.py
exec ${stdlib_distutils}$VENV/bin/python3 -I $KIT_MOUNT/labs/lab_command.py "\$@"
EOF
chown root:root /usr/local/sbin/cclab-lab-run
chmod 0755 /usr/local/sbin/cclab-lab-run
echo "$LAB_USER ALL=(root) NOPASSWD: /usr/local/sbin/cclab-lab-run" > /etc/sudoers.d/cclab
chmod 0440 /etc/sudoers.d/cclab
visudo -cqf /etc/sudoers.d/cclab || die "the sudoers line for the lab command does not parse"

# ---------------------------------------------------------------- Mininet
# Debian's Mininet 2.3.0 imports distutils, which Python 3.12 dropped; setuptools ships a
# replacement that `import distutils` finds once setuptools' shim is active.
if ! python3 -c 'import mininet.net' >/dev/null 2>&1; then
  if python3 -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
    site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    [ -d "$site" ] || site=/usr/lib/python3/dist-packages
    printf 'import os; os.environ.setdefault("SETUPTOOLS_USE_DISTUTILS", "local"); import _distutils_hack; _distutils_hack.add_shim()\n' \
      > /usr/lib/python3/dist-packages/cclab-distutils-shim.pth
  fi
  python3 -c 'import mininet.net' || die "Mininet does not import under $(python3 --version)"
fi

# ---------------------------------------------------------------- Python environment
req="$KIT/vm/requirements.txt"
[ -f "$req" ] || die "missing $req"
if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv --system-site-packages "$VENV"
fi
stamp="$VENV/.cclab-requirements.sha256"
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing the Python environment into $VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q --progress-bar off -r "$req"
  echo "$want" > "$stamp"
else
  say "Python environment up to date"
fi
# The kit's own package, from wherever the checkout is mounted in the VM.
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$KIT_MOUNT" > "$site/cclab-kit.pth"
# The `cclab` command.  The .pth above is how an editable install points Python at a checkout;
# the command beside it runs the package from there, so an edit in the checkout is what runs.
cat > "$VENV/bin/cclab" <<EOF
#!/bin/sh
exec $VENV/bin/python3 -m cclab "\$@"
EOF
chmod 0755 "$VENV/bin/cclab"
cat > /etc/profile.d/cclab.sh <<EOF
export PATH=$VENV/bin:\$PATH
export CCLAB_KIT=$KIT_MOUNT
EOF
"$VENV/bin/python" -c 'import jupyterlab, otter, pandas, matplotlib' \
  || die "the Python environment is incomplete"

# ---------------------------------------------------------------- sysctls and modules
cat > /etc/sysctl.d/60-cclab.conf <<'EOF'
# Congestion-control labs: no cached metrics between flows, buffers big enough for a GEO BDP
# (50 Mbit/s x 600 ms = 3.75 MB; 64 MiB leaves room for several flows and deep queues).
net.ipv4.tcp_no_metrics_save = 1
net.core.rmem_max = 67108864
net.core.wmem_max = 67108864
net.ipv4.tcp_rmem = 4096 131072 67108864
net.ipv4.tcp_wmem = 4096 16384 67108864
net.ipv4.ip_forward = 1
EOF
cat > /etc/modules-load.d/cclab.conf <<'EOF'
# qdiscs and congestion controls the labs use
sch_netem
sch_fq
sch_tbf
sch_htb
tcp_bbr
tcp_vegas
tcp_htcp
tcp_dctcp
EOF
if [ -d /run/systemd/system ]; then
  sysctl -q --system >/dev/null || true
fi

# Every in-tree qdisc and congestion control the labs use must exist as a module (or be
# built in) for the kernel the VM runs.
kver=${CCLAB_KVER:-}
if [ -z "$kver" ]; then
  if [ -d "/lib/modules/$(uname -r)/kernel" ]; then kver=$(uname -r)
  else kver=$(ls -1 /lib/modules | sort -V | tail -n1)
  fi
fi
[ -n "$kver" ] && [ -d "/lib/modules/$kver" ] || die "no kernel modules installed (looked for $kver)"
for m in sch_netem sch_fq sch_tbf tcp_bbr tcp_vegas tcp_htcp; do
  modinfo -k "$kver" "$m" >/dev/null 2>&1 \
    || grep -q "/$m.ko" "/lib/modules/$kver/modules.builtin" \
    || die "kernel $kver lacks $m"
done

# ---------------------------------------------------------------- the kit's modules (DKMS)
. "$KIT/vm/kmod-dkms.sh"
dkms_conf="$KIT/kmod/dkms.conf"
if [ -f "$dkms_conf" ]; then
  pkg=$(kmod_package "$dkms_conf") || die "$dkms_conf lacks PACKAGE_NAME or PACKAGE_VERSION"
  name=${pkg% *} ver=${pkg#* }
  src=/usr/src/$name-$ver
  if kmod_current "$KIT/kmod" "$name" "$ver" "$kver" "$src"; then
    # The box's image was provisioned from these sources: about 2 min of compiling under
    # software emulation saved on vagrant up.
    say "kit modules $name $ver already built and installed for $kver from these sources"
  else
    # Registered again from the checkout: its sources differ from the ones DKMS has.
    dkms remove -m "$name" -v "$ver" --all >/dev/null 2>&1 || true
    rm -rf "$src"
    mkdir -p "$src"
    kmod_source_files "$KIT/kmod" | tar -C "$KIT/kmod" --null -T - -cf - | tar -C "$src" -xf -
    dkms add -m "$name" -v "$ver" >/dev/null
    kmod_build_install "$name" "$ver" "$kver" || die "DKMS build of $name $ver failed for $kver"
    say "kit modules $name $ver built and installed for $kver"
  fi
else
  say "kmod/dkms.conf not present: no kit modules to register with DKMS (skipped)"
fi

# ---------------------------------------------------------------- JupyterLab service
home=$(getent passwd "$LAB_USER" | cut -d: -f6)
token_file=/etc/cclab/jupyter-token
mkdir -p /etc/cclab
if [ ! -s "$token_file" ]; then
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$token_file"
fi
chmod 0640 "$token_file"
chgrp "$LAB_USER" "$token_file"
# Every cell of a notebook stays rendered (no windowing): long lab notebooks scroll and print
# whole, and a cell's output does not vanish while another runs far below it.  Each cell's run is
# timed (recordTiming): JupyterLab writes the kernel's timestamps of it into the cell's
# metadata.execution (iopub.status.busy, iopub.execute_input, shell.execute_reply, ...), which is
# saved with the notebook, so students and instructors see in the notebook's metadata when each
# cell ran and how long it took, and bench/lab_overhead.py --kept tells the time a lab's cells
# took outside its experiment runs (the grader ignores cell metadata; nbclient, which runs
# grading/run_master.py's and otter's notebooks, records the same timestamps).  The VM has no
# internet: JupyterLab does not offer to fetch news or look for updates.
install -d "$VENV/share/jupyter/lab/settings"
cat > "$VENV/share/jupyter/lab/settings/overrides.json" <<'EOF'
{"@jupyterlab/notebook-extension:tracker": {"windowingMode": "none", "recordTiming": true},
 "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false}}
EOF
# The student's notebooks live in the lab user's home (~/notebooks, on the VM's own disk): the
# shared checkout at $KIT_MOUNT may be read-only in the VM (libvirt's QEMU writes the share as its
# own user), and a copy there would be replaced by the next rsync.  Before JupyterLab starts,
# each lab notebook the student does not have yet is copied in; one the student has is never
# touched.  labkit.py is a link to the kit's, so a fixed kit reaches every lab, unless the
# student put a file of their own in its place.
cat > /usr/local/sbin/cclab-seed-notebooks <<EOF
#!/bin/sh
# Runs as the lab user before JupyterLab starts (cclab-jupyter.service): see vm/provision.sh.
set -eu
src=$KIT_MOUNT/notebooks
dest=\$HOME/notebooks
if [ ! -d "\$src" ]; then
  echo "cclab-seed-notebooks: \$src is not there (is the kit shared at $KIT_MOUNT?); nothing copied" >&2
  exit 0
fi
mkdir -p "\$dest"
for nb in "\$src"/*.ipynb; do
  [ -e "\$nb" ] || continue
  [ -e "\$dest/\${nb##*/}" ] || cp "\$nb" "\$dest/"
done
if [ ! -e "\$dest/labkit.py" ] || [ -L "\$dest/labkit.py" ]; then
  ln -sfn "\$src/labkit.py" "\$dest/labkit.py"
fi
EOF
chown root:root /usr/local/sbin/cclab-seed-notebooks
chmod 0755 /usr/local/sbin/cclab-seed-notebooks
cat > /etc/systemd/system/cclab-jupyter.service <<EOF
[Unit]
Description=JupyterLab for the congestion-control labs
After=network.target

[Service]
User=$LAB_USER
WorkingDirectory=$home
Environment=PATH=$VENV/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
Environment=CCLAB_KIT=$KIT_MOUNT
Environment=CCLAB_MODE=quick
ExecStartPre=/usr/local/sbin/cclab-seed-notebooks
ExecStart=/bin/sh -c 'exec $VENV/bin/jupyter lab --no-browser --ip=0.0.0.0 --port=8888 --ServerApp.root_dir=$home --IdentityProvider.token="\$(cat $token_file)"'
Restart=on-failure

[Install]
WantedBy=multi-user.target
EOF
systemctl enable cclab-jupyter.service >/dev/null 2>&1 || die "cannot enable cclab-jupyter.service"
# A notebook's first cells import pandas, matplotlib and otter.  Right after boot their files are
# not in memory, and under software emulation the first import took 35-40 s, against 15-19 s
# once the files were cached.  After JupyterLab has started, this unit imports them once as the
# lab user, at the lowest CPU and I/O priority, and exits: a student's first lab opens as fast
# as the next, and matplotlib's font list is made in the lab user's cache before a plot needs it.
# Then it starts tshark once, which reads its dissector libraries: in fresh boots, the first read
# of a lab 1 capture took 4.5 s longer than the second without this, and 0.9 s longer after it
# (two boots each, alternating; 10-12 s for the second read).  When both have
# run it leaves /run/cclab-warm/done (gone at the next boot), which a notebook can read.
# It stays active once it has run (RemainAfterExit), so provisioning's start below does not run it
# a second time on a boot where it already ran (a box's first `vagrant up`).
cat > /etc/systemd/system/cclab-warm.service <<EOF
[Unit]
Description=Load the labs' Python libraries and tshark into memory once after boot
After=cclab-jupyter.service

[Service]
Type=oneshot
RemainAfterExit=yes
User=$LAB_USER
WorkingDirectory=$home
Environment=MPLBACKEND=Agg
Nice=19
IOSchedulingClass=idle
StandardOutput=null
RuntimeDirectory=cclab-warm
ExecStart=$VENV/bin/python3 -c 'import pandas, matplotlib.pyplot, otter'
ExecStart=/usr/bin/tshark -G protocols
ExecStartPost=/usr/bin/touch /run/cclab-warm/done

[Install]
WantedBy=multi-user.target
EOF
systemctl enable cclab-warm.service >/dev/null 2>&1 || die "cannot enable cclab-warm.service"
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  systemctl restart cclab-jupyter.service
  systemctl start --no-block cclab-warm.service      # on this boot too, not only the next ones
  say "JupyterLab: http://localhost:8888/lab?token=$(cat "$token_file")"
fi
say "done"
