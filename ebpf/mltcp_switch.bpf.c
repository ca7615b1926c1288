// SPDX-License-Identifier: GPL-2.0
/* mltcp_switch: a TCP socket iterator that moves every socket still using one of our
 * congestion controls to its base algorithm (mltcp_cubic -> cubic, every other one ->
 * reno: each variant's `base` in mltcp/variants.py, from which make generates
 * mltcp_variants.h), so `mltcp unload --force` can unregister them while flows keep running.
 *
 * `bpftool iter pin` pins it; reading the pinned file from inside a network namespace
 * walks that namespace's TCP sockets (the kernel's TCP iterator holds each socket's lock,
 * so bpf_setsockopt is allowed: the pattern of the kernel selftest bpf_iter_setsockopt.c).
 * It prints one line per socket switched.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>
#include "mltcp_variants.h"

#define SOL_TCP 6
#define TCP_CONGESTION 13
#define TCP_CA_NAME_MAX 16

char _license[] SEC("license") = "GPL";

static __always_inline int prefix(const char *s, const char *p, int n)
{
	for (int i = 0; i < n; i++)
		if (s[i] != p[i])
			return 0;
	return 1;
}

/* `cur` is congestion control `cc` (its whole name, NUL included): `to` becomes `base` */
#define SWITCH_TO(cc, base)						\
	if (!found && prefix(cur, cc, sizeof(cc))) {			\
		_Static_assert(sizeof(base) <= TCP_CA_NAME_MAX, base);	\
		__builtin_memcpy(to, base, sizeof(base));		\
		found = 1;						\
	}

SEC("iter/tcp")
int mltcp_switch(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	char cur[TCP_CA_NAME_MAX] = {};
	char to[TCP_CA_NAME_MAX] = {};
	struct tcp_sock *tp;
	int found = 0;

	if (!skc)
		return 0;
	tp = bpf_skc_to_tcp_sock(skc);
	if (!tp)
		return 0;	/* request and time-wait sockets have no congestion control */
	if (bpf_getsockopt(tp, SOL_TCP, TCP_CONGESTION, cur, sizeof(cur)))
		return 0;
	MLTCP_VARIANTS(SWITCH_TO)
	if (!found)
		return 0;
	if (bpf_setsockopt(tp, SOL_TCP, TCP_CONGESTION, to, TCP_CA_NAME_MAX) == 0)
		BPF_SEQ_PRINTF(ctx->meta->seq, "%u %u %s\n", skc->skc_num,
			       bpf_ntohs(skc->skc_dport), to);
	return 0;
}
