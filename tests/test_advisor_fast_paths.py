"""The advisor's fast paths (issue 22 §3) give the numbers of the code they replaced, bit
for bit: each one against its reference in tests/helpers/advisor_reference.py (the code of
commit 9922df3), on generated profiles, vectors and placements with loops."""

from __future__ import annotations

import json
import math
from importlib import resources

import numpy as np
import pytest
from helpers import advisor_reference as ref
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cassini import advisor, affinity, circle, refine
from cassini.errors import InputError
from cassini.profile import JobProfile, Phase

LIBRARY = json.loads(resources.files("cassini").joinpath("data/profiles.json").read_text())


def _bits(a: np.ndarray) -> bytes:
    """The exact bytes of a float array (so that -0.0 and 0.0 differ)."""
    return np.ascontiguousarray(a, dtype=float).tobytes()


@st.composite
def profiles(draw: st.DrawFn) -> JobProfile:
    """A valid profile of 1-13 phases, some wrapping past the end of the iteration."""
    period = draw(st.floats(0.01, 0.6))
    k = draw(st.integers(1, 13))
    cuts = sorted(set(draw(st.lists(st.floats(0.0, 0.999), min_size=2 * k, max_size=2 * k))))
    if len(cuts) < 2:
        cuts = [0.1, 0.5]
    pairs = [(cuts[i], cuts[i + 1]) for i in range(0, len(cuts) - 1, 2)]
    pairs = [(a, b) for a, b in pairs if b - a > 1e-6] or [(0.1, 0.5)]
    offset = draw(st.sampled_from([0.0, draw(st.floats(0.0, 0.999))]))
    phases = [
        Phase(((a + offset) % 1.0) * period, (b - a) * period, draw(st.floats(1e6, 4e11)))
        for a, b in pairs
    ]
    return JobProfile("j", period, phases)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    job=profiles(),
    stretch=st.one_of(st.just(1.0), st.just(1.0 + 1e-13), st.floats(0.5, 2.0)),
    n_bins=st.sampled_from([2, 8, 36, 72, 360]),
    span_periods=st.integers(1, 9),
    shift=st.one_of(st.just(0.0), st.floats(0.0, 2.0)),
)
def test_stretched_bin_average_is_the_stretched_profiles_bin_average(
    job: JobProfile, stretch: float, n_bins: int, span_periods: int, shift: float
) -> None:
    t_eff = job.iteration_time_s * stretch
    span = span_periods * t_eff
    try:
        slow = circle._stretched(job, t_eff).bin_average(n_bins, span, shift * t_eff)
    except InputError as e:  # a stretch the profile cannot take: the fast path raises too
        with pytest.raises(InputError) as fast_error:
            circle._stretched_bin_average(job, t_eff, n_bins, span, shift * t_eff)
        assert fast_error.value.field == e.field
        return
    fast = circle._stretched_bin_average(job, t_eff, n_bins, span, shift * t_eff)
    edges = np.linspace(0.0, span, n_bins + 1)
    shared = circle._stretched_bin_average(job, t_eff, n_bins, span, shift * t_eff, edges=edges)
    assert _bits(fast) == _bits(slow)
    assert _bits(shared) == _bits(slow)


def _unified(u: circle.UnifiedPeriod) -> tuple:
    return (u.period_s.hex(), u.repeats, u.max_relative_error.hex(), u.exact)


@settings(max_examples=400, deadline=None)
@given(
    times=st.lists(st.floats(0.005, 1.0), min_size=1, max_size=7),
    resolution=st.sampled_from([1e-4, 1e-3, 1e-2]),
    factor=st.integers(1, 8),
    tolerance=st.sampled_from([0.0, 0.005, 0.01, 0.05]),
)
def test_unified_period_is_the_array_versions(
    times: list[float], resolution: float, factor: int, tolerance: float
) -> None:
    kwargs = dict(resolution_s=resolution, max_period_factor=factor, tolerance=tolerance)
    assert _unified(circle.unified_period(times, **kwargs)) == _unified(
        ref.unified_period(times, **kwargs)
    )


