"""The C++ side of a packet-level run, compiled at run time through cppyy: queue discs
per mechanism, and :cpp:class:`RingJob`, the job driver (ns-3 events call C++ only, so
no Python runs inside the event loop).

A ``RingJob`` runs ``iterations`` iterations of a profile's cycle
(:class:`cassini.sim.network.Cycle`): for each phase, ``gaps[p]`` seconds of compute (no
traffic), then every ring hop writes ``bytes[p]`` bytes into its TCP connection, no
faster than ``rates[p]`` bytes/s (the phase's rate in the profile, as the fluid model
caps a phase's flows at it; 0: no cap): the driver releases ``chunk`` bytes per hop
every ``chunk / rates[p]`` seconds, the first at the phase's start; the
phase ends when every hop's bytes are acknowledged (the sender's buffer is empty), the
iteration with its last phase.  Connections persist across iterations, as a collective
library's do.  With ``held``, iteration k starts no earlier than
``slot0 + k * period`` (CASSINI's time-shift: ``slot0 = epoch + shift``).  With ``mark``,
every MLTCP control of the job is told at each iteration start (exact mode's
``mltcp.mark_iteration``).  ``Ends()``: simulated seconds at which each iteration ended.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from cassini.packet import mltcp_cc
from cassini.packet.ns3env import cppyy

_SOURCE = r"""
#include "ns3/core-module.h"
#include "ns3/network-module.h"
#include "ns3/internet-module.h"
#include "ns3/traffic-control-module.h"

namespace cassini_packet {
using namespace ns3;

// The priority queue disc's classifier: band = the packet's DSCP (the job's level, set
// through the socket's IP ToS), so the level survives forwarding (ns-3's IPv4 forwarding
// rebuilds the socket priority from the ToS, which reaches only 4 of 8 levels).
class DscpBandFilter : public PacketFilter {
  private:
    bool CheckProtocol(Ptr<QueueDiscItem> item) const override {
        return DynamicCast<Ipv4QueueDiscItem>(item) != nullptr;
    }
    int32_t DoClassify(Ptr<QueueDiscItem> item) const override {
        return DynamicCast<Ipv4QueueDiscItem>(item)->GetHeader().GetTos() >> 2;
    }
};

// One root queue disc on every device of `devices`: "fifo", "fq" (FqCoDel), "host"
// (FqCoDel marking ECN above a sojourn of ceThresholdUs when that is > 0), "red-ecn"
// (RED marking ECN at min = max = k packets), "prio" (PrioQueueDisc, `bands` FIFO bands,
// DSCP d -> band d, band 0 served first).  `limit`: packets each queue holds.
void InstallQueueDisc(NetDeviceContainer devices, std::string kind, uint32_t k,
                      uint32_t limit, uint32_t bands, double ceThresholdUs) {
    TrafficControlHelper tch;
    QueueSizeValue size(QueueSize(QueueSizeUnit::PACKETS, limit));
    if (kind == "fifo") {
        tch.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", size);
    } else if (kind == "fq") {
        tch.SetRootQueueDisc("ns3::FqCoDelQueueDisc", "MaxSize", size);
    } else if (kind == "host") {  // Linux's default fq_codel; ECN at a sojourn threshold
        if (ceThresholdUs > 0)
            tch.SetRootQueueDisc("ns3::FqCoDelQueueDisc", "MaxSize", size, "UseEcn",
                                 BooleanValue(true), "CeThreshold",
                                 TimeValue(NanoSeconds((int64_t)(ceThresholdUs * 1000))));
        else
            tch.SetRootQueueDisc("ns3::FqCoDelQueueDisc", "MaxSize", size);
    } else if (kind == "red-ecn") {
        tch.SetRootQueueDisc("ns3::RedQueueDisc", "MaxSize", size, "MinTh", DoubleValue(k),
                             "MaxTh", DoubleValue(k), "UseEcn", BooleanValue(true),
                             "UseHardDrop", BooleanValue(false), "QW", DoubleValue(1.0),
                             "Gentle", BooleanValue(false));
    } else if (kind == "prio") {
        Priomap map;
        for (uint32_t p = 0; p < 16; p++)
            map[p] = p < bands ? p : bands - 1;
        uint16_t handle = tch.SetRootQueueDisc("ns3::PrioQueueDisc", "Priomap",
                                               PriomapValue(map));
        auto classes = tch.AddQueueDiscClasses(handle, bands, "ns3::QueueDiscClass");
        for (uint32_t b = 0; b < bands; b++)
            tch.AddChildQueueDisc(handle, classes[b], "ns3::FifoQueueDisc", "MaxSize", size);
    } else {
        NS_FATAL_ERROR("unknown queue disc kind " << kind);
    }
    QueueDiscContainer installed = tch.Install(devices);
    if (kind == "prio")
        for (uint32_t i = 0; i < installed.GetN(); i++)
            installed.Get(i)->AddPacketFilter(CreateObject<DscpBandFilter>());
}

// Bytes each watched device has sent (MacTx: packets the device takes to send), by key.
class ByteCounter {
  public:
    void Watch(Ptr<NetDevice> device, uint32_t key) {
        m_bytes[key] = 0;
        device->TraceConnectWithoutContext(
            "MacTx", MakeBoundCallback(&ByteCounter::OnTx, this, key));
    }
    uint64_t Bytes(uint32_t key) const {
        auto it = m_bytes.find(key);
        return it == m_bytes.end() ? 0 : it->second;
    }

