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
 * /sys/module/tcp_search/parameters/).  A flow copies the SEARCH set when it
 * arms (connection start, RTO, undo back to an infinite ssthresh) and keeps
 * it for that slow start, so a write applies to slow starts that begin
 * afterwards:
 *
 *   window_factor  SEARCH window in tenths of the initial RTT (35 = 3.5),
 *                  accepted 5..100
 *   window_bins    W, bins per window (10), accepted 2..24
 *   extra_bins     EXTRA_BINS, how far back (in bins) the previous window
 *                  may be (15), accepted 1..23; the ring holds 26 bins, so
 *                  at most 25 - W are usable (15 with W = 10)
 *   thresh         THRESH in per-mille (350 = 0.35), accepted 1..1000
 *   stall_bins     restart the measurement when more than this many bins
 *                  pass without an ACK; 0 (default) = never, as in the paper
 *   search         1: SEARCH decides the end of slow start (default)
 *   hystart        1: HyStart's delay test also may end it (default 0)
 *   fast_convergence  Cubic's fast convergence (default 1)
 *
 * The SEARCH values are checked one by one and then as a set
 * (search_params_check(): every check must be able to run, and a clean
 * doubling slow start must not exit).  A write that the other current values
 * make invalid fails with EINVAL and changes nothing, so moving to a distant
 * set may need the writes in a particular order.  At module load the values
 * given on the command line are checked as a set once all are parsed, and
 * an invalid set refuses the load.  A flow that nevertheless finds an
 * invalid set when it arms (it read the values while another CPU was
 * writing them) does not arm SEARCH; it reports cwnd_gain state 5 in ss, a
 * search_exit event with reason=invalid, and one rate-limited log line.
 * Nothing here can divide by a zero parameter.
 *
 * When SEARCH (re)arms, and when it does not:
 *  - at connection start, with the handshake's RTT;
 *  - after an RTO (CA_Loss), waiting for the first RTT sample of the new
 *    slow start (the minimum RTT is forgotten as in upstream Cubic, so a
 *    path that became longer is measured afresh);
 *  - when an undo puts back an infinite ssthresh (a spurious fast recovery
 *    that had ended slow start): slow start resumes, and so do SEARCH and
 *    HyStart;
 *  - not when an idle flow restarts after an earlier exit
 *    (CA_EVENT_CWND_RESTART): that slow start is bounded by ssthresh.
 * While the flow is application-limited (tp->app_limited), and when it
 * starts sending again with nothing in flight (CA_EVENT_TX_START), no bin is
 * rolled and no check is made: the measurement starts over (search_hold()),
 * because a flat delivery rate then says nothing about the path.
 *
 * Visibility: get_info fills the BBR info block, so "ss -ti" prints
 * bbr:(bw:..,mrtt:..,pacing_gain:NORM_DIFF,cwnd_gain:STATE); leaving slow
 * start fires the search:search_exit tracepoint.  See README.md.
 *
 * The whole per-socket state (Cubic 28 bytes, HyStart 8, SEARCH 64 with its
 * 26 packed 12-bit bins, the parameter set and the slow-start status in its
 * flags) fits the 104 bytes of icsk_ca_priv.
 */
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/kernel.h>
#include <linux/mutex.h>
#include <linux/inet_diag.h>
#include <net/tcp.h>

#include "cubic_core.h"
#include "search_core.h"

#define CREATE_TRACE_POINTS
#include "search_trace.h"

/*
 * How slow start ended.  1..4 are also the tracepoint's "reason"; the value
 * lives in the owner bits of search_state.flags (3 bits).
 */
enum search_status {
	SS_RUNNING = 0,		/* in slow start, watched */
	SS_BY_SEARCH = 1,
	SS_BY_HYSTART = 2,
	SS_BY_LOSS = 3,
	SS_INVALID = 4,		/* reason only: SEARCH refused its parameters */
	SS_ENDED = 5,		/* cwnd reached ssthresh: nothing to report */
};

struct search_ca {
	struct cubic_state cubic;
	struct hystart_state hy;
	struct search_state search;	/* flags also hold the status */
};

static enum search_status search_status(const struct search_ca *ca)
{
	return (ca->search.flags & SEARCH_F_OWNER_MASK) >> SEARCH_F_OWNER_SHIFT;
}

static void search_status_set(struct search_ca *ca, enum search_status st)
{
	ca->search.flags = (ca->search.flags & (u8)~SEARCH_F_OWNER_MASK) |
			   (((u8)st << SEARCH_F_OWNER_SHIFT) & SEARCH_F_OWNER_MASK);
}

