/*
 * memdecay_abi.h — the shared-memory ABI between an inference engine and memdecayd.
 *
 * Two memfd segments per engine, both created and sized by the daemon:
 *   engine segment  written by the engine, mapped read-only by the daemon:
 *                   control block (stats tail, command head, heartbeat, counters),
 *                   page table (the truth about every page), per-sequence clocks,
 *                   stats ring data.
 *   daemon segment  written by the daemon, mapped read-only by the engine
 *                   (sealed F_SEAL_FUTURE_WRITE): control block (stats head,
 *                   command tail, heartbeat, instance id), parameter block (seqlock),
 *                   command ring data.
 * Every index has one writer and lives in memory that writer owns.  Both segments
 * start with the same header: magic, version, geometry and an offsets table, the
 * way io_uring publishes its ring offsets.  Readers cache the geometry privately
 * when they attach and never trust the shared copy afterwards.
 *
 * Everything is fixed-width, little-endian, 8-byte aligned, pointer-free.
 */
#ifndef MEMDECAY_ABI_H
#define MEMDECAY_ABI_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* "MEMDCAY1" read as a little-endian u64. */
#define MD_ABI_MAGIC 0x31594143444d454dULL
#define MD_ABI_MAJOR 1u
#define MD_ABI_MINOR 4u   /* 1.1: off.engine.cuda_ring_export, HELLO stats_transport
                             1.2: per-sequence options (off.engine.seq_opts,
                                  MD_REC_SEQ_OPTS), the per-sequence protected
                                  page count (off.daemon.seq_protect)
                             1.3: a sequence's session state and tag in those
                                  options' reserved words
                             1.4: the host tier (docs/tier.md): page state
                                  MD_PAGE_TIER, MD_REC_PAGE_TIER, estimated
                                  attention (MD_REC_F_ESTIMATE), commands
                                  MD_CMD_RESTORE and MD_CMD_DROP, free reason
                                  MD_FREE_DROPPED, the parameter block's
                                  budget_tier_pages, HELLO tier_pages and
                                  page_bytes */

#define MD_PAGE_TOKENS_MAX 16u      /* a page's labels fit in one u64 (4 bits each) */
#define MD_PAGE_TOKENS_DEFAULT 16u
#define MD_REGIONS_MAX 16u          /* region ids are 4 bits */
#define MD_CACHELINE 64u

/* Built-in regions.  Ids 8..15 are free for names set in the daemon config. */
enum md_region {
	MD_REGION_SYSTEM = 0,
	MD_REGION_PLAN = 1,
	MD_REGION_USER = 2,
	MD_REGION_ASSISTANT = 3,
	MD_REGION_TOOL_IN = 4,
	MD_REGION_TOOL_OUT = 5,
	MD_REGION_RETRIEVAL = 6,
	MD_REGION_SCRATCHPAD = 7,
	MD_REGION_BUILTIN_COUNT = 8,
};

/* The one list of built-in region names, in id order: C reads it through
 * md_region_builtin_name, Python through libmemdecay's md_region_name. */
#define MD_REGION_BUILTIN_NAMES \
	"system", "plan", "user", "assistant", "tool_in", "tool_out", "retrieval", "scratchpad"
static inline const char *md_region_builtin_name(unsigned r)
{
	static const char *const names[MD_REGION_BUILTIN_COUNT] = {MD_REGION_BUILTIN_NAMES};
	return r < MD_REGION_BUILTIN_COUNT ? names[r] : NULL;
}

/* Token k of a page has region (labels >> (4*k)) & 0xf. */
static inline unsigned md_label_get(uint64_t labels, unsigned k)
{
	return (unsigned)((labels >> (4u * k)) & 0xfu);
}
static inline uint64_t md_label_set(uint64_t labels, unsigned k, unsigned region)
{
	uint64_t mask = 0xfULL << (4u * k);
	return (labels & ~mask) | ((uint64_t)(region & 0xfu) << (4u * k));
}

