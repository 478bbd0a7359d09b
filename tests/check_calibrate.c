/*
 * check_calibrate.c — the half-life estimator recovers known half-lives from
 * synthetic censored lifetimes within its interval; the tracker turns page
 * histories into the right events and censorings; a journal replays to the
 * same statistics; the journal's bounds hold.
 */
#include <check.h>
#include "test_util.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calib_report.h"
#include "calibrate.h"
#include "journal.h"

static uint64_t rng_state;
static double rng01(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return ((rng_state >> 11) + 0.5) / 9007199254740992.0;
}

/* Discrete exponential lifetime with half-life h: floor(Exp(ln2/h)), so
 * P(L ≥ k) = 2^(−k/h) exactly. */
static uint64_t geo(double h)
{
	return (uint64_t)floor(-log(rng01()) * h / M_LN2);
}

/* n samples, censoring time C independent (half-life hc): L < C → event at
 * L, else censored at C (we know L ≥ C). */
static void synth(struct md__calib_region *r, double h, double hc, unsigned n)
{
	memset(r, 0, sizeof(*r));
	for (unsigned i = 0; i < n; i++) {
		uint64_t L = geo(h), C = geo(hc);
		if (L < C)
			md__calib_add(r, L, 1);
		else
			md__calib_add(r, C, 0);
	}
}

START_TEST(recovers_half_lives)
{
	static struct md__calib_region r;
	const double hs[] = { 3, 15, 150 };
	rng_state = 0x9e3779b97f4a7c15ull;
	for (unsigned k = 0; k < 3; k++) {
		double h = hs[k];
		synth(&r, h, 2 * h, 3000);   /* about a third censored */
		struct md__calib_estimate e;
		ck_assert_int_eq(md__calib_estimate(&r, 0.95, 20, &e), 0);
		ck_assert_int_eq(e.status, MD__CALIB_OK);
		ck_assert_uint_eq(e.samples, 3000);
		ck_assert(e.censored > 600 && e.censored < 1400);
		ck_assert_msg(e.half_life_lo <= h && h <= e.half_life_hi,
			      "h=%g not in [%g, %g] (estimate %g)", h, e.half_life_lo,
			      e.half_life_hi, e.half_life);
		ck_assert_msg(fabs(e.half_life - h) < 0.1 * h, "h=%g estimate %g", h, e.half_life);
		ck_assert(fabs(e.lambda * e.half_life - M_LN2) < 1e-9);
		/* KM, a model-free check: the first s with P(L >= s) <= 1/2 is ceil(h) */
		ck_assert_msg(fabs(e.km_half_life - ceil(h)) <= 0.15 * h + 1, "km %g for h %g",
			      e.km_half_life, h);
		/* ignoring censoring would be biased low: the estimator must not be */
		double naive = 0;
		naive = r.sum_life / (double)(r.events + r.censored);
		ck_assert(e.half_life > naive * M_LN2);
	}
}
END_TEST

START_TEST(interval_coverage)
{
	/* 95% intervals over 300 independent data sets: coverage near 95%
	 * (binomial sd 1.3%): fail below 90% or for a useless interval. */
	static struct md__calib_region r;
	rng_state = 12345;
	unsigned covered = 0, trials = 300;
	double width = 0;
	for (unsigned t = 0; t < trials; t++) {
		synth(&r, 20, 30, 400);
		struct md__calib_estimate e;
		md__calib_estimate(&r, 0.95, 20, &e);
		covered += e.half_life_lo <= 20 && 20 <= e.half_life_hi;
		width += (e.half_life_hi - e.half_life_lo) / trials;
	}
	ck_assert_msg(covered >= trials * 90 / 100, "coverage %u/%u", covered, trials);
	ck_assert_msg(width < 10, "mean width %g", width);
}
END_TEST

