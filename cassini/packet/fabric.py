"""Build a :class:`cassini.packet.plan.PacketPlan`'s fabric in ns-3: one node per host
and switch, a point-to-point link per topology link at its packet-level rate, the
mechanism's queue disc on every switch port (hosts: FqCoDel, Linux's default, marking
ECN above the sojourn of ``ecn_k`` packets under the ECN mechanisms), static routes (the
tree per host, /32 routes pinning every ring hop to its path) and one address per
(host, job).

Fixed settings (the same for every mechanism; stated in results): link delay
``delay_us`` microseconds per link, each device's own transmit queue 2 packets (the
backlog waits in the queue disc, where marking, fair queueing and priorities act),
switch queue discs of ``limit`` packets (hosts' never overflow), TCP segments of 1448
bytes, 4 MiB socket buffers, minimum RTO 10 ms, initial window 10 segments, Nagle off,
every segment ACKed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cassini.packet import native
from cassini.packet.ns3env import load_ns
from cassini.packet.plan import PacketPlan, dotted, host_address

#: sharing mechanism -> (queue disc kind, TCP variant every socket starts with)
MECHANISMS: dict[str, tuple[str, str]] = {
    "fifo": ("fifo", "ns3::TcpNewReno"),
    "maxmin": ("fq", "ns3::TcpNewReno"),
    "dctcp": ("red-ecn", "ns3::TcpDctcp"),
    "mltcp": ("red-ecn", "ns3::TcpDctcp"),  # senders get cassini_packet::MltcpDctcp
    "priority": ("prio", "ns3::TcpNewReno"),
}
SEGMENT_BYTES = 1448
SOCKET_BUFFER_BYTES = 4 << 20
MIN_RTO_MS = 10
#: a host's own queue disc never overflows (Linux hosts hold packets back in the socket,
#: TCP small queues, rather than drop them at their own NIC; ns-3 has no such
#: back-pressure): more packets than all its sockets' buffers can hold.  It is FqCoDel,
#: Linux's default (CoDel still drops or marks there), so that a ring hop's ACKs do not
#: wait behind the reverse hop's data at the NIC; under ``priority`` it is the
#: switches' strict bands (the fluid model serves jobs' priority classes on server
#: links too), ACKs in a band above every job's.
HOST_QUEUE_PACKETS = 1 << 16
#: bytes of a full segment on the wire (1448 + TCP/IP headers with timestamps + PPP)
WIRE_BYTES = 1502


@dataclass(frozen=True)
class FabricSettings:
    """Queue and link settings: ``ecn_k`` marking threshold (packets) of the RED queue
    discs, ``limit`` packets per queue, ``bands`` job levels of the priority queue disc
    (which has one more, above them, for ACKs),
    ``delay_us`` propagation delay per link (microseconds)."""

    ecn_k: int = 20
    limit: int = 1000
    bands: int = 8
    delay_us: float = 1.0


@dataclass
class Fabric:
    """The built fabric: ns-3 nodes by plan node id; ``devices`` maps (node, link id) to
    the node's ns-3 device on that link (what it sends on)."""

    nodes: dict[str, Any]
    plan: PacketPlan
    devices: dict[tuple[str, str], Any]


def configure_tcp(mechanism: str) -> None:
    """ns-3 defaults for every socket created after this call."""
    ns = load_ns()
    _, variant = MECHANISMS[mechanism]
    cfg = ns.Config
    cfg.SetDefault(
        "ns3::TcpL4Protocol::SocketType", ns.TypeIdValue(ns.TypeId.LookupByName(variant))
    )
    cfg.SetDefault("ns3::TcpSocket::SegmentSize", ns.UintegerValue(SEGMENT_BYTES))
    cfg.SetDefault("ns3::TcpSocket::SndBufSize", ns.UintegerValue(SOCKET_BUFFER_BYTES))
    cfg.SetDefault("ns3::TcpSocket::RcvBufSize", ns.UintegerValue(SOCKET_BUFFER_BYTES))
    cfg.SetDefault("ns3::TcpSocket::InitialCwnd", ns.UintegerValue(10))
    # Nagle off and every segment ACKed at once: with Nagle a phase's last short segment
    # waited for the ACK the receiver delayed (200 ms) and the 10 ms RTO fired first
    cfg.SetDefault("ns3::TcpSocket::TcpNoDelay", ns.BooleanValue(True))
    cfg.SetDefault("ns3::TcpSocket::DelAckCount", ns.UintegerValue(1))
    cfg.SetDefault("ns3::TcpSocketBase::MinRto", ns.TimeValue(ns.MilliSeconds(MIN_RTO_MS)))
    ecn = "On" if MECHANISMS[mechanism][0] == "red-ecn" else "Off"
    cfg.SetDefault("ns3::TcpSocketBase::UseEcn", ns.StringValue(ecn))
    cfg.SetDefault("ns3::DropTailQueue<Packet>::MaxSize", ns.QueueSizeValue(ns.QueueSize("2p")))


