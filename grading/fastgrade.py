"""The fast grading engine: a student process that hands back data, and a grading process that
never runs student code.  A parent imports otter, pandas and matplotlib once, then forks the
grading process of each submission; the student's process is forked by the zygote, a fresh
interpreter that has warmed up the same imports and knows nothing of the grader's (Zygote), or,
without one, starts a fresh interpreter of its own (start_student).

The student process (untrusted)
  * starts a new session, sets RLIMIT_AS / RLIMIT_FSIZE / RLIMIT_CORE (and RLIMIT_NPROC),
  * drops to a uid of its own (JOB_UIDS, setgroups([]), setgid, setuid) when the parent is root,
    in a process that knows only its folder, the names and its channel (a fork of the zygote),
  * executes the notebook's code cells in order in one namespace, as a kernel would (IPython's
    input transformer turns magics into calls; a cell that raises is recorded and skipped),
    without otter's own `grader.*` calls,
  * then hands back, on a pipe, the variables the tests read, as tagged JSON (grading/answers.py),
    and serves calls of its functions: the grading process sends the arguments it chose, the
    student process runs the function and sends back its result and the arguments' new state.
It never holds a test: the parent has not read them when it forks (a one-off helper process lists
the names the tests read, and only the names cross over), and the autograder folder is readable
by the grading user only.

The grading process (trusted: it executes no student code; as root, grade.py runs it as a uid of
its own, GRADER_UIDS, whose group alone with the parent may read the tests)
  * works in its own folder: the submission's `submission/` files copied before the student
    process started, and the autograder's support files (labkit.py, ...), nothing else,
  * loads the test files only now, decodes the answers strictly as data (an unknown form, or a
    module the autograder does not supply, is refused; an object only of a data class of the
    autograder's files, and with data only in it), binds the names the master imports or sets to
    a literal (TRUSTED) to its own modules and values, and runs every test file's cases with
    otter's `create_test_file(...).run(namespace)` against them: the hidden cases recompute each
    measured answer from the raw logs with its own labkit,
  * scores (`score_file`): a question's points are earned only when all of its hidden cases pass
    (the record check and the recomputation); the public cases (types, shapes) give feedback and
    are worth nothing.  A question without hidden cases is scored by its public ones.
  * checks its copy of the results (grading/integrity.py: the record of every file the answers
    read, cross-checks between the run's sources, the raw logs' digests for the class-wide
    duplicate check) while the student process runs, and sends the findings with the grade,
  * writes the grade on a pipe only the parent reads.  Nothing the student process writes, to a
    file or a pipe, becomes a score: what it sends is data that the tests compare.
The parent kills a student process that outlives its time limit (SIGKILL to its session), and
the grading process with it.  A MemoryError ends the student process with status "memory".
`grade.py --engine otter` runs the real `otter run` instead, for comparison (not this boundary).
"""

from __future__ import annotations

import ast
import builtins
import doctest
import importlib
import importlib.util
import json
import os
import re
import secrets
import selectors
import struct
import resource
import signal
import socket
import sys
import time
import zipfile
from pathlib import Path

try:
    from grading import answers as _answers
    from grading import integrity as _integrity
except ImportError:                     # run from inside grading/
    import answers as _answers
    import integrity as _integrity

GRADER_LINE = ("grader.", "import otter", "grader =", "# Initialize Otter")


def preload() -> None:
    """Import everything a child needs and exercise the code paths the labs use (CSV parsing,
    groupby/merge, line and step plots, layout), so each forked child starts warm."""
    import io
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd
    df = pd.read_csv(io.StringIO("k,t,v,s\na,0.1,1,x\na,0.2,2,x\nb,0.1,3,y\n"))
    g = df.groupby(["k", "s"]).agg(v=("v", "sum"), t=("t", "min"), e=("t", "max")).reset_index()
    g.merge(df, on=["k", "s"], how="left").groupby("k")["v_x"].median()
    pd.Series({("a", "b"): 1.0}).unstack(0)
    pd.DataFrame({"x": [1.0]}, index=["r"])
    np.arange(0, 1, 0.1)
    for shape in ((1, 2), (2, 2), (2, 1), (1, 1)):
        fig, axes = plt.subplots(*shape, figsize=(6, 3), sharex=True)
        ax = np.atleast_1d(axes).ravel()[0]
        ax.plot([0, 1], [0, 1], ".", ms=2, label="x"); ax.step([0, 1], [1, 0], where="post")
        ax.axvline(0.5); ax.set_title("t"); ax.set_xlabel("x"); ax.set_ylabel("y"); ax.legend()
        fig.tight_layout()
        plt.close("all")
    pd.Series({"a": 1.0, "b": 2.0}).plot.bar(); plt.close("all")
    pd.Series({"a": 1.0}).plot.barh(); plt.close("all")
    import hashlib, json, importlib.util  # noqa: F401,E401
    import nbformat  # noqa: F401
    from IPython.core.inputtransformer2 import TransformerManager
    TransformerManager().transform_cell("x = 1\n")
    from otter.test_files import create_test_file  # noqa: F401
    from otter.test_files.exception_test import ExceptionTestFile  # noqa: F401
    _answers.decode(_answers.encode({"a": pd.Series([1.0], index=pd.MultiIndex.from_tuples([("x", "y")]))}),
                    lambda m, q: None)
    import doctest  # noqa: F401
    import gc
    gc.collect()
    gc.freeze()                 # keep the warm heap shared with the children (no CoW on gc)


# What the master notebook binds by import (`import kmodlab as KM`, `from cclab.analysis import
# stats`) and the constants it sets to a literal (`LAB = "lab4"`, `SEED = 5`): grading/build.py
# writes them into the autograder as TRUSTED, with the support files only the grading process may
# hold (lab 5's reference learner).  The hidden tests call what the notebook's namespace holds
# under those names (`KM.load_fresh()`, `labkit.close(...)`, `verify(LAB)`), so the grading
# process binds each name a test reads to its own module or to the master's value, whatever the
# notebook sent under it.
TRUSTED = "cclab-trusted.json"


