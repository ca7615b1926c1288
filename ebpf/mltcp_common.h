/* SPDX-License-Identifier: GPL-2.0 */
/* MLTCP state and iteration tracking shared by the congestion controls.
 *
 * Each flow keeps, in its congestion-control private area, the bytes acked when its
 * current iteration began, the bytes of its last iteration (the estimate for this one), an
 * iteration count and its current F.  An iteration ends
 *   - idle mode:  when the flow transmits again (CA_EVENT_TX_START) after being idle longer
 *                 than the configured threshold, once it has moved three quarters of its
 *                 last iteration's bytes (mltcp_ends_iteration, mltcp_rule.h), or
 *   - exact mode: when the training process has bumped its job's counter (mltcp_marks) since
 *                 the flow last looked; flows find their job by port (mltcp_ports).
 * Maps are pinned by name under /sys/fs/bpf, so every variant and user space share them;
 * their keys and values are defined once, in mltcp_maps.h.
 */
#ifndef MLTCP_COMMON_H
#define MLTCP_COMMON_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "mltcp_rule.h"
#include "mltcp_maps.h"

extern __u32 tcp_slow_start(struct tcp_sock *tp, __u32 acked) __ksym;
extern void tcp_cong_avoid_ai(struct tcp_sock *tp, __u32 w, __u32 acked) __ksym;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mltcp_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} mltcp_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, mltcp_port_t);
	__type(value, mltcp_job_t);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} mltcp_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, mltcp_job_t);
	__type(value, mltcp_mark_count_t);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} mltcp_marks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct mltcp_flow_key);
	__type(value, struct mltcp_flow_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} mltcp_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, mltcp_repair_count_t);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} mltcp_repairs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MLTCP_REPAIR_LOG_LEN);
	__type(key, __u32);
	__type(value, struct mltcp_repair_event);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} mltcp_repair_log SEC(".maps");

/* per-flow state, placed after the base algorithm's state in icsk_ca_priv */
struct mltcp_state {
	__u64 iter_start;	/* bytes_acked when this iteration began */
	__u64 per_iter;		/* bytes of the last iteration */
	__u64 last_active_us;	/* tcp_mstamp of the last ACK or transmission */
	__u64 mark_seen;	/* job counter at the last boundary (exact mode) */
	__u32 iterations;
	__u32 factor_q;
};

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct inet_connection_sock *inet_csk(const struct sock *sk)
{
	return (struct inet_connection_sock *)sk;
}

static __always_inline void *inet_csk_ca(const struct sock *sk)
{
	return (void *)inet_csk(sk)->icsk_ca_priv;
}

static __always_inline int tcp_in_slow_start(const struct tcp_sock *tp)
{
	return tp->snd_cwnd < tp->snd_ssthresh;
}

static __always_inline int tcp_is_cwnd_limited(const struct sock *sk)
{
	const struct tcp_sock *tp = tcp_sk(sk);

	if (tcp_in_slow_start(tp))
		return tp->snd_cwnd < 2 * tp->max_packets_out;
	return !!BPF_CORE_READ_BITFIELD(tp, is_cwnd_limited);
}

static __always_inline struct mltcp_config *mltcp_cfg(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&mltcp_config, &zero);
}

static __always_inline struct mltcp_flow_key mltcp_key(const struct sock *sk)
{
	struct mltcp_flow_key key = {
		.local_port = sk->__sk_common.skc_num,
		.remote_port = bpf_ntohs(sk->__sk_common.skc_dport),
	};
	return key;
}

/* The flow's job: its own port first (what mltcp_select writes), then its peer's (what
 * `mltcp assign-port` usually names: a server's well-known port). */
static __always_inline __u32 mltcp_job(const struct sock *sk)
{
	struct mltcp_flow_key key = mltcp_key(sk);
	__u32 *job = bpf_map_lookup_elem(&mltcp_ports, &key.local_port);

	if (!job)
		job = bpf_map_lookup_elem(&mltcp_ports, &key.remote_port);
	return job ? *job : 0;
}

static __always_inline void mltcp_init(struct sock *sk, struct mltcp_state *st)
{
	__u32 job = mltcp_job(sk);
	__u64 *marks = job ? bpf_map_lookup_elem(&mltcp_marks, &job) : 0;

	st->iter_start = tcp_sk(sk)->bytes_acked;
	st->per_iter = 0;
	st->last_active_us = tcp_sk(sk)->tcp_mstamp;
	st->mark_seen = marks ? *marks : 0;
	st->iterations = 0;
	st->factor_q = MLTCP_ONE;
}

