/*
 * check_llama_gemma.c — the llama.cpp adapter on Gemma 3 270M (Q4_K_M), a model
 * with sliding-window layers (docs/llama.md, "Sliding-window layers"):
 *
 *   gemma_swa     llama.cpp keeps two KV caches for it (sliding-window layers and
 *                 full-attention layers, each with its own cell placement); the
 *                 adapter's two cell maps equal llama.cpp's own cell dumps of both
 *                 caches at every ubatch of a run past the 512-token window, with
 *                 page evictions (seq_rm) and hole refills, and after the two
 *                 caches' placements have diverged; every layer's attention rows
 *                 sum to 1 over the sequence's live cells of its own cache.
 *   gemma_labels  the Gemma chat format: every message a turn of its own, its
 *                 span's tokens all of its region, <bos> in the first span, the
 *                 end-of-turn token <end_of_turn>.
 *
 * Needs MEMDECAY_GEMMA_GGUF (tests/llama.cmake, from .deps/llama.env).
 */
#include <check.h>
#include "test_util.h"
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llama.h>

#include "md_llama.h"
#include "md_llama_chat.h"
#include "memdecay_abi.h"

#include "llama_fixture.h"

static void setup_model(void)
{
	fixture_load_model("MEMDECAY_GEMMA_GGUF");
}

static llama_token *tokenize(const char *text, int add_special, uint32_t *n)
{
	llama_token *t;
	ck_assert_int_eq(md_llama_tokenize(g_model, text, add_special, &t, n), 0);
	return t;
}

/* ---- ground truth: llama.cpp's cell dumps (LLAMA_KV_CACHE_DEBUG=3), printed in
 * find_slot of each KV cache before a ubatch is placed.  The header names the
 * cache by its window (n_swa 0: full-attention layers). ---- */

struct truth {
	md_llama *ad;
	int state;          /* 0 idle, 1 expect seq dump, 2 expect pos dump */
	int map;            /* adapter map of the dump being read */
	int map_of_swa;     /* adapter map holding the sliding-window cache */
	char *seqs;
	uint32_t n_cells;
	int32_t *pos[2];    /* last dump of each cache */
	uint64_t compared[2], mismatches, stale, diverged;
	char first_bad[200];
};
static struct truth g_truth;

static void truth_compare_pos(struct truth *tr, const char *text)
{
	uint32_t c = 0;
	const char *p = text;
	llama_pos window_start = md_llama_pos_next(tr->ad, 0) - (llama_pos)llama_model_n_swa(g_model);
	while (*p && c < tr->n_cells) {
		while (*p == '\n')
			p++;
		if (!*p)
			break;
		if (*p == ' ' && p[1] == '*') {
			p += 2;
			continue;
		}
		char field[6] = {0};
		memcpy(field, p, 5);
		p += 5;
		llama_pos tpos = field[0] == '.' ? -1 : (llama_pos)atoi(field);
		char ts = tr->seqs[c];
		llama_seq_id aseq;
		llama_pos apos;
		md_llama_cell_in(tr->ad, (uint32_t)tr->map, c, &aseq, &apos);
		int ok;
		if (ts == '.') {
			/* llama.cpp purged a cell that slid out of the window without
			 * writing it again: the adapter may still hold it (no mass) */
			ok = aseq == -1 || (tr->map == tr->map_of_swa && apos < window_start);
			tr->stale += ok && aseq != -1;
		} else if (ts == 'M') {
			ok = aseq >= 0 && apos == tpos;
		} else {
			ok = aseq == ts - '0' && apos == tpos;
		}
		if (!ok && !tr->mismatches)
			snprintf(tr->first_bad, sizeof(tr->first_bad),
				 "map %d cell %u: llama.cpp seq %c pos %d, adapter seq %d pos %d "
				 "(window from %d)", tr->map, c, ts, tpos, aseq, apos, window_start);
		tr->mismatches += !ok;
		tr->pos[tr->map][c] = tpos;
		c++;
	}
	tr->compared[tr->map]++;
	/* both caches dumped for this ubatch: did their placements differ? */
	if (tr->compared[0] == tr->compared[1] &&
	    memcmp(tr->pos[0], tr->pos[1], sizeof(int32_t) * tr->n_cells) != 0)
		tr->diverged++;
}

