/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cubic_core.h - Cubic congestion avoidance and HyStart's delay test, free of
 * kernel calls (used by tcp_search.c, tested by test/).
 *
 * Cubic (RFC 9438) grows the window as a cubic function of the time since
 * the last reduction:
 *
 *	W(t) = C * (t - K)^3 + W_max,	K = cbrt((W_max - cwnd_epoch) / C)
 *
 * with C = 0.4 segments/s^3 and W_max the window before the last loss.  The
 * curve is concave up to W_max (fast recovery of the old window), flat
 * around it and convex beyond (probing for more).  On loss the window is
 * multiplied by beta = 0.7; with fast convergence, a flow whose W_max is
 * shrinking remembers only (1 + beta) / 2 of it, to leave room to newcomers.
 * In the "TCP-friendly region" the window grows at least as fast as a Reno
 * flow with the same loss rate would, i.e. by 3 (1 - beta) / (1 + beta)
 * segments per RTT.  As upstream tcp_cubic.c does, that Reno estimate
 * counts ACKed segments rather than time: it starts at the epoch's cwnd and
 * gains one segment every CUBIC_RENO_ACKS_NUM / CUBIC_RENO_ACKS_DEN * cwnd
 * ACKed segments (17/9 cwnd for beta = 0.7), so it follows the real RTT,
 * queueing included, and does not grow while nothing is ACKed.
 *
 * Per ACK we return "cnt": the window grows by one segment every cnt ACKed
 * segments (tcp_cong_avoid_ai() does the counting), aiming to reach the
 * curve's value one minimum RTT ahead.
 *
 * Differences from upstream tcp_cubic.c, all deliberate:
 *  - beta is 7/10 and C is 4/10 exactly (upstream: 717/1024 and a scaled
 *    410/1024); the Reno estimate's step follows from beta: 17/9 cwnd ACKs
 *    per segment (upstream's integer rounding of its beta gives 15/8);
 *  - cnt is recomputed on every ACK (upstream at most once per jiffy unless
 *    cwnd changed);
 *  - K is an exact integer cube root in milliseconds (upstream: a table and
 *    one Newton step in 1/1024 s units);
 *  - an ACK without an RTT sample is not a sample (upstream: the same), and
 *    RTT samples within 1 s of the end of a recovery are kept (upstream
 *    drops them for delay_min);
 *  - HyStart: the delay test only (no ACK train), judged once per round on
 *    the smallest of the first HYSTART_SAMPLES samples (upstream: on every
 *    sample from the HYSTART_SAMPLES-th on, with the running minimum).
 *
 * Time is in milliseconds from a wrapping u32 clock.  All products are
 * bounded in 64 bits; the bounds are noted where they are needed.
 */
#ifndef CUBIC_CORE_H
#define CUBIC_CORE_H

#include "cc_compat.h"

/* beta = 0.7: multiplicative decrease on loss */
#define CUBIC_BETA_NUM		7
#define CUBIC_BETA_DEN		10
/* fast convergence keeps (1 + beta) / 2 = 0.85 of a shrinking W_max */
#define CUBIC_FC_NUM		(CUBIC_BETA_DEN + CUBIC_BETA_NUM)
#define CUBIC_FC_DEN		(2 * CUBIC_BETA_DEN)
/* C = 0.4 segments / s^3 */
#define CUBIC_C_NUM		4
#define CUBIC_C_DEN		10
/* cube of a millisecond time, in s^3: (ms)^3 / 1e9 */
#define CUBIC_MS3_PER_S3	1000000000ULL
/* (ms^3 per s^3) / C, exact in integers: 1e9 * 10 / 4 = 2.5e9 */
#define CUBIC_K_FACTOR		(CUBIC_MS3_PER_S3 * CUBIC_C_DEN / CUBIC_C_NUM)
/*
 * |t - K| is clamped to 2^20 ms (about 17 minutes): far beyond any real
 * epoch, and it keeps C * |t - K|^3 below 2^62 in 64-bit arithmetic.
 */
#define CUBIC_MAX_DT_MS		(1U << 20)
/* Never grow faster than one segment per CUBIC_MIN_CNT ACKed (1.5x/RTT). */
#define CUBIC_MIN_CNT		2
/* Below the curve: one segment per 100 windows, i.e. practically flat. */
#define CUBIC_FLAT_CNT_MULT	100
/* Without a loss yet, still grow at least 5 % per RTT (one per 20 ACKs). */
#define CUBIC_NO_HISTORY_CNT	20
/*
 * Reno-friendly slope 3 (1 - beta) / (1 + beta) = 9/17 segments per RTT,
 * i.e. one segment per (1 + beta) / (3 (1 - beta)) * cwnd = 17/9 cwnd ACKed
 * segments.
 */
#define CUBIC_RENO_ACKS_NUM	(CUBIC_BETA_DEN + CUBIC_BETA_NUM)
#define CUBIC_RENO_ACKS_DEN	(3 * (CUBIC_BETA_DEN - CUBIC_BETA_NUM))
/* Smallest ssthresh after a loss. */
#define CUBIC_MIN_SSTHRESH	2

struct cubic_state {
	u32 last_max_cwnd;	/* W_max, segments (0: no loss yet) */
	u32 k_ms;		/* K of the current epoch */
	u32 delay_min_us;	/* smallest RTT seen (0: none yet) */
	u32 epoch_start_ms;	/* 0: no epoch running */
	u32 epoch_cwnd;		/* cwnd when the epoch started */
	u32 ack_cnt;		/* ACKed segments not yet turned into reno_cwnd */
	u32 reno_cwnd;		/* the Reno estimate, segments */
};

/*
 * A new connection, or an RTO.  Like upstream Cubic (bictcp_reset() on
 * TCP_CA_Loss) this forgets the minimum RTT too: an RTO is often a path
 * change, and a stale, too small minimum would make HyStart fire at once,
 * size SEARCH's bins for the old path and skew the curve's look-ahead.
 */
static inline void cubic_reset(struct cubic_state *c)
{
	c->last_max_cwnd = 0;
	c->k_ms = 0;
	c->epoch_start_ms = 0;
	c->epoch_cwnd = 0;
	c->ack_cnt = 0;
	c->reno_cwnd = 0;
	c->delay_min_us = 0;
}

/* Largest c with c^3 <= U64_MAX. */
#define CUBIC_CBRT_U64_MAX	2642245U

/* Floor of the cube root of a 64-bit number, one result bit at a time. */
static inline u32 cubic_cbrt(u64 x)
{
	u64 r = 0;
	int shift;

	/* the root of a 64-bit value has at most 22 bits */
	for (shift = 21; shift >= 0; shift--) {
		u64 c = r | (1ULL << shift);

		/* c < 2^22 could reach 2^66 when cubed: test the bound first */
		if (c <= CUBIC_CBRT_U64_MAX && c * c * c <= x)
			r = c;
	}
	return (u32)r;
}

static inline void cubic_rtt_sample(struct cubic_state *c, u32 rtt_us)
{
	if (rtt_us && (!c->delay_min_us || rtt_us < c->delay_min_us))
		c->delay_min_us = rtt_us;
}

/* Loss: remember W_max and return the new ssthresh (beta * cwnd). */
static inline u32 cubic_on_loss(struct cubic_state *c, u32 cwnd,
				bool fast_convergence)
{
	c->epoch_start_ms = 0;
	if (cwnd < c->last_max_cwnd && fast_convergence)
		c->last_max_cwnd = (u32)div_u64((u64)cwnd * CUBIC_FC_NUM,
						CUBIC_FC_DEN);
	else
		c->last_max_cwnd = cwnd;
	return cc_max32((u32)div_u64((u64)cwnd * CUBIC_BETA_NUM,
				     CUBIC_BETA_DEN), CUBIC_MIN_SSTHRESH);
}

/* The curve's window, in segments, @t_ms after the epoch started. */
static inline u64 cubic_curve(const struct cubic_state *c, u32 t_ms)
{
	u64 origin = cc_max32(c->last_max_cwnd, c->epoch_cwnd);
	u64 d, delta;
	bool before_k = t_ms < c->k_ms;

	d = before_k ? c->k_ms - t_ms : t_ms - c->k_ms;
	d = cc_min64(d, CUBIC_MAX_DT_MS);
	/* d <= 2^20 so d^3 <= 2^60 and 4 * d^3 < 2^63 */
	delta = div64_u64(CUBIC_C_NUM * d * d * d,
			  CUBIC_C_DEN * CUBIC_MS3_PER_S3);
	if (before_k)
		return origin > delta ? origin - delta : 0;
	return origin + delta;
}

/*
 * Congestion avoidance step: how many ACKed segments per +1 of cwnd.
 * @now_ms: wrapping millisecond clock; @acked: segments this ACK covers in
 * congestion avoidance.
 */
static inline u32 cubic_cnt(struct cubic_state *c, u32 cwnd, u32 now_ms,
			    u32 acked)
{
	u64 target, cnt, per_seg;
	u32 t_ms;

	if (!cwnd)
		cwnd = 1;
	if (!c->epoch_start_ms) {
		/* new epoch: 0 means "none", so never store it */
		c->epoch_start_ms = now_ms ? now_ms : 1;
		c->epoch_cwnd = cwnd;
		c->ack_cnt = acked;		/* start counting */
		c->reno_cwnd = cwnd;
		if (c->last_max_cwnd > cwnd) {
			/*
			 * K in ms = cbrt((W_max - cwnd) / C * 1e9 ms^3/s^3).
			 * CUBIC_K_FACTOR = 1e9 / C = 2.5e9 exactly, so the
			 * product is (W_max - cwnd) < 2^32 times 2.5e9, i.e.
			 * below 1.08e19 < 2^64 = 1.84e19.
			 */
			u64 x = (u64)(c->last_max_cwnd - cwnd) * CUBIC_K_FACTOR;
			c->k_ms = cubic_cbrt(x);
		} else {
			c->k_ms = 0;
		}
	} else {
		c->ack_cnt = (u32)cc_min64((u64)c->ack_cnt + acked, U32_MAX);
	}

	/* aim at the curve one minimum RTT ahead */
	t_ms = now_ms - c->epoch_start_ms;
	t_ms += c->delay_min_us / USEC_PER_MSEC;
	target = cubic_curve(c, t_ms);

	if (target > cwnd)
		cnt = div64_u64(cwnd, target - cwnd);
	else
		cnt = (u64)CUBIC_FLAT_CNT_MULT * cwnd;

	if (!c->last_max_cwnd && cnt > CUBIC_NO_HISTORY_CNT)
		cnt = CUBIC_NO_HISTORY_CNT;

	/*
	 * TCP-friendly region: never slower than the equivalent Reno flow.
	 * per_seg = floor(17/9 cwnd) >= 1 for cwnd >= 1 and < 2^33; ack_cnt
	 * < 2^32, so n < 2^32 and n * per_seg <= ack_cnt.
	 */
	per_seg = div64_u64((u64)cwnd * CUBIC_RENO_ACKS_NUM,
			    CUBIC_RENO_ACKS_DEN);
	if (c->ack_cnt > per_seg) {
		u64 n = div64_u64(c->ack_cnt, per_seg);

		c->ack_cnt -= (u32)(n * per_seg);
		c->reno_cwnd = (u32)cc_min64((u64)c->reno_cwnd + n, U32_MAX);
	}
	if (c->reno_cwnd > cwnd) {
		u64 cnt_reno = div64_u64(cwnd, c->reno_cwnd - cwnd);

		if (cnt_reno < cnt)
			cnt = cnt_reno;
	}

	cnt = cc_max64(cnt, CUBIC_MIN_CNT);
	return (u32)cc_min64(cnt, U32_MAX);
}

/*
 * HyStart, delay test only (the ACK-train test needs per-ACK spacing the
 * module does not keep).  In each round the smallest of the first
 * HYSTART_SAMPLES RTT samples is compared with the path's minimum RTT; an
 * increase beyond delay_min / 8 (clamped to 4..16 ms) means a queue is
 * building, so slow start ends.
 */
#define HYSTART_LOW_WINDOW	16	/* do not judge tiny windows */
#define HYSTART_SAMPLES		8
#define HYSTART_DELAY_MIN_US	4000
#define HYSTART_DELAY_MAX_US	16000
#define HYSTART_RTT_MAX		((1U << 28) - 1)	/* fits the bitfield */

struct hystart_state {
	u32 end_seq;		/* a new round starts when this is ACKed */
	u32 curr_rtt_us:28,	/* smallest sample of this round */
	    samples:4;		/* samples taken this round */
};

static inline void hystart_round(struct hystart_state *h, u32 snd_nxt)
{
	h->end_seq = snd_nxt;
	h->curr_rtt_us = HYSTART_RTT_MAX;
	h->samples = 0;
}

/*
 * Per ACK in slow start.  @snd_una/@snd_nxt: sequence numbers; returns true
 * when slow start should end.
 */
static inline bool hystart_update(struct hystart_state *h, u32 snd_una,
				  u32 snd_nxt, u32 rtt_us, u32 delay_min_us,
				  u32 cwnd)
{
	u32 eta;

	if (cc_after32(snd_una, h->end_seq))
		hystart_round(h, snd_nxt);
	if (cwnd < HYSTART_LOW_WINDOW || !rtt_us || !delay_min_us)
		return false;
	if (h->samples >= HYSTART_SAMPLES)
		return false;
	if (rtt_us < h->curr_rtt_us)
		h->curr_rtt_us = cc_min32(rtt_us, HYSTART_RTT_MAX);
	h->samples++;
	if (h->samples < HYSTART_SAMPLES)
		return false;
	eta = delay_min_us / 8;
	eta = cc_max32(eta, HYSTART_DELAY_MIN_US);
	eta = cc_min32(eta, HYSTART_DELAY_MAX_US);
	return (u64)h->curr_rtt_us > (u64)delay_min_us + eta;
}

#endif /* CUBIC_CORE_H */
