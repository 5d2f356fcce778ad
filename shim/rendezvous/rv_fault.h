/*
 * Fault injection for the rendezvous's agreement tests (tests/t/39-rv-agree.t),
 * compiled into every build and documented as test-only (docs/operations.md,
 * "Settings for tests only"): NCCLSHIM_TEST_RV_FAULT="<point>=<what>[,...]",
 * <what> a delay in ms or "kill" (SIGKILL to this process).  A test-only build
 * would test other bytes than the ones users run; the setting is read once per
 * process, and a point then costs a scan of that string (empty when unset).
 *
 * Points, in protocol order:
 *   connect        a rank, before it connects (to its leader or the root)
 *   hello          a rank, connected, before it sends its HELLO
 *   vote           a rank, before it sends a VOTE
 *   leader-hello   a host's leader, before it forwards a rank's HELLO
 *   leader-commit  a host's leader, before it hands the final verdict on
 *   root-decide    the root, every rank arrived, before it decides
 *   root-commit    the root, before it sends a final verdict (COMMIT, or a final DECISION)
 *   root-stall     the root's serving thread, once per process, after it
 *                  accepted its first connection and read what was there: a
 *                  process stopped while connections wait (tests/t/45-rv-chaos.t)
 * and "fanout=N" (rv_test_fanout).
 */
#ifndef NCCLSHIM_RV_FAULT_H
#define NCCLSHIM_RV_FAULT_H

void rv_fault(const char *point);
/* rv_fault at the first call in this process only (one call site: root-stall). */
void rv_fault_once(const char *point);

/* "fanout=N" in the same setting: the leaders the root and each leader take
 * before sending the next ones on (RV_ROOT_LEADERS, RV_LEADER_KIDS), so that
 * a test builds a deep tree from a few hosts; else `dflt`. */
int rv_test_fanout(int dflt);

#endif
