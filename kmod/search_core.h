/* SPDX-License-Identifier: GPL-2.0 */
/*
 * search_core.h - the SEARCH 2.0 slow-start exit test, free of kernel calls.
 *
 * SEARCH ("Slow start Exit At Right CHokepoint") watches how much data is
 * delivered.  In slow start the sender doubles its window every round trip,
 * so the data delivered over the last stretch of time should be twice what
 * was delivered over the same stretch one RTT earlier.  Once the bottleneck
 * is full the delivery rate stops growing and the ratio falls below two.
 *
 * Time is cut into bins of bin_dur = WINDOW_FACTOR * initial_rtt / W.  Each
 * bin holds the amount delivered while it was the current bin.  At every bin
 * boundary we compare
 *
 *	curr = sum of the last W bins                (the current window)
 *	prev = the same W-bin window, one RTT back   (shifted by rtt / bin_dur
 *	       bins, the two end bins weighted by the fraction
 *	       f = (rtt mod bin_dur) / bin_dur)
 *
 *	norm_diff = (2 * prev - curr) / (2 * prev)
 *
 * norm_diff is about 0 while the rate still doubles and tends to 0.5 once it
 * is flat; at norm_diff >= THRESH slow start ends (ssthresh = cwnd).  This is
 * Algorithm 1 of the SEARCH paper; the deviations below are guards for cases
 * the paper leaves open, each documented where it is implemented:
 *
 *  - Storage.  The kernel gives a congestion module 104 bytes per socket, so
 *    a bin is a u16 counting "delivered >> scale".  When a new bin would not
 *    fit, scale grows by one and all stored bins are halved; only the ratio
 *    of two sums matters, so a common scale loses nothing but low bits.
 *    Delivered amounts are whatever unit the caller counts (the module uses
 *    tp->delivered, i.e. segments, which also counts SACKed data).
 *  - The ring holds SEARCH_RING_BINS = 26 bins, one more than the paper's
 *    W + EXTRA_BINS = 25: with a shift of exactly EXTRA_BINS bins and a
 *    non-zero fraction the oldest (fractional) bin is W + EXTRA_BINS bins
 *    behind the current one, which in a 25-slot ring is the current slot.
 *  - bin_dur has a floor of SEARCH_MIN_BIN_US, so a tiny first RTT sample
 *    cannot make it 0 (the paper divides by it).
 *  - An RTT shorter than one bin (shift 0) would compare the current window
 *    with itself and is skipped.
 *  - An RTT spike that shifts the previous window further back than the ring
 *    holds (more than EXTRA_BINS bins, i.e. the RTT has grown to more than
 *    EXTRA_BINS / W * WINDOW_FACTOR = 5.25 initial RTTs) silently disabled
 *    the check in the paper.  We clamp the shift to the oldest complete
 *    window instead.  That window is more recent than one RTT ago, which can
 *    only make norm_diff larger, i.e. exit sooner - the right direction when
 *    the queue already holds four times the path's delay.
 *  - The counter of bins saturates; SEARCH disarms itself before that.
 */
#ifndef SEARCH_CORE_H
#define SEARCH_CORE_H

#include "cc_compat.h"

/* Slots in the bin ring: the default W + EXTRA_BINS plus one (see above). */
#define SEARCH_RING_BINS	26
/* Largest value a bin can hold before the common scale must grow. */
#define SEARCH_BIN_MAX		U16_MAX
/*
 * Floor for the bin duration.  Below ~100 us, delayed ACKs, interrupt
 * coalescing and GRO deliver ACKs in bursts, so most bins would be empty and
 * the rest overfull; a floor only makes the window longer on tiny RTTs.
 */
#define SEARCH_MIN_BIN_US	100
/* Fixed-point unit of the interpolation fraction f. */
#define SEARCH_FRAC_ONE		1024
/* norm_diff and THRESH are expressed in per-mille (0.35 == 350). */
#define SEARCH_PERMILLE		1000
/* Marker for "no norm_diff computed yet". */
#define SEARCH_NORM_NONE	(-32768)
/* Stop using the ring if the bin counter would saturate. */
#define SEARCH_NBINS_MAX	U16_MAX

