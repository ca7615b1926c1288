// SPDX-License-Identifier: GPL-2.0
/* dctcp_bpf and mltcp_dctcp, one source (as the kernel's BPF selftest bpf_dctcp.c):
 * every handler is shared; only cong_avoid (and ssthresh's optional cut scaling) differs.
 * The Makefile builds it twice: without DCTCP_MLTCP it is dctcp_bpf (plain Reno growth),
 * with -DDCTCP_MLTCP it is mltcp_dctcp (additive increase scaled by MLTCP's F; with
 * MLTCP_FLAG_SCALE_CUT in the config, the window cut on congestion divided by F as well).
 * Each object holds one struct_ops.
 *
 * DCTCP written from the published algorithm (Alizadeh et al., SIGCOMM 2010), for kernels
 * without the dctcp module.  Sender: once per window of data, alpha <- (1 - g) alpha + g F,
 * F the fraction of delivered packets whose ACK echoed CE (g = 1/16, alpha in 1/1024); on
 * congestion the window becomes cwnd * (1 - alpha / 2) (ssthresh, entered through CWR or
 * recovery); a timeout halves it as Reno does.  Receiver: ECE echoes the CE state of the
 * data (set on CE, cleared on the next non-CE packet) rather than the classic sticky ECE,
 * and a change of CE state is ACKed at once: a delayed ACK still owed for the data before
 * the change goes out first with the old state, so the sender counts marked bytes exactly
 * and never waits out the delayed-ACK timer (40 ms here) for the news.
 * TCP_CONG_NEEDS_ECN: a socket using it asks for ECN in its SYN (and a listener accepts
 * it) whatever net.ipv4.tcp_ecn says, and sends its data ECT.
 */
#include "mltcp_common.h"

#ifdef DCTCP_MLTCP
#define CC_NAME mltcp_dctcp
#else
#define CC_NAME dctcp_bpf
#endif
#define CC_CAT_(a, b) a##b
#define CC_CAT(a, b) CC_CAT_(a, b)
#define CC_STR_(a) #a
#define CC_STR(a) CC_STR_(a)
#define CC_FN(suffix) CC_CAT(CC_NAME, suffix)
/* one more expansion, so BPF_PROG pastes the expanded name */
#define CC_PROG(name, args...) BPF_PROG(name, ##args)

char _license[] SEC("license") = "GPL";

#define DCTCP_SHIFT_G 4
#define DCTCP_MAX_ALPHA 1024U
#define TCP_ECN_DEMAND_CWR 4
#define TCP_CONG_NEEDS_ECN 0x2

struct dctcp_state {
	__u32 old_delivered;
	__u32 old_delivered_ce;
	__u32 next_seq;
	__u32 alpha;
	__u32 loss_cwnd;
	__u32 ce_state;
	__u32 prior_rcv_nxt;	/* rcv_nxt when the CE state last changed or was seen */
	struct mltcp_state mltcp;
};

static __always_inline struct dctcp_state *dctcp_ca(const struct sock *sk)
{
	return inet_csk_ca(sk);
}

static __always_inline void dctcp_reset(const struct tcp_sock *tp, struct dctcp_state *ca)
{
	ca->next_seq = tp->snd_nxt;
	ca->old_delivered = tp->delivered;
	ca->old_delivered_ce = tp->delivered_ce;
}

static __always_inline void dctcp_init_state(struct sock *sk)
{
	struct dctcp_state *ca = dctcp_ca(sk);

	ca->alpha = DCTCP_MAX_ALPHA;	/* start cautious, as the kernel's default */
	ca->loss_cwnd = 0;
	ca->ce_state = 0;
	ca->prior_rcv_nxt = tcp_sk(sk)->rcv_nxt;
	dctcp_reset(tcp_sk(sk), ca);
	mltcp_init(sk, &ca->mltcp);
}

/* once per window: alpha <- alpha - alpha/16 + (CE fraction)/16 */
static __always_inline void dctcp_update_alpha(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct dctcp_state *ca = dctcp_ca(sk);
	__u32 delivered, delivered_ce, alpha, decay;

	mltcp_guard(sk);
	if ((__s32)(tp->snd_una - ca->next_seq) < 0)
		return;
	delivered = tp->delivered - ca->old_delivered;
	delivered_ce = tp->delivered_ce - ca->old_delivered_ce;
	alpha = ca->alpha;
	decay = alpha >> DCTCP_SHIFT_G;
	alpha -= decay ? decay : alpha;	/* let a tiny alpha reach 0 */
	if (delivered_ce) {
		delivered_ce = (delivered_ce << (10 - DCTCP_SHIFT_G)) / (delivered ? delivered : 1);
		alpha += delivered_ce;
		if (alpha > DCTCP_MAX_ALPHA)
			alpha = DCTCP_MAX_ALPHA;
	}
	ca->alpha = alpha;
	dctcp_reset(tp, ca);
}

