// SPDX-License-Identifier: GPL-2.0
/* DCTCP-style ECN marking for the testbed's `ecn` fabric (the kernel has no RED or
 * fq_codel).  Attached as a tc egress classifier on a shaped link; per interface it keeps a
 * virtual queue that grows by every packet's length and drains at the link rate:
 *
 *     vq = max(0, vq - rate_bytes_per_ns * (now - last)) + len
 *
 * and sets CE on ECN-capable IPv4 packets while vq exceeds the threshold K (bytes).  With
 * the HTB shaper behind it at the same rate, vq tracks the real queue.
 * Configuration (rate in bit/s, K in bytes) is a map keyed by ifindex, written from user
 * space; state and mark counters live in a second map.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <stddef.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct ecn_config {
	__u64 rate_bps;
	__u64 threshold_bytes;
};

struct ecn_state {
	struct bpf_spin_lock lock;
	__u64 vq_bytes;
	__u64 last_ns;
	__u64 marks;
	__u64 packets;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct ecn_config);
} ecn_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct ecn_state);
} ecn_state SEC(".maps");

#define NSEC_PER_SEC 1000000000ULL

SEC("tc")
int ecn_mark(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	struct ecn_config *cfg = bpf_map_lookup_elem(&ecn_config, &ifindex);
	struct ecn_state *st, zero = {};
	__u64 now, elapsed, drained, rate_Bps;
	int over;

	if (!cfg)
		return TC_ACT_OK;
	st = bpf_map_lookup_elem(&ecn_state, &ifindex);
	if (!st) {
		bpf_map_update_elem(&ecn_state, &ifindex, &zero, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&ecn_state, &ifindex);
		if (!st)
			return TC_ACT_OK;
	}
	rate_Bps = cfg->rate_bps / 8;
	now = bpf_ktime_get_ns();

	bpf_spin_lock(&st->lock);
	elapsed = now - st->last_ns;
	/* more than a second idle empties any queue; also avoids overflow below */
	drained = elapsed >= NSEC_PER_SEC ? st->vq_bytes : elapsed * rate_Bps / NSEC_PER_SEC;
	st->vq_bytes = st->vq_bytes > drained ? st->vq_bytes - drained : 0;
	st->vq_bytes += skb->len;
	st->last_ns = now;
	st->packets++;
	over = st->vq_bytes > cfg->threshold_bytes;
	bpf_spin_unlock(&st->lock);
	if (!over)
		return TC_ACT_OK;

	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);

	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	__u8 ecn = ip->tos & 0x3;
	if (ecn == 0 || ecn == 0x3) /* not ECN-capable, or already CE */
		return TC_ACT_OK;

	/* the first 16-bit word of the IP header holds version/IHL and TOS */
	__u16 old_word = *(__u16 *)ip;
	__u8 new_tos = ip->tos | 0x3;
	__u16 new_word = old_word;
	((__u8 *)&new_word)[1] = new_tos;
	bpf_l3_csum_replace(skb, ETH_HLEN + offsetof(struct iphdr, check), old_word, new_word, 2);
	bpf_skb_store_bytes(skb, ETH_HLEN + offsetof(struct iphdr, tos), &new_tos, 1, 0);
	__sync_fetch_and_add(&st->marks, 1);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
