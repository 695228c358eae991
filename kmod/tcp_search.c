// SPDX-License-Identifier: GPL-2.0
/*
 * tcp_search.c - Cubic with SEARCH 2.0 slow start, registered as "search".
 *
 * Congestion avoidance is Cubic (cubic_core.h: W(t) = C (t - K)^3 + W_max,
 * C = 0.4, beta = 0.7, fast convergence, TCP-friendly region).  Slow start
 * is the kernel's (one segment per ACKed segment), but its end is decided by
 * SEARCH (search_core.h): delivered data is binned in time, and once the data
 * delivered over the last window is clearly less than twice what was
 * delivered over the same window one RTT earlier, the rate has stopped
 * doubling - the bottleneck is full - and slow start ends with
 * ssthresh = cwnd, before the queue overflows.
 *
 * HyStart's delay test can be switched on as well (hystart=1); it is off by
 * default, so that SEARCH alone decides.  Both can run together: whichever
 * fires first ends slow start.
 *
 * Module parameters (all writable at run time under
 * /sys/module/tcp_search/parameters/, read per ACK; a new bin duration only
 * applies to flows that start, or re-arm, afterwards):
 *
 *   window_factor  SEARCH window in tenths of the initial RTT (35 = 3.5),
 *                  accepted 5..100
 *   window_bins    W, bins per window (10), accepted 2..24
 *   extra_bins     EXTRA_BINS, how far back (in bins) the previous window
 *                  may be (15), accepted 1..23; the ring holds 26 bins, so
 *                  at most 25 - W are usable (15 with W = 10)
 *   thresh         THRESH in per-mille (350 = 0.35), accepted 1..1000
 *   search         1: SEARCH decides the end of slow start (default)
 *   hystart        1: HyStart's delay test also may end it (default 0)
 *   fast_convergence  Cubic's fast convergence (default 1)
 *
 * A write outside a range fails with EINVAL and leaves the value unchanged,
 * so nothing here can ever divide by a zero parameter.
 *
 * SEARCH re-arms when a new slow start begins: after an RTO (CA_Loss) and
 * when a flow restarts after an idle period (the idle time would show up as
 * empty bins and look like a collapsed delivery rate).
 *
 * Visibility: get_info fills the BBR info block, so "ss -ti" prints
 * bbr:(bw:..,mrtt:..,pacing_gain:NORM_DIFF,cwnd_gain:STATE); leaving slow
 * start fires the search:search_exit tracepoint.  See README.md.
 *
 * The whole per-socket state (Cubic 20 bytes, HyStart 8, SEARCH 72 with its
 * 26 u16 bins, 1 status byte) fits the 104 bytes of icsk_ca_priv.
 */
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/kernel.h>
#include <linux/inet_diag.h>
#include <net/tcp.h>

#include "cubic_core.h"
#include "search_core.h"

#define CREATE_TRACE_POINTS
#include "search_trace.h"

/* How slow start ended; also the tracepoint's "reason". */
enum search_status {
	SS_RUNNING = 0,		/* still in slow start (or SEARCH off) */
	SS_BY_SEARCH = 1,
	SS_BY_HYSTART = 2,
	SS_BY_LOSS = 3,
};

struct search_ca {
	struct cubic_state cubic;
	struct hystart_state hy;
	struct search_state search;
	u8 status;		/* enum search_status */
};

/* A bounded unsigned module parameter. */
struct search_uint_param {
	unsigned int val;
	unsigned int min;
	unsigned int max;
};

static int search_uint_set(const char *buf, const struct kernel_param *kp)
{
	struct search_uint_param *p = kp->arg;
	unsigned int v;
	int ret;

	ret = kstrtouint(buf, 0, &v);
	if (ret)
		return ret;
	if (v < p->min || v > p->max)
		return -EINVAL;
	WRITE_ONCE(p->val, v);
	return 0;
}

static int search_uint_get(char *buf, const struct kernel_param *kp)
{
	const struct search_uint_param *p = kp->arg;

	return scnprintf(buf, PAGE_SIZE, "%u\n", READ_ONCE(p->val));
}

static const struct kernel_param_ops search_uint_ops = {
	.set = search_uint_set,
	.get = search_uint_get,
};

static struct search_uint_param window_factor = {
	SEARCH_WINDOW_FACTOR_DEF, SEARCH_WINDOW_FACTOR_MIN,
	SEARCH_WINDOW_FACTOR_MAX
};
static struct search_uint_param window_bins = {
	SEARCH_W_DEF, SEARCH_W_MIN, SEARCH_W_MAX
};
static struct search_uint_param extra_bins = {
	SEARCH_EXTRA_DEF, SEARCH_EXTRA_MIN, SEARCH_EXTRA_MAX
};
static struct search_uint_param thresh = {
	SEARCH_THRESH_DEF, SEARCH_THRESH_MIN, SEARCH_THRESH_MAX
};

module_param_cb(window_factor, &search_uint_ops, &window_factor, 0644);
MODULE_PARM_DESC(window_factor,
		 "SEARCH window in tenths of the initial RTT (5..100, default 35)");
