"""The student's journey, as a student takes it, from the repository a course hands out:
grading/release.py writes the student release, the instructor commits it as the course's
repository, the student clones that, and in the clone the README's own command
(`vm/run.sh --systemd --forward 8888 -- sleep 3600`, word for word) boots the lab VM the way the
Vagrant VM boots (systemd as PID 1, JupyterLab started by its unit as the lab user, its port
forwarded to this host's 127.0.0.1 only).  A real browser (Debian's chromium, headless, driven
by Playwright) then does every lab in JupyterLab: it opens the notebook with the address and
token vm/run.sh prints, runs every cell in quick mode (experiments through the lab command, as the lab
user; in labs 1, 3 and 4 on the student's own link, from the ID and link code typed into the
notebook's enrolment cell), and the notebook's export cell makes the submission zip.  The
instructor's grader (grading/grade.py, run on this host as an instructor runs it, each submission
as `nobody`, with the course secret) then grades each zip: full marks, while the same run with
numbers edited after it is caught.

Each notebook is the lab's solution notebook as grading/build.py makes it (answers filled in,
the export cell otter adds; its checks, like the student version's, the public cases only), uploaded into a new folder the way a student uploads a file; the
release's own notebooks (no answers) wait in ~/notebooks.  Kept, in results/student-test/
(CCLAB_ARTIFACTS): screenshots of each notebook and its plots, the submission zips, the
gradebooks.  Each lab's run (its results and executed notebook, <runs>/quick/<lab>/ and
<lab>.ipynb, as grading/run_master.py --keep lays them out, with the browser's time for each
notebook in times.json) goes to CCLAB_STUDENT_RUNS (default: <artifacts>/runs): the scorecard is
made from them here, and bench/lab_overhead.py --kept prints their cost beyond the flows.

Run by `make test-student`, the last step of `make test` (needs chromium and Playwright, which
.ci/run installs, and a Python the user `nobody` can run for the grader: `make grader-venv`).
"""
from __future__ import annotations

import base64
import csv
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(KIT))
ART = Path(os.environ.get("CCLAB_ARTIFACTS", KIT / "results" / "student-test"))
RUNS = Path(os.environ.get("CCLAB_STUDENT_RUNS", ART / "runs"))
CHROMIUM = os.environ.get("CCLAB_CHROMIUM", "/usr/bin/chromium")
# the Python grade.py runs with: one the user `nobody` can run (make grader-venv), since each
# submission's process drops to nobody and must go on importing what the notebook needs
GRADER_PYTHON = os.environ.get("CCLAB_GRADER_PYTHON", "/opt/cclab-grader/bin/python")
LABS = ("lab1", "lab2", "lab3", "lab4", "lab5")
# The course: its secret (fixed, so that every run of this test has the same links: lab 1 at 80 %
# of the rate and 120 % of the delay, lab 3 at 80 % and 110 %, lab 4 at 85 %), and the student,
# whose submissions the grader sees under this name and who enrols with it in labs 1, 3 and 4.
COURSE_SECRET = b"cclab student journey test 11"
STUDENT = "student1"
RUN_ALL_TIMEOUT_S = 3600               # a bound on a stuck lab, not a budget: quick mode runs far less
DONE: dict[str, Path] = {}             # lab -> the submission zip its notebook exported


# The student's VM as the README and the release's README start it, word for word: the port
# is the README's, so it must be free on this host.
VM_COMMAND = ["vm/run.sh", "--systemd", "--forward", "8888", "--", "sleep", "3600"]
PORT = int(VM_COMMAND[VM_COMMAND.index("--forward") + 1])
READY_TIMEOUT_S = 1200                 # boot, provisioning's unit start and JupyterLab listening


def monitor_prompt(s) -> None:
    """Read QEMU's monitor up to its prompt (a command written before it, or a connection closed
    before the next, may be lost)."""
    seen = b""
    while not seen.endswith(b"(qemu) "):
        got = s.recv(4096)
        if not got:
            raise OSError("the monitor closed the connection")
        seen += got


