"""Lab 5 reference solution (instructor only: it is the answer to questions 1-4).

The four functions a student writes for the per-destination tuner, as the autograder's hidden
tests use them.  They follow the cost, update and choice of bpftune's TCP connection tuner
(see labs/lab5/handout.md); tuner_support.Tuner does the per-key bookkeeping around them.
"""

from __future__ import annotations

from fractions import Fraction

from tuner_support import ARMS, S     # as the student's notebook has them (ts.ARMS, ts.S)


def cost(host, arm, min_rtt: int, rate: int) -> int:
    """Cost of one closed connection: 0 at the host's best RTT and the best rate, positive otherwise.

    The host's min RTT / max rate and the algorithm's own min RTT / max rate are updated first
    (0 means "nothing seen yet").  The RTT term uses this connection's min RTT; the rate term
    the algorithm's best rate ever."""
    if min_rtt and (host.min_rtt == 0 or min_rtt < host.min_rtt):
        host.min_rtt = min_rtt
    if rate > host.max_rate:
        host.max_rate = rate
    if min_rtt and (arm.min_rtt == 0 or min_rtt < arm.min_rtt):
        arm.min_rtt = min_rtt
    if rate > arm.max_rate:
        arm.max_rate = rate
    c = 0
    if host.min_rtt:
        c += (min_rtt - host.min_rtt) * S // host.min_rtt
    if host.max_rate:
        c += (host.max_rate - arm.max_rate) * S // host.max_rate
    return c


def update(old, new: int, alpha=Fraction(1, 4)) -> int:
    """cost <- cost + alpha * (new - cost), in integers (floor); an untried algorithm takes `new`."""
    if old is None:
        return new
    alpha = Fraction(alpha)
    return old + (new - old) * alpha.numerator // alpha.denominator


def choose(costs: dict, rng) -> str:
    """Epsilon-greedy: the lowest cost (untried counts as 0), ties broken with rng.choice over the
    tied algorithms in ARMS order; then, with probability 1/20 (rng.randrange(20) == 0), a uniformly
    random algorithm (rng.choice(ARMS)) instead."""
    c = {a: (0 if costs.get(a) is None else costs[a]) for a in ARMS}
    low = min(c.values())
    tied = [a for a in ARMS if c[a] == low]
    pick = tied[0] if len(tied) == 1 else rng.choice(tied)
    if rng.randrange(20) == 0:
        pick = rng.choice(ARMS)
    return pick


def should_switch(total_retrans: int, segs_out: int) -> bool:
    """Move a connection to BBR when its retransmissions exceed 1/64 of the segments it sent."""
    return total_retrans > (segs_out >> 6)


def tuner(seed=0, **kw):
    """A tuner_support.Tuner driven by these functions."""
    import tuner_support
    return tuner_support.Tuner(cost, update, choose, should_switch, seed=seed, **kw)
