/*
 * daemon.h — memdecayd's state: the control socket and its connections, the
 * attached engines with the daemon's private copy of each one's geometry, and
 * the glue to the policy host (sidecar/host).  One thread owns all of it.
 * An attached engine process is a struct md__peer here; the host keeps its
 * own per-engine scoring state (struct md__engine, sidecar/host), keyed by
 * the same id.
 *
 *   server.c   socket, connections, signals, the main loop and idle protocol
 *   attach.c   HELLO → segments, eventfds, SCM_RIGHTS; detach
 *   engine.c   ingest (copy, frame-check, md__host_ingest), resync, decisions
 *              into command rings, doorbells, heartbeats, parameter blocks
 *   control.c  operator commands (get/set/policy/budget/engines/stats/top/…)
 */
#ifndef MD_DAEMON_H
#define MD_DAEMON_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "memdecay_abi.h"
#include "memdecay_ring.h"
#include "host.h"
#include "params.h"
#include "loop.h"
#include "sbuf.h"
#include "lathist.h"
#include "log.h"
#include "calib_live.h"

#define MD__CONN_MAX 256             /* operator (not attached) connections; engines: daemon.max_engines */
#define MD__CONN_IN_MAX (MD_CTL_LINE_MAX + 1 + 4096) /* a pending line plus one recv */
#define MD__CONN_OUT_CAP (1u << 20)   /* queued reply bytes past which requests wait (docs/reliability.md) */
#define MD__CONN_OUT_STALL_NS (5ull * 1000000000ull) /* queued output that moves for none of this: closed */
#define MD__INGEST_BUDGET_NS 2000000ull /* ingest time per engine per iteration */
#define MD__RELABEL_PIECE 1024u      /* pages per piece of a RELABEL between clock reads */
#define MD__RESYNC_GAP_FACTOR 8u     /* a resync waits 8x the last one's duration after it ended */
#define MD__RESYNC_GAP_MAX_NS 60000000000ull /* keeps the 1/9 share up to 7.5 s resyncs */
#define MD__INGEST_BATCH 4096u       /* records per engine per iteration (fairness) */
#define MD__DECIDE_BATCH 256u
#define MD__HOST_CHUNK 64u          /* records per md__host_ingest_batch call */
#define MD__DECIDE_COALESCE_NS 500000ull /* decision passes while records flow */
#define MD__TICK_MS 100u
#define MD__NAP_TICK_NS 1000000ull   /* a nap's wait: how late a napping daemon sees a record */
#define MD__OPERATOR_IDLE_NS (30ull * 1000000000ull)
#define MD__PAGE_READ_TRIES 16

enum md__detach_reason {
	MD__DETACH_EOF = 0,
	MD__DETACH_HEARTBEAT,
	MD__DETACH_VIOLATIONS,
	MD__DETACH_SHUTDOWN,
	MD__DETACH_ERROR,
	MD__DETACH_COUNT,
};
const char *md__detach_reason_name(int r);

struct md__peer;

/* A decision waiting for the command ring, stamped when it was made. */
struct md__pending_cmd {
	struct md__decision dec;
	uint64_t decided_ns;
};
struct mdk_cuda_ring_reader;

struct md__conn {
	struct md__daemon *d;
	struct md__conn *next, *prev;
	int fd;
	struct md__watch *w;
	pid_t pid;
	uid_t uid;
	gid_t gid;
	uint64_t opened_ns;
	char in[MD__CONN_IN_MAX];
	size_t in_len;
	char *out;                  /* reply still to send: [out_off, out_len) of out_cap */
	size_t out_len, out_off, out_cap;
	uint64_t out_progress_ns;   /* last time queued output was empty or moved */
	int paused;                 /* requests wait: queued output over MD__CONN_OUT_CAP */
	int admin;                  /* daemon uid or --operator-group (docs/operations.md) */
	int close_after_reply;
	int dead;
	struct md__peer *engine;  /* set once HELLO succeeded */
};

/* One attached engine process: its connection, mappings, rings and counters. */
struct md__peer {
	struct md__daemon *d;
	struct md__peer *next;
	uint32_t id;
	char name[64];
	pid_t pid;
	uid_t uid;
	struct md__conn *conn;
	int eseg_fd, dseg_fd, bell_to_daemon_fd, bell_to_engine_fd;
	struct md__watch *bell_w;
	/* mappings (engine segment read-only) */
	const void *eseg;
	size_t eseg_size;
	void *dseg;
	size_t dseg_size;
	/* private geometry: never re-read from shared memory */
	uint32_t page_tokens, page_capacity, max_seqs, stats_capacity, cmd_capacity;
	uint32_t tp_rank, tp_size;
	const struct md_engine_ctrl *ectrl;
	const struct md_page_entry *page_table;
	const uint64_t *seq_clock;
	struct md_daemon_ctrl *dctrl;
	struct md_param_block *params;
	struct md_ring_cons stats;
	struct md_ring_prod cmds;
	uint64_t last_resync_request;
	uint64_t resync_not_before_ns;     /* rate limit: next resync allowed from here */
	uint64_t resync_last_ns, resync_ns_total, resyncs_deferred;
	uint64_t ingest_budget_cut;        /* iterations whose ingest stopped at its time budget */
	/* a RELABEL being applied in pieces across iterations (engine.c) */
	struct md_stats_rec relabel_rec;
	uint64_t relabel_cursor;
	int relabel_pending, relabel_touched;
	struct md__ratelimit warn_rl;
	uint64_t attach_ns;
	uint64_t violation_grace;
	struct md_page_entry *resync_buf;  /* page-table snapshot (lazily allocated) */
	uint64_t *resync_clocks;     /* records after a resync that may legally disagree */
	struct md__resync_ord { uint64_t pos; uint32_t seq, slot; } *resync_order;
	uint32_t resync_n;
	/* decisions not yet in the command ring (ring full) */
	struct md__pending_cmd *pending;
	size_t pending_head, pending_len, pending_cap;
	/* counters */
	uint64_t records, rejected[MD__REJ_COUNT], torn, bad_tail, violations;
	uint64_t resyncs, resync_pages, resync_pages_skipped, cmds_sent, cmd_ring_full;
	uint64_t doorbells;                /* rung to the engine */
	uint64_t doorbells_in;             /* rung by the engine (eventfd counts read) */
	int detaching;
	/* calibration (sidecar/calib) and the optional CUDA stats ring (cuda_transport.c) */
	struct md__calib_engine calib;
	int stats_transport;               /* enum md__stats_transport */
	uint64_t cuda_export_off;          /* private copy of off.engine.cuda_ring_export */
	struct mdk_cuda_ring_reader *cuda_rd;
	struct md_stats_rec *cuda_buf;
	/* ABI 1.2: per-sequence options (read at resync) and protection counts */
	uint32_t abi_minor;                /* HELLO's */
	const struct md_seq_opts *seq_opts; /* engine segment's, NULL for a 1.0/1.1 engine */
	uint32_t *seq_protect;             /* daemon segment's seq_protect[max_seqs] */
	uint64_t seq_opts_torn;            /* resync entries being written: left as they were */
	uint64_t seq_protect_writes;       /* counts written into seq_protect */
};

