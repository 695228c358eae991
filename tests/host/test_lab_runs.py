"""How a lab's results are kept (labkit.run_staged), and the lab command's input checks
(labs/lab_command.py).  The experiments here are stand-ins that write files: what is tested is
the folder handling, which is the same for real runs (the in-VM lab tests run those)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(KIT / "notebooks"))
sys.path.insert(0, str(KIT / "labs"))

import labkit  # noqa: E402
import lab_command  # noqa: E402


def fake_runs(tag, fail=False):
    """experiments(out): one run folder holding `tag`; raises after writing it if fail."""
    def experiments(out):
        d = out / "exp" / "1"
        d.mkdir(parents=True)
        (d / "manifest.json").write_text(json.dumps({"tag": tag}))
        if fail:
            raise KeyboardInterrupt
        return [d]
    return experiments


def tag_of(d):
    return json.loads((Path(d) / "exp" / "1" / "manifest.json").read_text())["tag"]


@pytest.fixture(autouse=True)
def as_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.delenv("CCLAB_REPLAY", raising=False)


def test_a_run_is_recorded_and_a_rerun_of_the_same_mode_reuses_it(tmp_path):
    base = labkit.run_staged("lab1", "quick", tmp_path, fake_runs("q1"), progress=None)
    assert base == tmp_path / "lab1" and tag_of(base) == "q1"
    assert labkit.read_record("lab1", tmp_path)["mode"] == "quick"
    labkit.run_staged("lab1", "quick", tmp_path, fake_runs("q2"), progress=None)
    assert tag_of(base) == "q1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lab1"]       # no partial left


def test_an_interrupted_run_keeps_the_earlier_results_and_nothing_of_its_own(tmp_path):
    labkit.run_staged("lab1", "quick", tmp_path, fake_runs("q1"), progress=None)
    with pytest.raises(KeyboardInterrupt):
        labkit.run_staged("lab1", "full", tmp_path, fake_runs("f1", fail=True), progress=None)
    assert tag_of(tmp_path / "lab1") == "q1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lab1"]


def test_modes_sit_side_by_side_and_switching_back_runs_nothing(tmp_path):
    labkit.run_staged("lab1", "quick", tmp_path, fake_runs("q1"), progress=None)
    labkit.run_staged("lab1", "full", tmp_path, fake_runs("f1"), progress=None)
    assert tag_of(tmp_path / "lab1") == "f1" and tag_of(tmp_path / "lab1-quick") == "q1"
    said = []
    labkit.run_staged("lab1", "quick", tmp_path, fake_runs("q2"), progress=said.append)
    assert tag_of(tmp_path / "lab1") == "q1" and tag_of(tmp_path / "lab1-full") == "f1"
    assert any("kept" in s for s in said), said


def test_a_kept_folder_in_the_way_is_moved_on_never_deleted(tmp_path):
    labkit.run_staged("lab1", "quick", tmp_path, fake_runs("q1"), progress=None)
    labkit.run_staged("lab1", "full", tmp_path, fake_runs("f1"), progress=None)
    (tmp_path / "lab1" / "record.json").unlink()           # the active results lose their record
    labkit.run_staged("lab1", "full", tmp_path, fake_runs("f2"), progress=None)
    tags = sorted(tag_of(p) for p in tmp_path.iterdir() if (p / "exp").is_dir())
    assert tags == ["f1", "f2", "q1"]


def test_enrolling_after_a_run_runs_again_on_the_students_link_and_keeps_the_first(tmp_path):
    """Saved results are reused only for the link they were made on: after enrolling, the lab
    runs again (the self-study results kept beside it); switching modes back brings back kept
    results only when they are the same student's."""
    alice = {"id": "alice", "code": "ABCDE-FGH2J"}
    labkit.run_staged("lab1", "quick", tmp_path, fake_runs("own"), progress=None)
    said = []
    labkit.run_staged("lab1", "quick", tmp_path, fake_runs("alice"), said.append, {"student": alice})
    assert tag_of(tmp_path / "lab1") == "alice" and tag_of(tmp_path / "lab1-quick") == "own"
    assert "made on the lab's own link, not alice's: running again (they are kept)" in said[0], said
    assert labkit.read_record("lab1", tmp_path)["student"] == alice
    labkit.run_staged("lab1", "quick", tmp_path, fake_runs("again"), None, {"student": alice})
    assert tag_of(tmp_path / "lab1") == "alice"                         # the same link: reused
    labkit.run_staged("lab1", "full", tmp_path, fake_runs("alice-full"), None, {"student": alice})
    # back to quick: alice's quick results, put aside as lab1-quick when full ran, come back
    labkit.run_staged("lab1", "quick", tmp_path, fake_runs("never"), None, {"student": alice})
    assert tag_of(tmp_path / "lab1") == "alice"
    tags = sorted(tag_of(p) for p in tmp_path.iterdir() if (p / "exp").is_dir())
    assert tags == ["alice", "alice-full", "own"]