def read_trusted(ag: Path) -> dict:
    """The autograder's TRUSTED table ({} for an autograder built before it existed); a table
    that is not the one build.py writes raises ValueError."""
    try:
        t = json.loads((Path(ag) / TRUSTED).read_text())
    except FileNotFoundError:
        return {}
    ok = (isinstance(t, dict) and isinstance(t.get("modules", {}), dict)
          and isinstance(t.get("constants", {}), dict) and isinstance(t.get("grader_only", []), list)
          and all(isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) for x in v)
                  for v in t.get("modules", {}).values()))
    if not ok:
        raise ValueError(f"{TRUSTED} in the autograder is malformed")
    return t


def unpack_autograder(zip_path: Path, dest: Path) -> Path:
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(dest)
    return dest


def _cells(nb_path: Path) -> list[str]:
    import nbformat
    from IPython.core.inputtransformer2 import TransformerManager
    tm = TransformerManager()
    nb = nbformat.read(nb_path, as_version=4)
    out = []
    for c in nb.cells:
        if c.cell_type != "code":
            continue
        src = "\n".join(l for l in c.source.splitlines() if not l.lstrip().startswith(GRADER_LINE))
        if src.strip():
            out.append(tm.transform_cell(src))
    return out


# ---------------------------------------------------------------- the channel

HEADER = struct.Struct("!Q")


