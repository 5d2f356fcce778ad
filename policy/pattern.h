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

/*
 * The most specific pattern of the list that matches `text`: the one with the
 * most literal characters (a '*' or '?' counts none, a bracket expression
 * one), the first of equals.  Returns that count, or -1 if none matches;
 * `matched` as above.  When two lists claim one text (a title that looks
 * like a trainer's and an engine's), the more specific pattern says which.
 */
int pattern_list_best(const char *list, const char *text, char *matched, size_t matched_len);

#endif
