/* SPDX-License-Identifier: GPL-2.0 */
/* MLTCP window-scaling rule in fixed point, one copy for every program: the BPF congestion
 * controls include it, and a user-space test compiles it with gcc and holds it to
 * mltcp/policy.py bit for bit.  Plain C: no BPF or kernel headers.
 *
 *   ratio = bytes acked this iteration / bytes of the last iteration, clamped to [0, 1]
 *   F     = slope * ratio + intercept                      (intercept > 0)
 *
 * Q10 fixed point (1024 = 1.0).  Every division truncates toward zero.
 */
#ifndef MLTCP_RULE_H
#define MLTCP_RULE_H

#define MLTCP_SHIFT 10
#define MLTCP_ONE (1U << MLTCP_SHIFT)
#define MLTCP_U32_MAX 0xffffffffULL
#define MLTCP_U64_MAX 0xffffffffffffffffULL

/* ratio in Q10: floor(sent * 1024 / per_iter), 0 with no estimate, 1024 once past it.
 * sent << 10 overflows 64 bits from sent >= 2^54 (16 PiB in one iteration): there the
 * quotient's 10 bits come from a long division, one bit a step, the remainder kept below
 * per_iter (so no step overflows either). */
static inline unsigned int mltcp_ratio_q(unsigned long long sent, unsigned long long per_iter)
{
	unsigned int q = 0;
	int i;

	if (per_iter == 0)
		return 0;
	if (sent >= per_iter)
		return MLTCP_ONE;
	if (sent <= MLTCP_U64_MAX >> MLTCP_SHIFT)
		return (unsigned int)((sent << MLTCP_SHIFT) / per_iter);
	for (i = 0; i < MLTCP_SHIFT; i++) {	/* sent < per_iter throughout */
		q <<= 1;
		if (sent >= per_iter - sent) {
			sent -= per_iter - sent;
			q |= 1;
		} else {
			sent += sent;
		}
	}
	return q;
}

/* Idle mode: does a transmission after `elapsed_us` of silence end the flow's iteration?
 * Only a silence of at least `idle_us` can, and only once the bytes acked since the
 * iteration began (`since`) reach three quarters of the last
 * iteration's (`per_iter`; any amount while there is no estimate yet).  A DDP step sends
 * its gradient buckets with gaps longer than idle_us between some of them (measured
 * 15-21 ms inside a ResNet-50 step, 6-14 ms inside VGG-11's, against 24 and 34 ms between
 * steps: docs/mltcp_defaults.md); without the byte test each such gap started an
 * "iteration" of one bucket.  With it, pieces of a step merge until they make most of the
 * last iteration. */
static inline int mltcp_ends_iteration(unsigned long long elapsed_us, unsigned int idle_us,
				       unsigned long long since, unsigned long long per_iter)
{
	if (elapsed_us < idle_us)
		return 0;
	if (per_iter == 0)
		return 1;
	return since >= per_iter - (per_iter >> 2);	/* ceil(3/4 per_iter) */
}

/* F in Q10: intercept + floor(slope * ratio / 1024) */
static inline unsigned int mltcp_factor_q(unsigned int ratio_q, unsigned int slope_q,
					  unsigned int intercept_q)
{
	return intercept_q + (unsigned int)(((unsigned long long)slope_q * ratio_q) >> MLTCP_SHIFT);
}

/* Reno: additive increase of about F segments per RTT, i.e. tcp_cong_avoid_ai() with
 * w = cwnd / F (at least 1). */
static inline unsigned int mltcp_ai_window(unsigned int cwnd, unsigned int factor_q)
{
	unsigned long long w;

	if (factor_q == 0)
		return cwnd ? cwnd : 1;
	w = ((unsigned long long)cwnd << MLTCP_SHIFT) / factor_q;
	if (w > MLTCP_U32_MAX)
		w = MLTCP_U32_MAX;
	return w ? (unsigned int)w : 1;
}

/* DCTCP with the cut scaled (MLTCP_FLAG_SCALE_CUT, an extension of the paper's rule,
 * which scales only the increase): the segments a congestion signal takes off the window,
 * cut = cwnd * alpha / 2, divided by F, so a flow further through its iteration backs off
 * less; never more than the whole window. */
static inline unsigned int mltcp_scale_cut(unsigned int cut, unsigned int factor_q,
					   unsigned int cwnd)
{
	unsigned long long c;

	if (factor_q == 0)
		return cut < cwnd ? cut : cwnd;
	c = ((unsigned long long)cut << MLTCP_SHIFT) / factor_q;
	return c < cwnd ? (unsigned int)c : cwnd;
}

/* CUBIC: the kernel's CUBIC grows cwnd by one segment per `cnt` ACKed segments; MLTCP
 * divides that counter by F.  We reach the same growth by feeding CUBIC F times the
 * ACKed segments: `acked * F` in Q10, the fraction below one segment carried in *rem_q
 * to the next ACK so that nothing is lost to rounding. */
static inline unsigned int mltcp_scale_acked(unsigned int acked, unsigned int factor_q,
					     unsigned int *rem_q)
{
	unsigned long long total = (unsigned long long)acked * factor_q + (*rem_q & (MLTCP_ONE - 1));
	unsigned long long whole = total >> MLTCP_SHIFT;

	*rem_q = (unsigned int)(total & (MLTCP_ONE - 1));
	return whole > MLTCP_U32_MAX ? (unsigned int)MLTCP_U32_MAX : (unsigned int)whole;
}

#endif /* MLTCP_RULE_H */