def send(fd: int, obj) -> None:
    data = json.dumps(obj, separators=(",", ":")).encode()
    view = memoryview(HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _read(fd: int, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        b = os.read(fd, min(n - got, 1 << 20))
        if not b:
            raise EOFError("the other process closed the channel")
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def recv(fd: int, limit: int = 256 << 20):
    (n,) = HEADER.unpack(_read(fd, HEADER.size))
    if n > limit:
        raise ValueError(f"a message of {n} bytes (limit {limit})")
    return json.loads(_read(fd, n))


def one_line(text: str, limit: int = 100) -> str:
    """A student's error text as one short printable line (never a traceback, never markup)."""
    line = next((l for l in str(text).splitlines() if l.strip()), "")
    line = re.sub(r"[^\x20-\x7e]", "?", line).strip()
    return line if len(line) <= limit else line[:limit - 3] + "..."


# ---------------------------------------------------------------- what the tests read

def _case_source(body: str) -> str:
    return "".join(ex.source for ex in doctest.DocTestParser().get_examples(body))


def free_names(src: str) -> set[str]:
    """Names a piece of test code reads but does not bind itself (the notebook's variables)."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return set()
    loaded, bound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return loaded - bound - set(dir(builtins))


def load_tests(tests_dir: Path) -> list:
    """The autograder's test files, parsed (in the grading process only)."""
    from otter.test_files import create_test_file
    return [create_test_file(str(path), None) for path in sorted(Path(tests_dir).glob("*.py"))]


def test_names(tests_dir: Path) -> list[str]:
    """The notebook variables the tests read, worked out in a one-off process, so that this one
    (which forks every student process) never holds a test."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(r)
            names = set()
            for tf in load_tests(tests_dir):
                for tc in tf.test_cases:
                    names |= free_names(_case_source(tc.body))
            send(w, sorted(names))
        except BaseException:          # noqa: BLE001
            code = 1
        os._exit(code)
    os.close(w)
    try:
        names = recv(r)
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    return names


# ---------------------------------------------------------------- the student process

def _sandbox(work: Path, memory_mb: int, user) -> None:
    """In the forked child, before the student's interpreter starts: its own session, its
    limits, the unprivileged user, the work folder, its log on standard output and error."""
    os.setsid()
    mem = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (512 << 20, 512 << 20))
    if user is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (64, 64))
        drop_to(user)
    os.chdir(work)
    log = os.open(work / "log.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)


# The student's notebook runs in a fresh interpreter, not in a fork of the grader: a fork holds
# everything the parent knows (the course secret, every submission's folder, the grades made so
# far), and a notebook reaches it through the frames it was called from.  Only the work folder,
# the names the tests read and the channel cross over; the environment is this one.
def student_env(work: Path) -> dict:
    return {"HOME": str(work), "TMPDIR": str(work), "CCLAB_REPLAY": "1", "MPLBACKEND": "Agg",
            "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1"}


# Each submission's process runs as a uid of its own, from JOB_UIDS on, in the sandbox user's
# group: the uids of no account (the kernel needs none).  Two submissions graded side by side
# then cannot signal each other, read each other's folder or /proc/<pid>/cwd, or share a process
# limit; and when a job ends, whatever it started and detached from its session is killed by
# uid (kill_all_of), so nothing of it outlives its time limit or waits for the next submission.
JOB_UIDS = 2_100_000_000

# Each submission's grading process runs as a uid of its own too, from GRADER_UIDS on, in a group
# of no account that alone may read the autograder's tests (grader_gid: one per run, so the
# grading processes of two runs at once cannot read each other's tests): it decodes and tests
# what a student sent, so a flaw in that code gives a submission that uid, not root's.  The
# student processes (the sandbox user's group) can read neither the tests nor its folder.
GRADER_UIDS = 2_200_000_000

# A grading run takes a block of UID_BLOCK uids in each range (job n of the run: JOB_UIDS +
# base + n, GRADER_UIDS + base + n), chosen at random among the UID_BLOCKS blocks no other run
# holds (a lock file per block in UID_LOCKS, held while the run lasts): two runs at once never
# share a uid, so one's clean-up never kills the other's jobs.
UID_BLOCK = 100_000
UID_BLOCKS = 1_000
UID_LOCKS = Path("/run/cclab-grade")
PR_SET_NO_NEW_PRIVS = 38


def _lock_block(locks: Path, b: int) -> int | None:
    """A descriptor holding block b's lock, or None while another run holds it."""
    import fcntl
    fd = os.open(locks / f"block-{b}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def claim_uids(locks: Path = UID_LOCKS) -> tuple[int, int]:
    """(base, lock): a block of uids no other run holds, until `lock` (a descriptor) is closed."""
    import random
    locks.mkdir(mode=0o700, parents=True, exist_ok=True)
    order = list(range(UID_BLOCKS))
    random.SystemRandom().shuffle(order)
    for b in order:
        fd = _lock_block(locks, b)
        if fd is not None:
            return b * UID_BLOCK, fd
    raise RuntimeError(f"every block of grading uids in {locks} is held by another run")


def drop_to(user) -> None:
    """Become (uid, gid) with no other group, for good (the caller is root), and never gain a
    privilege again: a set-user-ID file (one a job left behind for another) runs as the caller."""
    import ctypes
    uid, gid = user
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)


def _proc_status(pid: str) -> dict:
    try:
        with open(f"/proc/{pid}/status") as f:
            return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    except OSError:                     # gone meanwhile
        return {}


def live_processes_of(uid: int) -> list[int]:
    """The pids of the processes whose real uid is `uid`, zombies left out."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            st = _proc_status(pid)
            if st.get("Uid", "").split("\t")[:1] == [str(uid)] and not st.get("State", "").startswith("Z"):
                out.append(int(pid))
    return out


def job_uids(uid_base: int, n: int) -> tuple[int, int]:
    """Job n's two uids in the run's block: its student process's and its grading process's."""
    return JOB_UIDS + uid_base + n, GRADER_UIDS + uid_base + n


def killer_uid(uid_base: int) -> int:
    """The run's uid that never runs a job: kill_all_of's helper keeps it as its real and saved
    uid, so no process of a job can signal the helper (stop it before it kills them, say)."""
    return JOB_UIDS + uid_base + UID_BLOCK - 1


def grader_gid(uid_base: int) -> int:
    """The run's group of no account: its grading processes' only group, the one (besides
    root) that may read its autograder's tests."""
    return GRADER_UIDS + uid_base + UID_BLOCK - 1


def block_of(uid: int) -> int | None:
    """The block (claim_uids) a job's uid belongs to, or None for a uid of no block."""
    for first in (JOB_UIDS, GRADER_UIDS):
        if first <= uid < first + UID_BLOCKS * UID_BLOCK:
            return (uid - first) // UID_BLOCK
    return None


def sweep_stale(locks: Path = UID_LOCKS, mine: int | None = None) -> list[int]:
    """Kill what runs as a uid of a block no live run holds: the jobs of a grade.py that was
    killed outright (SIGKILL, or the machine's OOM killer) before it could end them.  Each such
    block is locked while it is swept, so a run that claims it meanwhile finds nothing left;
    `mine`, the block the caller holds, is swept without its lock (what runs as its uids before
    its first job is a dead run's too).  Returns the uids killed."""
    found: dict[int, set[int]] = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            st = _proc_status(pid)
            try:
                uid = int(st.get("Uid", "").split("\t")[0])
            except ValueError:
                continue
            b = block_of(uid)
            if b is not None and not st.get("State", "").startswith("Z"):
                found.setdefault(b, set()).add(uid)
    killed = []
    for b, uids in sorted(found.items()):
        fd = None
        if b != mine:
            try:
                fd = _lock_block(locks, b)
            except OSError:
                continue
            if fd is None:              # a live run's: its own clean-up will do
                continue
        try:
            for uid in sorted(uids):
                kill_all_of(uid, killer_uid(b * UID_BLOCK))
                killed.append(uid)
            remove_files_of(set(uids))
        finally:
            if fd is not None:
                os.close(fd)
    return killed


def kill_all_of(uid: int, killer: int, tries: int = 5) -> None:
    """SIGKILL every process of `uid`, again while any is left (one forked while the signals
    went out).  A helper with `uid` as its effective uid, `killer` as its real and saved ones,
    sends kill(-1): it may signal every process whose real or saved uid is `uid`, and none of
    them may signal it."""
    for _ in range(tries):
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setresgid(killer, killer, killer)    # a group of no account, too
                os.setresuid(killer, uid, killer)
                os.kill(-1, signal.SIGKILL)     # every process of uid, not the caller itself
            except BaseException:       # noqa: BLE001 -- ESRCH: nothing left
                pass
            os._exit(0)
        os.waitpid(pid, 0)
        if not live_processes_of(uid):
            return


def remove_files_of(uids, places=("/tmp", "/var/tmp", "/dev/shm", "/run/lock"),
                    depth: int = 4) -> list[str]:
    """Remove what the uids (a run's, every process of them gone) left in the world-writable
    folders: at their top, and in the world-writable folders of others within them (down to
    `depth` levels: /tmp/.X11-unix, a course's shared /tmp/scratch).  Returns the paths
    removed."""
    import shutil
    import stat
    gone = []

    def sweep(d: str, level: int) -> None:
        try:
            entries = list(os.scandir(d))
        except OSError:
            return
        for e in entries:
            try:
                st = e.stat(follow_symlinks=False)
                if st.st_uid not in uids:
                    if (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_IWOTH
                            and level < depth):
                        sweep(e.path, level + 1)
                    continue
                if stat.S_ISDIR(st.st_mode):
                    shutil.rmtree(e.path)
                else:
                    os.unlink(e.path)
                gone.append(e.path)
            except OSError:
                pass

    for d in places:
        sweep(d, 1)
    return gone


# This file and the modules it imports: what the student's interpreter runs (grade.py copies
# them where the sandbox user can read them; gradescope.py bundles them).
ENGINE_FILES = ("fastgrade.py", "answers.py", "integrity.py")


CLONE_NEWIPC = 0x08000000


def _own_ipc() -> None:
    """A System V IPC and POSIX message-queue namespace of the student process's own (as root;
    elsewhere nothing changes): a shared memory segment, a semaphore or a queue it leaves dies
    with its last process instead of holding the grader's memory after the run."""
    if os.geteuid() == 0:
        import ctypes
        ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWIPC)


def _did_not_start(out: int, e: BaseException) -> None:
    try:
        send(out, {"status": "error", "reason": one_line(
            f"the notebook's process did not start: {type(e).__name__}: {e}", 200)})
    except BaseException:               # noqa: BLE001
        pass


def start_student(work: Path, names: list[str], out: int, inp: int, memory_mb: int, user,
                  engine: Path) -> None:
    """In the forked child: the sandbox, then `python ENGINE/fastgrade.py --student ...` in its
    place (engine: a folder holding ENGINE_FILES, readable by the sandbox user).  Never
    returns."""
    try:
        _own_ipc()
        _sandbox(work, memory_mb, user)
        for fd in (out, inp):
            os.set_inheritable(fd, True)
        os.execve(sys.executable, [sys.executable, "-s", "-E", str(Path(engine) / "fastgrade.py"),
                                   "--student", str(work), str(out), str(inp), json.dumps(names)],
                  student_env(work))
    except BaseException as e:          # noqa: BLE001
        _did_not_start(out, e)
    os._exit(4)


# ---------------------------------------------------------------- the zygote

# Starting an interpreter and importing pandas and matplotlib for each notebook was three
# quarters of a grade's CPU time.  The zygote is one fresh interpreter (exec'd, so it holds
# nothing of the grader's: no secret, no other job's folder, no grade) that imports and warms
# what a notebook needs once (preload) and forks each job's student process from that state.
# It learns one job at a time: its folder, the names the tests read, its limits and uid, and the
# two ends of its channel (passed as descriptors).  It forks through an intermediate process
# that exits at once, and the grader is a child subreaper, so the student process becomes the
# grader's child: the grader waits for it and kills it as it does a process it forked itself.

PR_SET_CHILD_SUBREAPER = 36


def subreaper(on: bool) -> None:
    """Make this process the reaper of its orphaned descendants (on), or stop."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)


class Zygote:
    """The grader's side: start the zygote, ask it for a student process per job."""

    def __init__(self, engine: Path, home: Path):
        import subprocess
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {"HOME": str(home), "MPLCONFIGDIR": str(home), "MPLBACKEND": "Agg",
               "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-s", "-E", str(Path(engine) / "fastgrade.py"), "--zygote",
             str(theirs.fileno())], pass_fds=(theirs.fileno(),), env=env, cwd=str(home),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        theirs.close()
        if self.sock.recv(64) != b"ready":          # once it has warmed up
            self.close()
            raise RuntimeError("the zygote did not start")

    def start(self, work: Path, names: list[str], out: int, inp: int, memory_mb: int, user) -> int:
        """The pid of a new student process for this job (a child of this process)."""
        req = json.dumps({"work": str(work), "names": names, "memory_mb": memory_mb,
                          "user": list(user) if user is not None else None}).encode()
        socket.send_fds(self.sock, [req], [out, inp])
        pid = int(self.sock.recv(64) or b"0")
        if pid <= 0:
            raise RuntimeError("the zygote could not fork")
        return pid

    def close(self) -> None:
        import subprocess
        self.sock.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def zygote(fd: int) -> None:
    """The zygote's loop (`fastgrade.py --zygote FD`): warm up, then a student process per
    request, until the grader closes the socket."""
    sock = socket.socket(fileno=fd)
    preload()
    sock.send(b"ready")
    while True:
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 2)
        if not msg:
            break
        r, w = os.pipe()
        mid = os.fork()
        if mid == 0:                    # the intermediate: fork the student process, say its pid
            os.close(r)
            try:
                req = json.loads(msg)
                child = os.fork()
                if child == 0:
                    sock.close()
                    os.close(w)
                    student_child(Path(req["work"]), req["names"], fds[0], fds[1],
                                  int(req["memory_mb"]),
                                  tuple(req["user"]) if req["user"] is not None else None)
                os.write(w, str(child).encode())
            except BaseException:       # noqa: BLE001 -- the grader is told 0
                pass
            os._exit(0)
        os.close(w)
        for f in fds:
            os.close(f)
        pid = os.read(r, 64)
        os.close(r)
        os.waitpid(mid, 0)              # gone: its child is the grader's now
        sock.send(pid or b"0")
    os._exit(0)


