"""testbed.hostlock: one holder at a time, the second waits and says for whom; re-entrant
in a process and inherited by its children (no root needed: the lock file is a tmp file)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import hostlock

ROOT = Path(__file__).resolve().parent.parent
CHILD = (
    "import sys, time; from testbed import hostlock; t0 = time.monotonic(); "
    "hostlock.acquire('child', say=lambda m: print(m, flush=True)); "
    "print(f'got it after {time.monotonic() - t0:.2f} s', flush=True); hostlock.release()"
)


@pytest.fixture
def lock_file(tmp_path, monkeypatch):
    path = tmp_path / "host.lock"
    monkeypatch.setattr(hostlock, "LOCK_PATH", path)
    monkeypatch.delenv(hostlock.HOLDER_ENV, raising=False)
    # this process may hold the real host lock (conftest takes it for the root tests that
    # ran before): start from "not held" and give the real one back untouched afterwards
    monkeypatch.setattr(hostlock, "_held", None)
    monkeypatch.setattr(hostlock, "_depth", 0)
    yield path
    while hostlock.held():
        hostlock.release()


def child(path: Path, inherit: bool) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if inherit or k != hostlock.HOLDER_ENV}
    env |= {"TESTBED_HOST_LOCK": str(path), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE, text=True
    )


def test_a_second_process_waits_and_says_for_whom(lock_file):
    hostlock.acquire("the first test")
    hostlock.acquire("re-entered")  # the same process again: no wait
    hostlock.release()
    assert hostlock.held()
    p = child(lock_file, inherit=False)
    line = p.stdout.readline().strip()
    holder = f"pid {os.getpid()}: the first test"
    assert line == f"waiting for the host lock {lock_file} (held by {holder})"
    assert p.poll() is None  # still waiting
    hostlock.release()
    assert not hostlock.held()
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 0 and out.startswith("got it after")


def test_a_child_of_the_holder_does_not_wait_for_its_parent(lock_file):
    hostlock.acquire("parent")
    p = child(lock_file, inherit=True)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 0 and out.startswith("got it after 0.0"), out  # no waiting line
    hostlock.release()


def test_a_dead_holder_frees_the_lock(lock_file):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time; from testbed import hostlock; "
         "hostlock.acquire('doomed'); print('held', flush=True); time.sleep(60)"],
        env={**os.environ, "TESTBED_HOST_LOCK": str(lock_file), "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait()
    said: list[str] = []
    hostlock.acquire("after the crash", say=said.append)
    assert said == [] and hostlock.held()
    hostlock.release()
