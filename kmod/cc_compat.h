/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cc_compat.h - the few kernel types and helpers the algorithm cores use.
 *
 * spline_core.h, cubic_core.h and search_core.h contain no kernel calls, so
 * that the host harness in test/ can compile them with ASan and UBSan.  In a
 * kernel build this header pulls in the real definitions; on the host it
 * provides equivalents with the same names and semantics.
 */
#ifndef CC_COMPAT_H
#define CC_COMPAT_H

#ifdef __KERNEL__
#include <linux/types.h>
#include <linux/math64.h>
#else
#include <stdbool.h>
#include <stdint.h>

typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
typedef int8_t s8;
typedef int16_t s16;
typedef int32_t s32;
typedef int64_t s64;

/* Same contract as the kernel's: the caller guarantees divisor != 0. */
static inline u64 div64_u64(u64 dividend, u64 divisor)
{
	return dividend / divisor;
}

static inline u64 div_u64(u64 dividend, u32 divisor)
{
	return dividend / divisor;
}

#ifndef USEC_PER_SEC
#define USEC_PER_SEC	1000000L
#endif
#ifndef USEC_PER_MSEC
#define USEC_PER_MSEC	1000L
#endif
#ifndef U32_MAX
#define U32_MAX		((u32)~0U)
#endif
#ifndef U16_MAX
#define U16_MAX		((u16)~0U)
#endif
#ifndef U64_MAX
#define U64_MAX		((u64)~0ULL)
#endif
#endif /* __KERNEL__ */

/*
 * Type-specific helpers with names of our own, so they never collide with
 * the kernel's type-checking min()/max() macros.
 */
static inline u64 cc_min64(u64 a, u64 b) { return a < b ? a : b; }
static inline u64 cc_max64(u64 a, u64 b) { return a > b ? a : b; }
static inline u32 cc_min32(u32 a, u32 b) { return a < b ? a : b; }
static inline u32 cc_max32(u32 a, u32 b) { return a > b ? a : b; }

/* Division that yields @fallback instead of faulting when @den is zero. */
static inline u64 cc_div_or(u64 num, u64 den, u64 fallback)
{
	return den ? div64_u64(num, den) : fallback;
}

/*
 * a * b / c, exact and without overflowing 64 bits whenever the result fits,
 * for divisors up to 2^32.  Both factors are split by c first:
 *   a = qa*c + ra, b = qb*c + rb  =>
 *   a*b/c = qa*b + ra*qb + ra*rb/c   (ra, rb < c, so ra*rb < 2^64).
 * Saturates at U64_MAX instead of wrapping; c == 0 also yields U64_MAX.
 */
static inline u64 cc_mul_div(u64 a, u64 b, u64 c)
{
	u64 qa, ra, qb, rb, t1, t2, sum;

	if (!c)
		return U64_MAX;
	qa = div64_u64(a, c);
	ra = a - qa * c;
	qb = div64_u64(b, c);
	rb = b - qb * c;
	if (qa && b > div64_u64(U64_MAX, qa))
		return U64_MAX;
	t1 = qa * b;
	if (ra && qb > div64_u64(U64_MAX, ra))
		return U64_MAX;
	t2 = ra * qb;
	if (t1 > U64_MAX - t2)
		return U64_MAX;
	sum = t1 + t2;
	t1 = div64_u64(ra * rb, c);
	if (sum > U64_MAX - t1)
		return U64_MAX;
	return sum + t1;
}

/* Wrap-safe "a is after b" for 32-bit time stamps and sequence counters. */
static inline bool cc_after32(u32 a, u32 b)
{
	return (s32)(a - b) > 0;
}

#endif /* CC_COMPAT_H */