def student_child(work: Path, names: list[str], out: int, inp: int, memory_mb: int, user) -> None:
    """In the zygote's fork: the sandbox, then the notebook (student_process).  Never returns."""
    try:
        _own_ipc()
        _sandbox(work, memory_mb, user)
        _close_others({out, inp})
        os.environ.clear()
        os.environ.update(student_env(work))
        import tempfile
        tempfile.tempdir = None         # TMPDIR is the job's folder now
        student_process(work, names, out, inp)
    except BaseException as e:          # noqa: BLE001
        _did_not_start(out, e)
    os._exit(4)


def _close_others(keep: set[int]) -> None:
    """Close every descriptor above 2 but `keep`."""
    lo = 3
    for fd in sorted(keep) + [resource.getrlimit(resource.RLIMIT_NOFILE)[0]]:
        if fd >= lo:
            os.closerange(lo, fd)
            lo = fd + 1


def student_process(work: Path, names: list[str], out: int, inp: int) -> None:
    """The student's interpreter (start_student); never returns.  Sends one message,
    {"status": ..., "answers": {name: tagged JSON}, "cell_errors": [...]}, then answers calls
    until the grading process closes the channel."""
    code = 0
    try:
        sys.path.insert(0, str(work))
        env, errors = run_cells(work)
        if env is None:
            send(out, {"status": "missing", "reason": "no notebook in the submission"})
        else:
            encode = _answers.encode
            funcs: list = []
            answers = {}
            for n in names:
                if n in env:
                    try:
                        answers[n] = encode(env[n], funcs)
                    except MemoryError:
                        raise
                    except Exception as e:      # noqa: BLE001
                        answers[n] = {"$unreadable": type(e).__name__}
            send(out, {"status": "ran", "answers": answers, "cell_errors": errors})
            serve(inp, out, funcs)
    except MemoryError:
        code = 3
        try:
            send(out, {"status": "memory"})
        except BaseException:           # noqa: BLE001
            pass
    except EOFError:
        pass
    except BaseException as e:          # noqa: BLE001 -- anything: report it, never hang
        code = 4
        try:
            send(out, {"status": "error", "reason": one_line(f"{type(e).__name__}: {e}")})
        except BaseException:           # noqa: BLE001
            pass
    os._exit(code)


def _resolve_any(mod: str, qual: str | None):
    """The student side decodes the grader's arguments with any module it can import."""
    try:
        obj = importlib.import_module(mod)
        for part in (qual.split(".") if qual else []):
            obj = getattr(obj, part)
        return obj
    except Exception:                   # noqa: BLE001
        return None


