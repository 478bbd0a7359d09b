/*
 * bench_policy.c — memdecay-bench-policy: at each page count, the cost of one
 * eviction decision (one page over the engine budget) through the index, the
 * same decision by the naive method (score every page, qsort) and by a linear
 * scan, and the ingest rate of ATTN_PAGE records.  Every timed decision is
 * cross-checked against the brute-force oracle (oracle_mismatches).
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "host_internal.h"
#include "oracle.h"
#include "memdecay_clock.h"

static uint64_t rng_state = 1;
static uint32_t policy_id = MD_POLICY_MEMDECAY;
static uint64_t rnd(void)
{
	uint64_t x = (rng_state += 0x9e3779b97f4a7c15ULL);
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}
static double rnd01(void) { return (double)(rnd() >> 11) * 0x1.0p-53; }

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

struct naive { double score; uint64_t first_pos; uint32_t slot; uint32_t pad; };
static int naive_cmp(const void *a, const void *b)
{
	const struct naive *x = a, *y = b;
	return md__evict_order(x->score, x->first_pos, x->slot, y->score, y->first_pos, y->slot);
}

/* the naive decision: score every evictable page; sort (1) or scan (0) */
static uint32_t naive_pick(struct md__host *h, struct md__engine *e, struct naive *buf, int sort)
{
	const struct md__policy *pol = md__policy_get(e->policy);
	size_t n = 0;
	struct naive best = {INFINITY, UINT64_MAX, UINT32_MAX, 0};
	for (uint32_t s = 0; s < e->page_capacity; s++) {
		const struct md__page *pg = &e->pages[s];
		if (pg->state != MD__SLOT_LIVE || (pg->flags & (MD__PF_PINNED | MD__PF_PROT | MD__PF_SINK)))
			continue;
		struct md__score_in in;
		md__score_in_init(h, e, s, &in);
		struct naive c = {pol->score(pg, &e->t_refresh[(size_t)s * e->page_tokens], &in, NULL),
				  pg->first_pos, s, 0};
		if (sort)
			buf[n++] = c;
		else if (naive_cmp(&c, &best) < 0)
			best = c;
	}
	if (sort) {
		qsort(buf, n, sizeof(*buf), naive_cmp);
		return n ? buf[0].slot : UINT32_MAX;
	}
	return best.slot;
}

struct result {
	uint64_t pages;
	double decision_med, decision_p99, sort_med, scan_med, ingest_rate, ingest_rate_cpu;
	uint64_t mismatches, decisions;
};

static const unsigned regions_mix[] = {MD_REGION_USER, MD_REGION_ASSISTANT, MD_REGION_ASSISTANT,
				       MD_REGION_TOOL_OUT, MD_REGION_RETRIEVAL, MD_REGION_SCRATCHPAD,
				       MD_REGION_TOOL_IN, MD_REGION_PLAN};

static struct md_stats_rec open_rec(uint32_t slot, uint32_t gen, uint32_t seq, uint64_t pos)
{
	struct md_stats_rec r;
	memset(&r, 0, sizeof r);
	r.type = MD_REC_PAGE_OPEN;
	r.slot = slot;
	r.gen = gen;
	r.seq = seq;
	r.clock = pos;
	r.u.page.first_pos = pos;
	r.u.page.n_tokens = 16;
	unsigned reg = pos < 64 ? MD_REGION_SYSTEM : regions_mix[rnd() % 8];
	for (unsigned k = 0; k < 16; k++)
		r.u.page.labels = md_label_set(r.u.page.labels, k, reg);
	return r;
}

static void attn_rec(struct md_stats_rec *r, uint32_t slot, uint32_t gen, uint32_t nseq_pages)
{
	memset(r, 0, sizeof *r);
	r->type = MD_REC_ATTN_PAGE;
	r->slot = slot;
	r->gen = gen;
	/* ~ uniform attention over the sequence, heavy-tailed per page */
	double u = rnd01();
	r->u.attn_page.mass = (float)(16.0 / (16.0 * nseq_pages) * -log(1e-12 + u) * 2.0);
	r->u.attn_page.refresh = (uint16_t)((rnd() & 63) == 0 ? 1u << (rnd() & 15) : 0);
}