/* A bounded unsigned module parameter. */
struct search_uint_param {
	unsigned int val;
	unsigned int min;
	unsigned int max;
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
static struct search_uint_param stall_bins = {
	SEARCH_STALL_DEF, 0, SEARCH_STALL_MAX
};

/* Serialises "check the set, then store" across concurrent writers. */
static DEFINE_MUTEX(search_param_mutex);
/* Set by module init once the load-time values were checked as a set. */
static bool search_params_live;

static struct search_params search_params_now(void)
{
	struct search_params p = {
		.window_factor = READ_ONCE(window_factor.val),
		.bins = READ_ONCE(window_bins.val),
		.extra_bins = READ_ONCE(extra_bins.val),
		.thresh = READ_ONCE(thresh.val),
		.stall_bins = READ_ONCE(stall_bins.val),
	};

	return p;
}

static int search_uint_set(const char *buf, const struct kernel_param *kp)
{
	struct search_uint_param *p = kp->arg;
	struct search_params next;
	unsigned int v;
	int ret;

	ret = kstrtouint(buf, 0, &v);
	if (ret)
		return ret;
	if (v < p->min || v > p->max)
		return -EINVAL;

	mutex_lock(&search_param_mutex);
	if (READ_ONCE(search_params_live)) {
		/* the set as it would be after this write */
		next = search_params_now();
		if (p == &window_factor)
			next.window_factor = v;
		else if (p == &window_bins)
			next.bins = v;
		else if (p == &extra_bins)
			next.extra_bins = v;
		else if (p == &thresh)
			next.thresh = v;
		else if (p == &stall_bins)
			next.stall_bins = v;
		if (search_params_check(&next) != SEARCH_PARAMS_OK)
			ret = -EINVAL;
	}
	if (!ret)
		WRITE_ONCE(p->val, v);
	mutex_unlock(&search_param_mutex);
	return ret;
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

module_param_cb(window_factor, &search_uint_ops, &window_factor, 0644);
MODULE_PARM_DESC(window_factor,
		 "SEARCH window in tenths of the initial RTT (5..100, default 35)");
module_param_cb(window_bins, &search_uint_ops, &window_bins, 0644);
MODULE_PARM_DESC(window_bins, "SEARCH bins per window, W (2..24, default 10)");
module_param_cb(extra_bins, &search_uint_ops, &extra_bins, 0644);
MODULE_PARM_DESC(extra_bins, "SEARCH EXTRA_BINS (1..23, default 15)");
module_param_cb(thresh, &search_uint_ops, &thresh, 0644);
MODULE_PARM_DESC(thresh, "SEARCH exit threshold in per-mille (1..1000, default 350)");
module_param_cb(stall_bins, &search_uint_ops, &stall_bins, 0644);
MODULE_PARM_DESC(stall_bins,
		 "SEARCH restarts after more than this many bins without an ACK (0 = never, default)");

static bool search_on = true;
module_param_named(search, search_on, bool, 0644);
MODULE_PARM_DESC(search, "SEARCH decides the end of slow start (default 1)");

static bool hystart;
module_param(hystart, bool, 0644);
MODULE_PARM_DESC(hystart, "HyStart delay test may also end slow start (default 0)");

static bool fast_convergence = true;
module_param(fast_convergence, bool, 0644);
MODULE_PARM_DESC(fast_convergence, "Cubic fast convergence (default 1)");

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

static void search_trace(struct sock *sk, enum search_status why)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	const struct search_state *s = &search_ca(sk)->search;

	trace_search_exit(ntohs(inet_sk(sk)->inet_sport),
			  ntohs(inet_sk(sk)->inet_dport), why,
			  tcp_snd_cwnd(tp),
			  s->norm_diff == SEARCH_NORM_NONE ? 0 : s->norm_diff,
			  s->bin_dur_us ?
			  search_elapsed_us(s, search_now_us(tp)) : 0,
			  s->bin_dur_us);
}

/* Start watching a new slow start; @rtt_us 0: wait for the first sample. */
static void search_rearm(struct sock *sk, u32 rtt_us)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct search_ca *ca = search_ca(sk);
	struct search_params p = search_params_now();

	hystart_round(&ca->hy, tp->snd_nxt);
	search_status_set(ca, SS_RUNNING);
	if (!search_arm(&ca->search, &p, search_now_us(tp), tp->delivered,
			rtt_us)) {
		pr_warn_ratelimited("tcp_search: parameter set wf=%u W=%u extra=%u thresh=%u stall=%u refused (rule %d); SEARCH not armed for this flow\n",
				    p.window_factor, p.bins, p.extra_bins,
				    p.thresh, p.stall_bins,
				    (int)search_params_check(&p));
		search_trace(sk, SS_INVALID);
	}
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

	if (why != SS_BY_LOSS)
		tp->snd_ssthresh = tcp_snd_cwnd(tp);
	search_disarm(&ca->search);
	search_status_set(ca, why);
	search_trace(sk, why);
}

