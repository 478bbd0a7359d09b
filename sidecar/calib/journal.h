/*
 * journal.h — memdecayd's stats journal (`--journal FILE`): the accepted
 * lifecycle and attention records, reduced to what lifetime estimation needs,
 * as fixed 40-byte little-endian entries after a 576-byte header.  Format in
 * docs/operations.md ("Stats journal").  The writer never blocks ingest:
 * entries go to a bounded buffer that the main loop flushes; a full buffer
 * drops and counts, and recording stops at the size limit.
 */
#ifndef MD_JOURNAL_H
#define MD_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "memdecay_abi.h"

#define MD__JOURNAL_MAGIC 0x314c4e524a444d4dULL /* "MMDJRNL1" */
#define MD__JOURNAL_VERSION 1u
#define MD__JOURNAL_NAME_LEN 32u
#define MD__JOURNAL_BUF_BYTES (1u << 20)
#define MD__JOURNAL_MAX_DEFAULT (1ull << 30)

enum md__jtype {
	MD__J_ATTACH = 1,    /* engine: slot = page_capacity, gen = max_seqs, n = page_tokens */
	MD__J_DETACH = 2,    /* engine: its live tokens end (censored unless quiet ≥ grace) */
	MD__J_RESYNC = 3,    /* engine: same as DETACH, then it continues */
	MD__J_OPEN = 4,      /* seq slot gen clock n labels */
	MD__J_GROW = 5,      /* slot gen clock n labels */
	MD__J_LABELS = 6,    /* slot gen labels (a relabel changed this page) */
	MD__J_ATTN = 7,      /* slot gen clock refresh mass */
	MD__J_FREE = 8,      /* slot gen clock n = reason */
	MD__J_SEQ_END = 9,   /* seq clock */
	MD__J_CLOCK = 10,    /* seq clock: the sequence's clock (STEP), written before
			      * DETACH and RESYNC so the replay ends live tokens alike */
};

struct md__jrec {
	uint8_t type;        /* enum md__jtype */
	uint8_t n;           /* tokens (OPEN/GROW), page_tokens (ATTACH), reason (FREE) */
	uint16_t refresh;    /* ATTN: bit k = token k refreshed at clock */
	uint32_t engine;
	uint32_t seq;
	uint32_t slot;
	uint32_t gen;
	float mass;          /* ATTN: page mass (raw) */
	uint64_t clock;      /* sequence clock */
	uint64_t labels;     /* OPEN/GROW/LABELS: 4-bit region per token */
};
_Static_assert(sizeof(struct md__jrec) == 40, "journal entry");

struct md__journal_header {
	uint64_t magic;      /* MD__JOURNAL_MAGIC */
	uint32_t version;
	uint32_t header_size;/* sizeof(struct md__journal_header) */
	uint32_t rec_size;   /* sizeof(struct md__jrec) */
	uint32_t grace_steps;/* the daemon's --calib-grace-steps (a default for readers) */
	uint64_t instance_id;
	uint64_t start_unix_ns;
	uint64_t resv[3];
	char region_name[MD_REGIONS_MAX][MD__JOURNAL_NAME_LEN]; /* "" = unused id */
};
_Static_assert(sizeof(struct md__journal_header) == 576, "journal header");

struct md__journal_stats {
	uint64_t records, bytes_written, dropped_full, dropped_max, write_errors, flushes;
	int stopped;         /* max bytes reached */
};

struct md__journal;

/* Creates (truncates) path and writes the header.  0 or -errno with err. */
int md__journal_open(struct md__journal **out, const char *path, uint64_t max_bytes,
		     const struct md__journal_header *hdr, char *err, size_t errlen);
/* Appends one entry to the buffer (never a system call); drops when full. */
void md__journal_put(struct md__journal *j, const struct md__jrec *r);
/* Writes buffered bytes without waiting (at most `budget` bytes; 0 = all).
 * Returns bytes written or -errno. */
long md__journal_flush(struct md__journal *j, size_t budget);
size_t md__journal_buffered(const struct md__journal *j);
void md__journal_get_stats(const struct md__journal *j, struct md__journal_stats *st);
const char *md__journal_path(const struct md__journal *j);
void md__journal_close(struct md__journal *j);   /* flushes what it can */

/* Reads a journal: fn per entry (stop early by returning nonzero).  Returns
 * entries read, or -errno / -EPROTO (bad header) with err.  A truncated
 * last entry (daemon killed mid-write) is ignored. */
typedef int (*md__journal_fn)(const struct md__jrec *r, void *ud);
long md__journal_replay(const char *path, struct md__journal_header *hdr, md__journal_fn fn,
			void *ud, char *err, size_t errlen);

#endif
