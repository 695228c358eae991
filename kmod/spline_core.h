/* SPDX-License-Identifier: GPL-2.0 */
/*
 * spline_core.h - the Spline model, free of kernel calls.
 *
 * tcp_spline.c feeds it one ACK at a time (spline_on_ack()) and applies the
 * window and pacing rate it returns; test/ drives it with synthetic ACKs.
 * The model itself is explained at the top of tcp_spline.c.
 *
 * Units: rates in bytes per second (u64, so no fixed-point scale is needed
 * to keep precision: the seed's BW_SCALE is 0 here), times in microseconds,
 * windows in segments.  Every division goes through a guard.
 */
#ifndef SPLINE_CORE_H
#define SPLINE_CORE_H

#include "cc_compat.h"

enum spline_mode {
	SPLINE_START_PROBE = 1,	/* numbering starts at 1: ss hides a 0 */
	SPLINE_PROBE_BW,
	SPLINE_PROBE_RTT,
	SPLINE_DRAIN_PROBE,
};

/* Fixed-point unit of the gains (as ss prints them: value / 256). */
#define SPLINE_UNIT			256
/* START_PROBE doubles the window per round, so the rate doubles too. */
#define SPLINE_START_PACING_GAIN	(2 * SPLINE_UNIT)
/* PROBE_BW sends 25 % above the estimate to find out if more fits. */
#define SPLINE_PROBE_PACING_GAIN	(SPLINE_UNIT * 5 / 4)
/* DRAIN_PROBE sends 25 % below it so the queue shrinks. */
#define SPLINE_DRAIN_PACING_GAIN	(SPLINE_UNIT * 3 / 4)
/* PROBE_RTT paces at the estimate; its window does the draining. */
#define SPLINE_PROBE_RTT_PACING_GAIN	SPLINE_UNIT

/* Never go below 4 segments: fast retransmit needs 3 dupacks + 1. */
#define SPLINE_MIN_CWND			4
/*
 * "Congested" (seed: drain when cwnd exceeds the bw estimate or the RTT
 * grew ~1.25x): a window 1.25 x the BDP puts a quarter BDP in the queue,
 * which is exactly what lifts the RTT to 1.25 x min_rtt, so both tests use
 * the same 5/4 tolerance.
 */
#define SPLINE_CONG_NUM			5
#define SPLINE_CONG_DEN			4
/* At an epoch's end PROBE_RTT is only worth it if a queue (> 1/8) exists. */
#define SPLINE_QUEUE_NUM		9
#define SPLINE_QUEUE_DEN		8
/* last_min_rtt is replaced by any sample once it is older than 10 s. */
#define SPLINE_MIN_RTT_WIN_US		(10ULL * 1000 * 1000)
/*
 * The bandwidth estimate is a max over 2 halves of 5 rounds each: long
 * enough to span a DRAIN/PROBE_RTT dip, short enough to follow a real drop.
 */
#define SPLINE_BW_HALF_ROUNDS		5
/* Epoch length in rounds, drawn at random so flows do not synchronise. */
#define SPLINE_EPOCH_MIN_ROUNDS		8
#define SPLINE_EPOCH_MAX_ROUNDS		16
/* fairness_rat below this: the pipe is (nearly) full, yield. */
#define SPLINE_FAIR_YIELD		3
/* Cap on fairness_rat (reached when little is in flight). */
#define SPLINE_FAIR_MAX			16
/*
 * 4 * bw_ack / bw_inflight is capped at 8, i.e. the ACKs may claim at most
 * twice the rate of what is in flight (ACK compression claims more).
 */
