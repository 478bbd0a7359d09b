/*
 * nap_engine.c — an engine that steps like a real one, for the daemon's nap
 * (daemon.nap_ms, docs/architecture.md "The main loop"): attached through
 * libmemdecay to the daemon on SOCK, it opens PAGES pages, then publishes
 * STEPS steps (md_publish_batch: one STEP and PAGES ATTN_PAGE records) every
 * PERIOD_US, then stays attached, beating, for HOLD_MS.  It reads the
 * daemon's `sleeping` flag (the flag libmemdecay reads before ringing) just
 * before each publish and after the last one, and prints one line:
 *
 *   published=N attn_dropped=N lifecycle_dropped=N flag_up_steps=N asleep_after_ms=X
 *
 * published: records put in the stats ring; flag_up_steps: steps published
 * while the daemon's flag was up (each of those rings the doorbell);
 * asleep_after_ms: time from the last publish until the flag went up
 * (-1: not within HOLD_MS).  Then it stays attached, beating, until SIGTERM
 * (at most 60 s), so that daemon_suite.sh's `nap` scenario can compare these
 * with the daemon's `stats --json`.  On SIGUSR1 meanwhile it prints the page
 * budget its parameter block holds: budget_engine_pages=N.
 *
 *   nap_engine SOCK STEPS PERIOD_US PAGES HOLD_MS [WEIGHT [NAME]]
 *
 * PAGES 0 attaches holding nothing (and publishes no step); WEIGHT is the
 * HELLO weight (default 1), NAME the engine name (default nap-engine).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "memdecay.h"
#include "client_internal.h"

static void sleep_until(uint64_t t_ns)
{
	struct timespec ts = { .tv_sec = (time_t)(t_ns / 1000000000ull),
			       .tv_nsec = (long)(t_ns % 1000000000ull) };
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0)
		;
}

static volatile sig_atomic_t stop;
static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static volatile sig_atomic_t report;
static void on_usr1(int sig)
{
	(void)sig;
	report = 1;
}

static uint32_t daemon_flag(const md_client *c)
{
	return md_load_relaxed(&c->a.dctrl->sleeping);
}

int main(int argc, char **argv)
{
	if (argc < 6 || argc > 8) {
		fprintf(stderr, "usage: nap_engine SOCK STEPS PERIOD_US PAGES HOLD_MS [WEIGHT [NAME]]\n");
		return 2;
	}
	uint32_t steps = (uint32_t)strtoul(argv[2], NULL, 10);
	uint64_t period_ns = strtoull(argv[3], NULL, 10) * 1000ull;
	uint32_t pages = (uint32_t)strtoul(argv[4], NULL, 10);
	uint64_t hold_ns = strtoull(argv[5], NULL, 10) * 1000000ull;
	if (pages > 4096) {
		fprintf(stderr, "nap_engine: PAGES must be 0..4096\n");
		return 2;
	}

	struct md_client_config cfg;
	md_client_config_init(&cfg);
	cfg.socket_path = argv[1];
	cfg.engine_name = argc > 7 ? argv[7] : "nap-engine";
	cfg.weight = argc > 6 ? strtod(argv[6], NULL) : 0.0;
	cfg.page_capacity = pages ? pages : 1;
	cfg.max_seqs = 1;
	cfg.budget_engine_pages = 0;
	cfg.budget_sequence_tokens = 0;
	md_client *c = NULL;
	int rc = md_client_create_attached(&cfg, &c);
	if (rc) {
		fprintf(stderr, "nap_engine: attach failed: %s\n", md_strerror(rc));
		return 1;
	}
	uint64_t published = 0;
	uint32_t *slots = calloc(pages ? pages : 1, sizeof(*slots));
	float *mass = calloc(pages ? pages : 1, sizeof(*mass));
	uint16_t *refresh = calloc(pages ? pages : 1, sizeof(*refresh));
	if (!slots || !mass || !refresh)
		return 1;
	uint64_t labels = 0; /* region 0 for every token */
	for (uint32_t i = 0; i < pages; i++) {
		uint32_t gen;
		rc = md_page_open(c, 0, 16ull * i, 16, labels, &slots[i], &gen);
		if (rc) {
			fprintf(stderr, "nap_engine: md_page_open: %s\n", md_strerror(rc));
			return 1;
		}
		mass[i] = 1.0f / (float)pages;
		refresh[i] = 1;
		published++;
	}

	uint32_t seq = 0, tok = 1, flag_up = 0;
	uint64_t next = md_now_ns() + period_ns;
	for (uint32_t s = 0; pages && s < steps; s++) {
		if (daemon_flag(c))
			flag_up++;
		struct md_batch_result res;
		rc = md_publish_batch(c, &seq, &tok, 1, slots, mass, refresh, pages, &res);
		if (rc) {
			fprintf(stderr, "nap_engine: md_publish_batch: %s\n", md_strerror(rc));
			return 1;
		}
		published += res.steps + res.published;
		if (!md_client_check(c, 3000)) {
			fprintf(stderr, "nap_engine: detached at step %u: %s\n", s,
				md_client_last_error(c));
			return 1;
		}
		sleep_until(next);
		next += period_ns;
	}
	/* Steps are over: when does the daemon put its flag up? */
	uint64_t last = md_now_ns(), asleep_ns = 0;
	int asleep = 0;
	while (md_now_ns() - last < hold_ns) {
		if (!asleep && daemon_flag(c)) {
			asleep = 1;
			asleep_ns = md_now_ns() - last;
		}
		md_client_check(c, 3000);
		struct timespec ts = { 0, 200000 }; /* 0.2 ms */
		nanosleep(&ts, NULL);
	}
	struct md_client_counters ctr;
	md_client_counters(c, &ctr);
	printf("published=%llu attn_dropped=%llu lifecycle_dropped=%llu flag_up_steps=%u "
	       "asleep_after_ms=%.1f\n",
	       (unsigned long long)published, (unsigned long long)ctr.attn_dropped,
	       (unsigned long long)ctr.lifecycle_dropped, flag_up,
	       asleep ? (double)asleep_ns / 1e6 : -1.0);
	fflush(stdout);
	signal(SIGTERM, on_term);
	signal(SIGUSR1, on_usr1);
	uint64_t t0 = md_now_ns();
	while (!stop && md_now_ns() - t0 < 60000000000ull) {
		md_client_check(c, 3000);
		struct timespec ts = { 0, 20000000 }; /* 20 ms */
		nanosleep(&ts, NULL);
		if (report) { /* the page budget its parameter block holds now */
			report = 0;
			struct md_params_view pv;
			memset(&pv, 0, sizeof(pv));
			(void)md_client_params(c, &pv);
			printf("budget_engine_pages=%llu\n",
			       (unsigned long long)pv.budget_engine_pages);
			fflush(stdout);
		}
	}
	md_client_destroy(c);
	free(slots);
	free(mass);
	free(refresh);
	return 0;
}
