/*
 * The shim's two clocks, apart from the records that print one of them: the
 * wall clock the records' timestamps use, and the monotonic clock every
 * deadline and duration is measured on (a wall clock can step).
 */
#ifndef NCCLSHIM_CLOCK_H
#define NCCLSHIM_CLOCK_H

#include <stdint.h>

/* Wall-clock seconds since the epoch (the records' `ts`). */
double shim_now(void);
/* A monotonic clock in microseconds: deadlines and durations. */
uint64_t shim_mono_us(void);

#endif
