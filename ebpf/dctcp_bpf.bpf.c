// SPDX-License-Identifier: GPL-2.0
/* dctcp_bpf: DCTCP as BPF (see dctcp_core.h); Reno growth. */
#include "dctcp_core.h"

char _license[] SEC("license") = "GPL";

SEC("struct_ops")
void BPF_PROG(dctcp_bpf_init, struct sock *sk)
{
	dctcp_init_state(sk);
}

SEC("struct_ops")
void BPF_PROG(dctcp_bpf_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	mltcp_reno_grow(sk, acked, MLTCP_ONE);	/* F = 1: plain Reno growth */
}

SEC("struct_ops")
void BPF_PROG(dctcp_bpf_in_ack_event, struct sock *sk, __u32 flags)
{
	dctcp_update_alpha(sk);
}

SEC("struct_ops")
void BPF_PROG(dctcp_bpf_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	dctcp_event(sk, ev);
}

SEC("struct_ops")
void BPF_PROG(dctcp_bpf_set_state, struct sock *sk, __u8 new_state)
{
	dctcp_state_change(sk, new_state);
}

SEC("struct_ops")
__u32 BPF_PROG(dctcp_bpf_ssthresh, struct sock *sk)
{
	return dctcp_ssthresh(sk);
}

SEC("struct_ops")
__u32 BPF_PROG(dctcp_bpf_undo_cwnd, struct sock *sk)
{
	return dctcp_undo(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops dctcp_bpf = {
	.init = (void *)dctcp_bpf_init,
	.cong_avoid = (void *)dctcp_bpf_cong_avoid,
	.in_ack_event = (void *)dctcp_bpf_in_ack_event,
	.cwnd_event = (void *)dctcp_bpf_cwnd_event,
	.set_state = (void *)dctcp_bpf_set_state,
	.ssthresh = (void *)dctcp_bpf_ssthresh,
	.undo_cwnd = (void *)dctcp_bpf_undo_cwnd,
	.flags = TCP_CONG_NEEDS_ECN,
	.name = "dctcp_bpf",
};
