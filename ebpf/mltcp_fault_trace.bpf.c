// SPDX-License-Identifier: GPL-2.0
/* mltcp_fault_trace: fentry/fexit probes on the kernel's window-changing functions that
 * record every call after which snd_cwnd, snd_ssthresh or prior_cwnd went from a sane
 * value (<= 2^20; ssthresh "infinite" 0x7fffffff counts as sane) to a huge one, with the
 * socket's window fields before and after (investigation of the ~10^9 window fault, see
 * tests/mltcp_window_fault.py).  Events go to the pinned array mltcp_trace_events, their
 * number to mltcp_trace_count.  tcp_init_cwnd_reduction and tcp_end_cwnd_reduction are
 * inlined on 6.18: their writes show in their callers (tcp_enter_cwr, tcp_enter_recovery,
 * tcp_ack).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define SANE (1U << 20)
#define INF 0x7fffffffU
#define MAX_EVENTS 4096

char _license[] SEC("license") = "GPL";

struct win {
	__u32 cwnd, ssthresh, prior;
};

struct mltcp_fault_event {
	__u32 func;
	__u32 port;
	__u32 cwnd0, cwnd1, ss0, ss1, prior0, prior1;
	__u32 packets_out, prr_delivered, prr_out, snd_una, snd_nxt, high_seq;
	__u32 ecn_flags, delivered, arg1, arg2, ca_state, pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_EVENTS);
	__type(key, __u32);
	__type(value, struct mltcp_fault_event);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} mltcp_trace_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);	/* [0] events, [1] probe calls */
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} mltcp_trace_count SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);	/* tid << 8 | func */
	__type(value, struct win);
} saved SEC(".maps");

static __always_inline int huge(__u32 before, __u32 after, int ss)
{
	if (ss)
		return after > SANE && after != INF && (before <= SANE || before == INF);
	return after > SANE && before <= SANE;
}

static __always_inline void save(struct tcp_sock *tp, __u32 func)
{
	__u64 key = (bpf_get_current_pid_tgid() << 8) | func;
	struct win w = {tp->snd_cwnd, tp->snd_ssthresh, tp->prior_cwnd};

	bpf_map_update_elem(&saved, &key, &w, BPF_ANY);
}

static __always_inline void check(struct tcp_sock *tp, __u32 func, __u32 a1, __u32 a2)
{
	__u64 key = (bpf_get_current_pid_tgid() << 8) | func;
	struct win *w = bpf_map_lookup_elem(&saved, &key);
	__u32 zero = 0, one = 1, idx;
	__u64 *n, *calls;
	struct mltcp_fault_event *e;

	calls = bpf_map_lookup_elem(&mltcp_trace_count, &one);
	if (calls)
		__sync_fetch_and_add(calls, 1);
	if (!w)
		return;
	if (!huge(w->cwnd, tp->snd_cwnd, 0) && !huge(w->ssthresh, tp->snd_ssthresh, 1) &&
	    !huge(w->prior, tp->prior_cwnd, 0))
		goto out;
	n = bpf_map_lookup_elem(&mltcp_trace_count, &zero);
	if (!n)
		goto out;
	idx = __sync_fetch_and_add(n, 1);
	if (idx >= MAX_EVENTS)
		goto out;
	e = bpf_map_lookup_elem(&mltcp_trace_events, &idx);
	if (!e)
		goto out;
	e->func = func;
	e->port = tp->inet_conn.icsk_inet.sk.__sk_common.skc_num;
	e->cwnd0 = w->cwnd;
	e->cwnd1 = tp->snd_cwnd;
	e->ss0 = w->ssthresh;
	e->ss1 = tp->snd_ssthresh;
	e->prior0 = w->prior;
	e->prior1 = tp->prior_cwnd;
	e->packets_out = tp->packets_out;
	e->prr_delivered = tp->prr_delivered;
	e->prr_out = tp->prr_out;
	e->snd_una = tp->snd_una;
	e->snd_nxt = tp->snd_nxt;
	e->high_seq = tp->high_seq;
	e->ecn_flags = tp->ecn_flags;
	e->delivered = tp->delivered;
	e->arg1 = a1;
	e->arg2 = a2;
	e->ca_state = tp->inet_conn.icsk_ca_state;
out:
	bpf_map_delete_elem(&saved, &key);
}

#define TP(sk) ((struct tcp_sock *)(sk))

/* function ids: the order of FUNCS in tests/mltcp_window_fault.py */
SEC("fentry/tcp_ack")
int BPF_PROG(e0, struct sock *sk) { save(TP(sk), 0); return 0; }
SEC("fexit/tcp_ack")
int BPF_PROG(x0, struct sock *sk, const struct sk_buff *skb, int flag)
{ check(TP(sk), 0, flag, 0); return 0; }

