"""Grade a folder of submissions without re-running any experiment.

    python3 grading/grade.py SUBMISSIONS --autograder dist/lab1/autograder/lab1-autograder_*.zip \
        --out graded/lab1 [--jobs 2] [--timeout 120] [--memory-mb 3072] [--user nobody] \
        [--roster roster.csv] [--deadline 2026-03-01T23:59:00Z] [--only STUDENT ...] \
        [--secret course.secret]

SUBMISSIONS holds one entry per student: a folder with the notebook and its `submission/<lab>/`
results, or the zip `grader.export()` made.  The entry's name is the student's id.  Writes
    OUT/gradebook.csv        student, name, score, possible, percent, status, reason, flags,
                             submitted, late_hours, seconds, auto, manual, a column per question
    OUT/canvas.csv           Student, ID, SIS User ID, Section, "<lab>" -- Canvas import
    OUT/gradescope.csv       SID, Name, Email, Score -- Gradescope's "upload scores" CSV
    OUT/report.txt           roster students without a submission, submissions not on the roster,
                             duplicate raw logs across the class
    OUT/feedback/<id>.txt    each test's result and message, for the student
    OUT/results.json         what was graded: `--only` regrades some students and keeps the rest,
                             grading/manual.py merges scores by hand (OUT/manual-scores.csv)
The roster (a `student` column, optional name, email, sis_id, section, deadline) is kept as
OUT/roster.csv.  grading/integrity.py's checks (record, cross-checks, duplicates) run in the
parent on the copy of the results taken before any student code ran; a finding scores 0 for the
measured answers and is named in `flags` and the feedback.  With `--secret` (kept for later
regrades), so does a run of labs 1, 3 or 4 not made on the student's own link (grading/links.py).

Two engines grade with the autograder's otter test files (public and hidden): `--engine fast`
(default; grading/fastgrade.py, a few s a submission) and `--engine otter` (otter's own local runner,
`otter run`, in a subprocess, ~7 s).  The notebook re-loads its saved results because the
environment says CCLAB_REPLAY=1; nothing touches the network or the kernel's qdiscs.

The fast engine is the one to grade with: the notebook runs in a sandboxed student process that
hands back its answers as data (grading/answers.py), and the tests run in a separate grading
process that never executes student code, against those answers and its own copy of the raw logs;
only the grading process's message becomes a grade.  A measured answer earns its points only when
all of its hidden checks (record check, recomputation) pass; public type checks weigh 0
(`grading/points.py` prints each lab's table).  The otter engine runs tests and notebook in one
kernel and splits points evenly over cases, as otter does: it is kept to compare with otter.

Why not otter's docker mode: there is no container engine on the grading machines (or in CI).
Instead each submission's process (tree) runs, in both engines,
  * as an unprivileged user (setpriv --reuid/--regid --clear-groups, when we are root), in a
    scratch folder only it can write to, with HOME there, so a submission cannot read other
    submissions (their folders have random names in a folder it cannot list), the instructor's
    files or the gradebook, nor (fast engine: the tests are read only by the grading process,
    after the student process has handed back its answers) the autograder's hidden tests;
  * with RLIMIT_AS (address space, so an unbounded allocation fails with MemoryError instead of
    pushing the machine into swap), RLIMIT_NPROC, RLIMIT_FSIZE and RLIMIT_CORE set before exec;
  * under a wall-clock timeout, after which every process it started (the Jupyter kernel too,
    found by parent links, since the kernel runs in its own session) is killed.
An IPython startup file turns a MemoryError in the kernel into an immediate exit with a marker,
so a submission that hit the memory limit gets 0 with that reason rather than partial credit
from whatever tests ran after.  The pipeline records the reason and goes on with the next one.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pwd
import resource
import shutil
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

MEMORY_MARKER = "CCLAB_MEMORY_LIMIT"
STARTUP = f"""
import os
def _cclab_memory(shell, etype, evalue, tb, tb_offset=None):
    open(os.path.join(os.environ["HOME"], "{MEMORY_MARKER}"), "w").close()
    os._exit(137)
