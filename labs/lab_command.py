"""The lab user's one privileged command: run one lab's experiments and hand the results over.

    sudo cclab-lab-run LAB MODE DEST [--ccas NAME,NAME...] [--student ID --code CODE]
    sudo cclab-lab-run lab5-paths          (standard input: a Unix socket)

The notebook kernel runs unprivileged; building namespaces, shaping links and writing module
parameters need root.  vm/provision.sh installs /usr/local/sbin/cclab-lab-run, a root-owned
wrapper that starts this file with the VM's Python in isolated mode, and a sudoers line that lets
the lab user run that wrapper, and nothing else, without a password.  labkit.run_lab and
kmodlab.run call it when they are not root.

What the caller chooses is data: a lab of LABS, a mode, the congestion controls to keep (names
of the kernel's form), the student's ID and link code (labkit.enrol: the run is on that
student's link) and DEST, the folder the results go to.  The experiments are the kit's own
files for that lab and mode.  As root the lab runs into a new folder only root can read; its
files are then given to the caller, and a child process that has become the caller (its uid, gid
and groups) copies them into DEST and moves them into place (labkit.install_results: earlier
results are kept, never deleted).  So the kernel's own permission checks decide whether the
caller may write in DEST: a run cannot write into another user's folders.  The same check, as
the caller, runs before the lab does, so a folder the caller may not write costs one line of
error and no run.

Lab 5's live connections run in the student's own process, which chooses each connection's
algorithm as it learns.  For them `lab5-paths` builds the lab's two fixed paths as root
(tuner_support.TwoPaths) and hands the caller, over the Unix socket on its standard input, one
fresh TCP socket made in the client's namespace per request (tuner_support.serve_paths); the
algorithms the lab uses are allowed to unprivileged sockets while it runs
(net.ipv4.tcp_allowed_congestion_control, put back afterwards).  It removes the namespaces when
the socket closes.

Progress lines go to standard output.  The run stops, cleans up and keeps nothing when it gets
SIGINT, SIGTERM or SIGHUP, or when its standard input ends (the notebook closes it when
interrupted, and it ends when the notebook's kernel dies).  Exit status: 0 done, 1 the run
failed, 2 bad usage, 130 interrupted; every error is one line on standard error.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent          # labs/ of the kit the wrapper names
KIT = HERE.parent
LABS = {"lab1": "labkit", "lab2": "labkit", "lab3": "kmodlab", "lab4": "kmodlab"}
MODES = ("quick", "full")
CCA_NAME = re.compile(r"^[a-z][a-z0-9_]{0,15}$")
STAGING = Path("/var/tmp")
PROG = "cclab-lab-run"


class Usage(Exception):
    pass


def fail(msg: str, code: int) -> int:
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)
    return code


def _option(args: list[str], name: str) -> str | None:
    """The value of `name VALUE` in args (removed from them), or None."""
    if name not in args:
        return None
    i = args.index(name)
    if i + 1 >= len(args):
        raise Usage(f"{name} needs a value")
    value = args[i + 1]
    del args[i:i + 2]
    return value


def parse(argv: list[str]) -> tuple[str, str, Path, list[str] | None, dict | None]:
    ccas = None
    args = list(argv)
    sid, code = _option(args, "--student"), _option(args, "--code")
    if (sid is None) != (code is None):
        raise Usage("--student and --code go together (the enrolment of labkit.enrol)")
    if sid is not None and not (re.match(r"^[A-Za-z0-9._@-]{1,64}$", sid)
                                and re.match(r"^[A-Z2-7-]{11}$", code)):
        raise Usage(f"--student {sid!r} --code {code!r}: not a student ID and link code")
    if "--ccas" in args:
        i = args.index("--ccas")
        if i + 1 >= len(args):
            raise Usage("--ccas needs a comma-separated list of congestion controls")
        ccas = [c for c in args[i + 1].split(",") if c]
        del args[i:i + 2]
        bad = [c for c in ccas if not CCA_NAME.match(c)]
        if bad or not ccas:
            raise Usage(f"--ccas: not a congestion-control name: {bad[0] if bad else '(empty)'}")
    if len(args) != 3:
        raise Usage(f"usage: {PROG} LAB MODE DEST [--ccas NAME,...] [--student ID --code CODE] (LAB one of {', '.join(LABS)}), "
                    f"or {PROG} lab5-paths")
    lab, mode, dest = args
    if lab not in LABS:
        raise Usage(f"no lab {lab!r} runs through this command (it runs {', '.join(LABS)})")
    if mode not in MODES:
        raise Usage(f"mode must be quick or full, not {mode!r}")
    if not dest.startswith("/") or "\0" in dest:
        raise Usage(f"DEST must be an absolute path, not {dest!r}")
    return lab, mode, Path(dest), ccas, (None if sid is None else {"id": sid, "code": code})


def caller() -> pwd.struct_passwd:
    """Who asked: sudo's SUDO_UID, or the real user when root runs this directly."""
    uid = os.environ.get("SUDO_UID")
    try:
        return pwd.getpwuid(int(uid) if uid is not None else os.getuid())
    except (KeyError, ValueError):
        raise Usage(f"unknown calling user (SUDO_UID={uid!r})") from None