static __always_inline __u32 dctcp_ssthresh(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct dctcp_state *ca = dctcp_ca(sk);
	__u32 cwnd = tp->snd_cwnd, cut = (cwnd * ca->alpha) >> 11;
#ifdef DCTCP_MLTCP
	struct mltcp_config *cfg = mltcp_cfg();

	if (cfg && (cfg->flags & MLTCP_FLAG_SCALE_CUT))
		cut = mltcp_scale_cut(cut, ca->mltcp.factor_q, cwnd);
#endif

	ca->loss_cwnd = cwnd;
	return cwnd - cut > 2 ? cwnd - cut : 2;
}

static __always_inline void dctcp_state_change(struct sock *sk, __u8 new_state)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct dctcp_state *ca = dctcp_ca(sk);

	if (new_state == TCP_CA_Loss) {	/* timeout: react as Reno */
		ca->loss_cwnd = tp->snd_cwnd;
		tp->snd_ssthresh = tp->snd_cwnd >> 1 > 2 ? tp->snd_cwnd >> 1 : 2;
	}
}

static __always_inline void dctcp_echo(struct tcp_sock *tp, __u32 ce)
{
	if (ce)
		tp->ecn_flags |= TCP_ECN_DEMAND_CWR;
	else
		tp->ecn_flags &= ~TCP_ECN_DEMAND_CWR;
}

/* Receiver: a data packet arrived with (CE) or without (NO_CE) a congestion mark. */
static __always_inline void dctcp_ce_seen(struct sock *sk, __u32 ce)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct dctcp_state *ca = dctcp_ca(sk);

	if (ce != ca->ce_state) {
		if (inet_csk(sk)->icsk_ack.pending & ICSK_ACK_TIMER) {
			dctcp_echo(tp, ca->ce_state);	/* the owed ACK, with the old state */
			bpf_tcp_send_ack(tp, ca->prior_rcv_nxt);
		}
		inet_csk(sk)->icsk_ack.pending |= ICSK_ACK_NOW;
	}
	ca->prior_rcv_nxt = tp->rcv_nxt;
	ca->ce_state = ce;
	dctcp_echo(tp, ce);
}

static __always_inline void dctcp_event(struct sock *sk, enum tcp_ca_event ev)
{
	if (ev == CA_EVENT_ECN_IS_CE)
		dctcp_ce_seen(sk, 1);
	else if (ev == CA_EVENT_ECN_NO_CE)
		dctcp_ce_seen(sk, 0);
	else if (ev == CA_EVENT_TX_START)
		mltcp_tx_start(sk, &dctcp_ca(sk)->mltcp);
}

static __always_inline __u32 dctcp_undo(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 loss = dctcp_ca(sk)->loss_cwnd;

	return tp->snd_cwnd > loss ? tp->snd_cwnd : loss;
}

SEC("struct_ops")
void CC_PROG(CC_FN(_init), struct sock *sk)
{
	dctcp_init_state(sk);
}

SEC("struct_ops")
void CC_PROG(CC_FN(_release), struct sock *sk)
{
	mltcp_release(sk, &dctcp_ca(sk)->mltcp);
}

/* the one handler that differs */
SEC("struct_ops")
void CC_PROG(CC_FN(_cong_avoid), struct sock *sk, __u32 ack, __u32 acked)
{
#ifdef DCTCP_MLTCP
	mltcp_reno_grow(sk, acked, mltcp_on_ack(sk, &dctcp_ca(sk)->mltcp));
#else
	mltcp_reno_grow(sk, acked, MLTCP_ONE);	/* F = 1: plain Reno growth */
#endif
}

SEC("struct_ops")
void CC_PROG(CC_FN(_in_ack_event), struct sock *sk, __u32 flags)
{
	dctcp_update_alpha(sk);
}

SEC("struct_ops")
void CC_PROG(CC_FN(_pkts_acked), struct sock *sk, const struct ack_sample *sample)
{
	mltcp_data_acked(sk, &dctcp_ca(sk)->mltcp, sample);
}

SEC("struct_ops")
void CC_PROG(CC_FN(_cwnd_event), struct sock *sk, enum tcp_ca_event ev)
{
	dctcp_event(sk, ev);
}

SEC("struct_ops")
void CC_PROG(CC_FN(_set_state), struct sock *sk, __u8 new_state)
{
	dctcp_state_change(sk, new_state);
}

SEC("struct_ops")
__u32 CC_PROG(CC_FN(_ssthresh), struct sock *sk)
{
	return dctcp_ssthresh(sk);
}

SEC("struct_ops")
__u32 CC_PROG(CC_FN(_undo_cwnd), struct sock *sk)
{
	return dctcp_undo(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops CC_NAME = {
	.init = (void *)CC_FN(_init),
	.release = (void *)CC_FN(_release),
	.cong_avoid = (void *)CC_FN(_cong_avoid),
	.in_ack_event = (void *)CC_FN(_in_ack_event),
	.cwnd_event = (void *)CC_FN(_cwnd_event),
	.pkts_acked = (void *)CC_FN(_pkts_acked),
	.set_state = (void *)CC_FN(_set_state),
	.ssthresh = (void *)CC_FN(_ssthresh),
	.undo_cwnd = (void *)CC_FN(_undo_cwnd),
	.flags = TCP_CONG_NEEDS_ECN,
	.name = CC_STR(CC_NAME),
};