def serve(inp: int, out: int, funcs: list) -> None:
    decode, encode = _answers.decode, _answers.encode
    while True:
        req = recv(inp)
        try:
            f = funcs[int(req["call"])]
            args = decode(req["args"], _resolve_any)
            kwargs = decode(req["kwargs"], _resolve_any)
        except Exception as e:          # noqa: BLE001
            send(out, {"error": one_line(f"bad call: {e}")})
            continue
        try:
            res = f(*args, **kwargs)
            rep = {"ok": encode(res, funcs), "args": encode(args, None), "kwargs": encode(kwargs, None)}
        except MemoryError:
            raise
        except BaseException as e:      # noqa: BLE001 -- the student's function failed
            rep = {"error": one_line(f"{type(e).__name__}: {e}")}
        send(out, rep)


def _display(*objs, **kwargs) -> None:
    """A kernel's display() where nothing is displayed: the notebook's cell goes on."""


def run_cells(work: Path):
    """Execute the notebook in `work`: (namespace, [one line per cell that raised]), or
    (None, []) when there is no notebook."""
    import matplotlib.pyplot as plt
    nbs = sorted(work.glob("*.ipynb"))
    if not nbs:
        return None, []
    # Figures are never drawn when grading: skip the layout pass (a third of a lab's run time).
    import matplotlib.figure
    matplotlib.figure.Figure.tight_layout = lambda self, *a, **k: None
    # what a Jupyter kernel puts in a notebook's namespace: `display` (nothing is shown here)
    env = {"__name__": "__main__", "__builtins__": __builtins__, "display": _display}
    errors = []
    for i, src in enumerate(_cells(nbs[0])):
        try:
            exec(compile(src, f"<cell {i + 1}>", "exec"), env)
        except MemoryError:
            raise
        except BaseException as e:       # noqa: BLE001 -- a failing cell is the student's
            if isinstance(e, (SystemExit, KeyboardInterrupt)):
                errors.append(f"cell {i + 1}: {type(e).__name__}")
            else:
                errors.append(f"cell {i + 1}: " + one_line(f"{type(e).__name__}: {e}", 80))
        finally:
            plt.close("all")
    return env, errors


# ---------------------------------------------------------------- the grading process

# Modules (and their classes) an answer may name: the numeric libraries and the autograder's
# own support files.  Anything else a submission names (os, subprocess, its own files) is
# refused, and every function it hands over runs in its own process.
SAFE_MODULES = {"numpy", "pandas", "math", "fractions", "decimal", "statistics", "random",
                "collections", "itertools", "functools", "pathlib", "datetime", "matplotlib",
                "cclab"}


# A hidden case's assertion message starts so when the runs are not the lab's conditions (no loss
# on the lossy path, a link not filled): a fault of the run, not of the answer.  Which way an
# experiment came out is never graded; the free-text questions discuss it.
SETUP = "not this lab's setup: "


class StudentCallFailed(Exception):
    """A call of the student's function raised in the student's process (one line)."""


def score_file(tf) -> tuple[float, str]:
    """(points earned, one-line reason) for one question.  All its hidden cases (the record check
    and the recomputation from the raw logs) must pass for any points; public cases weigh 0."""
    results = tf.test_case_results
    hidden = [r for r in results if r.test_case.hidden]
    judged = hidden or results
    possible = float(tf.possible)
    if judged and all(r.passed for r in judged):
        return possible, ""
    failed = next(r for r in judged if not r.passed)
    msg = _raised(failed.message or "")         # the exception, not the transcript of the code
    if "not the results of a real run" in msg:
        why = "the results fail the record check"
    elif SETUP in msg:
        why = "the runs are not this lab's setup (" + one_line(msg.split(SETUP, 1)[1], 70) + ")"
    elif "NameError" in msg:
        m = re.search(r"name '(\w+)' is not defined", msg)
        why = f"answer {m.group(1) if m else '?'} is not defined"
    elif "unreadable answer" in msg:
        why = "an answer is not data the grader reads (" + one_line(msg.split("unreadable answer:")[-1], 60).rstrip(">") + ")"
    elif "StudentCallFailed" in msg:
        why = "your function raised when the grader called it"
    elif not hidden:
        why = "a check failed"
    else:
        why = "the answer does not match its recomputation from the raw logs"
    return 0.0, why


def grading_process(tdir: Path, tests_dir: Path, inp: int, out: int, result_fd: int, memory_mb: int,
            modules: set[str], lab: str | None = None, user=None) -> None:
    """Runs in the forked grading process; never returns.  Writes one JSON message on result_fd.
    `user`: the (uid, gid) it drops to (GRADER_UIDS), or None to stay as it is."""
    code = 0
    try:
        os.setsid()
        mem = max(memory_mb, 2048) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if user is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (16, 16))
            drop_to(user)
        os.chdir(tdir)
        os.environ.update({"CCLAB_REPLAY": "1", "MPLBACKEND": "Agg", "HOME": str(tdir),
                           "MPLCONFIGDIR": str(tdir / ".matplotlib")})
        sys.path.insert(0, str(tdir))
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        _memo_csv_reads()
        # the grader's own checks of the results (grading/integrity.py), while the student
        # process runs its cells; the tables they read stay in the memo for the hidden tests
        checks = _checks(tdir / "submission", lab)
        result = grade_answers(tests_dir, inp, out, modules)
        result.update(checks)
    except BaseException as e:          # noqa: BLE001
        code = 4
        result = {"status": "error", "reason": one_line(f"the grader failed: {type(e).__name__}: {e}", 200)}
    try:
        send(result_fd, result)
    except BaseException:               # noqa: BLE001
        code = 5
    os._exit(code)


def _checks(sub: Path, lab: str | None) -> dict:
    try:
        found = _integrity.problems(sub, lab) if lab else []      # no folder: a finding
        return {"integrity": [one_line(x, 300) for x in found[:20]] + (
            [f"... and {len(found) - 20} more"] if len(found) > 20 else []),
                "raw": _integrity.raw_digests(sub)}
    except Exception as e:              # noqa: BLE001 -- a check that cannot run is a finding
        return {"integrity": [one_line(f"the results could not be checked: {type(e).__name__}: {e}", 200)],
                "raw": {}}


