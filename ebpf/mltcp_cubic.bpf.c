// SPDX-License-Identifier: GPL-2.0
/* mltcp_cubic: the kernel's own CUBIC (called as kfuncs) whose congestion-avoidance growth
 * is scaled by MLTCP's F.  CUBIC grows cwnd by one segment per `cnt` ACKed segments; we
 * feed it F times the ACKed segments (mltcp_scale_acked, remainder carried), which is the
 * same as dividing `cnt` by F, and also speeds its TCP-friendly (Reno) estimate by F.
 * Slow start, HyStart, the loss response (beta) and undo stay CUBIC's.
 *
 * icsk_ca_priv (104 bytes) holds CUBIC's struct bictcp (60 bytes) at offset 0, where the
 * kernel functions expect it, then our remainder and the MLTCP state.
 */
#include "mltcp_common.h"

extern void cubictcp_init(struct sock *sk) __ksym;
extern void cubictcp_cwnd_event(struct sock *sk, enum tcp_ca_event event) __ksym;
extern void cubictcp_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern __u32 cubictcp_recalc_ssthresh(struct sock *sk) __ksym;
extern void cubictcp_state(struct sock *sk, __u8 new_state) __ksym;
extern void cubictcp_acked(struct sock *sk, const struct ack_sample *sample) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

char _license[] SEC("license") = "GPL";

struct mltcp_cubic_ca {
	__u8 cubic[60];		/* struct bictcp, owned by the kernel's CUBIC */
	__u32 acked_rem_q;	/* ACKed segments * F below one segment, Q10 */
	struct mltcp_state mltcp;
};

_Static_assert(sizeof(struct mltcp_cubic_ca) <= 13 * sizeof(__u64), "fits icsk_ca_priv");

static __always_inline struct mltcp_cubic_ca *cubic_ca(const struct sock *sk)
{
	return (struct mltcp_cubic_ca *)inet_csk_ca(sk);
}

SEC("struct_ops")
void BPF_PROG(mltcp_cubic_init, struct sock *sk)
{
	cubictcp_init(sk);
	cubic_ca(sk)->acked_rem_q = 0;
	mltcp_init(sk, &cubic_ca(sk)->mltcp);
}

SEC("struct_ops")
void BPF_PROG(mltcp_cubic_release, struct sock *sk)
{
	mltcp_release(sk, &cubic_ca(sk)->mltcp);	/* the kernel's CUBIC has no release */
}

SEC("struct_ops")
void BPF_PROG(mltcp_cubic_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct mltcp_cubic_ca *ca = cubic_ca(sk);
	__u32 f = mltcp_on_ack(sk, &ca->mltcp);

	/* slow start is not scaled */
	if (!tcp_in_slow_start(tcp_sk(sk)))
		acked = mltcp_scale_acked(acked, f, &ca->acked_rem_q);
	cubictcp_cong_avoid(sk, ack, acked);
}

SEC("struct_ops")
void BPF_PROG(mltcp_cubic_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	if (ev == CA_EVENT_TX_START)
		mltcp_tx_start(sk, &cubic_ca(sk)->mltcp);
	cubictcp_cwnd_event(sk, ev);
}

SEC("struct_ops")
void BPF_PROG(mltcp_cubic_in_ack_event, struct sock *sk, __u32 flags)
{
	mltcp_guard(sk);
}

SEC("struct_ops")
__u32 BPF_PROG(mltcp_cubic_ssthresh, struct sock *sk)
{
	return cubictcp_recalc_ssthresh(sk);
}

SEC("struct_ops")
void BPF_PROG(mltcp_cubic_set_state, struct sock *sk, __u8 new_state)
{
	cubictcp_state(sk, new_state);
}

SEC("struct_ops")
void BPF_PROG(mltcp_cubic_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	mltcp_data_acked(sk, &cubic_ca(sk)->mltcp, sample);
	cubictcp_acked(sk, sample);
}

SEC("struct_ops")
__u32 BPF_PROG(mltcp_cubic_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops mltcp_cubic = {
	.init = (void *)mltcp_cubic_init,
	.release = (void *)mltcp_cubic_release,
	.cong_avoid = (void *)mltcp_cubic_cong_avoid,
	.cwnd_event = (void *)mltcp_cubic_cwnd_event,
	.in_ack_event = (void *)mltcp_cubic_in_ack_event,
	.ssthresh = (void *)mltcp_cubic_ssthresh,
	.set_state = (void *)mltcp_cubic_set_state,
	.pkts_acked = (void *)mltcp_cubic_pkts_acked,
	.undo_cwnd = (void *)mltcp_cubic_undo_cwnd,
	.name = "mltcp_cubic",
};
