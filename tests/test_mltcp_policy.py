"""The fixed-point rule in ebpf/mltcp_rule.h (compiled here with gcc) and mltcp.policy
agree bit for bit; parameters validate; the convergence map behaves."""

import ctypes
import dataclasses
import subprocess
from pathlib import Path

import pytest
from conftest import require_tool
from hypothesis import given, settings
from hypothesis import strategies as st

from mltcp import policy
from mltcp.policy import MltcpOptions, MltcpParams

HEADER = Path(__file__).resolve().parent.parent / "ebpf" / "mltcp_rule.h"


@pytest.fixture(scope="module")
def rule(tmp_path_factory):
    require_tool("gcc", "the C side of the bit-exact comparison")
    d = tmp_path_factory.mktemp("rule")
    src = d / "rule.c"
    src.write_text(
        f'#include "{HEADER}"\n'
        "unsigned int ratio(unsigned long long s, unsigned long long p) "
        "{ return mltcp_ratio_q(s, p); }\n"
        "unsigned int factor(unsigned int r, unsigned int s, unsigned int i) "
        "{ return mltcp_factor_q(r, s, i); }\n"
        "unsigned int ai(unsigned int c, unsigned int f) { return mltcp_ai_window(c, f); }\n"
        "unsigned int acked(unsigned int a, unsigned int f, unsigned int *r) "
        "{ return mltcp_scale_acked(a, f, r); }\n"
        "unsigned int cut(unsigned int c, unsigned int f, unsigned int w) "
        "{ return mltcp_scale_cut(c, f, w); }\n"
        "int ends(unsigned long long e, unsigned int i, unsigned long long s, "
        "unsigned long long p) { return mltcp_ends_iteration(e, i, s, p); }\n"
    )
    lib = d / "librule.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    c = ctypes.CDLL(str(lib))
    c.ratio.argtypes = [ctypes.c_ulonglong, ctypes.c_ulonglong]
    for fn in (c.ratio, c.factor, c.ai, c.acked, c.cut):
        fn.restype = ctypes.c_uint
    c.cut.argtypes = [ctypes.c_uint] * 3
    c.factor.argtypes = [ctypes.c_uint] * 3
    c.ai.argtypes = [ctypes.c_uint] * 2
    c.acked.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.POINTER(ctypes.c_uint)]
    c.ends.restype = ctypes.c_int
    c.ends.argtypes = [ctypes.c_ulonglong, ctypes.c_uint, ctypes.c_ulonglong, ctypes.c_ulonglong]
    return c


u32 = st.integers(0, 2**32 - 1)
U64_MAX = 2**64 - 1
# the kernel's counters are u64: the whole domain, every bit length about as often (plain
# st.integers(0, U64_MAX) seldom draws a value of 2**54 or more)
bytes_ = st.integers(0, 64).flatmap(
    lambda bits: st.integers(0 if bits == 0 else 1 << (bits - 1), (1 << bits) - 1)
)


@settings(max_examples=500)
@given(
    sent=bytes_,
    per_iter=bytes_,
    slope_q=st.integers(0, 64 * 1024),
    intercept_q=st.integers(1, 64 * 1024),
    cwnd=u32,
    rem=st.integers(0, 2**32 - 1),
)
def test_c_header_and_python_agree_bit_for_bit(
    rule, sent, per_iter, slope_q, intercept_q, cwnd, rem
):
    r = policy.ratio_q(sent, per_iter)
    assert rule.ratio(sent, per_iter) == r
    lo, hi = sorted((sent, per_iter))  # also mid-iteration, whatever the draw's order
    assert rule.ratio(lo, hi) == policy.ratio_q(lo, hi)
    f = policy.factor_q(r, slope_q, intercept_q)
    assert rule.factor(r, slope_q, intercept_q) == f
    assert rule.ai(cwnd, f) == policy.ai_window(cwnd, f)
    r_c = ctypes.c_uint(rem)
    assert (rule.acked(cwnd, f, ctypes.byref(r_c)), r_c.value) == policy.scale_acked(cwnd, f, rem)
    cut = (cwnd * 1024) >> 11 & policy.U32_MAX  # DCTCP's cut at alpha = 1
    assert rule.cut(cut, f, cwnd) == policy.scale_cut(cut, f, cwnd)


@given(f_q=st.integers(1, 4 * 1024), acks=st.lists(st.integers(0, 64), max_size=200))
def test_cubic_scaling_loses_nothing_to_rounding(f_q, acks):
    """Over any run of ACKs, the segments fed to CUBIC are floor(F * total) exactly."""
    fed, rem = 0, 0
    for a in acks:
        n, rem = policy.scale_acked(a, f_q, rem)
        fed += n
    assert fed == (sum(acks) * f_q) >> policy.SHIFT


