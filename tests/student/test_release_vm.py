"""The student release works on its own: grading/release.py writes it, its own vm/run.sh boots
the lab VM from it (the image is the kit's: the release's vm/ and kmod/ are the kit's, so their
key is the same), and its lab 1 student notebook runs its experiments as the lab user, through
the lab command, to the notebook's own record check.  The student notebook has no answers, so
only the cells up to and including the experiment cell must run without an error."""
import subprocess
import sys
from pathlib import Path

KIT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(KIT))

GUEST = r'''
set -eu
user=$(sed -n 's/^User=//p' /etc/systemd/system/cclab-jupyter.service)
home=$(getent passwd "$user" | cut -d: -f6)
cp -r /kit/notebooks "$home/course" && chown -R "$user:" "$home/course"
cd "$home/course"
runuser -u "$user" -- env HOME="$home" CCLAB_KIT=/kit MPLBACKEND=Agg python3 - <<'EOF'
import nbformat
from nbclient import NotebookClient
nb = nbformat.read("lab1.ipynb", as_version=4)
NotebookClient(nb, timeout=1800, kernel_name="python3", allow_errors=True,
               resources={"metadata": {"path": "."}}).execute()
code = [c for c in nb.cells if c.cell_type == "code"]
run = next(i for i, c in enumerate(code) if "run_lab(" in c.source)
for c in code[:run + 1]:
    for o in c.get("outputs", []):
        assert o.get("output_type") != "error", (c.source[:80], o.get("ename"), o.get("evalue"))
out = "".join(o.get("text", "") for o in code[run].get("outputs", []))
assert "results look real" in out, out[-2000:]
print("RELEASE-LAB1-OK")
EOF
test "$(stat -c %U submission/lab1/record.json)" = "$user"
'''


def test_the_release_boots_and_its_lab1_notebook_runs_as_the_lab_user(tmp_path):
    from grading import release
    rel = release.release(tmp_path / "course", ["lab1", "lab2", "lab3", "lab4", "lab5"])
    key = [subprocess.run([str(k / "vm" / "build-image.sh"), "--print-key"], capture_output=True,
                          text=True, cwd=k).stdout.strip() for k in (rel, KIT)]
    assert key[0] == key[1], f"the release's VM inputs differ from the kit's: {key}"
    r = subprocess.run([str(rel / "vm" / "run.sh"), "--timeout", "2400", "--", "bash", "-c", GUEST],
                       capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0 and "RELEASE-LAB1-OK" in r.stdout, (r.stdout[-3000:], r.stderr[-2000:])
