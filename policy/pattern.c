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
