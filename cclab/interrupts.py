"""How the kit takes SIGINT, SIGTERM and SIGHUP while it has a network up.

A run, a shell or a lab stops on the first of these signals and then cleans up: processes,
namespaces, qdiscs, its staging folder.  A clean-up that a second signal cuts short leaves all
of that behind.  Second signals are common, not a corner case:
  - the lab command gets two for one stop: sudo relays the SIGINT that the notebook sends it,
    and the command's own watch on its input sends one when the notebook closes that input;
  - a user presses Ctrl-C twice, or a supervisor sends SIGTERM after SIGINT.

Python checks for a pending signal before it changes a handler, and between any two lines, so
a second signal that arrives while the first one's exception is on its way raises again at the
top of the clean-up (at the very call that was to ignore it).  One handler therefore serves
all three signals for as long as an `interruptible` block is open:
  - the first signal raises (Interrupted, a KeyboardInterrupt, unless the block names another
    exception for SIGTERM and SIGHUP);
  - every later signal is dropped until the outermost block ends: the first one's clean-up
    runs to its end;
  - inside a `held` block (a clean-up after a normal ending, or a set-up whose clean-up is not
    in place yet) a signal does not raise at once: it is raised when the block ends (or at
    the next `check()`), so the work in the block finishes first.
Blocks nest (a lab's runs inside the lab command); the handlers the process had before are
put back when the outermost block ends, and the latch is reset then.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP (or SIGINT), handled like Ctrl-C; args[0] is the signal's name."""


class _Latch:
    def __init__(self):
        self.depth = 0                  # interruptible blocks open
        self.fired = False              # a signal has raised since the outermost block began
        self.held = 0                   # held blocks open
        self.pending = None             # a signal's name that came while held, before any raised
        self.saved = {}                 # the process's own handlers, put back at the end
        self.raising = [None]           # each open block's exception for SIGTERM/SIGHUP
        self.sigint = [True]            # each open block: whether SIGINT latches too

    def handler(self, signum, frame):
        name = signal.Signals(signum).name
        if self.fired:
            return
        if self.held:
            self.pending = self.pending or name
            return
        if signum == signal.SIGINT and not self.sigint[-1]:
            raise KeyboardInterrupt          # Ctrl-C as Python gives it, every time
        self.raise_(name)

    def raise_(self, name: str):
        self.fired = True
        raising = self.raising[-1] if name != "SIGINT" else None
        raise (raising or Interrupted)(name)


_latch = _Latch()


def _install(old: dict) -> None:
    """Put handlers back.  signal.signal runs a pending signal's handler before it changes
    anything (the latch drops it here); an exception from that is raised once every handler
    is back."""
    caught = None
    for s, h in old.items():
        if h is None:                       # a handler not set from Python: ours stays
            continue
        for _ in range(3):
            try:
                signal.signal(s, h)
                break
            except BaseException as e:      # noqa: B036 (a signal's exception, kept)
                caught = caught or e
    if caught is not None:
        raise caught


@contextmanager
def interruptible(raising=None, sigint: bool = True):
    """The first of SIGINT, SIGTERM and SIGHUP raises `Interrupted` (SIGTERM and SIGHUP raise
    `raising(name)` when given); later ones are dropped until the outermost block ends.
    sigint=False leaves SIGINT to Python's KeyboardInterrupt, every time, outside held blocks
    (Mininet's CLI takes Ctrl-C as the end of one command)."""
    latch = _latch
    outermost = latch.depth == 0
    if outermost:
        latch.fired, latch.held, latch.pending = False, 0, None
        latch.saved = {s: signal.getsignal(s) for s in SIGNALS}
        for s in SIGNALS:
            signal.signal(s, latch.handler)
    latch.depth += 1
    latch.raising.append(raising)
    latch.sigint.append(sigint)
    failing = False
    try:
        yield
    except BaseException:
        failing = True
        raise
    finally:
        latch.raising.pop()
        latch.sigint.pop()
        latch.depth -= 1
        if outermost:
            pending = None if latch.fired or failing else latch.pending
            latch.fired = True                    # nothing raises while the handlers go back
            try:
                _install(latch.saved)
            finally:
                latch.fired, latch.pending = False, None
            if pending:
                raise Interrupted(pending)


@contextmanager
def held(pending: str = "raise"):
    """Work that must finish (a clean-up, a set-up whose clean-up is not in place yet, a
    hand-over): a signal that comes meanwhile does not interrupt it.  What becomes of that
    signal when the block ends, if none has raised yet in the open interruptible block:
    pending="raise" raises it then; "keep" leaves it for the next `check()`; "drop" forgets it
    (the work was the last step).  Outside any interruptible block, the block is one."""
    if pending not in ("raise", "keep", "drop"):
        raise ValueError(f"pending must be raise, keep or drop, not {pending!r}")
    latch = _latch
    if latch.depth == 0:
        with interruptible():
            with held(pending):
                yield
        return
    latch.held += 1
    try:
        yield
    finally:
        latch.held -= 1
        if pending == "drop" and not latch.held:
            latch.pending = None
    if pending == "raise":
        check()


def check() -> None:
    """Raise the signal that came while held, if one did and none has raised yet."""
    latch = _latch
    if latch.pending and not latch.held and not latch.fired:
        name, latch.pending = latch.pending, None
        latch.raise_(name)
