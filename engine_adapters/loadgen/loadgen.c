/*
 * loadgen.c — memdecay-loadgen, a synthetic inference engine.  It decodes one
 * token per step into every sequence, labels tokens with regions (system
 * first, then a mix), publishes per-page attention from a chosen pattern,
 * applies the daemon's evictions, and checks the daemon's promises on its own
 * side: no pinned or protected page evicted (protected as libmemdecay says:
 * md_seq_protected_pages, the count the daemon publishes), no stale command
 * applied, no page freed twice, occupancy never above budget + 1 page.  It
 * survives daemon death (fail-open, local recency fallback at the budget) and
 * reattaches (md_client_maintain).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "memdecay.h"
#include "lathist.h"   /* md_common (sidecar/common): command-latency histogram */
#include "memdecay_clock.h"

#define P 16u
#define REATTACH_MS 200u

enum pattern { PAT_UNIFORM, PAT_RECENT, PAT_HEAVY };

struct opts {
	const char *socket, *name, *policy, *dump;
	uint32_t seqs, pages_per_seq;
	uint64_t steps;
	int64_t budget_pages, budget_seq_tokens;
	enum pattern pattern;
	uint64_t seed;
	double step_hz;
	int json;
	uint32_t wait_ms, hb_timeout_ms;
	int fallback;
	uint32_t system_pages;
	uint32_t hold_ms;
	int stagger;
};

struct page {
	int live;
	uint32_t gen, seq, n;
	uint64_t first_pos, labels;
};

struct seq {
	uint64_t pos;            /* tokens appended */
	uint32_t *slots;         /* live pages in position order */
	uint32_t npages;
	uint32_t tail;           /* slot being written, UINT32_MAX: none */
	uint32_t span_region, span_left;
	uint32_t heavy_mod;      /* PAT_HEAVY: tokens at pos % heavy_mod == 0 are heavy */
	uint64_t end_pos;        /* tokens at which it ends and restarts */
};

struct stats {
	uint64_t steps, evictions, pinned_evicted, protected_evicted, stale_applied;
	uint64_t double_freed, over_budget_max_pages, reattaches, local_evictions;
	uint64_t by_region[MD_REGIONS_MAX];
	uint64_t seq_restarts, wait_timeouts, cmds_seen, max_occupancy;
	uint64_t step_ns_total, step_ns_max, slow_steps;   /* slow: over 50 ms */
};

static volatile sig_atomic_t g_stop;
static void on_signal(int s) { (void)s; g_stop = 1; }

static uint64_t rng_state;
static uint64_t rng(void)
{
	uint64_t x = rng_state;
	x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
	rng_state = x;
	return x * 0x2545F4914F6CDD1DULL;
}
static double rng01(void) { return (double)(rng() >> 11) / 9007199254740992.0; }

static struct opts o;
static struct stats st;
static md_client *cl;
static struct page *pages;
static struct seq *seqs;
static uint32_t capacity;
static uint64_t occupancy;
static double *tok_mass;   /* scratch: per-token mass of one sequence */
static uint32_t *rank_buf; /* scratch: one sequence's slots, md_seq_pages */
static struct md_lathist cmd_lat;  /* now - decided_ns when a command is applied */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: memdecay-loadgen [options]\n"
		"  --socket PATH            daemon control socket (default: libmemdecay's resolution)\n"
		"  --engine-name NAME       engine name (default loadgen)\n"
		"  --seqs N                 concurrent sequences (default 4)\n"
		"  --pages-per-seq M        pages before a sequence ends and restarts (default 32)\n"
		"  --steps K                decode steps, 0 = until SIGINT/SIGTERM (default 1000)\n"
		"  --policy P               a policy of docs/policies.md (default: the daemon's,\n"
		"                           memdecayctl get policy)\n"
		"  --budget-pages B         per-engine page budget sent in HELLO\n"
		"  --budget-seq-tokens N    per-sequence token budget sent in HELLO\n"
		"  --pattern PAT            uniform|recent|heavy (default recent)\n"
		"  --seed S                 RNG seed (default 1)\n"
		"  --step-hz HZ             steps per second, 0 = as fast as possible (default 0)\n"
		"  --system-pages N         pages of system prompt per sequence (default 1)\n"
		"  --wait-ms MS             longest wait for evictions at budget + 1 (default 200)\n"
		"  --heartbeat-timeout-ms MS daemon heartbeat timeout (default 2000)\n"
		"  --no-fallback            no local eviction while detached\n"
		"  --dump-pages FILE        write the final page table view as JSON\n"
		"  --hold-ms MS             after the last step (and the dump) stay attached MS ms\n"
		"  --stagger                spread the sequences' first lifetimes evenly, so restarts\n"
		"                           do not all happen in the same step\n"
		"  --json                   print one JSON object with the results\n"
		"  --help\n");
}

