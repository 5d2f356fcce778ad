/* ncclshim-inspect: reads ncclshim records (and optionally NCCL debug logs)
 * and tells the operator which communicators exist, what they carried, and
 * what looks wrong. Exit status: 0 fine, 1 --check found problems, 2 usage
 * error or some input could not be read. */
#include "inspect.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fputs("usage: ncclshim-inspect [--json|--html FILE] [--check] [-v|--verbose] [--nccl-log FILE]... PATH...\n"
          "  PATH            a record file (*.jsonl), an NCCL debug log, or a directory holding\n"
          "                  ncclshim.*.jsonl records and *.log / nccl*.txt NCCL logs\n"
          "  --nccl-log FILE an NCCL_DEBUG=INFO log (joins the network each communicator used)\n"
          "  --json          one JSON document instead of the table\n"
          "  --html FILE     also write a self-contained HTML report (timeline per host and process,\n"
          "                  the table beside it) to FILE ('-': stdout, instead of the table)\n"
          "  --check         exit 1 and print PROBLEM lines on stderr if any communicator has one\n"
          "  -v, --verbose   list every rank of every communicator\n",
          f);
}

/* The report goes to a temporary file renamed into place: a reader (or a test)
 * never sees half a page, and a failed write leaves no plausible-looking file. */
static int write_html(inspect_state *st, const char *path)
{
    if (strcmp(path, "-") == 0) {
        inspect_print_html(st, stdout);
        return fflush(stdout) == 0 ? 0 : -1;
    }
    char *tmp = xasprintf("%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "ncclshim-inspect: cannot write %s: %s\n", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    inspect_print_html(st, f);
    int bad = ferror(f);
    if (fclose(f) != 0)
        bad = 1;
    if (bad || rename(tmp, path) != 0) {
        fprintf(stderr, "ncclshim-inspect: cannot write %s: %s\n", path, strerror(errno));
        unlink(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}

/* --check's verdict: the input's problems, then each communicator's. */
static void print_problems(const inspect_state *st)
{
    for (size_t k = 0; k < st->problems.n; k++)
        fprintf(stderr, "PROBLEM %s\n", st->problems.v[k]);
    for (size_t i = 0; i < st->ncomms; i++) {
        const communicator *c = st->sorted[i];
        for (size_t k = 0; k < c->problems.n; k++)
            fprintf(stderr, "PROBLEM %s: %s\n", c->short_group, c->problems.v[k]);
    }
}

int main(int argc, char **argv)
{
    int json = 0, check = 0, verbose = 0, ninputs = 0;
    const char *html = NULL;
    /* two passes over argv: options first so --json placement does not matter */
    char **nccl_logs = xmalloc((size_t)argc * sizeof *nccl_logs);
    char **paths = xmalloc((size_t)argc * sizeof *paths);
    int nlogs = 0, npaths = 0, opts_done = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!opts_done && strcmp(a, "--") == 0) {
            opts_done = 1;
        } else if (!opts_done && strcmp(a, "--json") == 0) {
            json = 1;
        } else if (!opts_done && strcmp(a, "--check") == 0) {
            check = 1;
        } else if (!opts_done && (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0)) {
            verbose = 1;
        } else if (!opts_done && (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)) {
            usage(stdout);
            free(nccl_logs);
            free(paths);
            return 0;
        } else if (!opts_done && strcmp(a, "--nccl-log") == 0) {
            if (i + 1 >= argc) {
                fputs("ncclshim-inspect: --nccl-log needs a FILE\n", stderr);
                usage(stderr);
                free(nccl_logs);
                free(paths);
                return 2;
            }
            nccl_logs[nlogs++] = argv[++i];
        } else if (!opts_done && strcmp(a, "--html") == 0) {
            if (i + 1 >= argc) {
                fputs("ncclshim-inspect: --html needs a FILE ('-' for stdout)\n", stderr);
                usage(stderr);
                free(nccl_logs);
                free(paths);
                return 2;
            }
            html = argv[++i];
        } else if (!opts_done && strncmp(a, "--html=", 7) == 0) {
            html = a + 7;
        } else if (!opts_done && strncmp(a, "--nccl-log=", 11) == 0) {
            nccl_logs[nlogs++] = (char *)a + 11;
        } else if (!opts_done && a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "ncclshim-inspect: unknown option '%s'\n", a);
            usage(stderr);
            free(nccl_logs);
            free(paths);
            return 2;
        } else {
            paths[npaths++] = argv[i];
        }
    }
    ninputs = nlogs + npaths;
    if (ninputs == 0) {
        fputs("ncclshim-inspect: no input given\n", stderr);
        usage(stderr);
        free(nccl_logs);
        free(paths);
        return 2;
    }

    inspect_state *st = inspect_new();
    for (int i = 0; i < npaths; i++)
        inspect_read_path(st, paths[i], INPUT_AUTO);
    for (int i = 0; i < nlogs; i++)
        inspect_read_path(st, nccl_logs[i], INPUT_NCCL_LOG);
    free(nccl_logs);
    free(paths);

    inspect_group(st);
    size_t bad = inspect_check(st);
    int status = 0;
    int html_stdout = html && strcmp(html, "-") == 0;
    if (html && write_html(st, html) != 0)
        status = 2;
    if (html_stdout)
        ;
    else if (json)
        inspect_print_json(st, stdout);
    else
        inspect_print_table(st, stdout, verbose);
    fflush(stdout);

    for (size_t i = 0; i < st->errors.n; i++)
        if (st->errors.v[i].fatal)
            status = 2;
    if (check && bad) {
        print_problems(st);
        status = 1;
    }
    inspect_close(st);
    return status;
}
