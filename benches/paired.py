"""The median of paired per-round results (differences or ratios) with its distribution-free
confidence interval: the order statistics the sign test puts around a median. benches/proxy.sh
and benches/http.sh run each pair back to back in a round; the interval says whether what the
rounds show is more than this VM's noise (an interval that holds 0, or 1.0 for a ratio, does not
tell the two apart). Imported by those scripts' summaries; not a tool of its own."""

import math
import statistics


def median_interval(values, confidence=0.95):
    """(median, low, high): the median of `values` and an interval holding the true median with
    at least `confidence` (order statistics k and n - k + 1, k from Binomial(n, 1/2)); low and
    high are None when there are too few values for that confidence (fewer than 6 at 95%)."""
    ordered = sorted(values)
    n = len(ordered)
    tail_allowed = (1 - confidence) / 2
    k, below = 0, 0.0
    while k < n:
        more = below + math.comb(n, k) / 2**n
        if more > tail_allowed:
            break
        below, k = more, k + 1
    if k == 0:
        return statistics.median(ordered), None, None
    return statistics.median(ordered), ordered[k - 1], ordered[n - k]


def describe(values, unit_format, confidence=0.95):
    """The text `median X (95% interval L to H)`, each value written by `unit_format`."""
    median, low, high = median_interval(values, confidence)
    if low is None:
        return f"median {unit_format(median)} (too few rounds for a {confidence:.0%} interval)"
    return f"median {unit_format(median)} ({confidence:.0%} interval {unit_format(low)} to {unit_format(high)})"
