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
 * Algorithm 1 of the SEARCH paper.  Where this file differs, it says so
 * below; kmod/README.md lists every difference with its reason.
 *
 * Storage.  The kernel gives a congestion module 104 bytes per socket, so a
 * bin is a 12-bit count of "delivered >> scale", two bins packed in three
 * bytes.  When a new bin would not fit, scale grows by one and all stored
 * bins are halved; only the ratio of two sums matters, so a common scale
 * loses nothing but low bits.  Once scale > 0 the newest bin holds at least
 * SEARCH_BIN_MAX / 2 units, so a window sum is known to a few parts in ten
 * thousand and norm_diff to a few per-mille at worst (the host harness
 * compares it with double precision).  Delivered amounts are whatever unit
 * the caller counts (the module uses tp->delivered, i.e. segments, which
 * also counts SACKed data).  The ring
 * holds SEARCH_RING_BINS = 26 bins, one more than the paper's
 * W + EXTRA_BINS = 25: with a shift of exactly EXTRA_BINS bins and a non-zero
 * fraction the oldest (fractional) bin is W + EXTRA_BINS bins behind the
 * current one, which in a 25-slot ring is the current slot itself.
 *
 * When no check is made.  Algorithm 1 checks only when the previous window
 * lies inside the ring (lines 14-16).  So do we, and we add the cases the
 * paper leaves open:
 *
 *  - An RTT that shifts the previous window further back than
 *    min(EXTRA_BINS, ring - 1 - W) bins is SKIPPED (SEARCH_SKIPPED), exactly
 *    as line 16 does.  Such an RTT comes from one per-ACK sample; a single
 *    stalled ACK (Wi-Fi power save, a LEO handover, a cellular scheduler)
 *    produces it just as well as a queue does.  Comparing with a more recent
 *    window instead would compare a window full of the stall's empty bins
 *    with a shorter shift, which looks exactly like a collapsed rate: an
 *    early exit during ramp-up.  A queue that really grows past the ring
 *    ends slow start through loss, as in the paper.
 *  - An RTT shorter than one bin (shift 0) would compare the current window
 *    with itself and is not checked either.  Because bin_dur has a floor of
 *    SEARCH_MIN_BIN_US (the paper divides by it), a path whose RTT is below
 *    SEARCH_MIN_BIN_US is never checked, and below SEARCH_MIN_BIN_US * W /
 *    WINDOW_FACTOR (286 us with the defaults) the window spans more than
 *    WINDOW_FACTOR RTTs; see kmod/README.md.
 *  - No RTT sample on this ACK: the bins roll, but there is no check.
 *
 * Parameters are checked as a set (search_params_check()).  A set for which
 * a clean doubling slow start would leave early, or for which no check can
 * ever run, is refused: by the module parameter write, by module load, and
 * by search_arm() for a flow that finds such a set (it then stays unarmed and
 * says so).  A flow uses the set it armed with until it re-arms: writes at
 * run time apply to slow starts that begin afterwards.
 *
 * Restarts.  search_restart() forgets the history but keeps bin_dur, so the
 * next check comes W + shift + 1 bins later.  The module restarts
 *  - while the flow is application-limited (search_hold()): a sender that
 *    does not fill its window delivers a flat amount per RTT, which is what
 *    a full bottleneck looks like;
 *  - optionally, when more than stall_bins bins pass without an ACK (the rule
 *    of the later published SEARCH code; off by default, as in the paper).
 *
 * Counter limit.  nbins saturates at SEARCH_NBINS_MAX; only "at least
 * W + shift + 1 bins" matters for the checks, so SEARCH keeps working past
 * that point and search_elapsed_us() then under-reports (a lower bound).
 */
#ifndef SEARCH_CORE_H
#define SEARCH_CORE_H

#include "cc_compat.h"

