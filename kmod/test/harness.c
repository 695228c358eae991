// SPDX-License-Identifier: GPL-2.0
/*
 * Host harness for the algorithm cores of tcp_search and tcp_spline.
 *
 * Built by "make -C kmod test" with -fsanitize=address,undefined and
 * -fno-sanitize-recover=all, so any overflow of a signed value, shift out of
 * range, division by zero or out-of-bounds access aborts the run.  Every test
 * case below also makes real assertions about the results.  The last line is
 * "N passed, M failed"; the exit status is non-zero if anything failed.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cc_compat.h"
#include "cubic_core.h"
#include "search_core.h"
#include "spline_core.h"

/* ------------------------------------------------------------------ */
/* a very small test framework */

static int case_failures;

#define CHECK(cond) do {						\
	if (!(cond)) {							\
		fprintf(stderr, "    %s:%d: CHECK(%s) failed\n",	\
			__FILE__, __LINE__, #cond);			\
		case_failures++;					\
	}								\
} while (0)

#define CHECK_EQ(a, b) do {						\
	long long _a = (long long)(a), _b = (long long)(b);		\
	if (_a != _b) {							\
		fprintf(stderr, "    %s:%d: %s == %lld, expected %s == %lld\n", \
			__FILE__, __LINE__, #a, _a, #b, _b);		\
		case_failures++;					\
	}								\
} while (0)

#define CHECK_RANGE(v, lo, hi) do {					\
	double _v = (double)(v), _lo = (double)(lo), _hi = (double)(hi); \
	if (!(_v >= _lo && _v <= _hi)) {				\
		fprintf(stderr, "    %s:%d: %s == %g, not in [%g, %g]\n", \
			__FILE__, __LINE__, #v, _v, _lo, _hi);		\
		case_failures++;					\
	}								\
} while (0)

struct test_case {
	const char *name;
	void (*fn)(void);
};

/* ------------------------------------------------------------------ */
/* SEARCH */

static const struct search_params search_default = {
	SEARCH_WINDOW_FACTOR_DEF, SEARCH_W_DEF, SEARCH_EXTRA_DEF,
	SEARCH_THRESH_DEF, SEARCH_STALL_DEF
};

/* The paper's worked example: a window of 4 RTTs in 4 bins of one RTT. */
static const struct search_params search_paper = { 40, 4, 15, 350, 0 };

static void t_search_params_check(void)
{
	struct search_params zero = { 0, 0, 0, 0, 0 };
	struct search_params huge = { 4000000000U, 4000000000U, 4000000000U,
				      4000000000U, 4000000000U };
	struct search_params p = search_default;
	struct search_state s = { 0 };

	CHECK_EQ(search_params_check(&search_default), SEARCH_PARAMS_OK);
	CHECK_EQ(search_params_check(&search_paper), SEARCH_PARAMS_OK);
	CHECK_EQ(search_params_check(&zero), SEARCH_BAD_RANGE);
	CHECK_EQ(search_params_check(&huge), SEARCH_BAD_RANGE);
	/* the defaults fit the ring: W + EXTRA_BINS + 1 slots */
	CHECK(SEARCH_W_DEF + SEARCH_EXTRA_DEF + 1 <= SEARCH_RING_BINS);

	/* each rule on its own, starting from the defaults */
	p.window_factor = 21;			/* W = 2: 20 / 21 bins */
	p.bins = 2;				/* per RTT, shift 0 */
	CHECK_EQ(search_params_check(&p), SEARCH_BAD_NO_CHECK);
	p = search_default;
	p.bins = 24;				/* ring leaves 1 bin */
	CHECK_EQ(search_params_check(&p), SEARCH_BAD_RING);
	p = search_default;
	p.extra_bins = 1;			/* the review's 0.49 BDP exit */
	CHECK_EQ(search_params_check(&p), SEARCH_BAD_RING);
	p.extra_bins = 5;			/* 2 * 2.86 = 5.7: floor 5 fits */
	CHECK_EQ(search_params_check(&p), SEARCH_PARAMS_OK);
	p.extra_bins = 4;
	CHECK_EQ(search_params_check(&p), SEARCH_BAD_RING);
	p = search_default;
	p.thresh = SEARCH_THRESH_SET_MIN - 1;
	CHECK_EQ(search_params_check(&p), SEARCH_BAD_THRESH);
	p.thresh = SEARCH_THRESH_SET_MIN;
	CHECK_EQ(search_params_check(&p), SEARCH_PARAMS_OK);
	p = search_default;
	p.stall_bins = 2;			/* one RTT is 2.86 bins */
	CHECK_EQ(search_params_check(&p), SEARCH_BAD_STALL);
	p.stall_bins = 3;
	CHECK_EQ(search_params_check(&p), SEARCH_PARAMS_OK);
	p.stall_bins = SEARCH_STALL_MAX + 1;
	CHECK_EQ(search_params_check(&p), SEARCH_BAD_RANGE);

	/* a flow handed an invalid set does not arm, and says so */
	p = search_default;
	p.bins = 24;
	s.flags = 3 << SEARCH_F_OWNER_SHIFT;	/* the caller's bits */
	CHECK(!search_arm(&s, &p, 0, 0, 10000));
	CHECK(!(s.flags & SEARCH_F_ARMED));
	CHECK(s.flags & SEARCH_F_INVALID);
	CHECK_EQ(s.flags & SEARCH_F_OWNER_MASK, 3 << SEARCH_F_OWNER_SHIFT);
	CHECK_EQ(search_update(&s, 1000000, 100, 10000), SEARCH_IDLE);
	CHECK_EQ(s.nbins, 0);
	/* ... and a valid set clears the mark */
	CHECK(search_arm(&s, &search_default, 0, 0, 10000));
	CHECK_EQ(s.flags, SEARCH_F_ARMED | (3 << SEARCH_F_OWNER_SHIFT));
	CHECK_EQ(s.w, 10);
	CHECK_EQ(s.max_shift, 15);
	CHECK_EQ(s.thresh, 350);
	CHECK_EQ(s.stall_bins, 0);
}

static void t_search_state_size(void)
{
	/* tcp_search.c: cubic + hystart + search (status in its flags) */
	size_t sz = sizeof(struct cubic_state) + sizeof(struct hystart_state) +
		    sizeof(struct search_state);

	CHECK(sz <= 104);
	CHECK(sizeof(struct spline_state) <= 104);
	CHECK_EQ(sizeof(struct hystart_state), 8);
}

static void t_search_bin_duration(void)
{
	struct search_state s = { 0 };

	search_arm(&s, &search_default, 1000, 0, 100000);	/* 100 ms */
	CHECK_EQ(s.bin_dur_us, 35000);
	CHECK_EQ(s.bin_end_us, 36000);
	CHECK(s.flags & SEARCH_F_ARMED);

	search_arm(&s, &search_default, 0, 0, 1);		/* 1 us RTT */
	CHECK_EQ(s.bin_dur_us, SEARCH_MIN_BIN_US);

	search_arm(&s, &search_default, 0, 0, 10000000);	/* 10 s */
	CHECK_EQ(s.bin_dur_us, 3500000);

	/* no RTT yet: nothing happens until the first sample */
	search_arm(&s, &search_default, 0, 0, 0);
	CHECK_EQ(s.bin_dur_us, 0);
	CHECK_EQ(search_update(&s, 500, 10, 0), SEARCH_IDLE);
	CHECK_EQ(s.bin_dur_us, 0);
	CHECK_EQ(search_update(&s, 600, 20, 20000), SEARCH_IDLE);
	CHECK_EQ(s.bin_dur_us, 7000);
	CHECK_EQ(s.prev_delivered, 20);
	CHECK_EQ(s.bin_end_us, 7600);

	/* disarmed: ignores everything */
	search_disarm(&s);
	CHECK_EQ(search_update(&s, 1000000, 999, 20000),
		 SEARCH_IDLE);
	CHECK_EQ(s.nbins, 0);
}

static void t_search_roll(void)
{
	struct search_state s = { 0 };
	u32 t;

	search_arm(&s, &search_default, 0, 100, 10000);	/* bins of 3.5 ms */
	CHECK_EQ(s.bin_dur_us, 3500);
	/* inside the first bin: nothing */
	CHECK_EQ(search_update(&s, 3500, 150, 10000),
		 SEARCH_IDLE);
	CHECK_EQ(s.nbins, 0);
	/* first boundary: bin 0 holds what came since arming */
	CHECK_EQ(search_update(&s, 3501, 170, 10000),
		 SEARCH_NOT_ENOUGH);
	CHECK_EQ(s.nbins, 1);
	CHECK_EQ(s.pos, 0);
	CHECK_EQ(search_bin(&s, 0), 70);
	CHECK_EQ(s.bin_end_us, 7000);
	/* further ACKs in the same bin do not roll */
	CHECK_EQ(search_update(&s, 6999, 200, 10000),
		 SEARCH_IDLE);
	CHECK_EQ(s.nbins, 1);
	for (t = 2; t <= 5; t++) {
		/* the ACK at 6999 did not roll: its data lands in bin 2 */
		search_update(&s, t * 3500 + 1,
			      200 + (t - 1) * 10, 10000);
		CHECK_EQ(s.nbins, t);
		CHECK_EQ(search_bin(&s, s.pos), t == 2 ? 40 : 10);
	}
	CHECK_EQ(s.pos, 4);
}

static void t_search_skipped_bins(void)
{
	struct search_state s = { 0 };
	u32 d = 0, i;

	search_arm(&s, &search_default, 0, 0, 10000);	/* 3.5 ms bins */
	for (i = 1; i <= 3; i++) {
		d += 100;
		search_update(&s, i * 3500 + 1, d, 10000);
	}
	CHECK_EQ(s.nbins, 3);
	/* an RTT spike: no ACK for 3.x bins, then a burst */
	d += 500;
	search_update(&s, 4 * 3500 + 3 * 3500 + 1, d, 10000);
	/* now - bin_end = 3 bins + 1 us -> passed = 4 */
	CHECK_EQ(s.nbins, 7);
	CHECK_EQ(search_bin(&s, search_slot(&s, 0)), 500);	/* all in the newest */
	CHECK_EQ(search_bin(&s, search_slot(&s, 1)), 0);
	CHECK_EQ(search_bin(&s, search_slot(&s, 2)), 0);
	CHECK_EQ(search_bin(&s, search_slot(&s, 3)), 0);
	CHECK_EQ(search_bin(&s, search_slot(&s, 4)), 100);
	CHECK_EQ(s.bin_end_us, 8 * 3500);

	/* a gap longer than the whole ring zeroes everything else */
	d += 7;
	search_update(&s, 8 * 3500 + 100 * 3500, d, 10000);
	CHECK_EQ(search_bin(&s, search_slot(&s, 0)), 7);
	for (i = 1; i < SEARCH_RING_BINS; i++)
		CHECK_EQ(search_bin(&s, search_slot(&s, i)), 0);
	CHECK_EQ(s.nbins, 108);
}

static void t_search_wrap(void)
{
	struct search_state s = { 0 };
	u32 t0 = 0xFFFFFFFFU - 50 * 1000;	/* the us clock wraps soon */
	u32 d0 = 0xFFFFFFFFU - 500;		/* so does delivered */
	u32 d = d0, i, bin = 1000;
	enum search_verdict v;

	/* 1000 us bins: rtt 1000 * 10 / 3.5 */
	search_arm(&s, &search_default, t0, d, 2858);
	CHECK_EQ(s.bin_dur_us, 1000);
	for (i = 1; i <= 80; i++) {
		d += i;		/* bin i holds i */
		v = search_update(&s, t0 + i * bin + 1, d,
				  2858);
		CHECK(v != SEARCH_IDLE);
		CHECK_EQ(search_bin(&s, s.pos), i);
	}
	CHECK_EQ(s.nbins, 80);
	CHECK_EQ(s.pos, 79 % SEARCH_RING_BINS);
	/* the ring holds the last 26 values, newest first */
	for (i = 0; i < SEARCH_RING_BINS; i++)
		CHECK_EQ(search_bin(&s, search_slot(&s, i)), 80 - i);
	/* elapsed time survives the clock wrap */
	CHECK_EQ(search_elapsed_us(&s, t0 + 80 * bin + 1), 80 * bin + 1);
}

static void t_search_window_sum(void)
{
	struct search_state s = { 0 };
	u32 i;

	/* the packed ring: every slot keeps its own 12 bits */
	for (i = 0; i < SEARCH_RING_BINS; i++)
		search_bin_set(&s, i, SEARCH_BIN_MAX - i * 157);
	search_bin_set(&s, 7, 1U << 20);		/* saturates */
	for (i = 0; i < SEARCH_RING_BINS; i++)
		CHECK_EQ(search_bin(&s, i),
			 i == 7 ? SEARCH_BIN_MAX : SEARCH_BIN_MAX - i * 157);
	CHECK_EQ(sizeof(s.bins), 39);
	/* bins 1..26 in time order; current bin holds 26 */
	for (i = 0; i < SEARCH_RING_BINS; i++)
		search_bin_set(&s, i, i + 1);
	s.pos = SEARCH_RING_BINS - 1;
	/* W = 4 newest: 26 + 25 + 24 + 23 */
	CHECK_EQ(search_window_sum(&s, 4, 0, 0), 98 * SEARCH_FRAC_ONE);
	/* shifted back 2: 24 + 23 + 22 + 21 */
	CHECK_EQ(search_window_sum(&s, 4, 2, 0), 90 * SEARCH_FRAC_ONE);
	/* half fractions: 0.5 * 24 + 23 + 22 + 21 + 0.5 * 20 */
	CHECK_EQ(search_window_sum(&s, 4, 2, SEARCH_FRAC_ONE / 2),
		 88 * SEARCH_FRAC_ONE);
	/* quarter: 0.75 * 24 + 23 + 22 + 21 + 0.25 * 20 = 89 */
	CHECK_EQ(search_window_sum(&s, 4, 2, SEARCH_FRAC_ONE / 4),
		 89 * SEARCH_FRAC_ONE);
	/* the deepest window the ring allows: back + W = 25 */
	CHECK_EQ(search_window_sum(&s, 10, 15, SEARCH_FRAC_ONE),
		 (2 + 3 + 4 + 5 + 6 + 7 + 8 + 9 + 10 + 1) * SEARCH_FRAC_ONE);
}