static void search_acked(struct sock *sk, const struct ack_sample *sample)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct search_ca *ca = search_ca(sk);
	/* only real samples, as upstream: none on retransmitted data */
	u32 rtt_us = sample->rtt_us > 0 ? (u32)sample->rtt_us : 0;

	cubic_rtt_sample(&ca->cubic, rtt_us);

	if (search_status(ca) != SS_RUNNING)
		return;
	if (!tcp_in_slow_start(tp)) {
		/* slow start ended on its own (cwnd reached ssthresh) */
		search_disarm(&ca->search);
		search_status_set(ca, SS_ENDED);
		return;
	}

	if (READ_ONCE(search_on)) {
		if (tp->app_limited)
			search_hold(&ca->search, search_now_us(tp),
				    tp->delivered);
		else if (search_update(&ca->search, search_now_us(tp),
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
	cnt = cubic_cnt(&ca->cubic, tcp_snd_cwnd(tp), search_now_ms(tp),
			acked);
	tcp_cong_avoid_ai(tp, cnt, acked);
}

static u32 search_ssthresh(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct search_ca *ca = search_ca(sk);

	/* a loss before SEARCH fired ends slow start: report that too */
	if (search_status(ca) == SS_RUNNING && tcp_in_slow_start(tp))
		search_leave(sk, SS_BY_LOSS);
	return cubic_on_loss(&ca->cubic, tcp_snd_cwnd(tp),
			     READ_ONCE(fast_convergence));
}

static u32 search_undo_cwnd(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct search_ca *ca = search_ca(sk);

	/*
	 * Called by tcp_undo_cwnd_reduction() just before it puts back
	 * prior_ssthresh.  If that is infinite, the recovery that ended slow
	 * start was spurious and slow start resumes: watch it again.  After
	 * an RTO SEARCH was re-armed already (status SS_RUNNING).
	 */
	if (tp->prior_ssthresh >= TCP_INFINITE_SSTHRESH &&
	    search_status(ca) == SS_BY_LOSS)
		search_rearm(sk, ca->cubic.delay_min_us ?: tp->srtt_us >> 3);
	return tcp_reno_undo_cwnd(sk);
}

static void search_set_state(struct sock *sk, u8 new_state)
{
	struct search_ca *ca = search_ca(sk);

	if (new_state == TCP_CA_Loss) {
		/* RTO: the window restarts from 1, so does slow start; the
		 * path may have changed, so wait for a fresh RTT sample */
		cubic_reset(&ca->cubic);
		search_rearm(sk, 0);
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
	/* nothing was in flight: the idle gap would look like a rate
	 * collapse, so the measurement starts over (bin_dur is kept) */
	if (search_status(ca) == SS_RUNNING)
		search_hold(&ca->search, search_now_us(tp), tp->delivered);
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
		enum search_status st = search_status(ca);
		u64 bw = 0;
		u32 state;

		if (tp->rate_interval_us)
			bw = div64_u64((u64)tp->rate_delivered * tp->mss_cache *
				       USEC_PER_SEC, tp->rate_interval_us);
		if (st == SS_BY_SEARCH || st == SS_BY_HYSTART ||
		    st == SS_BY_LOSS)
			state = st + 1;	/* 2 SEARCH, 3 HyStart, 4 loss */
		else if (st == SS_RUNNING && (s->flags & SEARCH_F_ARMED))
			state = 1;	/* measuring */
		else if (st == SS_RUNNING && (s->flags & SEARCH_F_INVALID))
			state = 5;	/* parameter set refused: not armed */
		else
			state = 0;	/* not in slow start */

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
	.undo_cwnd	= search_undo_cwnd,
	.cwnd_event	= search_cwnd_event,
	.pkts_acked	= search_acked,
	.get_info	= search_get_info,
};

static int __init search_register(void)
{
	struct search_params p;
	enum search_param_fault fault;

	BUILD_BUG_ON(sizeof(struct search_ca) > ICSK_CA_PRIV_SIZE);
	BUILD_BUG_ON(SS_ENDED > (SEARCH_F_OWNER_MASK >> SEARCH_F_OWNER_SHIFT));

	/* the values given at load time, checked as a set */
	mutex_lock(&search_param_mutex);
	p = search_params_now();
	fault = search_params_check(&p);
	if (fault == SEARCH_PARAMS_OK)
		WRITE_ONCE(search_params_live, true);
	mutex_unlock(&search_param_mutex);
	if (fault != SEARCH_PARAMS_OK) {
		pr_err("tcp_search: parameter set wf=%u W=%u extra=%u thresh=%u stall=%u refused (rule %d)\n",
		       p.window_factor, p.bins, p.extra_bins, p.thresh,
		       p.stall_bins, (int)fault);
		return -EINVAL;
	}
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