def stop_when_input_ends() -> None:
    """SIGINT to this process once standard input reaches its end (the caller went away)."""
    def watch():
        try:                                # the raw descriptor: a daemon thread blocked in a
            while os.read(0, 4096):         # buffered read would hold its lock at shutdown
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGINT)
    if not sys.stdin.isatty():
        threading.Thread(target=watch, daemon=True).start()


def give(tree: Path, who: pwd.struct_passwd) -> None:
    """Make every file under tree the caller's (the run made them as root)."""
    for top, dirs, files in os.walk(tree):
        for name in (top, *(os.path.join(top, f) for f in files)):
            os.lchown(name, who.pw_uid, who.pw_gid)


def as_caller(who: pwd.struct_passwd, work, what: str) -> int:
    """Run work() in a child process that has become the caller (its uid, gid and groups), so
    the kernel's own permission checks apply; returns the child's exit status (0: done)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups(os.getgrouplist(who.pw_name, who.pw_gid))
            os.setgid(who.pw_gid)
            os.setuid(who.pw_uid)
            work()
            code = 0
        except OSError as e:
            print(f"{PROG}: {what} as {who.pw_name}: {e.strerror or e}", file=sys.stderr, flush=True)
        except BaseException as e:                   # never a silent exit status
            why = f"{type(e).__name__}: {e}".splitlines()[0]
            print(f"{PROG}: {what} as {who.pw_name}: {why}", file=sys.stderr, flush=True)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def can_write(dest: Path, who: pwd.struct_passwd) -> int:
    """Before the run: the caller may write in DEST, or in the nearest folder above it that
    exists, where DEST will be made (else the run would be wasted).  Nothing is left behind."""
    def probe():
        d = dest.absolute()
        while not d.exists() and d != d.parent:
            d = d.parent
        os.rmdir(tempfile.mkdtemp(prefix=".cclab-probe-", dir=d))
    return as_caller(who, probe, f"cannot write results in {dest}")


def hand_over(lab: str, staged: Path, dest: Path, who: pwd.struct_passwd) -> int:
    """As the caller: copy staged/<lab> into DEST and put it in place; returns the child's status."""
    import labkit

    def install():
        dest.mkdir(parents=True, exist_ok=True)
        incoming = Path(tempfile.mkdtemp(prefix=f".{lab}.incoming-", dir=dest))
        try:
            shutil.copytree(staged / lab, incoming / lab, symlinks=True)
            labkit.install_results(lab, incoming / lab, dest)
        finally:
            shutil.rmtree(incoming, ignore_errors=True)
    return as_caller(who, install, f"cannot put the results in {dest}")


ALLOWED = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")