static void t_search_interpolation(void)
{
	/* end to end: RTT of 1.5 bins -> shift 1, fraction 0.5 */
	struct search_params p = { 40, 4, 15, 1000, 0 };
	struct search_state s = { 0 };
	u32 d = 0, i, bin = 1000000;
	static const u32 vals[] = { 10, 20, 30, 40, 50, 60, 70 };

	search_arm(&s, &p, 0, 0, bin);		/* window 4 bins of 1 s */
	for (i = 0; i < 7; i++) {
		d += vals[i];
		search_update(&s, (i + 1) * bin + 1, d, bin + bin / 2);
	}
	/* curr = 40 + 50 + 60 + 70 = 220;
	 * prev = 0.5*60 + 50 + 40 + 30 + 0.5*20 = 160 (shift 1, f = 0.5)
	 * norm = (320 - 220) / 320 = 0.3125 */
	CHECK_EQ(s.norm_diff, 312);
}

static void t_search_norm_diff(void)
{
	CHECK_EQ(search_norm_diff(30, 60), 0);
	CHECK_EQ(search_norm_diff(30, 44), 266);
	CHECK_EQ(search_norm_diff(64, 64), 500);
	CHECK_EQ(search_norm_diff(10, 0), 1000);
	CHECK_EQ(search_norm_diff(10, 30), -500);
	CHECK_EQ(search_norm_diff(0, 5), SEARCH_NORM_NONE);
	CHECK_EQ(search_norm_diff(0, 0), SEARCH_NORM_NONE);
	CHECK_EQ(search_norm_diff(1, U32_MAX), -32767);
	CHECK_EQ(search_norm_diff((u64)1 << 40, (u64)1 << 41), 0);
}

/* Feed one value per bin (bin = RTT = 1 s) with the paper's parameters. */
static enum search_verdict paper_feed(struct search_state *s, u32 *d,
				      u32 idx, u32 val)
{
	*d += val;
	return search_update(s, (idx + 1) * 1000000 + 1, *d,
			     1000000);
}

static void t_search_paper_doubling(void)
{
	struct search_state s = { 0 };
	u32 d = 0, i, v = 1;
	enum search_verdict r = SEARCH_IDLE;

	search_arm(&s, &search_paper, 0, 0, 1000000);
	CHECK_EQ(s.bin_dur_us, 1000000);
	for (i = 0; i < 12; i++, v *= 2) {
		r = paper_feed(&s, &d, i, v);
		CHECK(r != SEARCH_EXIT);
		if (i < 5)	/* prev_idx >= W needs 6 bins */
			CHECK_EQ(r, SEARCH_NOT_ENOUGH);
	}
	CHECK_EQ(r, SEARCH_BELOW);
	CHECK_EQ(s.norm_diff, 0);
}

static void t_search_paper_capacity(void)
{
	/* 1, 2, 4, 8, 16, 16, 16, ...: capacity reached at 16 (index 4) */
	static const u32 seq[] = { 1, 2, 4, 8, 16, 16, 16, 16, 16, 16, 16, 16 };
	struct search_params never = search_paper;
	struct search_state s = { 0 };
	u32 d = 0, i, fired = 0;
	s16 norm[12];

	never.thresh = 1000;	/* observe the values without exiting */
	search_arm(&s, &never, 0, 0, 1000000);
	for (i = 0; i < 12; i++) {
		d += seq[i];
		search_update(&s, (i + 1) * 1000000 + 1, d, 1000000);
		norm[i] = s.norm_diff;
	}
	/* current window 4+8+16+16 = 44, previous 2+4+8+16 = 30 */
	CHECK_EQ(norm[5], 266);			/* (60 - 44) / 60 ~ 0.27 */
	CHECK_EQ(norm[6], 363);			/* (88 - 56) / 88 */
	CHECK_EQ(norm[11], 500);		/* plateau */
	for (i = 5; i < 11; i++)
		CHECK(norm[i] <= norm[i + 1]);

	/* with THRESH = 0.35 it fires 2 RTTs after capacity (index 6) */
	memset(&s, 0, sizeof(s));
	d = 0;
	search_arm(&s, &search_paper, 0, 0, 1000000);
	for (i = 0; i < 12 && !fired; i++)
		if (paper_feed(&s, &d, i, seq[i]) == SEARCH_EXIT)
			fired = i;
	CHECK_EQ(fired, 6);
	CHECK_EQ(fired - 4, 2);
}

/*
 * Continuous slow start with the default parameters: ACKs every 1 ms, RTT
 * 100 ms, delivery rate doubling every RTT until capacity is reached.
 * Returns the exit time in us (0 if none within @dur_us).
 */
static u32 sim_slow_start(u32 cap_rate, u32 dur_us, u32 jitter_pct,
			  const struct search_params *p)
{
	const u32 rtt = 100000, step = 1000;
	struct search_state s = { 0 };
	double rate = 10.0 / 0.1;	/* 10 segments per 100 ms, per s */
	double delivered = 0;
	u32 t, seed = 12345;

	search_arm(&s, p, 0, 0, rtt);
	for (t = step; t <= dur_us; t += step) {
		u32 r = rtt;

		if (jitter_pct) {
			seed = seed * 1103515245U + 12345U;
			r = rtt - rtt * jitter_pct / 100 +
			    (seed >> 8) % (2 * rtt * jitter_pct / 100 + 1);
		}
		rate *= 1.0 + 0.00695;	/* 2^(1/100): doubles per RTT */
		if (rate > cap_rate)
			rate = cap_rate;
		delivered += rate * step / 1e6;
		if (search_update(&s, t, (u32)delivered, r) == SEARCH_EXIT)
			return t;
	}
	return 0;
}

static void t_search_default_timing(void)
{
	/* capacity 100000 segments/s reached at: 100 * 2^k = 1e5 -> k ~ 9.97
	 * RTTs = ~997 ms */
	const double t_cap = 0.1 * 9.966;
	u32 t_exit = sim_slow_start(100000, 5000000, 0, &search_default);
	u32 t_free;

	CHECK(t_exit > 0);
	/* "about 2 RTTs after capacity": accept 1 to 3.5 RTTs */
	CHECK_RANGE((t_exit / 1e6 - t_cap) / 0.1, 1.0, 3.5);

	/* unbounded doubling for 2 s (20 RTTs): never exits */
	t_free = sim_slow_start(2000000000U, 2000000, 0, &search_default);
	CHECK_EQ(t_free, 0);
	/* +-10 % RTT jitter does not cause an early exit either */
	t_free = sim_slow_start(2000000000U, 2000000, 10, &search_default);
	CHECK_EQ(t_free, 0);
	t_exit = sim_slow_start(100000, 5000000, 10, &search_default);
	CHECK_RANGE((t_exit / 1e6 - t_cap) / 0.1, 0.5, 4.0);
}

/*
 * An RTT sample that reaches further back than the ring is skipped, as
 * Algorithm 1 (line 16) does; it is never clamped to a shorter shift.
 */
static void t_search_rtt_spike_skip(void)
{
	struct search_state s = { 0 };
	u32 d = 0, i;
	enum search_verdict v = SEARCH_IDLE;

	search_arm(&s, &search_default, 0, 0, 10000);	/* 3.5 ms bins */
	for (i = 1; i <= 30; i++) {
		d += 100;
		/* RTT 100 ms = 28 bins: beyond EXTRA_BINS: no check at all */
		v = search_update(&s, i * 3500 + 1, d, 100000);
		CHECK(v == SEARCH_NOT_ENOUGH || v == SEARCH_SKIPPED);
	}
	CHECK_EQ(v, SEARCH_SKIPPED);
	CHECK_EQ(s.norm_diff, SEARCH_NORM_NONE);
	/* the deepest shift that still fits is checked: 15 bins + 0.99 */
	v = search_update(&s, 31 * 3500 + 1, d + 100, 16 * 3500 - 1);
	CHECK_EQ(v, SEARCH_EXIT);
	CHECK_EQ(s.norm_diff, 500);			/* flat delivery */
	/* one bin more is skipped again */
	v = search_update(&s, 32 * 3500 + 1, d + 200, 16 * 3500);
	CHECK_EQ(v, SEARCH_SKIPPED);

	/* RTT shorter than a bin: shift 0, no comparison */
	memset(&s, 0, sizeof(s));
	search_arm(&s, &search_default, 0, 0, 10000);
	for (i = 1; i <= 30; i++)
		v = search_update(&s, i * 3500 + 1, i * 100,
				  1000);
	CHECK_EQ(v, SEARCH_NOT_ENOUGH);
	CHECK_EQ(s.norm_diff, SEARCH_NORM_NONE);
	/* no RTT sample: the bins roll, nothing is compared */
	v = search_update(&s, 31 * 3500 + 1, 3100, 0);
	CHECK_EQ(v, SEARCH_NOT_ENOUGH);
	CHECK_EQ(s.nbins, 31);
}

/*
 * The whole accepted parameter space, run through a clean doubling slow
 * start: the delivery rate doubles every RTT, the RTT stays at the initial
 * RTT, ACKs come 8 per bin.  For every (window_factor, W, EXTRA_BINS) that
 * search_params_check() accepts with some THRESH, SEARCH must run at least
 * one check, and the largest norm_diff it sees must stay below the smallest
 * THRESH accepted - so no accepted set exits before capacity, whatever
 * THRESH and stall_bins are (no bin is ever missed here, and a higher
 * THRESH only exits later).  The prefix of any capacity-limited slow start
 * is this run, so "never during doubling" is "never before capacity".
 */
struct doubling_result {
	u32 checks;
	u32 exits;
	s32 max_norm;
};

static struct doubling_result sim_doubling(const struct search_params *p,
					   u32 jitter_pct)
{
	const u32 rtt = 100000;
	struct doubling_result r = { 0, 0, -32768 };
	struct search_state s = { 0 };
	double b = 10.0 * p->bins / p->window_factor;	/* bins per RTT */
	u32 shift2 = 2 * 10 * p->bins / p->window_factor;
	u32 total, step, t, end, seed = 777;

	if (!search_arm(&s, p, 0, 100, rtt))	/* delivered(0) below */
		return r;
	step = s.bin_dur_us / 8;
	total = p->bins + shift2 + 1 + 3 * ((u32)b + 1) + 4;
	end = total * s.bin_dur_us;
	for (t = step; t <= end; t += step) {
		/* cumulative delivered of a rate doubling every RTT */
		double d = 100.0 * pow(2.0, (double)t / rtt);
		u32 r_us = rtt;
		enum search_verdict v;

		if (jitter_pct) {
			seed = seed * 1103515245U + 12345U;
			r_us = rtt - rtt * jitter_pct / 100 +
			       (seed >> 8) % (2 * rtt * jitter_pct / 100 + 1);
		}
		v = search_update(&s, t, (u32)fmod(d, 4294967296.0), r_us);
		if (v == SEARCH_BELOW || v == SEARCH_EXIT) {
			r.checks++;
			if (s.norm_diff > r.max_norm)
				r.max_norm = s.norm_diff;
		}
		if (v == SEARCH_EXIT)
			r.exits++;
	}
	return r;
}