/* Slots in the bin ring: the default W + EXTRA_BINS plus one (see above). */
#define SEARCH_RING_BINS	26
/* Bits per bin, and the largest value a bin holds before scale grows. */
#define SEARCH_BIN_BITS		12
#define SEARCH_BIN_MAX		((1U << SEARCH_BIN_BITS) - 1)
/* Bytes of the packed ring (39). */
#define SEARCH_BIN_BYTES	((SEARCH_RING_BINS * SEARCH_BIN_BITS + 7) / 8)
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
/* The bin counter saturates here (see "Counter limit" above). */
#define SEARCH_NBINS_MAX	U16_MAX

/* Parameter defaults (Algorithm 1) and the range each one accepts alone. */
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
/* stall_bins: 0 = no stall rule (the paper); else reset after > N missed */
#define SEARCH_STALL_DEF		0
#define SEARCH_STALL_MAX		63

/*
 * Rules for a parameter set (search_params_check()).
 *
 * Let b = 10 * W / window_factor be the number of bins in one initial RTT.
 *
 *  - floor(b) >= 1, or the shift of an RTT equal to the initial one is 0 and
 *    no check ever runs.
 *  - floor(SEARCH_RTT_HEADROOM * b) <= min(EXTRA_BINS, ring - 1 - W): the
 *    check must still run when the RTT has grown to SEARCH_RTT_HEADROOM
 *    times the initial one, i.e. while the queue holds one BDP - right when
 *    SEARCH has to decide.  A set that fits only the initial RTT would skip
 *    every check once a queue forms.
 *  - THRESH >= SEARCH_THRESH_SET_MIN.  In a clean doubling slow start
 *    norm_diff is not exactly 0: the linear weighting of the two end bins
 *    of an exponentially growing rate leaves a small positive residue, at
 *    most about 0.05 over the whole accepted space (the host harness
 *    measures it for every accepted combination).  The floor leaves room
 *    for that residue and for RTT jitter.
 *  - stall_bins is 0 (off) or at least floor(b) + 1: early in slow start a
 *    small window is sent in one burst per RTT, so gaps of up to one RTT
 *    between ACKs are normal and must not restart the measurement.
 */
#define SEARCH_RTT_HEADROOM		2
#define SEARCH_THRESH_SET_MIN		100	/* per-mille */

/* search_state.flags */
#define SEARCH_F_ARMED		0x01	/* measuring: the flow is in slow start */
#define SEARCH_F_INVALID	0x02	/* the parameter set was refused at arm */
/* bits 2..4 belong to the caller (the module keeps its slow-start status) */
#define SEARCH_F_OWNER_SHIFT	2
#define SEARCH_F_OWNER_MASK	0x1c

struct search_params {
	u32 window_factor;	/* tenths of an RTT */
	u32 bins;		/* W */
	u32 extra_bins;		/* EXTRA_BINS */
	u32 thresh;		/* per-mille */
	u32 stall_bins;		/* 0: off */
};

/* Why search_params_check() refused a set (0: it is valid). */
enum search_param_fault {
	SEARCH_PARAMS_OK = 0,
	SEARCH_BAD_RANGE,	/* one value outside its own range */
	SEARCH_BAD_NO_CHECK,	/* an RTT spans less than one bin */
	SEARCH_BAD_RING,	/* a doubled RTT reaches beyond the ring */
	SEARCH_BAD_THRESH,	/* below SEARCH_THRESH_SET_MIN */
	SEARCH_BAD_STALL,	/* would restart on normal ACK gaps */
};

struct search_state {
	u32 bin_dur_us;		/* 0 until the first RTT sample */
	u32 bin_end_us;		/* end of the current bin (wrapping clock);
				 * while bin_dur_us is 0: the window factor
				 * the bins will be sized with */
	u32 prev_delivered;	/* delivered counter at the last boundary */
	u16 nbins;		/* bins started so far (paper: curr_idx + 1) */
	s16 norm_diff;		/* last value in per-mille, or SEARCH_NORM_NONE */
	u16 thresh;		/* parameters fixed at arm time: THRESH, */
	u8 bins[SEARCH_BIN_BYTES];	/* packed, see search_bin() */
	u8 pos;			/* ring slot of the current bin */
	u8 scale;		/* bins hold delivered >> scale */
	u8 flags;		/* SEARCH_F_* */
	u8 w;			/* W, */
	u8 max_shift;		/* min(EXTRA_BINS, ring - 1 - W), */
	u8 stall_bins;		/* and the stall rule (0: off) */
};