/* ---- policies and modes (parameter block values) ---- */
enum md_policy_id {
	MD_POLICY_MEMDECAY = 0,
	MD_POLICY_MEMDECAY_NORM = 1,
	MD_POLICY_H2O = 2,
	MD_POLICY_RECENCY = 3,
	MD_POLICY_RANDOM = 4,
	MD_POLICY_MEMDECAY_TURN = 5,
	MD_POLICY_COUNT,
};

/* The policy names, in id order (the host's policy table uses them). */
#define MD_POLICY_NAMES \
	"memdecay", "memdecay-norm", "h2o", "recency", "random", "memdecay-turn"
static inline const char *md_policy_builtin_name(unsigned p)
{
	static const char *const names[] = {MD_POLICY_NAMES};
	return p < sizeof(names) / sizeof(names[0]) ? names[p] : NULL;
}

enum md_norm_mode {
	MD_NORM_RAW = 0,       /* m_i as observed */
	MD_NORM_RELATIVE = 1,  /* m_i * n_live: relative to uniform attention */
};

/* ---- segment header (offset 0 of both segments) ---- */
enum md_segment_kind {
	MD_SEGMENT_ENGINE = 1,
	MD_SEGMENT_DAEMON = 2,
};

/* Byte offsets from the segment start, so the layout can grow in a minor
 * version without moving what exists. */
struct md_engine_offsets {
	uint64_t ctrl;        /* struct md_engine_ctrl */
	uint64_t page_table;  /* struct md_page_entry[page_capacity] */
	uint64_t seq_clock;   /* uint64_t[max_seqs] */
	uint64_t stats_ring;  /* struct md_stats_rec[stats_capacity] */
	uint64_t cuda_ring_export; /* 1.1: struct mdk_cuda_ring_export (engine-written), 0 = none */
	uint64_t seq_opts;    /* 1.2: struct md_seq_opts[max_seqs], 0 = none (a 1.0/1.1 engine) */
	uint64_t resv[2];
};

struct md_daemon_offsets {
	uint64_t ctrl;        /* struct md_daemon_ctrl */
	uint64_t params;      /* struct md_param_block */
	uint64_t cmd_ring;    /* struct md_cmd[cmd_capacity] */
	uint64_t seq_protect; /* 1.2: uint32_t[max_seqs], 0 = none (a 1.0/1.1 daemon) */
	uint64_t resv[4];
};

struct md_segment_header {
	uint64_t magic;          /* MD_ABI_MAGIC, written last by the creator: "ready" */
	uint32_t abi_major;
	uint32_t abi_minor;
	uint32_t kind;           /* enum md_segment_kind */
	uint32_t header_size;    /* sizeof(struct md_segment_header) */
	uint64_t segment_size;   /* bytes; equals the memfd size */
	uint32_t engine_id;
	uint32_t page_tokens;    /* P */
	uint32_t page_capacity;  /* page slots */
	uint32_t max_seqs;
	uint32_t stats_capacity; /* records, power of two */
	uint32_t cmd_capacity;   /* records, power of two */
	uint64_t instance_id;    /* daemon instance that created the segment */
	union {
		struct md_engine_offsets engine;
		struct md_daemon_offsets daemon;
		uint64_t raw[8];
	} off;
	uint64_t resv[4];
};

/* ---- engine segment ---- */

/* Engine-written control words.  Each hot word sits on its own cache line. */
struct md_engine_ctrl {
	uint64_t stats_tail;          /* producer index of the stats ring */
	uint8_t pad0[MD_CACHELINE - 8];
	uint64_t cmd_head;            /* consumer index of the command ring */
	uint8_t pad1[MD_CACHELINE - 8];
	uint64_t heartbeat_ns;        /* CLOCK_MONOTONIC, updated at every poll */
	uint32_t sleeping;            /* 1: engine waits on its doorbell */
	uint32_t flags;
	uint64_t attn_dropped;        /* attention records dropped on a full ring */
	uint64_t lifecycle_dropped;   /* lifecycle records that did not fit */
	uint64_t resync_request;      /* bumped when the page table must be re-read */
	uint64_t cmds_applied;
	uint64_t cmds_stale;          /* commands ignored: generation mismatch */
	uint8_t pad2[MD_CACHELINE - 56];
};

