/*
 * The text every rank's facts point at until something is said: all strings
 * empty (policy/facts.h).  Constant, so shared by every thread.
 */
#include "facts.h"

const struct rank_text facts_no_text;
