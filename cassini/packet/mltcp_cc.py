"""MLTCP as an ns-3 congestion control: ``cassini_packet::MltcpDctcp``, a subclass of
ns-3's ``TcpDctcp`` compiled at run time through cppyy (``cppyy.cppdef``).

It includes ``ebpf/mltcp_rule.h`` itself, the fixed-point rule the BPF programs include,
and does what ``ebpf/dctcp.bpf.c`` built with ``-DDCTCP_MLTCP`` does, in segments as the
kernel counts them (ns-3 keeps windows in bytes; they are divided by the segment size):

* bytes acked: the advance of the cumulative ACK (``m_lastAckedSeq``) at every
  ``PktsAcked``, counted from the flow's first data (an ACK of nothing new counts
  nothing, and does not count as activity, as the kernel's ``pkts_acked`` check);
* iterations, as ``ebpf/mltcp_common.h`` finds them: on ``CA_EVENT_TX_START`` (ns-3 raises
  it when a socket sends with nothing in flight) the silence since the flow's last data
  ACK or transmission ends the iteration under :c:func:`mltcp_ends_iteration` (idle
  mode); in exact mode a bumped mark (:meth:`Mark`, the driver's
  ``mltcp.mark_iteration``) does.  What the iteration moved becomes ``per_iter``;
* on every ACK (``IncreaseWindow``): ``F = mltcp_factor_q(mltcp_ratio_q(acked this
  iteration, per_iter))`` (1.0 while there is no estimate); Reno growth with
  ``w = mltcp_ai_window(cwnd, F)`` in congestion avoidance, slow start unchanged;
* on congestion (``GetSsThresh``): DCTCP's cut ``cwnd * alpha >> 11`` with alpha in Q10
  (from ns-3's DCTCP estimate, its ``CongestionEstimate`` trace), divided by F with
  ``mltcp_scale_cut`` when the scale-cut flag is set; the window becomes
  ``max(cwnd - cut, 2)`` segments.

ECN marking, alpha's estimate and the receiver's CE echo are ns-3's DCTCP.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from cassini.packet.ns3env import cppyy, load_ns
from mltcp.policy import MltcpParams

#: the rule's one source, shared with the BPF programs
RULE_HEADER = Path(__file__).resolve().parents[2] / "ebpf" / "mltcp_rule.h"

_SOURCE = r"""
#include "ns3/tcp-dctcp.h"
#include "ns3/simulator.h"
#include "ns3/callback.h"
#include "%(header)s"

namespace cassini_packet {
using namespace ns3;

class MltcpDctcp : public TcpDctcp {
  public:
    MltcpDctcp(uint32_t slopeQ, uint32_t interceptQ, uint32_t idleUs, uint32_t mode,
               uint32_t flags)
        : m_slopeQ(slopeQ), m_interceptQ(interceptQ), m_idleUs(idleUs), m_mode(mode),
          m_flags(flags) {}
    MltcpDctcp(const MltcpDctcp& o) = default;

    std::string GetName() const override { return "MltcpDctcp"; }

    void Init(Ptr<TcpSocketState> tcb) override {
        TcpDctcp::Init(tcb);
        if (!m_traced) {
            TraceConnectWithoutContext(
                "CongestionEstimate", MakeCallback(&MltcpDctcp::OnEstimate, this));
            m_traced = true;
        }
        m_lastActiveUs = NowUs();
    }

    Ptr<TcpCongestionOps> Fork() override { return CopyObject<MltcpDctcp>(this); }

    // bytes acked from the cumulative ACK (ns-3 sets m_lastAckedSeq before PktsAcked);
    // an ACK of nothing new (ns-3 calls PktsAcked with 1 for a duplicate) counts nothing
    void PktsAcked(Ptr<TcpSocketState> tcb, uint32_t segmentsAcked, const Time& rtt) override {
        TcpDctcp::PktsAcked(tcb, segmentsAcked, rtt);
        if (!m_seqKnown)
            return;
        int32_t delta = tcb->m_lastAckedSeq - m_ackedSeq;
        if (delta > 0) {
            m_ackedSeq = tcb->m_lastAckedSeq;
            NoteAcked((uint64_t)delta, NowUs());
        }
    }

    void CwndEvent(Ptr<TcpSocketState> tcb, const TcpSocketState::TcpCAEvent_t event) override {
        TcpDctcp::CwndEvent(tcb, event);
        if (event == TcpSocketState::CA_EVENT_TX_START) {
            if (!m_seqKnown) {  // the first data; m_lastAckedSeq may still be the SYN's
                m_ackedSeq = tcb->m_nextTxSequence.Get();
                m_seqKnown = true;
            }
            TxStart(NowUs());
        }
    }

    void IncreaseWindow(Ptr<TcpSocketState> tcb, uint32_t segmentsAcked) override {
        UpdateFactor();
        TcpDctcp::IncreaseWindow(tcb, segmentsAcked);
    }

    uint32_t GetSsThresh(Ptr<const TcpSocketState> tcb, uint32_t bytesInFlight) override {
        uint32_t seg = tcb->m_segmentSize;
        uint32_t cwnd = tcb->m_cWnd.Get() / seg;
        uint32_t cut = (cwnd * m_alphaQ) >> 11;
        if (m_flags & 0x1)
            cut = mltcp_scale_cut(cut, m_factorQ, cwnd);
        uint32_t next = cwnd - cut > 2 ? cwnd - cut : 2;
        return next * seg;
    }

