/*
 * check_llama.c — the llama.cpp adapter on the real model (SmolLM2-135M Q4_1):
 * transparency, cell map against llama.cpp's own cell dump, attention row sums,
 * eviction under a budget with memdecayd, fail-open and reattach, region labels.
 * Needs MEMDECAY_LLAMA_MODEL and MEMDECAYD (set by tests/llama.cmake).
 */
#include <check.h>
#include "test_util.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <time.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <llama.h>

#include "md_llama.h"
#include "md_llama_chat.h"
#include "memdecay_abi.h"

#include "llama_fixture.h"

static void setup_model(void)
{
	fixture_load_model("MEMDECAY_LLAMA_MODEL");
}

static struct llama_context_params ctx_params(uint32_t n_ctx, uint32_t n_seq)
{
	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = n_ctx;
	cp.n_batch = cp.n_ubatch = 256;
	cp.n_seq_max = n_seq;
	cp.n_threads = cp.n_threads_batch = 1;
	cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
	cp.kv_unified = true;
	return cp;
}

static llama_token *tokenize(const char *text, uint32_t *n)
{
	llama_token *t;
	ck_assert_int_eq(md_llama_tokenize(g_model, text, 0, &t, n), 0);
	return t;
}

/* ---- a private memdecayd ---- */

struct daemon {
	pid_t pid;
	char dir[64];
	char sock[96];
};

static int socket_answers(const char *path)
{
	struct sockaddr_un sa;
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	int ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

static void daemon_spawn(struct daemon *d)
{
	const char *bin = getenv("MEMDECAYD");
	ck_assert_msg(bin && access(bin, X_OK) == 0, "MEMDECAYD not set or not executable");
	pid_t parent = getpid();
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* A failing case ends its forked process: take the daemon along. */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
			_exit(127);
		execl(bin, bin, "--socket", d->sock, "--foreground", "--log-level", "error",
		      (char *)NULL);
		_exit(127);
	}
	d->pid = pid;
	for (int i = 0; i < 500 && !socket_answers(d->sock); i++)
		usleep(10000);
	ck_assert_msg(socket_answers(d->sock), "memdecayd did not open its socket");
}