/* Parameter defaults (Algorithm 1) and the ranges the module accepts. */
#define SEARCH_WINDOW_FACTOR_DEF	35	/* tenths: 3.5 RTT */
#define SEARCH_WINDOW_FACTOR_MIN	5	/* 0.5 RTT */
#define SEARCH_WINDOW_FACTOR_MAX	100	/* 10 RTT */
#define SEARCH_W_DEF			10
#define SEARCH_W_MIN			2
#define SEARCH_W_MAX			(SEARCH_RING_BINS - 2)
#define SEARCH_EXTRA_DEF		15
#define SEARCH_EXTRA_MIN		1
#define SEARCH_EXTRA_MAX		(SEARCH_RING_BINS - 1 - SEARCH_W_MIN)
#define SEARCH_THRESH_DEF		350	/* per-mille */
#define SEARCH_THRESH_MIN		1
#define SEARCH_THRESH_MAX		SEARCH_PERMILLE

/* search_state.flags */
#define SEARCH_F_ARMED		0x01	/* measuring: the flow is in slow start */
#define SEARCH_F_EXITED		0x02	/* SEARCH ended slow start */

struct search_params {
	u32 window_factor;	/* tenths of an RTT */
	u32 bins;		/* W */
	u32 extra_bins;		/* EXTRA_BINS */
	u32 thresh;		/* per-mille */
};

struct search_state {
	u32 bin_dur_us;		/* 0 until the first RTT sample */
	u32 bin_end_us;		/* end of the current bin (wrapping clock) */
	u32 prev_delivered;	/* delivered counter at the last boundary */
	u16 nbins;		/* bins started so far (paper: curr_idx + 1) */
	s16 norm_diff;		/* last value in per-mille, or SEARCH_NORM_NONE */
	u16 bins[SEARCH_RING_BINS];
	u8 pos;			/* ring slot of the current bin */
	u8 scale;		/* bins hold delivered >> scale */
	u8 flags;		/* SEARCH_F_* */
};

enum search_verdict {
	SEARCH_IDLE,		/* not armed, or still inside the current bin */
	SEARCH_NOT_ENOUGH,	/* boundary passed, too little history */
	SEARCH_BELOW,		/* checked, norm_diff < THRESH */
	SEARCH_EXIT,		/* checked, norm_diff >= THRESH: leave slow start */
};

/* Clamp a parameter set to the accepted ranges (the module validates on
 * write too; this keeps the core safe whatever it is handed). */
static inline struct search_params search_params_sane(struct search_params p)
{
	if (p.window_factor < SEARCH_WINDOW_FACTOR_MIN ||
	    p.window_factor > SEARCH_WINDOW_FACTOR_MAX)
		p.window_factor = SEARCH_WINDOW_FACTOR_DEF;
	if (p.bins < SEARCH_W_MIN || p.bins > SEARCH_W_MAX)
		p.bins = SEARCH_W_DEF;
	if (p.extra_bins < SEARCH_EXTRA_MIN || p.extra_bins > SEARCH_EXTRA_MAX)
		p.extra_bins = SEARCH_EXTRA_DEF;
	if (p.thresh < SEARCH_THRESH_MIN || p.thresh > SEARCH_THRESH_MAX)
		p.thresh = SEARCH_THRESH_DEF;
	return p;
}

/* Ring slot of the bin @back bins before the current one (back < ring). */
static inline u32 search_slot(const struct search_state *s, u32 back)
{
	return (s->pos + SEARCH_RING_BINS - back) % SEARCH_RING_BINS;
}

/*
 * (Re)arm SEARCH for a new slow start.  @rtt_us is the initial RTT (0 if
 * none is known yet: search_update() then waits for the first sample).
 */