@settings(max_examples=500)
@given(
    elapsed=st.integers(0, 2**64 - 1),
    idle=u32,
    since=st.integers(0, 2**64 - 1),
    per_iter=st.integers(0, 2**64 - 1),
)
def test_iteration_boundary_agrees_with_the_c_header(rule, elapsed, idle, since, per_iter):
    assert bool(rule.ends(elapsed, idle, since, per_iter)) == policy.ends_iteration(
        elapsed, idle, since, per_iter
    )


def test_iteration_boundary_edges(rule):
    for e, i, s, p in [
        (9_999, 10_000, 10, 0),
        (10_000, 10_000, 0, 0),
        (10_000, 10_000, 74, 100),
        (10_000, 10_000, 75, 100),
        (10_000, 10_000, 75, 101),
        (10_000, 10_000, 76, 101),
        (2**64 - 1, 0, 2**64 - 1, 2**64 - 1),
        (0, 0, 0, 1),
        (0, 0, 1, 1),
    ]:
        assert bool(rule.ends(e, i, s, p)) == policy.ends_iteration(e, i, s, p)
    assert policy.ends_iteration(10_000, 10_000, 75, 100)  # ceil(3/4 * 100) = 75
    assert not policy.ends_iteration(10_000, 10_000, 75, 101)  # ceil(3/4 * 101) = 76
    assert not policy.ends_iteration(9_999, 10_000, 10**9, 1)  # a short silence never does


IDLE_US = 10_000
# one DDP step as the flow sends it, (silence before the burst in us, bytes): the pcaps of
# the ideal runs in docs/mltcp_defaults.md (ResNet-50: the last bucket 17 ms after the
# others; VGG-11: three bursts, 6-14 ms apart inside the step, 34 ms between steps)
RESNET50 = [(24_000, 134_000), (17_000, 15_000)]
VGG11 = [(34_000, 120_000), (12_000, 629_000), (11_000, 13_000)]


@pytest.mark.parametrize("step", [RESNET50, VGG11])
def test_idle_mode_counts_one_iteration_per_ddp_step(step):
    steps = 40
    counted = policy.counted_iterations(step * steps, IDLE_US)
    # every silence here is >= idle_ms: the gap rule alone counts each burst
    assert sum(s >= IDLE_US for s, _ in step * steps) == len(step) * steps
    # settled after the first step's bursts (no estimate yet, each may count): from then
    # on one whole step per iteration, the steps but the first and the last each once
    whole = sum(b for _, b in step)
    settled = counted[len(step) :]
    assert settled == [whole] * len(settled) and len(settled) >= steps - 2


@settings(max_examples=300)
@given(
    big=st.integers(30_000, 3_000_000),
    small=st.lists(st.integers(1, 10**6), max_size=4),
    at=st.integers(0, 4),
    silences=st.lists(st.integers(IDLE_US, 200_000), min_size=5, max_size=5),
)
def test_a_step_with_one_dominant_burst_is_counted_once_per_step(big, small, at, silences):
    """Whatever the small bursts around it, a step whose largest burst carries at least
    three quarters of its bytes is counted once per step, as one whole step, once the
    counter has seen the big burst twice (the first boundaries have no estimate)."""
    scale = big / 3 / max(1, sum(small))  # the smalls together at most a quarter of the step
    small = [max(1, int(b * scale)) for b in small]
    sizes = small[:at] + [big] + small[at:]
    step = list(zip(silences, sizes, strict=False))
    counted = policy.counted_iterations(step * 12, IDLE_US)
    assert counted[-8:] == [sum(sizes)] * 8


@settings(max_examples=500)
@given(a=bytes_, b=bytes_, short=st.integers(0, 2**20))
def test_ratio_is_the_exact_floor_over_all_u64_in_c_and_python(rule, a, b, short):
    """floor(sent * 1024 / per_iter) for sent below per_iter, also where sent << 10
    overflows 64 bits (sent >= 2**54): the C once returned 0 for (2**54, 2**55)."""
    per_iter = max(a, b, 1)
    # the smaller of two, and one just short of per_iter (most of an iteration sent)
    for sent in {min(a, b) % per_iter, max(0, per_iter - 1 - short)}:
        exact = sent * policy.ONE // per_iter
        assert rule.ratio(sent, per_iter) == policy.ratio_q(sent, per_iter) == exact, sent


