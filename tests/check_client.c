/*
 * check_client.c — libmemdecay against the fake daemon of fake_daemon.h (a
 * listening Unix socket, memfd segments, eventfds): attach and the records it
 * publishes, validation of malformed replies and segments, commands (stale,
 * torn, duplicate), overload, doorbells, batch publish, liveness, fail-open,
 * reattach, and no allocation on the publish/poll paths (malloc is wrapped at
 * link time).
 */
#include <check.h>
#include "test_util.h"
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
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

/* ---- the fake daemon (fake_daemon.h): engine 7 of instance 42, ABI 1.1
 * segments that claim this library's minor ---- */
static void client_params(struct md_param_block *p)
{
	p->tau = 0.25;
	p->pinned_mask = 1;
	p->protect_recent = 1;
	p->budget_engine_pages = 10;
	p->policy = MD_POLICY_MEMDECAY_NORM;
	p->norm_mode = MD_NORM_RELATIVE;
	p->alpha = 1.5;
	p->beta = 0.75;
	p->low_watermark = 0.5;
	for (unsigned r = 0; r < MD_REGIONS_MAX; r++) {
		p->base[r] = 0.5 + r / 64.0;
		p->lambda[r] = r / 128.0;
	}
	p->seq = 4;
}

static const struct fake_profile client_fake = {
	.tag = "check", .engine_id = 7, .instance_id = 42, .abi_minor = MD_ABI_MINOR,
	.params = client_params,
};

static void fake_start(struct fake *f, enum fake_mode mode)
{
	fake_start_at(f, &client_fake, mode, 0, NULL);
}

static void cfg_for(struct md_client_config *cfg, const struct fake *f)
{
	md_client_config_init(cfg);
	cfg->socket_path = f ? f->path : "/nonexistent/memdecay.sock";
	cfg->engine_name = "check";
	cfg->page_capacity = 32;
	cfg->max_seqs = 4;
	cfg->budget_engine_pages = 10;
}

static md_client *attach_ok(struct fake *f)
{
	struct md_client_config cfg;
	cfg_for(&cfg, f);
	md_client *c = fake_attach(f, &client_fake, 0, &cfg);
	ck_assert(md_client_attached(c));
	return c;
}

static void fake_cmd(struct fake *f, uint32_t seq, uint32_t slot, uint32_t gen)
{
	fake_evict(f, MD_EVICT_ENGINE_BUDGET, seq, slot, gen, 5);
}

/* ---- tests ---- */