def _memo_csv_reads() -> None:
    """In the grading process only: every hidden case loads labkit afresh and reads the same raw
    CSV files again (a quarter of a grade).  The folder is this process's own copy, which nothing
    else writes, so a file read once is handed out again as a copy while its size and mtime hold."""
    import pandas as pd
    read = pd.read_csv
    memo: dict = {}

    def read_csv(path, *args, **kwargs):
        try:
            st = os.stat(path)
            key = (os.path.realpath(path), st.st_mtime_ns, st.st_size, repr(args),
                   repr(sorted(kwargs.items())))
        except (TypeError, OSError):        # a buffer, a URL: read as usual
            return read(path, *args, **kwargs)
        if key not in memo:
            memo[key] = read(path, *args, **kwargs)
        v = memo[key]
        return v.copy() if hasattr(v, "copy") else read(path, *args, **kwargs)

    pd.read_csv = read_csv


def grade_answers(tests_dir: Path, inp: int, out: int, modules: set[str]) -> dict:
    DecodeError, Unreadable = _answers.DecodeError, _answers.Unreadable
    trusted = read_trusted(Path(tests_dir).parent)
    decode, encode, update_in_place = _answers.decode, _answers.encode, _answers.update_in_place
    try:
        msg = recv(inp)
    except (EOFError, ValueError, struct.error) as e:
        return {"status": "no-answers", "reason": one_line(str(e))}
    if not isinstance(msg, dict) or msg.get("status") != "ran":
        st = msg.get("status") if isinstance(msg, dict) else None
        if st not in ("memory", "missing", "error"):
            return {"status": "error", "reason": "the notebook's process sent the grader something "
                    "other than its answers (a forged message?)"}
        # the reason is the notebook process's own text: kept to a plain line of words
        why = re.sub(r"[^A-Za-z0-9 _.,:;()'/-]", "?", one_line(str(msg.get("reason", ""))))
        return {"status": st, "reason": {"missing": "no notebook in the submission",
                                         "memory": "the notebook ran out of memory"}.get(st, why)}

    allowed = SAFE_MODULES | modules
    for name in list(sys.modules):      # the autograder's copies, not ones the parent imported
        if name.split(".")[0] in modules:
            del sys.modules[name]

    def resolve(mod: str, qual: str | None):
        """What an answer may name.  A module: one of the libraries or of the autograder's
        files, a submodule only once it is imported (importing one runs its code).  A class
        (an object's, or one sent as a value): only a data class of the autograder's own
        files (lab 5's Host and Arm), under its own name.  A name followed through attributes
        (`tuner_support`, `os._Environ`) reaches every class in this process: a mapping whose
        key decoder launches processes, a closer that deletes a file."""
        import dataclasses
        import types
        if qual is None:
            if mod.split(".")[0] not in allowed or ("." in mod and mod not in sys.modules):
                return None
            try:
                m = importlib.import_module(mod)
            except Exception:           # noqa: BLE001
                return None
            return m if isinstance(m, types.ModuleType) else None
        if mod not in modules or mod == "cclab" or not qual.isidentifier():
            return None
        try:
            cls = getattr(importlib.import_module(mod), qual)
        except Exception:               # noqa: BLE001
            return None
        if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == mod \
                and cls.__qualname__ == qual:
            return cls
        return None

    def own_module(mod: str, attr: str):
        if mod.split(".")[0] not in allowed:
            return Unreadable(f"module {mod}")
        try:
            m = importlib.import_module(mod)
            if not attr:
                return m
            try:
                return getattr(m, attr)
            except AttributeError:
                return importlib.import_module(f"{mod}.{attr}")
        except Exception:               # noqa: BLE001 -- the tests that need it fail
            return Unreadable(f"{mod}.{attr}" if attr else f"module {mod}")

    def proxy(handle: int):
        def call(*args, **kwargs):
            send(out, {"call": handle, "args": encode(list(args), None), "kwargs": encode(kwargs, None)})
            rep = recv(inp)
            if not isinstance(rep, dict):
                raise StudentCallFailed("malformed reply")
            if "error" in rep:
                raise StudentCallFailed(one_line(str(rep["error"])))
            res = decode(rep["ok"], resolve, proxy)
            new_args, new_kwargs = decode(rep["args"], resolve), decode(rep["kwargs"], resolve)
            if isinstance(new_args, list) and len(new_args) == len(args):
                for a, b in zip(args, new_args):
                    update_in_place(a, b)
            if isinstance(new_kwargs, dict):
                for k, a in kwargs.items():
                    if k in new_kwargs:
                        update_in_place(a, new_kwargs[k])
            return res
        call.__name__ = f"student_function_{handle}"
        return call

    ns = {"__name__": "__main__", "__builtins__": builtins}
    answers = msg.get("answers")
    if not isinstance(answers, dict):
        return {"status": "error", "reason": "malformed answers"}
    unread = []
    for name, value in answers.items():
        if not (isinstance(name, str) and name.isidentifier()):
            continue
        try:
            ns[name] = decode(value, resolve, proxy)
        except (DecodeError, ValueError, TypeError, KeyError, IndexError, OverflowError) as e:
            ns[name] = Unreadable(f"{name}: {one_line(str(e), 60)}")
        if isinstance(ns[name], Unreadable):
            unread.append(name)
    # the master's modules and constants under their names, not what the notebook sent there
    for name, (mod, attr) in trusted.get("modules", {}).items():
        ns[name] = own_module(mod, attr)
    for name, value in trusted.get("constants", {}).items():
        ns[name] = value
    unread = [n for n in unread if n not in trusted.get("modules", {}) and n not in trusted.get("constants", {})]
    results = []
    for tf in load_tests(tests_dir):
        tf.run(ns)
        score, why = score_file(tf)
        results.append({"name": tf.name, "score": score, "possible": float(tf.possible), "why": why,
                        "cases": [{"name": r.test_case.name, "hidden": r.test_case.hidden,
                                   "passed": r.passed,
                                   "message": "" if r.test_case.hidden else _public(r.message)}
                                  for r in tf.test_case_results]})
    errors = msg.get("cell_errors") if isinstance(msg.get("cell_errors"), list) else []
    return {"status": "graded", "tests": results,
            "cell_errors": [one_line(str(e), 100) for e in errors[:50]],
            "unreadable": sorted(unread)}