#define SPLINE_ACK_RATIO_MAX		8
/* PROBE_BW at fairness_rat >= 3 grows by acked * fairness_rat / 8. */
#define SPLINE_AGGR_SHIFT		3
/* G when ACKs lag: two segments. */
#define SPLINE_LAG_GROWTH		2
/* START_PROBE ends after 3 rounds in which delivery did not grow. */
#define SPLINE_LAG_ROUNDS		3
/* DRAIN_PROBE gives up after 3 rounds (e.g. the path's RTT went up). */
#define SPLINE_DRAIN_MAX_ROUNDS		3
/* Loss: keep 4/5 of the window, but not less than the measured BDP. */
#define SPLINE_LOSS_BETA_NUM		4
#define SPLINE_LOSS_BETA_DEN		5
/* Sanity bounds on inputs: 2^40 B/s (8.8 Tbit/s), 2^26 us (67 s). */
#define SPLINE_MAX_BW			(1ULL << 40)
#define SPLINE_MAX_RTT_US		(1U << 26)
/* At most 2^24 segments per rate sample are believed. */
#define SPLINE_MAX_SAMPLE_SEGS		(1U << 24)
/* Largest window handed back: tcp_snd_cwnd_set() warns if (int)cwnd <= 0. */
#define SPLINE_MAX_CWND			0x7fffffffU
/* Pacing floor: one segment per second, so the flow can never stall. */
#define SPLINE_MIN_RATE_SEGS		1

/*
 * The published code's window floor: 10 segments plus this ACK's segments
 * (used instead of SPLINE_MIN_CWND when SPLINE_K_PUBLISHED_FLOOR is set).
 */
#define SPLINE_PUBLISHED_FLOOR		10

/*
 * spline_state.knobs: the mechanisms an ablation can change, one bit each.
 * 0 is the module as described at the top of tcp_spline.c; each bit moves
 * one mechanism away from that, towards the published code or to "off".
 * tcp_spline.c sets them from its module parameters when a connection
 * starts, so a change applies to connections opened afterwards.
 */
#define SPLINE_K_RECOVERY_GROWTH 0x01	/* grow in Recovery/Loss too */
#define SPLINE_K_NO_LOSS_CUT	0x02	/* loss: keep the window (no 4/5) */
#define SPLINE_K_NO_DRAIN_TEST	0x04	/* PROBE_BW never drains on RTT/cwnd */
#define SPLINE_K_NO_FAIR_YIELD	0x08	/* no +1 segment/round below 3 */
#define SPLINE_K_NO_QUEUE_PROBE_RTT 0x10 /* no PROBE_RTT at an epoch's end */
#define SPLINE_K_PUBLISHED_FLOOR 0x20	/* floor 10 + acked, not 4 */
#define SPLINE_K_PACING_UP_ONLY	0x40	/* pacing rate never decreases */
#define SPLINE_K_ALL		0x7f

/* spline_state.flags */
#define SPLINE_F_LOSS_ROUND	0x01	/* a loss was seen this round */
#define SPLINE_F_RTT_STALE	0x02	/* min_rtt just expired: refresh */

struct spline_state {
	u64 bw_slot[2];		/* max delivery rate, this / last half */
	u64 bw_ack;		/* latest delivery-rate sample */
	u64 min_rtt_stamp_us;	/* when last_min_rtt was set */
	u32 min_rtt_us;		/* last_min_rtt (0: none yet) */
	u32 curr_rtt_us;	/* smallest RTT of the last full round */
	u32 round_rtt_us;	/* smallest RTT of the round in progress */
	u32 next_round_delivered; /* round ends when this is delivered */
	u32 round_delivered;	/* delivered in the last full round */
	u32 prev_round_delivered; /* ... and in the round before */
	u32 last_ack;		/* segments ACKed by the previous ACK */
	u32 max_could_cwnd;	/* window cap computed on the last ACK */
	u32 recover_cwnd;	/* window after a loss (0: not recovering) */
	u32 prior_cwnd;		/* window before the loss, for undo */
	u32 cwnd_cnt;		/* growth accumulator, segments * cwnd */
	u16 fairness;		/* fairness_rat of the last ACK */
	u8 mode;		/* enum spline_mode */
	u8 epp;			/* rounds into the current epoch */
	u8 epoch_len;		/* rounds in the current epoch */
	u8 bw_phase;		/* rounds into the current bw half */
	u8 mode_rounds;		/* rounds spent in the current mode */
	u8 lag_rounds;		/* consecutive rounds without growth */
	u8 flags;		/* SPLINE_F_* */
	u8 knobs;		/* SPLINE_K_* (0: the module as described) */
};

