// SPDX-License-Identifier: GPL-2.0
/* mltcp_select: a cgroup sock_ops program that gives the TCP sockets of one cgroup (and
 * only those) a congestion control, and ties them to a training job for exact mode.
 *
 * `mltcp select CC --cgroup PATH [--job J]` attaches it to the cgroup and writes the
 * cgroup's entry of mltcp_cgroup_cfg (cgroup local storage: one value per attached
 * cgroup).  Active opens are set before the SYN leaves (TCP_CONNECT_CB), passive ones when
 * established; a listening socket is set at listen() so its children inherit it.  With a
 * job, the socket's local port (for a listener and its children, the listening port) goes
 * into mltcp_ports, where the congestion controls look their job up.
 *
 * ECN: when the cgroup's entry has MLTCP_CGROUP_ECN (the loader sets it for congestion
 * controls that need ECN), BPF_SOCK_OPS_NEEDS_ECN is answered yes, so the SYN asks for
 * ECN and a listener in the cgroup accepts it, whatever net.ipv4.tcp_ecn says.  The
 * kernel asks before sending a SYN and when a SYN arrives for a listener in the cgroup.
 * The congestion control is set at TCP_CONNECT_CB, before the SYN is built, so its own
 * TCP_CONG_NEEDS_ECN counts too.
 */
#include "mltcp_common.h"

#define SOL_TCP 6
#define TCP_CONGESTION 13

char _license[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_CGROUP_STORAGE);
	__type(key, __u64);	/* cgroup id (struct bpf_cgroup_storage_key's first field) */
	__type(value, struct mltcp_cgroup_cfg);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} mltcp_cgroup_cfg SEC(".maps");

SEC("sockops")
int mltcp_select(struct bpf_sock_ops *skops)
{
	struct mltcp_cgroup_cfg *cfg;
	char cc[MLTCP_CC_NAME_LEN];
	mltcp_port_t port;

	if (skops->op == BPF_SOCK_OPS_NEEDS_ECN) {
		cfg = bpf_get_local_storage(&mltcp_cgroup_cfg, 0);
		skops->reply = cfg && (cfg->flags & MLTCP_CGROUP_ECN) ? 1 : 0;
		return 1;
	}
	switch (skops->op) {
	case BPF_SOCK_OPS_TCP_CONNECT_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_TCP_LISTEN_CB:
		break;
	default:
		return 1;
	}
	cfg = bpf_get_local_storage(&mltcp_cgroup_cfg, 0);
	if (!cfg)
		return 1;
	port = (__u16)skops->local_port;
	if (cfg->job)
		bpf_map_update_elem(&mltcp_ports, &port, &cfg->job, BPF_ANY);
	__builtin_memcpy(cc, cfg->cc, sizeof(cc));
	cc[sizeof(cc) - 1] = 0;
	if (cc[0])
		bpf_setsockopt(skops, SOL_TCP, TCP_CONGESTION, cc, sizeof(cc));
	return 1;
}