def _raised(message: str) -> str:
    """The last exception line of otter's doctest transcript ("" when none)."""
    lines = [l.strip() for l in str(message).splitlines() if l.strip()]
    raised = [l for l in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Failed)\b", l)]
    return raised[-1] if raised else ""


def _public(message: str) -> str:
    """A public case's message as one or two short lines: the failing check's own error line
    (it may quote the student's values), not otter's doctest transcript."""
    lines = [l.strip() for l in str(message).splitlines() if l.strip()]
    if not lines or lines[0].startswith("\u2705"):
        return ""
    raised = _raised(message)
    if raised:
        return one_line(raised, 300)
    if "Expected:" in lines and "Got:" in lines:
        i, j = lines.index("Expected:"), lines.index("Got:")
        return one_line("expected " + " ".join(lines[i + 1:j])[:120] + ", got " + " ".join(lines[j + 1:])[:120], 300)
    return one_line(lines[-1], 300)


# ---------------------------------------------------------------- the pipeline

def _trusted_folder(entry_submission: Path, tdir: Path, files_dir: Path) -> None:
    """The grading process's folder: the submission's results as handed in, the support files."""
    import shutil
    tdir.mkdir(parents=True)
    if entry_submission.is_dir():
        shutil.copytree(entry_submission, tdir / "submission", symlinks=False,
                        ignore_dangling_symlinks=True)
    if files_dir.is_dir():
        for f in files_dir.iterdir():
            if f.is_file():
                shutil.copy(f, tdir / f.name)
            elif f.name == "__pycache__":
                shutil.copytree(f, tdir / f.name)


def precompile(files_dir: Path) -> None:
    """Byte-compile the autograder's modules once (hash-checked, so copies stay valid): the hidden
    tests load labkit.py afresh in every case, and compiling it was a tenth of a grade."""
    import py_compile
    for p in Path(files_dir).glob("*.py"):
        py_compile.compile(str(p), cfile=importlib.util.cache_from_source(str(p)), doraise=False,
                           invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)


def support_modules(files_dir: Path) -> set[str]:
    """The autograder's own modules, importable in the grading process."""
    mods = {p.stem for p in Path(files_dir).glob("*.py")}
    return mods | ({"cclab"} if (Path(files_dir) / "cclab.zip").is_file() else set())


class NotGradable(Exception):
    """A submission that cannot be set up for grading (the one-line reason)."""


