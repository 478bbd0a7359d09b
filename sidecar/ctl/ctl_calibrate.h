/*
 * ctl_calibrate.h — `memdecayctl calibrate [--apply] [--from FILE]
 * [--grace-steps N] [--json]`: with --from, the journal is replayed here (no
 * daemon needed) and, with --apply, the λ values are sent as one `set`;
 * without --from the daemon computes from its live statistics.
 */
#ifndef MD_CTL_CALIBRATE_H
#define MD_CTL_CALIBRATE_H

/* argv[0] is "calibrate".  Returns an exit status (>= 0) when done, or -1
 * when main must send the request now in *fwd_argv / *fwd_argc (the daemon's
 * own `calibrate`, or a `set` built from an offline estimate). */
int md__ctl_calibrate(int argc, char **argv, int json, char ***fwd_argv, int *fwd_argc);

#endif
