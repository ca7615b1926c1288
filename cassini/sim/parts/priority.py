"""The simulator's priority part: Crux's intensity and K-level compression, which live in
:mod:`cassini.priority` so that the testbed's ``prio`` fabric computes the same levels."""

from cassini.priority import (
    ORDERS,
    band_levels,
    crux_levels,
    cut_weight,
    intensity,
    max_k_cut_levels,
)

__all__ = ["ORDERS", "band_levels", "crux_levels", "cut_weight", "intensity", "max_k_cut_levels"]