static inline void search_arm(struct search_state *s,
			      const struct search_params *par,
			      u32 now_us, u32 delivered, u32 rtt_us)
{
	struct search_params p = search_params_sane(*par);
	u32 i;

	for (i = 0; i < SEARCH_RING_BINS; i++)
		s->bins[i] = 0;
	s->nbins = 0;
	s->pos = SEARCH_RING_BINS - 1;	/* the first bin lands in slot 0 */
	s->scale = 0;
	s->norm_diff = SEARCH_NORM_NONE;
	s->prev_delivered = delivered;
	s->flags = SEARCH_F_ARMED;
	s->bin_dur_us = 0;
	s->bin_end_us = now_us;
	if (rtt_us) {
		u64 d = div64_u64((u64)rtt_us * p.window_factor, 10ULL * p.bins);

		s->bin_dur_us = (u32)cc_max64(d, SEARCH_MIN_BIN_US);
		s->bin_end_us = now_us + s->bin_dur_us;
	}
}

static inline void search_disarm(struct search_state *s)
{
	s->flags &= (u8)~SEARCH_F_ARMED;
}

/* Store @v in the current bin, growing the common scale if it is needed. */
static inline void search_store(struct search_state *s, u32 v)
{
	u32 i;

	while ((v >> s->scale) > SEARCH_BIN_MAX) {
		s->scale++;
		for (i = 0; i < SEARCH_RING_BINS; i++)
			s->bins[i] = (u16)((s->bins[i] + 1U) >> 1);
	}
	if (s->scale) {
		/* round to nearest, in 64 bits so v near U32_MAX cannot wrap */
		u64 r = ((u64)v + (1ULL << (s->scale - 1))) >> s->scale;

		s->bins[s->pos] = (u16)cc_min64(r, SEARCH_BIN_MAX);
	} else {
		s->bins[s->pos] = (u16)v;
	}
}

/*
 * Algorithm 1, update_bins(): @passed >= 1 boundaries were crossed.  Bins
 * that passed without an ACK are zeroed; everything delivered since the last
 * boundary goes into the newest bin.
 */
static inline void search_roll(struct search_state *s, u32 passed,
			       u32 delivered)
{
	u32 zero = cc_min32(passed, SEARCH_RING_BINS);
	u32 i;

	for (i = 1; i <= zero; i++)
		s->bins[(s->pos + i) % SEARCH_RING_BINS] = 0;
	s->pos = (u8)((s->pos + passed % SEARCH_RING_BINS) % SEARCH_RING_BINS);
	s->nbins = (u16)cc_min32((u32)s->nbins + passed, SEARCH_NBINS_MAX);
	/* unsigned difference: correct across a wrap of the counter */
	search_store(s, delivered - s->prev_delivered);
	s->prev_delivered = delivered;
}

/*
 * Algorithm 1, sum_bins(): the W-bin window whose newest bin is @back bins
 * behind the current one, the oldest (partial) bin weighted by @frac and the
 * newest by SEARCH_FRAC_ONE - frac.  Result in bin units * SEARCH_FRAC_ONE.
 * Needs back + W < SEARCH_RING_BINS.
 */
static inline u64 search_window_sum(const struct search_state *s, u32 w,
				    u32 back, u32 frac)
{
	u64 sum = 0;
	u32 i;

	for (i = 1; i < w; i++)
		sum += (u64)s->bins[search_slot(s, back + i)] * SEARCH_FRAC_ONE;
	sum += (u64)s->bins[search_slot(s, back + w)] * frac;
	sum += (u64)s->bins[search_slot(s, back)] * (SEARCH_FRAC_ONE - frac);
	return sum;
}

/* norm_diff = (2 prev - curr) / (2 prev) in per-mille, clamped to s16. */
static inline s16 search_norm_diff(u64 prev, u64 curr)
{
	u64 den = 2 * prev;
	u64 q;

	if (!den)
		return SEARCH_NORM_NONE;
	if (curr <= den) {
		q = div64_u64((den - curr) * SEARCH_PERMILLE, den);
		return (s16)q;		/* 0 ... 1000 */
	}
	q = div64_u64((curr - den) * SEARCH_PERMILLE, den);
	return (s16)(q >= 32767 ? -32767 : -(s32)q);
}

