/*
 * calib_report.h — what `calibrate` prints and applies, shared by memdecayd
 * (live statistics) and memdecayctl (`--from FILE`, a journal replayed
 * offline through the same tracker).
 */
#ifndef MD_CALIB_REPORT_H
#define MD_CALIB_REPORT_H

#include <stddef.h>

#include "calibrate.h"
#include "journal.h"
#include "sbuf.h"

typedef char md__calib_names[MD_REGIONS_MAX][MD__JOURNAL_NAME_LEN];

/* Table (or JSON object) of every named region and every region with
 * samples.  When items is not NULL, fills "memdecay.region.<r>.lambda=<v>"
 * for each applicable region (status ok) into items[] (each item_len bytes)
 * and returns how many; regions skipped are said so in the report. */
int md__calib_report(const struct md__calib_stats *st, const md__calib_names names,
		     uint32_t grace_steps, const char *source, int json, struct md__sbuf *b,
		     char (*items)[128], size_t max_items);

/* Replays a journal into st (zeroed first) through one tracker per engine;
 * live tokens at the end are flushed as samples.  grace 0: the journal's.
 * Returns entries read or -errno with err. */
long md__calib_from_journal(const char *path, uint32_t grace_steps, struct md__calib_stats *st,
			    md__calib_names names, uint32_t *grace_used, char *err, size_t errlen);

#endif