  private:
    static void OnTx(ByteCounter* self, uint32_t key, Ptr<const Packet> p) {
        self->m_bytes[key] += p->GetSize();
    }
    std::map<uint32_t, uint64_t> m_bytes;
};

class RingJob {
  public:
    RingJob(std::vector<double> gaps, std::vector<double> bytes, std::vector<double> rates,
            uint32_t iterations, double start, bool held, double slot0, double period,
            bool mark, uint32_t chunk)
        : m_gaps(gaps), m_bytes(bytes), m_rates(rates), m_iterations(iterations),
          m_start(start), m_held(held), m_slot0(slot0), m_period(period), m_mark(mark),
          m_chunk(chunk) {}

    // A hop from `src` to `dst`:`port`; `cc` (may be null): a congestion control forked
    // for this socket; `priority`: the job's level, sent as the DSCP (band; 0 first).
    void AddHop(Ptr<Node> src, Ipv4Address dst, uint16_t port, Ptr<TcpCongestionOps> cc,
                uint8_t priority) {
        Hop h;
        h.src = src;
        h.dst = InetSocketAddress(dst, port);
        h.cc = cc ? cc->Fork() : nullptr;
        h.priority = priority;
        m_hops.push_back(h);
    }

    void Start() { Simulator::Schedule(Seconds(m_start), &RingJob::Open, this); }

    std::vector<double> Ends() const { return m_ends; }
    std::vector<double> Starts() const { return m_starts; }
    uint32_t HopCount() const { return m_hops.size(); }
    Ptr<TcpCongestionOps> HopControl(uint32_t i) const { return m_hops[i].cc; }
    bool Finished() const { return m_ends.size() == m_iterations; }

  private:
    struct Hop {
        Ptr<Node> src;
        InetSocketAddress dst{Ipv4Address::GetAny(), 0};
        Ptr<TcpCongestionOps> cc;
        uint8_t priority{0};
        Ptr<Socket> sock;
        uint64_t toWrite{0};
        bool done{true};
    };

    void Open() {
        for (auto& h : m_hops) {
            h.sock = Socket::CreateSocket(h.src, TcpSocketFactory::GetTypeId());
            Ptr<TcpSocketBase> tcp = DynamicCast<TcpSocketBase>(h.sock);
            if (h.cc)
                tcp->SetCongestionControlAlgorithm(h.cc);
            h.sock->SetIpTos((uint8_t)(h.priority << 2));
            h.sock->Bind();
            h.sock->Connect(h.dst);
            h.sock->SetSendCallback(MakeCallback(&RingJob::OnSendSpace, this));
        }
        if (m_hops.empty() && m_gaps.empty()) {  // nothing to do at all
            return;
        }
        BeginIteration();
    }

    void BeginIteration() {
        uint32_t k = m_ends.size();
        if (k == m_iterations)
            return;
        double now = Simulator::Now().GetSeconds();
        if (m_held) {
            double slot = m_slot0 + k * m_period;
            // ns-3 keeps time in whole nanoseconds: an event scheduled for `slot` runs up
            // to half a nanosecond before it, and waiting again would loop at that time
            if (slot - now > 1e-9) {
                Simulator::Schedule(Seconds(slot - now), &RingJob::BeginIteration, this);
                return;
            }
        }
        m_starts.push_back(now);
        if (m_mark)
            for (auto& h : m_hops)
                if (h.cc)
                    MarkOf(h.cc);
        m_phase = 0;
        BeginGap();
    }

