"""`cclab shell EXPERIMENT`: Mininet's command line on an experiment's dumbbell, built and
shaped as a run builds it, with no flow started.

The network is the one `cclab run` makes (topo.Network: Mininet hosts for the servers, the
clients and the two routers, the profile's qdiscs on the routers' core link, each host's
congestion-control default and buffers), so what a student tries by hand -- a ping across the
bottleneck, `tc -s qdisc` on a router, an iperf3 of their own -- meets the link the experiment's
flows meet.  Mininet's CLI takes the commands (its answers go to standard error, Mininet's
log): `nodes`, `net`, `dump`, `<node> <command>` (e.g. `cc-c1 ping -c 3 cc-s1`; a server's or
a client's name in a command stands for its address), `exit`.

It needs root, like a run, and holds the machine's run state while it is open (one run or
shell at a time).  On exit, end of input, SIGTERM or SIGHUP every namespace, interface and
process it made is removed; after a shell killed outright, `cclab clean` removes them.
"""

from __future__ import annotations

import re
import signal
import sys

from . import interrupts, runner, state, topo
from .spec import Experiment


class ShellEnded(SystemExit):
    """SIGTERM or SIGHUP while the CLI runs (Mininet's CLI would swallow a KeyboardInterrupt):
    exit status 128 + the signal's number."""

    def __init__(self, name: str):
        super().__init__(128 + signal.Signals[name].value)


# A server's or a client's name as a word of a command (not part of an interface's name).
HOST_WORD = re.compile(r"(?<![\w.-])(cc-[sc]\d+)(?![\w.-])")


def kit_cli():
    """Mininet's CLI, taught the kit's node names: a name with a dash is one word (Mininet's
    own parser stops at the dash), and a server's or client's name in a command stands for its
    address (topo.address; Mininet would ask the node's ifconfig)."""
    from mininet.cli import CLI

    class KitCLI(CLI):
        identchars = CLI.identchars + "-"

        def default(self, line):
            node, _, rest = line.strip().partition(" ")
            super().default(f"{node} {HOST_WORD.sub(lambda m: topo.address(m.group(1)), rest)}")

    return KitCLI


def banner(exp: Experiment) -> str:
    """What the student has in front of them: the nodes and their addresses, where the link is
    shaped, and a first command to try."""
    link = exp.link
    pairs = range(1, link.pairs + 1)
    shaped = topo.shaped(link)
    node, dev = (shaped[0].node, shaped[0].dev) if shaped else (topo.R1, topo.CORE1)
    lines = [f"cclab shell: {exp.name} on profile {link.name}"
             + (f" ({link.summary})" if link.summary else ""),
             "  servers: " + ", ".join(f"{topo.server(i)} {topo.address(topo.server(i))}" for i in pairs),
             "  clients: " + ", ".join(f"{topo.client(i)} {topo.address(topo.client(i))}" for i in pairs),
             f"  routers: {topo.R1} and {topo.R2}; shaped: "
             + ("; ".join(f"{s.direction} on {s.node} {s.dev}" for s in shaped) or "nothing"),
             f"  try: {topo.client(1)} ping -c 3 {topo.server(1)}   |   "
             f"{node} tc -s qdisc show dev {dev}   |   exit"]
    return "\n".join(lines)


def shell(exp: Experiment, stdin=None) -> int:
    """Build the experiment's network, run Mininet's CLI on it until exit or end of input, and
    remove everything it made.  Raises runner.RunError when it cannot start."""
    runner.preflight(exp, "cclab shell")
    runner.ensure_ccas(exp)
    st = state.RunState(f"cclab shell {exp.name}")
    try:
        st.acquire()
    except RuntimeError as e:
        raise runner.RunError(str(e)) from None
    # SIGTERM or SIGHUP ends the shell; Ctrl-C stays Mininet's (it ends one command)
    with interrupts.interruptible(ShellEnded, sigint=False):
        net = topo.Network(exp, on_node=st.add_node)
        try:
            net.start()
            from mininet.log import setLogLevel
            setLogLevel("output")        # the CLI's answers are Mininet's "output" log level
            print(banner(exp), flush=True)
            kit_cli()(net.net, stdin=stdin or sys.stdin)
            return 0
        finally:
            with interrupts.held():
                left = st.tear_down(net.stop)
                if left:
                    print(f"cclab shell: processes still in its namespaces: {left}; "
                          "run `cclab clean`", file=sys.stderr)
