/* efasim-stat: prints EFASim's host-wide queue-pair figures (text, or --json), or clears them
 * (--reset).  The state is the segment EFASIM_STATE names (default /efasim-<uid>); --state NAME
 * overrides.  Looking reclaims the QPs of dead processes, as the plugin does. */
#define _GNU_SOURCE
#include "efasim_state.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void log_stderr(int level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "efasim-stat: %s", level == 2 ? "warning: " : "");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static const char *status_name(int s) {
  switch (s) {
  case EFASIM_COMM_ACTIVE: return "active";
  case EFASIM_COMM_REFUSED: return "refused";
  case EFASIM_COMM_FINALIZED: return "finalized";
  default: return "free";
  }
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: efasim-stat [--json] [--state NAME]      print the host's EFASim queue-pair figures\n"
          "       efasim-stat --reset [--state NAME]       clear them (budget and cost from EFASIM_QP_BUDGET,\n"
          "                                                EFASIM_QPS_PER_CONN)\n"
          "The state is EFASIM_STATE's shared-memory segment (default /efasim-<uid>).\n");
}

int main(int argc, char **argv) {
  int json = 0, reset = 0;
  const char *state = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) json = 1;
    else if (strcmp(argv[i], "--reset") == 0) reset = 1;
    else if (strcmp(argv[i], "--state") == 0 && i + 1 < argc) state = argv[++i];
    else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) { usage(stdout); return 0; }
    else { usage(stderr); return 2; }
  }
  if (state) setenv("EFASIM_STATE", state, 1);
  struct efasim_config cfg;
  char err[512];
  if (efasim_config_read(&cfg, err, sizeof(err)) != 0) {
    fprintf(stderr, "efasim-stat: %s\n", err);
    return 2;
  }
  if (reset) {
    if (efasim_state_reset(&cfg, err, sizeof(err)) != 0) {
      fprintf(stderr, "efasim-stat: %s\n", err);
      return 1;
    }
    if (json) printf("{\"state\":\"%s\",\"reset\":true,\"budget\":%ld,\"qps_per_conn\":%ld}\n", cfg.state_name, cfg.budget, cfg.qps_per_conn);
    else printf("EFASim state %s reset: budget %ld QPs, %ld per connection\n", cfg.state_name, cfg.budget, cfg.qps_per_conn);
    return 0;
  }
  struct efasim_state *st = NULL;
  int rc = efasim_state_attach(cfg.state_name, &st, err, sizeof(err));
  if (rc < 0) {
    fprintf(stderr, "efasim-stat: %s\n", err);
    return 1;
  }
  if (rc == 1) {
    if (json) printf("{\"state\":\"%s\",\"exists\":false}\n", cfg.state_name);
    else printf("EFASim state %s: none yet (no process has used EFASim; efasim-stat --reset creates it)\n", cfg.state_name);
    return 0;
  }
  efasim_lock(st, log_stderr);
  struct efasim_state s = *st; /* a consistent copy; print outside the lock */
  efasim_unlock(st);
  efasim_state_close(st);
  long left = (long)(s.budget - s.in_use);
  if (json) {
    printf("{\"state\":\"%s\",\"exists\":true,\"budget\":%lld,\"qps_per_conn\":%lld,\"in_use\":%lld,\"left\":%ld,"
           "\"peak\":%lld,\"connections\":%llu,\"connections_open\":%llu,\"qps_charged\":%llu,"
           "\"connections_refused\":%llu,\"inits\":%llu,\"inits_refused\":%llu,\"reclaimed_qps\":%llu,"
           "\"dead_processes\":%llu,\"processes\":[",
           cfg.state_name, (long long)s.budget, (long long)s.qps_per_conn, (long long)s.in_use, left, (long long)s.peak,
           (unsigned long long)s.conns, (unsigned long long)s.conns_open, (unsigned long long)s.charged,
           (unsigned long long)s.conns_refused, (unsigned long long)s.inits, (unsigned long long)s.inits_refused,
           (unsigned long long)s.reclaimed, (unsigned long long)s.dead_procs);
    int first = 1;
    for (int i = 0; i < EFASIM_MAX_PROCS; i++) {
      struct efasim_proc *p = &s.procs[i];
      if (p->pid == 0) continue;
      printf("%s{\"pid\":%d,\"in_use\":%lld,\"qps_per_conn\":%lld,\"connections\":%llu,\"connections_open\":%llu,"
             "\"qps_charged\":%llu,\"connections_refused\":%llu,\"inits\":%llu,\"inits_refused\":%llu}",
             first ? "" : ",", (int)p->pid, (long long)p->in_use, (long long)p->qps_per_conn,
             (unsigned long long)p->conns, (unsigned long long)p->conns_open, (unsigned long long)p->charged,
             (unsigned long long)p->conns_refused, (unsigned long long)p->inits, (unsigned long long)p->inits_refused);
      first = 0;
    }
    printf("],\"comms\":[");
    first = 1;
    for (int i = 0; i < EFASIM_MAX_COMMS; i++) {
      struct efasim_comm *c = &s.comms[i];
      if (c->status == EFASIM_COMM_FREE) continue;
      printf("%s{\"comm\":\"0x%016llx\",\"pid\":%d,\"status\":\"%s\",\"in_use\":%lld,\"connections\":%llu,\"seq\":%llu}",
             first ? "" : ",", (unsigned long long)c->comm_id, (int)c->pid, status_name(c->status),
             (long long)c->in_use, (unsigned long long)c->conns, (unsigned long long)c->seq);
      first = 0;
    }
    printf("]}\n");
    return 0;
  }
  printf("EFASim state %s\n", cfg.state_name);
  printf("  budget               %lld QPs (%lld per connection when set)\n", (long long)s.budget, (long long)s.qps_per_conn);
  printf("  in use               %lld\n", (long long)s.in_use);
  printf("  left                 %ld\n", left);
  printf("  peak                 %lld\n", (long long)s.peak);
  printf("  connections          %llu made, %llu open, %llu refused\n", (unsigned long long)s.conns,
         (unsigned long long)s.conns_open, (unsigned long long)s.conns_refused);
  printf("  QPs charged          %llu\n", (unsigned long long)s.charged);
  printf("  communicators        %llu on EFASim, %llu refused (fell back)\n", (unsigned long long)s.inits,
         (unsigned long long)s.inits_refused);
  printf("  reclaimed            %llu QPs from %llu dead processes\n", (unsigned long long)s.reclaimed,
         (unsigned long long)s.dead_procs);
  printf("  processes:\n");
  for (int i = 0; i < EFASIM_MAX_PROCS; i++) {
    struct efasim_proc *p = &s.procs[i];
    if (p->pid == 0) continue;
    printf("    pid %-8d in use %-6lld connections %llu (%llu open, %llu refused)  charged %llu  comms %llu (%llu refused)\n",
           (int)p->pid, (long long)p->in_use, (unsigned long long)p->conns, (unsigned long long)p->conns_open,
           (unsigned long long)p->conns_refused, (unsigned long long)p->charged, (unsigned long long)p->inits,
           (unsigned long long)p->inits_refused);
  }
  printf("  communicators:\n");
  for (int i = 0; i < EFASIM_MAX_COMMS; i++) {
    struct efasim_comm *c = &s.comms[i];
    if (c->status == EFASIM_COMM_FREE) continue;
    printf("    comm 0x%016llx pid %-8d %-9s in use %-6lld connections %llu\n", (unsigned long long)c->comm_id,
           (int)c->pid, status_name(c->status), (long long)c->in_use, (unsigned long long)c->conns);
  }
  return 0;
}