enum md_page_state {
	MD_PAGE_FREE = 0,
	MD_PAGE_LIVE = 1,
	MD_PAGE_TIER = 2,   /* 1.4: evicted from the device, its K/V kept in the
			       engine's host tier: it may come back to its place */
};

/* One page slot.  The engine bumps `version` to odd before writing and to even
 * after; a reader that sees an odd or changed version retries or skips. */
struct md_page_entry {
	uint32_t version;
	uint32_t generation;  /* bumped each time the slot is reused */
	uint32_t seq;
	uint16_t n_tokens;    /* live tokens in the page, 1..P */
	uint8_t state;        /* enum md_page_state */
	uint8_t resv0;
	uint64_t first_pos;   /* position of token 0 in its sequence */
	uint64_t labels;      /* 4-bit region per token */
	uint64_t open_clock;  /* sequence clock when the page was opened */
	uint64_t resv1;
};

/* 1.2: one sequence's own options, engine-written.  The engine writes the
 * entry (version odd while writing, even after, as page entries), then
 * publishes MD_REC_SEQ_OPTS with the same values; the daemon takes the record
 * and reads the entry only on a resync.  MD_SEQ_ENGINE in a field means "the
 * engine's setting" (its HELLO options, else the daemon's parameters).
 * SEQ_END resets the sequence to all-engine (and, 1.3, running, no tag).
 *
 * 1.3 puts the sequence's session in what were reserved words: its state
 * (an engine that keeps a finished request's KV for the conversation's next
 * turn says "retained") and a tag, the first bytes of the engine's session
 * id, so that an operator can tell the sessions apart.  A 1.2 daemon ignores
 * those words; a 1.3 daemon ignores them from a 1.2 engine, which leaves
 * them zero: running, no tag. */
#define MD_SEQ_ENGINE_U32 UINT32_MAX
#define MD_SEQ_ENGINE_U64 UINT64_MAX
enum md_seq_state {
	MD_SEQ_RUNNING = 0,      /* serving a request (or the engine does not say) */
	MD_SEQ_RETAINED = 1,     /* its request finished; KV kept for the next turn */
	MD_SEQ_STATE_COUNT,
};
/* The session tag: bytes 0x21..0x7e, then only NULs; all NUL: no tag. */
#define MD_SEQ_SESSION_LEN 8u
static inline int md_seq_session_ok(const uint8_t tag[MD_SEQ_SESSION_LEN])
{
	unsigned i = 0;
	while (i < MD_SEQ_SESSION_LEN && tag[i] >= 0x21 && tag[i] <= 0x7e)
		i++;
	while (i < MD_SEQ_SESSION_LEN && tag[i] == 0)
		i++;
	return i == MD_SEQ_SESSION_LEN;
}
struct md_seq_opts {
	uint32_t version;
	uint32_t policy;                 /* enum md_policy_id, or MD_SEQ_ENGINE_U32 */
	uint64_t budget_sequence_tokens; /* 0: none; MD_SEQ_ENGINE_U64: the engine's */
	uint32_t state;                  /* 1.3: enum md_seq_state (1.2: reserved, zero) */
	uint32_t resv;
	uint8_t session[MD_SEQ_SESSION_LEN]; /* 1.3: the session tag (1.2: reserved, zero) */
};

/* ---- stats records (engine -> daemon) ---- */
enum md_rec_type {
	MD_REC_NONE = 0,
	MD_REC_PAGE_OPEN = 1,    /* slot, gen, seq, first_pos, n_tokens, labels */
	MD_REC_PAGE_GROW = 2,    /* slot, gen, n_tokens (new total), labels */
	MD_REC_PAGE_FREE = 3,    /* slot, gen, reason */
	MD_REC_SEQ_END = 4,      /* seq */
	MD_REC_STEP = 5,         /* seq, clock */
	MD_REC_ATTN_PAGE = 6,    /* slot, gen, page mass, refresh bitmap */
	MD_REC_ATTN_TOKENS = 7,  /* slot, gen, token0, count<=8, mass[] */
	MD_REC_RELABEL = 8,      /* seq, pos0, pos1, region */
	MD_REC_SEQ_OPTS = 9,     /* 1.2: seq, policy, budget_sequence_tokens;
				    1.3: state, session */
	MD_REC_PAGE_TIER = 10,   /* 1.4: slot, gen, event (enum md_tier_event) */
	MD_REC_TYPE_COUNT = 11,
};