static void t_search_param_space(void)
{
	struct search_params p;
	u32 wf, w, x, accepted = 0, refused = 0, no_check = 0, early = 0;
	s32 worst = -32768, worst_jit = -32768;
	u32 worst_wf = 0, worst_w = 0;

	for (wf = SEARCH_WINDOW_FACTOR_MIN; wf <= SEARCH_WINDOW_FACTOR_MAX; wf++)
	for (w = SEARCH_W_MIN; w <= SEARCH_W_MAX; w++)
	for (x = SEARCH_EXTRA_MIN; x <= SEARCH_EXTRA_MAX; x++) {
		struct doubling_result r;

		/* the most exit-prone THRESH and stall rule accepted */
		p = (struct search_params){ wf, w, x, SEARCH_THRESH_SET_MIN,
					    10 * w / wf + 1 };
		if (search_params_check(&p) != SEARCH_PARAMS_OK) {
			/* then no THRESH or stall_bins makes it valid */
			u32 th;

			for (th = SEARCH_THRESH_MIN; th <= SEARCH_THRESH_MAX;
			     th += 7) {
				p.thresh = th;
				p.stall_bins = 0;
				CHECK(search_params_check(&p) != SEARCH_PARAMS_OK);
			}
			refused++;
			continue;
		}
		accepted++;
		r = sim_doubling(&p, 0);
		if (!r.checks)
			no_check++;
		if (r.exits)
			early++;
		if (r.max_norm > worst) {
			worst = r.max_norm;
			worst_wf = wf;
			worst_w = w;
		}
		/* +-5 % RTT jitter on every ACK still stays below the floor */
		r = sim_doubling(&p, 5);
		if (r.exits)
			early++;
		if (r.max_norm > worst_jit)
			worst_jit = r.max_norm;
	}
	printf("    %u (wf, W, extra) sets accepted, %u refused; worst clean norm_diff %d (wf %u, W %u), with 5%% jitter %d\n",
	       accepted, refused, worst, worst_wf, worst_w, worst_jit);
	CHECK(accepted > 1000);
	CHECK_EQ(no_check, 0);
	CHECK_EQ(early, 0);
	CHECK(worst < SEARCH_THRESH_SET_MIN / 2);
	CHECK(worst_jit < SEARCH_THRESH_SET_MIN);
	/* the defaults and the VM test's single-value writes are accepted */
	p = search_default;
	CHECK_EQ(search_params_check(&p), SEARCH_PARAMS_OK);
	p.bins = 12;
	CHECK_EQ(search_params_check(&p), SEARCH_PARAMS_OK);
	p = search_default;
	p.extra_bins = 14;
	CHECK_EQ(search_params_check(&p), SEARCH_PARAMS_OK);
	p = search_default;
	p.window_factor = 40;
	CHECK_EQ(search_params_check(&p), SEARCH_PARAMS_OK);
	p = search_default;
	p.thresh = 250;
	CHECK_EQ(search_params_check(&p), SEARCH_PARAMS_OK);
}

static void t_search_scale(void)
{
	struct search_state s = { 0 };
	struct search_params never = search_default;
	u32 d = 0, i;

	never.thresh = 1000;
	search_arm(&s, &never, 0, 0, 10000);
	/* 3e8 per bin (10 Gbit/s of bytes for 3.5 ms is 4.4e6; this is more) */
	for (i = 1; i <= 40; i++) {
		d += 300000000U;		/* wraps u32 several times */
		search_update(&s, i * 3500 + 1, d, 10000);
	}
	CHECK(s.scale > 0);
	CHECK(search_bin(&s, s.pos) > SEARCH_BIN_MAX / 2);	/* precise */
	CHECK_EQ(s.norm_diff, 500);		/* plateau, whatever the scale */

	/* growing values: a scale change in mid-run keeps the ratio */
	memset(&s, 0, sizeof(s));
	search_arm(&s, &never, 0, 0, 10000);
	d = 0;
	for (i = 1; i <= 40; i++) {
		d += 1000U * i * i;
		search_update(&s, i * 3500 + 1, d, 10000);
	}
	CHECK(s.scale > 0);
	{
		/* the same sums in floating point: bin k holds 1000 (k+1)^2;
		 * RTT 10 ms = 2 bins + 3000/3500 (877/1024 in fixed point) */
		double v[40], curr = 0, prev, f = 877.0 / 1024.0, ref;
		int k;

		for (k = 0; k < 40; k++)
			v[k] = 1000.0 * (k + 1) * (k + 1);
		for (k = 30; k <= 39; k++)
			curr += v[k];
		prev = v[37] * (1 - f) + v[27] * f;
		for (k = 28; k <= 36; k++)
			prev += v[k];
		ref = (2 * prev - curr) / (2 * prev) * 1000;
		CHECK_RANGE(s.norm_diff, ref - 3, ref + 3);
	}
}

static void t_search_zero_and_extremes(void)
{
	struct search_state s = { 0 };
	u32 i;
	enum search_verdict v = SEARCH_IDLE;

	/* nothing delivered at all */
	search_arm(&s, &search_default, 0, 0, 10000);
	for (i = 1; i <= 40; i++)
		v = search_update(&s, i * 3500 + 1, 0, 10000);
	CHECK_EQ(v, SEARCH_BELOW);
	CHECK_EQ(s.norm_diff, SEARCH_NORM_NONE);

	/* RTT 1 us: bins of 100 us, ACKs every microsecond */
	memset(&s, 0, sizeof(s));
	search_arm(&s, &search_default, 0, 0, 1);
	for (i = 1; i <= 5000; i++)
		v = search_update(&s, i, i, 1);
	CHECK_EQ(s.nbins, 49);
	CHECK_EQ(v, SEARCH_IDLE);

	/* RTT 10 s, 1 kbit/s: one segment every 11.6 s */
	memset(&s, 0, sizeof(s));
	search_arm(&s, &search_default, 0, 0, 10000000);
	for (i = 1; i <= 20; i++)
		v = search_update(&s, i * 11600000U, i,
				  10000000);
	CHECK(v != SEARCH_EXIT || s.norm_diff >= 350);

	/* the bin counter saturates; SEARCH stays armed and keeps checking */
	memset(&s, 0, sizeof(s));
	search_arm(&s, &search_default, 0, 0, 1);	/* 100 us bins */
	v = search_update(&s, 100U * 70000U, 5, 1);
	CHECK_EQ(v, SEARCH_NOT_ENOUGH);			/* 1 us: shift 0 */
	CHECK_EQ(s.nbins, SEARCH_NBINS_MAX);
	CHECK(s.flags & SEARCH_F_ARMED);
	for (i = 1; i <= 30; i++)
		v = search_update(&s, 100U * (70000U + i), 5 + 10 * i, 300);
	CHECK_EQ(v, SEARCH_EXIT);			/* 3 bins: checked */
	CHECK_EQ(s.norm_diff, 500);			/* a flat rate */
	CHECK_EQ(s.nbins, SEARCH_NBINS_MAX);
}

/*
 * A packet-level model of one tcp_search flow, for the cases the fluid runs
 * cannot show: ACK-path stalls, an application-limited sender, an undone
 * recovery, an RTO onto another path.  One FIFO bottleneck of rate_pps with
 * an unlimited buffer, a base RTT, one ACK per packet, an unpaced sender
 * whose slow start adds one segment per ACKed segment while it is
 * cwnd-limited (as the kernel's tcp_is_cwnd_limited() allows).  The per-ACK
 * glue mirrors tcp_search.c: search_acked() (app-limited -> search_hold(),
 * else search_update(); HyStart), search_ssthresh(), search_undo_cwnd()
 * and search_set_state(TCP_CA_Loss).  The "rule" switches turn one module
 * rule off to show what it prevents.
 */
/*
 * Algorithm 1 transcribed literally in double precision, for comparison:
 * bytes are segments, a ring long enough never to alias, line numbers in
 * the comments.  It only watches; the flow follows the module.
 */
#define PAPER_RING	64

struct paper_search {
	double bin[PAPER_RING];
	double bin_duration, bin_end;
	long curr_idx;
	u32 prev_seq;
	double w, extra, thresh;
};

static void paper_init(struct paper_search *ps, const struct search_params *p,
		       double now, u32 seq, double initial_rtt)
{
	memset(ps, 0, sizeof(*ps));
	ps->w = p->bins;
	ps->extra = p->extra_bins;
	ps->thresh = p->thresh / 1000.0;
	ps->bin_duration = initial_rtt * p->window_factor / 10.0 / ps->w;
	ps->curr_idx = -1;				/* 9 */
	ps->prev_seq = seq;				/* 10 */
	ps->bin_end = now + ps->bin_duration;		/* 11 */
}

static double paper_sum(const struct paper_search *ps, long i1, long i2,
			double f)
{
	double sum = 0;
	long i;

	for (i = i1 + 1; i <= i2 - 1; i++)		/* 35-37 */
		sum += ps->bin[i % PAPER_RING];
	sum += ps->bin[i1 % PAPER_RING] * f;		/* 38 */
	sum += ps->bin[i2 % PAPER_RING] * (1 - f);	/* 39 */
	return sum;
}

/* ack_arrival(): true when line 21 fires. */
static bool paper_ack(struct paper_search *ps, double now, u32 seq,
		      double rtt)
{
	long passed, i, prev_idx;
	double curr, prev, f;

	if (!(now > ps->bin_end))			/* 12 */
		return false;
	passed = (long)((now - ps->bin_end) / ps->bin_duration) + 1; /* 26 */
	ps->bin_end += passed * ps->bin_duration;	/* 27 */
	for (i = ps->curr_idx + 1; i <= ps->curr_idx + passed; i++)
		ps->bin[i % PAPER_RING] = 0;		/* 28-30 */
	ps->curr_idx += passed;				/* 31 */
	ps->bin[ps->curr_idx % PAPER_RING] = seq - ps->prev_seq; /* 32 */
	ps->prev_seq = seq;				/* 33 */
	prev_idx = ps->curr_idx - (long)(rtt / ps->bin_duration); /* 14 */
	if (!(prev_idx >= ps->w && ps->curr_idx - prev_idx <= ps->extra))
		return false;				/* 15-16 */
	if (ps->curr_idx == prev_idx)
		return false;	/* shift 0: the module's guard, see search_core.h */
	curr = paper_sum(ps, ps->curr_idx - (long)ps->w, ps->curr_idx, 0);
	f = fmod(rtt, ps->bin_duration) / ps->bin_duration;	/* 18 */
	prev = paper_sum(ps, prev_idx - (long)ps->w, prev_idx, f); /* 19 */
	if (prev <= 0)
		return false;
	return (2 * prev - curr) / (2 * prev) >= ps->thresh;	/* 20-21 */
}

#define PK_RING		(1U << 18)
#define PK_INF_SSTHRESH	0x7fffffffU

struct pk_cfg {
	u32 rate_pps, rtt_us;		/* the path */
	u64 stall_at, stall_len;	/* ACKs due in this span are held */
	u32 stall_at_cwnd;		/* or: the span starts when cwnd
					 * first reaches this (0: unused) */
	u32 app_pps;			/* 0: bulk sender */
	u64 app_bulk_at;		/* the app turns bulk then (0: never) */
	u64 loss_at;			/* a spurious fast recovery, undone
					 * one RTT later (0: none) */
	u64 rto_at;			/* an RTO onto path 2 (0: none) */
	u32 rate2_pps, rtt2_us;
	bool no_hold;			/* rule off: ignore app-limited */
	bool no_undo_rearm;		/* rule off: undo does not re-arm */
	bool keep_delay_min;		/* rule off: RTO keeps delay_min */
	bool hystart;
	struct search_params par;
	u64 dur_us;
};

struct pk_result {
	u64 exit_us;		/* 0: no exit (other than by loss) */
	u32 exit_cwnd;
	u32 reason;		/* 1 SEARCH, 2 HyStart */
	u32 checks, skipped, restarts, holds;
	u32 bin_dur_rto;	/* SEARCH's bin after the RTO */
	u32 max_cwnd;
	u64 paper_exit_us;	/* Algorithm 1's first exit, up to the
				 * module's (bulk runs without an RTO) */
	u32 paper_exit_cwnd;
};

static u64 pk_send_t[PK_RING], pk_ack_t[PK_RING];

/* When the ACK due at @due reaches the sender: held ACKs leave together. */
static u64 pk_arrival(u64 due, u64 stall_at, u64 stall_len)
{
	if (stall_len && due >= stall_at && due < stall_at + stall_len)
		return stall_at + stall_len;
	return due;
}

static struct pk_result pk_run(const struct pk_cfg *cfg)
{
	struct pk_result res = { 0 };
	struct search_state s = { 0 };
	struct cubic_state c = { 0 };
	struct hystart_state h = { 0 };
	u64 now = 0, link_free = 0, undo_at = 0;
	u32 rate = cfg->rate_pps, rtt = cfg->rtt_us;
	u32 cwnd = 10, ssthresh = PK_INF_SSTHRESH, prior_cwnd = 0;
	u32 sent = 0, acked = 0, app_limited = 0;
	u32 status = 0;		/* enum search_status of tcp_search.c */
	bool rto_done = false;
	static struct paper_search ps;
	u64 stall_at = cfg->stall_at_cwnd ? UINT64_MAX : cfg->stall_at;

	cubic_rtt_sample(&c, rtt);
	search_arm(&s, &cfg->par, 0, 0, rtt);
	paper_init(&ps, &cfg->par, 0, 0, rtt);
	hystart_round(&h, 0);