static int parse_u64(const char *s, uint64_t *v)
{
	char *e;
	errno = 0;
	unsigned long long x = strtoull(s, &e, 10);
	if (errno || e == s || *e || s[0] == '-')
		return -1;
	*v = x;
	return 0;
}

static int parse_args(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "socket", 1, 0, 's' }, { "engine-name", 1, 0, 'n' }, { "seqs", 1, 0, 'S' },
		{ "pages-per-seq", 1, 0, 'M' }, { "steps", 1, 0, 'K' }, { "policy", 1, 0, 'p' },
		{ "budget-pages", 1, 0, 'B' }, { "budget-seq-tokens", 1, 0, 'T' },
		{ "pattern", 1, 0, 'a' }, { "seed", 1, 0, 'r' }, { "step-hz", 1, 0, 'z' },
		{ "json", 0, 0, 'j' }, { "dump-pages", 1, 0, 'd' }, { "wait-ms", 1, 0, 'w' },
		{ "heartbeat-timeout-ms", 1, 0, 'H' }, { "no-fallback", 0, 0, 'F' },
		{ "system-pages", 1, 0, 'y' }, { "hold-ms", 1, 0, 'o' }, { "stagger", 0, 0, 'g' }, { "help", 0, 0, 'h' }, { 0, 0, 0, 0 },
	};
	o.name = "loadgen";
	o.seqs = 4;
	o.pages_per_seq = 32;
	o.steps = 1000;
	o.budget_pages = -1;
	o.budget_seq_tokens = -1;
	o.pattern = PAT_RECENT;
	o.seed = 1;
	o.wait_ms = 200;
	o.hb_timeout_ms = 2000;
	o.fallback = 1;
	o.system_pages = 1;
	int ch;
	uint64_t v;
	while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (ch) {
		case 's': o.socket = optarg; break;
		case 'n': o.name = optarg; break;
		case 'p': o.policy = optarg; break;
		case 'd': o.dump = optarg; break;
		case 'j': o.json = 1; break;
		case 'F': o.fallback = 0; break;
		case 'g': o.stagger = 1; break;
		case 'h': usage(stdout); exit(0);
		case 'a':
			if (!strcmp(optarg, "uniform")) o.pattern = PAT_UNIFORM;
			else if (!strcmp(optarg, "recent")) o.pattern = PAT_RECENT;
			else if (!strcmp(optarg, "heavy")) o.pattern = PAT_HEAVY;
			else { fprintf(stderr, "memdecay-loadgen: bad --pattern '%s'\n", optarg); return -1; }
			break;
		case 'z': {
			char *e;
			o.step_hz = strtod(optarg, &e);
			if (*e || e == optarg || !(o.step_hz >= 0) || isinf(o.step_hz)) {
				fprintf(stderr, "memdecay-loadgen: bad --step-hz '%s'\n", optarg);
				return -1;
			}
			break;
		}
		default:
			if (ch == '?' || parse_u64(optarg, &v)) {
				if (ch != '?')
					fprintf(stderr, "memdecay-loadgen: bad value '%s'\n", optarg);
				usage(stderr);
				return -1;
			}
			switch (ch) {
			case 'S': o.seqs = (uint32_t)v; if (v == 0 || v > MD_MAX_SEQS_MAX) goto range; break;
			case 'M': o.pages_per_seq = (uint32_t)v; if (v < 2 || v > 65536) goto range; break;
			case 'K': o.steps = v; break;
			case 'B': o.budget_pages = (int64_t)v; break;
			case 'T': o.budget_seq_tokens = (int64_t)v; break;
			case 'r': o.seed = v; break;
			case 'w': o.wait_ms = (uint32_t)v; break;
			case 'H': o.hb_timeout_ms = (uint32_t)v; break;
			case 'y': o.system_pages = (uint32_t)v; break;
			case 'o': o.hold_ms = (uint32_t)v; break;
			}
		}
	}
	if (optind < argc) {
		fprintf(stderr, "memdecay-loadgen: unexpected argument '%s'\n", argv[optind]);
		return -1;
	}
	if (o.system_pages >= o.pages_per_seq) {
		fprintf(stderr, "memdecay-loadgen: --system-pages must be below --pages-per-seq\n");
		return -1;
	}
	return 0;