def build(plan: PacketPlan, mechanism: str, settings: FabricSettings) -> Fabric:
    """Create the nodes, links, queue discs, addresses and routes of ``plan``."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown mechanism {mechanism!r} (known: {', '.join(MECHANISMS)})")
    ns = load_ns()
    cpp = native.define()
    configure_tcp(mechanism)
    qdisc = MECHANISMS[mechanism][0]
    names = plan.nodes
    container = ns.NodeContainer()
    container.Create(len(names))
    nodes = {name: container.Get(i) for i, name in enumerate(names)}
    stack = ns.InternetStackHelper()
    static = ns.Ipv4StaticRoutingHelper()
    stack.SetRoutingHelper(static)
    stack.Install(container)
    p2p = ns.PointToPointHelper()
    p2p.SetChannelAttribute("Delay", ns.TimeValue(ns.NanoSeconds(int(settings.delay_us * 1000))))
    iface: dict[tuple[str, str], int] = {}  # (node, link id) -> interface index
    ends: dict[tuple[str, str], Any] = {}  # (node, link id) -> device
    topo = plan.topology
    for n, link in enumerate(topo.fabric_links):
        lower, upper = link.lower, link.upper
        # hosts mark ECN (ECN mechanisms) above the sojourn of K full packets at their rate
        wire_s = settings.ecn_k * WIRE_BYTES * 8 / plan.link_bps[link.id]
        host_ce_us = wire_s * 1e6 if qdisc == "red-ecn" else 0.0
        p2p.SetDeviceAttribute(
            "DataRate", ns.DataRateValue(ns.DataRate(int(plan.link_bps[link.id])))
        )
        devices = p2p.Install(nodes[lower], nodes[upper])
        for k, node in enumerate((lower, upper)):
            one = ns.NetDeviceContainer(devices.Get(k))
            # prio: band 0 for what no job marks (ACKs: the sinks send DSCP 0), then one
            # band per job level (DSCP = level + 1)
            bands = settings.bands + 1 if qdisc == "prio" else settings.bands
            if node.startswith("host") and qdisc == "prio":  # strict bands at the NIC too
                cpp.InstallQueueDisc(one, "prio", 0, HOST_QUEUE_PACKETS, bands, 0.0)
            elif node.startswith("host"):
                cpp.InstallQueueDisc(one, "host", 0, HOST_QUEUE_PACKETS, 1, host_ce_us)
            else:
                cpp.InstallQueueDisc(one, qdisc, settings.ecn_k, settings.limit, bands, 0.0)
        if lower.startswith("host"):
            net = host_address(int(lower[4:])) & ~0xFF
            addrs, mask = (net | 1, net | 254), "255.255.255.0"
        else:
            net = (10 << 24) | (n << 2)
            addrs, mask = (net | 1, net | 2), "255.255.255.252"
        for k, node in enumerate((lower, upper)):
            ipv4 = nodes[node].GetObject[ns.Ipv4]()
            idx = ipv4.AddInterface(devices.Get(k))
            ipv4.AddAddress(
                idx, ns.Ipv4InterfaceAddress(ns.Ipv4Address(addrs[k]), ns.Ipv4Mask(mask))
            )
            ipv4.SetUp(idx)
            iface[(node, link.id)] = idx
            ends[(node, link.id)] = devices.Get(k)
    routing = {name: static.GetStaticRouting(nodes[name].GetObject[ns.Ipv4]()) for name in names}
    for i in range(topo.servers):
        name, link = f"host{i}", topo.host_links[i][0]
        gateway = (host_address(i) & ~0xFF) | 254
        routing[name].SetDefaultRoute(ns.Ipv4Address(gateway), iface[(name, link)])
    mask24 = ns.Ipv4Mask("255.255.255.0")
    for switch, server, link in plan.host_routes():
        net = host_address(server) & ~0xFF
        routing[switch].AddNetworkRouteTo(ns.Ipv4Address(net), mask24, iface[(switch, link)])
    for switch, address, link in plan.pinned_routes():
        routing[switch].AddHostRouteTo(ns.Ipv4Address(address), iface[(switch, link)])
    mask32 = ns.Ipv4Mask("255.255.255.255")
    for hops in plan.hops.values():
        for hop in hops:
            node = f"host{hop.dst}"
            ipv4 = nodes[node].GetObject[ns.Ipv4]()
            idx = iface[(node, topo.host_links[hop.dst][0])]
            ipv4.AddAddress(idx, ns.Ipv4InterfaceAddress(ns.Ipv4Address(hop.address), mask32))
    return Fabric(nodes, plan, ends)


def describe_address(address: int) -> str:
    return dotted(address)