	while (now < cfg->dur_us && !res.exit_us) {
		u64 next_ack = acked != sent ?
			       pk_arrival(pk_ack_t[acked % PK_RING], stall_at,
					  cfg->stall_len) : UINT64_MAX;
		u64 next_app = UINT64_MAX, next = next_ack;
		u32 inflight = sent - acked;
		bool bulk = !cfg->app_pps ||
			    (cfg->app_bulk_at && now >= cfg->app_bulk_at);

		/* send what cwnd and the application allow */
		while (inflight < cwnd && inflight < PK_RING - 1) {
			u64 avail = bulk ? UINT64_MAX :
				    10 + now * cfg->app_pps / 1000000;
			u64 service = 1000000 / rate, depart, due;

			if (sent >= avail) {
				/* room in cwnd, nothing to send */
				app_limited = (acked + inflight) ? : 1;
				next_app = ((u64)sent + 1 - 10) * 1000000 /
					   cfg->app_pps + 1;
				break;
			}
			depart = cc_max64(now, link_free) + service;
			link_free = depart;
			due = depart + rtt;
			pk_send_t[sent % PK_RING] = now;
			pk_ack_t[sent % PK_RING] = due;
			sent++;
			inflight++;
		}
		next_ack = acked != sent ?
			   pk_arrival(pk_ack_t[acked % PK_RING], stall_at,
				      cfg->stall_len) : UINT64_MAX;
		next = cc_min64(next_ack, next_app);
		if (cfg->loss_at && cfg->loss_at > now)
			next = cc_min64(next, cfg->loss_at);
		if (undo_at > now)
			next = cc_min64(next, undo_at);
		if (cfg->rto_at && !rto_done)
			next = cc_min64(next, cfg->rto_at);
		if (next == UINT64_MAX)
			break;
		now = cc_max64(now, next);

		if (cfg->rto_at && !rto_done && now >= cfg->rto_at) {
			/* search_ssthresh(), then search_set_state(Loss) */
			rto_done = true;
			if (status == 0 && cwnd < ssthresh)
				status = 3;
			ssthresh = cubic_on_loss(&c, cwnd, true);
			cwnd = 1;
			acked = sent;		/* everything in flight is lost */
			link_free = now;
			rate = cfg->rate2_pps;
			rtt = cfg->rtt2_us;
			if (cfg->keep_delay_min) {
				u32 keep = c.delay_min_us;

				cubic_reset(&c);
				c.delay_min_us = keep;
			} else {
				cubic_reset(&c);
			}
			search_arm(&s, &cfg->par, (u32)now, acked,
				   c.delay_min_us);
			hystart_round(&h, sent);
			status = 0;
			continue;
		}
		if (cfg->loss_at && now == cfg->loss_at && !undo_at) {
			/* fast recovery entered: search_ssthresh() */
			if (status == 0 && cwnd < ssthresh) {
				search_disarm(&s);
				status = 3;
			}
			prior_cwnd = cwnd;
			ssthresh = cubic_on_loss(&c, cwnd, true);
			cwnd = ssthresh;
			undo_at = now + rtt;
			continue;
		}
		if (undo_at && now == undo_at) {
			/* DSACKs prove it spurious: search_undo_cwnd() */
			undo_at = UINT64_MAX;
			if (!cfg->no_undo_rearm && status == 3) {
				search_arm(&s, &cfg->par, (u32)now, acked,
					   c.delay_min_us);
				hystart_round(&h, sent);
				status = 0;
			}
			cwnd = cc_max32(cwnd, prior_cwnd);
			ssthresh = PK_INF_SSTHRESH;
			continue;
		}
		if (now < next_ack)
			continue;		/* application data arrived */

		/* one ACK: search_acked(), then cong_avoid */
		{
			u32 r_us = (u32)(now - pk_send_t[acked % PK_RING]);
			u32 before = sent - acked;
			enum search_verdict v = SEARCH_IDLE;

			acked++;
			if (app_limited && acked > app_limited)
				app_limited = 0;
			if (!res.paper_exit_us && !rto_done &&
			    paper_ack(&ps, (double)now, acked, r_us)) {
				res.paper_exit_us = now;
				res.paper_exit_cwnd = cwnd;
			}
			cubic_rtt_sample(&c, r_us);
			if (status == 0 && cwnd >= ssthresh) {
				search_disarm(&s);
				status = 5;
			}
			if (status == 0) {
				if (app_limited && !cfg->no_hold) {
					search_hold(&s, (u32)now, acked);
					res.holds++;
				} else {
					v = search_update(&s, (u32)now, acked,
							  r_us);
				}
				res.checks += v == SEARCH_BELOW ||
					      v == SEARCH_EXIT;
				res.skipped += v == SEARCH_SKIPPED;
				res.restarts += v == SEARCH_RESTARTED;
				if (v == SEARCH_EXIT) {
					res.reason = 1;
				} else if (cfg->hystart &&
					   hystart_update(&h, acked, sent, r_us,
							  c.delay_min_us,
							  cwnd)) {
					res.reason = 2;
				}
				if (res.reason) {
					ssthresh = cwnd;
					res.exit_us = now;
					res.exit_cwnd = cwnd;
					search_disarm(&s);
					status = res.reason;
				}
			}
			if (rto_done && !res.bin_dur_rto)
				res.bin_dur_rto = s.bin_dur_us;
			/* slow start while cwnd-limited, else Reno-like */
			if (cwnd < 2 * before && cwnd < ssthresh)
				cwnd++;
			res.max_cwnd = cc_max32(res.max_cwnd, cwnd);
			if (cfg->stall_at_cwnd && stall_at == UINT64_MAX &&
			    cwnd >= cfg->stall_at_cwnd)
				stall_at = now;
		}
	}
	return res;
}

/* 5 Gbit/s of 1448-byte segments x 30 ms: BDP 12949 segments. */
#define PK_FAST_PPS	431630U
#define PK_FAST_RTT	30000U
#define PK_FAST_BDP	(PK_FAST_PPS * (PK_FAST_RTT / 1000) / 1000)

static struct pk_cfg pk_fast(u64 stall_at_ms, u64 stall_ms, u32 stall_bins)
{
	struct pk_cfg cfg = {
		.rate_pps = PK_FAST_PPS, .rtt_us = PK_FAST_RTT,
		.stall_at = stall_at_ms * 1000, .stall_len = stall_ms * 1000,
		.par = search_default, .dur_us = 2000000,
	};

	cfg.par.stall_bins = stall_bins;
	return cfg;
}

/* A clean path: SEARCH leaves slow start after capacity, not before. */
static void t_search_pk_clean(void)
{
	struct pk_cfg cfg = pk_fast(0, 0, 0);
	struct pk_result r = pk_run(&cfg);

	printf("    clean 5 Gbit/s x 30 ms: exit at %.2f BDP, %u checks\n",
	       (double)r.exit_cwnd / PK_FAST_BDP, r.checks);
	CHECK_EQ(r.reason, 1);
	CHECK_RANGE((double)r.exit_cwnd / PK_FAST_BDP, 1.0, 10.0);
	CHECK_EQ(r.exit_us, r.paper_exit_us);	/* same ACK as Algorithm 1 */
	cfg.par.stall_bins = 3;			/* no stall: same exit */
	CHECK_EQ(pk_run(&cfg).exit_cwnd, r.exit_cwnd);
}

/*
 * The VM's GEO path, 50 Mbit/s x 600 ms (BDP 2590 segments), unlimited
 * buffer: none of the rules may move the exit (README: cwnd ~ 16000 at
 * 8.6-8.9 s in the VM and in a packet-level model).
 */
static void t_search_pk_geo(void)
{
	struct pk_cfg cfg = {
		.rate_pps = 4317, .rtt_us = 600000,
		.par = search_default, .dur_us = 20000000,
	};
	struct pk_result r = pk_run(&cfg);

	printf("    GEO: exit at %.2f s, cwnd %u (%.2f BDP)\n", r.exit_us / 1e6,
	       r.exit_cwnd, r.exit_cwnd / 2590.0);
	CHECK_EQ(r.reason, 1);
	CHECK_RANGE(r.exit_us / 1e6, 7.5, 10.0);
	CHECK_RANGE(r.exit_cwnd, 12000, 20000);
	CHECK_EQ(r.exit_us, r.paper_exit_us);
	cfg.par.stall_bins = 3;
	CHECK_EQ(pk_run(&cfg).exit_cwnd, r.exit_cwnd);
}

/*
 * An ACK stall of 150-200 ms (5-7 RTT) during slow start on a 30 ms path.
 * The RTT samples of the held ACKs reach past the ring, so those checks are
 * skipped, as in Algorithm 1, and slow start goes on past capacity.  With
 * the old clamp the module left at 0.01-0.41 BDP in the first five cases.
 * In the last one the burst the stall releases lands at the edge of the
 * previous window on the first check after it; Algorithm 1 exits there too
 * (norm_diff ~ 0.5), so it is asserted only with the stall rule on.  In
 * every case the module (rule off) leaves on the same ACK as the literal
 * transcription of Algorithm 1.
 */
static void t_search_pk_long_stall(void)
{
	static const u32 cases[][3] = {
		/* stall at ms, for ms, paper keeps slow start */
		{ 150, 150, 1 }, { 200, 150, 1 }, { 250, 200, 1 },
		{ 300, 150, 1 }, { 300, 200, 1 }, { 150, 200, 1 },
		{ 200, 200, 1 }, { 250, 150, 0 },
	};
	u32 i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct pk_cfg cfg = pk_fast(cases[i][0], cases[i][1], 0);
		struct pk_result r = pk_run(&cfg), on;

		cfg.par.stall_bins = 3;
		on = pk_run(&cfg);
		printf("    stall at %u ms for %u ms: exit at %.2f BDP (%u skipped; Algorithm 1 %.2f BDP), with stall_bins=3 at %.2f BDP\n",
		       cases[i][0], cases[i][1],
		       (double)r.exit_cwnd / PK_FAST_BDP, r.skipped,
		       (double)r.paper_exit_cwnd / PK_FAST_BDP,
		       (double)on.exit_cwnd / PK_FAST_BDP);
		CHECK_EQ(on.reason, 1);
		CHECK(on.exit_cwnd >= PK_FAST_BDP);
		/* the module leaves on the same ACK as Algorithm 1 */
		CHECK_EQ(r.exit_us, r.paper_exit_us);
		if (!cases[i][2])
			continue;
		CHECK(r.skipped > 0);
		CHECK_EQ(r.reason, 1);
		CHECK(r.exit_cwnd >= PK_FAST_BDP);
	}
}

/*
 * Shorter ACK stalls, 2-7 RTT, with the stall rule off (the paper) and on
 * (stall_bins = 3, the smallest the defaults accept).  Off: some of them end
 * slow start early, on the same ACK as Algorithm 1; the test asserts that
 * and that there is at least one.  On: none does.
 */
static void t_search_pk_stalls_rule(void)
{
	static const u32 at[] = { 150, 200, 250, 300 };
	u32 i, k, early_off = 0, early_on = 0, runs = 0;

	for (i = 0; i < 4; i++)
		for (k = 2; k <= 7; k++) {
			struct pk_cfg cfg = pk_fast(at[i], k * 30, 0);
			struct pk_result off = pk_run(&cfg), on;

			cfg.par.stall_bins = 3;
			on = pk_run(&cfg);
			runs++;
			/* rule off: the module is Algorithm 1, ACK for ACK */
			CHECK_EQ(off.exit_us, off.paper_exit_us);
			early_off += off.exit_cwnd < PK_FAST_BDP;
			early_on += on.exit_cwnd < PK_FAST_BDP;
			CHECK(on.restarts > 0);
			CHECK_EQ(on.reason, 1);
			CHECK(on.exit_cwnd >= PK_FAST_BDP);
			if (off.exit_cwnd < PK_FAST_BDP || k == 2)
				printf("    stall at %u ms for %u RTT: rule off %.2f BDP, on %.2f BDP\n",
				       at[i], k,
				       (double)off.exit_cwnd / PK_FAST_BDP,
				       (double)on.exit_cwnd / PK_FAST_BDP);
		}
	printf("    %u runs: early exits %u with the rule off, %u with it on\n",
	       runs, early_off, early_on);
	CHECK(early_off > 0);		/* the paper's behaviour is visible */
	CHECK_EQ(early_on, 0);
}

/*
 * Lab 4's ACK-stall experiment (labs/lab4/quick/geo-stall-*.toml): GEO at
 * 10 Mbit/s x 600 ms (BDP 518 segments), the ACK path held for 2.4 s (4 RTT)
 * from a fixed time of the run.  Unpaced slow start on this path delivers in
 * bursts: cwnd doubles during one burst of ACKs per RTT and is flat between
 * them.  A hold that starts anywhere from the end of the burst that takes
 * cwnd to about 320 until the next burst reaches the BDP (1 RTT of the
 * model's time, 3.2-3.8 s after the first send) makes the paper's rule leave
 * slow start below the BDP; stall_bins = 3 never does.  Outside that span
 * the paper's rule exits early only sometimes (half the starts one RTT
 * earlier), so the lab places its hold in the middle of the span.
 */
static void t_search_pk_lab4_stall(void)
{
	struct pk_cfg cfg = {
		.rate_pps = 863, .rtt_us = 600000, .stall_len = 2400000,
		.par = search_default, .dur_us = 20000000,
	};
	u32 early = 0, runs = 0;
	u64 at;

	for (at = 3200000; at <= 3800000; at += 50000) {
		struct pk_result off, on;

		cfg.stall_at = at;
		cfg.par.stall_bins = 0;
		off = pk_run(&cfg);
		cfg.par.stall_bins = 3;
		on = pk_run(&cfg);
		CHECK_EQ(off.exit_us, off.paper_exit_us);
		early += off.reason == 1 && off.exit_cwnd < 518;
		runs++;
		CHECK_EQ(on.reason, 1);
		CHECK(on.exit_cwnd >= 518);
		if (at % 200000 == 0)
			printf("    hold from %.2f s: stall_bins=0 %.2f BDP, =3 %.2f BDP\n",
			       at / 1e6, off.exit_cwnd / 518.0, on.exit_cwnd / 518.0);
	}
	printf("    %u holds: %u early exits with the paper's rule\n", runs, early);
	CHECK_EQ(early, runs);
}

/*
 * The VM's ACK-stall experiment (tests/vm/test_kmod.py): 50 Mbit/s x 200 ms
 * (BDP 863 segments), the ACK path held for 800 ms (4 RTT) from the moment
 * cwnd first reaches the trigger (the VM polls ss for cwnd >= 180, and may
 * see it a little late).  In this model stalls that start at cwnd 160-245
 * make the paper's behaviour leave slow start below the BDP (0.19-0.28
 * BDP), earlier or later ones do not; stall_bins = 3 always leaves by
 * SEARCH above the BDP.
 */
