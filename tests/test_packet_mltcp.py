"""The MLTCP congestion control in ns-3 (cassini_packet::MltcpDctcp) is held to
mltcp.policy bit for bit: its factor F, its window growth, its DCTCP cut scaled by F and
its iteration counting, driven through the control's own methods on random inputs."""

import pytest
from conftest import require
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cassini.packet import ns3env
from mltcp import policy
from mltcp.policy import MltcpParams

require(ns3env.available(), "ns-3 bindings (the [packet] extra; run make setup)")
pytestmark = pytest.mark.same_worker("ns-3")


@pytest.fixture(scope="module")
def cc():
    from cassini.packet import mltcp_cc

    ns = ns3env.load_ns()
    mltcp_cc.define()
    cp = ns3env.cppyy()
    # test-only C++: a fresh TcpSocketState in congestion avoidance, one IncreaseWindow
    # of `acked` segments, then GetSsThresh; returns (cwnd, ssthresh) in bytes
    cp.cppdef(
        r"""
        namespace cassini_packet_test {
        using namespace ns3;
        std::pair<uint32_t, uint32_t> GrowThenCut(Ptr<cassini_packet::MltcpDctcp> cc,
                                                  uint32_t cwndSeg, uint32_t seg,
                                                  uint32_t acked) {
            Ptr<TcpSocketState> tcb = CreateObject<TcpSocketState>();
            tcb->m_segmentSize = seg;
            tcb->m_cWnd = cwndSeg * seg;
            tcb->m_ssThresh = seg;  // below cwnd: congestion avoidance
            tcb->m_isCwndLimited = true;
            cc->IncreaseWindow(tcb, acked);
            uint32_t cwnd = tcb->m_cWnd.Get();
            return {cwnd, cc->GetSsThresh(tcb, cwnd)};
        }
        }
        """
    )
    return ns, cp.gbl


def _make(gbl, params):
    from cassini.packet import mltcp_cc

    return mltcp_cc.make(params)


params_ = st.builds(
    MltcpParams,
    slope=st.integers(0, 20 * 1024).map(lambda q: q / 1024),
    intercept=st.integers(1, 20 * 1024).map(lambda q: q / 1024),
    scale_cut=st.booleans(),
)


@settings(
    max_examples=300,
    deadline=None,  # the first call compiles templates in cppyy
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    params=params_,
    per_iter=st.integers(0, 2**40),
    since=st.integers(0, 2**41),
    seg_cwnd=st.integers(500, 9000).flatmap(  # ns-3 keeps the window in bytes, in 32 bits
        lambda seg: st.tuples(st.just(seg), st.integers(2, min(2**20, 2**32 // seg - 65)))
    ),
    acked=st.integers(1, 64),
    alpha_q=st.integers(0, 1024),
)
def test_growth_and_cut_agree_with_mltcp_policy(
    cc, params, per_iter, since, seg_cwnd, acked, alpha_q
):
    seg, cwnd = seg_cwnd
    _, gbl = cc
    c = _make(gbl, params)
    if per_iter:  # one finished iteration of per_iter bytes, then `since` more acked
        c.NoteAcked(per_iter, 0)
        c.NewIteration()
    c.NoteAcked(since, 0)
    c.SetAlphaQ(alpha_q)
    got_cwnd, got_ssthresh = gbl.cassini_packet_test.GrowThenCut(c, cwnd, seg, acked)

    slope_q, intercept_q, _, _, flags = params.fixed()
    f = (
        policy.factor_q(policy.ratio_q(since, per_iter), slope_q, intercept_q)
        if per_iter
        else policy.ONE
    )
    assert c.FactorQ() == f
    w = policy.ai_window(cwnd, f)  # tcp_cong_avoid_ai from an empty counter
    grown = cwnd + (acked // w if acked >= w else 0)
    assert got_cwnd == grown * seg
    cut = (grown * alpha_q) >> 11
    if flags & policy.FLAG_SCALE_CUT:
        cut = policy.scale_cut(cut, f, grown)
    assert got_ssthresh == max(grown - cut, 2) * seg


bursts_ = st.lists(
    st.tuples(st.integers(0, 50_000), st.integers(1, 2_000_000)), min_size=1, max_size=60
)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(bursts=bursts_, idle_ms=st.sampled_from([1.0, 5.0, 10.0, 20.0]))
def test_idle_mode_counts_iterations_as_the_kernel_does(cc, bursts, idle_ms):
    """Bursts (silence before it in us, bytes) through the control's TX_START and ACK
    handling count the iterations policy.counted_iterations (the kernel's rule) does."""
    _, gbl = cc
    params = MltcpParams(idle_ms=idle_ms)
    c = _make(gbl, params)
    now = 0
    for silence, size in bursts:
        now += silence
        c.TxStart(now)
        c.NoteAcked(size, now)
    counted = policy.counted_iterations(bursts, params.fixed()[2])
    assert c.Iterations() == len(counted)
    assert c.PerIter() == (counted[-1] if counted else 0)


def test_exact_mode_ends_an_iteration_on_a_mark_only(cc):
    _, gbl = cc
    c = _make(gbl, MltcpParams(mode="exact"))
    c.TxStart(0)
    c.NoteAcked(5000, 10)
    c.TxStart(10**9)  # a long silence, no mark: same iteration
    assert c.Iterations() == 0
    c.NoteAcked(3000, 10**9)
    c.Mark()
    c.TxStart(10**9 + 1)
    assert (c.Iterations(), c.PerIter()) == (1, 8000)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["exact", "idle"])
def test_live_flows_measure_their_iterations_bytes_exactly(cc, mode):
    """In a fabric, each ring hop's control learns the bytes of an iteration exactly:
    exact mode from the driver's marks, idle mode from the compute gap before each
    iteration (a 20 ms gap, idle_ms 10; the 1 ms gap between the phases is shorter)."""
    from cassini.packet import fabric, mltcp_cc, native
    from cassini.packet.plan import plan
    from cassini.sim.topologies.fat_tree import fat_tree

    ns, gbl = cc
    cpp = native.define()
    p = plan(fat_tree(4), {"j": [0, 2, 5]}, scale=500)
    built = fabric.build(p, "mltcp", fabric.FabricSettings())
    phases = [20_000.0, 30_000.0]
    iterations = 4
    job = cpp.RingJob(
        [0.02, 0.001], phases, [], iterations, 0.0, False, 0.0, 0.0, mode == "exact", 1448
    )
    params = MltcpParams(mode=mode, idle_ms=10.0)
    for k, hop in enumerate(p.hops["j"]):
        port = 20000 + k
        addr = ns.InetSocketAddress(ns.Ipv4Address.GetAny(), port).ConvertTo()
        helper = ns.PacketSinkHelper("ns3::TcpSocketFactory", addr)
        helper.Install(built.nodes[f"host{hop.dst}"]).Start(ns.Seconds(0.0))
        src = built.nodes[f"host{hop.src}"]
        job.AddHop(src, ns.Ipv4Address(hop.address), port, mltcp_cc.make(params), 0)
    job.Start()
    ns.Simulator.Run()
    assert job.Finished()
    for k in range(job.HopCount()):
        c = ns.DynamicCast[gbl.cassini_packet.MltcpDctcp](job.HopControl(k))
        assert c.BytesAcked() == iterations * sum(phases)
        assert (c.Iterations(), c.PerIter()) == (iterations - 1, sum(phases))
    ns.Simulator.Destroy()
