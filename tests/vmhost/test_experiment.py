"""vm/experiment.sh on the host, with the real image: the README's example runs headless in the
guest and its results and plot come back into the checkout, and the plot reads as it should
(tests/host/plot_checks.py); a bad file fails before any boot.

Run by `make test-guest` (make vm-test) after the image is built (it boots the guest, so it is
not in `make check`).
"""
import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

KIT = Path(__file__).resolve().parents[2]
sys.path[:0] = [p for p in (str(KIT), str(KIT / "tests" / "host")) if p not in sys.path]


def spec_file(body):
    name = f"vmhost-{uuid.uuid4().hex[:8]}"
    folder = KIT / "results" / "vmhost-specs"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.toml"
    path.write_text(f'name = "{name}"\nprofile = "wired"\n' + body)
    return name, path


def test_experiment_runs_headless_and_its_results_come_back():
    """The README's first command, as written: its run and plot come back into the checkout's
    results/cubic-vs-bbr/, beside any earlier runs (which stay).  The plot shows the data each
    flow got through the link (ss's delivered counter: the example samples ss at 20 Hz)
    averaged over bins it names, under the link rate line it draws (a flow's bin at most
    1.05 x the rate, all flows' at most 1.10 x), and no RTT of 0 ms
    (plot_checks.timeseries_problems, which prints each flow's highest bin and the rate)."""
    out = KIT / "results" / "cubic-vs-bbr"
    before = set(out.iterdir()) if out.is_dir() else set()
    r = subprocess.run(["vm/experiment.sh", "examples/cubic-vs-bbr.toml", "--quick"], cwd=KIT,
                       capture_output=True, text=True, timeout=900)
    made = (set(out.iterdir()) if out.is_dir() else set()) - before
    try:
        assert r.returncode == 0, r.stderr[-2000:]
        lines = [ln.split(": ", 1)[1] for ln in r.stdout.splitlines()
                 if ln.startswith("results: ")]
        assert len(lines) == 1, r.stdout[-2000:]
        run_dir = KIT / lines[0]
        assert run_dir.parent == out and made == {run_dir}, (run_dir, made)
        assert before <= set(out.iterdir())                  # earlier runs are kept
        man = json.loads((run_dir / "manifest.json").read_text())
        assert man["status"] == "complete" and man["kernel"], man.get("error")
        flows = (run_dir / "flows.csv").read_text()
        assert "cubic" in flows and "bbr" in flows, flows
        iperf = (run_dir / "iperf.csv").read_text().splitlines()
        assert len(iperf) > 3, iperf
        png = run_dir / "timeseries.png"
        assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        import plot_checks
        from cclab.analysis import data
        problems, summary = plot_checks.timeseries_problems(data.RunData(run_dir))
        print(summary)
        assert not problems, summary + "\n" + "\n".join(problems)
        assert "cubic" in summary and "bbr" in summary and "all flows" in summary, summary
        assert "delivered (ss delivered) per 500 ms bin" in summary, summary
    finally:
        for d in made:
            shutil.rmtree(d, ignore_errors=True)
        if out.is_dir() and not any(out.iterdir()):
            out.rmdir()


def test_bad_experiment_file_fails_before_booting():
    name, spec = spec_file('[[flow]]\ncca = "cubic"\nduration = "3s"\nspeed = "fast"\n')
    try:
        r = subprocess.run([str(KIT / "vm/experiment.sh"), str(spec)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
        assert "speed" in r.stderr and "booted" not in r.stderr, r.stderr[-2000:]
        assert not (KIT / "results" / name).exists()
    finally:
        spec.unlink()