START_TEST(status_and_edges)
{
	static struct md__calib_region r;
	struct md__calib_estimate e;
	memset(&r, 0, sizeof(r));
	ck_assert_int_eq(md__calib_estimate(&r, 1.5, 20, &e), -EINVAL);
	md__calib_estimate(&r, 0.95, 20, &e);
	ck_assert_int_eq(e.status, MD__CALIB_NONE);
	for (int i = 0; i < 5; i++)
		md__calib_add(&r, 10, 1);
	md__calib_estimate(&r, 0.95, 20, &e);
	ck_assert_int_eq(e.status, MD__CALIB_FEW);
	memset(&r, 0, sizeof(r));
	for (int i = 0; i < 50; i++)
		md__calib_add(&r, 0, 1);
	md__calib_estimate(&r, 0.95, 20, &e);
	ck_assert_int_eq(e.status, MD__CALIB_ZERO);
	ck_assert(e.half_life == 0);
	/* only censored: no event, the upper bound is open */
	memset(&r, 0, sizeof(r));
	for (int i = 0; i < 50; i++)
		md__calib_add(&r, 40, 0);
	md__calib_estimate(&r, 0.95, 20, &e);
	ck_assert_int_eq(e.status, MD__CALIB_FEW);
	ck_assert(isinf(e.half_life_hi));
	ck_assert(e.half_life_lo > 10);
	/* lifetimes past the histogram still count in the MLE */
	memset(&r, 0, sizeof(r));
	md__calib_add(&r, 100000, 1);
	ck_assert_uint_eq(r.ev_hist[MD__CALIB_HIST_BINS - 1], 1);
	ck_assert(r.sum_life == 100000);
}
END_TEST

START_TEST(tracker_events_and_censoring)
{
	static struct md__calib_stats st;
	memset(&st, 0, sizeof(st));
	struct md__calib_tracker *t = md__calib_tracker_new(4, 8, 2, 10);
	ck_assert_ptr_nonnull(t);
	uint64_t labels = md_label_set(md_label_set(0, 0, MD_REGION_USER), 1, MD_REGION_SCRATCHPAD);
	/* page 0: tokens 0 (user) and 1 (scratchpad) born at clock 100 */
	ck_assert_int_eq(md__calib_page_open(t, &st, 0, 1, 0, 0, 2, labels, 100), 0);
	ck_assert_int_eq(md__calib_attn(t, 0, 1, 0x3, 105), 0); /* both refreshed */
	ck_assert_int_eq(md__calib_attn(t, 0, 1, 0x1, 130), 0); /* user again */
	ck_assert_int_eq(md__calib_attn(t, 0, 2, 0x1, 131), -EINVAL); /* stale generation */
	/* token 2 (user) born at 140 by a grow */
	labels = md_label_set(labels, 2, MD_REGION_USER);
	ck_assert_int_eq(md__calib_page_grow(t, 0, 1, 3, labels, 140), 0);
	ck_assert_uint_eq(md__calib_seq_tokens(t, 0), 3);
	/* free at 145: token 0 quiet 15 ≥ 10 → event L=30; token 1 quiet 40 →
	 * event L=5; token 2 quiet 5 < 10 → censored at L=0 */
	ck_assert_int_eq(md__calib_page_free(t, &st, 0, 1, 145), 0);
	ck_assert_uint_eq(st.r[MD_REGION_USER].events, 1);
	ck_assert_uint_eq(st.r[MD_REGION_USER].ev_hist[30], 1);
	ck_assert_uint_eq(st.r[MD_REGION_USER].censored, 1);
	ck_assert_uint_eq(st.r[MD_REGION_USER].cen_hist[0], 1);
	ck_assert_uint_eq(st.r[MD_REGION_SCRATCHPAD].ev_hist[5], 1);
	ck_assert_uint_eq(md__calib_seq_tokens(t, 0), 0);
	ck_assert_int_eq(md__calib_page_free(t, &st, 0, 1, 146), -EINVAL); /* freed twice */

	/* relabel moves a live token to another region; peek counts it live
	 * without ending it; flush ends it */
	ck_assert_int_eq(md__calib_page_open(t, &st, 3, 7, 1, 16, 4, 0, 10), 0);
	ck_assert_int_eq(md__calib_relabel(t, 1, 17, 18, MD_REGION_RETRIEVAL, NULL, NULL), 1);
	ck_assert_int_eq(md__calib_attn(t, 3, 7, 0x2, 50), 0);
	ck_assert_int_eq(md__calib_seq_clock(t, 1, 55), 0);
	static struct md__calib_stats peek;
	memset(&peek, 0, sizeof(peek));
	md__calib_tracker_peek(t, &peek);
	ck_assert_uint_eq(peek.r[MD_REGION_RETRIEVAL].censored, 1); /* quiet 5 < 10 */
	ck_assert_uint_eq(peek.r[MD_REGION_RETRIEVAL].cen_hist[40], 1);
	ck_assert_uint_eq(peek.r[MD_REGION_SYSTEM].events, 3);       /* quiet 45 */
	md__calib_tracker_peek(t, &peek);
	ck_assert_uint_eq(peek.r[MD_REGION_RETRIEVAL].censored, 2); /* unchanged tracker */
	ck_assert_int_eq(md__calib_seq_end(t, &st, 1, 70), 0);      /* leftovers end */
	ck_assert_uint_eq(st.r[MD_REGION_RETRIEVAL].ev_hist[40], 1); /* quiet 20 now */
	/* bad indices are refused, not trusted */
	ck_assert_int_eq(md__calib_page_open(t, &st, 8, 1, 0, 0, 1, 0, 0), -EINVAL);
	ck_assert_int_eq(md__calib_page_open(t, &st, 0, 1, 2, 0, 1, 0, 0), -EINVAL);
	ck_assert_int_eq(md__calib_page_open(t, &st, 0, 1, 0, 0, 5, 0, 0), -EINVAL);
	md__calib_tracker_free(t);
}
END_TEST

