"""The report renders (Markdown and HTML) and the command line works."""

import json

from cclab.analysis import __main__ as cli
from cclab import results
from cclab.analysis import report, synthetic


def test_report_renders(tmp_path):
    for i, a in enumerate((1.0, 0.6), 1):
        synthetic.make_run(tmp_path / "res" / "exp" / f"r{i}", experiment="exp", repetition=i,
                           ccas=("cubic", "search"), duration=2.0, achieved=a, seed=i)
    files = report.build(tmp_path / "res", tmp_path / "out", html=True)
    md = (tmp_path / "out" / "exp" / "report.md").read_text()
    assert "## Fidelity verdicts" in md and "UNTRUSTWORTHY" in md and "| OK |" in md
    assert "## Metrics per algorithm" in md and "goodput_bps" in md
    assert "kernel" in md and "0123456789" in md
    for img in ("timeseries.png", "throughput_delay.png", "bars.png", "search_norm_diff.png"):
        assert f"]({img})" in md
        assert (tmp_path / "out" / "exp" / img).stat().st_size > 1000
    html = (tmp_path / "out" / "exp" / "report.html").read_text()
    assert "<table>" in html and '<img src="timeseries.png"' in html
    assert len(files) == 2
    # the verdicts were recorded
    assert json.loads((tmp_path / "res" / "exp" / "r2" / "fidelity.json").read_text())["ok"] is False


def test_cli(tmp_path, capsys):
    d = synthetic.make_run(tmp_path / "r", ccas=("cubic",), idle_rtt_extra_ms=9)
    assert cli.main(["verdict", str(d), "--no-write"]) == 0
    out = capsys.readouterr().out
    assert "UNTRUSTWORTHY" in out and "idle_rtt" in out
    assert not (d / "fidelity.json").exists() and "fidelity" not in results.read_manifest(d)
    assert cli.main(["verdict", str(d), "--strict"]) == 2
    assert json.loads((d / "fidelity.json").read_text())["ok"] is False
    capsys.readouterr()
    assert cli.main(["metrics", str(d), "--per", "summary"]) == 0
    assert "goodput_bps" in capsys.readouterr().out
    assert cli.main(["verdict", str(tmp_path / "nothing")]) == 1
