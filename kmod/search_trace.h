/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Tracepoint of tcp_search: one event when a flow leaves slow start, readable
 * through tracefs as events/search/search_exit (see README.md).
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM search

#if !defined(_SEARCH_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define _SEARCH_TRACE_H

#include <linux/tracepoint.h>

TRACE_EVENT(search_exit,

	TP_PROTO(u16 sport, u16 dport, u8 reason, u32 cwnd, s32 norm_diff,
		 u32 elapsed_us, u32 bin_dur_us),

	TP_ARGS(sport, dport, reason, cwnd, norm_diff, elapsed_us, bin_dur_us),

	TP_STRUCT__entry(
		__field(u16, sport)
		__field(u16, dport)
		__field(u8, reason)
		__field(u32, cwnd)
		__field(s32, norm_diff)
		__field(u32, elapsed_us)
		__field(u32, bin_dur_us)
	),

	TP_fast_assign(
		__entry->sport = sport;
		__entry->dport = dport;
		__entry->reason = reason;
		__entry->cwnd = cwnd;
		__entry->norm_diff = norm_diff;
		__entry->elapsed_us = elapsed_us;
		__entry->bin_dur_us = bin_dur_us;
	),

	TP_printk("sport=%u dport=%u reason=%s cwnd=%u norm_diff=%d elapsed_us=%u bin_us=%u",
		  __entry->sport, __entry->dport,
		  __print_symbolic(__entry->reason,
				   { 1, "search" }, { 2, "hystart" },
				   { 3, "loss" }, { 4, "invalid" }),
		  __entry->cwnd, __entry->norm_diff, __entry->elapsed_us,
		  __entry->bin_dur_us)
);

#endif /* _SEARCH_TRACE_H */

#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE search_trace
#include <trace/define_trace.h>
