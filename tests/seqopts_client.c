/*
 * seqopts_client.c — per-sequence options end to end through libmemdecay
 * (md_seq_set_options and the daemon's seq_protect), for daemon_suite.sh's
 * `seqopts` scenario: sequence 0 gets its own budget of 16 tokens and is
 * evicted to it while sequence 1 (the engine's: none) is not; sequence 2 gets
 * h2o with 64 tokens, and the library's protected pages and floor come from
 * the window the daemon publishes (floor(0.5 x 16 pages) = 8); md_seq_end
 * gives sequence 0 the engine's options back.  Sequence 2 is also retained
 * with a session tag (ABI 1.3), which `sessions --json` must show, and
 * sequence 1 running with none.  Prints one line,
 * "ok evicted=A/B protected=K floor=F", or the first failure (exit 1).
 *
 *   seqopts_client SOCK
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "memdecay.h"

#define P 4u

static uint32_t evicted[4];

static int apply(void *ctx, const struct md_evict *ev)
{
	md_client *c = ctx;
	if (ev->seq < 4)
		evicted[ev->seq]++;
	return md_page_free(c, ev->slot, MD_FREE_EVICTED) == 0 ? 1 : 0;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { 0, (long)ms * 1000000L };
	nanosleep(&ts, NULL);
}

/* applies commands until cond() holds or ms pass; 0 when it held */
static int until(md_client *c, int (*cond)(md_client *), unsigned ms)
{
	for (unsigned i = 0; i < ms; i++) {
		md_client_check(c, 5000);
		md_apply_commands(c, apply, c);
		if (cond && cond(c))
			return 0;
		sleep_ms(1);
	}
	return cond ? -1 : 0;
}

static int seq0_done(md_client *c) { (void)c; return evicted[0] >= 4; }
static int window_up(md_client *c) { return md_seq_protected_pages(c, 2) == 8; }

static int fail(const char *what)
{
	printf("FAIL %s (evicted %u/%u/%u)\n", what, evicted[0], evicted[1], evicted[2]);
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: seqopts_client SOCK\n");
		return 2;
	}
	struct md_client_config cfg;
	md_client_config_init(&cfg);
	cfg.socket_path = argv[1];
	cfg.engine_name = "seqopts-lib";
	cfg.page_tokens = P;
	cfg.page_capacity = 64;
	cfg.max_seqs = 4;
	md_client *c;
	if (md_client_create_attached(&cfg, &c) != 0)
		return fail("attach");
	struct md_seq_options o;
	md_seq_options_init(&o);
	o.budget_sequence_tokens = 16;
	if (md_seq_set_options(c, 0, &o) != 0)
		return fail("md_seq_set_options(0)");
	md_seq_options_init(&o);
	o.policy = MD_POLICY_H2O;
	o.budget_sequence_tokens = 64;
	o.state = MD_SEQ_RETAINED;
	static const char id[] = "agent session 42";
	md_seq_session_tag(id, sizeof(id) - 1, o.session);   /* "agent?se" */
	if (md_seq_set_options(c, 2, &o) != 0)
		return fail("md_seq_set_options(2)");
	uint32_t slot, gen;
	for (uint32_t i = 0; i < 8; i++)
		for (uint32_t q = 0; q < 2; q++)
			if (md_page_open(c, q, P * i, P, 0x2222u, &slot, &gen) != 0)
				return fail("md_page_open");
	if (until(c, seq0_done, 5000))
		return fail("sequence 0 not evicted to its own budget");
	until(c, NULL, 200);
	if (evicted[0] != 4 || evicted[1] != 0)
		return fail("evictions outside sequence 0's budget");
	if (md_seq_live_tokens(c, 0) != 16 || md_seq_budget_tokens(c, 0) != 16)
		return fail("sequence 0's tokens or budget");
	for (uint32_t i = 0; i < 2; i++)
		if (md_page_open(c, 2, P * i, P, 0x2222u, &slot, &gen) != 0)
			return fail("md_page_open(2)");
	if (until(c, window_up, 5000))
		return fail("h2o's window not published");
	uint64_t floor = md_seq_floor(c, 2);
	if (floor != 2 * P) /* both pages are within the window of 8 */
		return fail("floor of sequence 2");
	/* the daemon took the session: the record was ingested before the
	 * window it published for the same sequence */
	static char reply[16384];
	if (md_control(argv[1], "sessions --json --engine seqopts-lib", reply, sizeof(reply),
		       5000) < 0)
		return fail("sessions --json");
	const char *s2 = strstr(reply, "\"seq\":2,"), *s1 = strstr(reply, "\"seq\":1,");
	if (!s2 || !strstr(s2, "\"state\":\"retained\",\"session\":\"agent?se\","))
		return fail("sequence 2 not retained as agent?se in sessions");
	if (!s1 || !strstr(s1, "\"state\":\"running\",\"session\":null,"))
		return fail("sequence 1 not running without a tag in sessions");
	if (md_seq_end(c, 0) != 0)
		return fail("md_seq_end");
	if (md_seq_get_options(c, 0, &o) != 0 || o.budget_sequence_tokens != -1 ||
	    o.policy != MD_SEQ_ENGINE_U32)
		return fail("options after md_seq_end");
	for (uint32_t i = 0; i < 8; i++)
		if (md_page_open(c, 0, P * i, P, 0x2222u, &slot, &gen) != 0)
			return fail("md_page_open(0) again");
	until(c, NULL, 300);
	if (evicted[0] != 4)
		return fail("sequence 0 evicted after its end reset its budget");
	printf("ok evicted=%u/%u protected=%u floor=%llu\n", evicted[0], evicted[1],
	       md_seq_protected_pages(c, 2), (unsigned long long)floor);
	md_client_destroy(c);
	return 0;
}
