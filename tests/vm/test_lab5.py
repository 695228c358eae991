"""Lab 5's connection driver in the lab VM, as root: the two-path topology, a connection on each
path read through tcp_info, the switch to BBR on the lossy one, and nothing left behind.  The
notebook itself runs as a student runs it, in JupyterLab as the lab user (tests/student)."""

import json
import sys
from pathlib import Path

KIT = Path(__file__).resolve().parents[2]
LAB5 = KIT / "labs" / "lab5"
sys.path.insert(0, str(LAB5))

import tuner_support as ts  # noqa: E402
from cclab import state  # noqa: E402
from cclab.topo import run_in  # noqa: E402
from lab_notebooks import namespaces  # noqa: E402

ref = ts.load_reference()


def test_driver_reads_tcp_info_switches_and_cleans_up():
    before = namespaces()
    with ts.TwoPaths() as net:
        # the engine built them: a kit shell per node, found as `cclab clean` finds them
        assert set(state.kit_shells().values()) == {"cc-pcli", "cc-prtr-a", "cc-prtr-b",
                                                     "cc-psrv-a", "cc-psrv-b"}, state.kit_shells()
        qdisc = run_in(net.net.node("cc-prtr-b"), ["tc", "qdisc", "show", "dev", "cc-prtr-b-s"])
        assert "netem" in qdisc and "loss 10%" in qdisc and "rate 20Mbit" in qdisc, qdisc

        # no ARP through path B's loss: every link end has a permanent entry for the other
        # end, with the MAC that end really has
        def ip_j(end, *argv):
            return json.loads(run_in(net.net.node(end.node), ["ip", "-j", *argv]))

        for a, b in net.links():
            for here, there in ((a, b), (b, a)):
                mac = ip_j(there, "link", "show", "dev", there.dev)[0]["address"]
                entries = ip_j(here, "neigh", "show", "dev", here.dev)
                assert [(e["dst"], e["lladdr"], e["state"]) for e in entries] == [
                    (there.addr, mac, ["PERMANENT"])], (here, entries)
        ka, kb = net.key("a"), net.key("b")
        assert ka == "10.51.1.1" and kb == "10.51.2.1"
        clean = net.connect_once("a", "htcp", 0.4)
        assert clean["final_alg"] == "htcp" and clean["switched_at"] is None
        assert 19_000 < clean["min_rtt_us"] < 40_000, clean
        assert 0.5e6 < clean["delivery_rate"] < 3.2e6, clean          # 20 Mbit/s = 2.5 MB/s
        assert clean["segs_out"] > 50
        lossy = net.connect_once("b", "cubic", 0.4, ref.should_switch)
        assert lossy["final_alg"] == "bbr" and lossy["switched_at"] is not None, lossy
        assert lossy["total_retrans"] > 0
    assert namespaces() == before
    assert state.kit_shells() == {} and state.leftover_interfaces() == []