/* What the module reads from the socket on each ACK. */
struct spline_ack {
	u64 now_us;
	u32 delivered;		/* tp->delivered */
	u32 prior_delivered;	/* rs->prior_delivered */
	s64 rate_delivered;	/* rs->delivered (< 0: invalid) */
	s64 interval_us;	/* rs->interval_us (<= 0: invalid) */
	s64 rtt_us;		/* rs->rtt_us (< 0: none) */
	u32 acked;		/* rs->acked_sacked */
	s32 losses;		/* rs->losses */
	u32 inflight;		/* segments in flight */
	u32 cwnd;		/* current window */
	u32 cwnd_clamp;		/* tp->snd_cwnd_clamp */
	u32 mss;
	u32 rand;		/* a random number, for epoch lengths */
	u64 pacing_rate;	/* the socket's pacing rate now (bytes/s) */
	bool app_limited;
	bool cwnd_limited;
	bool in_recovery;	/* CA state Recovery or Loss */
};

struct spline_out {
	u32 cwnd;
	u64 pacing_rate;	/* bytes/s; 0: leave unchanged */
	u8 old_mode;
	u8 new_mode;
};

static inline u8 spline_epoch_len(u32 rand)
{
	return (u8)(SPLINE_EPOCH_MIN_ROUNDS +
		    rand % (SPLINE_EPOCH_MAX_ROUNDS - SPLINE_EPOCH_MIN_ROUNDS + 1));
}

static inline void spline_init_state(struct spline_state *s, u32 delivered,
				     u32 rtt_us, u64 now_us, u32 rand)
{
	*s = (struct spline_state){ 0 };
	s->mode = SPLINE_START_PROBE;
	s->epoch_len = spline_epoch_len(rand);
	s->next_round_delivered = delivered;
	s->fairness = SPLINE_FAIR_MAX;
	if (rtt_us) {
		s->min_rtt_us = cc_min32(rtt_us, SPLINE_MAX_RTT_US);
		s->min_rtt_stamp_us = now_us;
	}
}

/* The bandwidth estimate: the larger of the two half-window maxima. */
static inline u64 spline_bw(const struct spline_state *s)
{
	return cc_max64(s->bw_slot[0], s->bw_slot[1]);
}

/* Estimated BDP in segments (0 while bw or min_rtt is unknown). */
static inline u32 spline_bdp(const struct spline_state *s, u32 mss)
{
	u64 bytes;

	if (!mss || !s->min_rtt_us)
		return 0;
	bytes = cc_mul_div(spline_bw(s), s->min_rtt_us, USEC_PER_SEC);
	return (u32)cc_min64(div64_u64(bytes, mss), U32_MAX);
}

/* bw_inflight ("throughput"): in-flight bytes per last_min_rtt. */
static inline u64 spline_bw_inflight(const struct spline_state *s,
				     u32 inflight, u32 mss)
{
	if (!s->min_rtt_us)
		return 0;
	return cc_mul_div((u64)inflight * mss, USEC_PER_SEC, s->min_rtt_us);
}

/* fairness_rat = bw / throughput + 1, SPLINE_FAIR_MAX when nothing flies. */
static inline u32 spline_fairness(u64 bw, u64 throughput)
{
	u64 q;

	if (!throughput)
		return SPLINE_FAIR_MAX;
	q = div64_u64(bw, throughput);
	return q >= SPLINE_FAIR_MAX - 1 ? SPLINE_FAIR_MAX : (u32)q + 1;
}