static void t_search_pk_vm_stall(void)
{
	static const u32 trigger[] = { 160, 180, 215, 245 };
	struct pk_cfg cfg = {
		.rate_pps = 4317, .rtt_us = 200000, .stall_len = 800000,
		.par = search_default, .dur_us = 10000000,
	};
	u32 i, early = 0;

	for (i = 0; i < 4; i++) {
		struct pk_result off, on;

		cfg.stall_at_cwnd = trigger[i];
		cfg.par.stall_bins = 0;
		off = pk_run(&cfg);
		cfg.par.stall_bins = 3;
		on = pk_run(&cfg);
		printf("    VM stall from cwnd %u: stall_bins=0 %.2f BDP, =3 %.2f BDP\n",
		       trigger[i], off.exit_cwnd / 863.0, on.exit_cwnd / 863.0);
		CHECK_EQ(off.exit_us, off.paper_exit_us);
		early += off.reason == 1 && off.exit_cwnd < 863;
		CHECK_EQ(on.reason, 1);
		CHECK(on.exit_cwnd >= 863);
	}
	CHECK(early >= 3);
}

/*
 * A sender limited by its application to 1/32 of the path's rate for 2 s,
 * then bulk.  While it is application-limited nothing is measured, so it
 * keeps slow start; once bulk, SEARCH leaves after capacity.  Without the
 * rule the flat delivery looks like a full pipe and slow start ends.
 */
static void t_search_pk_app_limited(void)
{
	struct pk_cfg cfg = {
		.rate_pps = 8633, .rtt_us = 50000,	/* 100 Mbit/s, 432 */
		.app_pps = 270, .app_bulk_at = 2000000,
		.par = search_default, .dur_us = 6000000,
	};
	struct pk_result r = pk_run(&cfg);
	u32 bdp = 8633 * 50 / 1000;

	printf("    app-limited then bulk: exit at %.2f s, %.2f BDP, %u holds\n",
	       r.exit_us / 1e6, (double)r.exit_cwnd / bdp, r.holds);
	CHECK(r.holds > 0);
	CHECK_EQ(r.reason, 1);
	CHECK(r.exit_us > 2000000);
	CHECK(r.exit_cwnd >= bdp);
	cfg.no_hold = true;
	r = pk_run(&cfg);
	printf("    same without the rule: exit at %.2f s, cwnd %u\n",
	       r.exit_us / 1e6, r.exit_cwnd);
	CHECK_EQ(r.reason, 1);
	CHECK(r.exit_us < 2000000);
}

/*
 * A fast recovery in slow start that turns out spurious (undone one RTT
 * later, ssthresh back to infinity).  With the undo rule SEARCH watches the
 * resumed slow start and leaves it after capacity; without it nothing ends
 * that slow start.
 */
static void t_search_pk_undo(void)
{
	struct pk_cfg cfg = pk_fast(0, 0, 0);
	struct pk_result r;

	cfg.loss_at = 150000;		/* cwnd ~ 0.1 BDP */
	r = pk_run(&cfg);
	printf("    undone recovery: exit at %.2f BDP\n",
	       (double)r.exit_cwnd / PK_FAST_BDP);
	CHECK_EQ(r.reason, 1);
	CHECK(r.exit_cwnd >= PK_FAST_BDP);
	CHECK(r.exit_cwnd <= 10 * PK_FAST_BDP);
	cfg.no_undo_rearm = true;
	r = pk_run(&cfg);
	CHECK_EQ(r.reason, 0);
	CHECK(r.max_cwnd > 10 * PK_FAST_BDP);
}

/*
 * An RTO moves the flow from 5 Gbit/s x 20 ms to 50 Mbit/s x 150 ms.  The
 * new slow start waits for a fresh RTT sample (delay_min is cleared, as in
 * upstream Cubic), so its bins fit the new path and SEARCH leaves after the
 * new capacity; HyStart does not fire on the first round either.  Keeping
 * the old 20 ms minimum instead sizes the bins for 20 ms: every check is
 * skipped, and HyStart fires at once.
 */
static void t_search_pk_rto_longer_path(void)
{
	struct pk_cfg cfg = {
		.rate_pps = PK_FAST_PPS, .rtt_us = 20000,
		.rto_at = 250000, .rate2_pps = 4317, .rtt2_us = 150000,
		.par = search_default, .dur_us = 10000000,
	};
	u32 bdp2 = 4317 * 150 / 1000;
	struct pk_result r = pk_run(&cfg);

	printf("    RTO onto 150 ms: bin %u us, exit at %.2f new BDP\n",
	       r.bin_dur_rto, (double)r.exit_cwnd / bdp2);
	CHECK_RANGE(r.bin_dur_rto, 150000 * 35 / 100, 160000 * 35 / 100);
	CHECK_EQ(r.reason, 1);
	CHECK(r.exit_cwnd >= bdp2);
	cfg.hystart = true;
	r = pk_run(&cfg);
	CHECK(r.exit_cwnd >= bdp2 / 2);
	cfg.keep_delay_min = true;
	r = pk_run(&cfg);
	CHECK_EQ(r.reason, 2);			/* HyStart, at once */
	CHECK(r.exit_cwnd < bdp2 / 8);
	cfg.hystart = false;
	r = pk_run(&cfg);
	CHECK_EQ(r.bin_dur_rto, 20000 * 35 / 100);
	CHECK(r.skipped > 0);
}

/* ------------------------------------------------------------------ */
/* Cubic and HyStart */

static void t_cubic_cbrt(void)
{
	u32 i;

	CHECK_EQ(cubic_cbrt(0), 0);
	CHECK_EQ(cubic_cbrt(1), 1);
	CHECK_EQ(cubic_cbrt(7), 1);
	CHECK_EQ(cubic_cbrt(8), 2);
	CHECK_EQ(cubic_cbrt(26), 2);
	CHECK_EQ(cubic_cbrt(27), 3);
	CHECK_EQ(cubic_cbrt(1000000000000ULL), 10000);
	CHECK_EQ(cubic_cbrt(U64_MAX), 2642245);
	for (i = 1; i < 3000; i += 7) {
		u64 c = (u64)i * i * i;

		CHECK_EQ(cubic_cbrt(c), i);
		CHECK_EQ(cubic_cbrt(c - 1), i - 1);
	}
}

static void t_cubic_loss(void)
{
	struct cubic_state c = { 0 };

	CHECK_EQ(cubic_on_loss(&c, 100, true), 70);
	CHECK_EQ(c.last_max_cwnd, 100);
	/* shrinking W_max with fast convergence: 0.85 * 80 */
	CHECK_EQ(cubic_on_loss(&c, 80, true), 56);
	CHECK_EQ(c.last_max_cwnd, 68);
	/* without fast convergence the plain window is kept */
	CHECK_EQ(cubic_on_loss(&c, 60, false), 42);
	CHECK_EQ(c.last_max_cwnd, 60);
	CHECK_EQ(cubic_on_loss(&c, 1, true), CUBIC_MIN_SSTHRESH);
	CHECK_EQ(cubic_on_loss(&c, U32_MAX, true), (u32)(U32_MAX * 0.7));
	/* an RTO forgets everything, the minimum RTT included (upstream) */
	c.delay_min_us = 20000;
	c.reno_cwnd = 77;
	cubic_reset(&c);
	CHECK_EQ(c.delay_min_us, 0);
	CHECK_EQ(c.last_max_cwnd, 0);
	CHECK_EQ(c.reno_cwnd, 0);
	cubic_rtt_sample(&c, 150000);
	CHECK_EQ(c.delay_min_us, 150000);
}

static void t_cubic_curve(void)
{
	struct cubic_state c = { 0 };
	u32 cnt;

	c.last_max_cwnd = 100;
	c.delay_min_us = 0;
	cnt = cubic_cnt(&c, 70, 1000, 1);	/* starts the epoch at 1000 ms */
	/* K = cbrt((100 - 70) / 0.4) = cbrt(75) = 4.217 s */
	CHECK_RANGE(c.k_ms, 4215, 4218);
	CHECK_EQ(c.epoch_cwnd, 70);
	CHECK(cnt >= CUBIC_MIN_CNT);
	/* W(0) = 70, W(K) = W_max, then convex */
	CHECK_RANGE(cubic_curve(&c, 0), 69, 71);
	CHECK_EQ(cubic_curve(&c, c.k_ms), 100);
	CHECK_RANGE(cubic_curve(&c, c.k_ms + 1000), 100, 101);	/* +0.4 */
	CHECK_EQ(cubic_curve(&c, c.k_ms + 10000), 100 + 400);
	/* |t - K| clamp: no overflow at absurd times */
	CHECK(cubic_curve(&c, U32_MAX) > 100);

	/* near the plateau the growth is slow, far below it fast */
	CHECK(cubic_cnt(&c, 99, 1000 + c.k_ms, 1) > 50);
	CHECK(cubic_cnt(&c, 70, 1000 + 3000, 1) < 20);
	/* clock wraps during an epoch */
	c.epoch_start_ms = U32_MAX - 10;
	CHECK(cubic_cnt(&c, 80, 100, 1) >= CUBIC_MIN_CNT);
}

static void t_cubic_friendly_and_history(void)
{
	struct cubic_state c = { 0 };
	u32 cnt, i;

	/* no loss yet (after a SEARCH exit): at least 5 % per RTT */
	cnt = cubic_cnt(&c, 1000, 5000, 1);
	CHECK_EQ(cnt, CUBIC_NO_HISTORY_CNT);

	/*
	 * TCP-friendly region, counted in ACKs as upstream: from 990 at the
	 * epoch's start, one Reno segment per floor(17/9 * 1000) = 1888 ACKed
	 * segments.  30000 ACKs at cwnd 1000 -> 990 + 15 = 1005 > 1000, so
	 * cnt <= 1000 / 5 = 200; the curve (still below W_max) says ~100000.
	 */
	memset(&c, 0, sizeof(c));
	c.last_max_cwnd = 1100;
	c.delay_min_us = 1000;
	cubic_cnt(&c, 990, 10, 1);		/* epoch at 10 ms */
	CHECK_EQ(c.reno_cwnd, 990);
	for (i = 0; i < 29999; i++)
		cnt = cubic_cnt(&c, 1000, 10, 1);
	CHECK_EQ(c.reno_cwnd, 1005);
	CHECK_EQ(c.ack_cnt, 30000 - 15 * 1888);
	CHECK_EQ(cnt, 200);
	/* the estimate does not depend on time or on the RTT: the same
	 * ACKs spread over 100 s with a 100x larger minimum RTT */
	memset(&c, 0, sizeof(c));
	c.last_max_cwnd = 1100;
	c.delay_min_us = 100000;
	cubic_cnt(&c, 990, 10, 1);
	for (i = 0; i < 29999; i++)
		cnt = cubic_cnt(&c, 1000, 10 + i * 3, 1);
	CHECK_EQ(c.reno_cwnd, 1005);
	/* ACKs that cover several segments count each of them */
	memset(&c, 0, sizeof(c));
	c.last_max_cwnd = 1100;
	cubic_cnt(&c, 990, 10, 1);
	for (i = 0; i < 9999; i++)
		cubic_cnt(&c, 1000, 10, 3);
	CHECK_EQ(c.reno_cwnd, 1005);
	/* no ACKs, no Reno growth, however long the epoch */
	memset(&c, 0, sizeof(c));
	c.last_max_cwnd = 1100;
	c.delay_min_us = 1000;
	cubic_cnt(&c, 990, 10, 1);
	cnt = cubic_cnt(&c, 1000, 10 + 2000, 0);
	CHECK_EQ(c.reno_cwnd, 990);

	/* degenerate inputs */
	memset(&c, 0, sizeof(c));
	c.delay_min_us = 1;
	CHECK(cubic_cnt(&c, 0, 0, 1) >= CUBIC_MIN_CNT);
	CHECK(c.epoch_start_ms != 0);
	memset(&c, 0, sizeof(c));
	c.last_max_cwnd = U32_MAX;
	c.delay_min_us = U32_MAX;
	CHECK(cubic_cnt(&c, 1, 7, 1) >= CUBIC_MIN_CNT);
	CHECK(cubic_cnt(&c, U32_MAX, U32_MAX, 1) >= CUBIC_MIN_CNT);
}

static void t_hystart(void)
{
	struct hystart_state h = { 0 };
	u32 i;
	bool out = false;

	hystart_round(&h, 1000);
	/* small window: never judged */
	for (i = 0; i < 20; i++)
		CHECK(!hystart_update(&h, 500, 1000, 200000, 100000, 8));
	hystart_round(&h, 1000);
	/* min RTT 100 ms, eta = clamp(12.5 ms, 4, 16) = 12.5 ms */
	for (i = 0; i < HYSTART_SAMPLES; i++)
		out = hystart_update(&h, 500, 1000, 112000, 100000, 32);
	CHECK(!out);			/* 112 < 112.5 */
	/* next round: 113 ms > 112.5 ms */
	for (i = 0; i < HYSTART_SAMPLES; i++)
		out = hystart_update(&h, 1001 + i, 2000, 113000, 100000, 32);
	CHECK(out);
	CHECK_EQ(h.end_seq, 2000);
	/* one low sample among eight is enough to stay */
	hystart_round(&h, 3000);
	for (i = 0; i < HYSTART_SAMPLES; i++)
		out = hystart_update(&h, 2500, 3000, i == 3 ? 100000 : 300000,
				     100000, 32);
	CHECK(!out);
	/* extremes */
	hystart_round(&h, 0);
	for (i = 0; i < 10; i++)
		hystart_update(&h, 0, 0, U32_MAX, 1, U32_MAX);
	CHECK(h.curr_rtt_us == HYSTART_RTT_MAX);
}