range:
	fprintf(stderr, "memdecay-loadgen: value '%s' out of range\n", optarg);
	return -1;
}

static uint32_t dominant_region(const struct page *pg)
{
	unsigned cnt[MD_REGIONS_MAX] = { 0 };
	uint32_t best = 0;
	for (uint32_t k = 0; k < pg->n; k++)
		cnt[md_label_get(pg->labels, k)]++;
	for (uint32_t r = 1; r < MD_REGIONS_MAX; r++)
		if (cnt[r] > cnt[best])
			best = r;
	return best;
}

static int page_pinned(const struct page *pg, uint32_t pinned_mask)
{
	for (uint32_t k = 0; k < pg->n; k++)
		if (pinned_mask & (1u << md_label_get(pg->labels, k)))
			return 1;
	return 0;
}

static uint32_t next_region(struct seq *s)
{
	if (s->pos < (uint64_t)o.system_pages * P)
		return MD_REGION_SYSTEM;
	if (s->span_left == 0) {
		s->span_region = 1 + (uint32_t)(rng() % 7);   /* plan .. scratchpad */
		s->span_left = 4 + (uint32_t)(rng() % 48);
	}
	s->span_left--;
	return s->span_region;
}

static void remove_from_seq(struct seq *s, uint32_t slot)
{
	for (uint32_t i = 0; i < s->npages; i++) {
		if (s->slots[i] == slot) {
			memmove(&s->slots[i], &s->slots[i + 1], (s->npages - i - 1) * sizeof(uint32_t));
			s->npages--;
			break;
		}
	}
	if (s->tail == slot)
		s->tail = UINT32_MAX;
}

/* The engine frees a page (eviction or its own reasons). */
static void drop_page(uint32_t slot, uint32_t reason)
{
	struct page *pg = &pages[slot];
	remove_from_seq(&seqs[pg->seq], slot);
	pg->live = 0;
	occupancy--;
	(void)md_page_free(cl, slot, reason);
}

static uint64_t budget_pages(const struct md_params_view *pv)
{
	if (md_client_attached(cl) && pv->budget_engine_pages)
		return pv->budget_engine_pages;
	return o.budget_pages > 0 ? (uint64_t)o.budget_pages : 0;
}

/* Whether slot is among the newest pages of seq that the daemon protects, by
 * its rank in the library's page order.  Pages only join a sequence at its
 * newest end, so a page the daemon chose has not moved into that set since. */
static int page_protected(uint32_t seq, uint32_t slot)
{
	uint32_t k = md_seq_protected_pages(cl, seq);
	int n = md_seq_pages(cl, seq, rank_buf, capacity);
	for (int i = n > 0 ? n : 0; i-- > 0;) {
		if ((uint32_t)(n - 1 - i) >= k)
			return 0;
		if (rank_buf[i] == slot)
			return 1;
	}
	return 0;
}

/* One evict command from the library (md_apply_fn), checked against the
 * daemon's promises before the page goes. */