def test_edge_vectors(rule):
    for sent, per_iter in [
        (0, 0),
        (5, 0),
        (0, 10),
        (10, 10),
        (11, 10),
        (2**50, 2**50 + 1),
        (2**54, 2**55),  # 512: C said 0, sent << 10 overflowing
        (2**54 - 1, 2**54),  # the last sent the shift takes
        (U64_MAX >> 10, U64_MAX),
        ((U64_MAX >> 10) + 1, U64_MAX),  # the first the long division takes
        (U64_MAX - 1, U64_MAX),  # 1023
        (2**63, U64_MAX),  # 512
        (2**63 - 1, 2**63),  # 1023: its remainder doubles past 2**63
        (U64_MAX, U64_MAX),
        (0, U64_MAX),
    ]:
        got = rule.ratio(sent, per_iter)
        assert got == policy.ratio_q(sent, per_iter), (sent, per_iter)
        assert got == (0 if per_iter == 0 else min(policy.ONE, sent * policy.ONE // per_iter))
    assert policy.ratio_q(2**54, 2**55) == 512 and rule.ratio(2**54, 2**55) == 512
    for cwnd, f in [(0, 0), (1, 0), (0, 1024), (10, 1), (2**32 - 1, 1), (10, 10**6)]:
        assert rule.ai(cwnd, f) == policy.ai_window(cwnd, f)
        for cut in (0, 1, cwnd // 2, cwnd, 2**32 - 1):
            assert rule.cut(cut, f, cwnd) == policy.scale_cut(cut, f, cwnd)


@given(cwnd=st.integers(2, 2**20), alpha=st.integers(0, 1024), f_q=st.integers(1, 64 * 1024))
def test_scaled_cut_backs_off_less_further_through_the_iteration(cwnd, alpha, f_q):
    """The window left after a scaled cut is never negative, is the unscaled one at F = 1,
    and grows with F."""
    cut = (cwnd * alpha) >> 11
    scaled = policy.scale_cut(cut, f_q, cwnd)
    assert 0 <= scaled <= cwnd
    assert policy.scale_cut(cut, policy.ONE, cwnd) == cut
    assert policy.scale_cut(cut, f_q + 1, cwnd) <= scaled


@given(ratio=st.floats(-1, 2), slope=st.floats(0, 8), intercept=st.floats(0.01, 4))
def test_fixed_point_tracks_real_factor(ratio, slope, intercept):
    p = MltcpParams(slope, intercept)
    slope_q, intercept_q, _, _, _ = p.fixed()
    r = min(1.0, max(0.0, ratio))
    r_q = policy.ratio_q(int(r * 10**9), 10**9)
    f_q = policy.factor_q(r_q, slope_q, intercept_q)
    assert f_q / policy.ONE == pytest.approx(
        policy.factor(ratio, p), abs=3 / policy.ONE + slope / 1024
    )


def test_scale_cut_is_a_flag_in_the_kernel_config():
    assert MltcpParams(scale_cut=False).fixed()[4] == 0
    assert MltcpParams(scale_cut=True).fixed()[4] == policy.FLAG_SCALE_CUT
    assert MltcpParams().fixed()[4] == policy.FLAG_SCALE_CUT  # the default


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"slope": -1}, "slope must be >= 0"),
        ({"intercept": 0}, "intercept must be > 0"),
        ({"intercept": -0.5}, "intercept must be > 0"),
        ({"slope": float("nan")}, "slope must be a finite number"),
        ({"idle_ms": 0}, "idle_ms"),
        ({"mode": "psychic"}, "mode"),
        ({"scale_cut": 1}, "scale_cut must be true or false"),
    ],
)
def test_bad_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MltcpParams(**kwargs)


@given(x=st.floats(0.001, 0.999), k=st.floats(0.01, 20))
def test_convergence_map_moves_towards_interleaving(x, k):
    nxt = policy.convergence_map(x, k)
    assert x < nxt <= 1.0
    assert policy.convergence_map(0.0, k) == 0.0  # same start stays put without noise
    assert policy.convergence_map(1.0, k) == 1.0


def test_iterations_to_interleave_fall_with_k():
    slow = policy.iterations_to_interleave(0.05, 0.5)
    fast = policy.iterations_to_interleave(0.05, 4.0)
    assert fast < slow
    assert policy.iterations_to_interleave(0.0, 4.0) == 10_000


def test_mltcp_options_set_only_the_fields_they_name_over_the_loaded_ones():
    loaded = MltcpParams(slope=3.0, intercept=1.5, idle_ms=20, mode="idle", scale_cut=False)
    assert MltcpOptions().over(loaded) == loaded
    asked = MltcpOptions("exact", slope=1.0, scale_cut=True)
    assert asked.rule() == {"slope": 1.0, "scale_cut": True}
    assert asked.over(loaded) == MltcpParams(1.0, 1.5, 20, "exact", True)
    assert tuple(f.name for f in dataclasses.fields(MltcpOptions)) == MltcpOptions.FIELDS
    with pytest.raises(ValueError, match="intercept must be > 0"):
        MltcpOptions(intercept=0).over(loaded)
