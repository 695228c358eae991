"""cclab.interrupts: the first SIGINT/SIGTERM/SIGHUP stops the work, and no later one cuts its
clean-up short.  Each case runs in a child interpreter (its own signal handlers), sends itself
the signals at the worst moments, and prints what ran."""
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2]

PRELUDE = """
import os, signal, sys, time
from cclab import interrupts
def sig(s=signal.SIGINT):
    os.kill(os.getpid(), s)
    time.sleep(0.05)            # the handler runs at the next line; give the signal time to land
"""


def child(body: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(KIT)))


def test_a_second_signal_on_the_way_to_the_clean_up_does_not_cut_it_short():
    # the lab command's case: sudo relays the notebook's SIGINT while the end of its input
    # sends another; the second lands while the first one's exception is on its way
    r = child("""
        try:
            with interrupts.interruptible():
                try:
                    sig()
                    print("not interrupted")
                except KeyboardInterrupt:
                    sig(signal.SIGTERM)      # a second, in the except clause
                    raise
                finally:
                    sig()                    # a third, before the clean-up holds them off
                    with interrupts.held():
                        time.sleep(0.1)
                        print("cleaned up", flush=True)
        except KeyboardInterrupt as e:
            print("stopped by", type(e).__name__, e.args)
        print("handler back:", signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["cleaned up", "stopped by Interrupted ('SIGINT',)",
                                     "handler back: True"], r.stdout + r.stderr


def test_without_the_latch_the_same_signals_skip_the_clean_up():
    # Python's own handler, and a clean-up that ignores signals while it runs (what the engine
    # did before): a second signal that lands before the clean-up's first line raises again
    r = child("""
        try:
            try:
                sig()
            finally:
                sig()
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                print("cleaned up", flush=True)
        except KeyboardInterrupt:
            print("stopped")
    """)
    assert r.stdout.splitlines() == ["stopped"], r.stdout + r.stderr


def test_a_signal_during_a_normal_clean_up_waits_for_its_end_then_raises():
    r = child("""
        try:
            with interrupts.interruptible():
                try:
                    print("work done")
                finally:
                    with interrupts.held():
                        sig(signal.SIGTERM)
                        print("cleaned up", flush=True)
                print("after the clean-up")
        except KeyboardInterrupt as e:
            print("stopped by", e.args[0])
    """)
    assert r.stdout.splitlines() == ["work done", "cleaned up", "stopped by SIGTERM"], r.stdout + r.stderr


def test_held_keep_leaves_the_signal_for_check_and_drop_forgets_it():
    r = child("""
        with interrupts.interruptible():
            with interrupts.held(pending="drop"):
                sig()
            print("dropped")
        try:
            with interrupts.interruptible():
                with interrupts.held(pending="keep"):
                    sig(signal.SIGHUP)
                print("kept")
                interrupts.check()
                print("not raised")
        except KeyboardInterrupt as e:
            print("raised", e.args[0])
    """)
    assert r.stdout.splitlines() == ["dropped", "kept", "raised SIGHUP"], r.stdout + r.stderr


def test_blocks_nest_and_the_latch_resets_when_the_outermost_ends():
    r = child("""
        for attempt in (1, 2):
            try:
                with interrupts.interruptible():
                    with interrupts.interruptible():
                        try:
                            sig()
                        finally:
                            sig()                     # dropped: the first already raised
                            print("inner clean-up", attempt, flush=True)
                    print("never")
            except KeyboardInterrupt:
                print("stopped", attempt)
        try:
            sig()
        except KeyboardInterrupt as e:
            print("outside:", type(e).__name__)
    """)
    assert r.stdout.splitlines() == ["inner clean-up 1", "stopped 1", "inner clean-up 2",
                                     "stopped 2", "outside: KeyboardInterrupt"], r.stdout + r.stderr


def test_a_block_without_sigint_lets_ctrl_c_through_each_time_and_raises_its_own_for_sigterm():
    # the shell: Mininet's CLI takes Ctrl-C as the end of one command
    r = child("""
        class Ended(SystemExit):
            def __init__(self, name):
                super().__init__(128 + signal.Signals[name].value)
        try:
            with interrupts.interruptible(Ended, sigint=False):
                for i in range(2):
                    try:
                        sig()
                    except KeyboardInterrupt as e:
                        print("ctrl-c", type(e).__name__)
                try:
                    sig(signal.SIGTERM)
                finally:
                    with interrupts.held():
                        sig()
                        print("torn down", flush=True)
        except SystemExit as e:
            print("exit", e.code)
    """)
    assert r.stdout.splitlines() == ["ctrl-c KeyboardInterrupt", "ctrl-c KeyboardInterrupt",
                                     "torn down", "exit 143"], r.stdout + r.stderr


def test_held_refuses_an_unknown_mode():
    from cclab import interrupts
    with pytest.raises(ValueError, match="raise, keep or drop"):
        with interrupts.held(pending="later"):
            pass
    assert signal.getsignal(signal.SIGINT) is not interrupts._latch.handler