def test_a_full_run_limited_to_some_algorithms_estimates_their_flows_only(tmp_path):
    three = ["bbr", "cubic", "westwood"]
    limited, field = labkit.flow_seconds("lab2", "full", three), labkit.flow_seconds("lab2", "full")
    assert 0 < limited < field / 2              # 3 of lab 2's field of algorithms
    said = []
    labkit.run_staged("lab2", "full", tmp_path, fake_runs("f"), said.append, {"ccas": three})
    assert f"lab2: full mode: {limited / 60:.0f} min of flows (bbr, cubic, westwood only) (run " \
        "quick mode first" in said[0], said
    # A quick run here (limited too) gives the machine's ratio, from its own flows.
    quick = labkit.flow_seconds("lab2", "quick", three)
    labkit.run_staged("lab2", "quick", tmp_path / "q", fake_runs("q"), None, {"ccas": three})
    rec = labkit.read_record("lab2", tmp_path / "q")
    labkit.write_record("lab2", "quick", [], tmp_path / "q", dict(rec, seconds=quick * 2))
    said.clear()
    labkit.run_staged("lab2", "full", tmp_path / "q", fake_runs("f"), said.append, {"ccas": three})
    assert f"{limited / 60:.0f} min of flows (bbr, cubic, westwood only), about " \
        f"{limited * 2 / 60:.0f} min on this machine" in said[0], said


def test_quick_is_the_default_and_a_bad_mode_is_refused(monkeypatch):
    monkeypatch.delenv("CCLAB_MODE", raising=False)
    monkeypatch.delenv("CCLAB_QUICK", raising=False)
    assert labkit.mode() == "quick"
    monkeypatch.setenv("CCLAB_MODE", "Full")
    with pytest.raises(ValueError, match="quick or full"):
        labkit.mode()