/*
 * max_could_cwnd = cwnd + fairness_rat * bw_ack / (bw_inflight / 4) + G.
 * The seed's formula is the headroom; as a window it is added to cwnd.  G is
 * half of this ACK's segments if the ACK carries more than the previous one
 * did, else SPLINE_LAG_GROWTH (ACK lag limits growth).  A growing ACK never
 * gets less than a lagging one: G >= SPLINE_LAG_GROWTH.
 */
static inline u32 spline_max_could_cwnd(u32 cwnd, u32 fairness, u64 bw_ack,
					u64 bw_inflight, u32 curr_ack,
					u32 last_ack)
{
	u64 q, g, cap;

	q = bw_inflight ? div64_u64(4 * cc_min64(bw_ack, SPLINE_MAX_BW),
				    bw_inflight) : SPLINE_ACK_RATIO_MAX;
	q = cc_min64(q, SPLINE_ACK_RATIO_MAX);
	g = SPLINE_LAG_GROWTH;
	if (curr_ack > last_ack)
		g = cc_max32(curr_ack / 2, SPLINE_LAG_GROWTH);
	cap = (u64)cwnd + (u64)fairness * q + g;
	return (u32)cc_min64(cap, U32_MAX);
}

static inline void spline_set_mode(struct spline_state *s, u8 mode)
{
	s->mode = mode;
	s->mode_rounds = 0;
	s->cwnd_cnt = 0;
}

/* Is the RTT of the last round more than 1.25 x last_min_rtt? */
static inline bool spline_rtt_congested(const struct spline_state *s)
{
	return s->min_rtt_us && s->curr_rtt_us &&
	       (u64)s->curr_rtt_us * SPLINE_CONG_DEN >
	       (u64)s->min_rtt_us * SPLINE_CONG_NUM;
}

/* Is the window more than 1.25 x the bandwidth estimate (as a BDP)? */
static inline bool spline_cwnd_congested(u32 cwnd, u32 bdp)
{
	return bdp && (u64)cwnd * SPLINE_CONG_DEN > (u64)bdp * SPLINE_CONG_NUM;
}

/*
 * check_probes: the mode machine, run once per round (see tcp_spline.c for
 * the picture).  @bdp is the BDP estimate in segments (0: unknown).
 */
static inline void spline_check_probes(struct spline_state *s,
				       const struct spline_ack *in, u32 bdp,
				       bool loss_in_round)
{
	bool rtt_cong = spline_rtt_congested(s);

	switch (s->mode) {
	case SPLINE_START_PROBE:
		if (rtt_cong || loss_in_round ||
		    s->lag_rounds >= SPLINE_LAG_ROUNDS)
			spline_set_mode(s, SPLINE_DRAIN_PROBE);
		break;
	case SPLINE_PROBE_BW:
		s->epp++;
		if (!(s->knobs & SPLINE_K_NO_DRAIN_TEST) &&
		    (rtt_cong || spline_cwnd_congested(in->cwnd, bdp))) {
			spline_set_mode(s, SPLINE_DRAIN_PROBE);
		} else if (s->epp >= s->epoch_len) {
			s->epp = 0;
			s->epoch_len = spline_epoch_len(in->rand);
			if (!(s->knobs & SPLINE_K_NO_QUEUE_PROBE_RTT) &&
			    (u64)s->curr_rtt_us * SPLINE_QUEUE_DEN >
			    (u64)s->min_rtt_us * SPLINE_QUEUE_NUM)
				spline_set_mode(s, SPLINE_PROBE_RTT);
		}
		break;
	case SPLINE_DRAIN_PROBE:
		if ((!rtt_cong && (!bdp || in->inflight <= bdp)) ||
		    s->mode_rounds >= SPLINE_DRAIN_MAX_ROUNDS)
			spline_set_mode(s, SPLINE_PROBE_BW);
		break;
	case SPLINE_PROBE_RTT:
		/* one full round at the small window, then back to work */
		if (s->mode_rounds >= 1)
			spline_set_mode(s, SPLINE_PROBE_BW);
		break;
	default:
		spline_set_mode(s, SPLINE_START_PROBE);
		break;
	}

	if (s->flags & SPLINE_F_RTT_STALE) {
		s->flags &= (u8)~SPLINE_F_RTT_STALE;
		if (s->mode == SPLINE_PROBE_BW)
			spline_set_mode(s, SPLINE_PROBE_RTT);
	}
}