enum md_free_reason {
	MD_FREE_FINISHED = 0,   /* engine released it (request done, its own reasons) */
	MD_FREE_EVICTED = 1,    /* an evict command was applied */
	MD_FREE_DROPPED = 2,    /* 1.4: a tier page's host copy released (a drop
				   command, or the engine's own tier limit) */
};

/* 1.4: what happened to a page between the device and the host tier. */
enum md_tier_event {
	MD_TIER_IN = 1,         /* an evict command applied, K/V kept in the tier
				   (in place of PAGE_FREE reason EVICTED) */
	MD_TIER_RESTORED = 2,   /* a restore command applied: resident again, at
				   its own positions */
	MD_TIER_REFUSED = 3,    /* a restore command not applied (no device
				   room): the page stays in the tier */
	MD_TIER_EVENT_COUNT = 4,
};

/* Record flags. */
#define MD_REC_F_ESTIMATE 1u    /* 1.4, ATTN_PAGE of a tier page: the mass is
				   the engine's estimate from the page's key
				   digest, not attention a kernel computed */

#define MD_ATTN_TOKENS_PER_REC 8u

/* Every record is 64 bytes.  `pos` is the low 32 bits of the record's ring
 * index, written by the producer: a record whose pos does not match the slot
 * the consumer expects is torn or stale and is rejected. */
struct md_stats_rec {
	uint32_t pos;
	uint16_t type;       /* enum md_rec_type */
	uint16_t flags;
	uint32_t seq;
	uint32_t slot;
	uint32_t gen;
	uint8_t token0;      /* ATTN_TOKENS: first token index within the page */
	uint8_t count;       /* ATTN_TOKENS: masses in this record, 1..8 */
	uint16_t resv0;
	uint64_t clock;      /* sequence clock at the record */
	union {
		struct {
			uint64_t first_pos;
			uint64_t labels;
			uint16_t n_tokens;
			uint16_t resv[3];
			uint64_t resv1;
		} page;          /* PAGE_OPEN, PAGE_GROW */
		struct {
			uint32_t reason; /* enum md_free_reason */
			uint32_t resv;
			uint64_t resv1[3];
		} free;
		struct {
			float mass;      /* sum over the page's tokens of m_i (raw) */
			uint16_t refresh;/* bit k: token k's attention exceeded tau */
			uint16_t resv;
			uint64_t resv1[3];
		} attn_page;
		struct {
			float mass[MD_ATTN_TOKENS_PER_REC]; /* raw m_i of tokens token0.. */
		} attn_tokens;
		struct {
			uint64_t pos0;   /* [pos0, pos1) */
			uint64_t pos1;
			uint32_t region;
			uint32_t resv;
			uint64_t resv1;
		} relabel;
		struct {
			uint32_t policy;                 /* as struct md_seq_opts */
			uint32_t state;                  /* 1.3 (1.2: reserved, zero) */
			uint64_t budget_sequence_tokens;
			uint8_t session[MD_SEQ_SESSION_LEN]; /* 1.3 (1.2: reserved, zero) */
			uint64_t resv1;
		} seq_opts;
		struct {
			uint32_t event;  /* 1.4: enum md_tier_event */
			uint32_t resv;
			uint64_t resv1[3];
		} tier;
		uint64_t raw[4];
	} u;
};

