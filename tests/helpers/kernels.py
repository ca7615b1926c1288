"""The simulator's rate kernel both ways it runs: compiled with numba (the modules as
imported) and as plain Python (fresh copies of the same modules imported with numba's JIT
off, as where numba is absent), so that one test suite can hold both to the oracles."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from types import ModuleType

#: the modules that hold or call the kernel, in import order; a plain copy of each is
#: bound to the plain copies of the others
KERNEL_MODULES = (
    "cassini.sim.network.rates",
    "cassini.sim.network.jitloop",
    "cassini.sim.network.flowstep",
    "cassini.sim.network.flowsolve",
    "cassini.sim.network.flowstate",
    "cassini.sim.network.fluid",
)
KERNELS = ("compiled", "plain")


@dataclass(frozen=True)
class Kernel:
    """One way of running the kernel: ``name`` and the modules that run it."""

    name: str
    rates: ModuleType
    fluid: ModuleType
    flowstate: ModuleType

    @property
    def compiled(self) -> bool:
        """Whether the kernel's functions are numba dispatchers (else plain functions)."""
        return hasattr(self.rates._solve_set, "py_func")


def compiled_kernel() -> Kernel:
    """The kernel as the simulator runs it (compiled where numba is installed)."""
    mods = {name: importlib.import_module(name) for name in KERNEL_MODULES}
    return _kernel("compiled", mods)


def plain_kernel() -> Kernel:
    """Fresh copies of :data:`KERNEL_MODULES` imported with numba's JIT off (its
    ``DISABLE_JIT``: ``njit`` hands back the Python function); ``sys.modules`` and the
    package's attributes are left as they were."""
    import numba

    package = importlib.import_module("cassini.sim.network")
    saved = {name: sys.modules.pop(name) for name in KERNEL_MODULES if name in sys.modules}
    attrs = {name: vars(package).get(name.rpartition(".")[2]) for name in KERNEL_MODULES}
    jit_was_off = numba.config.DISABLE_JIT
    numba.config.DISABLE_JIT = True
    try:
        mods = {name: importlib.import_module(name) for name in KERNEL_MODULES}
    finally:
        numba.config.DISABLE_JIT = jit_was_off
        for name in KERNEL_MODULES:
            sys.modules.pop(name, None)
        sys.modules.update(saved)
        for name, value in attrs.items():  # the package's submodule attributes as before
            short = name.rpartition(".")[2]
            if value is not None:
                setattr(package, short, value)
            elif short in vars(package):
                delattr(package, short)
    return _kernel("plain", mods)


def _kernel(name: str, mods: dict[str, ModuleType]) -> Kernel:
    return Kernel(
        name,
        mods["cassini.sim.network.rates"],
        mods["cassini.sim.network.fluid"],
        mods["cassini.sim.network.flowstate"],
    )


def kernel(name: str) -> Kernel:
    """The kernel named ``name`` (one of :data:`KERNELS`)."""
    return {"compiled": compiled_kernel, "plain": plain_kernel}[name]()
