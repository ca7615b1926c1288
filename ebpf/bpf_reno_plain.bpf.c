// SPDX-License-Identifier: GPL-2.0
/* bpf_reno_plain: the kernel's own Reno as a BPF struct_ops, nothing else (no MLTCP, no
 * guard, no writes): every operation is a call of the kernel's Reno function.  Only for
 * the window-fault investigation (tests/mltcp_window_fault.py): a fault seen with it and
 * not with the built-in `reno` is the BPF congestion-control path's, not MLTCP's.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern __u32 tcp_reno_ssthresh(struct sock *sk) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

char _license[] SEC("license") = "GPL";

SEC("struct_ops")
void BPF_PROG(bpf_reno_plain_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	tcp_reno_cong_avoid(sk, ack, acked);
}

SEC("struct_ops")
__u32 BPF_PROG(bpf_reno_plain_ssthresh, struct sock *sk)
{
	return tcp_reno_ssthresh(sk);
}

SEC("struct_ops")
__u32 BPF_PROG(bpf_reno_plain_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops bpf_reno_plain = {
	.cong_avoid = (void *)bpf_reno_plain_cong_avoid,
	.ssthresh = (void *)bpf_reno_plain_ssthresh,
	.undo_cwnd = (void *)bpf_reno_plain_undo_cwnd,
	.name = "bpf_reno_plain",
};
