/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Tracepoint of tcp_spline: one event per mode change, readable through
 * tracefs as events/spline/spline_mode (see README.md).
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM spline

#if !defined(_SPLINE_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define _SPLINE_TRACE_H

#include <linux/tracepoint.h>

TRACE_EVENT(spline_mode,

	TP_PROTO(u16 sport, u16 dport, u8 old_mode, u8 new_mode, u32 cwnd,
		 u64 bw, u32 min_rtt_us, u32 fairness),

	TP_ARGS(sport, dport, old_mode, new_mode, cwnd, bw, min_rtt_us,
		fairness),

	TP_STRUCT__entry(
		__field(u16, sport)
		__field(u16, dport)
		__field(u8, old_mode)
		__field(u8, new_mode)
		__field(u32, cwnd)
		__field(u64, bw)
		__field(u32, min_rtt_us)
		__field(u32, fairness)
	),

	TP_fast_assign(
		__entry->sport = sport;
		__entry->dport = dport;
		__entry->old_mode = old_mode;
		__entry->new_mode = new_mode;
		__entry->cwnd = cwnd;
		__entry->bw = bw;
		__entry->min_rtt_us = min_rtt_us;
		__entry->fairness = fairness;
	),

	TP_printk("sport=%u dport=%u old=%s new=%s cwnd=%u bw=%llu min_rtt_us=%u fairness=%u",
		  __entry->sport, __entry->dport,
		  __print_symbolic(__entry->old_mode,
				   { 1, "START_PROBE" }, { 2, "PROBE_BW" },
				   { 3, "PROBE_RTT" }, { 4, "DRAIN_PROBE" }),
		  __print_symbolic(__entry->new_mode,
				   { 1, "START_PROBE" }, { 2, "PROBE_BW" },
				   { 3, "PROBE_RTT" }, { 4, "DRAIN_PROBE" }),
		  __entry->cwnd, __entry->bw, __entry->min_rtt_us,
		  __entry->fairness)
);

#endif /* _SPLINE_TRACE_H */

#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE spline_trace
#include <trace/define_trace.h>