def test_unprivileged_runs_go_through_the_lab_command(tmp_path, monkeypatch):
    """Not root: run_staged runs `sudo -n HELPER LAB MODE DEST`, relays its lines, and turns
    a failure into one error naming it (a stand-in helper, through a stand-in sudo)."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "sudo").write_text('#!/bin/sh\n[ "$1" = -n ] && shift; exec "$@"\n')
    helper = tmp_path / "helper"
    helper.write_text('#!/bin/sh\necho "running $1 $2 into $3"\n'
                      'mkdir -p "$3/$1" && echo \'{"mode": "\'$2\'"}\' > "$3/$1/record.json"\n')
    for f in (bin_ / "sudo", helper):
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}:{os.environ['PATH']}")
    monkeypatch.setenv(labkit.ENV_HELPER, str(helper))
    said = []
    base = labkit.run_staged("lab1", "quick", tmp_path / "sub", fake_runs("x"), said.append)
    assert said == [f"running lab1 quick into {tmp_path / 'sub'}"]
    assert labkit.read_record("lab1", tmp_path / "sub")["mode"] == "quick" and base.is_dir()
    helper.write_text('#!/bin/sh\necho "cclab-lab-run: lab2: RunError: no such profile" >&2\nexit 1\n')
    with pytest.raises(labkit.RunFailed, match="no such profile"):
        labkit.run_staged("lab2", "quick", tmp_path / "sub", fake_runs("x"), None)
    # A command that dies without a reason: how it ended and its last line, not the line alone.
    helper.write_text('#!/bin/sh\necho "[run 1/1] lab1-wifi (seed 1): elapsed 0:00"\nkill -KILL $$\n')
    with pytest.raises(labkit.RunFailed, match=r"killed by SIGKILL \(its last line: \[run 1/1\]"):
        labkit.run_staged("lab1", "quick", tmp_path / "other", fake_runs("x"), None)
    # A crash: faulthandler's dump names where (the innermost frame, and the kit's own caller).
    helper.write_text('#!/bin/sh\n'
                      'echo "Fatal Python error: Segmentation fault" >&2\n'
                      'echo "Current thread 0x00007f0487318040 (most recent call first):" >&2\n'
                      'echo \'  File "/opt/cclab/venv/lib/python3.11/site-packages/pandas/core/'
                      'groupby/groupby.py", line 4541 in blk_func\' >&2\n'
                      'echo \'  File "/kit/cclab/analysis/fidelity.py", line 460 in check_cpu\' >&2\n'
                      'echo "Extension modules: numpy._core._multiarray_umath (total: 1)" >&2\n'
                      'kill -SEGV $$\n')
    with pytest.raises(labkit.RunFailed, match=re.escape(
            "killed by SIGSEGV: it crashed in pandas/core/groupby/groupby.py:4541 (blk_func), "
            "called from cclab/analysis/fidelity.py:460 (check_cpu)")):
        labkit.run_staged("lab1", "quick", tmp_path / "other", fake_runs("x"), None)
    helper.write_text('#!/bin/sh\necho "[run 1/1] lab1-wifi"\nexit 3\n')
    with pytest.raises(labkit.RunFailed, match=r"exit status 3 and gave no reason \(its last"):
        labkit.run_staged("lab1", "quick", tmp_path / "other", fake_runs("x"), None)


@pytest.mark.parametrize("argv, why", [
    ([], "usage"),
    (["lab5", "quick", "/tmp/x"], "no lab 'lab5'"),
    (["lab1", "fast", "/tmp/x"], "mode must be quick or full"),
    (["lab1", "quick", "rel/path"], "absolute path"),
    (["lab1", "quick", "/tmp/x", "--ccas"], "--ccas needs"),
    (["lab1", "quick", "/tmp/x", "--ccas", "cubic,$(reboot)"], "not a congestion-control name"),
    (["lab1", "quick", "/tmp/x", "--ccas", ","], "(empty)"),
    (["lab1", "quick", "/tmp/x", "extra"], "usage"),
    (["lab1", "quick", "/tmp/x", "--student", "s1"], "go together"),
    (["lab1", "quick", "/tmp/x", "--student", "s1;id", "--code", "ABCDE-FGH2J"], "not a student ID"),
    (["lab1", "quick", "/tmp/x", "--student", "s1", "--code"], "--code needs a value"),
])
def test_the_lab_command_refuses_bad_input_in_one_line(argv, why):
    r = subprocess.run([sys.executable, "-I", str(KIT / "labs" / "lab_command.py"), *argv],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r
    assert r.stdout == "" and len(r.stderr.splitlines()) == 1 and why in r.stderr, r.stderr
    assert r.stderr.startswith("cclab-lab-run: ")


def test_the_lab_command_parses_good_input():
    assert lab_command.parse(["lab2", "full", "/home/lab/s", "--ccas", "cubic,bbr"]) == (
        "lab2", "full", Path("/home/lab/s"), ["cubic", "bbr"], None)
    assert lab_command.parse(["lab1", "quick", "/home/lab/s", "--student", "s1", "--code",
                              "ABCDE-FGH2J"])[-1] == {"id": "s1", "code": "ABCDE-FGH2J"}


def test_the_lab_command_child_never_fails_silently(capfd):
    """as_caller's child: any exception in its work is one line naming it, and status 1."""
    import pwd
    me = pwd.getpwuid(os.getuid())

    def work():
        raise ValueError("no such run\nsecond line")
    assert lab_command.as_caller(me, work, "cannot put the results in /x") == 1
    err = capfd.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("cclab-lab-run: cannot put the results in /x as ")
    assert err[0].endswith("ValueError: no such run") or "Operation not permitted" in err[0], err


def test_not_root_a_module_the_kernel_has_is_offered(tmp_path, monkeypatch):
    """Lab 2's candidates as the lab user: loaded ones, and those the kernel can load (the lab
    command loads them as root when the run needs them); not one the kernel lacks."""
    rel = tmp_path / os.uname().release
    rel.mkdir()
    (rel / "modules.dep").write_text("kernel/net/ipv4/tcp_westwood.ko.xz:\n"
                                     "kernel/net/ipv4/tcp_bbr.ko.xz:\n")
    (rel / "modules.builtin").write_text("kernel/net/ipv4/tcp_cubic.ko\n")
    monkeypatch.setattr(labkit, "MODULES_DIR", tmp_path)
    monkeypatch.setattr(labkit, "_available", lambda: ["reno", "cubic"])
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert labkit.offered_ccas(["bbr", "cubic", "westwood", "nosuch", "reno"]) == [
        "bbr", "cubic", "westwood", "reno"]