def test_unified_period_of_the_library_with_jitter_is_the_array_versions() -> None:
    rng = np.random.default_rng(7)
    for _ in range(300):
        picks = rng.integers(len(LIBRARY), size=int(rng.integers(2, 7)))
        times = [LIBRARY[i]["iteration_time_s"] * rng.uniform(0.85, 1.15) for i in picks]
        assert _unified(circle.unified_period(times)) == _unified(ref.unified_period(times))


@settings(max_examples=300, deadline=None)
@given(
    n=st.sampled_from([2, 8, 12, 36, 60, 72]),
    data=st.data(),
    noise=st.sampled_from([0.0, 1e-12, 1e-10, 1e-8, 1e-3]),
)
def test_rotation_period_is_the_one_divisor_at_a_time_versions(
    n: int, data: st.DataObject, noise: float
) -> None:
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    d = data.draw(st.sampled_from(divisors))
    block = np.array(
        data.draw(st.lists(st.sampled_from([0.0, 1.0, 2.5e9, 1e11]), min_size=d, max_size=d))
    )
    vector = np.tile(block, n // d)
    vector[data.draw(st.integers(0, n - 1))] += noise * max(1.0, float(vector.max()))
    assert circle.rotation_period(vector) == ref.rotation_period(vector)
    count = data.draw(st.integers(1, n))
    fast, slow = circle._rotation_matrix(vector, count), ref.rotation_matrix(vector, count)
    assert _bits(fast) == _bits(slow)


def _library_jobs(rng: np.random.Generator, n: int) -> list[JobProfile]:
    """``n`` profiles of the shipped library, iteration times jittered by +-15 %."""
    jobs = []
    for i in range(n):
        base = JobProfile.from_dict(LIBRARY[int(rng.integers(len(LIBRARY)))])
        f = rng.uniform(0.85, 1.15)
        phases = [Phase(p.start_s * f, p.duration_s * f, p.rate_bps * 2) for p in base.phases]
        jobs.append(JobProfile(f"{base.job_id}-{i}", base.iteration_time_s * f, phases))
    return jobs


def test_best_rotations_are_those_of_the_search_and_the_eager_centring() -> None:
    """``_best_rotations`` shares one set of rotation matrices between the search and the
    centring, skips job 0's period (it stays at rotation 0) and blurs the demands only
    when a job has a choice: the rotations are those of the search building its own
    matrices and of the centring as it was (every blur up front)."""
    rng = np.random.default_rng(3)
    choices = 0
    for _ in range(80):
        jobs = _library_jobs(rng, int(rng.integers(2, 6)))
        unified = circle.unified_period([j.iteration_time_s for j in jobs])
        vectors = circle.demand_vectors(jobs, unified, 72)
        capacity = float(rng.choice([50e9, 100e9, 400e9, 2e12]))
        for method in ("exact", "heuristic"):
            fast, _ = circle._best_rotations(vectors, 72, capacity, method, 8, 0)
            periods = [ref.rotation_period(v) for v in vectors]
            if method == "exact":
                rotations = circle._exact(vectors, periods, capacity)
            else:
                rotations = circle._coordinate_descent(vectors, periods, capacity, 8, 0)
            assert fast == ref.centre(vectors, periods, capacity, rotations)
            choices += fast != rotations
    assert choices > 10  # the centring moved jobs: the blur was exercised


def _placement(seed: int) -> tuple[dict[str, JobProfile], dict[str, tuple[str, ...]], dict]:
    """A small two-tier cluster (4 racks x 4 servers, one NIC each way per server, one
    uplink each way per rack) packed with library jobs of 2-24 GPUs on consecutive servers
    from random starts: most placements have loops.  Returns the profiles, each job's
    path and the link capacities (bits/s)."""
    rng = np.random.default_rng(seed)
    jobs = _library_jobs(rng, 16)
    servers = [(r, s) for r in range(4) for s in range(4)]
    free = dict.fromkeys(servers, 8)
    paths = {}
    for job in jobs:
        need, start, chosen = int(rng.choice([2, 4, 8, 12, 24])), int(rng.integers(16)), []
        for k in range(16):
            server = servers[(start + k) % 16]
            if need <= 0:
                break
            take = min(need, free[server])
            if take:
                free[server] -= take
                need -= take
                chosen.append(server)
        path = [f"srv{r}.{s}-{d}" for r, s in chosen for d in ("up", "down")]
        racks = sorted({r for r, _ in chosen})
        if len(racks) > 1:
            path += [f"tor{r}-{d}" for r in racks for d in ("up", "down")]
        paths[job.job_id] = tuple(path)
    capacity = {f"srv{r}.{s}-{d}": 100e9 for r, s in servers for d in ("up", "down")}
    capacity.update({f"tor{r}-{d}": 200e9 for r in range(4) for d in ("up", "down")})
    return {j.job_id: j for j in jobs}, paths, capacity


def _solved(seed: int):
    jobs, paths, capacity = _placement(seed)
    links = [advisor.Link(k, v) for k, v in capacity.items()]
    cand = advisor.Candidate("c", paths)
    sols = advisor._link_solutions([cand], advisor._link_map(links), jobs, 5.0, 1e-3, 1)["c"]
    return jobs, paths, sols


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000))
def test_graph_repair_and_loop_names_are_the_one_link_at_a_time_versions(seed: int) -> None:
    jobs, paths, sols = _solved(seed)
    graph = affinity.affinity_graph(paths, sols)
    old_graph = ref.affinity_graph(paths, sols)
    assert list(graph.nodes(data=True)) == list(old_graph.nodes(data=True))
    assert [(n, list(graph[n].items())) for n in graph] == [
        (n, list(old_graph[n].items())) for n in old_graph
    ]
    start = affinity.time_shifts(graph, sols, jobs, repair=False).time_shifts_s
    fast = refine.refine_shifts(graph, sols, jobs, start)
    slow = ref.refine_shifts(graph, sols, jobs, start)
    assert {j: t.hex() for j, t in fast.items()} == {j: t.hex() for j, t in slow.items()}
    names = affinity.LoopNames(graph)
    for node in graph:
        assert names.through(node) == ref.loop_through(graph, node)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), data=st.data())
