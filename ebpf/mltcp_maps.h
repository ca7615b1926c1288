/* SPDX-License-Identifier: GPL-2.0 */
/* The layout of every pinned MLTCP map's keys and values: the one definition.
 *
 * Every BPF program includes this header; user space (mltcp/layout.py) describes the same
 * records field by field, and tests/test_mltcp_layout.py holds that description to the
 * BTF that clang writes for these types (names, offsets, sizes) and to the key and value
 * sizes the kernel reports for the pinned maps.  Change a field here and that test fails
 * until mltcp/layout.py says the same.  Only fixed-width types, no implicit padding.
 */
#ifndef MLTCP_MAPS_H
#define MLTCP_MAPS_H

#define MLTCP_MODE_IDLE 0
#define MLTCP_MODE_EXACT 1
#define MLTCP_CC_NAME_LEN 16
#define MLTCP_FLAG_SCALE_CUT 0x1	/* mltcp_dctcp: divide the ECN window cut by F */

/* mltcp_config[0] */
struct mltcp_config {
	__u32 slope_q;		/* Q10 */
	__u32 intercept_q;	/* Q10 */
	__u32 idle_us;
	__u32 mode;		/* MLTCP_MODE_* */
	__u32 flags;		/* MLTCP_FLAG_* */
};

/* mltcp_ports: a TCP port (host order) belongs to a job */
typedef __u16 mltcp_port_t;
typedef __u32 mltcp_job_t;	/* job key, see mltcp.marks.job_key; 0: none */

/* mltcp_marks: iterations marked by the training process, per job */
typedef __u64 mltcp_mark_count_t;

/* mltcp_flows: per-flow statistics written at each iteration boundary */
struct mltcp_flow_key {
	__u16 local_port;
	__u16 remote_port;
};

/* in factor_q: the flow's socket let go of MLTCP (closed, or moved to another control);
 * F itself never exceeds 64 (1 << 16 in Q10), so the bit is free */
#define MLTCP_FLOW_ENDED 0x80000000

struct mltcp_flow_stats {
	__u64 iterations;
	__u64 last_iter_bytes;
	__u64 bytes_acked;
	__u32 factor_q;		/* F at the end of the last iteration, Q10; | MLTCP_FLOW_ENDED */
	__u32 job;
};

/* mltcp_repairs[0]: windows put back by mltcp_guard */
typedef __u64 mltcp_repair_count_t;

/* mltcp_repair_log[n % MLTCP_REPAIR_LOG_LEN]: the socket as mltcp_guard found it, before
 * repairing (repair n, counting from 0) */
#define MLTCP_REPAIR_LOG_LEN 64
struct mltcp_repair_event {
	__u64 time_ns;
	__u32 local_port;
	__u32 snd_cwnd;
	__u32 snd_ssthresh;
	__u32 prior_cwnd;
	__u32 prior_ssthresh;
	__u32 packets_out;
	__u32 prr_delivered;
	__u32 prr_out;
	__u32 snd_una;
	__u32 snd_nxt;
	__u32 high_seq;
	__u32 undo_marker;
	__u32 delivered;
	__u32 delivered_ce;
	__u32 ca_state;
	__u32 ecn_flags;
	__u32 where;		/* MLTCP_FOUND_* */
	__u32 acked;		/* MLTCP_FOUND_GROWTH: the segments cong_avoid was given */
};
#define MLTCP_FOUND_ON_ACK 0	/* mltcp_guard, at in_ack_event */
#define MLTCP_FOUND_GROWTH 1	/* right after our own growth in cong_avoid */

/* mltcp_cgroup_cfg: cgroup local storage of mltcp_select, keyed by cgroup id */
#define MLTCP_CGROUP_ECN 0x1	/* answer BPF_SOCK_OPS_NEEDS_ECN: negotiate ECN */

struct mltcp_cgroup_cfg {
	char cc[MLTCP_CC_NAME_LEN];	/* congestion control name, NUL-padded; "": leave */
	__u32 job;			/* job key, 0: none */
	__u32 flags;			/* MLTCP_CGROUP_* */
};

#endif /* MLTCP_MAPS_H */