enum search_verdict {
	SEARCH_IDLE,		/* not armed, or still inside the current bin */
	SEARCH_NOT_ENOUGH,	/* boundary passed, too little history */
	SEARCH_SKIPPED,		/* boundary passed, RTT beyond the ring */
	SEARCH_RESTARTED,	/* boundary passed after a stall: restarted */
	SEARCH_BELOW,		/* checked, norm_diff < THRESH */
	SEARCH_EXIT,		/* checked, norm_diff >= THRESH: leave slow start */
};

/* Deepest usable shift in bins for a window of @w bins. */
static inline u32 search_max_shift(u32 w, u32 extra_bins)
{
	return cc_min32(extra_bins, SEARCH_RING_BINS - 1 - w);
}

/* Is @p usable as a set?  See the rules above. */
static inline enum search_param_fault
search_params_check(const struct search_params *p)
{
	u32 bins_rtt, bins_headroom, stall_min;

	if (p->window_factor < SEARCH_WINDOW_FACTOR_MIN ||
	    p->window_factor > SEARCH_WINDOW_FACTOR_MAX ||
	    p->bins < SEARCH_W_MIN || p->bins > SEARCH_W_MAX ||
	    p->extra_bins < SEARCH_EXTRA_MIN ||
	    p->extra_bins > SEARCH_EXTRA_MAX ||
	    p->thresh < SEARCH_THRESH_MIN || p->thresh > SEARCH_THRESH_MAX ||
	    p->stall_bins > SEARCH_STALL_MAX)
		return SEARCH_BAD_RANGE;
	/* window_factor >= SEARCH_WINDOW_FACTOR_MIN > 0 from here on */
	bins_rtt = 10 * p->bins / p->window_factor;
	if (!bins_rtt)
		return SEARCH_BAD_NO_CHECK;
	bins_headroom = SEARCH_RTT_HEADROOM * 10 * p->bins / p->window_factor;
	if (bins_headroom > search_max_shift(p->bins, p->extra_bins))
		return SEARCH_BAD_RING;
	if (p->thresh < SEARCH_THRESH_SET_MIN)
		return SEARCH_BAD_THRESH;
	stall_min = bins_rtt + 1;
	if (p->stall_bins && p->stall_bins < stall_min)
		return SEARCH_BAD_STALL;
	return SEARCH_PARAMS_OK;
}

/* Ring slot of the bin @back bins before the current one (back < ring). */
static inline u32 search_slot(const struct search_state *s, u32 back)
{
	return (s->pos + SEARCH_RING_BINS - back) % SEARCH_RING_BINS;
}

/* The bin in ring slot @slot: 12 bits starting at bit 12 * slot. */
static inline u32 search_bin(const struct search_state *s, u32 slot)
{
	u32 bit = slot * SEARCH_BIN_BITS, byte = bit / 8;
	/* slot < SEARCH_RING_BINS, so byte + 1 < SEARCH_BIN_BYTES */
	u32 two = s->bins[byte] | ((u32)s->bins[byte + 1] << 8);

	return (two >> (bit % 8)) & SEARCH_BIN_MAX;
}

static inline void search_bin_set(struct search_state *s, u32 slot, u32 v)
{
	u32 bit = slot * SEARCH_BIN_BITS, byte = bit / 8, sh = bit % 8;
	u32 two = s->bins[byte] | ((u32)s->bins[byte + 1] << 8);

	two &= ~(SEARCH_BIN_MAX << sh);
	two |= (cc_min32(v, SEARCH_BIN_MAX) << sh);
	s->bins[byte] = (u8)two;
	s->bins[byte + 1] = (u8)(two >> 8);
}