/* ------------------------------------------------------------------ */
/* Spline */

static struct spline_state spline_fresh(void)
{
	struct spline_state s;

	spline_init_state(&s, 0, 0, 0, 7);
	return s;
}

static void t_spline_init(void)
{
	struct spline_state s;
	u32 r;

	for (r = 0; r < 100; r++) {
		spline_init_state(&s, 5, 1000, 9, r * 2654435761U);
		CHECK_RANGE(s.epoch_len, SPLINE_EPOCH_MIN_ROUNDS,
			    SPLINE_EPOCH_MAX_ROUNDS);
	}
	CHECK_EQ(s.mode, SPLINE_START_PROBE);
	CHECK_EQ(s.min_rtt_us, 1000);
	CHECK_EQ(s.next_round_delivered, 5);
}

static void t_spline_fairness(void)
{
	CHECK_EQ(spline_fairness(1000, 0), SPLINE_FAIR_MAX);
	CHECK_EQ(spline_fairness(0, 1000), 1);
	CHECK_EQ(spline_fairness(1000, 1000), 2);
	CHECK_EQ(spline_fairness(1000, 500), 3);
	CHECK_EQ(spline_fairness(1000, 999), 2);
	CHECK_EQ(spline_fairness(U64_MAX, 1), SPLINE_FAIR_MAX);
}

static void t_spline_max_could_cwnd(void)
{
	/* fairness 2, ACK rate equals in-flight rate: 2 * 4 + G */
	CHECK_EQ(spline_max_could_cwnd(100, 2, 1000, 1000, 10, 4), 100 + 8 + 5);
	/* ACK lag: G = 2 segments */
	CHECK_EQ(spline_max_could_cwnd(100, 2, 1000, 1000, 4, 4), 100 + 8 + 2);
	CHECK_EQ(spline_max_could_cwnd(100, 2, 1000, 1000, 3, 4), 100 + 8 + 2);
	/* a queue absorbs half the data: ratio 2 */
	CHECK_EQ(spline_max_could_cwnd(100, 3, 500, 1000, 0, 0), 100 + 6 + 2);
	/* ACK rate collapsed: only G */
	CHECK_EQ(spline_max_could_cwnd(100, 3, 10, 1000, 0, 0), 100 + 0 + 2);
	/* a growing ACK of one segment gets G = 2, not 1 / 2 = 0 */
	CHECK_EQ(spline_max_could_cwnd(100, 1, 10, 1000, 1, 0), 100 + 0 + 2);
	CHECK_EQ(spline_max_could_cwnd(100, 1, 10, 1000, 40, 2), 100 + 0 + 20);
	/* nothing in flight (no division): ratio capped */
	CHECK_EQ(spline_max_could_cwnd(100, 16, 5, 0, 0, 0),
		 100 + 16 * SPLINE_ACK_RATIO_MAX + 2);
	/* ACK compression cannot claim more than 2x */
	CHECK_EQ(spline_max_could_cwnd(100, 1, U64_MAX, 1, 0, 0),
		 100 + SPLINE_ACK_RATIO_MAX + 2);
	/* saturates instead of wrapping */
	CHECK_EQ(spline_max_could_cwnd(U32_MAX, 16, 1, 1, U32_MAX, 0), U32_MAX);
}

static void t_spline_bdp_and_bw_inflight(void)
{
	struct spline_state s = spline_fresh();

	s.bw_slot[0] = 1250000;		/* 10 Mbit/s */
	s.min_rtt_us = 100000;
	CHECK_EQ(spline_bdp(&s, 1250), 100);
	CHECK_EQ(spline_bdp(&s, 0), 0);
	CHECK_EQ(spline_bw_inflight(&s, 100, 1250), 1250000);
	s.min_rtt_us = 0;
	CHECK_EQ(spline_bdp(&s, 1250), 0);
	CHECK_EQ(spline_bw_inflight(&s, 100, 1250), 0);
	/* 10 Gbit/s x 10 s and 1 kbit/s x 1 us: no overflow, sane values */
	s.bw_slot[0] = 1250000000ULL;
	s.min_rtt_us = 10000000;
	CHECK_EQ(spline_bdp(&s, 1448), 1250000000ULL * 10 / 1448);
	s.bw_slot[0] = 125;
	s.min_rtt_us = 1;
	CHECK_EQ(spline_bdp(&s, 1448), 0);
	/* the largest accepted values */
	s.bw_slot[0] = SPLINE_MAX_BW;
	s.min_rtt_us = SPLINE_MAX_RTT_US;
	CHECK(spline_bdp(&s, 1) == U32_MAX);
	CHECK(spline_bw_inflight(&s, U32_MAX, 65535) > 0);
}

static void t_spline_check_probes(void)
{
	struct spline_state s;
	struct spline_ack in = { 0 };

	in.cwnd = 100;
	in.inflight = 100;

	/* START_PROBE: RTT 1.25x is tolerated, more is not */
	s = spline_fresh();
	s.min_rtt_us = 100000;
	s.curr_rtt_us = 125000;
	spline_check_probes(&s, &in, 100, false);
	CHECK_EQ(s.mode, SPLINE_START_PROBE);
	s.curr_rtt_us = 125001;
	spline_check_probes(&s, &in, 100, false);
	CHECK_EQ(s.mode, SPLINE_DRAIN_PROBE);
	/* START_PROBE: loss, or delivery not growing for 3 rounds */
	s = spline_fresh();
	spline_check_probes(&s, &in, 100, true);
	CHECK_EQ(s.mode, SPLINE_DRAIN_PROBE);
	s = spline_fresh();
	s.lag_rounds = 2;
	spline_check_probes(&s, &in, 100, false);
	CHECK_EQ(s.mode, SPLINE_START_PROBE);
	s.lag_rounds = 3;
	spline_check_probes(&s, &in, 100, false);
	CHECK_EQ(s.mode, SPLINE_DRAIN_PROBE);

	/* DRAIN_PROBE: stays while the queue is there, then PROBE_BW */
	s.min_rtt_us = 100000;
	s.curr_rtt_us = 140000;
	spline_check_probes(&s, &in, 80, false);
	CHECK_EQ(s.mode, SPLINE_DRAIN_PROBE);
	s.curr_rtt_us = 101000;
	spline_check_probes(&s, &in, 80, false);	/* inflight > bdp */
	CHECK_EQ(s.mode, SPLINE_DRAIN_PROBE);
	in.inflight = 80;
	spline_check_probes(&s, &in, 80, false);
	CHECK_EQ(s.mode, SPLINE_PROBE_BW);
	/* ... or gives up after SPLINE_DRAIN_MAX_ROUNDS */
	spline_set_mode(&s, SPLINE_DRAIN_PROBE);
	s.curr_rtt_us = 200000;
	s.mode_rounds = SPLINE_DRAIN_MAX_ROUNDS;
	spline_check_probes(&s, &in, 80, false);
	CHECK_EQ(s.mode, SPLINE_PROBE_BW);

	/* PROBE_BW: cwnd above 1.25 x BDP drains */
	s.curr_rtt_us = 100000;
	s.epp = 0;
	s.epoch_len = 10;
	in.cwnd = 125;
	spline_check_probes(&s, &in, 100, false);
	CHECK_EQ(s.mode, SPLINE_PROBE_BW);
	in.cwnd = 126;
	spline_check_probes(&s, &in, 100, false);
	CHECK_EQ(s.mode, SPLINE_DRAIN_PROBE);

	/* PROBE_BW: at the end of an epoch, PROBE_RTT only with a queue */
	spline_set_mode(&s, SPLINE_PROBE_BW);
	in.cwnd = 100;
	s.epp = 9;
	s.epoch_len = 10;
	s.curr_rtt_us = 110000;			/* < 1.125 x */
	spline_check_probes(&s, &in, 100, false);
	CHECK_EQ(s.mode, SPLINE_PROBE_BW);
	CHECK_EQ(s.epp, 0);
	CHECK_RANGE(s.epoch_len, SPLINE_EPOCH_MIN_ROUNDS, SPLINE_EPOCH_MAX_ROUNDS);
	s.epp = s.epoch_len - 1;
	s.curr_rtt_us = 120000;			/* > 1.125 x */
	spline_check_probes(&s, &in, 100, false);
	CHECK_EQ(s.mode, SPLINE_PROBE_RTT);
	/* PROBE_RTT lasts one round */
	s.mode_rounds = 1;
	spline_check_probes(&s, &in, 100, false);
	CHECK_EQ(s.mode, SPLINE_PROBE_BW);

	/* a stale min_rtt sends PROBE_BW to PROBE_RTT */
	s.flags |= SPLINE_F_RTT_STALE;
	s.curr_rtt_us = 100000;
	s.epp = 0;
	spline_check_probes(&s, &in, 100, false);
	CHECK_EQ(s.mode, SPLINE_PROBE_RTT);
	CHECK(!(s.flags & SPLINE_F_RTT_STALE));

	/* an unknown mode value resets to START_PROBE */
	s.mode = 77;
	spline_check_probes(&s, &in, 100, false);
	CHECK_EQ(s.mode, SPLINE_START_PROBE);
}

static void t_spline_loss_and_undo(void)
{
	struct spline_state s = spline_fresh();

	CHECK_EQ(spline_on_loss(&s, 100, 1448), 80);	/* no BDP known */
	CHECK_EQ(s.recover_cwnd, 80);
	CHECK_EQ(s.prior_cwnd, 100);
	s.bw_slot[0] = 1448 * 900;			/* BDP 90 at 100 ms */
	s.min_rtt_us = 100000;
	CHECK_EQ(spline_on_loss(&s, 100, 1448), 90);	/* not below BDP */
	CHECK_EQ(spline_on_loss(&s, 60, 1448), 60);	/* never raises */
	CHECK_EQ(spline_on_loss(&s, 2, 1448), SPLINE_MIN_CWND);
	CHECK_EQ(spline_on_loss(&s, U32_MAX, 1448), (u32)((u64)U32_MAX * 4 / 5));
	s.prior_cwnd = 100;
	CHECK_EQ(spline_undo(&s, 50), 100);
	CHECK_EQ(s.recover_cwnd, 0);
	CHECK_EQ(spline_undo(&s, 150), 150);
}

static void t_spline_pacing(void)
{
	struct spline_state s = spline_fresh();

	/* nothing known: leave the rate alone */
	CHECK_EQ(spline_pacing_rate(&s, 10, 1448), 0);
	/* RTT known, no bw yet: START gain x cwnd per RTT */
	s.min_rtt_us = 10000;
	CHECK_EQ(spline_pacing_rate(&s, 10, 1000), 2 * 1000000);
	s.bw_slot[0] = 1000000;
	CHECK_EQ(spline_pacing_rate(&s, 10, 1000), 2000000);
	s.mode = SPLINE_PROBE_BW;
	CHECK_EQ(spline_pacing_rate(&s, 10, 1000), 1250000);
	s.mode = SPLINE_DRAIN_PROBE;
	CHECK_EQ(spline_pacing_rate(&s, 10, 1000), 750000);
	s.mode = SPLINE_PROBE_RTT;
	CHECK_EQ(spline_pacing_rate(&s, 10, 1000), 1000000);
	/* the floor: one segment per second */
	s.bw_slot[0] = 10;
	CHECK_EQ(spline_pacing_rate(&s, 10, 1000), 1000);
	/* the top: no overflow */
	s.bw_slot[0] = SPLINE_MAX_BW;
	s.mode = SPLINE_START_PROBE;
	CHECK_EQ(spline_pacing_rate(&s, 10, 1000), 2 * SPLINE_MAX_BW);
}

/* One ACK with everything explicit. */
static struct spline_out spline_ack1(struct spline_state *s, u64 now,
				     u32 delivered, u32 prior_delivered,
				     s64 rdeliv, s64 interval, s64 rtt,
				     u32 acked, u32 inflight, u32 cwnd)
{
	struct spline_ack in = {
		.now_us = now, .delivered = delivered,
		.prior_delivered = prior_delivered, .rate_delivered = rdeliv,
		.interval_us = interval, .rtt_us = rtt, .acked = acked,
		.inflight = inflight, .cwnd = cwnd, .cwnd_clamp = U32_MAX,
		.mss = 1448, .rand = 3, .cwnd_limited = true,
	};

	return spline_on_ack(s, &in);
}

static void t_spline_first_ack_and_zero(void)
{
	struct spline_state s = spline_fresh();
	struct spline_out o;

	/* first ACK of a connection: no rate sample, no RTT */
	o = spline_ack1(&s, 0, 0, 0, -1, -1, -1, 0, 0, 10);
	CHECK_EQ(o.cwnd, 10);
	CHECK_EQ(o.pacing_rate, 0);
	CHECK_EQ(o.new_mode, SPLINE_START_PROBE);
	/* zero delivered, zero interval, zero everything */
	o = spline_ack1(&s, 0, 0, 0, 0, 0, 0, 0, 0, 0);
	CHECK(o.cwnd >= SPLINE_MIN_CWND);
	/* a valid first sample */
	o = spline_ack1(&s, 1000, 1, 0, 1, 1000, 1000, 1, 9, 10);
	CHECK_EQ(o.cwnd, 11);			/* START_PROBE: += acked */
	CHECK(o.pacing_rate > 0);
	CHECK_EQ(s.min_rtt_us, 1000);
	CHECK_EQ(spline_bw(&s), 1448000);	/* 1448 B per ms */
}