/* An iteration ended: what it moved becomes the estimate for the next one. */
static __always_inline void mltcp_new_iteration(struct sock *sk, struct mltcp_state *st)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mltcp_flow_key key = mltcp_key(sk);
	struct mltcp_flow_stats stats = {};
	__u64 acked = tp->bytes_acked;

	if (acked > st->iter_start) {
		st->per_iter = acked - st->iter_start;
		st->iterations++;
	}
	stats.iterations = st->iterations;
	stats.last_iter_bytes = st->per_iter;
	stats.bytes_acked = acked;
	stats.factor_q = st->factor_q;	/* F reached at the end of the iteration */
	st->iter_start = acked;
	st->factor_q = MLTCP_ONE;
	stats.job = mltcp_job(sk);
	bpf_map_update_elem(&mltcp_flows, &key, &stats, BPF_ANY);
}

/* release: the socket lets go of MLTCP (it is destroyed, or moves to another control).
 * Its row in mltcp_flows is marked ended (MLTCP_FLOW_ENDED), so `mltcp status --flows`
 * lists live flows only while the final counts stay readable (the testbed reads them after
 * its workers exit) until the LRU reuses the slot.  The key is the port pair alone: a flow
 * with the same ports in another network namespace may have written the row since, so it
 * is marked only if it is still the one this socket wrote at its last boundary.  The local
 * port is read from inet_sport: a socket being destroyed has left its port (skc_num is 0
 * once tcp_set_state(TCP_CLOSE) gave the port back). */
static __always_inline void mltcp_release(struct sock *sk, struct mltcp_state *st)
{
	struct mltcp_flow_key key = {
		.local_port = bpf_ntohs(((struct inet_sock *)sk)->inet_sport),
		.remote_port = bpf_ntohs(sk->__sk_common.skc_dport),
	};
	struct mltcp_flow_stats *stats = bpf_map_lookup_elem(&mltcp_flows, &key);

	if (stats && stats->iterations == st->iterations && stats->last_iter_bytes == st->per_iter &&
	    stats->bytes_acked <= tcp_sk(sk)->bytes_acked)
		stats->factor_q |= MLTCP_FLOW_ENDED;
}

/* CA_EVENT_TX_START: the flow sends after having nothing in flight. */
static __always_inline void mltcp_tx_start(struct sock *sk, struct mltcp_state *st)
{
	struct mltcp_config *cfg = mltcp_cfg();
	__u64 now = tcp_sk(sk)->tcp_mstamp;
	int boundary = 0;

	if (!cfg)
		return;
	if (cfg->mode == MLTCP_MODE_EXACT) {
		__u32 job = mltcp_job(sk);
		__u64 *marks = job ? bpf_map_lookup_elem(&mltcp_marks, &job) : 0;

		if (marks && *marks != st->mark_seen) {
			st->mark_seen = *marks;
			boundary = 1;
		}
	} else {
		boundary = mltcp_ends_iteration(now - st->last_active_us, cfg->idle_us,
						tcp_sk(sk)->bytes_acked - st->iter_start,
						st->per_iter);
	}
	if (boundary)
		mltcp_new_iteration(sk, st);
	st->last_active_us = now;
}

/* pkts_acked, called for every ACK that arrives while the flow has data in flight: the
 * flow was active now if the ACK took some of its data off the queue.  Only data ACKs
 * count: a gloo connection carries both ranks' data, and its peer's segments (ACKs of
 * nothing new) arriving while this side is silent would otherwise hide the silence.
 * cong_avoid (mltcp_on_ack) alone is not enough: the kernel skips it while the window is
 * being reduced (CWR after an ECN mark, recovery), so noting activity only there left
 * last_active_us at the last ACK before the reduction, and the next transmission saw a
 * silence longer than the real one. */
static __always_inline void mltcp_data_acked(struct sock *sk, struct mltcp_state *st,
					     const struct ack_sample *sample)
{
	if (sample->pkts_acked)
		st->last_active_us = tcp_sk(sk)->tcp_mstamp;
}

/* On every ACK: note activity and recompute F from how far through the iteration we are. */
static __always_inline __u32 mltcp_on_ack(struct sock *sk, struct mltcp_state *st)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mltcp_config *cfg = mltcp_cfg();
	__u32 ratio;

	st->last_active_us = tp->tcp_mstamp;
	if (!cfg || !st->per_iter) {
		st->factor_q = MLTCP_ONE;	/* no estimate yet: behave like the base algorithm */
		return st->factor_q;
	}
	ratio = mltcp_ratio_q(tp->bytes_acked - st->iter_start, st->per_iter);
	st->factor_q = mltcp_factor_q(ratio, cfg->slope_q, cfg->intercept_q);
	return st->factor_q;
}