static int apply_one(void *ctx, const struct md_evict *ev)
{
	const struct md_params_view *pv = ctx;
	struct page *pg = &pages[ev->slot];
	uint64_t applied_ns = md_now_ns();
	st.cmds_seen++;
	/* No host tier here (tier_pages 0): the library hands over evicts only,
	 * so anything else would be its bug; keep the page. */
	if (ev->type != MD_CMD_EVICT) {
		st.stale_applied++;
		return 0;
	}
	if (ev->slot >= capacity || !pg->live) {
		st.double_freed++;   /* would free a page already gone */
		return 0;
	}
	if (pg->gen != ev->gen || pg->seq != ev->seq) {
		st.stale_applied++;  /* library let a stale command through */
		return 0;
	}
	if (page_pinned(pg, pv->pinned_mask))
		st.pinned_evicted++;
	if (page_protected(ev->seq, ev->slot))
		st.protected_evicted++;
	st.evictions++;
	if (ev->decided_ns && applied_ns >= ev->decided_ns)
		md_lathist_record(&cmd_lat, applied_ns - ev->decided_ns);
	st.by_region[dominant_region(pg)]++;
	drop_page(ev->slot, MD_FREE_EVICTED);
	return 1;
}

static void apply_commands(const struct md_params_view *pv)
{
	(void)md_apply_commands(cl, apply_one, (void *)pv);
}

/* Detached at the budget: evict the oldest page that is neither pinned nor
 * protected (the adapter's own fallback, counted apart). */
static int local_evict(const struct md_params_view *pv)
{
	uint32_t best = UINT32_MAX;
	uint64_t best_pos = UINT64_MAX;
	for (uint32_t q = 0; q < o.seqs; q++) {
		struct seq *s = &seqs[q];
		uint32_t protect = md_seq_protected_pages(cl, q);
		for (uint32_t k = 0; k + protect < s->npages; k++) {
			struct page *pg = &pages[s->slots[k]];
			if (page_pinned(pg, pv->pinned_mask))
				continue;
			if (pg->first_pos < best_pos) {
				best_pos = pg->first_pos;
				best = s->slots[k];
			}
			break;
		}
	}
	if (best == UINT32_MAX)
		return 0;
	st.local_evictions++;
	drop_page(best, MD_FREE_FINISHED);
	return 1;
}

static void note_occupancy(uint64_t budget)
{
	if (occupancy > st.max_occupancy)
		st.max_occupancy = occupancy;
	if (budget && occupancy > budget && occupancy - budget > st.over_budget_max_pages)
		st.over_budget_max_pages = occupancy - budget;
}

/* Before opening a page: at budget + 1, wait (bounded) for the daemon; a
 * daemon found dead meanwhile hands over to the local fallback.  This is the
 * engine page budget, which md_settle (per-sequence budgets) does not cover:
 * loadgen checks that the daemon keeps it within one page. */
/* Before a new page: at the engine's page budget, the library waits for the
 * daemon's decision (md_settle_engine, applying through apply_one); detached,
 * the adapter's own fallback makes room. */
static void make_room(const struct md_params_view *pv)
{
	uint64_t budget = budget_pages(pv);
	if (!budget || occupancy < budget + 1)
		return;
	if (md_client_attached(cl)) {
		struct md_settle_result r;
		if (md_settle_engine(cl, 1, 1, (int)o.wait_ms, apply_one, (void *)pv, &r) == 0 &&
		    r.outcome == MD_SETTLE_TIMEOUT)
			st.wait_timeouts++;
	}
	if (!md_client_attached(cl) && o.fallback)
		while (occupancy >= budget + 1 && local_evict(pv))
			;
}

static void restart_seq(uint32_t q)
{
	struct seq *s = &seqs[q];
	for (uint32_t k = 0; k < s->npages; k++) {
		pages[s->slots[k]].live = 0;
		occupancy--;
	}
	s->npages = 0;
	s->tail = UINT32_MAX;
	s->pos = 0;
	s->span_left = 0;
	s->end_pos = (uint64_t)o.pages_per_seq * P;
	(void)md_seq_end(cl, q);   /* frees every page of q in the library */
	st.seq_restarts++;
}