static void truth_log(enum ggml_log_level level, const char *text, void *user)
{
	struct truth *tr = user;
	(void)level;
	if (!tr->ad)
		return;
	const char *h = strstr(text, "find_slot: stream[");
	if (h && strstr(text, ", n = ")) {
		const char *w = strstr(text, "n_swa = ");
		int n_swa = w ? atoi(w + 8) : 0;
		tr->map = n_swa > 0 ? tr->map_of_swa : 1 - tr->map_of_swa;
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

static const char *k_text =
	"The travel agent books a flight to Lisbon, a hotel in Alfama for five nights with "
	"breakfast and a view of the river Tagus, a table at a fado house on Friday and "
	"tickets for the aquarium, then writes every booking code into the plan. ";

/* The two maps against both caches' dumps, through the window and past it. */
START_TEST(test_gemma_swa)
{
	ck_assert_int_eq(llama_model_n_swa(g_model), 512);
	setenv("LLAMA_KV_CACHE_DEBUG", "3", 1);
	struct md_llama_config cfg;
	md_llama_config_init(&cfg);
	cfg.attach = 0;
	cfg.max_seqs = 1;
	cfg.check_rows = 1;
	md_llama *ad;
	ck_assert_int_eq(md_llama_create(&cfg, g_model, &ad), 0);
	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = 1024;
	cp.n_batch = cp.n_ubatch = 256;
	cp.n_seq_max = 2;
	cp.n_threads = cp.n_threads_batch = 1;
	cp.swa_full = false;  /* the adapter asks for the full-size window cache */
	md_llama_context_params(ad, &cp);
	ck_assert(cp.swa_full);
	ck_assert(cp.kv_unified);
	struct llama_context *ctx = llama_init_from_model(g_model, cp);
	ck_assert_ptr_nonnull(ctx);
	ck_assert_int_eq(md_llama_bind(ad, ctx), 0);
	ck_assert_uint_eq(md_llama_n_maps(ad), 2);

	memset(&g_truth, 0, sizeof(g_truth));
	g_truth.n_cells = md_llama_n_cells(ad);
	g_truth.seqs = calloc(g_truth.n_cells, 1);
	g_truth.pos[0] = calloc(g_truth.n_cells, sizeof(int32_t));
	g_truth.pos[1] = calloc(g_truth.n_cells, sizeof(int32_t));
	g_truth.map_of_swa = 0;  /* layer 0 is a sliding-window layer in Gemma 3 */
	g_truth.ad = ad;
	llama_log_set(truth_log, &g_truth);

	uint32_t n;
	llama_token *t = tokenize(k_text, 0, &n);
	uint8_t reg[256];
	memset(reg, MD_REGION_USER, sizeof(reg));
	unsigned seed = 4242;
	uint64_t decodes = 0, evictions = 0;
	/* about 900 positions in chunks of 1..48 tokens, the sequence held near 600
	 * live tokens by evicting random pages: past the 512-token window, so the
	 * window's cache reuses cells that slid out of it while the other cache
	 * keeps them, and holes are refilled in both */
	while (md_llama_pos_next(ad, 0) < 900) {
		seed = seed * 1103515245u + 12345u;
		uint32_t k = 1 + (seed >> 16) % 48;
		if (k > n)
			k = n;
		ck_assert_int_eq(md_llama_decode(ad, 0, t, reg, k, 1), 0);
		decodes++;
		while (md_llama_live_tokens(ad, 0) > 600) {
			seed = seed * 1103515245u + 12345u;
			llama_pos pos_max = md_llama_pos_next(ad, 0) - 1;
			llama_pos pos = (llama_pos)((seed >> 8) % (uint32_t)(pos_max + 1));
			if (md_llama_evict_page(ad, 0, pos) == 0)
				evictions++;
		}
	}
	/* a probe on a copy: shared cells in both caches, then dropped */
	ck_assert_int_eq(md_llama_seq_copy(ad, 0, 1), 0);
	ck_assert_int_eq(md_llama_decode(ad, 1, t, NULL, 9, 1), 0);
	ck_assert_int_eq(md_llama_seq_truncate(ad, 1, 0), 0);
	decodes++;
	/* and one more token on the tracked sequence */
	ck_assert_int_eq(md_llama_decode(ad, 0, t, reg, 1, 1), 0);
	decodes++;
	const float *logits = llama_get_logits_ith(ctx, -1);
	ck_assert(logits && logits[0] == logits[0]);

	llama_log_set(log_quiet, NULL);
	unsetenv("LLAMA_KV_CACHE_DEBUG");
	struct md_llama_stats st;
	md_llama_get_stats(ad, &st);
	fprintf(stderr, "gemma_swa: %llu ubatches, %llu evictions, dumps %llu/%llu, stale %llu, "
		"diverged %llu, row sum err %.2e, dead mass %.2e\n",
		(unsigned long long)decodes, (unsigned long long)evictions,
		(unsigned long long)g_truth.compared[0], (unsigned long long)g_truth.compared[1],
		(unsigned long long)g_truth.stale, (unsigned long long)g_truth.diverged,
		st.row_sum_max_err, st.row_dead_mass_max);
	ck_assert_uint_gt(evictions, 10);
	ck_assert_uint_eq(g_truth.compared[0], decodes);
	ck_assert_uint_eq(g_truth.compared[1], decodes);
	ck_assert_msg(g_truth.mismatches == 0, "%llu mismatches; first %s",
		      (unsigned long long)g_truth.mismatches, g_truth.first_bad);
	ck_assert_msg(g_truth.diverged > 0, "the two caches never placed tokens differently");
	ck_assert_uint_eq(st.map_missing, 0);
	/* layers 5, 11, 17 are the full-attention ones: map 1 */
	for (uint32_t il = 0; il < 18; il++)
		ck_assert_msg(md_llama_layer_map(ad, il) == (il % 6 == 5),
			      "layer %u in map %d", il, md_llama_layer_map(ad, il));
	ck_assert_msg(st.row_sum_max_err < 1e-3, "row sum error %g", st.row_sum_max_err);
	ck_assert_msg(st.row_dead_mass_max < 1e-6, "mass on other cells %g", st.row_dead_mass_max);
	/* every tracked ubatch reduced all 18 layers (the probe's one is untracked) */
	ck_assert_uint_eq(st.layers_observed, (uint64_t)(st.ubatches - 1) * 18);
	ck_assert_int_eq(llama_memory_seq_pos_max(llama_get_memory(ctx), 0),
			 md_llama_pos_next(ad, 0) - 1);
	g_truth.ad = NULL;
	free(g_truth.seqs);
	free(g_truth.pos[0]);
	free(g_truth.pos[1]);
	free(t);
	md_llama_destroy(ad);
	llama_free(ctx);
}
END_TEST

/* The Gemma chat format through md_llama_chat, fed through the adapter. */
START_TEST(test_gemma_labels)
{
	static const struct {
		const char *role, *content, *region;
		int want;
	} msgs[] = {
		{"system", "You are Atlas, a travel agent. The account code is NW-4471.", NULL,
		 MD_REGION_SYSTEM},
		{"user", "Find me a hotel.", NULL, MD_REGION_USER},
		{"assistant", "I should search Alfama first.", "scratchpad", MD_REGION_SCRATCHPAD},
		{"assistant", "{\"tool\": \"search_hotels\"}", "tool_in", MD_REGION_TOOL_IN},
		{"tool", "Casa Azul, 95 euros.", NULL, MD_REGION_TOOL_OUT},
		{"user", "Guide: the museum is closed on Tuesdays.", "retrieval", MD_REGION_RETRIEVAL},
		{"assistant", "Casa Azul it is.", NULL, MD_REGION_ASSISTANT},
	};
	enum { NM = sizeof(msgs) / sizeof(msgs[0]) };
	struct md_llama_chat chat;
	/* an explicit template wins over the detection */
	ck_assert_int_eq(md_llama_chat_init(&chat, g_model, "chatml"), 0);
	ck_assert_str_eq(md_llama_chat_format_name(&chat), "template");
	md_llama_chat_free(&chat);
	ck_assert_int_eq(md_llama_chat_init(&chat, g_model, NULL), 0);
	ck_assert_str_eq(md_llama_chat_format_name(&chat), "gemma");
	uint32_t one;
	llama_token *tt = tokenize("<end_of_turn>", 0, &one);
	ck_assert_uint_eq(one, 1);
	ck_assert_int_eq(md_llama_chat_eot(&chat, g_model), tt[0]);
	ck_assert(llama_vocab_is_eog(llama_model_get_vocab(g_model), tt[0]));
	free(tt);
	tt = tokenize("<start_of_turn>", 0, &one);
	ck_assert_uint_eq(one, 1);
	llama_token sot = tt[0];
	free(tt);

	struct md_llama_config cfg;
	md_llama_config_init(&cfg);
	cfg.attach = 0;
	md_llama *ad;
	ck_assert_int_eq(md_llama_create(&cfg, g_model, &ad), 0);
	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = 512;
	cp.n_batch = cp.n_ubatch = 256;
	cp.n_threads = cp.n_threads_batch = 1;
	md_llama_context_params(ad, &cp);
	struct llama_context *ctx = llama_init_from_model(g_model, cp);
	ck_assert_ptr_nonnull(ctx);
	ck_assert_int_eq(md_llama_bind(ad, ctx), 0);

	llama_pos span_start[NM + 1];
	char *joined = calloc(1, 1);
	for (int i = 0; i < NM; i++) {
		int region = md_llama_region_of(msgs[i].role, msgs[i].region);
		ck_assert_int_eq(region, msgs[i].want);
		char *delta;
		ck_assert_int_eq(md_llama_chat_push(&chat, msgs[i].role, msgs[i].content, &delta), 0);
		char want[256];
		snprintf(want, sizeof(want), "<start_of_turn>%s\n%s<end_of_turn>\n",
			 strcmp(msgs[i].role, "assistant") ? "user" : "model", msgs[i].content);
		ck_assert_str_eq(delta, want);
		joined = realloc(joined, strlen(joined) + strlen(delta) + 1);
		strcat(joined, delta);
		span_start[i] = md_llama_pos_next(ad, 0);
		uint32_t n;
		llama_token *t = tokenize(delta, i == 0, &n);  /* BOS with the first message */
		ck_assert_int_eq(t[0], i == 0 ? llama_vocab_bos(llama_model_get_vocab(g_model)) : sot);
		uint8_t reg[128];
		ck_assert_uint_le(n, sizeof(reg));
		memset(reg, region, n);
		ck_assert_int_eq(md_llama_decode(ad, 0, t, reg, n, 1), 0);
		free(t);
		free(delta);
	}
	span_start[NM] = md_llama_pos_next(ad, 0);
	ck_assert_str_eq(joined, chat.text);
	for (int i = 0; i < NM; i++)
		for (llama_pos p = span_start[i]; p < span_start[i + 1]; p++)
			ck_assert_msg(md_llama_token_region(ad, 0, p) == msgs[i].want,
				      "pos %d (message %d) region %d, want %d", p, i,
				      md_llama_token_region(ad, 0, p), msgs[i].want);
	/* the spans tokenize as the whole prompt does */
	uint32_t n;
	llama_token *all = tokenize(chat.text, 1, &n);
	ck_assert_uint_eq(n, (uint32_t)span_start[NM]);
	free(all);
	/* the assistant header */
	char *head;
	ck_assert_int_eq(md_llama_chat_peek(&chat, "user", "Which hotel?", 1, &head), 0);
	ck_assert_str_eq(head, "<start_of_turn>user\nWhich hotel?<end_of_turn>\n<start_of_turn>model\n");
	free(head);
	free(joined);
	md_llama_chat_free(&chat);
	md_llama_destroy(ad);
	llama_free(ctx);
}
END_TEST

static Suite *gemma_suite(void)
{
	Suite *s = suite_create("llama_gemma");
	const char *only = getenv("MD_LLAMA_TEST");
	struct { const char *name; const TTest *t; } tests[] = {
		{"gemma_swa", test_gemma_swa},
		{"gemma_labels", test_gemma_labels},
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
	return md_test_main(gemma_suite());
}