static void daemon_start(struct daemon *d)
{
	snprintf(d->dir, sizeof(d->dir), "/tmp/md-llama-test-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(d->dir));
	snprintf(d->sock, sizeof(d->sock), "%s/d.sock", d->dir);
	daemon_spawn(d);
}

static void daemon_kill(struct daemon *d, int sig)
{
	if (d->pid > 0) {
		kill(d->pid, sig);
		waitpid(d->pid, NULL, 0);
		d->pid = 0;
	}
}

static void daemon_stop(struct daemon *d)
{
	daemon_kill(d, SIGTERM);
	unlink(d->sock);
	rmdir(d->dir);
}

/* ---- an adapter on a context ---- */

struct rig {
	md_llama *ad;
	struct llama_context *ctx;
};

/* A private memdecayd, and an adapter configuration attached to it under one
 * policy and per-sequence budget. */
static void daemon_config(struct daemon *d, struct md_llama_config *cfg, const char *policy,
			  int64_t budget_sequence_tokens)
{
	daemon_start(d);
	md_llama_config_init(cfg);
	cfg->socket_path = d->sock;
	cfg->policy = policy;
	cfg->budget_sequence_tokens = budget_sequence_tokens;
}

static void rig_open(struct rig *r, const struct md_llama_config *cfg, uint32_t n_ctx,
		     uint32_t n_seq)
{
	struct llama_context_params cp = ctx_params(n_ctx, n_seq);
	ck_assert_int_eq(md_llama_create(cfg, g_model, &r->ad), 0);
	md_llama_context_params(r->ad, &cp);
	r->ctx = llama_init_from_model(g_model, cp);
	ck_assert_ptr_nonnull(r->ctx);
	ck_assert_int_eq(md_llama_bind(r->ad, r->ctx), 0);
}

static void rig_close(struct rig *r)
{
	md_llama_destroy(r->ad);
	llama_free(r->ctx);
}

static void feed_text(struct rig *r, llama_seq_id seq, const char *text, int region)
{
	uint32_t n;
	llama_token *t = tokenize(text, &n);
	uint8_t *reg = malloc(n);
	memset(reg, region, n);
	ck_assert_int_eq(md_llama_decode(r->ad, seq, t, reg, n, 1), 0);
	free(reg);
	free(t);
}

static llama_token greedy(struct llama_context *ctx)
{
	const float *l = llama_get_logits_ith(ctx, -1);
	int32_t nv = llama_vocab_n_tokens(llama_model_get_vocab(g_model));
	llama_token best = 0;
	for (int32_t i = 1; i < nv; i++)
		if (l[i] > l[best])
			best = i;
	return best;
}

static const char *k_system =
	"<|im_start|>system\nYou are Atlas, a travel agent. The account code is NW-4471.<|im_end|>\n";
static const char *k_user =
	"<|im_start|>user\nPlan a trip to Lisbon for my daughter Marisol and me. What is the "
	"account code?<|im_end|>\n<|im_start|>assistant\n";

/* 1. With a budget larger than the trace, the adapter changes nothing. */
START_TEST(test_transparency)
{
	enum { N_GEN = 32 };
	llama_token plain[N_GEN], adapted[N_GEN];
	uint32_t n;
	char *prompt = malloc(strlen(k_system) + strlen(k_user) + 1);
	strcpy(prompt, k_system);
	strcat(prompt, k_user);
	llama_token *t = tokenize(prompt, &n);

	/* plain llama.cpp, same settings, no cb_eval */
	struct llama_context_params cp = ctx_params(512, 1);
	struct llama_context *ctx = llama_init_from_model(g_model, cp);
	struct llama_batch b = llama_batch_init(256, 0, 1);
	b.n_tokens = (int32_t)n;
	for (uint32_t i = 0; i < n; i++) {
		b.token[i] = t[i];
		b.pos[i] = (llama_pos)i;
		b.n_seq_id[i] = 1;
		b.seq_id[i][0] = 0;
		b.logits[i] = i == n - 1;
	}
	ck_assert_int_eq(llama_decode(ctx, b), 0);
	for (int k = 0; k < N_GEN; k++) {
		plain[k] = greedy(ctx);
		b.n_tokens = 1;
		b.token[0] = plain[k];
		b.pos[0] = (llama_pos)(n + (uint32_t)k);
		b.logits[0] = 1;
		ck_assert_int_eq(llama_decode(ctx, b), 0);
	}
	llama_batch_free(b);
	llama_free(ctx);

	/* adapter attached to a daemon, budget far above the trace */
	struct daemon d;
	struct md_llama_config cfg;
	daemon_config(&d, &cfg, "memdecay", 4096);
	struct rig r;
	rig_open(&r, &cfg, 512, 1);
	uint8_t *reg = malloc(n);
	memset(reg, MD_REGION_USER, n);
	ck_assert_int_eq(md_llama_decode(r.ad, 0, t, reg, n, 1), 0);
	uint8_t asst = MD_REGION_ASSISTANT;
	for (int k = 0; k < N_GEN; k++) {
		adapted[k] = greedy(r.ctx);
		ck_assert_int_eq(md_llama_decode(r.ad, 0, &adapted[k], &asst, 1, 1), 0);
	}
	struct md_llama_stats st;
	md_llama_get_stats(r.ad, &st);
	ck_assert_int_eq(st.attached, 1);
	ck_assert_uint_gt(st.layers_observed, 0);
	ck_assert_uint_eq(st.evictions, 0);
	for (int k = 0; k < N_GEN; k++)
		ck_assert_msg(plain[k] == adapted[k], "token %d: plain %d, adapter %d", k, plain[k],
			      adapted[k]);
	rig_close(&r);
	daemon_stop(&d);
	free(reg);
	free(t);
	free(prompt);
}
END_TEST

/* ---- ground truth: llama.cpp's own cell dump (LLAMA_KV_CACHE_DEBUG=3), printed
 * in find_slot before each ubatch is placed, i.e. while the adapter's map must
 * still describe the cache as it is. ---- */

struct truth {
	md_llama *ad;
	int state;       /* 0 idle, 1 expect seq dump, 2 expect pos dump */
	char *seqs;      /* per cell: '.', digit, 'M' */
	uint32_t n_cells;
	uint64_t compared, mismatches, shared;
	char first_bad[160];
};
static struct truth g_truth;

static void truth_compare_pos(struct truth *tr, const char *text)
{
	uint32_t c = 0;
	const char *p = text;
	while (*p && c < tr->n_cells) {
		while (*p == '\n')
			p++;
		if (!*p)
			break;
		if (*p == ' ' && p[1] == '*') {  /* " *" marks every 256 cells */
			p += 2;
			continue;
		}
		char field[6] = {0};
		memcpy(field, p, 5);
		p += 5;
		llama_pos tpos = -1;
		if (field[0] != '.')
			tpos = (llama_pos)atoi(field);
		char ts = tr->seqs[c];
		llama_seq_id aseq;
		llama_pos apos;
		md_llama_cell(tr->ad, c, &aseq, &apos);
		int ok;
		if (ts == '.')
			ok = aseq == -1;
		else if (ts == 'M') {
			ok = aseq >= 0 && apos == tpos;  /* shared by a probe copy */
			tr->shared++;
		} else
			ok = aseq == ts - '0' && apos == tpos;
		if (!ok && !tr->mismatches)
			snprintf(tr->first_bad, sizeof(tr->first_bad),
				 "cell %u: llama.cpp seq %c pos %d, adapter seq %d pos %d", c, ts,
				 tpos, aseq, apos);
		tr->mismatches += !ok;
		c++;
	}
	tr->compared++;
}

static void truth_log(enum ggml_log_level level, const char *text, void *user)
{
	struct truth *tr = user;
	(void)level;
	if (!tr->ad)
		return;
	if (strstr(text, "find_slot: stream[") && strstr(text, ", n = ")) {
		tr->state = 1;
		return;
	}
	if (tr->state == 1 && text[0] == '\n') {
		uint32_t c = 0;
		for (const char *p = text; *p && c < tr->n_cells; p++) {
			if (*p == '.' || *p == 'M' || isdigit((unsigned char)*p))
				tr->seqs[c++] = *p;
		}
		tr->state = 2;
		return;
	}
	if (tr->state == 2 && text[0] == '\n') {
		truth_compare_pos(tr, text);
		tr->state = 0;
	}
}

/* 2. The rebuilt cell map equals llama.cpp's at every ubatch of a run with two
 * sequences, evictions, hole refills and a probe copy; attention rows sum to 1
 * over the live cells of the querying sequence. */
START_TEST(test_cell_map_truth)
{
	setenv("LLAMA_KV_CACHE_DEBUG", "3", 1);
	struct md_llama_config cfg;
	md_llama_config_init(&cfg);
	cfg.attach = 0;
	cfg.max_seqs = 2;
	cfg.check_rows = 1;
	struct rig r;
	memset(&g_truth, 0, sizeof(g_truth));
	rig_open(&r, &cfg, 256, 3);
	g_truth.n_cells = md_llama_n_cells(r.ad);
	g_truth.seqs = calloc(g_truth.n_cells, 1);
	g_truth.ad = r.ad;
	llama_log_set(truth_log, &g_truth);

	uint32_t n;
	llama_token *t = tokenize("The quick brown fox jumps over the lazy dog while the "
				  "travel agent books a flight to Lisbon and a hotel in Alfama "
				  "for five nights with breakfast and a view of the river Tagus.",
				  &n);
	uint8_t reg[64];
	memset(reg, MD_REGION_USER, sizeof(reg));
	unsigned seed = 12345;
	uint64_t decodes = 0, evictions = 0;
	for (int step = 0; step < 60; step++) {
		llama_seq_id seq = step % 2;
		seed = seed * 1103515245u + 12345u;
		uint32_t k = 1 + (seed >> 16) % 20;
		if (k > n)
			k = n;
		ck_assert_int_eq(md_llama_decode(r.ad, seq, t, reg, k, 0), 0);
		decodes++;
		/* keep each sequence near 90 tokens: evict random full pages */
		while (md_llama_live_tokens(r.ad, seq) > 90) {
			seed = seed * 1103515245u + 12345u;
			llama_pos pos_max = md_llama_pos_next(r.ad, seq) - 1;
			llama_pos pos = (llama_pos)((seed >> 8) % (uint32_t)(pos_max + 1));
			if (md_llama_evict_page(r.ad, seq, pos) == 0)
				evictions++;
		}
		if (step == 30 || step == 45) {
			/* a probe on a copy: shared cells, then its own, then dropped */
			ck_assert_int_eq(md_llama_seq_copy(r.ad, 0, 2), 0);
			ck_assert_int_eq(md_llama_decode(r.ad, 2, t, NULL, 7, 1), 0);
			ck_assert_int_eq(md_llama_decode(r.ad, 2, t, NULL, 1, 1), 0);
			ck_assert_int_eq(md_llama_seq_truncate(r.ad, 2, 0), 0);
			decodes += 2;
		}
	}
	llama_log_set(log_quiet, NULL);
	unsetenv("LLAMA_KV_CACHE_DEBUG");
	struct md_llama_stats st;
	md_llama_get_stats(r.ad, &st);
	ck_assert_uint_gt(evictions, 10);
	ck_assert_uint_eq(g_truth.compared, decodes);
	ck_assert_uint_gt(g_truth.shared, 0);
	ck_assert_msg(g_truth.mismatches == 0, "%llu mismatches; first %s",
		      (unsigned long long)g_truth.mismatches, g_truth.first_bad);
	ck_assert_uint_eq(st.map_missing, 0);
	ck_assert_msg(st.row_sum_max_err < 1e-3, "row sum error %g", st.row_sum_max_err);
	ck_assert_msg(st.row_dead_mass_max < 1e-6, "mass on other cells %g", st.row_dead_mass_max);
	ck_assert_uint_eq(st.layers_observed, (uint64_t)st.ubatches * 30 - 4 * 30);
	/* positions continue at pos_max + 1 across holes */
	for (llama_seq_id s = 0; s < 2; s++)
		ck_assert_int_eq(llama_memory_seq_pos_max(llama_get_memory(r.ctx), s),
				 md_llama_pos_next(r.ad, s) - 1);
	g_truth.ad = NULL;
	free(g_truth.seqs);
	free(t);
	rig_close(&r);
}
END_TEST

/* 3. Under a tight budget with memdecayd: occupancy <= budget + one page, system
 * pages never evicted, decoding continues, positions continue. */
START_TEST(test_eviction_budget)
{
	struct daemon d;
	struct md_llama_config cfg;
	daemon_config(&d, &cfg, "memdecay", 128);
	struct rig r;
	rig_open(&r, &cfg, 512, 1);
	feed_text(&r, 0, k_system, MD_REGION_SYSTEM);
	llama_pos sys_end = md_llama_pos_next(r.ad, 0);
	uint32_t n;
	llama_token *t = tokenize("<|im_start|>user\nTell me about the museums of Lisbon, the "
				  "trams, the river, the food and the music.<|im_end|>\n", &n);
	uint8_t reg[256];
	uint32_t peak = 0;
	for (int round = 0; round < 10; round++) {
		memset(reg, round % 2 ? MD_REGION_TOOL_OUT : MD_REGION_USER, sizeof(reg));
		ck_assert_int_eq(md_llama_decode(r.ad, 0, t, reg, n, 1), 0);
		uint8_t asst = MD_REGION_ASSISTANT;
		for (int k = 0; k < 8; k++) {
			llama_token g = greedy(r.ctx);
			ck_assert_int_eq(md_llama_decode(r.ad, 0, &g, &asst, 1, 1), 0);
			uint32_t live = md_llama_live_tokens(r.ad, 0);
			if (live > peak)
				peak = live;
		}
	}
	struct md_llama_stats st;
	md_llama_get_stats(r.ad, &st);
	ck_assert_int_eq(st.attached, 1);
	ck_assert_uint_gt(st.evictions, 5);
	ck_assert_uint_eq(st.evictions_by_region[MD_REGION_SYSTEM], 0);
	ck_assert_msg(st.peak_live_tokens <= 128 + 16, "peak %llu",
		      (unsigned long long)st.peak_live_tokens);
	ck_assert_uint_le(peak, 128 + 16);
	ck_assert_uint_eq(st.budget_wait_timeouts, 0);
	for (llama_pos p = 0; p < sys_end; p++)
		ck_assert_int_eq(md_llama_token_region(r.ad, 0, p), MD_REGION_SYSTEM);
	llama_pos next = md_llama_pos_next(r.ad, 0);
	ck_assert_int_eq(next, (llama_pos)(sys_end + 10 * (n + 8)));
	ck_assert_int_eq(llama_memory_seq_pos_max(llama_get_memory(r.ctx), 0), next - 1);
	free(t);
	rig_close(&r);
	daemon_stop(&d);
}
END_TEST

/* 3b. Two sequences in one context, each its own page set under the same daemon. */
START_TEST(test_eviction_two_sequences)
{
	struct daemon d;
	struct md_llama_config cfg;
	daemon_config(&d, &cfg, "memdecay", 96);
	cfg.max_seqs = 2;
	struct rig r;
	rig_open(&r, &cfg, 1024, 2);
	for (llama_seq_id s = 0; s < 2; s++)
		feed_text(&r, s, k_system, MD_REGION_SYSTEM);
	uint32_t n;
	llama_token *t = tokenize("<|im_start|>user\nWhich tram goes to Alfama?<|im_end|>\n", &n);
	uint8_t reg[64];
	memset(reg, MD_REGION_USER, sizeof(reg));
	for (int round = 0; round < 30; round++) {
		for (llama_seq_id s = 0; s < 2; s++) {
			ck_assert_int_eq(md_llama_decode(r.ad, s, t, reg, n, 0), 0);
			ck_assert_uint_le(md_llama_live_tokens(r.ad, s), 96 + 16);
		}
	}
	struct md_llama_stats st;
	md_llama_get_stats(r.ad, &st);
	ck_assert_int_eq(st.attached, 1);
	ck_assert_uint_eq(st.evictions_by_region[MD_REGION_SYSTEM], 0);
	for (llama_seq_id s = 0; s < 2; s++) {
		llama_pos next = md_llama_pos_next(r.ad, s);
		/* both sequences were trimmed: far more fed than live */
		ck_assert_uint_lt(md_llama_live_tokens(r.ad, s), (uint32_t)next - 100);
		ck_assert_int_eq(llama_memory_seq_pos_max(llama_get_memory(r.ctx), s), next - 1);
		ck_assert_int_eq(md_llama_token_region(r.ad, s, 0), MD_REGION_SYSTEM);
	}
	free(t);
	rig_close(&r);
	daemon_stop(&d);
}
END_TEST

/* 3c. A budget below the pinned system prompt: nothing pinned goes, decoding
 * does not stall on the daemon at every step, occupancy stays at what the
 * daemon can reach (pinned + tail + protected page) plus one page. */
START_TEST(test_eviction_unreachable_budget)
{
	struct daemon d;
	struct md_llama_config cfg;
	daemon_config(&d, &cfg, "recency", 16);
	struct rig r;
	rig_open(&r, &cfg, 512, 1);
	feed_text(&r, 0, k_system, MD_REGION_SYSTEM);
	llama_pos sys_end = md_llama_pos_next(r.ad, 0);
	uint32_t sys_pages = ((uint32_t)sys_end + 15) / 16;
	uint8_t asst = MD_REGION_ASSISTANT;
	for (int k = 0; k < 120; k++) {
		llama_token g = greedy(r.ctx);
		ck_assert_int_eq(md_llama_decode(r.ad, 0, &g, &asst, 1, 1), 0);
		/* pinned pages + protected + tail + one page in flight */
		ck_assert_uint_le(md_llama_live_tokens(r.ad, 0), (sys_pages + 3) * 16);
	}
	struct md_llama_stats st;
	md_llama_get_stats(r.ad, &st);
	ck_assert_uint_gt(st.evictions, 3);
	ck_assert_uint_eq(st.evictions_by_region[MD_REGION_SYSTEM], 0);
	ck_assert_uint_le(st.budget_wait_timeouts, 1);
	for (llama_pos p = 0; p < sys_end; p++)
		ck_assert_int_eq(md_llama_token_region(r.ad, 0, p), MD_REGION_SYSTEM);
	rig_close(&r);
	daemon_stop(&d);
}
END_TEST

/* 4a. No daemon at all: decoding goes on, detached. */
START_TEST(test_fail_open_no_daemon)
{
	struct md_llama_config cfg;
	md_llama_config_init(&cfg);
	cfg.socket_path = "/tmp/md-llama-test-no-such-dir/none.sock";
	cfg.budget_sequence_tokens = 64;
	cfg.quiet = 1;
	struct rig r;
	rig_open(&r, &cfg, 512, 1);
	feed_text(&r, 0, k_system, MD_REGION_SYSTEM);
	for (int i = 0; i < 3; i++)
		feed_text(&r, 0, k_user, MD_REGION_USER);
	uint8_t asst = MD_REGION_ASSISTANT;
	for (int k = 0; k < 8; k++) {
		llama_token g = greedy(r.ctx);
		ck_assert_int_eq(md_llama_decode(r.ad, 0, &g, &asst, 1, 1), 0);
	}
	struct md_llama_stats st;
	md_llama_get_stats(r.ad, &st);
	ck_assert_int_eq(st.attached, 0);
	ck_assert_uint_ge(st.detaches, 1);
	ck_assert_uint_eq(st.evictions, 0);
	ck_assert_uint_gt(md_llama_live_tokens(r.ad, 0), 64);
	ck_assert_uint_eq(md_llama_live_tokens(r.ad, 0), (uint32_t)md_llama_pos_next(r.ad, 0));
	rig_close(&r);
}
END_TEST

/* 4b. Killing the daemon mid-trace lets the run finish; a new daemon is reattached
 * and evicts again. */
START_TEST(test_fail_open_kill_reattach)
{
	struct daemon d;
	struct md_llama_config cfg;
	daemon_config(&d, &cfg, "recency", 96);
	cfg.quiet = 1;
	struct rig r;
	rig_open(&r, &cfg, 1024, 1);
	feed_text(&r, 0, k_system, MD_REGION_SYSTEM);
	uint32_t n;
	llama_token *t = tokenize("<|im_start|>user\nAnd what about the trams?<|im_end|>\n", &n);
	uint8_t reg[64];
	memset(reg, MD_REGION_USER, sizeof(reg));
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(md_llama_decode(r.ad, 0, t, reg, n, 0), 0);
	struct md_llama_stats st;
	md_llama_get_stats(r.ad, &st);
	uint64_t ev_before = st.evictions;
	ck_assert_uint_gt(ev_before, 0);

	daemon_kill(&d, SIGKILL);
	for (int i = 0; i < 8; i++) {
		ck_assert_int_eq(md_llama_decode(r.ad, 0, t, reg, n, 0), 0);
		usleep(20000);
	}
	md_llama_get_stats(r.ad, &st);
	ck_assert_int_eq(st.attached, 0);
	ck_assert_uint_ge(st.detaches, 1);
	uint64_t ev_dead = st.evictions;

	unlink(d.sock);
	daemon_spawn(&d);
	for (int i = 0; i < 300 && !st.attached; i++) {
		ck_assert_int_eq(md_llama_decode(r.ad, 0, t, reg, 1, 0), 0);
		usleep(10000);
		md_llama_get_stats(r.ad, &st);
	}
	ck_assert_int_eq(st.attached, 1);
	ck_assert_uint_ge(st.reattaches, 1);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(md_llama_decode(r.ad, 0, t, reg, n, 0), 0);
	md_llama_get_stats(r.ad, &st);
	ck_assert_uint_gt(st.evictions, ev_dead);
	ck_assert_uint_le(md_llama_live_tokens(r.ad, 0), 96 + 16);
	ck_assert_uint_eq(st.evictions_by_region[MD_REGION_SYSTEM], 0);
	free(t);
	rig_close(&r);
	daemon_stop(&d);
}
END_TEST

/* 5. Region labels: each message's span through the model's chat template, role
 * headers included; an explicit region wins. */
START_TEST(test_labels)
{
	struct { const char *role, *content, *region; int want; } msgs[] = {
		{"system", "You are Atlas.", NULL, MD_REGION_SYSTEM},
		{"user", "Find me a hotel.", NULL, MD_REGION_USER},
		{"assistant", "I should search Alfama first.", "scratchpad", MD_REGION_SCRATCHPAD},
		{"assistant", "{\"tool\": \"search_hotels\"}", "tool_in", MD_REGION_TOOL_IN},
		{"tool", "Casa Azul, 95 euros.", NULL, MD_REGION_TOOL_OUT},
		{"user", "Guide: the museum is closed on Tuesdays.", "retrieval", MD_REGION_RETRIEVAL},
		{"assistant", "Casa Azul it is.", NULL, MD_REGION_ASSISTANT},
	};
	enum { NM = sizeof(msgs) / sizeof(msgs[0]) };
	struct md_llama_config cfg;
	md_llama_config_init(&cfg);
	cfg.attach = 0;
	struct rig r;
	rig_open(&r, &cfg, 512, 1);
	struct md_llama_chat chat;
	ck_assert_int_eq(md_llama_chat_init(&chat, g_model, NULL), 0);
	const struct llama_vocab *vocab = llama_model_get_vocab(g_model);
	llama_token im_start;
	uint32_t one;
	llama_token *tt = tokenize("<|im_start|>", &one);
	ck_assert_uint_eq(one, 1);
	im_start = tt[0];
	free(tt);
	llama_pos span_start[NM + 1];
	char *joined = calloc(1, 1);
	for (int i = 0; i < NM; i++) {
		int region = md_llama_region_of(msgs[i].role, msgs[i].region);
		ck_assert_int_eq(region, msgs[i].want);
		char *delta;
		ck_assert_int_eq(md_llama_chat_push(&chat, msgs[i].role, msgs[i].content, &delta), 0);
		char head[64];
		snprintf(head, sizeof(head), "<|im_start|>%s\n", msgs[i].role);
		ck_assert_msg(!strncmp(delta, head, strlen(head)), "span %d starts '%s'", i, delta);
		ck_assert_ptr_nonnull(strstr(delta, msgs[i].content));
		joined = realloc(joined, strlen(joined) + strlen(delta) + 1);
		strcat(joined, delta);
		span_start[i] = md_llama_pos_next(r.ad, 0);
		feed_text(&r, 0, delta, region);
		free(delta);
	}
	span_start[NM] = md_llama_pos_next(r.ad, 0);
	ck_assert_str_eq(joined, chat.text);
	/* the expected spans, token by token */
	for (int i = 0; i < NM; i++) {
		for (llama_pos p = span_start[i]; p < span_start[i + 1]; p++)
			ck_assert_msg(md_llama_token_region(r.ad, 0, p) == msgs[i].want,
				      "pos %d (message %d) region %d, want %d", p, i,
				      md_llama_token_region(r.ad, 0, p), msgs[i].want);
	}
	/* the role header's first token is <|im_start|> and carries its message's region */
	uint32_t n;
	llama_token *all = tokenize(chat.text, &n);
	ck_assert_uint_eq(n, (uint32_t)span_start[NM]);
	for (int i = 0; i < NM; i++)
		ck_assert_int_eq(all[span_start[i]], im_start);
	(void)vocab;
	free(all);
	free(joined);
	md_llama_chat_free(&chat);
	rig_close(&r);
}
END_TEST

/* ---- the host tier (docs/llama.md, "Host tier") ---- */

struct tier_run {
	struct rig r;
	llama_pos sys_end, next;
};

/* Another sequence's tokens into the holes the evictions left, so that a
 * restore cannot land in its page's old cells.  Another sequence: tokens of the
 * evicted page's own sequence decoded while it is away never attend it, so no
 * reference that kept the page could have their K/V. */
static void tier_filler(struct rig *r)
{
	uint32_t n;
	llama_token *t = tokenize("<|im_start|>user\nAnd the trams in Alfama?<|im_end|>\n", &n);
	ck_assert_int_eq(md_llama_decode(r->ad, 1, t, NULL, n, 0), 0);
	free(t);
}

/* The same prompt into an adapter (no daemon), the pages at evict[] evicted
 * in order (-1 ends), more text decoded, restore[] restored (-1 ends); then
 * one token's logits into out. */
static void tier_run(struct tier_run *t, uint32_t tier_mb, const llama_pos *evict,
		     const llama_pos *restore, float *out, int32_t nv)
{
	struct md_llama_config cfg;
	md_llama_config_init(&cfg);
	cfg.attach = 0;
	cfg.tier_mb = tier_mb;
	rig_open(&t->r, &cfg, 512, 2);
	feed_text(&t->r, 0, k_system, MD_REGION_SYSTEM);
	t->sys_end = md_llama_pos_next(t->r.ad, 0);
	for (int i = 0; i < 4; i++)
		feed_text(&t->r, 0, k_user, MD_REGION_USER);
	for (int i = 0; evict[i] >= 0; i++)
		ck_assert_int_eq(md_llama_evict_page(t->r.ad, 0, evict[i]), 0);
	tier_filler(&t->r);
	for (int i = 0; restore[i] >= 0; i++)
		ck_assert_int_eq(md_llama_restore_page(t->r.ad, 0, restore[i]), 0);
	feed_text(&t->r, 0, "<|im_start|>assistant\n", MD_REGION_ASSISTANT);
	memcpy(out, llama_get_logits_ith(t->r.ctx, -1), sizeof(float) * (size_t)nv);
	t->next = md_llama_pos_next(t->r.ad, 0);
}

/* The cell holding (seq, pos) in the adapter's map; n_cells when none. */
static uint32_t cell_of(const md_llama *ad, llama_seq_id seq, llama_pos pos)
{
	uint32_t c;
	for (c = 0; c < md_llama_n_cells(ad); c++) {
		llama_seq_id s;
		llama_pos p;
		md_llama_cell(ad, c, &s, &p);
		if (s == seq && p == pos)
			break;
	}
	return c;
}

static uint64_t md_now_ns_test(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double max_abs_diff(const float *x, const float *y, int32_t n)
{
	double m = 0;
	for (int32_t i = 0; i < n; i++) {
		double d = fabs((double)x[i] - (double)y[i]);
		if (d > m)
			m = d;
	}
	return m;
}

static int32_t argmax(const float *x, int32_t n)
{
	int32_t b = 0;
	for (int32_t i = 1; i < n; i++)
		if (x[i] > x[b])
			b = i;
	return b;
}

/* 6. A page evicted to the tier and restored gives the logits of a context
 * that never evicted it; its cells are back at their positions (llama.cpp's
 * cell dump against the adapter's map, which places them); the tier holds no
 * more than its MiB; a page that did not fit is gone for good. */
START_TEST(test_tier)
{
	const double tol = 1e-3;  /* logits are O(10); measured differences below */
	int32_t nv = llama_vocab_n_tokens(llama_model_get_vocab(g_model));
	float *l_tier = malloc(sizeof(float) * (size_t)nv);
	float *l_ref = malloc(sizeof(float) * (size_t)nv);
	float *l_lost = malloc(sizeof(float) * (size_t)nv);
	/* system ends near 30: pages 2, 4, 6 (positions 32.., 64.., 96..) are user */
	const llama_pos ev3[] = {32, 64, 96, -1}, ev2[] = {64, 96, -1};
	const llama_pos none[] = {-1};

	/* 1 MiB holds two SmolLM2 pages (~360 KiB each): 32 and 64 kept, 96 freed.
	 * llama.cpp dumps its cells at every find_slot (the restore's own too),
	 * compared with the adapter's map as in test_cell_map_truth. */
	setenv("LLAMA_KV_CACHE_DEBUG", "3", 1);
	memset(&g_truth, 0, sizeof(g_truth));
	struct tier_run a;
	struct md_llama_stats st;
	{
		struct md_llama_config cfg;
		md_llama_config_init(&cfg);
		cfg.attach = 0;
		cfg.tier_mb = 1;
		rig_open(&a.r, &cfg, 512, 2);
		g_truth.n_cells = md_llama_n_cells(a.r.ad);
		g_truth.seqs = calloc(g_truth.n_cells, 1);
		g_truth.ad = a.r.ad;
		llama_log_set(truth_log, &g_truth);
		ck_assert_int_eq(md_llama_tier_seq(a.r.ad), 2);
		feed_text(&a.r, 0, k_system, MD_REGION_SYSTEM);
		a.sys_end = md_llama_pos_next(a.r.ad, 0);
		ck_assert_int_lt(a.sys_end, 32);
		for (int i = 0; i < 4; i++)
			feed_text(&a.r, 0, k_user, MD_REGION_USER);
		uint32_t cell_before = cell_of(a.r.ad, 0, 32);
		for (int i = 0; ev3[i] >= 0; i++)
			ck_assert_int_eq(md_llama_evict_page(a.r.ad, 0, ev3[i]), 0);
		md_llama_get_stats(a.r.ad, &st);
		ck_assert_int_eq(st.tier_on, 1);
		ck_assert_uint_eq(st.tier_kept, 2);
		ck_assert_uint_eq(st.tier_full, 1);
		ck_assert_uint_eq(st.tier_pages, 2);
		ck_assert_uint_le(st.tier_bytes, st.tier_cap_bytes);
		ck_assert_uint_eq(st.tier_cap_bytes, 1u << 20);
		ck_assert_int_eq(md_llama_token_region(a.r.ad, 0, 40), -1);
		tier_filler(&a.r);
		ck_assert_int_eq(md_llama_restore_page(a.r.ad, 0, 96), -ENOENT);
		uint64_t t0 = md_now_ns_test();
		ck_assert_int_eq(md_llama_restore_page(a.r.ad, 0, 32), 0);
		uint64_t t_restore = md_now_ns_test() - t0;
		/* the tokens are live again, with their regions, at their positions */
		for (llama_pos p = 32; p < 48; p++)
			ck_assert_int_eq(md_llama_token_region(a.r.ad, 0, p), MD_REGION_USER);
		/* in other cells than before (the filler took those) */
		ck_assert_uint_ne(cell_of(a.r.ad, 0, 32), cell_before);
		ck_assert_uint_lt(cell_of(a.r.ad, 0, 32), md_llama_n_cells(a.r.ad));
		llama_memory_t mem = llama_get_memory(a.r.ctx);
		ck_assert_int_eq(llama_memory_seq_pos_min(mem, 0), 0);
		ck_assert_int_eq(llama_memory_seq_pos_max(mem, 0), md_llama_pos_next(a.r.ad, 0) - 1);
		ck_assert_int_eq(llama_memory_seq_pos_min(mem, 2), -1);  /* scratch empty */
		feed_text(&a.r, 0, "<|im_start|>assistant\n", MD_REGION_ASSISTANT);
		memcpy(l_tier, llama_get_logits_ith(a.r.ctx, -1), sizeof(float) * (size_t)nv);
		a.next = md_llama_pos_next(a.r.ad, 0);
		md_llama_get_stats(a.r.ad, &st);
		ck_assert_uint_eq(st.tier_restored, 1);
		ck_assert_uint_eq(st.tier_pages, 1);
		ck_assert_uint_eq(st.tier_unmapped, 0);
		ck_assert_uint_eq(st.map_missing, 0);
		fprintf(stderr, "tier: page blob %llu bytes, cap %llu pages; save %.3f ms, "
			"restore %.3f ms (%.3f ms measured around the call)\n",
			(unsigned long long)st.tier_page_bytes, (unsigned long long)st.tier_cap_pages,
			st.tier_save_ns / 2e6, st.tier_restore_ns / 1e6, t_restore / 1e6);
	}
	llama_log_set(log_quiet, NULL);
	unsetenv("LLAMA_KV_CACHE_DEBUG");
	/* every find_slot (the restore's own included) saw the adapter's map
	 * equal llama.cpp's cells: the restored cells hold their own positions */
	ck_assert_uint_gt(g_truth.compared, 5);
	ck_assert_msg(g_truth.mismatches == 0, "%llu mismatches; first %s",
		      (unsigned long long)g_truth.mismatches, g_truth.first_bad);
	g_truth.ad = NULL;
	free(g_truth.seqs);

	/* reference: 32 never evicted; control: 32 evicted and never restored */
	struct tier_run ref, lost;
	tier_run(&ref, 0, ev2, none, l_ref, nv);
	tier_run(&lost, 0, ev3, none, l_lost, nv);
	ck_assert_int_eq(ref.next, a.next);
	double d = max_abs_diff(l_tier, l_ref, nv), d_lost = max_abs_diff(l_lost, l_ref, nv);
	fprintf(stderr, "tier: max |logit - reference| restored %.3g, never restored %.3g\n", d,
		d_lost);
	ck_assert_msg(d <= tol, "restored page: logits differ by %g (> %g)", d, tol);
	ck_assert_int_eq(argmax(l_tier, nv), argmax(l_ref, nv));
	/* the comparison can tell a missing page */
	ck_assert_msg(d_lost > 100 * tol, "a lost page moved the logits only %g", d_lost);
	rig_close(&lost.r);
	rig_close(&ref.r);
	rig_close(&a.r);
	free(l_tier);
	free(l_ref);
	free(l_lost);
}
END_TEST

/* 6b. Through memdecayd: the daemon grants the tier, evictions under a budget
 * keep pages there up to the adapter's cap (the rest are freed), and the
 * sequence's end frees them.  No restore: the adapter publishes no estimates. */
START_TEST(test_tier_daemon)
{
	struct daemon d;
	struct md_llama_config cfg;
	daemon_config(&d, &cfg, "memdecay", 128);
	cfg.tier_mb = 2;
	struct rig r;
	rig_open(&r, &cfg, 512, 1);
	feed_text(&r, 0, k_system, MD_REGION_SYSTEM);
	uint32_t n;
	llama_token *t = tokenize("<|im_start|>user\nTell me about the museums of Lisbon, the "
				  "trams, the river, the food and the music.<|im_end|>\n", &n);
	uint8_t reg[256];
	memset(reg, MD_REGION_USER, sizeof(reg));
	struct md_llama_stats st;
	for (int round = 0; round < 8; round++) {
		ck_assert_int_eq(md_llama_decode(r.ad, 0, t, reg, n, 1), 0);
		ck_assert_uint_le(md_llama_live_tokens(r.ad, 0), 128 + 16);
		md_llama_get_stats(r.ad, &st);
		ck_assert_uint_le(st.tier_pages, st.tier_cap_pages);
		ck_assert_uint_le(st.tier_bytes, st.tier_cap_bytes);
	}
	md_llama_get_stats(r.ad, &st);
	ck_assert_int_eq(st.attached, 1);
	ck_assert_int_eq(st.tier_on, 1);
	ck_assert_uint_gt(st.evictions, 5);
	ck_assert_uint_eq(st.evictions_by_region[MD_REGION_SYSTEM], 0);
	ck_assert_uint_gt(st.tier_kept, 0);
	ck_assert_uint_eq(st.tier_peak_pages, st.tier_cap_pages);
	ck_assert_uint_gt(st.tier_full, 0);
	ck_assert_uint_eq(st.tier_restored, 0);
	ck_assert_uint_eq(st.cmds_stale, 0);
	ck_assert_uint_eq(st.budget_wait_timeouts, 0);
	ck_assert_int_eq(md_llama_seq_truncate(r.ad, 0, 0), 0);
	md_llama_get_stats(r.ad, &st);
	ck_assert_uint_eq(st.tier_pages, 0);
	ck_assert_uint_eq(st.tier_bytes, 0);
	free(t);
	rig_close(&r);
	daemon_stop(&d);
}
END_TEST

static Suite *llama_suite(void)
{
	Suite *s = suite_create("llama");
	const char *only = getenv("MD_LLAMA_TEST");
	struct { const char *name; const TTest *t; } tests[] = {
		{"transparency", test_transparency},
		{"cell_map", test_cell_map_truth},
		{"eviction", test_eviction_budget},
		{"two_sequences", test_eviction_two_sequences},
		{"unreachable_budget", test_eviction_unreachable_budget},
		{"fail_open", test_fail_open_no_daemon},
		{"reattach", test_fail_open_kill_reattach},
		{"labels", test_labels},
		{"tier", test_tier},
		{"tier_daemon", test_tier_daemon},
	};
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		if (only && strcmp(only, tests[i].name))
			continue;
		TCase *tc = tcase_create(tests[i].name);
		tcase_add_unchecked_fixture(tc, setup_model, teardown_model);
		tcase_set_timeout(tc, 240);
		tcase_add_test(tc, tests[i].t);
		suite_add_tcase(s, tc);
	}
	return s;
}

int main(void)
{
	return md_test_main(llama_suite());
}