/* Forget the history, keep bin_dur and the parameters; bin_end unchanged. */
static inline void search_restart(struct search_state *s, u32 delivered)
{
	u32 i;

	for (i = 0; i < SEARCH_BIN_BYTES; i++)
		s->bins[i] = 0;
	s->nbins = 0;
	s->pos = SEARCH_RING_BINS - 1;	/* the first bin lands in slot 0 */
	s->scale = 0;
	s->prev_delivered = delivered;
}

/* Start the bins now, sized for @rtt_us (> 0) and @window_factor. */
static inline void search_start_bins(struct search_state *s, u32 now_us,
				     u32 delivered, u32 rtt_us,
				     u32 window_factor)
{
	/* s->w >= SEARCH_W_MIN: the set was checked at arm time */
	u64 d = div64_u64((u64)rtt_us * window_factor, 10ULL * s->w);

	search_restart(s, delivered);
	s->bin_dur_us = (u32)cc_max64(d, SEARCH_MIN_BIN_US);
	s->bin_end_us = now_us + s->bin_dur_us;
}

/*
 * (Re)arm SEARCH for a new slow start with the parameter set @par, which is
 * copied.  @rtt_us is the initial RTT (0 if none is known yet:
 * search_update() then starts the bins at the first sample).  Returns false,
 * leaving SEARCH unarmed with SEARCH_F_INVALID set, if @par is not a valid
 * set.  The caller's bits of flags are kept.
 */
static inline bool search_arm(struct search_state *s,
			      const struct search_params *par,
			      u32 now_us, u32 delivered, u32 rtt_us)
{
	u8 owner = s->flags & SEARCH_F_OWNER_MASK;

	s->norm_diff = SEARCH_NORM_NONE;
	s->bin_dur_us = 0;
	search_restart(s, delivered);
	if (search_params_check(par) != SEARCH_PARAMS_OK) {
		s->flags = owner | SEARCH_F_INVALID;
		return false;
	}
	s->w = (u8)par->bins;
	s->max_shift = (u8)search_max_shift(par->bins, par->extra_bins);
	s->thresh = (u16)par->thresh;
	s->stall_bins = (u8)par->stall_bins;
	s->flags = owner | SEARCH_F_ARMED;
	s->bin_end_us = par->window_factor;	/* until the bins start */
	if (rtt_us)
		search_start_bins(s, now_us, delivered, rtt_us,
				  par->window_factor);
	return true;
}

static inline void search_disarm(struct search_state *s)
{
	s->flags &= (u8)~SEARCH_F_ARMED;
}

/*
 * The flow is application-limited (or restarts after idle): what it
 * delivers says nothing about the path, so no bin is rolled and no check is
 * made; the measurement starts over with the next bin after now.
 */
static inline void search_hold(struct search_state *s, u32 now_us,
			       u32 delivered)
{
	if (!(s->flags & SEARCH_F_ARMED) || !s->bin_dur_us)
		return;		/* bins not started: the first sample does it */
	search_restart(s, delivered);
	s->bin_end_us = now_us + s->bin_dur_us;
}