static char journal_path[256];

static void jw(struct md__journal *j, uint8_t type, uint8_t n, uint16_t refresh, uint32_t seq,
	       uint32_t slot, uint32_t gen, uint64_t clock, uint64_t labels)
{
	struct md__jrec r = { .type = type, .n = n, .refresh = refresh, .engine = 5, .seq = seq,
			      .slot = slot, .gen = gen, .clock = clock, .labels = labels };
	md__journal_put(j, &r);
}

START_TEST(journal_replays_to_the_same_statistics)
{
	snprintf(journal_path, sizeof(journal_path), "/tmp/check_calib_%d.jrnl", (int)getpid());
	struct md__journal_header h;
	memset(&h, 0, sizeof(h));
	h.magic = MD__JOURNAL_MAGIC;
	h.version = MD__JOURNAL_VERSION;
	h.header_size = sizeof(h);
	h.rec_size = sizeof(struct md__jrec);
	h.grace_steps = 8;
	snprintf(h.region_name[MD_REGION_USER], 32, "user");
	snprintf(h.region_name[MD_REGION_SCRATCHPAD], 32, "scratchpad");
	struct md__journal *j;
	char err[256];
	ck_assert_int_eq(md__journal_open(&j, journal_path, 1 << 20, &h, err, sizeof(err)), 0);

	/* the same history straight into a tracker */
	static struct md__calib_stats direct, replayed;
	memset(&direct, 0, sizeof(direct));
	struct md__calib_tracker *t = md__calib_tracker_new(16, 64, 4, 8);
	jw(j, MD__J_ATTACH, 16, 0, 0, 64, 4, 0, 0);
	rng_state = 777;
	uint64_t clock = 0;
	for (uint32_t p = 0; p < 40; p++) {
		uint32_t slot = p % 64, gen = p / 64 + 1, seq = p % 4;
		uint64_t labels = 0;
		for (unsigned k = 0; k < 16; k++)
			labels = md_label_set(labels, k, k & 1 ? MD_REGION_SCRATCHPAD : MD_REGION_USER);
		md__calib_page_open(t, &direct, slot, gen, seq, 0, 16, labels, clock);
		jw(j, MD__J_OPEN, 16, 0, seq, slot, gen, clock, labels);
		for (unsigned s = 1; s < 60; s++) {
			uint16_t bits = 0;
			for (unsigned k = 0; k < 16; k++)
				if (rng01() < (k & 1 ? 0.2 : 0.9) * exp(-(double)s / 30))
					bits |= (uint16_t)(1u << k);
			md__calib_attn(t, slot, gen, bits, clock + s);
			jw(j, MD__J_ATTN, 0, bits, seq, slot, gen, clock + s, 0);
		}
		if (p < 30) { /* the last ten stay live: censored or not at the end */
			md__calib_page_free(t, &direct, slot, gen, clock + 60);
			jw(j, MD__J_FREE, 0, 0, seq, slot, gen, clock + 60, 0);
		}
		clock += 61;
	}
	md__calib_tracker_flush(t, &direct);
	md__calib_tracker_free(t);
	struct md__journal_stats js;
	md__journal_get_stats(j, &js);
	ck_assert_uint_eq(js.dropped_full + js.dropped_max, 0);
	md__journal_close(j);

	md__calib_names names;
	uint32_t grace = 0;
	long n = md__calib_from_journal(journal_path, 0, &replayed, names, &grace, err, sizeof(err));
	ck_assert_msg(n == (long)js.records, "replayed %ld of %llu: %s", n,
		      (unsigned long long)js.records, err);
	ck_assert_uint_eq(grace, 8);
	ck_assert_str_eq(names[MD_REGION_SCRATCHPAD], "scratchpad");
	ck_assert_int_eq(memcmp(&direct, &replayed, sizeof(direct)), 0);
	ck_assert(direct.r[MD_REGION_USER].events > 0 && direct.r[MD_REGION_USER].censored > 0);

	/* the report applies only regions with enough events, and says why not */
	struct md__sbuf b = { 0 };
	char items[MD_REGIONS_MAX][128];
	int k = md__calib_report(&replayed, (const char(*)[MD__JOURNAL_NAME_LEN])names, grace, "test",
				 1, &b, items, MD_REGIONS_MAX);
	ck_assert_int_ge(k, 1);
	ck_assert_ptr_nonnull(strstr(items[0], "memdecay.region.user.lambda="));
	ck_assert_ptr_nonnull(strstr(b.p, "\"region\":\"user\""));
	md__sbuf_free(&b);

	/* a different grace changes the answer (more events with a shorter one) */
	static struct md__calib_stats g1;
	md__calib_from_journal(journal_path, 1, &g1, names, &grace, err, sizeof(err));
	ck_assert_uint_eq(grace, 1);
	ck_assert(g1.r[MD_REGION_USER].events >= replayed.r[MD_REGION_USER].events);

	/* not a journal */
	FILE *f = fopen(journal_path, "w");
	fputs("hello", f);
	fclose(f);
	ck_assert_int_eq(md__calib_from_journal(journal_path, 0, &g1, names, NULL, err, sizeof(err)),
			 -EPROTO);
	unlink(journal_path);
	ck_assert_int_lt(md__calib_from_journal(journal_path, 0, &g1, names, NULL, err, sizeof(err)), 0);
}
END_TEST