SEC("fentry/tcp_enter_cwr")
int BPF_PROG(e1, struct sock *sk) { save(TP(sk), 1); return 0; }
SEC("fexit/tcp_enter_cwr")
int BPF_PROG(x1, struct sock *sk) { check(TP(sk), 1, 0, 0); return 0; }

SEC("fentry/tcp_enter_recovery")
int BPF_PROG(e2, struct sock *sk) { save(TP(sk), 2); return 0; }
SEC("fexit/tcp_enter_recovery")
int BPF_PROG(x2, struct sock *sk, bool ece_ack) { check(TP(sk), 2, ece_ack, 0); return 0; }

SEC("fentry/tcp_enter_loss")
int BPF_PROG(e3, struct sock *sk) { save(TP(sk), 3); return 0; }
SEC("fexit/tcp_enter_loss")
int BPF_PROG(x3, struct sock *sk) { check(TP(sk), 3, 0, 0); return 0; }

SEC("fentry/tcp_cwnd_reduction")
int BPF_PROG(e4, struct sock *sk) { save(TP(sk), 4); return 0; }
SEC("fexit/tcp_cwnd_reduction")
int BPF_PROG(x4, struct sock *sk, int newly_acked_sacked, int newly_lost)
{ check(TP(sk), 4, newly_acked_sacked, newly_lost); return 0; }

SEC("fentry/tcp_undo_cwnd_reduction")
int BPF_PROG(e5, struct sock *sk) { save(TP(sk), 5); return 0; }
SEC("fexit/tcp_undo_cwnd_reduction")
int BPF_PROG(x5, struct sock *sk, bool unmark_loss) { check(TP(sk), 5, unmark_loss, 0); return 0; }

SEC("fentry/tcp_fastretrans_alert")
int BPF_PROG(e6, struct sock *sk) { save(TP(sk), 6); return 0; }
SEC("fexit/tcp_fastretrans_alert")
int BPF_PROG(x6, struct sock *sk, __u32 prior_snd_una, int num_dupack)
{ check(TP(sk), 6, prior_snd_una, num_dupack); return 0; }

SEC("fentry/tcp_try_undo_recovery")
int BPF_PROG(e7, struct sock *sk) { save(TP(sk), 7); return 0; }
SEC("fexit/tcp_try_undo_recovery")
int BPF_PROG(x7, struct sock *sk) { check(TP(sk), 7, 0, 0); return 0; }

SEC("fentry/tcp_try_undo_loss")
int BPF_PROG(e8, struct sock *sk) { save(TP(sk), 8); return 0; }
SEC("fexit/tcp_try_undo_loss")
int BPF_PROG(x8, struct sock *sk) { check(TP(sk), 8, 0, 0); return 0; }

SEC("fentry/tcp_slow_start")
int BPF_PROG(e9, struct tcp_sock *tp) { save(tp, 9); return 0; }
SEC("fexit/tcp_slow_start")
int BPF_PROG(x9, struct tcp_sock *tp, __u32 acked) { check(tp, 9, acked, 0); return 0; }

SEC("fentry/tcp_cong_avoid_ai")
int BPF_PROG(e10, struct tcp_sock *tp) { save(tp, 10); return 0; }
SEC("fexit/tcp_cong_avoid_ai")
int BPF_PROG(x10, struct tcp_sock *tp, __u32 w, __u32 acked) { check(tp, 10, w, acked); return 0; }

SEC("fentry/tcp_in_ack_event")
int BPF_PROG(e11, struct sock *sk) { save(TP(sk), 11); return 0; }
SEC("fexit/tcp_in_ack_event")
int BPF_PROG(x11, struct sock *sk, int flag) { check(TP(sk), 11, flag, 0); return 0; }

SEC("fentry/tcp_process_tlp_ack")
int BPF_PROG(e12, struct sock *sk) { save(TP(sk), 12); return 0; }
SEC("fexit/tcp_process_tlp_ack")
int BPF_PROG(x12, struct sock *sk, __u32 ack, int flag) { check(TP(sk), 12, ack, flag); return 0; }

SEC("fentry/tcp_try_to_open")
int BPF_PROG(e13, struct sock *sk) { save(TP(sk), 13); return 0; }
SEC("fexit/tcp_try_to_open")
int BPF_PROG(x13, struct sock *sk, int flag) { check(TP(sk), 13, flag, 0); return 0; }

SEC("fentry/tcp_rcv_established")
int BPF_PROG(e14, struct sock *sk) { save(TP(sk), 14); return 0; }
SEC("fexit/tcp_rcv_established")
int BPF_PROG(x14, struct sock *sk) { check(TP(sk), 14, 0, 0); return 0; }
