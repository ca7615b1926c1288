// SPDX-License-Identifier: GPL-2.0
/* mltcp_reno: Reno whose additive increase is scaled by MLTCP's F, about F segments per
 * RTT (tcp_cong_avoid_ai with w = cwnd / F).  Slow start is the kernel's; the loss
 * response (halve) and undo are Reno's, written out here.
 */
#include "mltcp_common.h"

char _license[] SEC("license") = "GPL";

SEC("struct_ops")
void BPF_PROG(mltcp_reno_init, struct sock *sk)
{
	mltcp_init(sk, inet_csk_ca(sk));
}

SEC("struct_ops")
void BPF_PROG(mltcp_reno_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	mltcp_reno_grow(sk, acked, mltcp_on_ack(sk, inet_csk_ca(sk)));
}

SEC("struct_ops")
void BPF_PROG(mltcp_reno_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	if (ev == CA_EVENT_TX_START)
		mltcp_tx_start(sk, inet_csk_ca(sk));
}

SEC("struct_ops")
void BPF_PROG(mltcp_reno_in_ack_event, struct sock *sk, __u32 flags)
{
	mltcp_guard(sk);
}

/* Reno's ssthresh and undo, computed here rather than returned from the kernel's
 * tcp_reno_ssthresh/tcp_reno_undo_cwnd kfuncs: with the kfunc, the value that reached
 * tcp_init_cwnd_reduction on CWR entry was sometimes 0x81104110, the low half of a kernel
 * text address (README, Known problems), and PRR then made snd_cwnd ~10^9. */
SEC("struct_ops")
__u32 BPF_PROG(mltcp_reno_ssthresh, struct sock *sk)
{
	__u32 half = tcp_sk(sk)->snd_cwnd >> 1;

	return half > 2 ? half : 2;
}

SEC("struct_ops")
__u32 BPF_PROG(mltcp_reno_undo_cwnd, struct sock *sk)
{
	const struct tcp_sock *tp = tcp_sk(sk);

	return tp->snd_cwnd > tp->prior_cwnd ? tp->snd_cwnd : tp->prior_cwnd;
}

SEC(".struct_ops")
struct tcp_congestion_ops mltcp_reno = {
	.init = (void *)mltcp_reno_init,
	.cong_avoid = (void *)mltcp_reno_cong_avoid,
	.cwnd_event = (void *)mltcp_reno_cwnd_event,
	.in_ack_event = (void *)mltcp_reno_in_ack_event,
	.ssthresh = (void *)mltcp_reno_ssthresh,
	.undo_cwnd = (void *)mltcp_reno_undo_cwnd,
	.name = "mltcp_reno",
};
