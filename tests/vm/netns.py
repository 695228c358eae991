"""A minimal three-namespace path for the VM's own smoke tests: sender - router - receiver.

The experiment engine (cclab) builds richer topologies; this one only depends on iproute2,
so that it tests the VM itself.
"""
import json
import subprocess
import uuid


def sh(*args, check=True):
    return subprocess.run(args, check=check, capture_output=True, text=True)


def ns(name, *args, check=True):
    return sh("ip", "netns", "exec", name, *args, check=check)


class Path:
    """snd (10.9.1.1) -- rtr -- rcv (10.9.2.1); the data direction leaves rtr on 'rtr-r'."""

    def __init__(self):
        tag = uuid.uuid4().hex[:6]
        self.snd, self.rtr, self.rcv = (f"cclabt-{tag}-{r}" for r in ("s", "r", "c"))
        self.rcv_ip = "10.9.2.1"
        self.procs = []

    def __enter__(self):
        try:
            for n in (self.snd, self.rtr, self.rcv):
                sh("ip", "netns", "add", n)
                ns(n, "ip", "link", "set", "lo", "up")
            sh("ip", "link", "add", "s0", "netns", self.snd, "type", "veth", "peer", "rtr-s", "netns", self.rtr)
            sh("ip", "link", "add", "c0", "netns", self.rcv, "type", "veth", "peer", "rtr-r", "netns", self.rtr)
            for n, dev, addr in ((self.snd, "s0", "10.9.1.1/24"), (self.rtr, "rtr-s", "10.9.1.2/24"),
                                 (self.rtr, "rtr-r", "10.9.2.2/24"), (self.rcv, "c0", "10.9.2.1/24")):
                ns(n, "ip", "addr", "add", addr, "dev", dev)
                ns(n, "ip", "link", "set", dev, "up")
                ns(n, "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off")
            ns(self.snd, "ip", "route", "add", "default", "via", "10.9.1.2")
            ns(self.rcv, "ip", "route", "add", "default", "via", "10.9.2.2")
            ns(self.rtr, "sysctl", "-qw", "net.ipv4.ip_forward=1")
            for n in (self.snd, self.rcv):
                ns(n, "sysctl", "-qw", "net.ipv4.tcp_rmem=4096 131072 67108864")
                ns(n, "sysctl", "-qw", "net.ipv4.tcp_wmem=4096 16384 67108864")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def shape_data(self, *netem_args):
        """Replace the root qdisc of the router's egress towards the receiver."""
        ns(self.rtr, "tc", "qdisc", "replace", "dev", "rtr-r", "root", "netem", *netem_args)

    def spawn(self, name, *args):
        p = subprocess.Popen(["ip", "netns", "exec", name, *args],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def sockets(self, name, port=5201):
        """TCP sockets towards `port` in namespace `name`, as ss reports them (cc name, bytes).
        With -e the head line carries the socket's cookie (`sk:`), unique for its lifetime."""
        out = ns(name, "ss", "-tineH", "dst", f":{port}").stdout
        socks, cur = [], None
        for line in out.splitlines():
            if not line.startswith((" ", "\t")):
                cur = {"head": line}
                socks.append(cur)
            elif cur is not None:
                cur["info"] = line.split()
        return socks

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()
        for n in (self.snd, self.rtr, self.rcv):
            sh("ip", "netns", "pids", n, check=False)
            pids = sh("ip", "netns", "pids", n, check=False).stdout.split()
            for pid in pids:
                sh("kill", "-9", pid, check=False)
            sh("ip", "netns", "del", n, check=False)
        return False


def iperf3_json(path, *args):
    r = ns(path.snd, "iperf3", "-J", "-c", path.rcv_ip, *args, check=False)
    data = json.loads(r.stdout or "{}")
    if r.returncode != 0 or "error" in data:
        raise RuntimeError(f"iperf3 failed: {data.get('error', r.stderr.strip())}")
    return data