/* ---- daemon segment ---- */
struct md_daemon_ctrl {
	uint64_t cmd_tail;            /* producer index of the command ring */
	uint8_t pad0[MD_CACHELINE - 8];
	uint64_t stats_head;          /* consumer index of the stats ring */
	uint8_t pad1[MD_CACHELINE - 8];
	uint64_t heartbeat_ns;        /* CLOCK_MONOTONIC of the daemon */
	uint32_t sleeping;            /* 1: daemon waits on its doorbell */
	uint32_t shutting_down;       /* 1: daemon is stopping; detach */
	uint64_t instance_id;
	uint64_t records_rejected;    /* the daemon's count of this engine's rejected records: violations + torn */
	uint8_t pad2[MD_CACHELINE - 32];
};

/* Parameters engines need, published under a seqlock: the writer makes `seq`
 * odd, writes, makes it even; a reader retries while it is odd or changed. */
struct md_param_block {
	uint64_t seq;
	uint32_t policy;              /* enum md_policy_id, effective for this engine */
	uint32_t norm_mode;           /* enum md_norm_mode, effective for this engine */
	double tau;                   /* refresh threshold, compared after normalization */
	double alpha;
	double beta;
	uint32_t pinned_mask;         /* bit r: region r pinned */
	uint32_t protect_recent;      /* newest full pages protected */
	uint64_t budget_sequence_tokens; /* 0: none */
	uint64_t budget_engine_pages;    /* 0: none; includes this engine's global share
					    (moves with the engines' holdings) */
	double low_watermark;
	double base[MD_REGIONS_MAX];
	double lambda[MD_REGIONS_MAX];
	uint64_t budget_tier_pages;   /* 1.4: pages this engine may hold in its host
					 tier (0: no tier; 1.3: reserved, zero) */
	uint64_t resv[7];
};

/* ---- commands (daemon -> engine), 32 bytes ---- */
enum md_cmd_type {
	MD_CMD_NONE = 0,
	MD_CMD_EVICT = 1,
	MD_CMD_RESTORE = 2,   /* 1.4: bring a tier page back to the device */
	MD_CMD_DROP = 3,      /* 1.4: release a tier page's host copy */
	MD_CMD_TYPE_COUNT = 4,
};

/* Why: an evict command's budget, a restore's recall, a drop's tier budget. */
enum md_evict_reason {
	MD_EVICT_SEQUENCE_BUDGET = 1,
	MD_EVICT_ENGINE_BUDGET = 2,
	MD_EVICT_GLOBAL_BUDGET = 3,
	MD_EVICT_REASON_COUNT = 4,   /* counters indexed by reason (0: none) */
	MD_RESTORE_RECALL = 5,       /* 1.4: MD_CMD_RESTORE */
	MD_DROP_TIER_BUDGET = 6,     /* 1.4: MD_CMD_DROP */
};

struct md_cmd {
	uint32_t pos;        /* low 32 bits of the ring index, as in stats records */
	uint16_t type;       /* enum md_cmd_type */
	uint16_t reason;     /* enum md_evict_reason */
	uint32_t seq;
	uint32_t slot;
	uint32_t gen;
	uint32_t resv0;
	uint64_t decided_ns; /* CLOCK_MONOTONIC of the decision */
};

/* ---- layout checks: any change here is an ABI change ---- */
_Static_assert(sizeof(struct md_engine_offsets) == 64, "engine offsets");
_Static_assert(offsetof(struct md_engine_offsets, cuda_ring_export) == 32, "cuda export offset");
_Static_assert(offsetof(struct md_engine_offsets, seq_opts) == 40, "seq opts offset");
_Static_assert(offsetof(struct md_daemon_offsets, seq_protect) == 24, "seq protect offset");
_Static_assert(sizeof(struct md_seq_opts) == 32, "seq opts");
_Static_assert(offsetof(struct md_seq_opts, budget_sequence_tokens) == 8, "seq opts budget");
_Static_assert(offsetof(struct md_seq_opts, state) == 16, "seq opts state (1.2: resv[0])");
_Static_assert(offsetof(struct md_seq_opts, session) == 24, "seq opts session (1.2: resv[1])");
_Static_assert(offsetof(struct md_stats_rec, u.seq_opts.state) == 36,
	       "seq opts record state (1.2: resv)");
_Static_assert(offsetof(struct md_stats_rec, u.seq_opts.budget_sequence_tokens) == 40,
	       "seq opts record budget");
