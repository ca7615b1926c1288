"""The packet-level reference (issue 33): the simulator's clusters built link for link in
ns-3, jobs' ring all-reduce hops run as TCP flows through real queue discs, MLTCP as an
ns-3 congestion control.  Needs the ``[packet]`` extra (ns-3's Python bindings); nothing
here imports ns-3 until a run asks for it (:func:`cassini.packet.ns3env.load_ns`)."""