    static void MarkOf(Ptr<TcpCongestionOps> cc) {
        Ptr<MltcpDctcp> m = DynamicCast<MltcpDctcp>(cc);
        if (m)
            m->Mark();
    }

    void BeginGap() {
        double gap = m_phase < m_gaps.size() ? m_gaps[m_phase] : 0.0;
        Simulator::Schedule(Seconds(gap), &RingJob::BeginSend, this);
    }

    void BeginSend() {
        if (m_phase >= m_bytes.size() || m_hops.empty()) {  // pure compute
            EndPhase();
            return;
        }
        m_pending = 0;
        uint64_t n = (uint64_t)m_bytes[m_phase];
        m_phaseBytes = n;
        m_released = 0;
        m_sendStart = Simulator::Now().GetSeconds();
        m_releases = 0;
        for (auto& h : m_hops) {
            h.toWrite = n;
            h.done = n == 0;
            if (!h.done)
                m_pending++;
        }
        if (m_pending == 0) {
            EndPhase();
            return;
        }
        Release();
    }

    // Pacing: every hop may have written m_released bytes of this phase; one more chunk
    // each time, the next release on the phase's own clock (start + k * chunk / rate).
    void Release() {
        double rate = m_phase < m_rates.size() ? m_rates[m_phase] : 0.0;
        if (rate <= 0)
            m_released = m_phaseBytes;
        else
            m_released = std::min<uint64_t>(m_phaseBytes, m_released + m_chunk);
        m_releases++;
        for (auto& h : m_hops)
            if (h.toWrite > 0)
                Fill(h);
        if (m_released < m_phaseBytes) {
            double next = m_sendStart + m_releases * (double)m_chunk / rate;
            double now = Simulator::Now().GetSeconds();
            Simulator::Schedule(Seconds(std::max(0.0, next - now)), &RingJob::Release, this);
        }
    }

    void Fill(Hop& h) {
        while (h.toWrite > 0) {
            uint64_t written = m_phaseBytes - h.toWrite;
            if (written >= m_released)
                return;  // paced: wait for the next release
            uint32_t room = h.sock->GetTxAvailable();
            if (room == 0)
                return;
            uint32_t n = (uint32_t)std::min<uint64_t>(std::min<uint64_t>(h.toWrite, room),
                                                      m_released - written);
            int sent = h.sock->Send(Create<Packet>(n));
            if (sent <= 0)
                return;
            h.toWrite -= sent;
        }
        CheckDone(h);
    }

    void CheckDone(Hop& h) {
        if (h.done || h.toWrite > 0)
            return;
        Ptr<TcpSocketBase> tcp = DynamicCast<TcpSocketBase>(h.sock);
        UintegerValue buf;
        tcp->GetAttribute("SndBufSize", buf);
        if (h.sock->GetTxAvailable() < buf.Get())
            return;  // bytes still unacknowledged
        h.done = true;
        if (--m_pending == 0)
            Simulator::ScheduleNow(&RingJob::EndPhase, this);
    }

    void OnSendSpace(Ptr<Socket> sock, uint32_t) {
        for (auto& h : m_hops)
            if (h.sock == sock) {
                if (h.toWrite > 0)
                    Fill(h);
                else
                    CheckDone(h);
            }
    }

    void EndPhase() {
        m_phase++;
        if (m_phase < m_gaps.size()) {
            BeginGap();
            return;
        }
        m_ends.push_back(Simulator::Now().GetSeconds());
        BeginIteration();
    }

    std::vector<double> m_gaps, m_bytes, m_rates;
    uint32_t m_iterations;
    double m_start;
    bool m_held;
    double m_slot0, m_period;
    bool m_mark;
    uint32_t m_chunk;
    uint64_t m_phaseBytes{0}, m_released{0}, m_releases{0};
    double m_sendStart{0.0};
    std::vector<Hop> m_hops;
    std::vector<double> m_starts, m_ends;
    uint32_t m_phase{0};
    uint32_t m_pending{0};
};
}  // namespace cassini_packet
"""


@lru_cache(maxsize=1)
def define() -> Any:
    """Compile the queue-disc installer and :cpp:class:`RingJob` (once per process, after
    the MLTCP control they refer to); returns the ``cassini_packet`` C++ namespace."""
    mltcp_cc.define()
    cp = cppyy()
    cp.cppdef(_SOURCE)
    return cp.gbl.cassini_packet
