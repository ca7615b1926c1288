// SPDX-License-Identifier: GPL-2.0
/* DSCP marking for the testbed's `prio` fabric: a cgroup sock_ops program that sets
 * IP_TOS on every TCP socket of the cgroup it is attached to (each job's workers run in
 * their own cgroup), before the SYN on the connecting side and when a connection is
 * accepted on the listening side, so unmodified training jobs (gloo, NCCL's sockets) carry
 * their job's class in the DS field of every packet.  One loaded instance per class: the
 * TOS byte (DSCP << 2) is the only entry of its array map, written from user space.
 */
#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>

#ifndef SOL_IP
#define SOL_IP 0
#endif
#ifndef IP_TOS
#define IP_TOS 1
#endif

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} dscp_tos SEC(".maps");

SEC("sockops")
int dscp_mark(struct bpf_sock_ops *skops)
{
	__u32 zero = 0;
	__u32 *tos;
	int value;

	switch (skops->op) {
	case BPF_SOCK_OPS_TCP_CONNECT_CB:
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		break;
	default:
		return 1;
	}
	tos = bpf_map_lookup_elem(&dscp_tos, &zero);
	if (!tos)
		return 1;
	value = *tos;
	bpf_setsockopt(skops, SOL_IP, IP_TOS, &value, sizeof(value));
	return 1;
}

char LICENSE[] SEC("license") = "GPL";
