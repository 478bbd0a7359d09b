/*
 * client_internal.h — the md_client object shared by the files of libmemdecay.
 * Geometry, ring views and the page mirror are private copies: after attach the
 * library never trusts a size, offset or capacity read from shared memory.
 * Names with a double underscore are internal (not exported from the .so).
 */
#ifndef MD_CLIENT_INTERNAL_H
#define MD_CLIENT_INTERNAL_H

#include <stdint.h>
#include <stddef.h>
#include "memdecay.h"
#include "memdecay_ring.h"
#include "memdecay_clock.h"

#define MD__ERRMSG_MAX 256
#define MD__NO_SLOT UINT32_MAX

struct md__geometry {
	uint32_t page_tokens, page_capacity, max_seqs;
	uint32_t stats_capacity, cmd_capacity;
	uint32_t engine_id;
	uint32_t abi_minor;               /* the engine segment's: the daemon's minor */
	uint64_t instance_id;
	struct md_engine_offsets eoff;
	struct md_daemon_offsets doff;
	uint64_t eseg_size, dseg_size;
};

/* One attachment: everything that dies with the daemon connection. */
struct md__attach {
	int sock_fd, eseg_fd, dseg_fd, db_daemon_fd, db_engine_fd;
	void *eseg;                       /* RW */
	const void *dseg;                 /* RO */
	struct md__geometry g;
	struct md_engine_ctrl *ectrl;
	struct md_page_entry *ptab;
	uint64_t *seq_clock;
	const struct md_daemon_ctrl *dctrl;
	const struct md_param_block *params;
	struct md_ring_prod stats;
	struct md_ring_cons cmds;
	struct md_seq_opts *seq_opts;     /* 1.2: [max_seqs], NULL: the daemon has none */
	const uint32_t *seq_protect;      /* 1.2: [max_seqs], NULL: the daemon has none */
};

struct md_client {
	/* configuration (strings owned) */
	char *socket_path;                /* resolved at create */
	char *engine_name;
	char *policy;
	uint32_t page_tokens, page_capacity, max_seqs;
	uint32_t tp_rank, tp_size;
	int64_t budget_engine_pages, budget_sequence_tokens;
	double weight;
	uint32_t tier_capacity;           /* 1.4: HELLO tier_pages (0: no tier) */
	uint32_t page_bytes;              /* 1.4: HELLO page_bytes */

	int attached;
	int attach_error;                 /* last attach result: 0 or negative */
	struct md__attach a;
	uint64_t attach_ns;
	uint64_t last_sock_check_ns;
	int rang;                         /* doorbell rung and not yet consumed */
	uint64_t rang_tail;

	/* private mirror: the truth about every page, kept while detached */
	struct md_page_entry *mirror;
	uint8_t *pending;                 /* 1: handed out by poll, not yet freed */
	uint32_t *free_stack;
	uint32_t free_top;
	uint32_t *slot_next, *slot_prev;  /* per-sequence page lists, first_pos ascending:
					     a slot is on its sequence's live list or on
					     its tier list, never both */
	uint32_t *seq_head, *seq_tail;    /* oldest and newest live page of each sequence */
	uint32_t *tier_head, *tier_tail;  /* 1.4: the same for its pages in the host tier */
	uint64_t *seq_tokens;             /* live tokens of each sequence */
	uint64_t *clock;                  /* per-sequence clocks */
	uint32_t live_pages;
	uint32_t tier_pages;              /* 1.4: pages in the host tier */

	struct md_params_view params_cache;
	uint64_t tier_budget;             /* 1.4: budget_tier_pages of the last good read */

	/* the engine contract (seq.c, contract.c), per sequence */
	struct md_seq_opts *seq_opts;     /* the engine's own options (version unused) */
	uint64_t *seq_evicted;            /* pages freed with MD_FREE_EVICTED */
	uint64_t *seq_suppress;           /* seq_evicted + 1 at a settle timeout, 0: none */
	uint32_t hb_timeout_ms;           /* md_client_maintain's, for md_settle's checks */
	uint64_t retry_base_ns;           /* md_client_maintain's retry_ms */
	uint64_t retry_ns, next_retry_ns; /* its backoff: current period, next try */

	struct md_client_counters ctr;
	uint64_t proto_errors;
	char last_error[MD__ERRMSG_MAX];

	/* GPU publisher (gpu.c).  client.c reaches it only through these hooks,
	 * so a program that never calls md_gpu_* links no CUDA code. */
	int stats_cuda;                   /* 1: HELLO stats_transport=cuda */
	struct md_gpu *gpu;
	void (*gpu_attached)(struct md_client *c); /* after each attach: stats → staging */
	void (*gpu_client_gone)(struct md_gpu *g); /* md_client_destroy with a publisher */
};

/* client.c, for gpu.c, seq.c and contract.c */
void md__request_resync(struct md_client *c);
void md__lifecycle_dropped(struct md_client *c);
void md__ring_daemon(struct md_client *c);
struct md_stats_rec *md__lifecycle_rec(struct md_client *c, uint16_t type, uint32_t seq,
				       uint32_t slot, uint32_t gen, uint64_t clock);
void md__rec_publish(struct md_client *c, struct md_stats_rec *r);
int md__page_pinned(const struct md_page_entry *m, uint32_t pinned_mask);
int md__daemon_has_tier(const struct md_client *c);
void md__page_tier_in(struct md_client *c, uint32_t slot);
void md__page_restored(struct md_client *c, uint32_t slot);
void md__tier_event(struct md_client *c, uint32_t slot, uint32_t event);

/* seq.c, for client.c */
int md__seq_state_alloc(struct md_client *c);
void md__seq_state_free(struct md_client *c);
void md__seq_opts_reset(struct md_client *c, uint32_t seq);
int md__seq_opts_seed(struct md_client *c);

/* attach.c */
int md__attach(struct md_client *c, struct md__attach *out);
void md__attach_close(struct md__attach *a);
void md__set_error(struct md_client *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
int md__resolve_socket_path(const char *cfg_path, char *buf, size_t len);

#endif