static int append_token(uint32_t q, const struct md_params_view *pv)
{
	struct seq *s = &seqs[q];
	uint32_t region = next_region(s);
	if (s->tail != UINT32_MAX && pages[s->tail].n < P) {
		struct page *pg = &pages[s->tail];
		pg->labels = md_label_set(pg->labels, pg->n, region);
		pg->n++;
		int rc = md_page_grow(cl, s->tail, pg->n, pg->labels);
		if (rc < 0 && rc != MD_EDETACHED) {
			fprintf(stderr, "memdecay-loadgen: md_page_grow: %s\n", md_strerror(rc));
			return -1;
		}
	} else {
		make_room(pv);
		uint32_t slot, gen;
		uint64_t labels = md_label_set(0, 0, region);
		int rc = md_page_open(cl, q, s->pos, 1, labels, &slot, &gen);
		if (rc < 0 && rc != MD_EDETACHED) {
			fprintf(stderr, "memdecay-loadgen: md_page_open: %s\n", md_strerror(rc));
			return -1;
		}
		struct page *pg = &pages[slot];
		if (pg->live)
			st.double_freed++;   /* library reused a slot we still hold */
		*pg = (struct page){ .live = 1, .gen = gen, .seq = q, .n = 1,
				     .first_pos = s->pos, .labels = labels };
		s->slots[s->npages++] = slot;
		s->tail = slot;
		occupancy++;
	}
	s->pos++;
	(void)md_seq_step(cl, q, 1);
	return 0;
}

/* One query over the sequence's live tokens; masses sum to 1. */
static void publish_attention(uint32_t q, const struct md_params_view *pv)
{
	struct seq *s = &seqs[q];
	uint64_t n_live = 0;
	double sum = 0;
	size_t t = 0;
	for (uint32_t k = 0; k < s->npages; k++) {
		const struct page *pg = &pages[s->slots[k]];
		for (uint32_t i = 0; i < pg->n; i++, t++) {
			uint64_t pos = pg->first_pos + i;
			double age = (double)(s->pos - 1 - pos);
			double w;
			switch (o.pattern) {
			case PAT_UNIFORM: w = 1.0; break;
			case PAT_RECENT: w = exp(-age / 24.0) + 0.01; break;
			default:
				w = 0.02 + exp(-age / 16.0) +
				    ((pos % s->heavy_mod) == 0 ? 2.0 : 0.0) +
				    (md_label_get(pg->labels, i) == MD_REGION_SYSTEM ? 0.5 : 0.0);
				break;
			}
			w *= 0.75 + 0.5 * rng01();
			tok_mass[t] = w;
			sum += w;
		}
	}
	n_live = t;
	if (!n_live)
		return;
	double scale = pv->norm_mode == MD_NORM_RELATIVE ? (double)n_live : 1.0;
	t = 0;
	for (uint32_t k = 0; k < s->npages; k++) {
		uint32_t slot = s->slots[k];
		const struct page *pg = &pages[slot];
		double mass = 0;
		uint16_t refresh = 0;
		for (uint32_t i = 0; i < pg->n; i++, t++) {
			double m = tok_mass[t] / sum;
			mass += m;
			if (m * scale > pv->tau)
				refresh |= (uint16_t)(1u << i);
		}
		(void)md_attn_page(cl, slot, (float)mass, refresh);
	}
}

static void dump_pages(const char *path)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, "memdecay-loadgen: %s: %s\n", path, strerror(errno));
		return;
	}
	uint64_t mismatches = 0;
	fprintf(f, "{\"engine_name\": \"%s\", \"engine_id\": %u, \"page_tokens\": %u, \"pages\": [",
		o.name, md_client_engine_id(cl), P);
	int first = 1;
	for (uint32_t s = 0; s < capacity; s++) {
		struct md_page_entry e;
		md_page_info(cl, s, &e);
		const struct page *pg = &pages[s];
		int live = e.state == MD_PAGE_LIVE;
		if (live != pg->live || (live && (e.generation != pg->gen || e.seq != pg->seq ||
						  e.n_tokens != pg->n || e.first_pos != pg->first_pos ||
						  e.labels != pg->labels)))
			mismatches++;
		if (!live)
			continue;
		fprintf(f, "%s\n  {\"slot\": %u, \"gen\": %u, \"seq\": %u, \"first_pos\": %" PRIu64
			", \"n_tokens\": %u, \"labels\": \"0x%016" PRIx64 "\", \"open_clock\": %" PRIu64 "}",
			first ? "" : ",", s, e.generation, e.seq, e.first_pos, e.n_tokens, e.labels,
			e.open_clock);
		first = 0;
	}
	fprintf(f, "\n], \"mirror_mismatches\": %" PRIu64 "}\n", mismatches);
	fclose(f);
}