START_TEST(test_attach_and_records)
{
	struct fake f;
	md_client *c = attach_ok(&f);
	ck_assert_ptr_nonnull(strstr(f.hello, "HELLO abi=1."));  /* minor grows (1.1: ABI minor bump) */
	ck_assert_ptr_nonnull(strstr(f.hello, " name=check page_tokens=16"));
	ck_assert_ptr_nonnull(strstr(f.hello, " budget_pages=10"));
	ck_assert_uint_eq(md_client_engine_id(c), 7);
	ck_assert_uint_eq(md_client_instance_id(c), 42);

	uint32_t slot, gen;
	ck_assert_int_eq(md_seq_step(c, 1, 3), 0);
	ck_assert_int_eq(md_page_open(c, 1, 0, 3, 0x210, &slot, &gen), 0);
	ck_assert_uint_eq(gen, 1);
	struct md_stats_rec r;
	ck_assert(fake_next(&f, &r));
	ck_assert_uint_eq(r.type, MD_REC_STEP);
	ck_assert_uint_eq(r.clock, 3);
	ck_assert(fake_next(&f, &r));
	ck_assert_uint_eq(r.type, MD_REC_PAGE_OPEN);
	ck_assert_uint_eq(r.slot, slot);
	ck_assert_uint_eq(r.gen, gen);
	ck_assert_uint_eq(r.u.page.n_tokens, 3);
	ck_assert_uint_eq(r.u.page.labels, 0x210);
	/* The page table was written first, with an even version. */
	const struct md_page_entry *pt = (void *)(f.eseg + f.eo.page_table);
	ck_assert_uint_eq(pt[slot].version % 2, 0);
	ck_assert_uint_gt(pt[slot].version, 0);
	ck_assert_uint_eq(pt[slot].state, MD_PAGE_LIVE);
	ck_assert_uint_eq(pt[slot].generation, gen);
	ck_assert_uint_eq(pt[slot].open_clock, 3);
	const uint64_t *clk = (void *)(f.eseg + f.eo.seq_clock);
	ck_assert_uint_eq(clk[1], 3);

	ck_assert_int_eq(md_page_grow(c, slot, 5, 0x33210), 0);
	ck_assert(fake_next(&f, &r));
	ck_assert_uint_eq(r.type, MD_REC_PAGE_GROW);
	ck_assert_int_eq(md_attn_page(c, slot, 0.5f, 0xffff), 0);
	ck_assert(fake_next(&f, &r));
	ck_assert_uint_eq(r.type, MD_REC_ATTN_PAGE);
	ck_assert(r.u.attn_page.mass == 0.5f);
	ck_assert_uint_eq(r.u.attn_page.refresh, 0x1f);   /* masked to live tokens */
	ck_assert_int_eq(md_relabel(c, 1, 1, 2, MD_REGION_TOOL_OUT), 0);
	ck_assert(fake_next(&f, &r));
	ck_assert_uint_eq(r.type, MD_REC_RELABEL);
	ck_assert_uint_eq(md_label_get(pt[slot].labels, 1), MD_REGION_TOOL_OUT);

	struct md_params_view pv;
	ck_assert_int_eq(md_client_params(c, &pv), 0);
	ck_assert(pv.tau == 0.25);
	ck_assert_uint_eq(pv.policy, MD_POLICY_MEMDECAY_NORM);
	ck_assert_uint_eq(pv.budget_engine_pages, 10);
	ck_assert(pv.alpha == 1.5 && pv.beta == 0.75 && pv.low_watermark == 0.5);
	for (unsigned k = 0; k < MD_REGIONS_MAX; k++) {
		ck_assert(pv.base[k] == 0.5 + k / 64.0);
		ck_assert(pv.lambda[k] == k / 128.0);
	}
	/* A block with one value out of range is refused whole; the last good
	 * copy stays, and the refusal is counted. */
	const double bad_lambda[] = { -1.0, NAN, INFINITY };
	uint64_t proto0 = md_client_proto_errors(c);
	for (unsigned i = 0; i < 3; i++) {
		md_seqlock_write_begin(&f.params->seq);
		f.params->lambda[MD_REGION_TOOL_OUT] = bad_lambda[i];
		f.params->tau = 0.5;
		md_seqlock_write_end(&f.params->seq);
		struct md_params_view bad;
		ck_assert_int_eq(md_client_params(c, &bad), MD_EPROTO);
		ck_assert(bad.tau == 0.25);
		ck_assert(bad.lambda[MD_REGION_TOOL_OUT] == MD_REGION_TOOL_OUT / 128.0);
	}
	const double bad_beta[] = { 1.0, -0.1, NAN };
	for (unsigned i = 0; i < 3; i++) {
		md_seqlock_write_begin(&f.params->seq);
		f.params->lambda[MD_REGION_TOOL_OUT] = 0.25;
		f.params->beta = bad_beta[i];
		md_seqlock_write_end(&f.params->seq);
		struct md_params_view bad;
		ck_assert_int_eq(md_client_params(c, &bad), MD_EPROTO);
		ck_assert(bad.beta == 0.75);
	}
	ck_assert_uint_eq(md_client_proto_errors(c), proto0 + 6);
	md_seqlock_write_begin(&f.params->seq);
	f.params->beta = 0.75;
	md_seqlock_write_end(&f.params->seq);
	ck_assert_int_eq(md_client_params(c, &pv), 0);
	ck_assert(pv.tau == 0.5 && pv.lambda[MD_REGION_TOOL_OUT] == 0.25);

	ck_assert_int_eq(md_page_free(c, slot, MD_FREE_FINISHED), 0);
	ck_assert(fake_next(&f, &r));
	ck_assert_uint_eq(r.type, MD_REC_PAGE_FREE);
	ck_assert_uint_eq(pt[slot].state, MD_PAGE_FREE);
	ck_assert_int_eq(md_page_free(c, slot, MD_FREE_FINISHED), MD_ESTALE);
	ck_assert_int_eq(md_attn_page(c, slot, 0.5f, 0), MD_ESTALE);
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

static const int malformed_expect[FK_MODE_COUNT] = {
	[FK_BAD_MAGIC] = MD_EPROTO, [FK_BAD_SIZE] = MD_EPROTO, [FK_BAD_MAJOR] = MD_EVERSION,
	[FK_ERR] = MD_EREFUSED, [FK_ERR_ABI] = MD_EVERSION, [FK_FEW_FDS] = MD_EPROTO,
	[FK_BAD_GEOMETRY] = MD_EPROTO, [FK_BAD_OFFSETS] = MD_EPROTO, [FK_NONPOW2] = MD_EPROTO,
	[FK_NO_SEAL] = MD_EPROTO, [FK_GARBAGE] = MD_EPROTO, [FK_BAD_KIND] = MD_EPROTO,
	[FK_OVERLAP] = MD_EPROTO,
};

START_TEST(test_malformed_daemon)
{
	enum fake_mode mode = (enum fake_mode)_i;
	struct fake f;
	struct md_client_config cfg;
	md_client *c = NULL;
	fake_start(&f, mode);
	cfg_for(&cfg, &f);
	int rc = md_client_create_attached(&cfg, &c);
	fake_join(&f);
	ck_assert_msg(rc == malformed_expect[mode], "mode %d: got %d (%s)", mode, rc,
		      md_strerror(rc));
	ck_assert_ptr_null(c);
	/* md_client_create fails open instead and keeps the message. */
	fake_stop(&f);
	fake_start(&f, mode);
	cfg_for(&cfg, &f);
	ck_assert_int_eq(md_client_create(&cfg, &c), 0);
	fake_join(&f);
	ck_assert(!md_client_attached(c));
	ck_assert_int_eq(md_client_attach_error(c), malformed_expect[mode]);
	ck_assert_str_ne(md_client_last_error(c), "");
	if (mode == FK_ERR)
		ck_assert_str_eq(md_client_last_error(c), "budget_pages=-3: must be positive");
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

START_TEST(test_no_daemon_fail_open)
{
	struct md_client_config cfg;
	md_client *c = NULL;
	cfg_for(&cfg, NULL);
	ck_assert_int_eq(md_client_create(&cfg, &c), 0);
	ck_assert(!md_client_attached(c));
	ck_assert_int_eq(md_client_attach_error(c), -ENOENT);
	uint32_t slot = 99, gen = 0;
	ck_assert_int_eq(md_page_open(c, 0, 0, 1, 0, &slot, &gen), MD_EDETACHED);
	ck_assert_uint_eq(slot, 0);
	ck_assert_uint_eq(gen, 1);
	ck_assert_int_eq(md_page_grow(c, slot, 4, 0x1111), MD_EDETACHED);
	ck_assert_int_eq(md_seq_step(c, 0, 4), MD_EDETACHED);
	ck_assert_uint_eq(md_seq_clock(c, 0), 4);
	ck_assert_int_eq(md_attn_page(c, slot, 1.0f, 1), MD_EDETACHED);
	struct md_evict ev[4];
	ck_assert_int_eq(md_poll_commands(c, ev, 4), MD_EDETACHED);
	ck_assert_int_eq(md_wait_commands(c, 1000), MD_EDETACHED);
	ck_assert_int_eq(md_client_check(c, 100), 0);
	struct md_params_view pv;
	ck_assert_int_eq(md_client_params(c, &pv), MD_EDETACHED);
	ck_assert_uint_eq(pv.pinned_mask & 1, 1);   /* system pinned by default */
	struct md_page_entry e;
	ck_assert_int_eq(md_page_info(c, slot, &e), 0);
	ck_assert_uint_eq(e.state, MD_PAGE_LIVE);
	ck_assert_uint_eq(e.n_tokens, 4);
	ck_assert_uint_eq(e.labels, 0x1111);
	ck_assert_uint_eq(md_client_live_pages(c), 1);
	ck_assert_int_eq(md_client_reattach(c), -ENOENT);
	md_client_destroy(c);
	ck_assert_int_eq(md_client_create_attached(&cfg, &c), -ENOENT);
}
END_TEST

START_TEST(test_bad_config)
{
	struct md_client_config cfg;
	md_client *c = (md_client *)1;
	cfg_for(&cfg, NULL);
	cfg.page_tokens = 17;
	ck_assert_int_eq(md_client_create(&cfg, &c), -EINVAL);
	cfg_for(&cfg, NULL);
	cfg.page_capacity = 0;
	ck_assert_int_eq(md_client_create(&cfg, &c), -EINVAL);
	cfg_for(&cfg, NULL);
	cfg.engine_name = "two words";
	ck_assert_int_eq(md_client_create(&cfg, &c), -EINVAL);
	cfg_for(&cfg, NULL);
	cfg.tp_rank = 2;
	cfg.tp_size = 2;
	ck_assert_int_eq(md_client_create(&cfg, &c), -EINVAL);
	cfg_for(&cfg, NULL);
	ck_assert_int_eq(md_client_create(&cfg, &c), 0);
	uint32_t s, g;
	ck_assert_int_eq(md_page_open(c, 4, 0, 1, 0, &s, &g), -EINVAL);   /* seq >= max_seqs */
	ck_assert_int_eq(md_page_open(c, 0, 0, 17, 0, &s, &g), -EINVAL);
	ck_assert_int_eq(md_page_free(c, 1000, 0), -EINVAL);
	md_client_destroy(c);
}
END_TEST

START_TEST(test_socket_resolution)
{
	struct md_client_config cfg;
	md_client *c;
	cfg_for(&cfg, NULL);
	cfg.socket_path = NULL;
	setenv("MEMDECAY_SOCKET", "/tmp/x/env.sock", 1);
	ck_assert_int_eq(md_client_create(&cfg, &c), 0);
	ck_assert_str_eq(md_client_socket_path(c), "/tmp/x/env.sock");
	md_client_destroy(c);
	unsetenv("MEMDECAY_SOCKET");
	setenv("XDG_RUNTIME_DIR", "/run/user/5", 1);
	ck_assert_int_eq(md_client_create(&cfg, &c), 0);
	ck_assert_str_eq(md_client_socket_path(c), "/run/user/5/memdecay/memdecayd.sock");
	md_client_destroy(c);
	unsetenv("XDG_RUNTIME_DIR");
	ck_assert_int_eq(md_client_create(&cfg, &c), 0);
	ck_assert_str_eq(md_client_socket_path(c), "/run/memdecay/memdecayd.sock");
	md_client_destroy(c);
}
END_TEST

START_TEST(test_commands)
{
	struct fake f;
	md_client *c = attach_ok(&f);
	uint32_t s0, s1, g0, g1;
	md_page_open(c, 0, 0, 16, 0, &s0, &g0);
	md_page_open(c, 0, 16, 16, 0, &s1, &g1);
	fake_cmd(&f, 0, s0, g0 + 1);      /* stale generation */
	fake_cmd(&f, 0, 1000, 1);         /* slot out of range */
	fake_cmd(&f, 0, s1, g1);          /* good */
	fake_cmd(&f, 0, s1, g1);          /* duplicate: would free twice */
	fake_cmd(&f, 3, s0, g0);          /* wrong sequence */
	/* a torn command: published tail, but the stamp is wrong */
	struct md_cmd *m = md_ring_reserve(&f.cmds);
	*m = (struct md_cmd){ .type = MD_CMD_EVICT, .seq = 0, .slot = s0, .gen = g0 };
	md_ring_publish(&f.cmds, m);
	m->pos ^= 0x55;
	struct md_evict ev[8];
	int n = md_poll_commands(c, ev, 8);
	ck_assert_int_eq(n, 1);
	ck_assert_uint_eq(ev[0].slot, s1);
	ck_assert_uint_eq(ev[0].gen, g1);
	ck_assert_uint_eq(ev[0].reason, MD_EVICT_ENGINE_BUDGET);
	ck_assert_uint_eq(ev[0].type, MD_CMD_EVICT);   /* 1.4: the command's type */
	struct md_client_counters cc;
	md_client_counters(c, &cc);
	ck_assert_uint_eq(cc.cmds_stale, 3);
	ck_assert_uint_eq(md_client_proto_errors(c), 2);
	ck_assert_uint_eq(f.ectrl->cmds_stale, 3);
	ck_assert_uint_eq(f.ectrl->cmd_head, 6);   /* all consumed */
	ck_assert_int_eq(md_page_free(c, s1, MD_FREE_EVICTED), 0);
	md_client_counters(c, &cc);
	ck_assert_uint_eq(cc.cmds_applied, 1);
	/* The slot comes back with a new generation: the old command is stale. */
	uint32_t s2, g2;
	md_page_open(c, 0, 32, 1, 0, &s2, &g2);
	ck_assert_uint_eq(s2, s1);
	ck_assert_uint_eq(g2, g1 + 1);
	fake_cmd(&f, 0, s1, g1);
	ck_assert_int_eq(md_poll_commands(c, ev, 8), 0);
	/* A tail beyond capacity is a broken daemon: detach, fail open. */
	f.dctrl->cmd_tail += 1000;
	ck_assert_int_eq(md_poll_commands(c, ev, 8), MD_EPROTO);
	ck_assert(!md_client_attached(c));
	ck_assert_int_eq(md_page_free(c, s2, MD_FREE_FINISHED), MD_EDETACHED);
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

START_TEST(test_overload)
{
	struct fake f;
	md_client *c = attach_ok(&f);
	uint32_t s, g;
	md_page_open(c, 0, 0, 16, 0, &s, &g);
	int full = 0;
	for (int i = 0; i < 200; i++)
		if (md_attn_page(c, s, 0.1f, 0) == MD_EFULL)
			full++;
	/* Attention stops at 3/4 of the ring: the rest is kept for lifecycle. */
	ck_assert_int_eq(full, 200 - (64 - 16 - 1));
	struct md_client_counters cc;
	md_client_counters(c, &cc);
	ck_assert_uint_eq(cc.attn_dropped, (uint64_t)full);
	ck_assert_uint_eq(f.ectrl->attn_dropped, (uint64_t)full);
	for (int i = 0; i < 16; i++)
		ck_assert_int_eq(md_seq_step(c, 2, 1), 0);   /* the lifecycle reserve */
	ck_assert_uint_eq(f.ectrl->lifecycle_dropped, 0);
	/* Lifecycle on a full ring: not lost, the page table has it. */
	uint64_t rr = f.ectrl->resync_request;
	uint32_t s2, g2;
	ck_assert_int_eq(md_page_open(c, 1, 0, 2, 0x55, &s2, &g2), 0);
	ck_assert_uint_eq(f.ectrl->lifecycle_dropped, 1);
	ck_assert_uint_gt(f.ectrl->resync_request, rr);
	const struct md_page_entry *pt = (void *)(f.eseg + f.eo.page_table);
	ck_assert_uint_eq(pt[s2].state, MD_PAGE_LIVE);
	ck_assert_uint_eq(pt[s2].labels, 0x55);
	ck_assert_uint_eq(pt[s2].seq, 1);
	/* 16 masses are two records, all or nothing. */
	struct md_stats_rec r;
	while (fake_next(&f, &r))
		;
	float mass[16];
	for (int i = 0; i < 16; i++)
		mass[i] = 0.01f * (float)i;
	ck_assert_int_eq(md_attn_tokens(c, s, 0, 16, mass), 0);
	ck_assert(fake_next(&f, &r));
	ck_assert_uint_eq(r.type, MD_REC_ATTN_TOKENS);
	ck_assert_uint_eq(r.count, 8);
	ck_assert(fake_next(&f, &r));
	ck_assert_uint_eq(r.token0, 8);
	ck_assert(r.u.attn_tokens.mass[7] == mass[15]);
	mass[3] = -1;
	ck_assert_int_eq(md_attn_tokens(c, s, 0, 16, mass), -EINVAL);
	ck_assert_int_eq(md_attn_page(c, s, 0.0f / 0.0f, 0), -EINVAL);
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

static int readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return poll(&p, 1, 0) == 1;
}

START_TEST(test_doorbell)
{
	struct fake f;
	md_client *c = attach_ok(&f);
	uint32_t s, g;
	md_page_open(c, 0, 0, 1, 0, &s, &g);
	ck_assert(!readable(f.db_d));        /* daemon awake: no syscall */
	f.dctrl->sleeping = 1;
	md_attn_page(c, s, 0.1f, 0);
	ck_assert(readable(f.db_d));
	uint64_t v;
	ck_assert_int_eq(read(f.db_d, &v, 8), 8);
	md_attn_page(c, s, 0.1f, 0);         /* not consumed yet: no second ring */
	ck_assert(!readable(f.db_d));
	struct md_stats_rec r;
	while (fake_next(&f, &r))
		;
	md_attn_page(c, s, 0.1f, 0);         /* consumed and asleep again: ring */
	ck_assert(readable(f.db_d));
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

/* One step in one crossing: STEP records first, then one ATTN_PAGE per live
 * slot, with the clocks after the steps; one doorbell for the batch; a bad
 * entry anywhere changes nothing; a full ring drops the attention whole. */
START_TEST(test_publish_batch)
{
	struct fake f;
	md_client *c = attach_ok(&f);
	uint32_t s[3], g;
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(md_page_open(c, i == 2 ? 2 : 0, (uint64_t)i * 16, 5, 0, &s[i], &g), 0);
	uint32_t gone;
	ck_assert_int_eq(md_page_open(c, 0, 48, 1, 0, &gone, &g), 0);
	ck_assert_int_eq(md_page_free(c, gone, MD_FREE_FINISHED), 0);
	struct md_stats_rec r;
	while (fake_next(&f, &r))
		;
	const uint32_t q[2] = { 0, 2 }, n[2] = { 7, 1 };
	const uint32_t slots[4] = { s[0], gone, s[2], s[1] };
	const float mass[4] = { 0.5f, 0.9f, 0.25f, 0.125f };
	const uint16_t refresh[4] = { 0xffff, 1, 0x3, 0 };

	/* Rejected whole: a sequence, a slot, a mass out of range. */
	const uint32_t bad_q[2] = { 0, 4 }, bad_slot[1] = { 32 };
	const float nan_mass[1] = { 0.0f / 0.0f };
	struct md_batch_result res;
	ck_assert_int_eq(md_publish_batch(c, bad_q, n, 2, slots, mass, refresh, 4, &res), -EINVAL);
	ck_assert_int_eq(md_publish_batch(c, q, n, 2, bad_slot, mass, NULL, 1, &res), -EINVAL);
	ck_assert_int_eq(md_publish_batch(c, q, n, 2, slots, nan_mass, NULL, 1, &res), -EINVAL);
	ck_assert_int_eq(md_publish_batch(c, q, n, 2, NULL, mass, NULL, 1, &res), -EINVAL);
	ck_assert_uint_eq(md_seq_clock(c, 0), 0);
	ck_assert_uint_eq(md_seq_clock(c, 2), 0);
	ck_assert_int_eq(md_ring_available(&f.stats), 0);

	f.dctrl->sleeping = 1;
	ck_assert_int_eq(md_publish_batch(c, q, n, 2, slots, mass, refresh, 4, &res), 0);
	ck_assert_uint_eq(res.steps, 2);
	ck_assert_uint_eq(res.published, 3);
	ck_assert_uint_eq(res.skipped, 1);
	ck_assert_uint_eq(res.dropped, 0);
	uint64_t v;
	ck_assert(readable(f.db_d));
	ck_assert_int_eq(read(f.db_d, &v, 8), 8);
	ck_assert_uint_eq(v, 1);                       /* one doorbell for 5 records */
	const uint64_t *clk = (void *)(f.eseg + f.eo.seq_clock);
	ck_assert_uint_eq(clk[0], 7);
	ck_assert_uint_eq(clk[2], 1);
	ck_assert(fake_next(&f, &r));
	ck_assert_uint_eq(r.type, MD_REC_STEP);
	ck_assert_uint_eq(r.seq, 0);
	ck_assert_uint_eq(r.clock, 7);
	ck_assert(fake_next(&f, &r));
	ck_assert_uint_eq(r.type, MD_REC_STEP);
	ck_assert_uint_eq(r.seq, 2);
	ck_assert_uint_eq(r.clock, 1);
	const uint32_t want_slot[3] = { s[0], s[2], s[1] }, want_seq[3] = { 0, 2, 0 };
	const float want_mass[3] = { 0.5f, 0.25f, 0.125f };
	const uint16_t want_refresh[3] = { 0x1f, 0x3, 0 };   /* masked to 5 live tokens */
	for (int i = 0; i < 3; i++) {
		ck_assert(fake_next(&f, &r));
		ck_assert_uint_eq(r.type, MD_REC_ATTN_PAGE);
		ck_assert_uint_eq(r.slot, want_slot[i]);
		ck_assert_uint_eq(r.seq, want_seq[i]);
		ck_assert_uint_eq(r.gen, 1);
		ck_assert_uint_eq(r.clock, want_seq[i] == 0 ? 7 : 1);
		ck_assert(r.u.attn_page.mass == want_mass[i]);
		ck_assert_uint_eq(r.u.attn_page.refresh, want_refresh[i]);
	}
	ck_assert(!fake_next(&f, &r));

	/* Near the attention limit: the steps go in, the pages are dropped whole. */
	int filled = 0;
	while (md_attn_page(c, s[0], 0.1f, 0) == 0)
		filled++;
	ck_assert_int_gt(filled, 0);
	struct md_client_counters before, after;
	md_client_counters(c, &before);
	ck_assert_int_eq(md_publish_batch(c, q, n, 1, slots, mass, refresh, 4, &res), MD_EFULL);
	ck_assert_uint_eq(res.steps, 1);
	ck_assert_uint_eq(res.published, 0);
	ck_assert_uint_eq(res.dropped, 3);
	md_client_counters(c, &after);
	ck_assert_uint_eq(after.attn_dropped - before.attn_dropped, 3);
	ck_assert_uint_eq(md_seq_clock(c, 0), 14);
	int steps = 0, attn = 0;
	while (fake_next(&f, &r)) {
		steps += r.type == MD_REC_STEP;
		attn += r.type == MD_REC_ATTN_PAGE;
	}
	ck_assert_int_eq(steps, 1);
	ck_assert_int_eq(attn, filled);
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

START_TEST(test_wait_commands)
{
	struct fake f;
	md_client *c = attach_ok(&f);
	uint64_t t0 = md_now_ns();
	ck_assert_int_eq(md_wait_commands(c, 50), 0);
	long ms = (long)((md_now_ns() - t0) / 1000000u);
	ck_assert_int_ge(ms, 45);
	ck_assert_uint_eq(f.ectrl->sleeping, 0);
	uint32_t s, g;
	md_page_open(c, 0, 0, 1, 0, &s, &g);
	fake_cmd(&f, 0, s, g);
	ck_assert_int_eq(md_wait_commands(c, 5000), 1);   /* re-check before sleeping */
	uint64_t one = 1;
	ck_assert_int_eq(write(f.db_e, &one, 8), 8);
	struct md_evict ev[2];
	ck_assert_int_eq(md_poll_commands(c, ev, 2), 1);
	ck_assert_int_eq(md_wait_commands(c, 5000), 0);   /* doorbell wakes it */
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

START_TEST(test_liveness)
{
	struct fake f;
	md_client *c = attach_ok(&f);
	ck_assert_int_eq(md_client_check(c, 0), 1);
	ck_assert_uint_gt(f.ectrl->heartbeat_ns, 0);
	f.dctrl->shutting_down = 1;
	ck_assert_int_eq(md_client_check(c, 0), 0);
	ck_assert(!md_client_attached(c));
	md_client_destroy(c);
	fake_stop(&f);

	c = attach_ok(&f);
	usleep(30000);
	ck_assert_int_eq(md_client_check(c, 1000), 1);
	ck_assert_int_eq(md_client_check(c, 10), 0);   /* heartbeat older than 10 ms */
	ck_assert_str_eq(md_client_last_error(c), "daemon heartbeat stale");
	md_client_destroy(c);
	fake_stop(&f);

	c = attach_ok(&f);
	close(f.conn);
	f.conn = -1;
	usleep(120000);                                /* socket peek every 100 ms */
	ck_assert_int_eq(md_client_check(c, 0), 0);
	ck_assert_str_eq(md_client_last_error(c), "daemon closed the control connection");
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

START_TEST(test_reattach_republishes)
{
	struct fake f;
	md_client *c = attach_ok(&f);
	uint32_t s0, s1, s2, g;
	md_page_open(c, 0, 0, 16, 0x1, &s0, &g);
	md_seq_step(c, 0, 16);
	char dir[64];
	snprintf(dir, sizeof(dir), "%s", f.dir);
	fake_kill(&f);
	md_client_detach(c);
	/* While detached: the mirror keeps changing. */
	ck_assert_int_eq(md_page_open(c, 0, 16, 3, 0x2, &s1, &g), MD_EDETACHED);
	ck_assert_int_eq(md_page_open(c, 2, 0, 1, 0x3, &s2, &g), MD_EDETACHED);
	ck_assert_int_eq(md_page_free(c, s2, MD_FREE_FINISHED), MD_EDETACHED);
	ck_assert_int_eq(md_seq_step(c, 0, 3), MD_EDETACHED);
	fake_start_at(&f, &client_fake, FK_OK, 0, dir);
	ck_assert_int_eq(md_client_reattach(c), 0);
	fake_join(&f);
	ck_assert(md_client_attached(c));
	const struct md_page_entry *pt = (void *)(f.eseg + f.eo.page_table);
	ck_assert_uint_eq(pt[s0].state, MD_PAGE_LIVE);
	ck_assert_uint_eq(pt[s0].labels, 0x1);
	ck_assert_uint_eq(pt[s1].state, MD_PAGE_LIVE);
	ck_assert_uint_eq(pt[s1].n_tokens, 3);
	ck_assert_uint_eq(pt[s1].first_pos, 16);
	ck_assert_uint_eq(pt[s2].state, MD_PAGE_FREE);
	ck_assert_uint_eq(pt[s2].version % 2, 0);
	const uint64_t *clk = (void *)(f.eseg + f.eo.seq_clock);
	ck_assert_uint_eq(clk[0], 19);
	ck_assert_uint_ge(f.ectrl->resync_request, 1);
	struct md_client_counters cc;
	md_client_counters(c, &cc);
	ck_assert_uint_eq(cc.reattaches, 1);
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

START_TEST(test_seq_end)
{
	struct fake f;
	md_client *c = attach_ok(&f);
	uint32_t s[3], g;
	for (int i = 0; i < 3; i++)
		md_page_open(c, 1, (uint64_t)i * 16, 16, 0, &s[i], &g);
	md_seq_step(c, 1, 48);
	ck_assert_uint_eq(md_client_live_pages(c), 3);
	ck_assert_int_eq(md_seq_end(c, 1), 0);
	ck_assert_uint_eq(md_client_live_pages(c), 0);
	ck_assert_uint_eq(md_seq_clock(c, 1), 0);
	int frees = 0, ends = 0;
	struct md_stats_rec r;
	while (fake_next(&f, &r)) {
		frees += r.type == MD_REC_PAGE_FREE;
		if (r.type == MD_REC_SEQ_END) {
			ends++;
			ck_assert_int_eq(frees, 3);   /* pages first */
		}
	}
	ck_assert_int_eq(ends, 1);
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

START_TEST(test_no_allocation_on_hot_path)
{
	struct fake f;
	f.stats_cap = 64;
	md_client *c = attach_ok(&f);
	struct md_params_view pv;
	struct md_evict ev[8];
	uint32_t s, g;
	/* No Check assertion inside the loop: Check itself allocates. */
	int bad = 0, records = 0;
	long before = g_allocs;
	for (int i = 0; i < 1000; i++) {
		bad |= md_page_open(c, 0, (uint64_t)i * 16, 1, 0, &s, &g) != 0;
		bad |= md_page_grow(c, s, 2, 0) != 0;
		bad |= md_seq_step(c, 0, 1) != 0;
		bad |= md_attn_page(c, s, 0.5f, 1) != 0;
		float m[2] = { 0.1f, 0.2f };
		bad |= md_attn_tokens(c, s, 0, 2, m) != 0;
		uint32_t bq = 0, bn = 1;
		bad |= md_publish_batch(c, &bq, &bn, 1, &s, m, NULL, 1, NULL) != 0;
		struct md_cmd *cm = md_ring_reserve(&f.cmds);
		*cm = (struct md_cmd){ .type = MD_CMD_EVICT, .seq = 0, .slot = s, .gen = g };
		md_ring_publish(&f.cmds, cm);
		bad |= md_poll_commands(c, ev, 8) != 1;
		bad |= md_page_free(c, s, MD_FREE_EVICTED) != 0;
		bad |= md_client_params(c, &pv) != 0;
		bad |= md_client_check(c, 0) != 1;
		struct md_stats_rec r;
		while (md_ring_available(&f.stats) > 0) {
			bad |= md_ring_copy_next(&f.stats, &r) != MD_RING_OK;
			records++;
		}
		md_ring_release(&f.stats);
	}
	long allocs = g_allocs - before;
	ck_assert_int_eq(bad, 0);
	ck_assert_int_eq(records, 8000);
	ck_assert_int_eq(allocs, 0);
	struct md_client_counters cc;
	md_client_counters(c, &cc);
	ck_assert_uint_eq(cc.cmds_applied, 1000);
	ck_assert_uint_eq(cc.attn_dropped, 0);
	md_client_destroy(c);
	fake_stop(&f);
}
END_TEST

START_TEST(test_slot_exhaustion)
{
	struct md_client_config cfg;
	md_client *c;
	cfg_for(&cfg, NULL);
	cfg.page_capacity = 4;
	ck_assert_int_eq(md_client_create(&cfg, &c), 0);
	uint32_t s, g;
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(md_page_open(c, 0, (uint64_t)i * 16, 1, 0, &s, &g), MD_EDETACHED);
	ck_assert_int_eq(md_page_open(c, 0, 64, 1, 0, &s, &g), MD_ENOSLOT);
	ck_assert_int_eq(md_page_free(c, 2, MD_FREE_FINISHED), MD_EDETACHED);
	ck_assert_int_eq(md_page_open(c, 0, 64, 1, 0, &s, &g), MD_EDETACHED);
	ck_assert_uint_eq(s, 2);
	ck_assert_uint_eq(g, 2);
	ck_assert_str_ne(md_strerror(MD_ENOSLOT), "unknown error");
	md_client_destroy(c);
}
END_TEST

/* ---- md_control against a control socket that answers as told ---- */
struct ctl_fake {
	char path[108];
	int lfd;
	const char *reply;      /* written after the request line; NULL: never answer */
	size_t reply_len;
	char got[256];          /* the request line received */
	pthread_t th;
};

static void *ctl_fake_run(void *arg)
{
	struct ctl_fake *f = arg;
	int fd = accept(f->lfd, NULL, NULL);
	if (fd < 0)
		return NULL;
	size_t have = 0;
	while (have < sizeof(f->got) - 1 && !memchr(f->got, '\n', have)) {
		ssize_t n = read(fd, f->got + have, sizeof(f->got) - 1 - have);
		if (n <= 0)
			break;
		have += (size_t)n;
	}
	if (f->reply) {
		ssize_t w = write(fd, f->reply, f->reply_len);
		(void)w;
	} else {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		poll(&p, 1, 2000);     /* stall until the client gives up and closes */
	}
	close(fd);
	return NULL;
}

static void ctl_fake_start(struct ctl_fake *f, const char *reply, size_t len)
{
	memset(f, 0, sizeof(*f));
	snprintf(f->path, sizeof(f->path), "/tmp/md-check-ctl-%d-%ld.sock", (int)getpid(),
		 (long)md_now_ns());
	f->reply = reply;
	f->reply_len = len;
	f->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->path);
	ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(f->lfd, 1), 0);
	ck_assert_int_eq(pthread_create(&f->th, NULL, ctl_fake_run, f), 0);
}

static void ctl_fake_stop(struct ctl_fake *f)
{
	pthread_join(f->th, NULL);
	close(f->lfd);
	unlink(f->path);
}

static int ctl_with(const char *reply, size_t len, const char *req, char *out, size_t cap,
		    int timeout_ms, char *got)
{
	struct ctl_fake f;
	ctl_fake_start(&f, reply, len);
	int rc = md_control(f.path, req, out, cap, timeout_ms);
	ctl_fake_stop(&f);
	if (got)
		snprintf(got, 256, "%s", f.got);
	return rc;
}

START_TEST(test_control_request)
{
	char out[64], got[256];
	static const char ok[] = "OK 5\nhello";
	ck_assert_int_eq(ctl_with(ok, sizeof(ok) - 1, "policy --json", out, sizeof(out), 1000, got), 5);
	ck_assert_str_eq(out, "hello");
	ck_assert_str_eq(got, "policy --json\n");           /* one line, as sent */
	static const char err[] = "ERR unknown policy 'x' (memdecay|h2o)\n";
	ck_assert_int_eq(ctl_with(err, sizeof(err) - 1, "policy x", out, sizeof(out), 1000, NULL),
			 MD_EREFUSED);
	ck_assert_str_eq(out, "unknown policy 'x' (memdecay|h2o)");
	/* a body over the caller's cap, a reply cut short, a header that is no reply */
	char big[200];
	int n = snprintf(big, sizeof(big), "OK 150\n");
	memset(big + n, 'a', 150);
	ck_assert_int_eq(ctl_with(big, (size_t)n + 150, "get", out, sizeof(out), 1000, NULL),
			 -EMSGSIZE);
	static const char cut[] = "OK 10\nabc";
	ck_assert_int_eq(ctl_with(cut, sizeof(cut) - 1, "get", out, sizeof(out), 1000, NULL),
			 MD_EPROTO);
	static const char junk[] = "HELLO there\n";
	ck_assert_int_eq(ctl_with(junk, sizeof(junk) - 1, "get", out, sizeof(out), 1000, NULL),
			 MD_EPROTO);
	/* a daemon that never answers costs the timeout, not more */
	uint64_t t0 = md_now_ns();
	ck_assert_int_eq(ctl_with(NULL, 0, "get", out, sizeof(out), 100, NULL), -ETIMEDOUT);
	ck_assert_uint_lt(md_now_ns() - t0, UINT64_C(1500000000));
	/* what the caller got wrong, and no daemon */
	ck_assert_int_eq(md_control(NULL, "a\nb", out, sizeof(out), 100), -EINVAL);
	ck_assert_int_eq(md_control(NULL, "", out, sizeof(out), 100), -EINVAL);
	ck_assert_int_eq(md_control(NULL, "get", out, 1, 100), -EINVAL);
	ck_assert_int_eq(md_control(NULL, "get", out, sizeof(out), 0), -EINVAL);
	ck_assert_int_eq(md_control("/nonexistent/memdecay.sock", "get", out, sizeof(out), 100),
			 -ENOENT);
}
END_TEST

static Suite *client_suite(void)
{
	Suite *s = suite_create("client");
	TCase *tc = tcase_create("client");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_attach_and_records);
	tcase_add_loop_test(tc, test_malformed_daemon, FK_BAD_MAGIC, FK_MODE_COUNT);
	tcase_add_test(tc, test_no_daemon_fail_open);
	tcase_add_test(tc, test_bad_config);
	tcase_add_test(tc, test_socket_resolution);
	tcase_add_test(tc, test_commands);
	tcase_add_test(tc, test_overload);
	tcase_add_test(tc, test_doorbell);
	tcase_add_test(tc, test_publish_batch);
	tcase_add_test(tc, test_wait_commands);
	tcase_add_test(tc, test_liveness);
	tcase_add_test(tc, test_reattach_republishes);
	tcase_add_test(tc, test_seq_end);
	tcase_add_test(tc, test_no_allocation_on_hot_path);
	tcase_add_test(tc, test_slot_exhaustion);
	tcase_add_test(tc, test_control_request);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return md_test_main(client_suite());
}