/*
 * Algorithm 1, ack_arrival(): call on every ACK while in slow start.
 * @now_us: a microsecond clock (wraps, compared modulo 2^32);
 * @delivered: cumulative delivered counter (wraps); @rtt_us: this ACK's RTT
 * sample (0 = none: the initial RTT is used).
 */
static inline enum search_verdict
search_update(struct search_state *s, const struct search_params *par,
	      u32 now_us, u32 delivered, u32 rtt_us)
{
	struct search_params p = search_params_sane(*par);
	u32 passed, shift, frac, max_shift, rtt, curr_idx, prev_idx;
	u64 curr, prev, lhs, rhs;

	if (!(s->flags & SEARCH_F_ARMED))
		return SEARCH_IDLE;
	if (!s->bin_dur_us) {
		/* first RTT sample: start the bins now (initialization()) */
		if (rtt_us)
			search_arm(s, &p, now_us, delivered, rtt_us);
		return SEARCH_IDLE;
	}
	if (!cc_after32(now_us, s->bin_end_us))
		return SEARCH_IDLE;

	passed = (now_us - s->bin_end_us) / s->bin_dur_us + 1;
	s->bin_end_us += (u32)((u64)passed * s->bin_dur_us);
	if ((u32)s->nbins + passed >= SEARCH_NBINS_MAX) {
		/* a slow start this long is not one SEARCH can judge */
		search_disarm(s);
		return SEARCH_IDLE;
	}
	search_roll(s, passed, delivered);

	/* the initial RTT is what the bins were sized with */
	rtt = rtt_us ? rtt_us : (u32)div64_u64((u64)s->bin_dur_us * 10 * p.bins,
					       p.window_factor);
	shift = rtt / s->bin_dur_us;
	frac = (u32)div64_u64((u64)(rtt % s->bin_dur_us) * SEARCH_FRAC_ONE,
			      s->bin_dur_us);
	if (!shift)
		return SEARCH_NOT_ENOUGH;	/* RTT shorter than a bin */

	max_shift = cc_min32(p.extra_bins, SEARCH_RING_BINS - 1 - p.bins);
	if (shift > max_shift) {
		/* RTT spike beyond the ring: use the oldest whole window */
		shift = max_shift;
		frac = 0;
	}

	curr_idx = (u32)s->nbins - 1;
	if (curr_idx < shift)
		return SEARCH_NOT_ENOUGH;
	prev_idx = curr_idx - shift;
	if (prev_idx < p.bins)
		return SEARCH_NOT_ENOUGH;

	curr = search_window_sum(s, p.bins, 0, 0);
	prev = search_window_sum(s, p.bins, shift, frac);
	s->norm_diff = search_norm_diff(prev, curr);
	if (!prev)
		return SEARCH_BELOW;	/* nothing delivered a window ago */

	/* exact test: (2 prev - curr) / (2 prev) >= thresh / 1000 */
	lhs = 2 * prev;
	if (curr >= lhs)
		return SEARCH_BELOW;
	lhs = (lhs - curr) * SEARCH_PERMILLE;
	rhs = 2 * prev * p.thresh;
	return lhs >= rhs ? SEARCH_EXIT : SEARCH_BELOW;
}

/*
 * Microseconds since the bins started (the connection's first RTT sample or
 * the last re-arm), derived from the bin bookkeeping so that no extra state
 * is needed: the first bin ended at start + bin_dur and each rolled bin adds
 * one bin_dur to bin_end.
 */
static inline u32 search_elapsed_us(const struct search_state *s, u32 now_us)
{
	u32 start = s->bin_end_us - (u32)(((u64)s->nbins + 1) * s->bin_dur_us);

	return now_us - start;
}

#endif /* SEARCH_CORE_H */