static void t_spline_extremes(void)
{
	static const s64 rtts[] = { 1, 10, 1000, 600000, 5000000, 10000000,
				    100000000 };
	static const u64 rates_bps[] = { 1000ULL, 64000ULL, 10000000ULL,
					 1000000000ULL, 10000000000ULL };
	u32 i, j, k;

	for (i = 0; i < sizeof(rtts) / sizeof(rtts[0]); i++) {
		for (j = 0; j < sizeof(rates_bps) / sizeof(rates_bps[0]); j++) {
			struct spline_state s = spline_fresh();
			u64 bytes_per_s = rates_bps[j] / 8;
			/* one segment's worth of time at this rate, >= 1 us */
			s64 interval = (s64)cc_max64(1448ULL * 1000000 /
						     bytes_per_s, 1);
			u32 cwnd = 10, d = 0;
			u64 now = 0;
			struct spline_out o;

			for (k = 0; k < 300; k++) {
				now += (u64)interval;
				d++;
				o = spline_ack1(&s, now, d, d > cwnd ? d - cwnd : 0,
						1, interval, rtts[i] + (k % 7),
						1, cwnd, cwnd);
				CHECK(o.cwnd >= SPLINE_MIN_CWND);
				CHECK(o.pacing_rate >= 1448);
				CHECK(o.new_mode >= SPLINE_START_PROBE &&
				      o.new_mode <= SPLINE_DRAIN_PROBE);
				cwnd = o.cwnd;
			}
			/* the bw estimate is the sampled rate (+-1 %) */
			CHECK_RANGE((double)spline_bw(&s),
				    0.99 * 1448.0 * 1e6 / interval,
				    1.01 * 1448.0 * 1e6 / interval);
		}
	}

	/* absurd inputs: nothing overflows, results stay bounded */
	{
		struct spline_state s = spline_fresh();
		struct spline_out o;

		o = spline_ack1(&s, U64_MAX, U32_MAX, 0, INT32_MAX, 1,
				INT64_MAX, U32_MAX, U32_MAX, U32_MAX);
		CHECK(o.cwnd >= SPLINE_MIN_CWND);
		CHECK(o.cwnd <= SPLINE_MAX_CWND);	/* positive as an int */
		CHECK_EQ(spline_bw(&s), SPLINE_MAX_BW);
		CHECK_EQ(s.min_rtt_us, SPLINE_MAX_RTT_US);
		o = spline_ack1(&s, 0, 0, U32_MAX, INT32_MIN, INT64_MIN,
				INT64_MIN, 0, 0, 1);
		CHECK(o.cwnd >= SPLINE_MIN_CWND);
	}
}

/*
 * A one-flow, packet-level path: a bottleneck of @rate_bps with a drop-tail
 * buffer of @buf_pkts, a base RTT of @rtt_us, random loss of @loss_ppm on
 * data.  The sender obeys Spline's cwnd and pacing rate.
 */
struct sim_pkt {
	u64 sent_us;
	u64 ack_us;
	u64 delivered_mstamp;	/* tp->delivered_mstamp when sent */
	u32 delivered_at_send;
	bool lost;
};

struct sim_result {
	double goodput_frac;	/* of capacity, over the second half */
	double queue_ms;	/* mean queueing delay, second half */
	u32 mode_changes;
	u32 modes_seen;		/* bit per mode */
	u32 losses;
	u64 last_pacing;
	u32 last_cwnd;
	struct spline_state st;
};

#define SIM_MAX_INFLIGHT 8192

/* SPLINE_K_* switches for the next sim_spline() runs (0: the model). */
static u8 sim_knobs;

static struct sim_result sim_spline(u64 rate_bps, u32 rtt_us, u32 buf_pkts,
				    u32 loss_ppm, u64 dur_us,
				    u64 rate_change_us, u64 rate2_bps)
{
	static struct sim_pkt ring[SIM_MAX_INFLIGHT];
	struct sim_result res = { 0 };
	struct spline_state *s = &res.st;
	const u32 mss = 1448;
	u64 now = 0, link_free = 0, next_send = 0, pacing = 0;
	u64 delivered_mstamp = 0, half = dur_us / 2, q_sum = 0, q_n = 0;
	u32 head = 0, tail = 0;	/* ring of packets in flight */
	u32 cwnd = 10, delivered = 0, delivered_half = 0, seed = 99;
	u32 recovery_until = 0, sent = 0;
	bool in_recovery = false;

	spline_init_state(s, 0, 0, 0, 5);
	s->knobs = sim_knobs;
	res.modes_seen = 1u << s->mode;

	while (now < dur_us) {
		u64 rate = (rate_change_us && now >= rate_change_us) ?
			   rate2_bps : rate_bps;
		u64 service = cc_max64(mss * 8ULL * 1000000 / rate, 1);
		u64 next_ack = head != tail ? ring[head % SIM_MAX_INFLIGHT].ack_us
					    : U64_MAX;
		u32 inflight = tail - head;

		if (inflight < cwnd && inflight < SIM_MAX_INFLIGHT - 1 &&
		    cc_max64(next_send, now) <= next_ack) {
			/* send one packet */
			struct sim_pkt *p = &ring[tail % SIM_MAX_INFLIGHT];
			u64 start;

			now = cc_max64(next_send, now);
			start = cc_max64(now, link_free);
			p->sent_us = now;
			p->delivered_at_send = delivered;
			p->delivered_mstamp = delivered_mstamp ? delivered_mstamp
							       : now;
			seed = seed * 1103515245U + 12345U;
			p->lost = (start - now) / service > buf_pkts ||
				  (seed >> 4) % 1000000 < loss_ppm;
			if (!p->lost)
				link_free = start + service;
			/* a lost packet is "detected" when its ACK would be due */
			p->ack_us = (p->lost ? now : link_free) + rtt_us;
			tail++;
			sent++;
			next_send = pacing ? now + cc_max64(mss * 1000000ULL /
							    pacing, 1) : now;
			continue;
		}
		if (next_ack == U64_MAX)
			break;
		/* process one ACK (or loss detection) */
		{
			struct sim_pkt *p = &ring[head % SIM_MAX_INFLIGHT];
			struct spline_ack in = { 0 };
			struct spline_out o;

			now = cc_max64(now, p->ack_us);
			head++;
			if (p->lost) {
				res.losses++;
				if (!in_recovery) {
					cwnd = spline_on_loss(s, cwnd, mss);
					in_recovery = true;
					recovery_until = sent;
				}
				in.losses = 1;
				in.rate_delivered = -1;
				in.interval_us = -1;
				in.rtt_us = -1;
			} else {
				delivered++;
				delivered_mstamp = now;
				in.rate_delivered = delivered - p->delivered_at_send;
				in.interval_us = (s64)(now - p->delivered_mstamp);
				in.rtt_us = (s64)(now - p->sent_us);
				in.acked = 1;
				if (now >= half) {
					q_sum += now - p->sent_us - rtt_us;
					q_n++;
				}
			}
			if (in_recovery && head >= recovery_until)
				in_recovery = false;
			in.now_us = now;
			in.delivered = delivered;
			in.prior_delivered = p->delivered_at_send;
			in.inflight = tail - head;
			in.cwnd = cwnd;
			in.cwnd_clamp = U32_MAX;
			in.mss = mss;
			seed = seed * 1103515245U + 12345U;
			in.rand = seed >> 8;
			/* like tp->is_cwnd_limited: the window, not pacing,
			 * was what held the sender back */
			in.cwnd_limited = in.inflight + 2 >= cwnd;
			in.in_recovery = in_recovery;
			in.pacing_rate = pacing;
			o = spline_on_ack(s, &in);
			cwnd = cc_min32(o.cwnd, SIM_MAX_INFLIGHT - 2);
			if (o.pacing_rate)
				pacing = o.pacing_rate;
			if (o.new_mode != o.old_mode) {
				res.mode_changes++;
				res.modes_seen |= 1u << o.new_mode;
			}
			if (now < half)
				delivered_half = delivered;
		}
	}
	{
		u64 rate = rate_change_us ? rate2_bps : rate_bps;
		double cap = (double)rate / 8 / mss * ((double)(dur_us - half) / 1e6);

		res.goodput_frac = (delivered - delivered_half) / cap;
	}
	res.queue_ms = q_n ? (double)q_sum / q_n / 1000.0 : 0;
	res.last_pacing = pacing;
	res.last_cwnd = cwnd;
	return res;
}

static void t_spline_sim_clean_path(void)
{
	/* 10 Mbit/s, 50 ms, buffer of one BDP (43 packets), no random loss */
	struct sim_result r = sim_spline(10000000, 50000, 43, 0, 30000000, 0, 0);

	printf("    clean: goodput %.2f, queue %.1f ms, %u losses, %u mode changes, cwnd %u\n",
	       r.goodput_frac, r.queue_ms, r.losses, r.mode_changes,
	       r.last_cwnd);
	CHECK(r.modes_seen & (1u << SPLINE_DRAIN_PROBE));
	CHECK(r.modes_seen & (1u << SPLINE_PROBE_BW));
	CHECK(r.modes_seen & (1u << SPLINE_PROBE_RTT));
	CHECK_RANGE(r.goodput_frac, 0.9, 1.01);
	CHECK(r.queue_ms < 25.0);		/* well under one BDP of queue */
	/* bw estimate within 10 % of 10 Mbit/s, pacing follows it */
	CHECK_RANGE((double)spline_bw(&r.st), 0.9 * 1250000, 1.1 * 1250000);
	CHECK_RANGE((double)r.last_pacing, 0.7 * 1250000, 2.1 * 1250000);
	CHECK_RANGE(r.st.min_rtt_us, 50000, 52000);
}

static void t_spline_sim_random_loss(void)
{
	/* 2 % random loss on the data: the window must not collapse */
	struct sim_result r = sim_spline(10000000, 50000, 43, 20000, 30000000,
					 0, 0);

	printf("    2%% loss: goodput %.2f, queue %.1f ms, %u losses\n",
	       r.goodput_frac, r.queue_ms, r.losses);
	CHECK(r.losses > 100);
	CHECK(r.goodput_frac > 0.6);
}

static void t_spline_sim_rate_drop(void)
{
	/* 20 Mbit/s that drops to 5 Mbit/s after 10 s: pacing comes down */
	struct sim_result r = sim_spline(20000000, 20000, 50, 0, 30000000,
					 10000000, 5000000);

	printf("    rate drop: goodput %.2f, queue %.1f ms, pacing %llu B/s\n",
	       r.goodput_frac, r.queue_ms, (unsigned long long)r.last_pacing);
	CHECK(r.last_pacing < 2 * 625000ULL);	/* was >= 2.5 MB/s */
	CHECK_RANGE((double)spline_bw(&r.st), 0.8 * 625000, 1.2 * 625000);
	CHECK(r.goodput_frac > 0.8);
}

static void t_spline_sim_extreme_paths(void)
{
	/* 1 Gbit/s, 100 us RTT */
	struct sim_result r = sim_spline(1000000000ULL, 100, 20, 0, 200000, 0, 0);

	CHECK(r.goodput_frac > 0.5);
	/* 1 Mbit/s, 2 s RTT (long, thin) */
	r = sim_spline(1000000, 2000000, 200, 0, 60000000, 0, 0);
	CHECK(r.goodput_frac > 0.5);
	CHECK_RANGE(r.st.min_rtt_us, 2000000, 2100000);
	/* 50 % loss: survives, still moves data */
	r = sim_spline(10000000, 50000, 43, 500000, 20000000, 0, 0);
	CHECK(r.goodput_frac > 0.0);
	CHECK(r.last_cwnd >= SPLINE_MIN_CWND);
}

static void t_spline_min_rtt_refresh(void)
{
	struct spline_state s = spline_fresh();
	u32 d = 0;
	u64 t;

	/* min 10 ms, then the path's RTT rises to 30 ms for good */
	spline_ack1(&s, 1000, ++d, 0, 1, 1000, 10000, 1, 10, 10);
	CHECK_EQ(s.min_rtt_us, 10000);
	for (t = 2000; t < 10000000; t += 100000) {
		d++;
		spline_ack1(&s, t, d, d - 1, 1, 1000, 30000, 1, 10, 10);
	}
	CHECK_EQ(s.min_rtt_us, 10000);		/* still within 10 s */
	d++;
	spline_ack1(&s, 10002000, d, d - 1, 1, 1000, 30000, 1, 10, 10);
	CHECK_EQ(s.min_rtt_us, 30000);		/* expired: refreshed */
	CHECK_EQ(s.min_rtt_stamp_us, 10002000);
	/* a new minimum is taken at once */
	d++;
	spline_ack1(&s, 10003000, d, d - 1, 1, 1000, 29000, 1, 10, 10);
	CHECK_EQ(s.min_rtt_us, 29000);
}