def run_all(jobs: list[tuple], tests_dir: Path, parallel: int, timeout: float,
            memory_mb: int, user, files_dir: Path | None = None, lab: str | None = None,
            engine: Path | None = None, own_uids: bool = True, uid_base: int = 0) -> dict[str, dict]:
    """jobs: (student, work folder, the grading process's folder[, prepare]); `prepare(owner)`
    is called just before the job starts, with the (uid, gid) its files are to belong to (None:
    no other user), and may raise NotGradable.  `user`: (uid, gid) of the sandbox user, whose
    group each job's student process takes, with a uid of its own (JOB_UIDS); with own_uids,
    each job's grading process takes a uid of its own too (GRADER_UIDS, group grader_gid: the
    caller makes the tests readable by that group and the folders above the grading process's
    passable), and its folder is given to that uid.  `uid_base`: the run's block of uids
    (claim_uids).  `engine`: the folder the student's interpreter runs this file from (this
    file's own by default).  Returns {student: result}."""
    engine = Path(engine or Path(__file__).resolve().parent)
    import shutil
    import tempfile
    preload()
    names = test_names(tests_dir)
    modules = support_modules(files_dir) if files_dir else set()
    pending = list(jobs)
    started = 0
    running: dict[str, dict] = {}
    done: dict[str, dict] = {}
    sel = selectors.DefaultSelector()
    if user is not None and own_uids and len(jobs) >= UID_BLOCK:
        raise ValueError(f"{len(jobs)} submissions in one run: at most {UID_BLOCK - 1}")
    home = Path(tempfile.mkdtemp(prefix="grade-zygote-"))
    subreaper(True)                     # the zygote's forks, and what they orphan, come here
    try:
        zyg = Zygote(engine, home)
    except Exception as e:              # noqa: BLE001 -- each notebook starts its own interpreter
        print(f"grade: warning: no zygote ({type(e).__name__}: {e}): each notebook starts an "
              "interpreter of its own (slower)", file=sys.stderr)
        zyg = None

    # A job's two processes are reaped only when the job is done: until then a pid that has
    # exited stays a zombie, so it cannot be given to another process (one a notebook made to
    # take it) that a status or a killpg would then be mistaken for.
    def exit_status(pid: int) -> int | None:
        """pid's wait status once it has exited, without reaping it; None while it runs."""
        try:
            r = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return 0
        if r is None or r.si_pid == 0:
            return None
        if r.si_code == os.CLD_EXITED:
            return (r.si_status & 0xFF) << 8
        return r.si_status | (0x80 if r.si_code == os.CLD_DUMPED else 0)

    def reap_orphans() -> None:
        """Reap the exited children that are no job's process: what notebooks orphaned."""
        mine = str(os.getpid())
        keep = {p for j in running.values() for p in (j["a"], j["b"])}
        if zyg is not None:
            keep.add(zyg.proc.pid)
        for pid in os.listdir("/proc"):
            if pid.isdigit() and int(pid) not in keep:
                st = _proc_status(pid)
                if st.get("PPid") == mine and st.get("State", "").startswith("Z"):
                    try:
                        os.waitpid(int(pid), os.WNOHANG)
                    except ChildProcessError:
                        pass

    def finish(student: str, job: dict, res: dict) -> None:
        for pid in (job["a"], job["b"]):
            try:
                os.killpg(pid, signal.SIGKILL)  # anything either left behind
            except (ProcessLookupError, PermissionError):
                pass
        own = {who[0] for who in (job["user"], job["grader"])
               if who is not None and who[0] >= JOB_UIDS}
        for uid in sorted(own):             # and what left the session: the job's own uids
            kill_all_of(uid, killer_uid(uid_base))
        if own:     # what it left in /tmp, /dev/shm...: the disk and memory back for the next job
            remove_files_of(own)
        for key in ("a", "b"):
            try:
                st = os.waitpid(job[key], 0)[1]     # reaped now, after the killpg above
            except ChildProcessError:
                st = 0
            if job.get(key + "_status") is None:
                job[key + "_status"] = st
        try:
            sel.unregister(job["fd"])
        except (KeyError, ValueError):
            pass
        os.close(job["fd"])
        res["seconds"] = round(time.monotonic() - job["began"], 2)
        done[student] = res
        del running[student]
        reap_orphans()

    try:
        while pending or running:
            while pending and len(running) < parallel:
                student, work, tdir, *prep = pending.pop(0)
                own = user is not None and own_uids
                student_uid, grader_uid = job_uids(uid_base, started)
                job_user = (student_uid, user[1]) if own else user
                grader = (grader_uid, grader_gid(uid_base)) if own else None
                started += 1
                if prep and prep[0] is not None:
                    try:
                        prep[0](job_user)
                    except NotGradable as e:
                        done[student] = {"status": "error", "reason": str(e), "seconds": 0.0}
                        continue
                if grader is not None:
                    for p in [tdir, *Path(tdir).rglob("*")]:
                        os.lchown(p, *grader)
                    os.chmod(tdir, 0o700)
                sys.stdout.flush(); sys.stderr.flush()
                b_in, a_out = os.pipe()         # student -> grader
                a_in, b_out = os.pipe()         # grader -> student
                res_r, res_w = os.pipe()        # grader -> parent
                pid_a = 0
                if zyg is not None:
                    try:
                        pid_a = zyg.start(work, names, a_out, a_in, memory_mb, job_user)
                    except (OSError, RuntimeError, ValueError) as e:
                        print(f"grade: warning: the zygote failed ({type(e).__name__}: {e}): each "
                              "notebook starts an interpreter of its own from here", file=sys.stderr)
                        zyg = None
                if not pid_a:
                    pid_a = os.fork()
                    if pid_a == 0:
                        _close_others({a_out, a_in})    # the student keeps its channel and nothing else
                        start_student(work, names, a_out, a_in, memory_mb, job_user, engine)
                pid_b = os.fork()
                if pid_b == 0:
                    # every descriptor but its three: not the other jobs' channels, nor the
                    # zygote's socket (it forks processes as any uid it is told), nor the run's lock
                    _close_others({b_in, b_out, res_w})
                    grading_process(tdir, tests_dir, b_in, b_out, res_w, memory_mb, modules, lab, grader)
                for fd in (a_out, b_in, b_out, a_in, res_w):
                    os.close(fd)
                os.set_blocking(res_r, False)
                now = time.monotonic()
                job = {"a": pid_a, "b": pid_b, "fd": res_r, "buf": b"", "began": now,
                       "deadline": now + timeout, "a_status": None, "b_status": None, "user": job_user,
                       "grader": grader}
                running[student] = job
                sel.register(res_r, selectors.EVENT_READ, student)
            for key, _ in sel.select(timeout=0.02):
                job = running[key.data]
                try:
                    chunk = os.read(key.fd, 1 << 20)
                except BlockingIOError:
                    continue
                if chunk:
                    job["buf"] += chunk
                else:
                    sel.unregister(key.fd)
                    job["eof"] = True
            now = time.monotonic()
            for student_id, job in list(running.items()):
                for key in ("a", "b"):
                    if job[key + "_status"] is None:
                        st = exit_status(job[key])
                        if st is not None:
                            job[key + "_status"] = st
                            if key == "a":
                                try:
                                    os.killpg(job["a"], signal.SIGKILL)   # what the notebook left running
                                except (ProcessLookupError, PermissionError):
                                    pass
                if job.get("eof") and job["b_status"] is not None:
                    finish(student_id, job, _verdict(job, memory_mb))
                elif now > job["deadline"]:
                    finish(student_id, job, {"status": "timeout",
                                             "reason": f"stopped after {timeout:g} s (time limit)"})
    finally:
        for student_id, job in list(running.items()):     # stopped early: no job outlives the run
            finish(student_id, job, {"status": "error", "reason": "grading was stopped"})
        sel.close()
        if zyg is not None:
            zyg.close()
        subreaper(False)
        reap_orphans()                  # those killed with their jobs
        shutil.rmtree(home, ignore_errors=True)
    return done


def _verdict(job: dict, memory_mb: int) -> dict:
    """The grading process's message, checked; the student process's exit only explains a 0."""
    buf = job["buf"]
    try:
        (n,) = HEADER.unpack(buf[:HEADER.size])
        res = json.loads(buf[HEADER.size:HEADER.size + n])
        assert isinstance(res, dict) and isinstance(res.get("status"), str)
    except Exception:                   # noqa: BLE001
        st = job["b_status"]
        return {"status": "error", "reason": f"the grading process failed (status {st})"}
    if res["status"] == "memory":
        res["reason"] = f"stopped: the notebook exceeded the {memory_mb} MB memory limit"
    elif res["status"] == "no-answers":
        st = job["a_status"]
        how = (f"exit status {os.WEXITSTATUS(st)}" if st is not None and os.WIFEXITED(st)
               else f"signal {os.WTERMSIG(st)}" if st is not None and os.WIFSIGNALED(st) else "?")
        res = {"status": "error", "reason": "the notebook's process ended before it handed back "
               f"its answers ({how}: a cell called os._exit, or the process was killed)"}
    return res


if __name__ == "__main__" and sys.argv[1:2] == ["--student"]:
    student_process(Path(sys.argv[2]), json.loads(sys.argv[5]), int(sys.argv[3]), int(sys.argv[4]))
if __name__ == "__main__" and sys.argv[1:2] == ["--zygote"]:
    zygote(int(sys.argv[2]))
