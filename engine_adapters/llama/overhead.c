/*
 * overhead.c — md_llama_overhead: decode tokens/s of llama.cpp with the adapter
 * (and memdecayd when --socket is given) against plain llama.cpp in the same
 * configuration (flash attention off, unified KV) and against llama.cpp's
 * default context configuration, in one process.  Steps alternate between the
 * contexts so that load on a shared machine hits all of them alike.  JSON out.
 *   md_llama_overhead MODEL [--socket PATH] [--prefill N] [--steps N] [--threads N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <llama.h>

#include "md_llama.h"
#include "memdecay_abi.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void log_quiet(enum ggml_log_level l, const char *t, void *u)
{
	(void)l;
	(void)t;
	(void)u;
}

static int plain_decode(struct llama_context *ctx, struct llama_batch *b, const llama_token *t,
			int n, int pos0)
{
	for (int done = 0; done < n;) {
		int k = n - done < 256 ? n - done : 256;
		b->n_tokens = k;
		for (int i = 0; i < k; i++) {
			b->token[i] = t[done + i];
			b->pos[i] = pos0 + done + i;
			b->n_seq_id[i] = 1;
			b->seq_id[i][0] = 0;
			b->logits[i] = i == k - 1;
		}
		if (llama_decode(ctx, *b))
			return -1;
		done += k;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *model_path = NULL, *sock = NULL;
	int prefill = 512, steps = 128, threads = 1;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--socket") && i + 1 < argc)
			sock = argv[++i];
		else if (!strcmp(argv[i], "--prefill") && i + 1 < argc)
			prefill = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
			steps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = atoi(argv[++i]);
		else
			model_path = argv[i];
	}
	if (!model_path || prefill < 1 || steps < 1) {
		fprintf(stderr, "usage: md_llama_overhead MODEL [--socket PATH] [--prefill N] [--steps N] [--threads N]\n");
		return 2;
	}
	llama_log_set(log_quiet, NULL);
	llama_backend_init();
	struct llama_model_params mp = llama_model_default_params();
	mp.n_gpu_layers = 0;
	struct llama_model *model = llama_model_load_from_file(model_path, mp);
	if (!model)
		return 1;
	uint32_t n_ctx = (uint32_t)((prefill + steps + 255) / 256 * 256);

	struct llama_context_params same = llama_context_default_params();
	same.n_ctx = n_ctx;
	same.n_batch = same.n_ubatch = 256;
	same.n_threads = same.n_threads_batch = threads;
	same.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
	same.kv_unified = true;
	same.no_perf = true;
	struct llama_context_params deflt = llama_context_default_params();
	deflt.n_ctx = n_ctx;
	deflt.n_batch = deflt.n_ubatch = 256;
	deflt.n_threads = deflt.n_threads_batch = threads;
	deflt.no_perf = true;

	struct md_llama_config cfg;
	md_llama_config_init(&cfg);
	cfg.socket_path = sock;
	cfg.attach = sock != NULL;
	cfg.policy = "memdecay";
	cfg.budget_sequence_tokens = 0;  /* no evictions: pure overhead */
	cfg.quiet = 1;
	md_llama *ad;
	if (md_llama_create(&cfg, model, &ad))
		return 1;
	struct llama_context_params with = same;
	md_llama_context_params(ad, &with);

	struct llama_context *c_plain = llama_init_from_model(model, same);
	struct llama_context *c_def = llama_init_from_model(model, deflt);
	struct llama_context *c_ad = llama_init_from_model(model, with);
	if (!c_plain || !c_def || !c_ad || md_llama_bind(ad, c_ad))
		return 1;

	llama_token *t = malloc(sizeof(llama_token) * (size_t)(prefill + steps));
	for (int i = 0; i < prefill + steps; i++)
		t[i] = 1000 + (i * 7919) % 20000;  /* deterministic, non-repeating text */
	uint8_t *reg = malloc((size_t)(prefill + steps));
	for (int i = 0; i < prefill + steps; i++)
		reg[i] = i < 64 ? MD_REGION_SYSTEM : MD_REGION_USER;
	struct llama_batch b = llama_batch_init(256, 0, 1);
	if (plain_decode(c_plain, &b, t, prefill, 0) || plain_decode(c_def, &b, t, prefill, 0) ||
	    md_llama_decode(ad, 0, t, reg, (uint32_t)prefill, 1))
		return 1;

	double s_plain = 0, s_def = 0, s_ad = 0;
	for (int k = 0; k < steps; k++) {
		int pos = prefill + k;
		double t0 = now_s();
		if (plain_decode(c_plain, &b, &t[pos], 1, pos))
			return 1;
		double t1 = now_s();
		if (md_llama_decode(ad, 0, &t[pos], &reg[pos], 1, 1))
			return 1;
		double t2 = now_s();
		if (plain_decode(c_def, &b, &t[pos], 1, pos))
			return 1;
		double t3 = now_s();
		s_plain += t1 - t0;
		s_ad += t2 - t1;
		s_def += t3 - t2;
	}
	struct md_llama_stats st;
	md_llama_get_stats(ad, &st);
	double per = 1e-6 / steps;  /* ns totals include the prefill; report per decode step */
	printf("{\"prefill_tokens\": %d, \"steps\": %d, \"threads\": %d, \"daemon_attached\": %s,"
	       " \"plain_same_config_tok_s\": %.2f, \"adapter_tok_s\": %.2f,"
	       " \"plain_default_config_tok_s\": %.2f, \"ratio_vs_same_config\": %.4f,"
	       " \"ratio_vs_default_config\": %.4f, \"observe_ms_total\": %.1f,"
	       " \"publish_ms_total\": %.1f, \"decode_ms_total\": %.1f, \"attn_records\": %llu,"
	       " \"layers_observed\": %llu, \"ms_per_step_adapter\": %.3f, \"ms_per_step_plain\": %.3f}\n",
	       prefill, steps, threads, st.attached ? "true" : "false", steps / s_plain, steps / s_ad,
	       steps / s_def, s_plain / s_ad, s_def / s_ad, st.observe_ns * 1e-6,
	       st.publish_ns * 1e-6, st.decode_ns * 1e-6, (unsigned long long)st.attn_records,
	       (unsigned long long)st.layers_observed, 1e3 * s_ad / steps, 1e3 * s_plain / steps);
	(void)per;
	llama_batch_free(b);
	md_llama_destroy(ad);
	llama_free(c_plain);
	llama_free(c_def);
	llama_free(c_ad);
	llama_model_free(model);
	free(t);
	free(reg);
	return 0;
}