# ---------------------------------------------------------------- untrusted runs made again

class StandInRun:
    """runner.Run's stand-in: execute() writes a complete run folder numbered by attempt."""
    made = []

    def __init__(self, exp, rep, out, stamp):
        self.dir = Path(out) / exp.name / f"{stamp}-{rep}"
        self.errors, self.warnings, self.handshake_lost = [], [], []

    def execute(self, modules):
        self.dir.mkdir(parents=True)
        StandInRun.made.append(self.dir)
        (self.dir / "manifest.json").write_text(json.dumps(
            {"status": "complete", "attempt": len(StandInRun.made)}))
        return self.dir


@pytest.fixture
def stand_in(monkeypatch):
    from cclab import measure, runner, spec
    monkeypatch.setattr(runner, "Run", StandInRun)
    monkeypatch.setattr(runner, "preflight", lambda exp: None)
    monkeypatch.setattr(runner, "ensure_ccas", lambda exp: {})
    monkeypatch.setattr(measure, "missing_events", lambda events: [])
    StandInRun.made = []
    return runner, spec.from_dict({"profile": "wired", "flow": [{"cca": "cubic", "duration": "1s"}]},
                                  "again")


def test_an_untrusted_run_is_made_again_and_the_first_kept(tmp_path, stand_in):
    from cclab import results
    runner, exp = stand_in
    verdicts = iter(["fidelity verdict: cpu_headroom", None])
    said = []
    (d,) = runner.run(exp, out=tmp_path, progress=said.append, judge=lambda d: next(verdicts))
    assert len(StandInRun.made) == 2
    assert json.loads((d / "manifest.json").read_text())["attempt"] == 2
    (old,) = [p for p in (tmp_path / "again").iterdir() if p != d]
    assert old.name == d.name + ".superseded-1"
    assert json.loads((old / "manifest.json").read_text()) == {
        "status": "complete", "attempt": 1,
        "superseded": {"attempt": 1, "why": "fidelity verdict: cpu_headroom"}}
    assert any("not trusted (fidelity verdict: cpu_headroom); running it again, attempt 2 of 3"
               in s and old.name in s for s in said), said
    # a folder of runs lists the one kept, not the one it replaced
    assert results.runs(tmp_path) == [d]


def test_a_run_never_trusted_is_kept_after_the_last_attempt(tmp_path, stand_in):
    runner, exp = stand_in
    (d,) = runner.run(exp, out=tmp_path, judge=lambda d: "fidelity verdict: rate_backlogged (down)")
    assert len(StandInRun.made) == 1 + runner.RERUNS
    assert json.loads((d / "manifest.json").read_text())["attempt"] == 1 + runner.RERUNS
    assert "superseded" not in json.loads((d / "manifest.json").read_text())
    assert sorted(p.name for p in (tmp_path / "again").iterdir()) == sorted(
        [d.name] + [f"{d.name}.superseded-{k}" for k in range(1, 1 + runner.RERUNS)])


def test_a_superseded_manifest_gets_only_the_runners_note(tmp_path):
    """The files beside a run's manifest (its fidelity verdict, the module parameters it ran
    with) stay their own files when the run is set aside: manifest.json keeps what the runner
    wrote, plus "superseded", and readers still find the verdict through "beside"."""
    from cclab import results, runner
    from cclab.analysis import fidelity, synthetic
    d = synthetic.make_run(tmp_path / "exp" / "20250101-000000-1", ccas=("cubic",), achieved=0.7)
    written = json.loads((d / "manifest.json").read_text())
    assert written["beside"] == results.BESIDE
    verdict = fidelity.write_verdict(d)
    results.write_beside(d, "module_params", {"tcp_cubic": {"beta": "717"}})
    beside = {name: (d / name).read_bytes() for name in results.BESIDE.values()}
    kept = runner.supersede(d, 1, "fidelity verdict: rate_backlogged (down)")
    assert kept.name == d.name + ".superseded-1" and not d.exists()
    assert json.loads((kept / "manifest.json").read_text()) == dict(
        written, superseded={"attempt": 1, "why": "fidelity verdict: rate_backlogged (down)"})
    assert {name: (kept / name).read_bytes() for name in beside} == beside
    m = results.read_manifest(kept)
    assert m["fidelity"]["ok"] is verdict["ok"] is False
    assert m["module_params"] == {"tcp_cubic": {"beta": "717"}}