get_ipython().set_custom_exc((MemoryError,), _cclab_memory)
"""


@dataclass
class Result:
    student: str
    score: float = 0.0
    possible: float = 0.0
    status: str = "graded"          # graded | timeout | memory | error | missing
    reason: str = ""
    tests: dict = field(default_factory=dict)     # test name -> score
    points: dict = field(default_factory=dict)    # test name -> points possible
    feedback: str = ""
    seconds: float = 0.0
    measured: list = field(default_factory=list)  # tests whose cases read the submission's results
    flags: list = field(default_factory=list)     # one line each: what the checks found
    raw: dict = field(default_factory=dict)       # raw log -> sha256 (duplicates across the class)
    submitted: float | None = None                # the entry's newest file time (s since epoch)


def _limits(memory_mb: int):
    def apply():
        mem = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (512 << 20, 512 << 20))
        if os.geteuid() == 0:
            resource.setrlimit(resource.RLIMIT_NPROC, (256, 256))
    return apply


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(p.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _kill_tree(proc: subprocess.Popen) -> None:
    pids = _descendants(proc.pid)
    for pid in [proc.pid] + pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def _submission_zip(entry: Path, work: Path) -> Path | None:
    """The submission as a zip otter can grade (a zip as given, or a folder zipped)."""
    if entry.is_file() and entry.suffix == ".zip":
        shutil.copy(entry, work / "submission.zip")
        return work / "submission.zip"
    if entry.is_dir():
        nbs = [p for p in entry.glob("*.ipynb")]
        if not nbs:
            return None
        z = work / "submission.zip"
        with zipfile.ZipFile(z, "w", zipfile.ZIP_DEFLATED) as zf:
            for p in sorted(entry.rglob("*")):
                if p.is_file() and not p.is_symlink():
                    zf.write(p, p.relative_to(entry))
        return z
    return None


def _run_as(uid: int, gid: int, code: str, *args: str) -> subprocess.CompletedProcess:
    """This Python running `code` (with `args` in sys.argv) as uid:gid (no other group), from /."""
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--",
                           sys.executable, "-c", code, *args], cwd="/", capture_output=True,
                          text=True, env={"PATH": os.environ.get("PATH", ""), "HOME": "/"})


def _sandbox_user(name: str | None):
    if os.geteuid() != 0 or not name:
        return None
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        raise SystemExit(f"grade: no user {name!r} to grade as (use --user)")
    # The user must be able to run this Python and import otter (a Python installed under
    # /root, say, is not readable by others).  If not, nothing is graded: the submissions' code
    # would otherwise run as root.  `--user ''` grades as this process's user, on purpose.
    r = _run_as(pw.pw_uid, pw.pw_gid, "import otter, nbclient")
    if r.returncode != 0:
        raise SystemExit(
            f"grade: user {name} cannot run {sys.executable} with otter "
            f"({(r.stderr.strip().splitlines() or ['?'])[-1]}): run grade.py with a Python {name} "
            f"can run (`make grader-venv` makes /opt/cclab-grader/bin/python), or give --user ''")
    return pw.pw_uid, pw.pw_gid


def grade_one(entry: Path, autograder: Path, timeout: float, memory_mb: int, user) -> Result:
    r = Result(student=entry.stem if entry.is_file() else entry.name)
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f"grade-{r.student}-"))
    try:
        z = _submission_zip(entry, work)
        if z is None:
            r.status, r.reason = "missing", "no notebook in the submission"
            return r
        shutil.copy(autograder, work / "autograder.zip")
        startup = work / ".ipython" / "profile_default" / "startup"
        startup.mkdir(parents=True)
        (startup / "00-cclab-limits.py").write_text(STARTUP)
        out = work / "out"
        out.mkdir()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work),
               "IPYTHONDIR": str(work / ".ipython"), "CCLAB_REPLAY": "1", "MPLBACKEND": "Agg",
               "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "TMPDIR": str(work),
               "LANG": "C.UTF-8", "PYDEVD_DISABLE_FILE_VALIDATION": "1",
               "JUPYTER_PLATFORM_DIRS": "1"}
        argv = [sys.executable, "-m", "otter", "run", "-a", str(work / "autograder.zip"),
                "-o", str(out), "--no-logo", str(z)]
        if user is not None:
            uid, gid = user
            for p in [work, *work.rglob("*")]:
                os.lchown(p, uid, gid)
            os.chmod(work, 0o700)
            argv = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"] + argv
        proc = subprocess.Popen(argv, cwd=work, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, preexec_fn=_limits(memory_mb),
                                start_new_session=True)
        try:
            log, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_tree(proc)
            r.status, r.reason = "timeout", f"stopped after {timeout:g} s (time limit)"
            return r
        finally:
            for pid in _descendants(proc.pid) if proc.returncode is None else []:
                os.kill(pid, signal.SIGKILL)
        log = log.decode(errors="replace")
        if (work / MEMORY_MARKER).exists() or "MemoryError" in log:
            r.status, r.reason = "memory", f"stopped: the notebook exceeded the {memory_mb} MB memory limit"
            return r
        res = out / "results.json"
        if not res.is_file():
            r.status = "error"
            r.reason = "the autograder produced no results: " + (log.strip().splitlines() or ["?"])[-1][:300]
            return r
        data = json.loads(res.read_text())
        _read_results(r, data)
        return r
    except Exception as e:          # one broken submission must not stop the others
        r.status, r.reason = "error", f"{type(e).__name__}: {e}"
        return r
    finally:
        r.seconds = round(time.monotonic() - began, 2)
        shutil.rmtree(work, ignore_errors=True)


def _read_results(r: Result, data: dict) -> None:
    """otter run's results.json (Gradescope's format): {"tests": [{"name", "score", "max_score",
    "output", "visibility"}, ...]} with a "Public Tests" entry holding the public output."""
    lines = []
    for t in data.get("tests") or []:
        if t.get("score") is None:
            lines.append(t.get("output") or "")
            continue
        r.tests[t["name"]] = float(t["score"])
        r.score += float(t["score"])
        r.possible += float(t.get("max_score") or 0)
        lines.append(f"{t['name']}: {float(t['score']):g}/{float(t.get('max_score') or 0):g}")
    if data.get("tests") is not None:
        r.feedback = "\n".join(lines)
        return
    files = data.get("test_files") or []
    if isinstance(files, dict):
        files = [dict(v, name=k) for k, v in files.items()]
    for tf in files:
        name = tf.get("name")
        cases = tf.get("test_case_results") or []
        got = sum(float(c.get("test_case_result", {}).get("score") or 0) if isinstance(c.get("test_case_result"), dict)
                  else float(c.get("score") or 0) for c in cases) if cases else 0.0
        score = tf.get("score")
        score = float(score) if score is not None else got
        possible = float(tf.get("points") or tf.get("possible") or 0)
        r.tests[name] = score
        r.score += score
        r.possible += possible
        lines.append(f"{name}: {score:g}/{possible:g}")
        for c in cases:
            tc = c.get("test_case", {})
            msg = (c.get("message") or "").strip()
            ok = c.get("passed")
            if tc.get("hidden"):
                continue                 # hidden tests: no details for the student
            lines.append(f"  {'passed' if ok else 'FAILED'}: {tc.get('name', '')}"
                         + ("\n    " + msg.replace("\n", "\n    ") if msg and not ok else ""))
    r.feedback = "\n".join(lines)


# A submission unpacks to at most this much (a quick-mode lab 4 export holds 37 MB): a zip that
# claims more is refused before anything is written, so a small zip cannot fill the disk.
MAX_UNPACKED = 2 << 30


def _safe_extract(z: Path, dest: Path) -> None:
    with zipfile.ZipFile(z) as zf:
        total = 0
        for m in zf.infolist():
            target = (dest / m.filename).resolve()
            if not str(target).startswith(str(dest.resolve())):
                raise ValueError(f"unsafe path in the zip: {m.filename}")
            total += m.file_size
        if total > MAX_UNPACKED:
            raise ValueError(f"the zip unpacks to {total >> 20} MB (limit {MAX_UNPACKED >> 20} MB)")
        zf.extractall(dest)


def copy_entry(src: Path, dest: Path) -> list[str]:
    """A folder entry copied as its folders and regular files only; returns what was left out
    (relative to the entry).  unzip restores symbolic links, and the grader runs as root: a
    link followed would copy what it points at into the submission (the course secret, a
    classmate's zip, the autograder), and one to /dev/zero, like a pipe, would stall the class's
    grading."""
    import stat
    left = []
    for root, dirs, files in os.walk(src):          # a link to a folder is not walked into
        here = Path(root)
        rel = here.relative_to(src)
        (dest / rel).mkdir(parents=True, exist_ok=True)
        for name in sorted(dirs):
            if (here / name).is_symlink():
                dirs.remove(name)
                left.append(str(rel / name))
        for name in sorted(files):
            if stat.S_ISREG(os.lstat(here / name).st_mode):
                shutil.copy2(here / name, dest / rel / name)
            else:
                left.append(str(rel / name))
    return left


def _prepare(entry: Path, work: Path, files_dir: Path, leave_out=()) -> list[str]:
    """The submission's files in `work`, with the autograder's support files (labkit.py, the
    reference bands) copied over whatever the student sent under those names, but for those
    only the grading process may hold (`leave_out`: lab 5's reference learner).  Returns what
    of a folder entry was left out (links, devices, pipes)."""
    left = []
    if entry.is_file():
        work.mkdir(parents=True)
        _safe_extract(entry, work)
    else:
        left = copy_entry(entry, work)
    secret = {Path(n).stem for n in leave_out}        # their compiled copies stay out too
    if files_dir.is_dir():
        for f in files_dir.iterdir():
            if f.name in leave_out:
                continue
            if f.is_file():
                shutil.copy(f, work / f.name)
            elif f.name == "__pycache__":
                shutil.rmtree(work / f.name, ignore_errors=True)
                shutil.copytree(f, work / f.name, ignore=lambda _d, names: [
                    n for n in names if n.split(".")[0] in secret])
    return left


def _sibling(name: str):
    """A module of grading/, whether this file runs as a script or as part of the package."""
    import importlib
    try:
        return importlib.import_module(f"grading.{name}")
    except ImportError:
        return importlib.import_module(name)


def _links():
    return _sibling("links")


def _refuse_exposed(who, paths) -> None:
    """Refuse, in one line, to grade where a notebook could read the submissions folder, the
    output folder or the course secret: a notebook runs in the grader's file system as a uid of
    no account, so where others may read them, a submission could take a classmate's code at
    grading time, or read the grades or the secret.  (The autograder zip may be readable: its
    hidden tests recompute each answer from the student's own raw logs.)"""
    probe = _sibling("fastgrade").JOB_UIDS - 1      # a uid of no account that runs no job
    code = ("import os, sys\n"
            "for p in sys.argv[1:]:\n"
            "    try:\n"
            "        os.listdir(p) if os.path.isdir(p) else open(p, 'rb').close()\n"
            "        print(p)\n"
            "    except OSError:\n"
            "        pass\n")
    existing = [(Path(p).resolve(), what) for p, what in paths if Path(p).exists()]
    r = _run_as(probe, who[1], code, *[str(p) for p, _ in existing])
    readable = set(r.stdout.split("\n"))
    for p, what in existing:
        if str(p) in readable:
            raise SystemExit(f"grade: {p} can be read by other users, so the notebooks being "
                             f"graded could read {what}: chmod 700 it, or a folder above it")


def _own_uids_run(gid: int, uid: int) -> bool:
    """Whether a process with a uid of no account (fastgrade.JOB_UIDS) can run this Python: not
    in a user namespace that maps only some uids, say."""
    return _run_as(uid, gid, "import pandas").returncode == 0


def grade_fast(entries: list[Path], autograder: Path, jobs: int, timeout: float, memory_mb: int,
               who, lab: str | None = None, secret: bytes | None = None) -> list[Result]:
    """`secret`: the course secret (grading/links.py): every run must then be on its student's
    own link, checked on the grading process's copy like the cross-checks."""
    try:
        from grading import fastgrade, integrity
    except ImportError:
        import fastgrade
        import integrity
    scratch = Path(tempfile.mkdtemp(prefix="grade-"))
    lock = None
    try:
        ag = fastgrade.unpack_autograder(autograder, scratch / "autograder")
        try:
            trusted = fastgrade.read_trusted(ag)
        except ValueError as ex:
            raise SystemExit(f"grade: {autograder}: {ex}") from None
        if not trusted:
            print(f"grade: warning: {autograder.name} has no {fastgrade.TRUSTED} (built before "
                  "it existed): the tests read the notebook's own modules and constants; build "
                  "it again with grading/build.py", file=sys.stderr)
        leave_out = tuple(trusted.get("grader_only", []))
        left_out: dict[str, list[str]] = {}
        fastgrade.precompile(ag / "files")
        # the student's interpreter runs the engine from here: the kit may be in a folder the
        # sandbox user cannot read
        engine = scratch / "engine"
        engine.mkdir(mode=0o755)
        for m in fastgrade.ENGINE_FILES:
            shutil.copy(Path(fastgrade.__file__).resolve().parent / m, engine / m)
            os.chmod(engine / m, 0o644)
        os.chmod(engine, 0o755)
        os.chmod(scratch, 0o711)
        base = 0
        if who is not None:
            try:
                base, lock = fastgrade.claim_uids()
            except RuntimeError as ex:
                raise SystemExit(f"grade: {ex}") from None
            except OSError as ex:       # no /run to lock in: a block at random, unlocked
                base = secrets.randbelow(fastgrade.UID_BLOCKS) * fastgrade.UID_BLOCK
                print(f"grade: warning: cannot lock a block of grading uids in "
                      f"{fastgrade.UID_LOCKS} ({ex.strerror}): another grade.py run at the "
                      "same time may take the same uids", file=sys.stderr)
        own = who is not None and _own_uids_run(who[1], fastgrade.JOB_UIDS + base)
        if who is not None and not own:
            # one shared sandbox user cannot be cleaned up after: what a notebook leaves running
            # as that user would outlive its job and reach the next submissions
            raise SystemExit(
                f"grade: a uid of no account ({fastgrade.JOB_UIDS + base}) cannot run "
                f"{sys.executable} here (a user namespace that maps only some uids?): each "
                "submission needs a uid of its own; grade where it has one, or give --user '' "
                "to grade unsandboxed as yourself")
        # the tests are read before the children run: no submission can read them, and with
        # uids of their own the grading processes read them through the run's group (grader_gid)
        for p in [ag, *ag.rglob("*")]:
            if own:
                os.lchown(p, 0, fastgrade.grader_gid(base))
                os.chmod(p, 0o750 if p.is_dir() else 0o640)
            else:
                os.chmod(p, 0o700 if p.is_dir() else 0o600)
        todo, results = [], {}
        (scratch / "work").mkdir()
        # each grading process's folder, under an unguessable name: passable, not listable
        (scratch / "trusted").mkdir(mode=0o711 if own else 0o700)
        os.chmod(scratch / "trusted", 0o711 if own else 0o700)
        def prepare(e: Path, work: Path, tdir: Path, owner) -> None:
            """Run by the engine just before the submission's processes start (so preparing
            one overlaps grading the others)."""
            try:
                left = _prepare(e, work, ag / "files", leave_out)
                if left:
                    left_out[_entry_name(e)] = left
                # the grading process's own copy of the results, taken before any student code
                # runs, with the autograder's support files: nothing the notebook writes reaches it
                fastgrade._trusted_folder(work / "submission", tdir, ag / "files")
            except Exception as ex:      # a broken zip is that student's problem only
                raise fastgrade.NotGradable(f"could not unpack the submission: {ex}") from None
            if owner is not None:
                for p in [work, *work.rglob("*")]:
                    os.lchown(p, *owner)
            os.chmod(work, 0o700)

        for e in entries:
            r = Result(student=e.stem if e.is_file() else e.name)
            results[r.student] = r
            # an unguessable name: every submission runs as the same user, and none may find
            # another's folder (work/ itself cannot be listed)
            token = secrets.token_hex(12)
            work, tdir = scratch / "work" / token, scratch / "trusted" / token
            todo.append((r.student, work, tdir,
                         lambda owner, e=e, work=work, tdir=tdir: prepare(e, work, tdir, owner)))
        os.chmod(scratch / "work", 0o711)
        try:
            done = fastgrade.run_all(todo, ag / "tests", jobs, timeout, memory_mb, who, ag / "files",
                                     lab, engine, own, base)
        finally:
            if own:             # every process of the run's uids is gone: what they left in /tmp too
                fastgrade.remove_files_of(
                    {u for n in range(len(todo)) for u in fastgrade.job_uids(base, n)})
        # every process is gone: the tests may be read here now, to know which read the results
        measured = {p.stem for p in (ag / "tests").glob("*.py")
                    if integrity.reads_results(p.read_text(errors="replace"))}
        tdirs = {student: tdir for student, _, tdir, *_ in todo}
        for student, res in done.items():
            r = results[student]
            r.seconds = res.get("seconds", 0.0)
            # the grading process checked its copy of the results, taken before any student code
            # ran (grading/integrity.py); when it sent nothing (a time limit), the parent does
            if "integrity" in res:
                found, r.raw = list(res["integrity"]), dict(res.get("raw") or {})
            else:
                sub = tdirs[student] / "submission"
                found = integrity.problems(sub, lab) if lab else []   # no folder: a finding
                r.raw = integrity.raw_digests(sub)
            sub = tdirs[student] / "submission"
            if secret is not None and lab:
                found = _links().problems(sub, lab, student, secret) + found
            if student in left_out:
                r.flags.append(f"left out of the submission, not files: "
                               + ", ".join(left_out[student][:5])
                               + (f" and {len(left_out[student]) - 5} more" if len(left_out[student]) > 5 else "")
                               + " (links, devices or pipes)")
            if found:
                r.flags.append("results fail the cross-checks: " + found[0]
                               + (f" (and {len(found) - 1} more)" if len(found) > 1 else ""))
            if res.get("status") == "graded":
                for t in res["tests"]:
                    if t["name"] in measured and any(c["hidden"] for c in t["cases"]):
                        r.measured.append(t["name"])
                        if found and t["score"]:
                            t["score"], t["why"] = 0.0, "the results fail the grader's cross-checks: " + \
                                fastgrade.one_line(found[0], 160)
            if res.get("status") != "graded":
                r.status, r.reason = res.get("status", "error"), res.get("reason", "")
                continue
            lines = []
            for t in res["tests"]:
                r.tests[t["name"]] = float(t["score"])
                r.score += float(t["score"])
                r.possible += float(t["possible"])
                r.points[t["name"]] = float(t["possible"])
                lines.append(f"{t['name']}: {t['score']:g}/{t['possible']:g}"
                             + (f" -- {t['why']}" if t.get("why") else ""))
                weighed = "" if any(c["hidden"] for c in t["cases"]) else " (scored)"
                for c in t["cases"]:
                    if c["hidden"]:
                        continue
                    msg = (c.get("message") or "").strip()
                    lines.append(f"  {'passed' if c['passed'] else 'FAILED'}{weighed}: {c['name']}"
                                 + ("\n    " + msg.replace("\n", "\n    ") if msg and not c["passed"] else ""))
            if res.get("unreadable"):
                lines.append("answers the grader does not read as data: " + ", ".join(res["unreadable"]))
            if res.get("cell_errors"):
                lines.append("cells that raised an error:")
                lines += [f"  {x}" for x in res["cell_errors"]]
            r.feedback = "\n".join(lines)
        return [results[k] for k in sorted(results)]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if lock is not None:
            os.close(lock)


def _entry_name(e: Path) -> str:
    return e.stem if e.is_file() else e.name


def _entry_time(e: Path) -> float | None:
    """When the entry was handed in: a zip's own time (the LMS's or the download's), None for a
    folder, whose file times are the ones the student's zip carried (unzip restores them) and
    so say nothing about when it was handed in."""
    try:
        return e.stat().st_mtime if e.is_file() else None
    except OSError:
        return None


ROSTER_COLUMNS = ("student", "name", "email", "sis_id", "section", "deadline")


def _csv_writer(f):
    """csv.writer whose text cells cannot be read as formulas: a spreadsheet or an LMS import
    evaluates a cell that starts with = + - @ (a reason or a name a submission chose), so such a
    cell gets a leading apostrophe."""
    w = csv.writer(f)

    class Safe:
        def writerow(self, row):
            w.writerow([("'" + c) if isinstance(c, str) and c[:1] in ("=", "+", "-", "@", "\t", "\r")
                        else c for c in row])
    return Safe()


def read_roster(path: Path) -> dict[str, dict]:
    """{student: {name, email, sis_id, section, deadline}} from a roster CSV whose `student`
    column holds the submissions' names (the other columns are optional).  A malformed roster
    raises SystemExit with one line."""
    import pandas as pd
    path = Path(path)
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except (OSError, ValueError) as e:
        raise SystemExit(f"grade: roster {path}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    df.columns = [str(c).strip().lower() for c in df.columns]
    if "student" not in df.columns:
        raise SystemExit(f"grade: roster {path}: no 'student' column (columns: {', '.join(df.columns)})")
    ids = df["student"].str.strip()
    if (ids == "").any():
        raise SystemExit(f"grade: roster {path}: row {int((ids == '').idxmax()) + 2} has no student id")
    dup = ids[ids.duplicated()]
    if len(dup):
        raise SystemExit(f"grade: roster {path}: student {dup.iloc[0]!r} is listed twice")
    out = {}
    for k, row in zip(ids, df.to_dict("records")):
        rec = {c: str(row.get(c, "")).strip() for c in ROSTER_COLUMNS[1:]}
        if rec["deadline"]:
            try:
                _when(rec["deadline"])
            except ValueError:
                raise SystemExit(f"grade: roster {path}: student {k!r}: deadline {rec['deadline']!r} "
                                 "is not a date (use 2026-03-01T23:59:00Z)")
        out[k] = rec
    return out


def _when(text: str) -> float:
    import pandas as pd
    try:
        t = pd.Timestamp(text)
    except (ValueError, TypeError) as e:
        raise ValueError(str(e)) from None
    if t is pd.NaT:
        raise ValueError("not a date")
    if t.tzinfo is None:
        t = t.tz_localize("UTC")
    return t.timestamp()


STATE = "results.json"
MANUAL = "manual-scores.csv"       # grading/manual.py merge writes it; nothing else does


def load_state(out: Path) -> tuple[dict, dict]:
    """(settings, {student: Result}) of the last grading into `out` (empty when none)."""
    p = Path(out) / STATE
    if not p.is_file():
        return {}, {}
    data = json.loads(p.read_text())
    results = {}
    for d in data.get("results", []):
        r = Result(student=d["student"])
        for k, v in d.items():
            if hasattr(r, k):
                setattr(r, k, v)
        results[r.student] = r
    return data.get("settings", {}), results


def save_state(out: Path, settings: dict, results: dict) -> None:
    from dataclasses import asdict
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (STATE + ".tmp")
    tmp.write_text(json.dumps({"settings": settings, "results": [asdict(results[k]) for k in sorted(results)]},
                              indent=1))
    os.replace(tmp, out / STATE)


def grade_all(submissions: Path, autograder: Path, out: Path, jobs: int = 2,
              timeout: float = 120, memory_mb: int = 2048, user: str | None = "nobody",
              lab: str | None = None, engine: str = "fast", progress=None,
              roster: Path | None = None, only: list[str] | None = None,
              deadline: str | None = None, duplicates: str | None = None,
              secret: Path | None = None) -> list[Result]:
    """Grade every entry of `submissions` (or the students in `only`: the other rows of an earlier
    grading into `out` are kept) and write the outputs.  Returns the results graded now."""
    autograder = Path(autograder).resolve()
    out = Path(out)
    who = _sandbox_user(user)                   # before anything is written: it may refuse
    if who is not None:
        subs = Path(submissions)                # the folder and each entry: ids can be guessed
        _refuse_exposed(who, [*[(e, "the classmates' submissions")
                                 for e in [subs, *(subs.iterdir() if subs.is_dir() else [])]],
                              (out, "the grades made before"),
                              *([(Path(secret), "the course secret")] if secret is not None else [])])
    lab = lab or autograder.name.split("-autograder")[0]
    entries = sorted(p for p in Path(submissions).iterdir()
                     if p.is_dir() or p.suffix == ".zip")
    settings, previous = load_state(out)        # the roster, deadline and policy stay
    if not only:
        previous = {}                           # the whole class is graded again
    if only:
        names = {_entry_name(e) for e in entries}
        missing = [s for s in only if s not in names]
        if missing:
            raise SystemExit(f"grade: no submission named {missing[0]!r} in {submissions}")
        entries = [e for e in entries if _entry_name(e) in set(only)]
    if roster is not None:
        read_roster(roster)                     # refuse a malformed one before grading
        out.mkdir(parents=True, exist_ok=True)
        if Path(roster).resolve() != (out / "roster.csv").resolve():
            shutil.copy(roster, out / "roster.csv")
    if deadline is not None:
        try:
            _when(deadline)
        except ValueError:
            raise SystemExit(f"grade: --deadline {deadline!r} is not a date (use 2026-03-01T23:59:00Z)")
        settings["deadline"] = deadline
    settings["lab"] = lab
    if secret is not None:                      # kept by path: a regrade checks the same links
        settings["secret"] = str(Path(secret).resolve())
    key = None
    if settings.get("secret"):
        key = _links().read_secret(settings["secret"])
    if duplicates is not None:
        if duplicates not in ("flag", "zero"):
            raise SystemExit(f"grade: duplicates={duplicates!r} (flag or zero)")
        settings["duplicates"] = duplicates
    if engine == "fast":
        results = grade_fast(entries, autograder, jobs, timeout, memory_mb, who, lab, key)
    else:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(lambda e: grade_one(e, autograder, timeout, memory_mb, who),
                                    entries))
    times = {_entry_name(e): _entry_time(e) for e in entries}
    for r in results:
        r.submitted = times.get(r.student)
    # the possible points are the autograder's, also for submissions that got no results
    possible = max([r.possible for r in results] + [r.possible for r in previous.values()], default=0.0)
    for r in results:
        r.possible = r.possible or possible
    merged = dict(previous)
    merged.update({r.student: r for r in results})
    save_state(out, settings, merged)
    write_outputs(list(merged.values()), out, lab, deadline=settings.get("deadline"),
                  duplicates=settings.get("duplicates", "flag"))
    if progress:
        for r in results:
            progress(f"{r.student}: {r.score:g}/{r.possible:g} {r.status} {r.reason}")
    return results


def manual_scores(out: Path) -> tuple[dict, dict]:
    """({question: points possible}, {student: {question: score}}) merged so far (grading/manual.py)."""
    p = Path(out) / MANUAL
    if not p.is_file():
        return {}, {}
    with open(p, newline="") as f:
        rows = list(csv.DictReader(f))
    qs = [c for c in (rows[0].keys() if rows else []) if c != "student"]
    maxima = {q: float(rows[0][q]) for q in qs} if rows and rows[0]["student"] == POINTS_ROW else {}
    scores = {r["student"]: {q: float(r[q]) for q in qs if r.get(q, "") != ""}
              for r in rows if r["student"] != POINTS_ROW}
    return maxima, scores


POINTS_ROW = "(points possible)"


def write_outputs(results: list[Result], out: Path, lab: str, deadline: str | None = None,
                  duplicates: str = "flag") -> None:
    """gradebook.csv (a column per question, autograded and manual), canvas.csv, gradescope.csv,
    report.txt (roster and duplicate findings) and feedback/<student>.txt, from `results`, the
    roster kept in `out` and the manual scores merged into `out`."""
    try:
        from grading import integrity
    except ImportError:
        import integrity
    out.mkdir(parents=True, exist_ok=True)
    roster = read_roster(out / "roster.csv") if (out / "roster.csv").is_file() else None
    results = sorted(results, key=lambda r: r.student)
    by = {r.student: r for r in results}
    report = []
    if roster is not None:
        for s in roster:
            if s not in by:
                by[s] = Result(student=s, status="missing", reason="no submission")
        unknown = sorted(s for s in by if s not in roster)
        missing = sorted(s for s in roster if by[s].status == "missing")
        report.append(f"roster: {len(roster)} students, {len(roster) - len(missing)} handed in")
        report += [f"missing: {s} (on the roster, no submission)" for s in missing]
        report += [f"unknown: {s} (a submission not on the roster)" for s in unknown]
    results = [by[k] for k in sorted(by)]
    possible = max((r.possible for r in results), default=0.0)
    maxima, manual = manual_scores(out)
    dups = integrity.duplicates({r.student: r.raw for r in results if r.raw})
    tests = sorted({t for r in results for t in r.tests})
    rows = []
    for r in results:
        eff, why = dict(r.tests), {}
        flags = list(r.flags)
        if r.student in dups:
            others = dups[r.student]
            named = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
            flags.append(f"duplicate raw logs: the same raw files as {named} (for review)")
            report.append(f"duplicate raw logs: {r.student} shares raw files with {named}")
            for t in (r.measured if duplicates == "zero" else []):
                if eff.get(t):
                    # (the student's feedback does not name the other: the gradebook does)
                    eff[t], why[t] = 0.0, "raw logs identical to another student's (for review)"
        if roster is not None and r.student not in roster:
            flags.append("not on the roster")
        info = (roster or {}).get(r.student, {})
        when = info.get("deadline") or deadline
        late = ""
        if when and r.submitted is not None:
            late = f"{max(0.0, (r.submitted - _when(when)) / 3600):.2f}"
        elif when:
            report.append(f"no hand-in time: {r.student} (a folder: its file times are the ones "
                          "the student's zip carried; grade the zips for late_hours)")
        man = manual.get(r.student, {})
        auto = sum(eff.values())
        total = auto + sum(man.values())
        rows.append((r, info, eff, why, flags, late, man, auto, total))
    full = possible + sum(maxima.values())
    submitted = lambda r: (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(r.submitted))
                           if r.submitted is not None else "")
    with open(out / "gradebook.csv", "w", newline="") as f:
        w = _csv_writer(f)
        w.writerow(["student", "name", "score", "possible", "percent", "status", "reason", "flags",
                    "submitted", "late_hours", "seconds", "auto", "manual"] + tests + list(maxima))
        for r, info, eff, why, flags, late, man, auto, total in rows:
            pct = 100 * total / full if full else 0.0
            w.writerow([r.student, info.get("name", ""), f"{total:g}", f"{full:g}", f"{pct:.1f}",
                        r.status, r.reason, "; ".join(flags), submitted(r), late, r.seconds,
                        f"{auto:g}", f"{sum(man.values()):g}"]
                       + [f"{eff.get(t, 0):g}" for t in tests]
                       + [f"{man[q]:g}" if q in man else "" for q in maxima])
    title = f"{lab} (autograded)" if not maxima else lab
    with open(out / "canvas.csv", "w", newline="") as f:
        w = _csv_writer(f)
        w.writerow(["Student", "ID", "SIS User ID", "Section", title])
        w.writerow(["    Points Possible", "", "", "", f"{full:g}"])
        for r, info, *_, total in rows:
            w.writerow([info.get("name") or r.student, "", info.get("sis_id") or r.student,
                        info.get("section", ""), f"{total:g}"])
    with open(out / "gradescope.csv", "w", newline="") as f:
        w = _csv_writer(f)
        w.writerow(["SID", "Name", "Email", "Score"])
        for r, info, *_, total in rows:
            w.writerow([r.student, info.get("name") or r.student, info.get("email", ""), f"{total:g}"])
    (out / "report.txt").write_text("\n".join(report or ["nothing to report"]) + "\n")
    fb = out / "feedback"
    fb.mkdir(exist_ok=True)
    for r, info, eff, why, flags, late, man, auto, total in rows:
        head = f"{lab}: {total:g}/{full:g}" + (f"\n{r.status}: {r.reason}" if r.reason else "")
        extra = [f"{t}: now 0 -- {w_}" for t, w_ in why.items()]
        extra += [f"flagged: {f_}" for f_ in r.flags]          # the checks' findings (no names)
        if r.student in dups:
            extra.append("flagged: raw logs identical to another student's, for review")
        if late and float(late) > 0:
            extra.append(f"handed in {late} h after the deadline")
        manual_txt = ("\n".join(f"{q}: {man[q]:g}/{maxima[q]:g} (graded by hand)" for q in maxima if q in man)
                      or "Free-text answers are graded by hand.")
        (fb / f"{r.student}.txt").write_text(head + "\n\n" + r.feedback + "\n"
                                             + ("".join(l + "\n" for l in extra))
                                             + "\n" + manual_txt + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Grade a folder of lab submissions (no experiments are re-run).")
    ap.add_argument("submissions")
    ap.add_argument("--autograder", required=True, help="the autograder zip grading/build.py made")
    ap.add_argument("--out", required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120, help="s per submission")
    ap.add_argument("--memory-mb", type=int, default=2048, help="address-space limit per submission")
    ap.add_argument("--engine", choices=("fast", "otter"), default="fast",
                    help="fast: the notebook in a sandboxed student process, otter's tests in a separate "
                         "grading process (default); otter: `otter run` (comparison only)")
    ap.add_argument("--user", default="nobody",
                    help="unprivileged user each submission runs as (when root); '' runs them as "
                         "this process's user, unsandboxed")
    ap.add_argument("--roster", help="CSV: student (the submissions' names), and optionally name, "
                    "email, sis_id, section, deadline")
    ap.add_argument("--only", nargs="+", metavar="STUDENT",
                    help="regrade these students only; the other rows of OUT are kept")
    ap.add_argument("--zero-duplicates", action="store_true",
                    help="score 0 the measured answers of every submission whose raw logs are the "
                         "same as another's (default: flag both for review, scores unchanged)")
    ap.add_argument("--deadline", help="e.g. 2026-03-01T23:59:00Z: late_hours from the zips' own "
                    "times (not for folder entries; a roster's deadline column wins)")
    ap.add_argument("--secret", help="the course secret (grading/links.py secret FILE): every "
                    "run of labs 1, 3 and 4 must be on its student's own link")
    a = ap.parse_args(argv)
    if not Path(a.submissions).is_dir():
        raise SystemExit(f"grade: no folder {a.submissions}")
    if not Path(a.autograder).is_file():
        raise SystemExit(f"grade: no autograder zip {a.autograder}")
    grade_all(Path(a.submissions), Path(a.autograder), Path(a.out), a.jobs, a.timeout,
              a.memory_mb, a.user, engine=a.engine, progress=print,
              roster=Path(a.roster) if a.roster else None, only=a.only, deadline=a.deadline,
              duplicates="zero" if a.zero_duplicates else None,
              secret=Path(a.secret) if a.secret else None)
    print(f"gradebook: {Path(a.out) / 'gradebook.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