def lab5_paths() -> int:
    """Serve lab 5's two paths to the caller over the Unix socket on standard input."""
    import json
    import socket
    import stat
    if not stat.S_ISSOCK(os.fstat(0).st_mode):
        return fail("lab5-paths: standard input must be a Unix socket (tuner_support.RemotePaths)", 2)
    sys.path.insert(0, str(HERE / "lab5"))
    import tuner_support as ts
    conn = socket.socket(fileno=0)
    before = ALLOWED.read_text().split()
    try:
        ts.load_modules()
        ALLOWED.write_text(" ".join(dict.fromkeys(before + list(ts.ARMS))))
        ts.serve_paths(conn, lambda info: print(json.dumps(info), flush=True))
        return 0
    except KeyboardInterrupt:
        return fail("lab5-paths: interrupted", 130)
    except Exception as e:
        return fail(f"lab5-paths: {type(e).__name__}: {e}".splitlines()[0], 1)
    finally:
        from cclab import interrupts
        with interrupts.held(pending="drop"):
            ALLOWED.write_text(" ".join(before))


def main(argv: list[str] | None = None) -> int:
    import faulthandler
    faulthandler.enable()            # a crash of the interpreter itself still leaves its trace
    args = sys.argv[1:] if argv is None else argv
    if args == ["lab5-paths"]:
        if os.geteuid() != 0:
            return fail("must run as root (the lab user runs it through sudo)", 2)
        sys.path.insert(0, str(KIT))
        from cclab import interrupts
        with interrupts.interruptible():
            return lab5_paths()
    try:
        lab, mode, dest, ccas, enrolled = parse(args)
        who = caller()
    except Usage as e:
        return fail(str(e), 2)
    if os.geteuid() != 0:
        return fail("must run as root (the lab user runs it through sudo)", 2)
    for d in (KIT / "notebooks", HERE):
        sys.path.insert(0, str(d))
    sys.path.insert(0, str(KIT))
    os.environ["CCLAB_KIT"] = str(KIT)
    os.environ.pop("CCLAB_REPLAY", None)
    import labkit
    if enrolled is not None:
        try:                                 # the same checks as the notebook's enrolment
            sid, code = labkit._check_enrolment(enrolled["id"], enrolled["code"])
        except labkit.EnrolError as e:
            return fail(str(e), 2)
        enrolled = {"id": sid, "code": code}
    if can_write(dest, who) != 0:
        return 1
    from cclab import interrupts
    stop_when_input_ends()
    # The first SIGINT, SIGTERM or SIGHUP stops the run; later ones (sudo relays the notebook's
    # SIGINT while the end of input sends another) cannot cut its clean-up short.
    with interrupts.interruptible():
        with interrupts.held(pending="keep"):
            STAGING.mkdir(parents=True, exist_ok=True)
            staged = Path(tempfile.mkdtemp(prefix=f"cclab-{lab}-{who.pw_name}-", dir=STAGING))
        try:
            interrupts.check()
            return run_and_hand_over(lab, mode, staged, dest, who, ccas, enrolled, labkit)
        except KeyboardInterrupt:
            return fail(f"{lab}: interrupted; nothing of this run was kept", 130)
        except Exception as e:                                # the run's own one-line reason
            return fail(f"{lab}: {type(e).__name__}: {e}".splitlines()[0], 1)
        except SystemExit as e:                               # code that exits: still one line
            return fail(f"{lab}: the run exited ({e.code!r}); nothing of it was kept", 1)
        finally:
            with interrupts.held(pending="drop"):
                shutil.rmtree(staged, ignore_errors=True)


def run_and_hand_over(lab, mode, staged, dest, who, ccas, enrolled, labkit) -> int:
    """Run the lab into the staging folder, then hand its results to the caller."""
    from cclab import interrupts
    say = lambda line: print(line, flush=True)         # noqa: E731
    if LABS[lab] == "labkit":
        labkit.run_lab(lab, mode, root=staged, ccas=ccas, progress=say, who=enrolled)
    else:
        import kmodlab
        kmodlab.run(lab, mode, root=staged, progress=say, who=enrolled)
    with interrupts.held(pending="drop"):               # the hand-over runs to its end
        give(staged, who)
        if hand_over(lab, staged, dest, who) != 0:
            return 1
        say(f"{lab}: {mode} results in {labkit.lab_dir(lab, dest)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
