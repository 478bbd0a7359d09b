/*
 * check_contract.c — the engine contract in libmemdecay (docs/adapters.md)
 * against the fake daemon of fake_daemon.h, in its ABI 1.2 form (per-sequence
 * options in the engine segment, seq_protect in the daemon segment), its 1.3
 * form (the same, taking a sequence's session state and tag) and its 1.1
 * form: a sequence's pages in order and its live tokens, the evict floor
 * with and without a published protected count, pinned pages, sequence
 * options (mirror, segment entry, record, -ENOTSUP, reset, republish on
 * reattach; the session words sent to 1.3 only), commands through a
 * callback, every md_settle outcome, and md_client_maintain reattaching after
 * a daemon restart.  The host tier (ABI 1.4, docs/tier.md) against the fake's
 * 1.4 form: HELLO's tier fields, an evict kept in the tier, restores and drops
 * applied and refused, estimates, the tier at a sequence's end and at
 * reattach, a 1.3 daemon (no tier) and md_settle_recall.
 */
#include <check.h>
#include "test_util.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "memdecay.h"
#include "memdecay_clock.h"
#include "memdecay_ring.h"
#include "fake_daemon.h"

#include "alloc_count.h"   /* g_allocs */

/* ---- the fake daemon (fake_daemon.h): engine 3 of instance 9, ABI 1.2 or
 * 1.3 segments, or 1.1 ones that say so ---- */
static void contract_params(struct md_param_block *p)
{
	p->tau = 0.01;
	p->pinned_mask = 1;         /* system */
	p->protect_recent = 1;
	p->low_watermark = 1;
	p->seq = 2;
}

static const struct fake_profile contract_fake = {
	.tag = "contract", .engine_id = 3, .instance_id = 9, .abi_minor = 1,
	.params = contract_params,
};

static void cfg_for(struct md_client_config *cfg, const char *path)
{
	md_client_config_init(cfg);
	cfg->socket_path = path;
	cfg->engine_name = "contract";
	cfg->page_capacity = 64;
	cfg->max_seqs = 4;
}

static md_client *attach(struct fake *f, int abi)
{
	struct md_client_config cfg;
	cfg_for(&cfg, f->path);
	return fake_attach(f, &contract_fake, abi, &cfg);
}

static md_client *detached_client(void)
{
	struct md_client_config cfg;
	md_client *c = NULL;
	cfg_for(&cfg, "/nonexistent/memdecay.sock");
	ck_assert_int_eq(md_client_create(&cfg, &c), 0);
	ck_assert(!md_client_attached(c));
	return c;
}

static void fake_cmd(struct fake *f, md_client *c, uint32_t slot)
{
	struct md_page_entry e;
	ck_assert_int_eq(md_page_info(c, slot, &e), 0);
	fake_evict(f, MD_EVICT_SEQUENCE_BUDGET, e.seq, slot, e.generation, 1);
}

/* n full pages of seq at positions 0, 16, ...: the first `system` of them
 * system, the rest user.  Slots land in slots[]. */
static void open_pages(md_client *c, uint32_t seq, uint32_t n, uint32_t system, uint32_t *slots)
{
	for (uint32_t i = 0; i < n; i++) {
		uint64_t lab = i < system ? 0 : 0x2222222222222222ull;
		uint32_t g;
		int rc = md_page_open(c, seq, (uint64_t)i * 16, 16, lab, &slots[i], &g);
		ck_assert(rc == 0 || rc == MD_EDETACHED);
	}
}

/* ---- the engine's callback: frees the page, as an adapter does ---- */
struct engine {
	md_client *c;
	int mode;          /* 0: free and report, 1: keep, 2: fail, 3: free, leave the report */
	int calls;
};

static int engine_apply(void *ctx, const struct md_evict *ev)
{
	struct engine *e = ctx;
	e->calls++;
	switch (e->mode) {
	case 1:
		return 0;
	case 2:
		return -EIO;
	case 3:
		return 1;
	default:
		ck_assert_int_eq(md_page_free(e->c, ev->slot, MD_FREE_EVICTED), 0);
		return 1;
	}
}

/* ---- the engine's callback with a host tier (1.4): what it answers per
 * command type, and what it was handed ---- */
struct tier_engine {
	md_client *c;
	int evict_rc, restore_rc, drop_rc;  /* apply's answer to each type */
	int report_drop;                    /* 1: reports a drop itself (md_page_free) */
	int calls;
	struct md_evict last;
};

static int tier_apply(void *ctx, const struct md_evict *ev)
{
	struct tier_engine *e = ctx;
	e->calls++;
	e->last = *ev;
	switch (ev->type) {
	case MD_CMD_EVICT:
		return e->evict_rc;
	case MD_CMD_RESTORE:
		return e->restore_rc;
	case MD_CMD_DROP:
		if (e->drop_rc == 1 && e->report_drop)
			ck_assert_int_eq(md_page_free(e->c, ev->slot, MD_FREE_DROPPED), 0);
		return e->drop_rc;
	default:
		ck_abort_msg("command type %u handed to apply", ev->type);
		return -1;
	}
}

static md_client *attach_tier(struct fake *f, int abi, uint64_t tier_pages)
{
	struct md_client_config cfg;
	cfg_for(&cfg, f->path);
	cfg.tier_pages = tier_pages;
	cfg.page_bytes = 4096;
	return fake_attach(f, &contract_fake, abi, &cfg);
}

/* The daemon grants a tier budget (the parameter block, under its seqlock). */
static void grant_tier(struct fake *f, uint64_t pages)
{
	f->params->seq++;
	f->params->budget_tier_pages = pages;
	f->params->seq++;
}

static void tier_cmd(struct fake *f, md_client *c, uint16_t type, uint32_t slot)
{
	struct md_page_entry e;
	ck_assert_int_eq(md_page_info(c, slot, &e), 0);
	uint16_t reason = type == MD_CMD_RESTORE ? MD_RESTORE_RECALL
			: type == MD_CMD_DROP ? MD_DROP_TIER_BUDGET : MD_EVICT_ENGINE_BUDGET;
	fake_command(f, type, reason, e.seq, slot, e.generation, 1);
}

/* The next record the engine published, which must be of this type. */
static struct md_stats_rec next_rec(struct fake *f, uint16_t type)
{
	struct md_stats_rec r;
	ck_assert_msg(fake_next(f, &r), "no record, expected type %u", type);
	ck_assert_uint_eq(r.type, type);
	return r;
}

/* An evict the engine kept in its tier: the slot leaves the sequence's
 * resident pages for its tier pages, with a PAGE_TIER IN record. */
static void to_tier(struct fake *f, md_client *c, struct tier_engine *en, uint32_t slot)
{
	en->evict_rc = 2;
	tier_cmd(f, c, MD_CMD_EVICT, slot);
	ck_assert_int_eq(md_apply_commands(c, tier_apply, en), 1);
	struct md_stats_rec r = next_rec(f, MD_REC_PAGE_TIER);
	ck_assert_uint_eq(r.slot, slot);
	ck_assert_uint_eq(r.u.tier.event, MD_TIER_IN);
}

/* ---- tests ---- */

START_TEST(test_seq_pages_in_order)
{
	md_client *c = detached_client();
	uint32_t s[4], g, got[8];
	/* opened out of position order: the library keeps first-position order */
	md_page_open(c, 1, 32, 16, 0, &s[2], &g);
	md_page_open(c, 1, 0, 16, 0, &s[0], &g);
	md_page_open(c, 1, 48, 3, 0, &s[3], &g);
	md_page_open(c, 1, 16, 16, 0, &s[1], &g);
	ck_assert_int_eq(md_seq_pages(c, 1, got, 8), 4);
	for (int i = 0; i < 4; i++)
		ck_assert_uint_eq(got[i], s[i]);
	ck_assert_uint_eq(md_seq_live_tokens(c, 1), 51);
	ck_assert_int_eq(md_seq_pages(c, 1, got, 2), 4);   /* count, two filled */
	ck_assert_int_eq(md_seq_pages(c, 0, got, 8), 0);
	md_page_grow(c, s[3], 10, 0);
	ck_assert_uint_eq(md_seq_live_tokens(c, 1), 58);
	md_page_free(c, s[1], MD_FREE_FINISHED);
	ck_assert_int_eq(md_seq_pages(c, 1, got, 8), 3);
	ck_assert_uint_eq(got[0], s[0]);
	ck_assert_uint_eq(got[1], s[2]);
	ck_assert_uint_eq(got[2], s[3]);
	ck_assert_uint_eq(md_seq_live_tokens(c, 1), 42);
	md_seq_end(c, 1);
	ck_assert_int_eq(md_seq_pages(c, 1, got, 8), 0);
	ck_assert_uint_eq(md_seq_live_tokens(c, 1), 0);
	ck_assert_int_eq(md_seq_pages(c, 9, got, 8), -EINVAL);
	ck_assert_int_eq(md_seq_pages(c, 1, NULL, 8), -EINVAL);
	md_client_destroy(c);
}
END_TEST