    // -- the rule's state, public for the driver and the tests -------------------------
    void NoteAcked(uint64_t bytes, uint64_t nowUs) {
        m_bytesAcked += bytes;
        m_lastActiveUs = nowUs;
    }

    void TxStart(uint64_t nowUs) {
        bool boundary;
        if (m_mode == 1) {
            boundary = m_marks != m_markSeen;
            m_markSeen = m_marks;
        } else {
            boundary = mltcp_ends_iteration(nowUs - m_lastActiveUs, m_idleUs,
                                            m_bytesAcked - m_iterStart, m_perIter);
        }
        if (boundary)
            NewIteration();
        m_lastActiveUs = nowUs;
    }

    void NewIteration() {
        if (m_bytesAcked > m_iterStart) {
            m_perIter = m_bytesAcked - m_iterStart;
            m_iterations++;
        }
        m_iterStart = m_bytesAcked;
        m_factorQ = MLTCP_ONE;
    }

    uint32_t UpdateFactor() {
        if (!m_perIter)
            m_factorQ = MLTCP_ONE;
        else
            m_factorQ = mltcp_factor_q(mltcp_ratio_q(m_bytesAcked - m_iterStart, m_perIter),
                                       m_slopeQ, m_interceptQ);
        return m_factorQ;
    }

    void Mark() { m_marks++; }
    void SetAlphaQ(uint32_t a) { m_alphaQ = a; }
    uint32_t AlphaQ() const { return m_alphaQ; }
    uint32_t FactorQ() const { return m_factorQ; }
    uint64_t PerIter() const { return m_perIter; }
    uint64_t BytesAcked() const { return m_bytesAcked; }
    uint64_t IterStart() const { return m_iterStart; }
    uint32_t Iterations() const { return m_iterations; }

  protected:
    // tcp_cong_avoid_ai(tp, w, acked) with w = mltcp_ai_window(cwnd, F), as mltcp_reno_grow
    void CongestionAvoidance(Ptr<TcpSocketState> tcb, uint32_t segmentsAcked) override {
        uint32_t seg = tcb->m_segmentSize;
        uint32_t w = mltcp_ai_window(tcb->m_cWnd.Get() / seg, m_factorQ);
        if (m_cwndCnt >= w) {
            m_cwndCnt = 0;
            tcb->m_cWnd = tcb->m_cWnd.Get() + seg;
        }
        m_cwndCnt += segmentsAcked;
        if (m_cwndCnt >= w) {
            uint32_t delta = m_cwndCnt / w;
            m_cwndCnt -= delta * w;
            tcb->m_cWnd = tcb->m_cWnd.Get() + delta * seg;
        }
    }

  private:
    static uint64_t NowUs() { return (uint64_t)Simulator::Now().GetMicroSeconds(); }
    void OnEstimate(uint32_t, uint32_t, double alpha) {
        double q = alpha * MLTCP_ONE;
        m_alphaQ = q >= MLTCP_ONE ? MLTCP_ONE : (q <= 0 ? 0 : (uint32_t)q);
    }

    uint32_t m_slopeQ, m_interceptQ, m_idleUs, m_mode, m_flags;
    uint32_t m_alphaQ{MLTCP_ONE};   // DCTCP starts cautious (alpha 1.0), as the BPF DCTCP
    uint32_t m_factorQ{MLTCP_ONE};
    uint32_t m_cwndCnt{0};
    uint32_t m_iterations{0};
    uint64_t m_bytesAcked{0}, m_iterStart{0}, m_perIter{0}, m_lastActiveUs{0};
    uint64_t m_marks{0}, m_markSeen{0};
    SequenceNumber32 m_ackedSeq{0};
    bool m_seqKnown{false};
    bool m_traced{false};
};

Ptr<MltcpDctcp> MakeMltcpDctcp(uint32_t slopeQ, uint32_t interceptQ, uint32_t idleUs,
                               uint32_t mode, uint32_t flags) {
    return CreateObject<MltcpDctcp>(slopeQ, interceptQ, idleUs, mode, flags);
}
}  // namespace cassini_packet
"""


@lru_cache(maxsize=1)
def define() -> Any:
    """Compile the control into the bindings' interpreter (once per process); returns
    the ``cassini_packet`` C++ namespace.  Raises FileNotFoundError naming the rule
    header when the source tree's ``ebpf/`` is absent."""
    if not RULE_HEADER.is_file():
        raise FileNotFoundError(f"{RULE_HEADER}: the MLTCP rule header is missing")
    load_ns()
    cp = cppyy()
    cp.cppdef(_SOURCE % {"header": RULE_HEADER})
    return cp.gbl.cassini_packet


def make(params: MltcpParams) -> Any:
    """A new ``MltcpDctcp`` (an ns-3 ``Ptr``) with ``params`` in the kernel's fixed point."""
    slope_q, intercept_q, idle_us, mode, flags = params.fixed()
    return define().MakeMltcpDctcp(slope_q, intercept_q, idle_us, mode, flags)
