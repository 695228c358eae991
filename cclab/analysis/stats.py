"""Small statistics the analysis needs: Student-t quantiles, confidence intervals, Jain's index.

The t quantile is computed here (numerical integration of the t density and bisection), so the
kit needs no SciPy; the host tests check it against the closed forms for 1 and 2 degrees of
freedom and against the normal limit.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np


def _t_density_integral(x: float, df: float, n: int = 4001) -> float:
    """Integral of the Student-t density from 0 to x (x >= 0), by Simpson's rule."""
    if x <= 0:
        return 0.0
    # Substitute u = atan(x / sqrt(df)): the integrand is smooth and the interval is finite.
    a = math.atan(x / math.sqrt(df))
    u = np.linspace(0.0, a, n)
    # density(t) dt with t = sqrt(df) tan(u): (1 + t^2/df)^(-(df+1)/2) * sqrt(df) / cos^2(u)
    #                                          = cos(u)^(df+1) * sqrt(df) / cos(u)^2 = sqrt(df) cos(u)^(df-1)
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    f = c * math.sqrt(df) * np.cos(u) ** (df - 1)
    h = a / (n - 1)
    return float(h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum()))


def t_cdf(x: float, df: float) -> float:
    """P(T <= x) for Student's t with `df` degrees of freedom."""
    if df <= 0:
        raise ValueError("degrees of freedom must be positive")
    half = _t_density_integral(abs(x), df)
    return 0.5 + half if x >= 0 else 0.5 - half


@lru_cache(maxsize=512)
def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t (e.g. p = 0.975 for a two-sided 95 % interval)."""
    if not 0.0 < p < 1.0:
        raise ValueError("p must be in (0, 1)")
    if df <= 0:
        raise ValueError("degrees of freedom must be positive")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    # Work in u = atan(t / sqrt(df)) in (0, pi/2): the CDF is monotone there; bisect.
    lo, hi = 0.0, math.pi / 2
    for _ in range(60):
        mid = (lo + hi) / 2
        if t_cdf(math.sqrt(df) * math.tan(mid), df) < p:
            lo = mid
        else:
            hi = mid
    return math.sqrt(df) * math.tan((lo + hi) / 2)


def mean_ci(values, confidence: float = 0.95) -> dict:
    """Mean, sample standard deviation and the t-distribution confidence interval.

    Returns {"n", "mean", "std", "ci_low", "ci_high", "half_width"}; with one value the
    interval is undefined (NaN), with none everything is NaN and n is 0."""
    v = np.asarray([x for x in values if x is not None], dtype=float)
    v = v[np.isfinite(v)]
    n = len(v)
    out = {"n": n, "mean": math.nan, "std": math.nan, "ci_low": math.nan, "ci_high": math.nan,
           "half_width": math.nan}
    if n == 0:
        return out
    out["mean"] = float(v.mean())
    if n == 1:
        return out
    s = float(v.std(ddof=1))
    hw = t_quantile(0.5 + confidence / 2, n - 1) * s / math.sqrt(n)
    out.update(std=s, half_width=hw, ci_low=out["mean"] - hw, ci_high=out["mean"] + hw)
    return out


def order(x: tuple[float, float], y: tuple[float, float]) -> str:
    """How interval x = (low, high) stands against interval y: "higher" when it lies wholly above,
    "lower" when wholly below, "inconclusive" when they meet or a bound is not a finite number."""
    if not all(math.isfinite(v) for v in (*x, *y)):
        return "inconclusive"
    if x[0] > y[1]:
        return "higher"
    if x[1] < y[0]:
        return "lower"
    return "inconclusive"


def jain(values) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 for equal shares, 1/n for one hog."""
    v = np.asarray(list(values), dtype=float)
    v = v[np.isfinite(v)]
    if len(v) == 0 or not np.any(v):
        return math.nan
    return float(v.sum() ** 2 / (len(v) * (v ** 2).sum()))


def percentile(values, q: float) -> float:
    """The q-th percentile (0-100), linear interpolation between order statistics (numpy's
    default): for sorted x_0..x_{n-1} it is x at rank q/100 * (n - 1)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return math.nan
    return float(np.percentile(v, q))


def ecdf(values):
    """(sorted values, cumulative fractions) for a CDF plot."""
    v = np.sort(np.asarray(values, dtype=float)[np.isfinite(np.asarray(values, dtype=float))])
    return v, (np.arange(1, len(v) + 1) / len(v) if len(v) else np.array([]))