START_TEST(journal_bounds)
{
	snprintf(journal_path, sizeof(journal_path), "/tmp/check_calib_b_%d.jrnl", (int)getpid());
	struct md__journal_header h;
	memset(&h, 0, sizeof(h));
	h.magic = MD__JOURNAL_MAGIC;
	h.version = MD__JOURNAL_VERSION;
	h.header_size = sizeof(h);
	h.rec_size = sizeof(struct md__jrec);
	struct md__journal *j;
	char err[256];
	/* size limit: header + 10 entries */
	uint64_t max = sizeof(h) + 10 * sizeof(struct md__jrec);
	ck_assert_int_eq(md__journal_open(&j, journal_path, max, &h, err, sizeof(err)), 0);
	struct md__jrec r = { .type = MD__J_ATTACH };
	for (int i = 0; i < 25; i++)
		md__journal_put(j, &r);
	struct md__journal_stats st;
	md__journal_get_stats(j, &st);
	ck_assert_uint_eq(st.records, 10);
	ck_assert_uint_eq(st.dropped_max, 15);
	ck_assert(st.stopped);
	md__journal_close(j);
	FILE *f = fopen(journal_path, "rb");
	fseek(f, 0, SEEK_END);
	ck_assert_int_eq(ftell(f), (long)max);
	fclose(f);
	/* a full buffer drops and counts instead of blocking */
	ck_assert_int_eq(md__journal_open(&j, journal_path, 1ull << 40, &h, err, sizeof(err)), 0);
	unsigned fit = MD__JOURNAL_BUF_BYTES / sizeof(struct md__jrec);
	for (unsigned i = 0; i < fit + 100; i++)
		md__journal_put(j, &r);
	md__journal_get_stats(j, &st);
	ck_assert_uint_eq(st.records, fit);
	ck_assert_uint_eq(st.dropped_full, 100);
	ck_assert_int_gt(md__journal_flush(j, 4096), 0);
	ck_assert_uint_eq(md__journal_buffered(j), fit * sizeof(struct md__jrec) - 4096);
	md__journal_put(j, &r); /* room again */
	md__journal_get_stats(j, &st);
	ck_assert_uint_eq(st.records, fit + 1);
	md__journal_close(j);
	unlink(journal_path);
	ck_assert_int_lt(md__journal_open(&j, "/nonexistent-dir/x", 1 << 20, &h, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent-dir/x"));
}
END_TEST

static Suite *calibrate_suite(void)
{
	Suite *s = suite_create("calibrate");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, recovers_half_lives);
	tcase_add_test(tc, interval_coverage);
	tcase_add_test(tc, status_and_edges);
	tcase_add_test(tc, tracker_events_and_censoring);
	tcase_add_test(tc, journal_replays_to_the_same_statistics);
	tcase_add_test(tc, journal_bounds);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return md_test_main(calibrate_suite());
}
