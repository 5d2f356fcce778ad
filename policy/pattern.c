/*
 * Glob pattern lists (pattern.h), the way users write them in NCCLSHIM_*
 * variables: the first match, or the most specific one, named back so that a
 * reason can say which pattern decided.
 */
#define _GNU_SOURCE
#include "pattern.h"

#include <fnmatch.h>
#include <string.h>

int pattern_list_match(const char *list, const char *text, char *matched, size_t matched_len)
{
    if (!list || !text)
        return -1;
    int index = 0;
    const char *p = list;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char pat[256];
        if (n > 0 && n < sizeof(pat)) {
            memcpy(pat, p, n);
            pat[n] = '\0';
            if (fnmatch(pat, text, FNM_CASEFOLD) == 0) {
                if (matched && matched_len) {
                    strncpy(matched, pat, matched_len - 1);
                    matched[matched_len - 1] = '\0';
                }
                return index;
            }
        }
        if (n > 0)
            index++;
        if (!end)
            break;
        p = end + 1;
    }
    return -1;
}

/* Literal characters of a glob: what it demands of a text, beyond wildcards. */
static int literal_chars(const char *pat)
{
    int n = 0;
    for (const char *p = pat; *p; p++) {
        if (*p == '*' || *p == '?')
            continue;
        if (*p == '[') {
            const char *close = strchr(p + 1, ']');
            if (close) {
                p = close;
                n++;
                continue;
            }
        }
        if (*p == '\\' && p[1])
            p++;
        n++;
    }
    return n;
}

int pattern_list_best(const char *list, const char *text, char *matched, size_t matched_len)
{
    if (!list || !text)
        return -1;
    int best = -1;
    const char *p = list;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char pat[256];
        if (n > 0 && n < sizeof(pat)) {
            memcpy(pat, p, n);
            pat[n] = '\0';
            int lit = literal_chars(pat);
            if (lit > best && fnmatch(pat, text, FNM_CASEFOLD) == 0) {
                best = lit;
                if (matched && matched_len) {
                    strncpy(matched, pat, matched_len - 1);
                    matched[matched_len - 1] = '\0';
                }
            }
        }
        if (!end)
            break;
        p = end + 1;
    }
    return best;
}