def test_common_rotation_and_its_tolerance_test_are_the_array_versions(
    seed: int, data: st.DataObject
) -> None:
    jobs, _, sols = _solved(seed)
    times = {j: p.iteration_time_s for j, p in jobs.items()}
    shifts = {j: data.draw(st.floats(0.0, 0.999)) * times[j] for j in jobs}
    for sol in sols.values():
        ids = list(sol.job_ids)
        for anchor in (ids[0], ids[-1]):
            for subset in (ids, ids[:1], ids[1:]):
                got = affinity._best_common_rotation(sol, shifts, times, subset, anchor)
                want = ref.best_common_rotation(sol, shifts, times, subset, anchor)
                assert (got[0].hex(), got[1].hex()) == (want[0].hex(), want[1].hex())
                error = want[1]
                for tolerance in (error, math.nextafter(error, 0.0), error * 1.5, 0.0):
                    assert affinity._aligned_within(
                        sol, shifts, times, subset, anchor, tolerance
                    ) == (error <= tolerance)
            # a link entered from its only job with a shift: the shortcut's rotation
            only = {anchor: shifts[anchor]}
            got = affinity._link_rotation(sol, only, times, anchor)
            want = ref.best_common_rotation(sol, only, times, [anchor], anchor)[0]
            assert got.hex() == want.hex()


def test_unified_period_of_many_candidate_periods_is_the_array_versions() -> None:
    """Past :data:`cassini.circle._PLAIN_PERIODS` candidates the fallback lists them as
    arrays; an astronomical count fails as the array version did (MemoryError, which the
    service answers as 400), not by looping for ever."""
    times = [0.0009, 0.5, 0.0173]  # 4,444 + 8 + 231 candidate periods up to 8 x 0.5 s
    assert _unified(circle.unified_period(times, resolution_s=1e-4)) == _unified(
        ref.unified_period(times, resolution_s=1e-4)
    )
    with pytest.raises(MemoryError):
        circle.unified_period([0.1, 916648213209816.0])
    with pytest.raises(MemoryError):
        ref.unified_period([0.1, 916648213209816.0])