/*
 * Loss (the kernel asks for ssthresh): cut and remember for undo.  With
 * SPLINE_K_NO_LOSS_CUT the window is kept, as the published code keeps it
 * (its ssthresh stays at infinity); the loss still ends START_PROBE.
 */
static inline u32 spline_on_loss(struct spline_state *s, u32 cwnd, u32 mss)
{
	u32 bdp = spline_bdp(s, mss);
	u32 target;

	s->prior_cwnd = cwnd;
	if (s->knobs & SPLINE_K_NO_LOSS_CUT) {
		target = cc_max32(cwnd, SPLINE_MIN_CWND);
		s->recover_cwnd = target;
		s->flags |= SPLINE_F_LOSS_ROUND;
		return target;
	}
	target = (u32)div_u64((u64)cwnd * SPLINE_LOSS_BETA_NUM,
			      SPLINE_LOSS_BETA_DEN);
	target = cc_max32(target, SPLINE_MIN_CWND);
	if (bdp > target)
		target = cc_min32(bdp, cwnd);
	target = cc_max32(target, SPLINE_MIN_CWND);
	s->recover_cwnd = target;
	s->flags |= SPLINE_F_LOSS_ROUND;
	return target;
}

/* The loss turned out to be spurious. */
static inline u32 spline_undo(struct spline_state *s, u32 cwnd)
{
	s->recover_cwnd = 0;
	return cc_max32(cwnd, s->prior_cwnd);
}

static inline u32 spline_pacing_gain(u8 mode)
{
	switch (mode) {
	case SPLINE_START_PROBE:
		return SPLINE_START_PACING_GAIN;
	case SPLINE_PROBE_BW:
		return SPLINE_PROBE_PACING_GAIN;
	case SPLINE_DRAIN_PROBE:
		return SPLINE_DRAIN_PACING_GAIN;
	default:
		return SPLINE_PROBE_RTT_PACING_GAIN;
	}
}

/* Pacing rate for the current mode; 0 when nothing is known yet. */
static inline u64 spline_pacing_rate(const struct spline_state *s, u32 cwnd,
				     u32 mss)
{
	u64 bw = spline_bw(s);
	u64 rate;

	if (!bw) {
		/* no delivery sample yet: one window per RTT */
		if (!s->min_rtt_us)
			return 0;
		bw = cc_mul_div((u64)cwnd * mss, USEC_PER_SEC, s->min_rtt_us);
	}
	rate = cc_mul_div(bw, spline_pacing_gain(s->mode), SPLINE_UNIT);
	return cc_max64(rate, (u64)mss * SPLINE_MIN_RATE_SEGS);
}