struct md__daemon {
	struct md__loop *loop;
	struct md__host *host;       /* holds the one copy of the parameters: md__daemon_params */
	char socket_path[108];
	char config_path[PATH_MAX];
	int have_config;
	int listen_fd, signal_fd;
	struct md__watch *listen_w, *signal_w;
	int have_group;
	gid_t group;
	int have_op_group;                 /* --operator-group: operators besides the daemon's uid */
	gid_t op_group;
	char save_dir[PATH_MAX];           /* --save-dir: where `save FILE` may write ("" none) */
	struct md__ratelimit refuse_rl;    /* refused connections and HELLOs */
	struct md__peer *engines;
	uint32_t n_engines;
	uint32_t next_engine_id;
	uint64_t instance_id;
	struct md__conn *conns;
	int n_conns;
	int stop;
	int dirty;                    /* state changed: run decisions */
	int idle_wake;                /* a doorbell or socket event arrived */
	uint64_t start_ns;
	uint64_t iterations, sleeps, naps;
	uint64_t last_work_ns;        /* last iteration that found engine work (daemon.nap_ms) */
	uint64_t attaches, attach_refused, detaches[MD__DETACH_COUNT];
	uint64_t weights_clamped;     /* HELLO weights cut to budget.max_engine_weight */
	uint64_t conns_refused, conns_evicted, ctl_requests, ctl_errors, reloads, reload_failures;
	struct md__calib_live *calib;      /* sidecar/calib: trackers, statistics, journal */
	/* wall time of each md__host_decide call that returned evictions */
	struct md_lathist decide_lat;
	uint64_t last_decide_ns;
	/* decision to command-ring write, per command (ring-full waits included) */
	struct md_lathist cmd_lat;
	int socket_inherited;         /* socket activation: the manager owns the socket file */
};

/* The parameters in force: the host's copy, the only one in the process
 * (changed through md__daemon_apply_params). */
static inline const struct md__params *md__daemon_params(const struct md__daemon *d)
{
	return md__host_params(d->host);
}

/* attach.c */
int md__peer_attach(struct md__daemon *d, struct md__conn *c, const char *hello_line);

/* peer.c: the end of a peer, below every file that ends one */
void md__peer_detach(struct md__daemon *d, struct md__peer *e, int reason, const char *why);
void md__peer_free(struct md__peer *e);   /* an engine never registered, or detached */
struct md__peer *md__peer_find(struct md__daemon *d, uint32_t id);
struct md__peer *md__peer_lookup(struct md__daemon *d, const char *id_or_name);
void md__conn_close(struct md__daemon *d, struct md__conn *c);
void md__conn_send(struct md__daemon *d, struct md__conn *c, const char *buf, size_t len);
static inline size_t md__conn_queued(const struct md__conn *c)
{
	return c->out_len - c->out_off;
}

/* engine.c */
int md__peers_service(struct md__daemon *d);   /* returns 1 if it found work */
int md__peers_any_work(struct md__daemon *d);  /* the re-check after sleeping=1 */
void md__peers_set_sleeping(struct md__daemon *d, uint32_t v);
void md__peers_tick(struct md__daemon *d, uint64_t now_ns);
void md__peer_publish_params(struct md__daemon *d, struct md__peer *e);
void md__peers_publish_params(struct md__daemon *d);
void md__peer_drop_pending(struct md__peer *e);
/* One record copied out of a stats ring (host or CUDA): counted, validated by
 * the host, observed for calibration.  Returns 0, or -1 if it got the engine
 * detached. */
int md__peer_ingest_rec(struct md__daemon *d, struct md__peer *e,
			const struct md_stats_rec *rec);

/* control.c */
/* Runs one operator request; fills reply with the full framed reply. */
void md__control_exec(struct md__daemon *d, struct md__conn *c, char *line,
		      struct md__sbuf *reply);
int md__daemon_apply_params(struct md__daemon *d, const struct md__params *p);
/* The `metrics` body as an operator sees it (every engine); for metrics_http.c. */
int md__control_metrics(struct md__daemon *d, struct md__sbuf *b);

/* server.c */
/* 1 if uid (with primary gid) is a member of group (primary or supplementary). */
int md__uid_in_group(uid_t uid, gid_t gid, gid_t group);

#endif