module_param_cb(window_bins, &search_uint_ops, &window_bins, 0644);
MODULE_PARM_DESC(window_bins, "SEARCH bins per window, W (2..24, default 10)");
module_param_cb(extra_bins, &search_uint_ops, &extra_bins, 0644);
MODULE_PARM_DESC(extra_bins, "SEARCH EXTRA_BINS (1..23, default 15)");
module_param_cb(thresh, &search_uint_ops, &thresh, 0644);
MODULE_PARM_DESC(thresh, "SEARCH exit threshold in per-mille (1..1000, default 350)");

static bool search_on = true;
module_param_named(search, search_on, bool, 0644);
MODULE_PARM_DESC(search, "SEARCH decides the end of slow start (default 1)");

static bool hystart;
module_param(hystart, bool, 0644);
MODULE_PARM_DESC(hystart, "HyStart delay test may also end slow start (default 0)");

static bool fast_convergence = true;
module_param(fast_convergence, bool, 0644);
MODULE_PARM_DESC(fast_convergence, "Cubic fast convergence (default 1)");

static struct search_params search_params_now(void)
{
	struct search_params p = {
		.window_factor = READ_ONCE(window_factor.val),
		.bins = READ_ONCE(window_bins.val),
		.extra_bins = READ_ONCE(extra_bins.val),
		.thresh = READ_ONCE(thresh.val),
	};

	return p;
}

static struct search_ca *search_ca(struct sock *sk)
{
	return inet_csk_ca(sk);
}

/* Our clocks: microseconds and milliseconds, both wrapping u32. */
static u32 search_now_us(const struct tcp_sock *tp)
{
	return (u32)tp->tcp_mstamp;
}

static u32 search_now_ms(const struct tcp_sock *tp)
{
	return (u32)div_u64(tp->tcp_mstamp, USEC_PER_MSEC);
}

/* Start measuring a new slow start. */
static void search_rearm(struct sock *sk, u32 rtt_us)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct search_ca *ca = search_ca(sk);
	struct search_params p = search_params_now();

	search_arm(&ca->search, &p, search_now_us(tp), tp->delivered, rtt_us);
	hystart_round(&ca->hy, tp->snd_nxt);
	ca->status = SS_RUNNING;
}

static void search_init(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct search_ca *ca = search_ca(sk);

	memset(ca, 0, sizeof(*ca));
	cubic_reset(&ca->cubic);
	/* the handshake's RTT, if there was one, is the initial RTT */
	cubic_rtt_sample(&ca->cubic, tp->srtt_us >> 3);
	search_rearm(sk, tp->srtt_us >> 3);
}

/* Leave slow start now, and say why. */
static void search_leave(struct sock *sk, enum search_status why)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct search_ca *ca = search_ca(sk);
	struct search_state *s = &ca->search;

	if (why != SS_BY_LOSS)
		tp->snd_ssthresh = tcp_snd_cwnd(tp);
	if (why == SS_BY_SEARCH)
		s->flags |= SEARCH_F_EXITED;
	search_disarm(s);
	ca->status = why;
	trace_search_exit(ntohs(inet_sk(sk)->inet_sport),
			  ntohs(inet_sk(sk)->inet_dport), why,
			  tcp_snd_cwnd(tp),
			  s->norm_diff == SEARCH_NORM_NONE ? 0 : s->norm_diff,
			  s->bin_dur_us ?
			  search_elapsed_us(s, search_now_us(tp)) : 0,
			  s->bin_dur_us);
}

static void search_acked(struct sock *sk, const struct ack_sample *sample)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct search_ca *ca = search_ca(sk);
	u32 rtt_us = sample->rtt_us > 0 ? (u32)sample->rtt_us : 0;

	cubic_rtt_sample(&ca->cubic, rtt_us);

	if (!(ca->search.flags & SEARCH_F_ARMED) || ca->status != SS_RUNNING)
		return;
	if (!tcp_in_slow_start(tp)) {
		/* slow start ended on its own (cwnd reached ssthresh) */
		search_disarm(&ca->search);
		return;
	}
	if (!rtt_us)
		rtt_us = tp->srtt_us >> 3;

	if (READ_ONCE(search_on)) {
		struct search_params p = search_params_now();

		if (search_update(&ca->search, &p, search_now_us(tp),
				  tp->delivered, rtt_us) == SEARCH_EXIT) {
			search_leave(sk, SS_BY_SEARCH);
			return;
		}
	}
	if (READ_ONCE(hystart) &&
	    hystart_update(&ca->hy, tp->snd_una, tp->snd_nxt, rtt_us,
			   ca->cubic.delay_min_us, tcp_snd_cwnd(tp)))
		search_leave(sk, SS_BY_HYSTART);
}