START_TEST(test_floor_without_published_count)
{
	/* detached: the library's defaults, system pinned, protect_recent 1 */
	md_client *c = detached_client();
	uint32_t s[6];
	open_pages(c, 0, 6, 1, s);
	ck_assert_uint_eq(md_seq_protected_pages(c, 0), 2);
	ck_assert_uint_eq(md_seq_floor(c, 0), 3 * 16);   /* system + two newest */
	md_page_grow(c, s[5], 16, 0x2222222222222222ull);
	md_page_free(c, s[5], MD_FREE_FINISHED);
	ck_assert_uint_eq(md_seq_floor(c, 0), 3 * 16);   /* the next two newest */
	ck_assert_uint_eq(md_seq_floor(c, 2), 0);
	md_client_destroy(c);

	/* a 1.1 daemon: its parameter block's protect_recent and pinned mask */
	struct fake f;
	c = attach(&f, 0);
	open_pages(c, 0, 6, 2, s);
	ck_assert_uint_eq(md_seq_floor(c, 0), 4 * 16);   /* 2 system + 2 newest */
	f.params->seq = 3;
	f.params->protect_recent = 3;
	f.params->pinned_mask = 0;
	f.params->seq = 4;
	ck_assert_uint_eq(md_seq_protected_pages(c, 0), 4);
	ck_assert_uint_eq(md_seq_floor(c, 0), 4 * 16);   /* 4 newest, nothing pinned */
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

START_TEST(test_floor_with_published_count)
{
	struct fake f;
	md_client *c = attach(&f, 1);
	uint32_t s[8];
	open_pages(c, 0, 8, 1, s);
	/* nothing published yet for the sequence: 1 + protect_recent */
	ck_assert_uint_eq(md_seq_protected_pages(c, 0), 2);
	ck_assert_uint_eq(md_seq_floor(c, 0), 3 * 16);
	/* a policy window (h2o's): the daemon protects the newest 5 */
	md_store_release(&f.protect[0], 5);
	ck_assert_uint_eq(md_seq_protected_pages(c, 0), 5);
	ck_assert_uint_eq(md_seq_floor(c, 0), 6 * 16);
	/* a pinned page among the protected ones counts once */
	md_store_release(&f.protect[0], 8);
	ck_assert_uint_eq(md_seq_floor(c, 0), 8 * 16);
	/* detached, the published count is no longer known */
	md_client_detach(c);
	ck_assert_uint_eq(md_seq_floor(c, 0), 3 * 16);
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

START_TEST(test_seq_options)
{
	struct fake f;
	md_client *c = attach(&f, 1);
	struct md_seq_options o, got;
	md_seq_options_init(&o);
	ck_assert_uint_eq(o.size, sizeof(o));
	ck_assert_uint_eq(o.policy, MD_SEQ_ENGINE_U32);
	ck_assert_int_eq(o.budget_sequence_tokens, -1);
	ck_assert_int_eq(md_seq_get_options(c, 1, &got), 0);
	ck_assert_uint_eq(got.policy, MD_SEQ_ENGINE_U32);
	ck_assert_uint_eq(md_seq_budget_tokens(c, 1), 0);
	fake_drain(&f);

	o.policy = MD_POLICY_H2O;
	o.budget_sequence_tokens = 96;
	ck_assert_int_eq(md_seq_set_options(c, 1, &o), 0);
	ck_assert_int_eq(md_seq_get_options(c, 1, &got), 0);
	ck_assert_uint_eq(got.policy, MD_POLICY_H2O);
	ck_assert_int_eq(got.budget_sequence_tokens, 96);
	ck_assert_uint_eq(md_seq_budget_tokens(c, 1), 96);
	const struct md_seq_opts *e = (void *)(f.eseg + f.eo.seq_opts);
	ck_assert_uint_eq(e[1].version % 2, 0);
	ck_assert_uint_ge(e[1].version, 2);
	ck_assert_uint_eq(e[1].policy, MD_POLICY_H2O);
	ck_assert_uint_eq(e[1].budget_sequence_tokens, 96);
	ck_assert_uint_eq(e[0].policy, 0);   /* untouched entries stay as the daemon made them */
	struct md_stats_rec r;
	ck_assert(fake_find(&f, MD_REC_SEQ_OPTS, &r));
	ck_assert_uint_eq(r.seq, 1);
	ck_assert_uint_eq(r.u.seq_opts.policy, MD_POLICY_H2O);
	ck_assert_uint_eq(r.u.seq_opts.budget_sequence_tokens, 96);

	/* budget 0: none, whatever the engine's */
	f.params->seq = 3;
	f.params->budget_sequence_tokens = 500;
	f.params->seq = 4;
	o.budget_sequence_tokens = 0;
	ck_assert_int_eq(md_seq_set_options(c, 1, &o), 0);
	ck_assert_uint_eq(md_seq_budget_tokens(c, 1), 0);
	ck_assert_uint_eq(md_seq_budget_tokens(c, 2), 500);

	/* bad input changes nothing */
	struct md_seq_options bad = o;
	bad.policy = MD_POLICY_COUNT;
	ck_assert_int_eq(md_seq_set_options(c, 1, &bad), -EINVAL);
	bad = o;
	bad.size = 4;
	ck_assert_int_eq(md_seq_set_options(c, 1, &bad), -EINVAL);
	bad = o;
	bad.budget_sequence_tokens = -2;
	ck_assert_int_eq(md_seq_set_options(c, 1, &bad), -EINVAL);
	ck_assert_int_eq(md_seq_set_options(c, 4, &o), -EINVAL);
	ck_assert_int_eq(md_seq_get_options(c, 4, &got), -EINVAL);
	ck_assert_int_eq(md_seq_get_options(c, 1, &got), 0);
	ck_assert_uint_eq(got.policy, MD_POLICY_H2O);

	/* a full ring: the record is not lost, a resync re-reads the entry */
	fake_drain(&f);
	uint64_t resync0 = f.ectrl->resync_request;
	for (int i = 0; i < 80; i++)
		(void)md_seq_step(c, 3, 1);
	o.budget_sequence_tokens = 40;
	ck_assert_int_eq(md_seq_set_options(c, 1, &o), 0);
	ck_assert_uint_gt(f.ectrl->resync_request, resync0);
	ck_assert_uint_eq(e[1].budget_sequence_tokens, 40);
	fake_drain(&f);

	/* SEQ_END resets the sequence to the engine's options */
	ck_assert_int_eq(md_seq_end(c, 1), 0);
	ck_assert_int_eq(md_seq_get_options(c, 1, &got), 0);
	ck_assert_uint_eq(got.policy, MD_SEQ_ENGINE_U32);
	ck_assert_int_eq(got.budget_sequence_tokens, -1);
	ck_assert_uint_eq(e[1].policy, MD_SEQ_ENGINE_U32);
	ck_assert_uint_eq(e[1].budget_sequence_tokens, MD_SEQ_ENGINE_U64);
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

START_TEST(test_seq_options_older_daemon_and_detached)
{
	struct fake f;
	md_client *c = attach(&f, 0);
	struct md_seq_options o, got;
	md_seq_options_init(&o);
	o.budget_sequence_tokens = 64;
	ck_assert_int_eq(md_seq_set_options(c, 0, &o), -ENOTSUP);
	ck_assert_int_eq(md_seq_get_options(c, 0, &got), 0);
	ck_assert_int_eq(got.budget_sequence_tokens, 64);   /* kept in the mirror */
	ck_assert_uint_eq(md_seq_budget_tokens(c, 0), 64);
	md_client_destroy(c);
	fake_stop(&f);

	c = detached_client();
	ck_assert_int_eq(md_seq_set_options(c, 2, &o), MD_EDETACHED);
	ck_assert_uint_eq(md_seq_budget_tokens(c, 2), 64);
	md_client_destroy(c);
}
END_TEST

START_TEST(test_reattach_republishes_options)
{
	struct fake f;
	md_client *c = attach(&f, 1);
	struct md_seq_options o;
	md_seq_options_init(&o);
	o.policy = MD_POLICY_RECENCY;
	ck_assert_int_eq(md_seq_set_options(c, 2, &o), 0);
	uint32_t s[2];
	open_pages(c, 2, 2, 0, s);
	char dir[64];
	snprintf(dir, sizeof(dir), "%s", f.dir);
	fake_kill(&f);
	md_client_detach(c);
	/* changed while detached: the next daemon gets the latest */
	o.budget_sequence_tokens = 48;
	ck_assert_int_eq(md_seq_set_options(c, 3, &o), MD_EDETACHED);
	fake_start_at(&f, &contract_fake, FK_OK, 1, dir);
	ck_assert_int_eq(md_client_reattach(c), 0);
	fake_join(&f);
	const struct md_seq_opts *e = (void *)(f.eseg + f.eo.seq_opts);
	ck_assert_uint_eq(e[2].policy, MD_POLICY_RECENCY);
	ck_assert_uint_eq(e[2].budget_sequence_tokens, MD_SEQ_ENGINE_U64);
	ck_assert_uint_eq(e[2].version % 2, 0);
	ck_assert_uint_eq(e[3].policy, MD_POLICY_RECENCY);
	ck_assert_uint_eq(e[3].budget_sequence_tokens, 48);
	ck_assert_uint_ge(f.ectrl->resync_request, 1);
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

/* The tag an engine makes of its session id: the first 8 bytes, each
 * outside printable ASCII as '?', NUL-padded. */
START_TEST(test_session_tag)
{
	char t[MD_SEQ_SESSION_LEN];
	md_seq_session_tag("conversation-17", 15, t);
	ck_assert_mem_eq(t, "conversa", 8);
	md_seq_session_tag("a b\x01\xc3\xa9", 6, t);   /* blank, control, UTF-8 é */
	ck_assert_mem_eq(t, "a?b???\0\0", 8);
	md_seq_session_tag("abc", 3, t);
	ck_assert_mem_eq(t, "abc\0\0\0\0\0", 8);
	md_seq_session_tag("a\0b", 3, t);                 /* a NUL inside is a byte too */
	ck_assert_mem_eq(t, "a?b\0\0\0\0\0", 8);
	static const char none[8];
	md_seq_session_tag("", 0, t);
	ck_assert_mem_eq(t, none, 8);
	md_seq_session_tag(NULL, 5, t);
	ck_assert_mem_eq(t, none, 8);
}
END_TEST

/* ABI 1.3: a sequence's session state and tag go into the entry and the
 * record beside its policy and budget; bad ones are refused whole; the end
 * resets them. */
START_TEST(test_seq_session)
{
	struct fake f;
	md_client *c = attach(&f, FAKE_ABI_13);
	struct md_seq_options o, got;
	md_seq_options_init(&o);
	ck_assert_uint_eq(o.state, MD_SEQ_RUNNING);
	ck_assert_mem_eq(o.session, "\0\0\0\0\0\0\0\0", 8);
	fake_drain(&f);

	o.budget_sequence_tokens = 64;
	o.state = MD_SEQ_RETAINED;
	md_seq_session_tag("conv-7", 6, o.session);
	ck_assert_int_eq(md_seq_set_options(c, 1, &o), 0);
	ck_assert_int_eq(md_seq_get_options(c, 1, &got), 0);
	ck_assert_uint_eq(got.state, MD_SEQ_RETAINED);
	ck_assert_mem_eq(got.session, "conv-7\0\0", 8);
	ck_assert_int_eq(got.budget_sequence_tokens, 64);
	const struct md_seq_opts *e = (void *)(f.eseg + f.eo.seq_opts);
	ck_assert_uint_eq(e[1].version % 2, 0);
	ck_assert_uint_eq(e[1].budget_sequence_tokens, 64);
	ck_assert_uint_eq(e[1].state, MD_SEQ_RETAINED);
	ck_assert_mem_eq(e[1].session, "conv-7\0\0", 8);
	struct md_stats_rec r;
	ck_assert(fake_find(&f, MD_REC_SEQ_OPTS, &r));
	ck_assert_uint_eq(r.seq, 1);
	ck_assert_uint_eq(r.u.seq_opts.budget_sequence_tokens, 64);
	ck_assert_uint_eq(r.u.seq_opts.state, MD_SEQ_RETAINED);
	ck_assert_mem_eq(r.u.seq_opts.session, "conv-7\0\0", 8);
	ck_assert_uint_eq(r.u.seq_opts.resv1, 0);

	/* the next turn: running again, same tag, one record */
	o.state = MD_SEQ_RUNNING;
	ck_assert_int_eq(md_seq_set_options(c, 1, &o), 0);
	ck_assert(fake_find(&f, MD_REC_SEQ_OPTS, &r));
	ck_assert_uint_eq(r.u.seq_opts.state, MD_SEQ_RUNNING);
	ck_assert_mem_eq(r.u.seq_opts.session, "conv-7\0\0", 8);
	ck_assert_uint_eq(e[1].state, MD_SEQ_RUNNING);

	/* bad state or tag: -EINVAL, nothing changes, nothing is sent */
	struct md_seq_options bad = o;
	bad.state = MD_SEQ_STATE_COUNT;
	ck_assert_int_eq(md_seq_set_options(c, 1, &bad), -EINVAL);
	bad = o;
	memcpy(bad.session, "a b\0\0\0\0\0", 8);
	ck_assert_int_eq(md_seq_set_options(c, 1, &bad), -EINVAL);
	bad = o;
	memcpy(bad.session, "ab\0c\0\0\0\0", 8);   /* a byte after the padding */
	ck_assert_int_eq(md_seq_set_options(c, 1, &bad), -EINVAL);
	bad = o;
	bad.session[0] = (char)0x80;
	ck_assert_int_eq(md_seq_set_options(c, 1, &bad), -EINVAL);
	ck_assert(!fake_find(&f, MD_REC_SEQ_OPTS, &r));
	ck_assert_int_eq(md_seq_get_options(c, 1, &got), 0);
	ck_assert_mem_eq(got.session, "conv-7\0\0", 8);
	ck_assert_uint_eq(got.state, MD_SEQ_RUNNING);
	memcpy(bad.session, "12345678", 8);          /* all eight printable */
	ck_assert_int_eq(md_seq_set_options(c, 1, &bad), 0);

	/* a session alone is options of the sequence's own: the end resets it */
	md_seq_options_init(&o);
	o.state = MD_SEQ_RETAINED;
	ck_assert_int_eq(md_seq_set_options(c, 2, &o), 0);
	ck_assert_uint_eq(e[2].state, MD_SEQ_RETAINED);
	ck_assert_int_eq(md_seq_end(c, 2), 0);
	ck_assert_int_eq(md_seq_end(c, 1), 0);
	for (uint32_t q = 1; q <= 2; q++) {
		ck_assert_int_eq(md_seq_get_options(c, q, &got), 0);
		ck_assert_uint_eq(got.state, MD_SEQ_RUNNING);
		ck_assert_mem_eq(got.session, "\0\0\0\0\0\0\0\0", 8);
		ck_assert_uint_eq(e[q].state, MD_SEQ_RUNNING);
		ck_assert_mem_eq(e[q].session, "\0\0\0\0\0\0\0\0", 8);
		ck_assert_uint_eq(e[q].version % 2, 0);
	}
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

/* A 1.3 library on a 1.2 daemon: the policy and budget are set as before
 * (0, entry and record), the session words, reserved in 1.2, stay zero; the
 * mirror keeps the session, and a 1.3 daemon gets it at reattach. */
START_TEST(test_seq_session_older_daemon)
{
	struct fake f;
	md_client *c = attach(&f, FAKE_ABI_12);
	fake_drain(&f);
	struct md_seq_options o, got;
	md_seq_options_init(&o);
	o.policy = MD_POLICY_RECENCY;
	o.budget_sequence_tokens = 48;
	o.state = MD_SEQ_RETAINED;
	md_seq_session_tag("sess-12", 7, o.session);
	ck_assert_int_eq(md_seq_set_options(c, 1, &o), 0);
	const struct md_seq_opts *e = (void *)(f.eseg + f.eo.seq_opts);
	ck_assert_uint_eq(e[1].policy, MD_POLICY_RECENCY);
	ck_assert_uint_eq(e[1].budget_sequence_tokens, 48);
	ck_assert_uint_eq(e[1].state, 0);
	ck_assert_uint_eq(e[1].resv, 0);
	ck_assert_mem_eq(e[1].session, "\0\0\0\0\0\0\0\0", 8);
	struct md_stats_rec r;
	ck_assert(fake_find(&f, MD_REC_SEQ_OPTS, &r));
	ck_assert_uint_eq(r.u.seq_opts.policy, MD_POLICY_RECENCY);
	ck_assert_uint_eq(r.u.seq_opts.budget_sequence_tokens, 48);
	ck_assert_uint_eq(r.u.seq_opts.state, 0);
	ck_assert_mem_eq(r.u.seq_opts.session, "\0\0\0\0\0\0\0\0", 8);
	ck_assert_uint_eq(r.u.seq_opts.resv1, 0);
	ck_assert_int_eq(md_seq_get_options(c, 1, &got), 0);
	ck_assert_uint_eq(got.state, MD_SEQ_RETAINED);
	ck_assert_mem_eq(got.session, "sess-12\0", 8);

	/* the daemon restarts as 1.3: the reattach writes the session too */
	char dir[64];
	snprintf(dir, sizeof(dir), "%s", f.dir);
	fake_kill(&f);
	md_client_detach(c);
	fake_start_at(&f, &contract_fake, FK_OK, FAKE_ABI_13, dir);
	ck_assert_int_eq(md_client_reattach(c), 0);
	fake_join(&f);
	e = (void *)(f.eseg + f.eo.seq_opts);
	ck_assert_uint_eq(e[1].policy, MD_POLICY_RECENCY);
	ck_assert_uint_eq(e[1].state, MD_SEQ_RETAINED);
	ck_assert_mem_eq(e[1].session, "sess-12\0", 8);
	ck_assert_uint_eq(e[1].version % 2, 0);
	ck_assert_uint_ge(f.ectrl->resync_request, 1);
	md_client_destroy(c);
	fake_stop(&f);

	/* a 1.1 daemon: -ENOTSUP, kept in the mirror, as every option */
	c = attach(&f, FAKE_ABI_11);
	ck_assert_int_eq(md_seq_set_options(c, 0, &o), -ENOTSUP);
	ck_assert_int_eq(md_seq_get_options(c, 0, &got), 0);
	ck_assert_uint_eq(got.state, MD_SEQ_RETAINED);
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

START_TEST(test_apply_commands)
{
	struct fake f;
	md_client *c = attach(&f, 1);
	struct engine en = { .c = c };
	uint32_t s[6];
	open_pages(c, 0, 6, 0, s);
	ck_assert_int_eq(md_apply_commands(c, engine_apply, &en), 0);
	ck_assert_int_eq(en.calls, 0);

	fake_cmd(&f, c, s[0]);
	fake_cmd(&f, c, s[1]);
	ck_assert_int_eq(md_apply_commands(c, engine_apply, &en), 2);
	ck_assert_uint_eq(md_client_live_pages(c), 4);

	/* kept by the engine: the page stays, and may be commanded again */
	en.mode = 1;
	fake_cmd(&f, c, s[2]);
	ck_assert_int_eq(md_apply_commands(c, engine_apply, &en), 0);
	ck_assert_uint_eq(md_client_live_pages(c), 4);
	en.mode = 0;
	fake_cmd(&f, c, s[2]);
	ck_assert_int_eq(md_apply_commands(c, engine_apply, &en), 1);
	ck_assert_uint_eq(md_client_live_pages(c), 3);

	/* freed but not reported: the library reports it */
	en.mode = 3;
	fake_cmd(&f, c, s[3]);
	ck_assert_int_eq(md_apply_commands(c, engine_apply, &en), 1);
	struct md_page_entry pe;
	md_page_info(c, s[3], &pe);
	ck_assert_uint_eq(pe.state, MD_PAGE_FREE);
	struct md_client_counters cc;
	md_client_counters(c, &cc);
	ck_assert_uint_eq(cc.cmds_applied, 4);

	/* an engine error stops the loop and is returned */
	en.mode = 2;
	fake_cmd(&f, c, s[4]);
	ck_assert_int_eq(md_apply_commands(c, engine_apply, &en), -EIO);
	ck_assert_int_eq(md_apply_commands(c, NULL, &en), -EINVAL);
	md_client_detach(c);
	ck_assert_int_eq(md_apply_commands(c, engine_apply, &en), 0);
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

/* Commands for the given slots after delay_ms, from another thread. */
struct later {
	struct fake *f;
	md_client *c;
	uint32_t slots[8], n;
	int delay_ms;
	int shutdown;       /* 1: declare the daemon shutting down instead */
};

static void *later_run(void *arg)
{
	struct later *l = arg;
	struct timespec ts = { 0, (long)l->delay_ms * 1000000L };
	nanosleep(&ts, NULL);
	if (l->shutdown) {
		md_store_release(&l->f->dctrl->shutting_down, 1);
		return NULL;
	}
	for (uint32_t i = 0; i < l->n; i++) {
		struct md_cmd *m = md_ring_reserve(&l->f->cmds);
		struct md_page_entry e;
		md_page_info(l->c, l->slots[i], &e);   /* the engine thread does not touch them */
		*m = (struct md_cmd){ .type = MD_CMD_EVICT, .reason = MD_EVICT_SEQUENCE_BUDGET,
				      .seq = e.seq, .slot = l->slots[i], .gen = e.generation };
		md_ring_publish(&l->f->cmds, m);
	}
	return NULL;
}

static void budget(md_client *c, uint32_t seq, int64_t tokens)
{
	struct md_seq_options o;
	md_seq_options_init(&o);
	o.budget_sequence_tokens = tokens;
	ck_assert_int_ge(md_seq_set_options(c, seq, &o), MD_EDETACHED);
}

START_TEST(test_settle_outcomes)
{
	struct fake f;
	md_client *c = attach(&f, 1);
	struct engine en = { .c = c };
	struct md_settle_result res;
	uint32_t s[8], seq = 0, next = 1;
	open_pages(c, 0, 8, 1, s);   /* 128 tokens, floor 48 (system + two newest) */

	/* no budget: never waits */
	ck_assert_int_eq(md_settle(c, &seq, &next, 1, 0, 1000, engine_apply, &en, &res), 0);
	ck_assert_uint_eq(res.outcome, MD_SETTLE_OK);
	ck_assert_uint_eq(res.waited, 0);

	/* within budget + slack */
	budget(c, 0, 120);
	ck_assert_int_eq(md_settle(c, &seq, &next, 1, 16, 1000, engine_apply, &en, &res), 0);
	ck_assert_uint_eq(res.outcome, MD_SETTLE_OK);
	ck_assert_uint_eq(res.waited, 0);

	/* over: the daemon's decision comes after 30 ms and brings it within */
	budget(c, 0, 64);
	struct later l = { .f = &f, .c = c, .slots = { s[1], s[2], s[3], s[4] }, .n = 4,
			   .delay_ms = 30 };
	pthread_t th;
	pthread_create(&th, NULL, later_run, &l);
	ck_assert_int_eq(md_settle(c, &seq, &next, 1, 16, 2000, engine_apply, &en, &res), 0);
	pthread_join(th, NULL);
	ck_assert_uint_eq(res.outcome, MD_SETTLE_OK);
	ck_assert_uint_eq(res.waited, 1);
	ck_assert_uint_eq(res.applied, 4);
	ck_assert_uint_gt(res.wait_ns, 0);
	ck_assert_uint_eq(md_seq_live_tokens(c, 0), 64);

	/* over again: the daemon evicts one page and nothing more comes */
	budget(c, 0, 32);
	fake_cmd(&f, c, s[5]);
	ck_assert_int_eq(md_settle(c, &seq, &next, 1, 0, 2000, engine_apply, &en, &res), 0);
	ck_assert_uint_eq(res.outcome, MD_SETTLE_UNREACHABLE);
	ck_assert_uint_eq(res.applied, 1);
	ck_assert_uint_lt(res.wait_ns, 1000000000ull);

	/* the floor is above the budget: max(budget, floor) is the limit */
	ck_assert_uint_eq(md_seq_floor(c, 0), 48);
	ck_assert_int_eq(md_settle(c, &seq, NULL, 1, 0, 2000, engine_apply, &en, &res), 0);
	ck_assert_uint_eq(res.outcome, MD_SETTLE_OK);
	ck_assert_uint_eq(res.waited, 0);

	/* no decision: timeout, then suppressed until the daemon evicts again */
	uint32_t t[3];
	open_pages(c, 1, 3, 0, t);
	budget(c, 1, 16);
	uint32_t seq1 = 1;
	ck_assert_int_eq(md_settle(c, &seq1, &next, 1, 0, 40, engine_apply, &en, &res), 0);
	ck_assert_uint_eq(res.outcome, MD_SETTLE_TIMEOUT);
	ck_assert_uint_eq(res.waited, 1);
	ck_assert_uint_ge(res.wait_ns, 40000000ull);
	ck_assert_int_eq(md_settle(c, &seq1, &next, 1, 0, 40, engine_apply, &en, &res), 0);
	ck_assert_uint_eq(res.outcome, MD_SETTLE_SUPPRESSED);
	ck_assert_uint_eq(res.waited, 0);
	/* another sequence is not suppressed by it */
	uint32_t both[2] = { 0, 1 };
	ck_assert_int_eq(md_settle(c, both, NULL, 2, 0, 40, engine_apply, &en, &res), 0);
	ck_assert_uint_eq(res.outcome, MD_SETTLE_SUPPRESSED);
	fake_cmd(&f, c, t[0]);   /* the daemon evicts from it: the next wait is real */
	ck_assert_int_eq(md_settle(c, &seq1, &next, 1, 0, 40, engine_apply, &en, &res), 0);
	ck_assert_uint_eq(res.outcome, MD_SETTLE_UNREACHABLE);

	/* the daemon goes away during the wait */
	open_pages(c, 2, 3, 0, t);
	budget(c, 2, 16);
	uint32_t seq2 = 2;
	struct later sd = { .f = &f, .c = c, .delay_ms = 20, .shutdown = 1 };
	pthread_create(&th, NULL, later_run, &sd);
	ck_assert_int_eq(md_settle(c, &seq2, &next, 1, 0, 2000, engine_apply, &en, &res), 0);
	pthread_join(th, NULL);
	ck_assert_uint_eq(res.outcome, MD_SETTLE_DETACHED);
	ck_assert_uint_eq(res.waited, 1);
	ck_assert(!md_client_attached(c));
	/* detached: fail-open at once */
	ck_assert_int_eq(md_settle(c, &seq2, &next, 1, 0, 2000, engine_apply, &en, &res), 0);
	ck_assert_uint_eq(res.outcome, MD_SETTLE_DETACHED);
	ck_assert_uint_eq(res.waited, 0);

	uint32_t bad = 4;
	ck_assert_int_eq(md_settle(c, &bad, NULL, 1, 0, 10, engine_apply, &en, &res), -EINVAL);
	ck_assert_int_eq(md_settle(c, &seq, NULL, 1, 0, 10, NULL, &en, &res), -EINVAL);
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

/* The engine's page budget: the same wait, on live pages instead of a
 * sequence's tokens. */
START_TEST(test_settle_engine)
{
	struct fake f;
	md_client *c = attach(&f, 1);
	struct engine en = { .c = c };
	struct md_settle_result res;
	uint32_t s[8];
	open_pages(c, 0, 8, 0, s);

	/* no page budget: never waits */
	ck_assert_int_eq(md_settle_engine(c, 1, 0, 1000, engine_apply, &en, &res), 0);
	ck_assert_uint_eq(res.outcome, MD_SETTLE_OK);
	ck_assert_uint_eq(res.waited, 0);

	f.params->seq = 3;
	f.params->budget_engine_pages = 6;
	f.params->seq = 4;
	/* 8 pages + 1 > 6 + 4 slack: no */
	ck_assert_int_eq(md_settle_engine(c, 1, 4, 1000, engine_apply, &en, &res), 0);
	ck_assert_uint_eq(res.waited, 0);

	/* over: the decision comes after 30 ms and makes room for one page */
	struct later l = { .f = &f, .c = c, .slots = { s[0], s[1], s[2] }, .n = 3,
			   .delay_ms = 30 };
	pthread_t th;
	pthread_create(&th, NULL, later_run, &l);
	ck_assert_int_eq(md_settle_engine(c, 1, 0, 2000, engine_apply, &en, &res), 0);
	pthread_join(th, NULL);
	ck_assert_uint_eq(res.outcome, MD_SETTLE_OK);
	ck_assert_uint_eq(res.waited, 1);
	ck_assert_uint_eq(res.applied, 3);
	ck_assert_uint_eq(md_client_live_pages(c), 5);

	/* no decision: a bounded wait */
	f.params->seq = 5;
	f.params->budget_engine_pages = 2;
	f.params->seq = 6;
	ck_assert_int_eq(md_settle_engine(c, 1, 0, 40, engine_apply, &en, &res), 0);
	ck_assert_uint_eq(res.outcome, MD_SETTLE_TIMEOUT);
	ck_assert_uint_ge(res.wait_ns, 40000000ull);

	/* one eviction and nothing more: unreachable */
	fake_cmd(&f, c, s[3]);
	ck_assert_int_eq(md_settle_engine(c, 1, 0, 2000, engine_apply, &en, &res), 0);
	ck_assert_uint_eq(res.outcome, MD_SETTLE_UNREACHABLE);
	ck_assert_uint_eq(res.applied, 1);

	ck_assert_int_eq(md_settle_engine(c, 1, 0, 10, NULL, &en, &res), -EINVAL);
	md_client_detach(c);
	ck_assert_int_eq(md_settle_engine(c, 1, 0, 10, engine_apply, &en, &res), 0);
	ck_assert_uint_eq(res.outcome, MD_SETTLE_DETACHED);
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

START_TEST(test_settle_apply_error)
{
	struct fake f;
	md_client *c = attach(&f, 1);
	struct engine en = { .c = c, .mode = 2 };
	uint32_t s[4], seq = 0;
	open_pages(c, 0, 4, 0, s);
	budget(c, 0, 16);
	fake_cmd(&f, c, s[0]);
	ck_assert_int_eq(md_settle(c, &seq, NULL, 1, 0, 100, engine_apply, &en, NULL), -EIO);
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

START_TEST(test_maintain_reattaches)
{
	struct fake f;
	md_client *c = attach(&f, 1);
	uint32_t s[3];
	open_pages(c, 0, 3, 1, s);
	struct md_seq_options o;
	md_seq_options_init(&o);
	o.budget_sequence_tokens = 32;
	ck_assert_int_eq(md_seq_set_options(c, 0, &o), 0);
	ck_assert_int_eq(md_client_maintain(c, 0, 20), 1);

	/* the daemon stops: detached at the next boundary, fail-open */
	char dir[64];
	snprintf(dir, sizeof(dir), "%s", f.dir);
	md_store_release(&f.dctrl->shutting_down, 1);
	fake_kill(&f);
	ck_assert_int_eq(md_client_maintain(c, 0, 20), 0);
	ck_assert(!md_client_attached(c));
	ck_assert_int_eq(md_client_maintain(c, 0, 20), 0);   /* no daemon, backing off */

	/* a new daemon: maintain reattaches within its retry period */
	fake_start_at(&f, &contract_fake, FK_OK, 1, dir);
	uint64_t t0 = md_now_ns();
	int up = 0;
	while (!up && md_now_ns() - t0 < 2000000000ull) {
		up = md_client_maintain(c, 0, 20);
		struct timespec ts = { 0, 5000000 };
		nanosleep(&ts, NULL);
	}
	fake_join(&f);
	ck_assert(up);
	struct md_client_counters cc;
	md_client_counters(c, &cc);
	ck_assert_uint_eq(cc.reattaches, 1);
	/* pages and options are in the new segment, and a resync is asked */
	const struct md_page_entry *pt = (void *)(f.eseg + f.eo.page_table);
	for (int i = 0; i < 3; i++)
		ck_assert_uint_eq(pt[s[i]].state, MD_PAGE_LIVE);
	const struct md_seq_opts *e = (void *)(f.eseg + f.eo.seq_opts);
	ck_assert_uint_eq(e[0].budget_sequence_tokens, 32);
	ck_assert_uint_ge(f.ectrl->resync_request, 1);
	ck_assert_int_eq(md_client_maintain(c, 0, 20), 1);
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

START_TEST(test_contract_no_allocation)
{
	struct fake f;
	md_client *c = attach(&f, 1);
	struct engine en = { .c = c };
	uint32_t s[4], seq = 0, got[4];
	open_pages(c, 0, 4, 1, s);
	budget(c, 0, 256);
	fake_drain(&f);
	/* These only read the mirror and the segments: no Check inside, it allocates. */
	int bad = 0;
	long before = g_allocs;
	for (int i = 0; i < 100; i++) {
		bad |= md_seq_pages(c, 0, got, 4) != 4;
		bad |= md_seq_floor(c, 0) != 48;
		bad |= md_apply_commands(c, engine_apply, &en) != 0;
		struct md_settle_result res;
		bad |= md_settle(c, &seq, NULL, 1, 0, 10, engine_apply, &en, &res) != 0;
		bad |= md_client_maintain(c, 0, 0) != 1;
	}
	long allocs = g_allocs - before;
	ck_assert(!bad);
	ck_assert_int_eq(allocs, 0);
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

/* ---- the host tier (ABI 1.4) ---- */

START_TEST(test_tier_hello)
{
	struct fake f;
	md_client *c = attach_tier(&f, FAKE_ABI_14, 8);
	ck_assert_ptr_nonnull(strstr(f.hello, "HELLO abi=1.4 "));
	ck_assert_ptr_nonnull(strstr(f.hello, " tier_pages=8 page_bytes=4096\n"));
	md_client_destroy(c);
	fake_stop(&f);

	/* no tier asked for: no tier fields */
	c = attach_tier(&f, FAKE_ABI_14, 0);
	ck_assert_ptr_null(strstr(f.hello, "tier_pages"));
	ck_assert_ptr_null(strstr(f.hello, "page_bytes"));
	grant_tier(&f, 8);   /* whatever the block says, the engine offered none */
	ck_assert_uint_eq(md_client_tier_budget(c), 0);
	md_client_destroy(c);
	fake_stop(&f);

	/* a tier page keeps its slot: the tier cannot outgrow the table */
	struct md_client_config cfg;
	cfg_for(&cfg, "/nonexistent/memdecay.sock");
	cfg.tier_pages = cfg.page_capacity + 1;
	ck_assert_int_eq(md_client_create(&cfg, &c), -EINVAL);
	cfg.tier_pages = cfg.page_capacity;
	cfg.page_bytes = (uint64_t)UINT32_MAX + 1;
	ck_assert_int_eq(md_client_create(&cfg, &c), -EINVAL);
	cfg.page_bytes = UINT32_MAX;
	ck_assert_int_eq(md_client_create(&cfg, &c), 0);
	ck_assert_uint_eq(md_client_tier_budget(c), 0);   /* detached, never read */
	md_client_destroy(c);
}
END_TEST

/* An evict kept in the tier, restores refused and applied, drops kept and
 * applied: each with its record, page-table state and mirror lists. */
START_TEST(test_tier_commands)
{
	struct fake f;
	md_client *c = attach_tier(&f, FAKE_ABI_14, 8);
	struct tier_engine en = { .c = c };
	uint32_t s[4], got[8];
	ck_assert_uint_eq(md_client_tier_budget(c), 0);   /* not granted yet */
	grant_tier(&f, 6);
	ck_assert_uint_eq(md_client_tier_budget(c), 6);
	open_pages(c, 0, 4, 0, s);
	fake_drain(&f);

	/* evict, kept in the tier (apply returned 2) */
	to_tier(&f, c, &en, s[1]);
	ck_assert_uint_eq(en.last.type, MD_CMD_EVICT);
	ck_assert(!fake_next(&f, &(struct md_stats_rec){ 0 }));   /* no PAGE_FREE */
	const struct md_page_entry *pt = (void *)(f.eseg + f.eo.page_table);
	ck_assert_uint_eq(pt[s[1]].state, MD_PAGE_TIER);
	ck_assert_uint_eq(pt[s[1]].version % 2, 0);
	ck_assert_uint_eq(pt[s[1]].first_pos, 16);
	struct md_page_entry pe;
	md_page_info(c, s[1], &pe);
	ck_assert_uint_eq(pe.state, MD_PAGE_TIER);
	ck_assert_uint_eq(pe.seq, 0);
	ck_assert_uint_eq(md_client_live_pages(c), 3);
	ck_assert_uint_eq(md_client_tier_pages(c), 1);
	ck_assert_int_eq(md_seq_pages(c, 0, got, 8), 3);
	ck_assert_uint_eq(md_seq_live_tokens(c, 0), 48);
	ck_assert_int_eq(md_seq_tier_pages(c, 0, got, 8), 1);
	ck_assert_uint_eq(got[0], s[1]);
	struct md_client_counters cc;
	md_client_counters(c, &cc);
	ck_assert_uint_eq(cc.cmds_applied, 1);
	ck_assert_uint_eq(f.ectrl->cmds_applied, 1);
	/* a tier page gets no real attention, and no second evict */
	ck_assert_int_eq(md_attn_page(c, s[1], 0.5f, 0), MD_ESTALE);
	tier_cmd(&f, c, MD_CMD_EVICT, s[1]);
	ck_assert_int_eq(md_apply_commands(c, tier_apply, &en), 0);
	md_client_counters(c, &cc);
	ck_assert_uint_eq(cc.cmds_stale, 1);

	/* restore refused (no device block): REFUSED, still in the tier */
	en.calls = 0;
	en.restore_rc = 0;
	tier_cmd(&f, c, MD_CMD_RESTORE, s[1]);
	ck_assert_int_eq(md_apply_commands(c, tier_apply, &en), 0);
	ck_assert_int_eq(en.calls, 1);
	ck_assert_uint_eq(en.last.type, MD_CMD_RESTORE);
	ck_assert_uint_eq(en.last.reason, MD_RESTORE_RECALL);
	struct md_stats_rec r = next_rec(&f, MD_REC_PAGE_TIER);
	ck_assert_uint_eq(r.slot, s[1]);
	ck_assert_uint_eq(r.gen, pe.generation);
	ck_assert_uint_eq(r.u.tier.event, MD_TIER_REFUSED);
	ck_assert_uint_eq(pt[s[1]].state, MD_PAGE_TIER);
	ck_assert_uint_eq(md_client_tier_pages(c), 1);

	/* restore applied: RESTORED, live again in its place */
	en.restore_rc = 1;
	tier_cmd(&f, c, MD_CMD_RESTORE, s[1]);
	ck_assert_int_eq(md_apply_commands(c, tier_apply, &en), 1);
	r = next_rec(&f, MD_REC_PAGE_TIER);
	ck_assert_uint_eq(r.u.tier.event, MD_TIER_RESTORED);
	ck_assert_uint_eq(pt[s[1]].state, MD_PAGE_LIVE);
	ck_assert_uint_eq(md_client_live_pages(c), 4);
	ck_assert_uint_eq(md_client_tier_pages(c), 0);
	ck_assert_int_eq(md_seq_pages(c, 0, got, 8), 4);
	for (int i = 0; i < 4; i++)
		ck_assert_uint_eq(got[i], s[i]);   /* first-position order */
	ck_assert_uint_eq(md_seq_live_tokens(c, 0), 64);
	ck_assert_int_eq(md_attn_page(c, s[1], 0.5f, 0), 0);
	fake_drain(&f);
	/* a restore for a resident page is stale */
	tier_cmd(&f, c, MD_CMD_RESTORE, s[1]);
	ck_assert_int_eq(md_apply_commands(c, tier_apply, &en), 0);

	/* drop kept by the engine: nothing published, may come again */
	to_tier(&f, c, &en, s[2]);
	en.drop_rc = 0;
	tier_cmd(&f, c, MD_CMD_DROP, s[2]);
	ck_assert_int_eq(md_apply_commands(c, tier_apply, &en), 0);
	ck_assert(!fake_next(&f, &r));
	ck_assert_uint_eq(md_client_tier_pages(c), 1);
	/* drop applied, the library reports it: PAGE_FREE reason DROPPED */
	en.drop_rc = 1;
	tier_cmd(&f, c, MD_CMD_DROP, s[2]);
	ck_assert_int_eq(md_apply_commands(c, tier_apply, &en), 1);
	ck_assert_uint_eq(en.last.reason, MD_DROP_TIER_BUDGET);
	r = next_rec(&f, MD_REC_PAGE_FREE);
	ck_assert_uint_eq(r.slot, s[2]);
	ck_assert_uint_eq(r.u.free.reason, MD_FREE_DROPPED);
	ck_assert(!fake_next(&f, &r));
	ck_assert_uint_eq(pt[s[2]].state, MD_PAGE_FREE);
	md_page_info(c, s[2], &pe);
	ck_assert_uint_eq(pe.state, MD_PAGE_FREE);
	ck_assert_uint_eq(md_client_tier_pages(c), 0);
	ck_assert_int_eq(md_seq_tier_pages(c, 0, got, 8), 0);
	/* drop applied and reported by the engine itself: one PAGE_FREE */
	to_tier(&f, c, &en, s[3]);
	en.report_drop = 1;
	tier_cmd(&f, c, MD_CMD_DROP, s[3]);
	ck_assert_int_eq(md_apply_commands(c, tier_apply, &en), 1);
	r = next_rec(&f, MD_REC_PAGE_FREE);
	ck_assert_uint_eq(r.u.free.reason, MD_FREE_DROPPED);
	ck_assert(!fake_next(&f, &r));
	md_client_counters(c, &cc);
	/* evict s1, restore s1, evict s2, drop s2, evict s3, drop s3 */
	ck_assert_uint_eq(cc.cmds_applied, 6);
	ck_assert_uint_eq(f.ectrl->cmds_applied, 6);

	/* drops and restores name tier pages; an unknown type is no command */
	uint64_t proto = md_client_proto_errors(c);
	tier_cmd(&f, c, MD_CMD_DROP, s[0]);
	fake_command(&f, MD_CMD_TYPE_COUNT, 0, 0, s[0], 1, 1);
	fake_command(&f, MD_CMD_NONE, 0, 0, s[0], 1, 1);
	en.calls = 0;
	ck_assert_int_eq(md_apply_commands(c, tier_apply, &en), 0);
	ck_assert_int_eq(en.calls, 0);
	ck_assert_uint_eq(md_client_proto_errors(c), proto + 2);
	ck_assert_uint_eq(md_client_live_pages(c), 2);
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

/* Estimates go to tier pages only, flagged; the batch's rules hold. */
START_TEST(test_tier_estimates)
{
	struct fake f;
	md_client *c = attach_tier(&f, FAKE_ABI_14, 8);
	struct tier_engine en = { .c = c };
	grant_tier(&f, 8);
	uint32_t s[4];
	open_pages(c, 1, 4, 0, s);
	fake_drain(&f);
	to_tier(&f, c, &en, s[0]);
	to_tier(&f, c, &en, s[2]);

	uint32_t slots[3] = { s[0], s[1], s[2] };
	float mass[3] = { 0.25f, 0.5f, 0.75f };
	uint16_t refresh[3] = { 0xffff, 0xffff, 0x0003 };
	struct md_batch_result res;
	ck_assert_int_eq(md_publish_estimates(c, slots, mass, refresh, 3, &res), 0);
	ck_assert_uint_eq(res.published, 3); /* s[1], resident, too */
	ck_assert_uint_eq(res.skipped, 0);
	ck_assert_uint_eq(res.steps, 0);
	struct md_stats_rec r = next_rec(&f, MD_REC_ATTN_PAGE);
	ck_assert_uint_eq(r.slot, s[0]);
	ck_assert_uint_eq(r.flags, MD_REC_F_ESTIMATE);
	ck_assert(r.u.attn_page.mass == 0.25f);
	ck_assert_uint_eq(r.u.attn_page.refresh, 0xffff);
	r = next_rec(&f, MD_REC_ATTN_PAGE);
	ck_assert_uint_eq(r.slot, s[1]);
	ck_assert_uint_eq(r.flags, MD_REC_F_ESTIMATE);
	ck_assert(r.u.attn_page.mass == 0.5f);
	r = next_rec(&f, MD_REC_ATTN_PAGE);
	ck_assert_uint_eq(r.slot, s[2]);
	ck_assert_uint_eq(r.flags, MD_REC_F_ESTIMATE);
	ck_assert_uint_eq(r.u.attn_page.refresh, 0x0003);
	ck_assert(!fake_next(&f, &r));

	/* real attention skips tier pages and carries no flag */
	ck_assert_int_eq(md_publish_batch(c, NULL, NULL, 0, slots, mass, NULL, 3, &res), 0);
	ck_assert_uint_eq(res.published, 1);
	ck_assert_uint_eq(res.skipped, 2);
	r = next_rec(&f, MD_REC_ATTN_PAGE);
	ck_assert_uint_eq(r.slot, s[1]);
	ck_assert_uint_eq(r.flags, 0);

	/* bad input changes nothing */
	float bad[3] = { 0.25f, -1.0f, 0.5f };
	ck_assert_int_eq(md_publish_estimates(c, slots, bad, NULL, 3, &res), -EINVAL);
	uint32_t far[1] = { 64 };
	ck_assert_int_eq(md_publish_estimates(c, far, mass, NULL, 1, &res), -EINVAL);
	ck_assert_int_eq(md_publish_estimates(c, NULL, mass, NULL, 1, &res), -EINVAL);
	ck_assert(!fake_next(&f, &r));
	ck_assert_int_eq(md_publish_estimates(c, NULL, NULL, NULL, 0, NULL), 0);

	/* overload: the estimates are dropped whole (3/4 of the 64-record ring) */
	for (int i = 0; i < 47; i++)
		ck_assert_int_eq(md_seq_step(c, 2, 1), 0);
	struct md_client_counters cc0, cc1;
	md_client_counters(c, &cc0);
	ck_assert_int_eq(md_publish_estimates(c, slots, mass, NULL, 3, &res), MD_EFULL);
	ck_assert_uint_eq(res.dropped, 3);
	ck_assert_uint_eq(res.published, 0);
	md_client_counters(c, &cc1);
	ck_assert_uint_eq(cc1.attn_dropped, cc0.attn_dropped + 3);
	fake_drain(&f);

	/* detached: nothing published */
	md_client_detach(c);
	ck_assert_int_eq(md_publish_estimates(c, slots, mass, NULL, 3, &res), MD_EDETACHED);
	ck_assert_uint_eq(res.published, 0);
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

/* The engine frees tier pages itself (its own limit) and at a sequence's end. */
START_TEST(test_tier_free_and_seq_end)
{
	struct fake f;
	md_client *c = attach_tier(&f, FAKE_ABI_14, 8);
	struct tier_engine en = { .c = c };
	grant_tier(&f, 8);
	uint32_t s[4];
	open_pages(c, 1, 4, 0, s);
	fake_drain(&f);
	to_tier(&f, c, &en, s[0]);
	to_tier(&f, c, &en, s[1]);
	to_tier(&f, c, &en, s[2]);

	/* a resident page has no host copy; a tier page was evicted already */
	ck_assert_int_eq(md_page_free(c, s[3], MD_FREE_DROPPED), -EINVAL);
	ck_assert_int_eq(md_page_free(c, s[0], MD_FREE_EVICTED), -EINVAL);
	ck_assert_int_eq(md_page_free(c, s[0], MD_FREE_DROPPED + 1), -EINVAL);
	/* the engine's own limit */
	ck_assert_int_eq(md_page_free(c, s[0], MD_FREE_DROPPED), 0);
	struct md_stats_rec r = next_rec(&f, MD_REC_PAGE_FREE);
	ck_assert_uint_eq(r.slot, s[0]);
	ck_assert_uint_eq(r.u.free.reason, MD_FREE_DROPPED);
	ck_assert_int_eq(md_page_free(c, s[0], MD_FREE_DROPPED), MD_ESTALE);
	ck_assert_uint_eq(md_client_tier_pages(c), 2);
	struct md_client_counters cc;
	md_client_counters(c, &cc);
	ck_assert_uint_eq(cc.cmds_applied, 3);   /* the three evicts, not this drop */

	/* the end: resident and tier pages each get a PAGE_FREE, before SEQ_END */
	ck_assert_int_eq(md_seq_end(c, 1), 0);
	int frees = 0, ends = 0;
	uint8_t freed[64] = { 0 };
	while (fake_next(&f, &r)) {
		if (r.type == MD_REC_PAGE_FREE) {
			frees++;
			freed[r.slot]++;
			ck_assert_uint_eq(r.u.free.reason, MD_FREE_FINISHED);
		} else if (r.type == MD_REC_SEQ_END) {
			ends++;
			ck_assert_int_eq(frees, 3);
		}
	}
	ck_assert_int_eq(ends, 1);
	ck_assert(freed[s[1]] == 1 && freed[s[2]] == 1 && freed[s[3]] == 1);
	ck_assert_uint_eq(md_client_tier_pages(c), 0);
	ck_assert_uint_eq(md_client_live_pages(c), 0);
	uint32_t got[4];
	ck_assert_int_eq(md_seq_tier_pages(c, 1, got, 4), 0);
	const struct md_page_entry *pt = (void *)(f.eseg + f.eo.page_table);
	for (int i = 0; i < 4; i++)
		ck_assert_uint_eq(pt[s[i]].state, MD_PAGE_FREE);
	/* every slot is free again */
	uint32_t t[64];
	open_pages(c, 2, 64, 0, t);
	ck_assert_uint_eq(md_client_live_pages(c), 64);
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

/* A 1.4 engine on a 1.3 daemon: no tier.  An evict "kept in the tier" is
 * -ENOTSUP and the page stays live; restore and drop are not commands. */
START_TEST(test_tier_older_daemon)
{
	struct fake f;
	md_client *c = attach_tier(&f, FAKE_ABI_13, 8);
	ck_assert_ptr_nonnull(strstr(f.hello, " tier_pages=8"));   /* it skips the key */
	grant_tier(&f, 8);   /* a reserved word in 1.3: not read */
	ck_assert_uint_eq(md_client_tier_budget(c), 0);
	struct tier_engine en = { .c = c, .evict_rc = 2 };
	uint32_t s[3];
	open_pages(c, 0, 3, 0, s);
	fake_drain(&f);
	tier_cmd(&f, c, MD_CMD_EVICT, s[0]);
	ck_assert_int_eq(md_apply_commands(c, tier_apply, &en), -ENOTSUP);
	struct md_page_entry pe;
	md_page_info(c, s[0], &pe);
	ck_assert_uint_eq(pe.state, MD_PAGE_LIVE);
	ck_assert_uint_eq(md_client_tier_pages(c), 0);
	struct md_stats_rec r;
	ck_assert(!fake_next(&f, &r));
	/* the engine frees it instead: as ever */
	en.evict_rc = 1;
	tier_cmd(&f, c, MD_CMD_EVICT, s[0]);
	ck_assert_int_eq(md_apply_commands(c, tier_apply, &en), 1);
	r = next_rec(&f, MD_REC_PAGE_FREE);
	ck_assert_uint_eq(r.u.free.reason, MD_FREE_EVICTED);
	/* restore and drop from a daemon without a tier: protocol errors */
	uint64_t proto = md_client_proto_errors(c);
	fake_command(&f, MD_CMD_RESTORE, MD_RESTORE_RECALL, 0, s[1], 1, 1);
	fake_command(&f, MD_CMD_DROP, MD_DROP_TIER_BUDGET, 0, s[1], 1, 1);
	en.calls = 0;
	ck_assert_int_eq(md_apply_commands(c, tier_apply, &en), 0);
	ck_assert_int_eq(en.calls, 0);
	ck_assert_uint_eq(md_client_proto_errors(c), proto + 2);
	/* no estimates for it either */
	struct md_batch_result res;
	float m = 1.0f;
	ck_assert_int_eq(md_publish_estimates(c, &s[1], &m, NULL, 1, &res), 0);
	ck_assert_uint_eq(res.published, 0);
	ck_assert(!fake_next(&f, &r));
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

/* A reattach gives a 1.4 daemon the tier pages in the page table (the
 * daemon's resync reads MD_PAGE_TIER entries); a 1.3 daemon sees them free,
 * and their release is not published to it. */
START_TEST(test_tier_reattach)
{
	struct fake f;
	md_client *c = attach_tier(&f, FAKE_ABI_14, 8);
	struct tier_engine en = { .c = c };
	grant_tier(&f, 8);
	uint32_t s[3];
	open_pages(c, 0, 3, 0, s);
	fake_drain(&f);
	to_tier(&f, c, &en, s[0]);
	to_tier(&f, c, &en, s[1]);
	ck_assert_int_eq(md_page_free(c, s[2], MD_FREE_FINISHED), 0);
	uint32_t s3, g3;
	md_page_open(c, 1, 0, 16, 0, &s3, &g3);   /* only resident page: seq 1 */
	char dir[64];
	snprintf(dir, sizeof(dir), "%s", f.dir);
	fake_kill(&f);
	md_client_detach(c);

	fake_start_at(&f, &contract_fake, FK_OK, FAKE_ABI_14, dir);
	ck_assert_int_eq(md_client_reattach(c), 0);
	fake_join(&f);
	const struct md_page_entry *pt = (void *)(f.eseg + f.eo.page_table);
	ck_assert_uint_eq(pt[s[0]].state, MD_PAGE_TIER);
	ck_assert_uint_eq(pt[s[0]].first_pos, 0);
	ck_assert_uint_eq(pt[s[0]].n_tokens, 16);
	ck_assert_uint_eq(pt[s[0]].version % 2, 0);
	ck_assert_uint_eq(pt[s[1]].state, MD_PAGE_TIER);
	ck_assert_uint_eq(pt[s[1]].first_pos, 16);
	ck_assert_uint_eq(pt[s3].state, MD_PAGE_LIVE);
	ck_assert_uint_ge(f.ectrl->resync_request, 1);
	/* restores and drops of the new daemon apply to them */
	grant_tier(&f, 8);
	en.restore_rc = 1;
	tier_cmd(&f, c, MD_CMD_RESTORE, s[0]);
	ck_assert_int_eq(md_apply_commands(c, tier_apply, &en), 1);
	ck_assert_uint_eq(pt[s[0]].state, MD_PAGE_LIVE);
	fake_drain(&f);

	/* tier pages alone also ask for a resync */
	md_page_free(c, s[0], MD_FREE_FINISHED);
	md_page_free(c, s3, MD_FREE_FINISHED);
	fake_kill(&f);
	md_client_detach(c);
	fake_start_at(&f, &contract_fake, FK_OK, FAKE_ABI_14, dir);
	ck_assert_int_eq(md_client_reattach(c), 0);
	fake_join(&f);
	pt = (void *)(f.eseg + f.eo.page_table);
	ck_assert_uint_eq(pt[s[1]].state, MD_PAGE_TIER);
	ck_assert_uint_ge(f.ectrl->resync_request, 1);

	/* a 1.3 daemon: the tier page is free in its table */
	fake_kill(&f);
	md_client_detach(c);
	fake_start_at(&f, &contract_fake, FK_OK, FAKE_ABI_13, dir);
	ck_assert_int_eq(md_client_reattach(c), 0);
	fake_join(&f);
	pt = (void *)(f.eseg + f.eo.page_table);
	ck_assert_uint_eq(pt[s[1]].state, MD_PAGE_FREE);
	ck_assert_uint_eq(md_client_tier_pages(c), 1);   /* the engine still holds it */
	ck_assert_uint_eq(md_client_tier_budget(c), 0);
	fake_drain(&f);
	ck_assert_int_eq(md_page_free(c, s[1], MD_FREE_DROPPED), 0);
	struct md_stats_rec r;
	ck_assert(!fake_next(&f, &r));   /* nothing it could place */
	ck_assert_uint_eq(md_client_tier_pages(c), 0);
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

/* The daemon consumes the records after delay_ms, then sleeps or sends a
 * restore for one slot. */
struct consumer {
	struct fake *f;
	int delay_ms;
	int sleep_after;          /* 1: declare itself asleep once drained */
	uint32_t restore_slot, restore_gen, restore_seq;
	int restore;
};

static void *consumer_run(void *arg)
{
	struct consumer *k = arg;
	struct timespec ts = { 0, (long)k->delay_ms * 1000000L };
	nanosleep(&ts, NULL);
	fake_drain(k->f);
	if (k->restore)
		fake_command(k->f, MD_CMD_RESTORE, MD_RESTORE_RECALL, k->restore_seq,
			     k->restore_slot, k->restore_gen, 1);
	if (k->sleep_after)
		md_store_release(&k->f->dctrl->sleeping, 1);
	return NULL;
}

START_TEST(test_settle_recall)
{
	struct fake f;
	md_client *c = attach_tier(&f, FAKE_ABI_14, 8);
	struct tier_engine en = { .c = c, .restore_rc = 1 };
	struct md_settle_result res;
	grant_tier(&f, 8);
	uint32_t s[3];
	open_pages(c, 0, 3, 0, s);
	fake_drain(&f);
	to_tier(&f, c, &en, s[0]);

	/* everything consumed and the daemon asleep: no wait */
	md_store_release(&f.dctrl->sleeping, 1);
	ck_assert_int_eq(md_settle_recall(c, 1000, tier_apply, &en, &res), 0);
	ck_assert_uint_eq(res.outcome, MD_SETTLE_OK);
	ck_assert_uint_eq(res.waited, 0);
	md_store_release(&f.dctrl->sleeping, 0);

	/* the estimate is never consumed: a bounded wait, fail-open */
	float m = 2.0f;
	ck_assert_int_eq(md_publish_estimates(c, &s[0], &m, NULL, 1, NULL), 0);
	ck_assert_int_eq(md_settle_recall(c, 40, tier_apply, &en, &res), 0);
	ck_assert_uint_eq(res.outcome, MD_SETTLE_TIMEOUT);
	ck_assert_uint_eq(res.waited, 1);
	ck_assert_uint_ge(res.wait_ns, 40000000ull);
	ck_assert_uint_eq(res.applied, 0);

	/* consumed after 20 ms with a restore: applied, then OK */
	struct md_page_entry pe;
	md_page_info(c, s[0], &pe);
	struct consumer k = { .f = &f, .delay_ms = 20, .restore = 1, .restore_slot = s[0],
			      .restore_gen = pe.generation, .restore_seq = 0 };
	pthread_t th;
	pthread_create(&th, NULL, consumer_run, &k);
	ck_assert_int_eq(md_settle_recall(c, 2000, tier_apply, &en, &res), 0);
	pthread_join(th, NULL);
	ck_assert_uint_eq(res.outcome, MD_SETTLE_OK);
	ck_assert_uint_eq(res.applied, 1);
	ck_assert_uint_ge(res.wait_ns, 20000000ull);
	ck_assert_uint_lt(res.wait_ns, 1000000000ull);
	md_page_info(c, s[0], &pe);
	ck_assert_uint_eq(pe.state, MD_PAGE_LIVE);
	struct md_stats_rec r = next_rec(&f, MD_REC_PAGE_TIER);
	ck_assert_uint_eq(r.u.tier.event, MD_TIER_RESTORED);

	/* consumed, nothing to recall, the daemon still awake: OK after the
	 * quiet period */
	to_tier(&f, c, &en, s[1]);
	ck_assert_int_eq(md_publish_estimates(c, &s[1], &m, NULL, 1, NULL), 0);
	struct consumer k2 = { .f = &f, .delay_ms = 10 };
	pthread_create(&th, NULL, consumer_run, &k2);
	ck_assert_int_eq(md_settle_recall(c, 2000, tier_apply, &en, &res), 0);
	pthread_join(th, NULL);
	ck_assert_uint_eq(res.outcome, MD_SETTLE_OK);
	ck_assert_uint_eq(res.applied, 0);
	ck_assert_uint_ge(res.wait_ns, 10000000ull);
	ck_assert_uint_lt(res.wait_ns, 1000000000ull);

	/* consumed, then asleep */
	ck_assert_int_eq(md_publish_estimates(c, &s[1], &m, NULL, 1, NULL), 0);
	struct consumer k3 = { .f = &f, .delay_ms = 10, .sleep_after = 1 };
	pthread_create(&th, NULL, consumer_run, &k3);
	ck_assert_int_eq(md_settle_recall(c, 2000, tier_apply, &en, &res), 0);
	pthread_join(th, NULL);
	ck_assert_uint_eq(res.outcome, MD_SETTLE_OK);
	ck_assert_uint_eq(res.waited, 1);

	ck_assert_int_eq(md_settle_recall(c, 10, NULL, &en, &res), -EINVAL);
	md_client_detach(c);
	ck_assert_int_eq(md_settle_recall(c, 1000, tier_apply, &en, &res), 0);
	ck_assert_uint_eq(res.outcome, MD_SETTLE_DETACHED);
	ck_assert_uint_eq(res.waited, 0);
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

static Suite *contract_suite(void)
{
	Suite *s = suite_create("contract");
	TCase *tc = tcase_create("contract");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_seq_pages_in_order);
	tcase_add_test(tc, test_floor_without_published_count);
	tcase_add_test(tc, test_floor_with_published_count);
	tcase_add_test(tc, test_seq_options);
	tcase_add_test(tc, test_seq_options_older_daemon_and_detached);
	tcase_add_test(tc, test_reattach_republishes_options);
	tcase_add_test(tc, test_session_tag);
	tcase_add_test(tc, test_seq_session);
	tcase_add_test(tc, test_seq_session_older_daemon);
	tcase_add_test(tc, test_apply_commands);
	tcase_add_test(tc, test_settle_outcomes);
	tcase_add_test(tc, test_settle_engine);
	tcase_add_test(tc, test_settle_apply_error);
	tcase_add_test(tc, test_maintain_reattaches);
	tcase_add_test(tc, test_contract_no_allocation);
	tcase_add_test(tc, test_tier_hello);
	tcase_add_test(tc, test_tier_commands);
	tcase_add_test(tc, test_tier_estimates);
	tcase_add_test(tc, test_tier_free_and_seq_end);
	tcase_add_test(tc, test_tier_older_daemon);
	tcase_add_test(tc, test_tier_reattach);
	tcase_add_test(tc, test_settle_recall);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return md_test_main(contract_suite());
}