static void t_spline_rto_regrow(void)
{
	struct spline_state s = spline_fresh();
	struct spline_out o;
	u32 cwnd, i;

	s.mode = SPLINE_PROBE_BW;
	CHECK_EQ(spline_on_loss(&s, 100, 1448), 80);
	/* the kernel collapsed the window to 1 after the RTO */
	cwnd = 1;
	for (i = 0; i < 200 && cwnd < 80; i++) {
		struct spline_ack in = {
			.now_us = 1000 + i, .delivered = i + 1,
			.prior_delivered = i, .rate_delivered = -1,
			.interval_us = -1, .rtt_us = -1, .acked = 1,
			.inflight = cwnd, .cwnd = cwnd, .cwnd_clamp = 1000,
			.mss = 1448, .cwnd_limited = true, .in_recovery = true,
		};
		o = spline_on_ack(&s, &in);
		CHECK(o.cwnd <= 80);
		cwnd = o.cwnd;
	}
	CHECK_EQ(cwnd, 80);
	CHECK(i < 100);		/* grows by the ACKed amount */
}

/* Each ablation switch changes its own mechanism, and only when set. */
static void t_spline_knobs(void)
{
	struct spline_state s;
	struct spline_ack in = { 0 };
	struct spline_out o;
	u32 cwnd, r;

	/* loss_cut=N: the window is kept, the loss still ends START_PROBE */
	s = spline_fresh();
	s.knobs = SPLINE_K_NO_LOSS_CUT;
	CHECK_EQ(spline_on_loss(&s, 100, 1448), 100);
	CHECK(s.flags & SPLINE_F_LOSS_ROUND);
	s.knobs = 0;
	CHECK_EQ(spline_on_loss(&s, 100, 1448), 80);

	/* drain_test=N: an RTT 1.4x min_rtt and cwnd 2x BDP keep PROBE_BW */
	in.cwnd = 200;
	in.inflight = 200;
	s = spline_fresh();
	s.mode = SPLINE_PROBE_BW;
	s.epoch_len = 200;
	s.min_rtt_us = 100000;
	s.curr_rtt_us = 140000;
	s.knobs = SPLINE_K_NO_DRAIN_TEST;
	spline_check_probes(&s, &in, 100, false);
	CHECK_EQ(s.mode, SPLINE_PROBE_BW);
	s.knobs = 0;
	spline_check_probes(&s, &in, 100, false);
	CHECK_EQ(s.mode, SPLINE_DRAIN_PROBE);

	/* queue_probe_rtt=N: an epoch's end with a queue stays in PROBE_BW */
	s = spline_fresh();
	s.mode = SPLINE_PROBE_BW;
	s.min_rtt_us = 100000;
	s.curr_rtt_us = 120000;		/* > 9/8, < 5/4 */
	s.epp = s.epoch_len - 1;
	s.knobs = SPLINE_K_NO_QUEUE_PROBE_RTT;
	in.cwnd = in.inflight = 100;
	spline_check_probes(&s, &in, 100, false);
	CHECK_EQ(s.mode, SPLINE_PROBE_BW);
	CHECK_EQ(s.epp, 0);
	s.knobs = 0;
	s.epp = s.epoch_len - 1;
	spline_check_probes(&s, &in, 100, false);
	CHECK_EQ(s.mode, SPLINE_PROBE_RTT);

	/*
	 * fairness_yield=N and recovery_growth=Y: one round of 50 one-segment
	 * ACKs in PROBE_BW at fairness_rat 2 (inflight = BDP).  The model
	 * grows by one segment; without the yield by acked * 2/8 per ACK.
	 * In recovery the model does not grow; with recovery_growth it does.
	 */
	for (r = 0; r < 4; r++) {
		u8 k = (u8[]){ 0, SPLINE_K_NO_FAIR_YIELD, 0,
			       SPLINE_K_RECOVERY_GROWTH }[r];
		bool rec = r >= 2;
		u32 i;

		s = spline_fresh();
		s.knobs = k;
		s.mode = SPLINE_PROBE_BW;
		s.epoch_len = 200;
		s.min_rtt_us = 100000;
		s.curr_rtt_us = 100000;
		s.bw_slot[0] = 50 * 1448 * 10;	/* 50 segments per 100 ms */
		s.next_round_delivered = 1000;	/* no round ends here */
		cwnd = 50;
		for (i = 0; i < 50; i++) {
			struct spline_ack a = {
				.now_us = 1000 + i, .delivered = 100 + i,
				.prior_delivered = 50 + i, .rate_delivered = -1,
				.interval_us = -1, .rtt_us = 100000,
				.acked = 1, .inflight = 50, .cwnd = cwnd,
				.cwnd_clamp = U32_MAX, .mss = 1448,
				.cwnd_limited = true, .in_recovery = rec,
			};

			o = spline_on_ack(&s, &a);
			cwnd = o.cwnd;
		}
		printf("    knobs 0x%02x, %s: 50 -> %u segments\n", k,
		       rec ? "in recovery" : "open", cwnd);
		if (r == 0)
			CHECK_EQ(cwnd, 51);
		else if (r == 1)
			CHECK_RANGE(cwnd, 61, 63);	/* 50 * 2/8 = 12.5 */
		else if (r == 2)
			CHECK_EQ(cwnd, 50);
		else
			CHECK_EQ(cwnd, 51);
	}

	/* recovery_growth=Y: the cut is still made, once */
	s = spline_fresh();
	s.knobs = SPLINE_K_RECOVERY_GROWTH;
	s.mode = SPLINE_PROBE_BW;
	CHECK_EQ(spline_on_loss(&s, 100, 1448), 80);
	{
		struct spline_ack a = {
			.now_us = 1000, .delivered = 1, .rate_delivered = -1,
			.interval_us = -1, .rtt_us = -1, .acked = 1,
			.inflight = 99, .cwnd = 100, .cwnd_clamp = U32_MAX,
			.mss = 1448, .cwnd_limited = true, .in_recovery = true,
		};

		s.next_round_delivered = 1000;
		o = spline_on_ack(&s, &a);
	}
	/* cut to 80, then this ACK's growth (nothing known: fairness 16) */
	CHECK_RANGE(o.cwnd, 80, 83);
	CHECK_EQ(s.recover_cwnd, 0);

	/* published_floor=Y: never below 10 + acked (the model: 4) */
	for (r = 0; r < 2; r++) {
		s = spline_fresh();
		s.knobs = r ? SPLINE_K_PUBLISHED_FLOOR : 0;
		s.mode = SPLINE_DRAIN_PROBE;
		s.min_rtt_us = 100000;
		s.curr_rtt_us = 200000;
		s.bw_slot[0] = 2 * 1448 * 10;	/* BDP of 2 segments */
		o = spline_ack1(&s, 1000, 1, 0, -1, -1, 200000, 3, 30, 30);
		CHECK_EQ(o.cwnd, r ? SPLINE_PUBLISHED_FLOOR + 3 : SPLINE_MIN_CWND);
	}

	/* pacing_up_only=Y: DRAIN's 0.75 x bw does not lower a higher rate */
	for (r = 0; r < 2; r++) {
		struct spline_ack a = {
			.now_us = 1000, .rate_delivered = -1, .interval_us = -1,
			.rtt_us = -1, .cwnd = 10, .cwnd_clamp = U32_MAX,
			.mss = 1000, .pacing_rate = 5000000,
		};

		s = spline_fresh();
		s.knobs = r ? SPLINE_K_PACING_UP_ONLY : 0;
		s.mode = SPLINE_DRAIN_PROBE;
		s.next_round_delivered = 1000;
		s.bw_slot[0] = 1000000;
		o = spline_on_ack(&s, &a);
		CHECK_EQ(o.pacing_rate, r ? 5000000 : 750000);
	}
}

/*
 * The ablation in the harness's packet model (sim_spline): 20 Mbit/s,
 * 40 ms, a 1-BDP buffer and random data loss, as lab 3.  It prints the
 * goodput with each switch flipped alone; the lab measures the same in the
 * VM.  It asserts only that the model collapses at 10 % loss and that one
 * switch alone at least doubles it; which one is for the VM to say (this
 * model has no RACK, TLP or RTO, so its recovery episodes differ).
 */
static void t_spline_sim_ablation(void)
{
	static const struct { u8 k; const char *name; } kn[] = {
		{ 0, "model" },
		{ SPLINE_K_RECOVERY_GROWTH, "recovery_growth=Y" },
		{ SPLINE_K_NO_LOSS_CUT, "loss_cut=N" },
		{ SPLINE_K_NO_DRAIN_TEST, "drain_test=N" },
		{ SPLINE_K_NO_FAIR_YIELD, "fairness_yield=N" },
		{ SPLINE_K_NO_QUEUE_PROBE_RTT, "queue_probe_rtt=N" },
		{ SPLINE_K_PUBLISHED_FLOOR, "published_floor=Y" },
		{ SPLINE_K_PACING_UP_ONLY, "pacing_up_only=Y" },
		{ SPLINE_K_RECOVERY_GROWTH | SPLINE_K_NO_DRAIN_TEST,
		  "recovery_growth=Y drain_test=N" },
	};
	double g[sizeof(kn) / sizeof(kn[0])][2];
	u32 i, j;

	for (i = 0; i < sizeof(kn) / sizeof(kn[0]); i++) {
		for (j = 0; j < 2; j++) {
			struct sim_result r;

			sim_knobs = kn[i].k;
			r = sim_spline(20000000, 40000, 69, j ? 200000 : 100000,
				       20000000, 0, 0);
			g[i][j] = r.goodput_frac;
		}
		printf("    %-32s 10%% loss %5.1f Mbit/s, 20%% %5.1f Mbit/s\n",
		       kn[i].name, 20 * g[i][0], 20 * g[i][1]);
	}
	sim_knobs = 0;
	CHECK(g[0][0] < 0.25);
	for (j = 0, i = 1; i < 8; i++)
		j += g[i][0] > 2 * g[0][0];
	CHECK(j >= 1);
}

/* ------------------------------------------------------------------ */

static const struct test_case cases[] = {
	{ "search_params_check", t_search_params_check },
	{ "search_state_size", t_search_state_size },
	{ "search_bin_duration", t_search_bin_duration },
	{ "search_roll", t_search_roll },
	{ "search_skipped_bins", t_search_skipped_bins },
	{ "search_wrap", t_search_wrap },
	{ "search_window_sum", t_search_window_sum },
	{ "search_interpolation", t_search_interpolation },
	{ "search_norm_diff", t_search_norm_diff },
	{ "search_paper_doubling", t_search_paper_doubling },
	{ "search_paper_capacity", t_search_paper_capacity },
	{ "search_default_timing", t_search_default_timing },
	{ "search_rtt_spike_skip", t_search_rtt_spike_skip },
	{ "search_param_space", t_search_param_space },
	{ "search_pk_clean", t_search_pk_clean },
	{ "search_pk_geo", t_search_pk_geo },
	{ "search_pk_long_stall", t_search_pk_long_stall },
	{ "search_pk_stalls_rule", t_search_pk_stalls_rule },
	{ "search_pk_vm_stall", t_search_pk_vm_stall },
	{ "search_pk_lab4_stall", t_search_pk_lab4_stall },
	{ "search_pk_app_limited", t_search_pk_app_limited },
	{ "search_pk_undo", t_search_pk_undo },
	{ "search_pk_rto_longer_path", t_search_pk_rto_longer_path },
	{ "search_scale", t_search_scale },
	{ "search_zero_and_extremes", t_search_zero_and_extremes },
	{ "cubic_cbrt", t_cubic_cbrt },
	{ "cubic_loss", t_cubic_loss },
	{ "cubic_curve", t_cubic_curve },
	{ "cubic_friendly_and_history", t_cubic_friendly_and_history },
	{ "hystart", t_hystart },
	{ "spline_init", t_spline_init },
	{ "spline_fairness", t_spline_fairness },
	{ "spline_max_could_cwnd", t_spline_max_could_cwnd },
	{ "spline_bdp_and_bw_inflight", t_spline_bdp_and_bw_inflight },
	{ "spline_check_probes", t_spline_check_probes },
	{ "spline_loss_and_undo", t_spline_loss_and_undo },
	{ "spline_pacing", t_spline_pacing },
	{ "spline_first_ack_and_zero", t_spline_first_ack_and_zero },
	{ "spline_extremes", t_spline_extremes },
	{ "spline_min_rtt_refresh", t_spline_min_rtt_refresh },
	{ "spline_rto_regrow", t_spline_rto_regrow },
	{ "spline_knobs", t_spline_knobs },
	{ "spline_sim_ablation", t_spline_sim_ablation },
	{ "spline_sim_clean_path", t_spline_sim_clean_path },
	{ "spline_sim_random_loss", t_spline_sim_random_loss },
	{ "spline_sim_rate_drop", t_spline_sim_rate_drop },
	{ "spline_sim_extreme_paths", t_spline_sim_extreme_paths },
};

int main(int argc, char **argv)
{
	size_t i, n = sizeof(cases) / sizeof(cases[0]);
	unsigned int passed = 0, failed = 0;

	for (i = 0; i < n; i++) {
		if (argc > 1 && !strstr(cases[i].name, argv[1]))
			continue;
		case_failures = 0;
		cases[i].fn();
		if (case_failures) {
			printf("FAIL %s (%d checks)\n", cases[i].name,
			       case_failures);
			failed++;
		} else {
			printf("ok   %s\n", cases[i].name);
			passed++;
		}
	}
	printf("%u passed, %u failed\n", passed, failed);
	return failed ? 1 : 0;
}
