/*
 * calib_daemon.h — memdecayd's calibration glue: a lifetime tracker per
 * engine fed with every record the host accepted, the per-region statistics
 * that `calibrate` reads live, and the optional stats journal (--journal).
 */
#ifndef MD_CALIB_DAEMON_H
#define MD_CALIB_DAEMON_H

#include <stddef.h>
#include <stdint.h>

#include "calibrate.h"
#include "journal.h"
#include "memdecay_abi.h"

struct md__daemon;
struct md__peer;
struct md__ctl_req;
struct md__sbuf;

struct md__calib_daemon {
	struct md__calib_stats stats;   /* finished samples, every engine */
	uint32_t grace_steps;
	struct md__journal *journal;
	int journal_stop_logged, journal_error_logged;
};

/* journal_path may be NULL.  0 or -errno with err. */
int md__calib_daemon_init(struct md__daemon *d, const char *journal_path, uint64_t max_bytes,
			  uint32_t grace_steps, char *err, size_t errlen);
void md__calib_daemon_free(struct md__daemon *d);

void md__calib_engine_attached(struct md__daemon *d, struct md__peer *e);
void md__calib_engine_detached(struct md__daemon *d, struct md__peer *e);
void md__calib_engine_resync(struct md__daemon *d, struct md__peer *e);
/* One record md__host_ingest accepted. */
void md__calib_observe(struct md__daemon *d, struct md__peer *e, const struct md_stats_rec *r);
/* Writes buffered journal bytes (bounded); tick: also small remainders. */
void md__calib_flush(struct md__daemon *d, int tick);

/* `calibrate [--apply]` */
int md__calib_control(struct md__daemon *d, struct md__ctl_req *r, struct md__sbuf *b, char *err,
		      size_t errlen);

#endif
