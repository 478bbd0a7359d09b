/*
 * calib_live.h — calibration while memdecayd runs (docs/calibration.md): one
 * lifetime tracker per attached engine, fed with each record the policy host
 * accepted and the tokens the host refreshed for it; finished samples
 * accumulate per region; `calibrate` adds the still-live tokens (censored)
 * and estimates.  With a journal the same facts are appended to it, so the
 * estimate can be recomputed offline (`memdecayctl calibrate --from`).
 *
 * Knows nothing of the daemon: engines are ids with a geometry, the tracker
 * of each is the caller's to keep, and applying an estimate is the caller's.
 */
#ifndef MD_CALIB_LIVE_H
#define MD_CALIB_LIVE_H

#include <stddef.h>
#include <stdint.h>

#include "calib_report.h"
#include "calibrate.h"
#include "journal.h"
#include "memdecay_abi.h"
#include "sbuf.h"

struct md__calib_live {
	struct md__calib_stats stats;   /* finished samples, every engine */
	uint32_t grace_steps;
	struct md__journal *journal;
	int journal_stop_logged, journal_error_logged;
};

/* An attached engine as calibration sees it. */
struct md__calib_engine {
	uint32_t id;
	uint32_t page_tokens, page_capacity, max_seqs;
	struct md__calib_tracker *tracker;  /* NULL: not measured (no memory) */
};

/* journal_path may be NULL; names go into the journal's header.  Returns 0
 * or -errno with err. */
int md__calib_live_open(struct md__calib_live **out, const char *journal_path,
			uint64_t journal_max_bytes, uint32_t grace_steps, uint64_t instance_id,
			const md__calib_names names, char *err, size_t errlen);
void md__calib_live_close(struct md__calib_live *c);

/* Attach makes e->tracker (NULL if out of memory: the caller says so). */
void md__calib_live_attach(struct md__calib_live *c, struct md__calib_engine *e);
void md__calib_live_detach(struct md__calib_live *c, struct md__calib_engine *e);
/* A resync: what was followed ends here, pages opened later are followed. */
void md__calib_live_resync(struct md__calib_live *c, struct md__calib_engine *e);
/* One record the host accepted; refreshed: the tokens the host refreshed
 * for it (md__host_ingest_refreshed). */
void md__calib_live_observe(struct md__calib_live *c, struct md__calib_engine *e,
			    const struct md_stats_rec *r, uint16_t refreshed);
/* Writes buffered journal bytes (bounded); tick: also small remainders. */
void md__calib_live_flush(struct md__calib_live *c, int tick);

/* The `calibrate` report over the finished samples plus the live tokens of
 * the n engines given, under the region names given.  items/max_items as
 * md__calib_report.  Returns what md__calib_report returns, or -ENOMEM with
 * err. */
int md__calib_live_report(const struct md__calib_live *c,
			  const struct md__calib_engine *const *engines, size_t n,
			  const md__calib_names names, int json, struct md__sbuf *b,
			  char (*items)[128], size_t max_items, char *err, size_t errlen);

#endif