/* The window guard.  On kernel 6.18 a BPF congestion control on an ECN path sometimes
 * finds snd_ssthresh = the low half of a kernel text address (0x81104110 on the boot we
 * traced) right after entering CWR, whatever its ssthresh program returned (computing
 * Reno's ssthresh in BPF did not change it; the bare BPF Reno bpf_reno_plain showed it
 * too, the built-in reno never); PRR then makes snd_cwnd ~10^9 and a later CWR copies it
 * into prior_cwnd (README, Known problems; tests/mltcp_window_fault.py).  A flow in that
 * state stalls in CWR or floods the queue for the rest of its life.  No real window here
 * comes near 2^20 segments, so on every ACK, and right after our own growth, such values
 * are put back to sane ones, counted (mltcp_repairs, `mltcp status`) and the socket as
 * found is logged (mltcp_repair_log). */
#define MLTCP_SANE_WINDOW (1U << 20)
#define MLTCP_INFINITE_SSTHRESH 0x7fffffffU

static __always_inline int mltcp_insane(const struct tcp_sock *tp)
{
	return tp->snd_cwnd > MLTCP_SANE_WINDOW ||
	       (tp->snd_ssthresh > MLTCP_SANE_WINDOW &&
		tp->snd_ssthresh != MLTCP_INFINITE_SSTHRESH);
}

/* Log the socket as found (mltcp_repair_log), put its window back, count the repair. */
static __always_inline int mltcp_repair(struct sock *sk, __u32 where, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mltcp_repair_event *e;
	__u32 zero = 0, n;
	__u64 *count;

	count = bpf_map_lookup_elem(&mltcp_repairs, &zero);
	if (count) {
		n = __sync_fetch_and_add(count, 1) % MLTCP_REPAIR_LOG_LEN;
		e = bpf_map_lookup_elem(&mltcp_repair_log, &n);
		if (e) {
			e->time_ns = bpf_ktime_get_ns();
			e->local_port = sk->__sk_common.skc_num;
			e->snd_cwnd = tp->snd_cwnd;
			e->snd_ssthresh = tp->snd_ssthresh;
			e->prior_cwnd = tp->prior_cwnd;
			e->prior_ssthresh = tp->prior_ssthresh;
			e->packets_out = tp->packets_out;
			e->prr_delivered = tp->prr_delivered;
			e->prr_out = tp->prr_out;
			e->snd_una = tp->snd_una;
			e->snd_nxt = tp->snd_nxt;
			e->high_seq = tp->high_seq;
			e->undo_marker = tp->undo_marker;
			e->delivered = tp->delivered;
			e->delivered_ce = tp->delivered_ce;
			e->ca_state = BPF_CORE_READ_BITFIELD(inet_csk(sk), icsk_ca_state);
			e->ecn_flags = tp->ecn_flags;
			e->where = where;
			e->acked = acked;
		}
	}
	if (tp->snd_cwnd > MLTCP_SANE_WINDOW)
		tp->snd_cwnd = tp->packets_out > 2 ? tp->packets_out : 2;
	if (tp->snd_ssthresh > MLTCP_SANE_WINDOW && tp->snd_ssthresh != MLTCP_INFINITE_SSTHRESH)
		tp->snd_ssthresh = tp->snd_cwnd >> 1 > 2 ? tp->snd_cwnd >> 1 : 2;
	return 0;
}

static __always_inline void mltcp_guard(struct sock *sk)
{
	if (mltcp_insane(tcp_sk(sk)))
		mltcp_repair(sk, MLTCP_FOUND_ON_ACK, 0);
}

/* Reno growth with MLTCP's F: slow start as Reno, then about F segments per RTT
 * (tcp_cong_avoid_ai with w = cwnd / F; F = 1.0 is plain Reno). */
static __always_inline void mltcp_reno_grow(struct sock *sk, __u32 acked, __u32 factor_q)
{
	struct tcp_sock *tp = tcp_sk(sk);

	if (!tcp_is_cwnd_limited(sk))
		return;
	if (tcp_in_slow_start(tp)) {
		__u32 given = acked;

		acked = tcp_slow_start(tp, acked);
		/* grown past any sane size right here: the kernel handed us an impossible
		 * `acked`; logged as found in growth, and repaired */
		if (mltcp_insane(tp))
			mltcp_repair(sk, MLTCP_FOUND_GROWTH, given);
		if (!acked)
			return;
	}
	tcp_cong_avoid_ai(tp, mltcp_ai_window(tp->snd_cwnd, factor_q), acked);
	if (mltcp_insane(tp))
		mltcp_repair(sk, MLTCP_FOUND_GROWTH, acked);
}

#endif /* MLTCP_COMMON_H */
