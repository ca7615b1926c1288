// SPDX-License-Identifier: GPL-2.0
/* mltcp_dctcp: DCTCP (see dctcp_core.h) whose additive increase is scaled by MLTCP's F. */
#include "dctcp_core.h"

char _license[] SEC("license") = "GPL";

SEC("struct_ops")
void BPF_PROG(mltcp_dctcp_init, struct sock *sk)
{
	dctcp_init_state(sk);
}

SEC("struct_ops")
void BPF_PROG(mltcp_dctcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	mltcp_reno_grow(sk, acked, mltcp_on_ack(sk, &dctcp_ca(sk)->mltcp));
}

SEC("struct_ops")
void BPF_PROG(mltcp_dctcp_in_ack_event, struct sock *sk, __u32 flags)
{
	dctcp_update_alpha(sk);
}

SEC("struct_ops")
void BPF_PROG(mltcp_dctcp_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	dctcp_event(sk, ev);
}

SEC("struct_ops")
void BPF_PROG(mltcp_dctcp_set_state, struct sock *sk, __u8 new_state)
{
	dctcp_state_change(sk, new_state);
}

SEC("struct_ops")
__u32 BPF_PROG(mltcp_dctcp_ssthresh, struct sock *sk)
{
	return dctcp_ssthresh(sk);
}

SEC("struct_ops")
__u32 BPF_PROG(mltcp_dctcp_undo_cwnd, struct sock *sk)
{
	return dctcp_undo(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops mltcp_dctcp = {
	.init = (void *)mltcp_dctcp_init,
	.cong_avoid = (void *)mltcp_dctcp_cong_avoid,
	.in_ack_event = (void *)mltcp_dctcp_in_ack_event,
	.cwnd_event = (void *)mltcp_dctcp_cwnd_event,
	.set_state = (void *)mltcp_dctcp_set_state,
	.ssthresh = (void *)mltcp_dctcp_ssthresh,
	.undo_cwnd = (void *)mltcp_dctcp_undo_cwnd,
	.flags = TCP_CONG_NEEDS_ECN,
	.name = "mltcp_dctcp",
};