_Static_assert(offsetof(struct md_stats_rec, u.seq_opts.session) == 48,
	       "seq opts record session (1.2: resv1[0])");
_Static_assert(sizeof(struct md_daemon_offsets) == 64, "daemon offsets");
_Static_assert(sizeof(struct md_segment_header) == 160, "segment header");
_Static_assert(offsetof(struct md_segment_header, off) == 64, "offsets table");
_Static_assert(sizeof(struct md_engine_ctrl) == 3 * MD_CACHELINE, "engine ctrl");
_Static_assert(offsetof(struct md_engine_ctrl, cmd_head) == MD_CACHELINE, "cmd_head line");
_Static_assert(offsetof(struct md_engine_ctrl, heartbeat_ns) == 2 * MD_CACHELINE, "hb line");
_Static_assert(sizeof(struct md_page_entry) == 48, "page entry");
_Static_assert(offsetof(struct md_page_entry, first_pos) == 16, "page entry first_pos");
_Static_assert(sizeof(struct md_stats_rec) == 64, "stats record");
_Static_assert(offsetof(struct md_stats_rec, u) == 32, "stats record payload");
_Static_assert(sizeof(struct md_daemon_ctrl) == 3 * MD_CACHELINE, "daemon ctrl");
_Static_assert(offsetof(struct md_daemon_ctrl, stats_head) == MD_CACHELINE, "stats_head line");
_Static_assert(sizeof(struct md_param_block) == 392, "param block");
_Static_assert(offsetof(struct md_param_block, base) == 72, "param base");
_Static_assert(offsetof(struct md_param_block, budget_tier_pages) == 328,
	       "param tier budget (1.3: resv[0])");
_Static_assert(offsetof(struct md_stats_rec, u.tier.event) == 32, "tier record event");
_Static_assert(sizeof(struct md_cmd) == 32, "command");

/* ---- geometry helpers: both sides compute the layout from the same numbers ---- */
static inline uint64_t md__align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

/* The CUDA IPC ring's export record (kernels/include/md_cuda_ring.h) that a
 * stats_transport=cuda engine writes, magic last, into its engine segment. */
#define MD_CUDA_RING_EXPORT_SIZE 192u
#define MD_ENGINE_LAYOUT_CUDA_EXPORT 1u
#define MD_ENGINE_LAYOUT_SEQ_OPTS 2u     /* 1.2 */

/* Layout of an engine segment for the given geometry; returns its size.
 * flags MD_ENGINE_LAYOUT_CUDA_EXPORT: room for the CUDA ring export record
 * after the stats ring (a page of its own, cache-line aligned);
 * MD_ENGINE_LAYOUT_SEQ_OPTS (1.2): the per-sequence options after that. */
static inline uint64_t md_engine_layout_ex(uint32_t page_capacity, uint32_t max_seqs,
					   uint32_t stats_capacity, uint32_t flags,
					   struct md_engine_offsets *off)
{
	uint64_t o = md__align_up(sizeof(struct md_segment_header), MD_CACHELINE);
	off->ctrl = o;
	o = md__align_up(o + sizeof(struct md_engine_ctrl), MD_CACHELINE);
	off->page_table = o;
	o = md__align_up(o + (uint64_t)page_capacity * sizeof(struct md_page_entry), MD_CACHELINE);
	off->seq_clock = o;
	o = md__align_up(o + (uint64_t)max_seqs * sizeof(uint64_t), MD_CACHELINE);
	off->stats_ring = o;
	o = md__align_up(o + (uint64_t)stats_capacity * sizeof(struct md_stats_rec), 4096);
	off->cuda_ring_export = 0;
	if (flags & MD_ENGINE_LAYOUT_CUDA_EXPORT) {
		off->cuda_ring_export = o;
		o = md__align_up(o + MD_CUDA_RING_EXPORT_SIZE, 4096);
	}
	off->seq_opts = 0;
	if (flags & MD_ENGINE_LAYOUT_SEQ_OPTS) {
		off->seq_opts = o;
		o = md__align_up(o + (uint64_t)max_seqs * sizeof(struct md_seq_opts), 4096);
	}
	for (int i = 0; i < 2; i++)
		off->resv[i] = 0;
	return o;
}