/* Store @v in the current bin, growing the common scale if it is needed. */
static inline void search_store(struct search_state *s, u32 v)
{
	u32 i;

	while ((v >> s->scale) > SEARCH_BIN_MAX) {
		s->scale++;
		for (i = 0; i < SEARCH_RING_BINS; i++)
			search_bin_set(s, i, (search_bin(s, i) + 1U) >> 1);
	}
	if (s->scale) {
		/* round to nearest, in 64 bits so v near U32_MAX cannot wrap */
		u64 r = ((u64)v + (1ULL << (s->scale - 1))) >> s->scale;

		search_bin_set(s, s->pos, (u32)cc_min64(r, SEARCH_BIN_MAX));
	} else {
		search_bin_set(s, s->pos, v);
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
		search_bin_set(s, (s->pos + i) % SEARCH_RING_BINS, 0);
	s->pos = (u8)((s->pos + passed % SEARCH_RING_BINS) % SEARCH_RING_BINS);
	s->nbins = (u16)cc_min32((u32)s->nbins + cc_min32(passed,
							  SEARCH_NBINS_MAX),
				 SEARCH_NBINS_MAX);
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
		sum += (u64)search_bin(s, search_slot(s, back + i)) *
		       SEARCH_FRAC_ONE;
	sum += (u64)search_bin(s, search_slot(s, back + w)) * frac;
	sum += (u64)search_bin(s, search_slot(s, back)) *
	       (SEARCH_FRAC_ONE - frac);
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
 * Algorithm 1, ack_arrival(): call on every ACK while in slow start and not
 * application-limited.  @now_us: a microsecond clock (wraps, compared modulo
 * 2^32); @delivered: cumulative delivered counter (wraps); @rtt_us: this
 * ACK's RTT sample (0 = none: the bins roll, no check is made).
 */
static inline enum search_verdict
search_update(struct search_state *s, u32 now_us, u32 delivered, u32 rtt_us)
{
	u32 passed, shift, frac, curr_idx, prev_idx;
	u64 curr, prev, lhs, rhs;

	if (!(s->flags & SEARCH_F_ARMED))
		return SEARCH_IDLE;
	if (!s->bin_dur_us) {
		/* first RTT sample: start the bins now (initialization()) */
		if (rtt_us)
			search_start_bins(s, now_us, delivered, rtt_us,
					  s->bin_end_us);
		return SEARCH_IDLE;
	}
	if (!cc_after32(now_us, s->bin_end_us))
		return SEARCH_IDLE;

	passed = (now_us - s->bin_end_us) / s->bin_dur_us + 1;
	s->bin_end_us += (u32)((u64)passed * s->bin_dur_us);
	if (s->stall_bins && passed - 1 > s->stall_bins) {
		/* more than stall_bins bins without any ACK: start over, and
		 * leave out the burst this ACK releases (it belongs to the
		 * stalled bins, not to the next one) */
		search_restart(s, delivered);
		return SEARCH_RESTARTED;
	}
	search_roll(s, passed, delivered);

	if (!rtt_us)
		return SEARCH_NOT_ENOUGH;
	shift = rtt_us / s->bin_dur_us;
	frac = (u32)div64_u64((u64)(rtt_us % s->bin_dur_us) * SEARCH_FRAC_ONE,
			      s->bin_dur_us);
	if (!shift)
		return SEARCH_NOT_ENOUGH;	/* RTT shorter than a bin */
	if (shift > s->max_shift)
		return SEARCH_SKIPPED;		/* Algorithm 1, line 16 */

	curr_idx = (u32)s->nbins - 1;
	if (curr_idx < shift)
		return SEARCH_NOT_ENOUGH;
	prev_idx = curr_idx - shift;
	if (prev_idx < s->w)
		return SEARCH_NOT_ENOUGH;

	curr = search_window_sum(s, s->w, 0, 0);
	prev = search_window_sum(s, s->w, shift, frac);
	s->norm_diff = search_norm_diff(prev, curr);
	if (!prev)
		return SEARCH_BELOW;	/* nothing delivered a window ago */

	/* exact test: (2 prev - curr) / (2 prev) >= thresh / 1000 */
	lhs = 2 * prev;
	if (curr >= lhs)
		return SEARCH_BELOW;
	lhs = (lhs - curr) * SEARCH_PERMILLE;
	rhs = 2 * prev * s->thresh;
	return lhs >= rhs ? SEARCH_EXIT : SEARCH_BELOW;
}

/*
 * Microseconds since the bins started (the connection's first RTT sample,
 * the last re-arm or the last restart), derived from the bin bookkeeping so
 * that no extra state is needed: the first bin ended at start + bin_dur and
 * each rolled bin adds one bin_dur to bin_end.  A lower bound once nbins has
 * saturated.
 */
static inline u32 search_elapsed_us(const struct search_state *s, u32 now_us)
{
	u32 start = s->bin_end_us - (u32)(((u64)s->nbins + 1) * s->bin_dur_us);

	return now_us - start;
}

#endif /* SEARCH_CORE_H */