def test_untrusted_names_the_failed_checks(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    checks = [{"name": "cpu_headroom", "ok": False}, {"name": "idle_rtt", "ok": True},
              {"name": "rate_backlogged", "ok": False, "direction": "down"},
              {"name": "queue", "ok": None, "direction": "up"}]
    (d / "manifest.json").write_text(json.dumps({"fidelity": {"ok": False, "checks": checks}}))
    assert labkit.untrusted(d) == "fidelity verdict: cpu_headroom, rate_backlogged (down)"
    (d / "manifest.json").write_text(json.dumps({"fidelity": {"ok": True, "checks": checks[1:2]}}))
    assert labkit.untrusted(d) is None


def test_goodput_in_bins_sums_the_streams_of_each_report():
    """labkit.binned_mbps, behind labs 1 and 2's goodput plots: two streams' 0.1 s reports of
    one flow, 1 Mbit/s each for the first 0.5 s and 3 Mbit/s each after, with a 0.2 s report
    at the end; bins of 0.5 s from the first report's start."""
    import pandas as pd
    rows = []
    for k in range(10):
        a = 2.0 + 0.1 * k
        for stream in (1, 2):
            rate = 1e6 if k < 5 else 3e6
            rows.append({"t_start": a, "t_end": a + 0.1, "stream": stream, "bytes": rate * 0.1 / 8})
    rows += [{"t_start": 3.0, "t_end": 3.2, "stream": s, "bytes": 5e6 * 0.2 / 8} for s in (1, 2)]
    mbps = labkit.binned_mbps(pd.DataFrame(rows), width=0.5)
    assert list(mbps.index) == pytest.approx([0.0, 0.5, 1.0])
    assert list(mbps) == pytest.approx([2.0, 6.0, 10.0])
    since_run = labkit.binned_mbps(pd.DataFrame(rows), width=0.5, since=0.0)
    assert list(since_run.index) == pytest.approx([2.0, 2.5, 3.0])
    assert labkit.binned_mbps(pd.DataFrame(columns=["t_start", "t_end", "bytes"])).empty


def test_a_run_limited_to_some_algorithms_skips_files_without_them(tmp_path, monkeypatch):
    """run_lab(..., ccas=[...]) runs each file's flows of those algorithms; a file that has none
    (lab 1's wired-delay: Vegas and BBR only) is skipped with a line saying so, not refused by the
    engine ("an experiment needs at least one [[flow]]": vagrant's cubic-only lab 1 run failed on
    it).  Nothing at all to run is one clear error."""
    from cclab import runner
    ran = []

    def fake_run(exp, out, progress=None, judge=None):
        ran.append((exp.name, sorted({f.cca for f in exp.flows})))
        d = Path(out) / exp.name / "1"
        d.mkdir(parents=True)
        (d / "manifest.json").write_text("{}")
        return [d]

    monkeypatch.setattr(runner, "run", fake_run)
    monkeypatch.setattr(labkit, "run_staged",
                        lambda lab, mode, root, experiments, progress, record: experiments(tmp_path / "out"))
    said = []
    labkit.run_lab("lab1", "quick", tmp_path, ccas=["cubic"], progress=said.append)
    assert ran == [("lab1-loss", ["cubic"]), ("lab1-wifi", ["cubic"]), ("lab1-wired", ["cubic"])], ran
    assert "lab1: skipped: wired-delay.toml runs only bbr, vegas, none of cubic" in said, said
    with pytest.raises(labkit.NoFlowSelected, match=r"^lab1: no quick-mode experiment runs any of westwood$"):
        labkit.run_lab("lab1", "quick", tmp_path / "none", ccas=["westwood"], progress=None)
    with pytest.raises(labkit.NoFlowSelected, match=r"^wired-delay.toml runs only bbr, vegas, none of cubic$"):
        labkit.load_experiment(KIT / "labs" / "lab1" / "quick" / "wired-delay.toml", ["cubic"])