static int run_one(uint64_t npages, struct result *res)
{
	memset(res, 0, sizeof *res);
	res->pages = npages;
	struct md__params p;
	md__params_defaults(&p);
	p.policy = policy_id;
	struct md__host *h = md__host_new(&p);
	uint32_t nseq = (uint32_t)(npages / 1000);
	if (nseq < 1)
		nseq = 1;
	if (nseq > MD_MAX_SEQS_MAX)
		nseq = MD_MAX_SEQS_MAX;
	uint32_t cap = (uint32_t)npages + 16;
	if (md__host_engine_add(h, 1, 16, cap, nseq, NULL))
		return -1;
	struct md__engine *e = md__host_find(h, 1);
	uint64_t *next_pos = calloc(nseq, sizeof(uint64_t));
	uint32_t *gen = calloc(cap, sizeof(uint32_t));
	for (uint32_t s = 0; s < npages; s++) {
		uint32_t q = s % nseq;
		struct md_stats_rec r = open_rec(s, 0, q, next_pos[q]);
		next_pos[q] += 16;
		if (md__host_ingest(h, 1, &r))
			return -1;
	}
	uint32_t per_seq = (uint32_t)(npages / nseq);
	/* ingest: a pre-generated batch of ATTN_PAGE records, cycled */
	size_t nrec = npages < 1000000 ? 1000000 : npages;
	struct md_stats_rec *recs = malloc(nrec * sizeof(*recs));
	for (size_t i = 0; i < nrec; i++)
		attn_rec(&recs[i], (uint32_t)(rnd() % npages), 0, per_seq);
	for (uint32_t q = 0; q < nseq; q++) {
		struct md_stats_rec r;
		memset(&r, 0, sizeof r);
		r.type = MD_REC_STEP;
		r.seq = q;
		r.clock = next_pos[q];
		md__host_ingest(h, 1, &r);
	}
	/* the index is built at the first decision; build it before timing ingest */
	p.budget_engine_pages = npages + 1;
	md__host_set_params(h, &p);
	struct md__decision d[4], o[4];
	md__host_decide(h, d, 4);
	struct timespec c0, c1;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
	uint64_t t0 = md_now_ns(), done = 0;
	/* the daemon drains a ring span at a time: batches of 256 records */
	for (int pass = 0; pass < 3; pass++)
		for (size_t i = 0; i < nrec; i += 256)
			done += md__host_ingest_batch(h, 1, &recs[i], nrec - i < 256 ? nrec - i : 256,
						      NULL, NULL);
	uint64_t t1 = md_now_ns();
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
	res->ingest_rate = (double)done / ((double)(t1 - t0) * 1e-9);
	double cpu_s = (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) * 1e-9;
	res->ingest_rate_cpu = (double)done / cpu_s;

	/* decisions: one page over budget; the engine frees the page and a new one opens */
	p.budget_engine_pages = npages - 1;
	md__host_set_params(h, &p);
	md__host_decide(h, d, 4); /* rebuild for the new params, first eviction */
	int iters = npages <= 1000 ? 2000 : npages <= 10000 ? 500 : npages <= 100000 ? 100 : 25;
	int sort_iters = npages <= 10000 ? 50 : npages <= 100000 ? 10 : 3;
	uint64_t *dec = calloc((size_t)iters, sizeof(uint64_t));
	uint64_t *srt = calloc((size_t)sort_iters, sizeof(uint64_t));
	uint64_t *scn = calloc((size_t)sort_iters, sizeof(uint64_t));
	struct naive *buf = malloc(cap * sizeof(*buf));
	uint32_t free_slot = d[0].slot;
	for (int it = 0; it < iters; it++) {
		/* engine applies the last eviction, opens a new page, attention flows */
		struct md_stats_rec r;
		memset(&r, 0, sizeof r);
		r.type = MD_REC_PAGE_FREE;
		r.slot = free_slot;
		r.gen = gen[free_slot];
		md__host_ingest(h, 1, &r);
		uint32_t q = (uint32_t)(rnd() % nseq);
		gen[free_slot]++;
		r = open_rec(free_slot, gen[free_slot], q, next_pos[q]);
		next_pos[q] += 16;
		md__host_ingest(h, 1, &r);
		memset(&r, 0, sizeof r);
		r.type = MD_REC_STEP;
		r.seq = q;
		r.clock = next_pos[q];
		md__host_ingest(h, 1, &r);
		for (int k = 0; k < 1000; k++) {
			uint32_t s = (uint32_t)(rnd() % npages);
			attn_rec(&r, s, gen[s], per_seq);
			md__host_ingest(h, 1, &r);
		}
		/* the naive methods first: they do not change the state */
		uint32_t ps = UINT32_MAX, pc = UINT32_MAX;
		if (it < sort_iters) {
			uint64_t a = md_now_ns();
			ps = naive_pick(h, e, buf, 1);
			srt[it] = md_now_ns() - a;
			a = md_now_ns();
			pc = naive_pick(h, e, buf, 0);
			scn[it] = md_now_ns() - a;
		}
		size_t no = md__oracle_decide(h, o, 4);
		uint64_t a = md_now_ns();
		size_t nd = md__host_decide(h, d, 4);
		dec[it] = md_now_ns() - a;
		res->decisions++;
		if (nd != 1 || no != nd || memcmp(d, o, sizeof d[0]) != 0)
			res->mismatches++;
		if (it < sort_iters && (ps != d[0].slot || pc != d[0].slot))
			res->mismatches++;
		free_slot = nd ? d[0].slot : free_slot;
	}
	qsort(dec, (size_t)iters, sizeof(uint64_t), cmp_u64);
	qsort(srt, (size_t)sort_iters, sizeof(uint64_t), cmp_u64);
	qsort(scn, (size_t)sort_iters, sizeof(uint64_t), cmp_u64);
	res->decision_med = (double)dec[iters / 2];
	res->decision_p99 = (double)dec[(size_t)((iters - 1) * 0.99)];
	res->sort_med = (double)srt[sort_iters / 2];
	res->scan_med = (double)scn[sort_iters / 2];
	free(dec);
	free(srt);
	free(scn);
	free(buf);
	free(recs);
	free(next_pos);
	free(gen);
	md__host_free(h);
	return 0;
}