/* One ACK: update the model, return the window and pacing rate to use. */
static inline struct spline_out spline_on_ack(struct spline_state *s,
					      const struct spline_ack *in)
{
	struct spline_out out;
	u32 mss = in->mss ? in->mss : 1;
	u32 cwnd = in->cwnd ? in->cwnd : 1;
	u32 old_cwnd = cwnd;
	bool round_start = false, loss_in_round = false;
	/* may the mode's rule grow the window on this ACK? */
	bool grow = in->cwnd_limited &&
		    (!in->in_recovery || (s->knobs & SPLINE_K_RECOVERY_GROWTH));
	u64 bw, throughput;
	u32 bdp, floor;

	out.old_mode = s->mode;

	/* 1. Rounds: a round ends when data sent after it began is ACKed. */
	if (!cc_after32(s->next_round_delivered, in->prior_delivered) &&
	    in->rate_delivered >= 0) {
		round_start = true;
		s->prev_round_delivered = s->round_delivered;
		s->round_delivered = in->delivered - s->next_round_delivered;
		s->next_round_delivered = in->delivered;
		if (s->mode_rounds < 255)
			s->mode_rounds++;
		loss_in_round = s->flags & SPLINE_F_LOSS_ROUND;
		s->flags &= (u8)~SPLINE_F_LOSS_ROUND;
		if (s->round_rtt_us)
			s->curr_rtt_us = s->round_rtt_us;
		s->round_rtt_us = 0;
		/* delivery per round not growing: the ACKs lag */
		if (s->round_delivered <= s->prev_round_delivered)
			s->lag_rounds = (u8)cc_min32(s->lag_rounds + 1U, 255);
		else
			s->lag_rounds = 0;
		if (++s->bw_phase >= SPLINE_BW_HALF_ROUNDS) {
			s->bw_slot[1] = s->bw_slot[0];
			s->bw_slot[0] = 0;
			s->bw_phase = 0;
		}
	}

	/* 2. Delivery rate: bw_ack, and the windowed max bw. */
	if (in->rate_delivered > 0 && in->interval_us > 0) {
		u64 segs = cc_min64((u64)in->rate_delivered,
				    SPLINE_MAX_SAMPLE_SEGS);
		u64 sample = cc_mul_div(segs * mss, USEC_PER_SEC,
					(u64)in->interval_us);

		sample = cc_min64(sample, SPLINE_MAX_BW);
		s->bw_ack = sample;
		/* an app-limited sample only counts if it raises the max */
		if (!in->app_limited || sample >= spline_bw(s))
			s->bw_slot[0] = cc_max64(s->bw_slot[0], sample);
	}
	bw = spline_bw(s);

	/* 3. RTT: last_min_rtt, refreshed on a new minimum or after 10 s. */
	if (in->rtt_us > 0) {
		u32 rtt = (u32)cc_min64((u64)in->rtt_us, SPLINE_MAX_RTT_US);
		bool stale = s->min_rtt_us &&
			     in->now_us > s->min_rtt_stamp_us &&
			     in->now_us - s->min_rtt_stamp_us > SPLINE_MIN_RTT_WIN_US;

		if (!s->round_rtt_us || rtt < s->round_rtt_us)
			s->round_rtt_us = rtt;
		if (!s->curr_rtt_us)
			s->curr_rtt_us = rtt;
		if (!s->min_rtt_us || rtt <= s->min_rtt_us || stale) {
			if (stale)
				s->flags |= SPLINE_F_RTT_STALE;
			s->min_rtt_us = rtt;
			s->min_rtt_stamp_us = in->now_us;
		}
	}
	if (in->losses > 0)
		s->flags |= SPLINE_F_LOSS_ROUND;

	/* 4. throughput (bw_inflight), fairness_rat, max_could_cwnd */
	throughput = spline_bw_inflight(s, in->inflight, mss);
	s->fairness = (u16)spline_fairness(bw, throughput);
	s->max_could_cwnd = spline_max_could_cwnd(cwnd, s->fairness, s->bw_ack,
						  throughput, in->acked,
						  s->last_ack);
	s->last_ack = in->acked;
	bdp = spline_bdp(s, mss);

	/* 5. Mode changes, once per round. */
	if (round_start)
		spline_check_probes(s, in, bdp, loss_in_round);
	/* a loss ends START_PROBE at once: the pipe is full */
	if (s->mode == SPLINE_START_PROBE && (s->flags & SPLINE_F_LOSS_ROUND))
		spline_set_mode(s, SPLINE_DRAIN_PROBE);

	/*
	 * 6. Loss recovery: cut to recover_cwnd, or, after an RTO collapsed
	 * the window, grow back to it by the ACKed amount.  Only while the
	 * kernel is recovering; afterwards the mode decides again.  With
	 * SPLINE_K_RECOVERY_GROWTH the cut is made once and the mode's growth
	 * goes on during recovery, as in the published code, which computes
	 * the window on every ACK whatever the kernel's state.
	 */
	if (!in->in_recovery)
		s->recover_cwnd = 0;
	if (s->recover_cwnd) {
		if (cwnd > s->recover_cwnd) {
			cwnd = s->recover_cwnd;
			if (s->knobs & SPLINE_K_RECOVERY_GROWTH)
				s->recover_cwnd = 0;
		} else if (cwnd < s->recover_cwnd) {
			cwnd = (u32)cc_min64((u64)cwnd + in->acked,
					     s->recover_cwnd);
		}
	}

	/* 7. The window for the mode. */
	switch (s->mode) {
	case SPLINE_START_PROBE:
		if (grow)
			cwnd = (u32)cc_min64((u64)cwnd + in->acked, U32_MAX);
		break;
	case SPLINE_PROBE_BW:
		/* back from PROBE_RTT: refill the pipe at once */
		if (out.old_mode == SPLINE_PROBE_RTT && bdp)
			cwnd = cc_max32(cwnd, bdp);
		if (grow) {
			/* accumulate acked * k in units of 1/cwnd segment */
			u64 k = 1, cnt, inc;

			if (s->fairness >= SPLINE_FAIR_YIELD ||
			    (s->knobs & SPLINE_K_NO_FAIR_YIELD))
				k = ((u64)cwnd * s->fairness) >> SPLINE_AGGR_SHIFT;
			cnt = s->cwnd_cnt +
			      cc_min64(in->acked, SPLINE_MAX_SAMPLE_SEGS) *
			      cc_max64(k, 1);
			inc = div64_u64(cnt, cwnd);
			cnt -= inc * cwnd;
			s->cwnd_cnt = (u32)cc_min64(cnt, U32_MAX);
			cwnd = (u32)cc_min64((u64)cwnd + inc, U32_MAX);
		}
		break;
	case SPLINE_DRAIN_PROBE:
		if (bdp)
			cwnd = cc_min32(cwnd, bdp);
		break;
	case SPLINE_PROBE_RTT:
		if (bdp)
			cwnd = cc_min32(cwnd, cc_max32(bdp / 2, SPLINE_MIN_CWND));
		break;
	}

	/* growth never beyond max_could_cwnd (it never forces a cut) */
	if (cwnd > old_cwnd && out.old_mode != SPLINE_PROBE_RTT)
		cwnd = cc_max32(old_cwnd, cc_min32(cwnd, s->max_could_cwnd));
	floor = SPLINE_MIN_CWND;
	if (s->knobs & SPLINE_K_PUBLISHED_FLOOR)
		floor = (u32)cc_min64((u64)SPLINE_PUBLISHED_FLOOR +
				      cc_min64(in->acked, SPLINE_MAX_SAMPLE_SEGS),
				      SPLINE_MAX_CWND);
	cwnd = cc_max32(cwnd, floor);
	cwnd = cc_min32(cwnd, SPLINE_MAX_CWND);
	if (in->cwnd_clamp)
		cwnd = cc_min32(cwnd, cc_max32(in->cwnd_clamp, SPLINE_MIN_CWND));

	out.cwnd = cwnd;
	out.pacing_rate = spline_pacing_rate(s, cwnd, mss);
	if ((s->knobs & SPLINE_K_PACING_UP_ONLY) && out.pacing_rate)
		out.pacing_rate = cc_max64(out.pacing_rate, in->pacing_rate);
	out.new_mode = s->mode;
	return out;
}

#endif /* SPLINE_CORE_H */
