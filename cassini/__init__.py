"""CASSINI: network-aware placement and time-shifts for ML training jobs.

What a scheduler or a training script imports::

    from cassini import JobProfile, Phase, Link, Candidate, advise, choose_placement
    from cassini import compatibility_score, TimeShiftAgent, InputError
    import cassini.torch          # inside a PyTorch job: cassini.torch.TimeShift

Names are imported on first use, so ``import cassini`` stays cheap (no numpy until an
advisor name is touched); :data:`__version__` is the installed package's version.
"""

from __future__ import annotations

from importlib import import_module, metadata
from typing import Any

try:
    __version__: str = metadata.version("netaware-ml")
except metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "unknown"

#: public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "advise": "cassini.advisor",
    "Advice": "cassini.advisor",
    "Candidate": "cassini.advisor",
    "Link": "cassini.advisor",
    "choose_placement": "cassini.plugin",
    "PlacementChoice": "cassini.plugin",
    "JobProfile": "cassini.profile",
    "Phase": "cassini.profile",
    "compatibility_score": "cassini.circle",
    "TimeShiftAgent": "cassini.agent",
    "SlotDecision": "cassini.agent",
    "InputError": "cassini.errors",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'cassini' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