static void search_cong_avoid(struct sock *sk, u32 ack, u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct search_ca *ca = search_ca(sk);
	u32 cnt;

	if (!tcp_is_cwnd_limited(sk))
		return;
	if (tcp_in_slow_start(tp)) {
		acked = tcp_slow_start(tp, acked);
		if (!acked)
			return;
	}
	cnt = cubic_cnt(&ca->cubic, tcp_snd_cwnd(tp), search_now_ms(tp));
	tcp_cong_avoid_ai(tp, cnt, acked);
}

static u32 search_ssthresh(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct search_ca *ca = search_ca(sk);

	/* a loss before SEARCH fired ends slow start: report that too */
	if ((ca->search.flags & SEARCH_F_ARMED) && ca->status == SS_RUNNING &&
	    tcp_in_slow_start(tp))
		search_leave(sk, SS_BY_LOSS);
	return cubic_on_loss(&ca->cubic, tcp_snd_cwnd(tp),
			     READ_ONCE(fast_convergence));
}

static void search_set_state(struct sock *sk, u8 new_state)
{
	struct search_ca *ca = search_ca(sk);

	if (new_state == TCP_CA_Loss) {
		/* RTO: the window restarts from 1, so does slow start */
		u32 rtt = ca->cubic.delay_min_us ?: tcp_sk(sk)->srtt_us >> 3;

		cubic_reset(&ca->cubic);
		search_rearm(sk, rtt);
	}
}

static void search_cwnd_event(struct sock *sk, enum tcp_ca_event event)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct search_ca *ca = search_ca(sk);

	if (event != CA_EVENT_TX_START)
		return;

	/* restart after idle: the Cubic curve does not advance while idle */
	if (ca->cubic.epoch_start_ms) {
		u32 now = search_now_ms(tp);
		s32 idle = (s32)(tcp_jiffies32 - tp->lsndtime);

		if (idle > 0) {
			ca->cubic.epoch_start_ms += jiffies_to_msecs(idle);
			if (cc_after32(ca->cubic.epoch_start_ms, now))
				ca->cubic.epoch_start_ms = now;
			if (!ca->cubic.epoch_start_ms)
				ca->cubic.epoch_start_ms = 1;
		}
	}
	/* an idle gap inside slow start would look like a rate collapse */
	if ((ca->search.flags & SEARCH_F_ARMED) && ca->status == SS_RUNNING)
		search_rearm(sk, ca->cubic.delay_min_us ?: tp->srtt_us >> 3);
}

static size_t search_get_info(struct sock *sk, u32 ext, int *attr,
			      union tcp_cc_info *info)
{
	/* ss asks with the VEGASINFO bit; BBRINFO does not fit its mask */
	if (ext & (1 << (INET_DIAG_BBRINFO - 1)) ||
	    ext & (1 << (INET_DIAG_VEGASINFO - 1))) {
		const struct tcp_sock *tp = tcp_sk(sk);
		const struct search_ca *ca = inet_csk_ca(sk);
		const struct search_state *s = &ca->search;
		u64 bw = 0;
		u32 state;

		if (tp->rate_interval_us)
			bw = div64_u64((u64)tp->rate_delivered * tp->mss_cache *
				       USEC_PER_SEC, tp->rate_interval_us);
		if (ca->status != SS_RUNNING)
			state = ca->status + 1;	/* 2 SEARCH, 3 HyStart, 4 loss */
		else if (s->flags & SEARCH_F_ARMED)
			state = 1;		/* measuring */
		else
			state = 0;		/* not in slow start */

		memset(&info->bbr, 0, sizeof(info->bbr));
		info->bbr.bbr_bw_lo = (u32)bw;
		info->bbr.bbr_bw_hi = (u32)(bw >> 32);
		info->bbr.bbr_min_rtt = ca->cubic.delay_min_us;
		/* norm_diff in 1/256 units, shown by ss as a fraction */
		if (s->norm_diff > 0)
			info->bbr.bbr_pacing_gain =
				((u32)s->norm_diff * 256 + SEARCH_PERMILLE / 2) /
				SEARCH_PERMILLE;
		info->bbr.bbr_cwnd_gain = state * 256;
		*attr = INET_DIAG_BBRINFO;
		return sizeof(info->bbr);
	}
	return 0;
}

static struct tcp_congestion_ops search_ops __read_mostly = {
	.name		= "search",
	.owner		= THIS_MODULE,
	.init		= search_init,
	.ssthresh	= search_ssthresh,
	.cong_avoid	= search_cong_avoid,
	.set_state	= search_set_state,
	.undo_cwnd	= tcp_reno_undo_cwnd,
	.cwnd_event	= search_cwnd_event,
	.pkts_acked	= search_acked,
	.get_info	= search_get_info,
};

static int __init search_register(void)
{
	BUILD_BUG_ON(sizeof(struct search_ca) > ICSK_CA_PRIV_SIZE);
	return tcp_register_congestion_control(&search_ops);
}

static void __exit search_unregister(void)
{
	tcp_unregister_congestion_control(&search_ops);
}

module_init(search_register);
module_exit(search_unregister);

MODULE_AUTHOR("cclab course kit");
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Cubic with SEARCH 2.0 slow start (course kit implementation)");
MODULE_VERSION("0.1");