static inline uint64_t md_engine_layout(uint32_t page_capacity, uint32_t max_seqs,
					uint32_t stats_capacity, struct md_engine_offsets *off)
{
	return md_engine_layout_ex(page_capacity, max_seqs, stats_capacity, 0, off);
}

/* The daemon segment's first three regions (ctrl, parameters, command ring);
 * returns where the command ring ends. */
static inline uint64_t md__daemon_layout_head(uint32_t cmd_capacity, struct md_daemon_offsets *off)
{
	uint64_t o = md__align_up(sizeof(struct md_segment_header), MD_CACHELINE);
	off->ctrl = o;
	o = md__align_up(o + sizeof(struct md_daemon_ctrl), MD_CACHELINE);
	off->params = o;
	o = md__align_up(o + sizeof(struct md_param_block), MD_CACHELINE);
	off->cmd_ring = o;
	off->seq_protect = 0;
	for (int i = 0; i < 4; i++)
		off->resv[i] = 0;
	return o + (uint64_t)cmd_capacity * sizeof(struct md_cmd);
}

/* The daemon segment: ctrl, parameters, command ring, then (1.2) the newest
 * pages of each sequence the daemon never evicts, tail page and policy window
 * included (seq_protect[seq], written by the daemon; docs/adapters.md). */
static inline uint64_t md_daemon_layout_ex(uint32_t cmd_capacity, uint32_t max_seqs,
					   struct md_daemon_offsets *off)
{
	uint64_t o = md__align_up(md__daemon_layout_head(cmd_capacity, off), MD_CACHELINE);
	off->seq_protect = o;
	return md__align_up(o + (uint64_t)max_seqs * sizeof(uint32_t), 4096);
}

/* The 1.0/1.1 daemon segment (no seq_protect). */
static inline uint64_t md_daemon_layout(uint32_t cmd_capacity, struct md_daemon_offsets *off)
{
	return md__align_up(md__daemon_layout_head(cmd_capacity, off), 4096);
}

/* Limits a daemon accepts in HELLO. */
#define MD_PAGE_CAPACITY_MAX (1u << 22)
#define MD_MAX_SEQS_MAX 4096u
#define MD_RING_CAPACITY_MAX (1u << 22)

/* ---- control socket protocol ----
 * Line-based text, one request per line, at most MD_CTL_LINE_MAX bytes.
 * Engine attach:
 *   HELLO abi=1.4 name=NAME page_tokens=P page_capacity=N max_seqs=S
 *         [tp_rank=R tp_size=T] [policy=NAME] [budget_pages=N]
 *         [budget_sequence_tokens=N] [weight=W] [stats_transport=host|cuda]
 *         [tier_pages=N page_bytes=B]\n
 *   (1.4) tier_pages: the pages the engine can keep in its host tier (0 or
 *   absent: none); page_bytes: one page's K/V bytes, all layers (for the
 *   tier's byte counts).
 *   abi= is the sender's MD_ABI_MAJOR.MD_ABI_MINOR: another major is refused;
 *   a higher minor may carry fields this daemon does not know (it skips them).
 *   reply: "OK engine_id=E instance=I\n" carrying four fds by SCM_RIGHTS in
 *          this order: engine segment, daemon segment, doorbell to daemon,
 *          doorbell to engine; or "ERR <message>\n".
 *   The connection stays open: its EOF tells the daemon the engine is gone.
 * Operator commands (memdecayctl) are described in docs/operations.md. */
#define MD_CTL_LINE_MAX 4096u
/* The line an operator connection gets when the daemon closes it to make room
 * (all operator slots taken).  It never follows a request still being
 * answered, so a client that reads it in place of a reply knows its request
 * was not run and may send it again on a new connection. */
#define MD_CTL_EVICTED_LINE "ERR connection limit: closing the oldest idle connection"
#define MD_ATTACH_FDS 4

#ifdef __cplusplus
}
#endif
#endif /* MEMDECAY_ABI_H */
