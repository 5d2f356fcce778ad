/* Lists of glob patterns, as users write them in NCCLSHIM_* variables. */
#ifndef NCCLSHIM_POLICY_PATTERN_H
#define NCCLSHIM_POLICY_PATTERN_H

#include <stddef.h>

/*
 * Match `text` against a comma-separated list of shell globs (fnmatch,
 * case-insensitive: Ray titles and library paths vary in case).  Returns the
 * index of the first matching pattern, or -1.  If `matched` is given, the
 * matching pattern is copied there (NUL-terminated, cut to `matched_len`).
 * Empty items are ignored; a pattern longer than 255 bytes never matches.
 */
int pattern_list_match(const char *list, const char *text, char *matched, size_t matched_len);

#endif