static void usage(FILE *f)
{
	char names[256];
	md__policy_names(names, sizeof(names));
	fprintf(f, "usage: memdecay-bench-policy [--pages N,N,...] [--policy P] [--seed S] [--json]\n"
		   "                             [--list-policies] [--help]\n"
		   "  one eviction decision (index) vs full sort vs linear scan, and ATTN_PAGE\n"
		   "  ingest rate, at each page count (default 1000,10000,100000,1000000),\n"
		   "  under policy P (%s; default memdecay)\n"
		   "  --list-policies: the policy table's names, one a line (ctest reads them)\n", names);
}

int main(int argc, char **argv)
{
	char pages_arg[512] = "1000,10000,100000,1000000";
	int json = 0;
	static const struct option opts[] = {{"pages", required_argument, 0, 'p'},
					     {"seed", required_argument, 0, 's'},
					     {"policy", required_argument, 0, 'P'},
					     {"json", no_argument, 0, 'j'},
					     {"list-policies", no_argument, 0, 'l'},
					     {"help", no_argument, 0, 'h'},
					     {0, 0, 0, 0}};
	int c;
	while ((c = getopt_long(argc, argv, "p:s:P:jlh", opts, NULL)) != -1) {
		switch (c) {
		case 'p': snprintf(pages_arg, sizeof pages_arg, "%s", optarg); break;
		case 's': rng_state = strtoull(optarg, NULL, 0); break;
		case 'P': {
			int id = md__policy_from_name(optarg);
			if (id < 0) {
				fprintf(stderr, "memdecay-bench-policy: unknown policy '%s'\n", optarg);
				return 2;
			}
			policy_id = (uint32_t)id;
			break;
		}
		case 'j': json = 1; break;
		case 'l':
			for (uint32_t i = 0; i < MD__POLICY_N; i++)
				printf("%s\n", md__policy_name(i));
			return 0;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	struct result res[16];
	int nr = 0;
	for (char *tok = strtok(pages_arg, ","); tok && nr < 16; tok = strtok(NULL, ",")) {
		char *end;
		unsigned long long n = strtoull(tok, &end, 10);
		if (*end || n < 16 || n > MD_PAGE_CAPACITY_MAX - 16) {
			fprintf(stderr, "memdecay-bench-policy: bad page count '%s' (16..%u)\n", tok,
				MD_PAGE_CAPACITY_MAX - 16);
			return 2;
		}
		if (run_one(n, &res[nr])) {
			fprintf(stderr, "memdecay-bench-policy: setup failed at %llu pages\n", n);
			return 1;
		}
		if (!json)
			printf("pages %8llu  decision median %9.0f ns  p99 %9.0f ns  sort %12.0f ns  "
			       "scan %12.0f ns  sort/decision %8.0fx  ingest %6.2f M rec/s (%6.2f per CPU s)  "
			       "oracle mismatches %llu/%llu\n",
			       n, res[nr].decision_med, res[nr].decision_p99, res[nr].sort_med,
			       res[nr].scan_med, res[nr].sort_med / res[nr].decision_med,
			       res[nr].ingest_rate / 1e6, res[nr].ingest_rate_cpu / 1e6, (unsigned long long)res[nr].mismatches,
			       (unsigned long long)res[nr].decisions);
		nr++;
	}
	if (json) {
		printf("{\"policy\": \"%s\", \"results\": [", md__policy_name(policy_id));
		for (int i = 0; i < nr; i++)
			printf("%s{\"pages\": %llu, \"decision_ns_median\": %.0f, \"decision_ns_p99\": %.0f, "
			       "\"sort_ns_median\": %.0f, \"scan_ns_median\": %.0f, "
			       "\"ingest_records_per_s\": %.0f, \"ingest_records_per_cpu_s\": %.0f, \"oracle_mismatches\": %llu, "
			       "\"decisions_checked\": %llu}",
			       i ? ", " : "", (unsigned long long)res[i].pages, res[i].decision_med,
			       res[i].decision_p99, res[i].sort_med, res[i].scan_med, res[i].ingest_rate,
			       res[i].ingest_rate_cpu,
			       (unsigned long long)res[i].mismatches,
			       (unsigned long long)res[i].decisions);
		printf("]}\n");
	}
	int bad = 0;
	for (int i = 0; i < nr; i++)
		bad |= res[i].mismatches != 0;
	return bad ? 1 : 0;
}
