/* The shim's version, as the load record and each rank's facts for the root
 * (policy/facts.h) carry it. */
#ifndef NCCLSHIM_VERSION_H
#define NCCLSHIM_VERSION_H
#define NCCLSHIM_VERSION "0.1.0"
#endif