int main(int argc, char **argv)
{
	if (parse_args(argc, argv))
		return 2;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGPIPE, SIG_IGN);
	rng_state = o.seed * 0x9E3779B97F4A7C15ULL + 1;

	capacity = o.seqs * o.pages_per_seq + 8;
	pages = calloc(capacity, sizeof(*pages));
	seqs = calloc(o.seqs, sizeof(*seqs));
	tok_mass = malloc((size_t)o.pages_per_seq * P * sizeof(double));
	rank_buf = malloc((size_t)capacity * sizeof(uint32_t));
	if (!pages || !seqs || !tok_mass || !rank_buf)
		return 1;
	for (uint32_t q = 0; q < o.seqs; q++) {
		seqs[q].slots = calloc(o.pages_per_seq + 1, sizeof(uint32_t));
		if (!seqs[q].slots)
			return 1;
		seqs[q].tail = UINT32_MAX;
		seqs[q].heavy_mod = 5 + (uint32_t)(rng() % 40);
		uint64_t full = (uint64_t)o.pages_per_seq * P;
		seqs[q].end_pos = full;
		if (o.stagger) /* first lifetimes full, full - full/N, ..., so restarts spread out */
			seqs[q].end_pos = full - (full * q) / o.seqs;
	}

	struct md_client_config cfg;
	md_client_config_init(&cfg);
	cfg.socket_path = o.socket;
	cfg.engine_name = o.name;
	cfg.page_tokens = P;
	cfg.page_capacity = capacity;
	cfg.max_seqs = o.seqs;
	cfg.policy = o.policy;
	cfg.budget_engine_pages = o.budget_pages;
	cfg.budget_sequence_tokens = o.budget_seq_tokens;
	int rc = md_client_create(&cfg, &cl);
	if (rc) {
		fprintf(stderr, "memdecay-loadgen: md_client_create: %s\n", md_strerror(rc));
		return 1;
	}
	if (!md_client_attached(cl) && !o.json)
		fprintf(stderr, "memdecay-loadgen: not attached (%s), running fail-open\n",
			md_client_last_error(cl));

	uint64_t t0 = md_now_ns();
	int was_attached = md_client_attached(cl);
	uint64_t period = o.step_hz > 0 ? (uint64_t)(1e9 / o.step_hz) : 0;
	uint64_t next_step = t0;
	struct md_params_view pv;
	int err = 0;
	for (uint64_t step = 0; !g_stop && (o.steps == 0 || step < o.steps); step++) {
		uint64_t step_t0 = md_now_ns();
		int up = md_client_maintain(cl, o.hb_timeout_ms, REATTACH_MS);
		if (up && !was_attached)
			st.reattaches++;
		was_attached = up;
		(void)md_client_params(cl, &pv);
		for (uint32_t q = 0; q < o.seqs && !err; q++) {
			if (seqs[q].pos >= seqs[q].end_pos)
				restart_seq(q);
			err = append_token(q, &pv);
		}
		if (err)
			break;
		for (uint32_t q = 0; q < o.seqs; q++)
			publish_attention(q, &pv);
		note_occupancy(budget_pages(&pv));
		apply_commands(&pv);
		st.steps++;
		uint64_t step_ns = md_now_ns() - step_t0;
		st.step_ns_total += step_ns;
		if (step_ns > st.step_ns_max)
			st.step_ns_max = step_ns;
		if (step_ns > 50000000u)
			st.slow_steps++;
		if (period) {
			next_step += period;
			uint64_t t = md_now_ns();
			if (next_step > t) {
				struct timespec ts = { (time_t)((next_step - t) / 1000000000u),
						       (long)((next_step - t) % 1000000000u) };
				nanosleep(&ts, NULL);
			} else {
				next_step = t;
			}
		}
	}
	double wall = (double)(md_now_ns() - t0) / 1e9;
	if (o.dump)
		dump_pages(o.dump);
	/* Hold: stay attached, unchanged, so the daemon's view can be compared. */
	for (uint64_t end = md_now_ns() + (uint64_t)o.hold_ms * 1000000u; !g_stop && md_now_ns() < end;) {
		md_client_check(cl, o.hb_timeout_ms);
		struct timespec ts = { 0, 10000000 };
		nanosleep(&ts, NULL);
	}

	struct md_client_counters cc;
	md_client_counters(cl, &cc);
	uint64_t budget = budget_pages(&pv);
	if (o.json) {
		printf("{\"engine_name\": \"%s\", \"steps\": %" PRIu64 ", \"evictions\": %" PRIu64
		       ", \"pinned_evicted\": %" PRIu64 ", \"protected_evicted\": %" PRIu64
		       ", \"stale_applied\": %" PRIu64 ", \"double_freed\": %" PRIu64
		       ", \"over_budget_max_pages\": %" PRIu64 ", \"max_occupancy_pages\": %" PRIu64
		       ", \"budget_pages\": %" PRIu64 ", \"evictions_by_region\": {",
		       o.name, st.steps, st.evictions, st.pinned_evicted, st.protected_evicted,
		       st.stale_applied, st.double_freed, st.over_budget_max_pages, st.max_occupancy,
		       budget);
		for (uint32_t r = 0; r < MD_REGION_BUILTIN_COUNT; r++)
			printf("%s\"%s\": %" PRIu64, r ? ", " : "", md_region_builtin_name(r), st.by_region[r]);
		printf("}, \"reattaches\": %" PRIu64 ", \"attn_dropped\": %" PRIu64
		       ", \"lifecycle_dropped\": %" PRIu64 ", \"resyncs\": %" PRIu64
		       ", \"cmds_stale\": %" PRIu64 ", \"local_evictions\": %" PRIu64
		       ", \"wait_timeouts\": %" PRIu64 ", \"seq_restarts\": %" PRIu64
		       ", \"attached\": %s, \"wall_s\": %.3f, \"step_us_mean\": %.2f"
		       ", \"step_us_max\": %.1f, \"slow_steps\": %" PRIu64
		       ", \"cmd_latency_ns\": {\"count\": %" PRIu64 ", \"p50\": %" PRIu64
		       ", \"p99\": %" PRIu64 ", \"max\": %" PRIu64 "}}\n",
		       st.reattaches, cc.attn_dropped, cc.lifecycle_dropped, cc.resyncs, cc.cmds_stale,
		       st.local_evictions, st.wait_timeouts, st.seq_restarts,
		       md_client_attached(cl) ? "true" : "false", wall,
		       st.steps ? (double)st.step_ns_total / 1e3 / (double)st.steps : 0.0,
		       (double)st.step_ns_max / 1e3, st.slow_steps, cmd_lat.count,
		       md_lathist_quantile(&cmd_lat, 0.50), md_lathist_quantile(&cmd_lat, 0.99),
		       cmd_lat.max);
	} else {
		printf("%s: %" PRIu64 " steps in %.2f s, %" PRIu64 " evictions (", o.name, st.steps,
		       wall, st.evictions);
		int any = 0;
		for (uint32_t r = 0; r < MD_REGION_BUILTIN_COUNT; r++)
			if (st.by_region[r]) {
				printf("%s%s %" PRIu64, any ? ", " : "", md_region_builtin_name(r), st.by_region[r]);
				any = 1;
			}
		printf(")\n  pinned_evicted %" PRIu64 " stale_applied %" PRIu64 " double_freed %" PRIu64
		       " over_budget_max_pages %" PRIu64 " reattaches %" PRIu64 " attn_dropped %" PRIu64
		       "\n", st.pinned_evicted, st.stale_applied, st.double_freed,
		       st.over_budget_max_pages, st.reattaches, cc.attn_dropped);
	}
	md_client_destroy(cl);
	int bad = err || st.pinned_evicted || st.stale_applied || st.double_freed;
	return bad ? 3 : 0;
}