class Guest:
    """The student's VM, booted from the release with VM_COMMAND (the README's), run from the
    release's folder; stop() ends vm/run.sh, which stops the guest.  Ready once vm/run.sh has
    printed the address to open and JupyterLab answers there with that token."""

    def __init__(self, release: Path, log: Path):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", PORT)) == 0:
                raise AssertionError(f"port {PORT} of this host is taken: the README's "
                                     f"`{' '.join(VM_COMMAND)}` needs it")
        self.port = PORT
        self.log = open(log, "w")
        self.proc = subprocess.Popen(VM_COMMAND, cwd=release, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.url = None                 # the address vm/run.sh prints for the student to open
        deadline = time.monotonic() + READY_TIMEOUT_S
        for line in self.proc.stdout:
            self.log.write(line)
            self.log.flush()
            u = re.search(r"^\[vm\] JupyterLab: (http://127\.0\.0\.1:\d+/lab\?token=[0-9a-f]+)\s*$", line)
            if u:
                self.url = u.group(1)
                break
            if time.monotonic() > deadline:
                break
        if self.url is None:
            self.stop()
            raise AssertionError(f"vm/run.sh printed no JupyterLab address (log: {log})")
        # the guest's console goes on to vm/run.sh's output: keep reading it into the log, or a
        # full pipe would stall the guest
        self.drainer = threading.Thread(target=self._drain, daemon=True)
        self.drainer.start()
        # what the student is told to open: this host's loopback, the forwarded port, the token
        self.base, self.token = self.url.split("/lab?token=")
        assert self.base == f"http://127.0.0.1:{PORT}", self.url
        while True:                     # the unit is up before JupyterLab listens
            try:
                self.api("/api/status")
                break
            except urllib.error.HTTPError as e:     # it answers, and refuses the printed token
                self.stop()
                raise AssertionError(f"JupyterLab refused the printed token: {e}") from None
            except (urllib.error.URLError, ConnectionError, OSError):
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise AssertionError(f"JupyterLab never answered at {self.base} (log: {log})")
                time.sleep(2)

    def _drain(self):
        for line in self.proc.stdout:
            self.log.write(line)
            self.log.flush()

    def api(self, path: str, method: str = "GET", body=None, token: bool = True):
        url = f"{self.base}{path}"
        headers = {"Authorization": f"token {self.token}"} if token else {}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=60) as r:
            raw = r.read()
        return json.loads(raw) if raw and r.headers.get_content_type() == "application/json" else raw

    def upload(self, path: str, data: bytes, kind: str = "file"):
        if kind == "notebook":
            body = {"type": "notebook", "format": "json", "content": json.loads(data)}
        else:
            body = {"type": "file", "format": "base64", "content": base64.b64encode(data).decode()}
        self.api(f"/api/contents/{path}", "PUT", body)

    def shut_down_kernel(self, path: str):
        """Ends the kernel of the notebook at `path` (as File > Shut Down Kernel does): each lab's
        kernel would otherwise hold its memory while the next lab runs."""
        for s in self.api("/api/sessions"):
            if s.get("path") == path:
                self.api(f"/api/sessions/{s['id']}", "DELETE")

    def answers(self) -> bool:
        """Whether JupyterLab answers its cheapest request within ANSWER_S."""
        req = urllib.request.Request(f"{self.base}/api/status",
                                     headers={"Authorization": f"token {self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=ANSWER_S) as r:
                r.read()
            return True
        except (urllib.error.URLError, ConnectionError, OSError):
            return False

    def nmi(self) -> str:
        """Take a stuck guest apart: an NMI through QEMU's monitor (the socket in vm/run.sh's
        control folder, the one holding this guest's token) panics it (unknown_nmi_panic) with
        its CPUs' stacks on the console, which the drainer keeps in the log.  Says what it did."""
        for tok in Path(tempfile.gettempdir()).glob("cclab-vm.*/jupyter-token"):
            try:
                if tok.read_text().strip() != self.token:
                    continue
                with socket.socket(socket.AF_UNIX) as s:
                    s.settimeout(10)
                    s.connect(str(tok.parent / "monitor.sock"))
                    monitor_prompt(s)           # the monitor reads a command after its prompt,
                    s.sendall(b"nmi\n")
                    monitor_prompt(s)           # and has run it by the next one
            except OSError as e:
                return f"no NMI sent ({e})"
            try:
                self.proc.wait(timeout=NMI_WAIT_S)     # the panic ends QEMU (-no-reboot)
            except subprocess.TimeoutExpired:
                pass
            self.drainer.join(timeout=10)
            return f"an NMI was sent through {tok.parent / 'monitor.sock'}"
        return "no NMI sent (no control folder holds this guest's token)"

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        drainer = getattr(self, "drainer", None)
        if drainer is not None:
            drainer.join(timeout=10)
        self.log.close()


def cell_notebook(source: str) -> bytes:
    """A one-cell notebook for the Python 3 kernel, as a student would write it."""
    return json.dumps({
        "cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                   "source": source}],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                    "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5}).encode()


def printed(nb: dict, mark: str) -> str:
    """The rest of the line a notebook's first cell printed after `mark` ("" if none)."""
    for o in nb["cells"][0].get("outputs", []):
        for line in o.get("text", "").splitlines():
            if line.startswith(mark + " "):
                return line[len(mark) + 1:]
    return ""


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """The student release of every lab, as an instructor hands it out; its VM inputs are the
    kit's (same image key), so it boots the image make test built."""
    from grading import release as rel
    made = rel.release(tmp_path_factory.mktemp("course") / "course", list(LABS))
    # the instructor commits it as the course's repository; the student clones that (README)
    git = ["git", "-c", "user.name=Instructor", "-c", "user.email=instructor@course.invalid"]
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the course's labs"]):
        subprocess.run(git + argv, cwd=made, check=True)
    clone = tmp_path_factory.mktemp("student") / "cclab"
    subprocess.run(["git", "clone", "-q", str(made), str(clone)], check=True)
    files = lambda root: {str(p.relative_to(root)) for p in root.rglob("*")
                          if p.is_file() and ".git" not in p.relative_to(root).parts}
    assert files(clone) == files(made), sorted(files(made) ^ files(clone))   # nothing ignored
    key = [subprocess.run([str(k / "vm" / "build-image.sh"), "--print-key"], capture_output=True,
                          text=True, cwd=k).stdout.strip() for k in (clone, KIT)]
    assert key[0] and key[0] == key[1], f"the release's VM inputs differ from the kit's: {key}"
    return clone


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """lab -> grading/build.py's output for it (CCLAB_DIST: built before the guest booted)."""
    from grading import build
    made = os.environ.get("CCLAB_DIST")
    scratch = tmp_path_factory.mktemp("dist")
    return lambda lab: build.built(lab, Path(made) if made else None, scratch)


@pytest.fixture(scope="module")
def guest(release):
    ART.mkdir(parents=True, exist_ok=True)
    g = Guest(release, ART / "guest.log")
    try:
        yield g
    finally:
        g.stop()


def niced_browser(folder: Path) -> Path:
    """Chromium at the lowest CPU priority: on a 2-core host the browser beside the
    software-emulated guest can starve it, and a lab run then fails its fidelity verdict (packet
    spacing read 1.11x once), which the grader rightly scores 0.  The student's own machine has
    the cores; here the guest comes first."""
    wrapper = folder / "chromium-niced"
    wrapper.write_text(f'#!/bin/sh\nexec nice -n 19 {CHROMIUM} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


@pytest.fixture(scope="module")
def browser(guest, tmp_path_factory):
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(niced_browser(tmp_path_factory.mktemp("chromium"))),
                              headless=True, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()


# Run All queues every cell at once ([*]); it is over when no cell waits, whether the last one
# ran or an error stopped the rest (the caller checks the saved notebook).
RUN_ALL_DONE = """() => {
    const p = [...document.querySelectorAll(
        '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt')]
        .map(e => e.textContent.trim());
    return p.some(t => /\\[\\d+\\]/.test(t)) && !p.some(t => t.includes('*'));
}"""
# What the notebook has shown so far: the prompts and the length of every output.  A lab's runs
# print a progress line for each experiment, so a notebook whose page has not changed for
# STALL_S is stuck, not slow.
PAGE_STATE = """() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell')]
    .map(c => (c.querySelector('.jp-InputPrompt')?.textContent || '') + ':'
              + (c.querySelector('.jp-OutputArea')?.textContent.length || 0)).join(',')"""
STALL_S = 900
CHECK_S = 30
# A notebook unchanged this long is asked whether its guest still answers; a guest whose
# JupyterLab stays silent for ANSWER_S is stuck (lab 4 in a CI run, 29 Nov 2026: the page still
# for 15 min, the API silent, both vCPUs busy, nothing on the console) and is sent an NMI for
# its stacks (Guest.nmi), waiting NMI_WAIT_S for the panic to reach the console.
FROZEN_PROBE_S = 300
ANSWER_S = 60
NMI_WAIT_S = 30


def guest_tail(guest, lines: int = 40) -> str:
    try:
        return "".join(open(guest.log.name, errors="replace").readlines()[-lines:])
    except OSError:
        return "(no guest log)"


def wait_for_run_all(guest, page, path: str) -> None:
    """Wait for Run All to end.  Fails at once, with the guest console's last lines (a kernel
    panic's stack among them), when the guest has stopped; fails when the page has not changed
    for STALL_S; and RUN_ALL_TIMEOUT_S bounds the whole."""
    from playwright.sync_api import TimeoutError as PageTimeout
    began = changed = time.monotonic()
    state = None
    while True:
        try:
            page.wait_for_function(RUN_ALL_DONE, timeout=CHECK_S * 1000, polling=2000)
            return
        except PageTimeout:
            pass
        now = time.monotonic()
        if guest.proc.poll() is not None:
            raise AssertionError(f"{path}: the guest stopped while the notebook ran "
                                 f"({now - began:.0f} s in); its console's last lines:\n"
                                 + guest_tail(guest))
        seen = page.evaluate(PAGE_STATE)
        if seen != state:
            state, changed = seen, now
        if now - changed > FROZEN_PROBE_S and not guest.answers():
            did = guest.nmi()
            raise AssertionError(f"{path}: the guest stopped answering: nothing in the notebook "
                                 f"changed for {now - changed:.0f} s ({now - began:.0f} s in; "
                                 f"prompts and output lengths: {state}) and JupyterLab gave no "
                                 f"answer in {ANSWER_S} s; {did}; the guest console's last "
                                 f"lines:\n" + guest_tail(guest, 150))
        if now - changed > STALL_S or now - began > RUN_ALL_TIMEOUT_S:
            raise AssertionError(f"{path}: nothing in the notebook changed for {now - changed:.0f} s "
                                 f"({now - began:.0f} s in; prompts and output lengths: {state}); "
                                 f"the guest console's last lines:\n" + guest_tail(guest))


def run_all_cells(guest, browser, path: str, shots: Path) -> tuple[dict, float, int]:
    """Open the notebook at `path` in JupyterLab, Run All Cells, save it; returns the notebook
    as the server then holds it, the seconds Run All took and the number of plots shown.
    Screenshots of the opened notebook, the whole notebook after the run and each plot go to
    `shots`."""
    shots.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    # a workspace of its own: JupyterLab's default one would open the earlier notebooks again
    # (their tabs, their kernels) beside this one
    space = re.sub(r"[^A-Za-z0-9]", "-", path)
    marks = [("start", time.monotonic())]
    try:
        page.goto(f"{guest.base}/lab/workspaces/{space}/tree/{path}?token={guest.token}")
        page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=300_000)
        # the kernel has started: the status bar reads "Python 3 (ipykernel) | Idle"
        page.wait_for_function(
            "() => /\\|\\s*Idle/.test(document.getElementById('jp-main-statusbar')"
            "?.textContent || '')", timeout=300_000, polling=1000)
        marks.append(("opened, kernel idle", time.monotonic()))
        page.screenshot(path=str(shots / "opened.png"))
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.get_by_text("Run All Cells", exact=True).click()
        began = time.monotonic()
        wait_for_run_all(guest, page, path)
        took = time.monotonic() - began
        marks.append(("Run All", time.monotonic()))
        page.keyboard.press("Control+s")
        time.sleep(3)
        plots = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output img")
        for i in range(plots.count()):
            plots.nth(i).scroll_into_view_if_needed()
            plots.nth(i).screenshot(path=str(shots / f"plot-{i + 1}.png"))
        shown = plots.count()
        marks.append((f"saved, {shown} plot shots", time.monotonic()))
        # the whole notebook in one picture: JupyterLab scrolls inside its own panel, so the
        # window is made as tall as the notebook first
        tall = page.evaluate("() => [...document.querySelectorAll("
                             "'.jp-NotebookPanel:not(.lm-mod-hidden) *')]"
                             ".reduce((m, e) => Math.max(m, e.scrollHeight), 0)")
        page.set_viewport_size({"width": 1400, "height": max(1000, min(int(tall) + 200, 30000))})
        time.sleep(1)
        page.evaluate("() => document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) *')"
                      ".forEach(e => { if (e.scrollTop) e.scrollTop = 0; })")      # from its top
        time.sleep(1)
        page.screenshot(path=str(shots / "notebook.png"))
        marks.append(("whole-notebook shot", time.monotonic()))
    finally:
        page.close()
        guest.shut_down_kernel(path)
    marks.append(("kernel shut down", time.monotonic()))
    # where the time in the browser went besides the cells (a figure, not a test)
    print(f"{path}: " + ", ".join(f"{name} {b - a:.1f} s" for (_, a), (name, b) in zip(marks, marks[1:])))
    return guest.api(f"/api/contents/{path}?content=1")["content"], took, shown


def keep_run(lab: str, zpath: Path, seconds: float, saved: dict) -> None:
    """The exported run kept as grading/run_master.py --keep keeps a run (RUNS/quick/<lab>/ and
    RUNS/quick/<lab>.ipynb, an earlier one replaced only once complete); the notebook's time in
    the browser goes to RUNS/quick/times.json.  The notebook kept is `saved`, the one the server
    held after Run All and a save: the zip's copy is JupyterLab's last autosave before the export
    cell ran, without the timings (recordTiming) and outputs of the cells after it."""
    from grading import run_master
    with tempfile.TemporaryDirectory() as work:        # the zip holds <lab>.ipynb, submission/
        with zipfile.ZipFile(zpath) as z:
            z.extractall(work)
        (Path(work) / f"{lab}.ipynb").write_text(json.dumps(saved, indent=1) + "\n")
        run_master.keep(lab, Path(work), "quick", RUNS)
    times = RUNS / "quick" / "times.json"
    known = json.loads(times.read_text()) if times.is_file() else {}
    known[lab] = round(seconds, 1)
    times.write_text(json.dumps(known, indent=1) + "\n")


# Read by the notebook's kernel, as the lab user (who cannot ask systemd over its private
# socket): the kernel's parent is the JupyterLab server, its cgroup names the unit that started it.
# The warm-up unit (cclab-warm.service: the libraries' first import and tshark's first start, as
# the lab user, after boot) shows by what it leaves: the lab user's matplotlib font list, made
# since this boot, and its mark in its runtime folder (/run: this boot's), which it leaves when
# both commands have succeeded.  The cell waits for it, within a bound for a stuck unit.
FACTS = """\
import glob, os, pwd, time
WARM_BOUND_S = 900
booted = time.time() - float(open("/proc/uptime").read().split()[0])
def warm_done():
    fonts = glob.glob(os.path.expanduser("~/.cache/matplotlib/fontlist-*.json"))
    return bool(fonts) and min(os.path.getmtime(f) for f in fonts) > booted \\
        and os.path.exists("/run/cclab-warm/done")
waited = time.monotonic()
while not warm_done() and time.monotonic() - waited < WARM_BOUND_S:
    time.sleep(2)
server = os.getppid()
uid = next(int(l.split()[1]) for l in open(f"/proc/{server}/status") if l.startswith("Uid:"))
unit = next(l for l in open(f"/proc/{server}/cgroup").read().splitlines() if l.startswith("0::"))
command = open(f"/proc/{server}/cmdline").read().split("\\0")
print("GUEST", f"pid1={open('/proc/1/comm').read().strip()}", f"unit={unit.rsplit('/', 1)[-1]}",
      f"server={int(any('jupyter' in w for w in command))}",
      f"jupyter_user={pwd.getpwuid(uid).pw_name}", f"kernel_user={pwd.getpwuid(os.getuid()).pw_name}",
      f"token={open('/etc/cclab/jupyter-token').read().strip()}", f"warm={int(warm_done())}",
      f"waited_for_warm_s={time.monotonic() - waited:.0f}")
"""


def test_the_vm_boots_systemd_and_jupyterlab_runs_as_the_lab_user(guest, browser, tmp_path):
    """Asked from a notebook in the browser: PID 1 is systemd, the JupyterLab server runs in the
    kit's unit as the lab user, the notebook's kernel too, the token vm/run.sh printed is
    the one the unit was started with, and the warm-up unit has loaded the labs' libraries as
    the lab user (so lab 1's first cells find them in memory)."""
    guest.upload("notebooks/facts.ipynb", cell_notebook(FACTS), "notebook")
    nb, _, _ = run_all_cells(guest, browser, "notebooks/facts.ipynb", tmp_path)
    line = printed(nb, "GUEST")
    assert line, nb["cells"][0].get("outputs")
    facts = dict(kv.split("=", 1) for kv in line.split())
    assert facts["pid1"] == "systemd", facts
    assert facts["unit"] == "cclab-jupyter.service" and facts["server"] == "1", facts
    assert facts["jupyter_user"] == "lab", facts      # not root, not a box's vagrant
    assert facts["kernel_user"] == "lab", facts
    assert guest.token == facts["token"], (guest.url, facts)
    # the warm-up unit ran as the lab user this boot and finished
    assert facts["warm"] == "1", facts


def test_the_readmes_give_the_command_this_test_boots_with(release):
    command = " ".join(VM_COMMAND)
    assert command in (KIT / "README.md").read_text()
    assert command in (release / "README.md").read_text()     # what the student reads


def test_the_release_notebooks_wait_in_the_students_own_folder(guest, release):
    """The unit copied every lab notebook of the release (the student versions: no answers)
    into ~lab/notebooks before JupyterLab started, with labkit.py beside them."""
    listing = {e["name"] for e in guest.api("/api/contents/notebooks")["content"]}
    shipped = {p.name for p in (release / "notebooks").glob("lab*.ipynb")}
    assert shipped == {f"{lab}.ipynb" for lab in LABS} and shipped | {"labkit.py"} <= listing, listing
    lab1 = json.dumps(guest.api("/api/contents/notebooks/lab1.ipynb?content=1")["content"])
    assert "BEGIN SOLUTION" not in lab1 and "# HIDDEN" not in lab1
    assert re.fullmatch(r"[0-9a-f]{48}", guest.token), guest.token


def test_the_port_answers_with_the_token_and_refuses_without(guest):
    assert "started" in guest.api("/api/status")
    with pytest.raises(urllib.error.HTTPError) as e:
        guest.api("/api/status", token=False)
    assert e.value.code == 403
    # forwarded to this host's loopback only: no other address of this host answers
    others = [a for a in subprocess.run(["hostname", "-I"], capture_output=True, text=True)
              .stdout.split() if not a.startswith("127.") and ":" not in a]
    for addr in others:
        with socket.socket() as s:
            s.settimeout(3)
            assert s.connect_ex((addr, guest.port)) != 0, f"{addr}:{guest.port} answers"


@pytest.mark.parametrize("lab", LABS)
def test_a_lab_in_the_browser_as_the_lab_user(lab, guest, browser, dist, release):
    built = dist(lab)
    folder = f"notebooks/my-{lab}"
    guest.api(f"/api/contents/{folder}", "PUT", {"type": "directory"})
    nb = json.loads((built / "autograder" / f"{lab}.ipynb").read_bytes())
    for c in nb["cells"]:              # as a fresh notebook: no prompt numbered before Run All
        if c["cell_type"] == "code":
            c["execution_count"], c["outputs"] = None, []
    # A student's notebook checks the public cases only (the hidden ones are the grader's): the
    # answers are the master's, its checks exactly the student version's.
    tests = nb["metadata"]["otter"]["tests"]
    for q in tests.values():
        for suite in q["suites"]:
            suite["cases"] = [case for case in suite["cases"] if not case["hidden"]]
    student = json.loads((built / "student" / f"{lab}.ipynb").read_bytes())
    assert tests == student["metadata"]["otter"]["tests"], "the student version checks other cases"
    # the student types the ID and link code the instructor sent into the "Your link" cell
    from grading import links
    labkit = links._labkit()
    link_code = links.code_for(COURSE_SECRET, STUDENT)
    enrol = [c for c in nb["cells"] if c["cell_type"] == "code" and 'STUDENT_ID = ""' in "".join(c["source"])]
    assert len(enrol) == (1 if lab in labkit.LINK_LABS else 0), f"{lab}: {len(enrol)} enrolment cells"
    for c in enrol:
        c["source"] = "".join(c["source"]).replace('STUDENT_ID = ""', f'STUDENT_ID = "{STUDENT}"') \
                                          .replace('LINK_CODE = ""', f'LINK_CODE = "{link_code}"')
    guest.upload(f"{folder}/{lab}.ipynb", json.dumps(nb).encode(), "notebook")
    for f in sorted((built / "student").iterdir()):
        if f.is_file() and f.suffix != ".ipynb":
            guest.upload(f"{folder}/{f.name}", f.read_bytes())
    nb, took, plots = run_all_cells(guest, browser, f"{folder}/{lab}.ipynb", ART / lab)
    print(f"{lab}: every cell ran in the browser in {took:.0f} s")
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    errors = [o for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, [f"{o['ename']}: {o['evalue']}" for o in errors]
    assert all(c.get("execution_count") for c in code), "a cell did not run"
    assert plots >= 1, "the notebook showed no plot"
    listing = guest.api(f"/api/contents/{folder}")["content"]
    zips = [e["name"] for e in listing if e["name"].endswith(".zip")]
    assert len(zips) == 1, listing
    z = ART / lab / zips[0]
    z.write_bytes(guest.api(f"/files/{folder}/{zips[0]}"))
    with zipfile.ZipFile(z) as zf:
        owner = {n.split("/")[1] for n in zf.namelist() if n.startswith("submission/") and n.count("/") > 1}
        enrolled = "submission/student.json" in zf.namelist()
        kits = {json.loads(zf.read(n)).get("kit", {}).get("commit") for n in zf.namelist()
                if n.endswith("/manifest.json")}
    assert owner == {lab}, owner
    # every run of a lab with per-student links was made on the student's own link, and says so
    # (a file that keeps the lab's link for everyone records the student with own_link: lab 4's
    # ACK-stall runs)
    with zipfile.ZipFile(z) as zf:
        specs = [((json.loads(zf.read(n)).get("spec") or {}).get("lab") or {})
                 for n in zf.namelist() if n.endswith("/manifest.json")]
    students = [s.get("student") for s in specs]
    want = labkit.student_link(lab, {"id": STUDENT, "code": link_code})
    assert enrolled == (want is not None), (lab, enrolled)
    if want is not None:
        assert students and all(s == (dict(want, own_link=True) if sp.get("own_link") else want)
                                for s, sp in zip(students, specs)), (want, students[:2])
    else:
        assert all(s is None for s in students), students[:2]
    # every run names the commit of the course repository the student cloned (its provenance)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=release, capture_output=True,
                          text=True).stdout.strip()
    assert kits <= {head}, (kits, head)
    keep_run(lab, z, took, nb)
    DONE[lab] = z


def test_the_labs_left_nothing_running(guest, browser, tmp_path):
    """After every lab: no network namespace, node shell or interface of the kit's networks (the
    labs' dumbbells, lab 5's paths: a Mininet shell "mininet:cc-..." per node, interfaces "cc-..."),
    and no iperf3, tshark or ping of the labs is left in the VM, as a notebook cell run by the
    lab user sees it."""
    probe = cell_notebook(
        "import json, subprocess\n"
        "ns = subprocess.run(['ip', 'netns', 'list'], capture_output=True, text=True).stdout.split()\n"
        "ps = subprocess.run(['ps', '-eo', 'comm='], capture_output=True, text=True).stdout.split()\n"
        "args = subprocess.run(['ps', '-eo', 'args='], capture_output=True, text=True).stdout.splitlines()\n"
        "left = [p for p in ps if p in ('iperf3', 'tshark', 'dumpcap', 'ping')]\n"
        "left += [a.split('mininet:')[1] for a in args if 'mininet:cc-' in a]\n"
        "links = json.loads(subprocess.run(['ip', '-j', 'link', 'show'], capture_output=True, text=True).stdout)\n"
        "left += [l['ifname'] for l in links if l['ifname'].startswith('cc-')]\n"
        "print('LEFT', ns, left)\n"
        "assert not ns and not left, (ns, left)\n")
    guest.upload("notebooks/leftovers.ipynb", probe, "notebook")
    nb, _, _ = run_all_cells(guest, browser, "notebooks/leftovers.ipynb", tmp_path)
    assert printed(nb, "LEFT") == "[] []", nb["cells"][0].get("outputs", [])


def grade(subs: Path, dist_lab: Path, out: Path, *extra: str) -> tuple[dict, subprocess.CompletedProcess]:
    """grading/grade.py as an instructor runs it (as root: each submission as `nobody`);
    returns the gradebook's rows by student."""
    from grading import build
    r = subprocess.run([GRADER_PYTHON, str(KIT / "grading" / "grade.py"), str(subs),
                        "--autograder", str(build.autograder_zip(dist_lab)), "--out", str(out),
                        "--jobs", "2", "--timeout", "300", "--memory-mb", "3072", *extra],
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    # each submission ran as nobody: grade.py says so when it could not
    assert "cannot run" not in r.stderr, r.stderr[-1000:]
    with open(out / "gradebook.csv") as f:
        return {row["student"]: row for row in csv.DictReader(f)}, r


@pytest.fixture(scope="module")
def grader_python():
    ok = subprocess.run(["setpriv", f"--reuid={pwd.getpwnam('nobody').pw_uid}", "--regid=65534",
                         "--clear-groups", "--", GRADER_PYTHON, "-c", "import otter, nbclient, pandas"],
                        capture_output=True, text=True, cwd="/")
    assert ok.returncode == 0, (f"nobody cannot run the grader's Python {GRADER_PYTHON} "
                                f"(make grader-venv, or CCLAB_GRADER_PYTHON): {ok.stderr.strip()[-300:]}")
    return GRADER_PYTHON


@pytest.mark.parametrize("lab", LABS)
def test_the_instructor_grades_the_submission_full_marks(lab, grader_python, dist, tmp_path):
    assert lab in DONE, f"{lab} did not run to its export in the browser (see above)"
    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copy(DONE[lab], subs / f"{STUDENT}.zip")
    out = tmp_path / "graded"
    secret = tmp_path / "course.secret"
    secret.write_text(COURSE_SECRET.hex() + "\n")
    rows, _ = grade(subs, dist(lab), out, "--secret", str(secret))     # the student's own link
    row = rows["student1"]
    feedback = (out / "feedback" / "student1.txt").read_text()
    shutil.copy(out / "gradebook.csv", ART / lab / "gradebook.csv")
    assert row["status"] == "graded", (row, feedback)
    assert float(row["possible"]) > 0 and float(row["score"]) == float(row["possible"]), (row, feedback)
    assert "cells that raised an error" not in feedback, feedback     # as in JupyterLab


PROBE = '''import os, resource
from pathlib import Path
_scratch = Path.cwd().parent.parent          # grade.py's scratch: work/<random>/, autograder/
# compact: the grader's feedback keeps one short line of a cell's error
raise RuntimeError(f"PROBE u{os.geteuid()} m{resource.getrlimit(resource.RLIMIT_AS)[0] >> 20} "
                   f"k{int(os.access({kit!r}, os.W_OK))} w{int(os.access(Path.cwd().parent, os.R_OK))} "
                   f"t{int(os.access(_scratch / 'autograder' / 'tests', os.R_OK))}")
'''


def test_grading_is_unprivileged_and_catches_edited_numbers(grader_python, dist, tmp_path):
    """Lab 1's run from the browser, graded with two more: the same results with BBR's bytes
    edited after the run (answers computed from the edit), and a probe, the run with a first
    cell that reports who runs it (a uid of its own, grading/fastgrade.py's JOB_UIDS) and under
    what limits."""
    import nbformat
    import pandas as pd
    assert "lab1" in DONE, "lab 1 did not run to its export in the browser (see above)"
    master = dist("lab1") / "autograder" / "lab1.ipynb"
    subs = tmp_path / "subs"
    with zipfile.ZipFile(DONE["lab1"]) as z:
        z.extractall(subs / "real")
    shutil.copytree(subs / "real", subs / "edited")
    wired = next((subs / "edited" / "submission" / "lab1" / "lab1-wired").glob("*/iperf.csv"))
    df, flows = pd.read_csv(wired), pd.read_csv(wired.parent / "flows.csv")
    bbr = int(flows.loc[flows["cca"] == "bbr", "flow"].iloc[0])
    df.loc[df["flow"] == bbr, "bytes"] = (df.loc[df["flow"] == bbr, "bytes"] * 1.5).astype(int)
    df.to_csv(wired, index=False)
    shutil.copy(master, subs / "edited" / "lab1.ipynb")
    shutil.copytree(subs / "real" / "submission", subs / "probe" / "submission")
    nb = nbformat.read(master, as_version=4)
    first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells.insert(first, nbformat.v4.new_code_cell(PROBE.replace("{kit!r}", repr(str(KIT)))))
    nbformat.write(nb, subs / "probe" / "lab1.ipynb")
    out = tmp_path / "graded"
    rows, _ = grade(subs, dist("lab1"), out)
    possible = float(rows["real"]["possible"])
    assert rows["real"]["status"] == "graded" and float(rows["real"]["score"]) == possible, rows["real"]
    assert float(rows["edited"]["score"]) < possible / 2, rows["edited"]
    assert "changed after the run" in (out / "feedback" / "edited.txt").read_text()
    fb = (out / "feedback" / "probe.txt").read_text()
    probe = re.search(r"PROBE u(\d+) m(-?\d+) k(\d) w(\d) t(\d)", fb)
    assert probe, fb
    uid, mem, kit_w, work_l, tests_r = (int(x) for x in probe.groups())
    from grading import fastgrade
    assert uid >= fastgrade.JOB_UIDS and mem == 3072, fb   # a uid of its own (no account's, not root)
    assert kit_w == 0 and work_l == 0, fb                  # the kit and the work folder: closed
    assert tests_r == 0, fb                                # the hidden tests: out of reach
    assert float(rows["probe"]["score"]) == possible       # the probe's cell is its only error


# A submission that hands in a lab's real results outside submission/ (the notebook puts them in
# place) and poses as the lab's modules: mappings holding kmodlab's and labkit's functions, which
# the hidden tests would call in the notebook's own process, on whatever it holds there.
UNSTASH = """
import os as _os, shutil as _sh
if not _os.path.exists("submission"):
    _sh.copytree("stash", "submission")
"""
POSE = """
import collections as _c, types as _t, kmodlab as _K, labkit as _L
def _posing(mod):
    p = _c.UserDict()
    for k, v in vars(mod).items():
        if isinstance(v, _t.FunctionType) and not k.startswith("__"):
            setattr(p, k, v)
    return p
KM, labkit = _posing(_K), _posing(_L)
KM.load_fresh = lambda: KM
"""


def test_results_handed_in_behind_the_graders_back_score_zero(grader_python, dist, tmp_path):
    """Lab 4's export from the browser, and the same results moved to stash/ with the posing
    cells above: the grader's copy of the results is taken before any student code runs and its
    hidden tests call its own modules, so the second gets no point for a measured answer and is
    flagged."""
    import nbformat
    assert "lab4" in DONE, "lab 4 did not run to its export in the browser (see above)"
    subs = tmp_path / "subs"
    with zipfile.ZipFile(DONE["lab4"]) as z:
        z.extractall(subs / "real")
    shutil.copytree(subs / "real", subs / "behind")
    (subs / "behind" / "submission").rename(subs / "behind" / "stash")
    nb = nbformat.read(subs / "behind" / "lab4.ipynb", as_version=4)
    first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells.insert(first + 1, nbformat.v4.new_code_cell(UNSTASH))
    nb.cells.append(nbformat.v4.new_code_cell(POSE))
    nbformat.write(nb, subs / "behind" / "lab4.ipynb")
    rows, _ = grade(subs, dist("lab4"), tmp_path / "graded")
    possible = float(rows["real"]["possible"])
    assert float(rows["real"]["score"]) == possible, rows["real"]
    assert float(rows["behind"]["score"]) == 0, rows["behind"]
    assert "no submission/lab4/ folder" in rows["behind"]["flags"], rows["behind"]


def _lab4_runs():
    """kmodlab (lab 4's analysis, as the notebook imports it) and the folder of the runs lab 4's
    browser test kept."""
    for d in (KIT / "notebooks", KIT / "labs"):
        if str(d) not in sys.path:
            sys.path.insert(0, str(d))
    import kmodlab
    kept = RUNS / "quick"
    assert (kept / "lab4" / "record.json").is_file(), "no lab 4 run: its browser test failed"
    return kmodlab, kept


def test_lab4s_geo_runs_show_search_leaving_before_loss():
    """Lab 4's GEO runs, as the student's browser made them (600 ms RTT, an 8-BDP drop-tail
    queue): every SEARCH download, whatever its THRESH and window, leaves slow start by SEARCH's
    own test (search:search_exit's reason, not a loss) past the BDP, and Cubic without HyStart
    overshoots into loss on the same path."""
    kmodlab, kept = _lab4_runs()
    ex = kmodlab.lab4_exits(kept)
    geo = ex[ex["profile"] == "geo"]
    print("\n" + geo[["variant", "t_exit", "cwnd_exit", "bdp", "exit_bdp", "retransmits",
                      "reason"]].to_string())
    search = geo[geo["variant"].str.startswith("search") & ~geo["variant"].str.startswith("search-stall")]
    assert {"search", "search-t250-w35", "search-t350-w20"} <= set(search["variant"]), set(geo["variant"])
    assert (search["reason"] == "search").all(), search[["variant", "reason"]].to_dict("records")
    assert (search["exit_bdp"] > 1).all(), search[["variant", "exit_bdp"]].to_dict("records")
    nohystart = geo[geo["variant"] == "cubic-nohystart"]
    assert len(nohystart) and (nohystart["retransmits"] > 0).all(), nohystart.to_dict("records")


def test_lab4s_ack_stall_shows_both_rules():
    """Lab 4's ACK-stall runs, as the student's browser made them: with SEARCH's published rule
    (stall_bins = 0) the download leaves slow start by SEARCH below the BDP, after the hold;
    with the reset (stall_bins = 3) it leaves by SEARCH only past the BDP."""
    kmodlab, kept = _lab4_runs()
    st = kmodlab.lab4_stall(kept)
    print("\n" + st[["variant", "hold_start", "hold_s", "cwnd_at_hold", "cwnd_exit", "bdp",
                     "exit_bdp", "reason"]].to_string())
    rows = {v: g for v, g in st.groupby("variant")}
    assert set(rows) == {"search-stall-noreset", "search-stall-reset3"}, set(rows)
    assert st["exit_after_hold"].all(), "the hold began after slow start ended: it tested nothing"
    paper, reset = rows["search-stall-noreset"], rows["search-stall-reset3"]
    assert (paper["reason"] == "search").all() and (paper["exit_bdp"] < 1).all(), paper.to_dict("records")
    assert (reset["reason"] == "search").all() and (reset["exit_bdp"] >= 1).all(), reset.to_dict("records")


def test_the_scorecard_is_made_from_these_runs(tmp_path):
    """`python3 -m grading.scorecard` makes the reproduction table from the labs' runs here: every
    lab's section has measured quick-mode values and a verdict with a reason for each claim, and
    the provenance names these runs (the guest's kernel, every run's fidelity OK)."""
    from grading.scorecard import VERDICTS
    kept = RUNS / "quick"
    missing = [lab for lab in LABS[:4] if not (kept / lab / "record.json").is_file()]
    assert not missing, f"no run of {missing}: their browser tests failed (see above)"
    assert (kept / "lab5" / "live.csv").is_file()
    out = tmp_path / "scorecard.md"
    p = subprocess.run([sys.executable, "-m", "grading.scorecard", "--results", str(RUNS), "--out", str(out)],
                       cwd=KIT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    text = out.read_text()
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    labs = {re.search(r"\(lab (\d)\)", s.splitlines()[0]).group(1): s for s in sections
            if re.search(r"\(lab \d\)", s.splitlines()[0])}
    assert sorted(labs) == ["1", "2", "3", "4", "5"], [s.splitlines()[0] for s in sections]
    verdicts = {v for v, _ in VERDICTS}
    for lab, body in labs.items():
        rows = [[c.strip() for c in line.strip().strip("|").split(" | ")]
                for line in body.splitlines() if line.startswith("| ") and not line.startswith("| claim")]
        assert rows, f"lab {lab}: no rows"
        measured = [r for r in rows if r[4] != "not reproducible here"]
        assert measured, f"lab {lab}: nothing measured"
        for r in rows:
            assert r[4] in verdicts, (lab, r)
            assert r[5], f"lab {lab}: no reason given for {r[0]!r}"
        assert all(r[2] != "not run" for r in measured), (lab, [r[:3] for r in measured])
        assert any(re.search(r"\d", r[2]) for r in measured), f"lab {lab}: no numbers in the quick column"
    prov = text.split("## Provenance", 1)[1]
    for lab in LABS[:4]:
        kernel = json.loads(next((kept / lab).rglob("manifest.json")).read_text())["kernel"]
        line = next(x for x in prov.splitlines() if x.startswith(f"| {lab} | quick |"))
        runs, ok = re.search(r"\| (\d+) \((\d+)\) \|", line).groups()
        assert int(runs) > 0 and runs == ok, line
        assert kernel and kernel in line, (kernel, line)
