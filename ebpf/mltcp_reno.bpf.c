// SPDX-License-Identifier: GPL-2.0
/* mltcp_reno: Reno whose additive increase is scaled by MLTCP's F, about F segments per
 * RTT (tcp_cong_avoid_ai with w = cwnd / F).  Slow start, the loss response (halve) and
 * undo are Reno's, through the kernel's own functions.
 */
#include "mltcp_common.h"

extern __u32 tcp_reno_ssthresh(struct sock *sk) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

char _license[] SEC("license") = "GPL";

SEC("struct_ops")
void BPF_PROG(mltcp_reno_init, struct sock *sk)
{
	mltcp_init(sk, inet_csk_ca(sk));
}

SEC("struct_ops")
void BPF_PROG(mltcp_reno_release, struct sock *sk)
{
	mltcp_release(sk, inet_csk_ca(sk));
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

SEC("struct_ops")
void BPF_PROG(mltcp_reno_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	mltcp_data_acked(sk, inet_csk_ca(sk), sample);
}

SEC("struct_ops")
__u32 BPF_PROG(mltcp_reno_ssthresh, struct sock *sk)
{
	return tcp_reno_ssthresh(sk);
}

SEC("struct_ops")
__u32 BPF_PROG(mltcp_reno_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops mltcp_reno = {
	.init = (void *)mltcp_reno_init,
	.release = (void *)mltcp_reno_release,
	.cong_avoid = (void *)mltcp_reno_cong_avoid,
	.cwnd_event = (void *)mltcp_reno_cwnd_event,
	.in_ack_event = (void *)mltcp_reno_in_ack_event,
	.pkts_acked = (void *)mltcp_reno_pkts_acked,
	.ssthresh = (void *)mltcp_reno_ssthresh,
	.undo_cwnd = (void *)mltcp_reno_undo_cwnd,
	.name = "mltcp_reno",
};
