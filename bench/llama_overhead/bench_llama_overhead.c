/*
 * bench_llama_overhead.c — memdecay-bench-llama-overhead: decode tokens/s of
 * llama.cpp with the MemDecay adapter attached to memdecayd, against plain
 * llama.cpp in the same configuration (flash attention off, unified KV, no
 * cb_eval) and against llama.cpp's default context configuration, in one run
 * and one process.  A fourth context, "capture only", is the same plain
 * configuration with a cb_eval that asks for exactly the tensors the adapter
 * asks for (the layer-0 K write and every kq_soft_max-<il>) and does nothing
 * with them: it isolates what splitting the graph for observation costs.
 *
 * Every step decodes one token in each of the four contexts, in an order that
 * rotates step by step, so that load on a shared machine hits all alike.
 * Steps are grouped into rounds; tokens/s and the ratios are given as the
 * median over rounds with min/max (the spread), per-step times as medians.
 * Where the time goes, per step (medians of paired per-step differences):
 * capture (capture-only minus plain), reduction
 * (the adapter's own cb_eval work: cell map + per-layer mdk_page_mass_accumulate),
 * records (mdk_page_refresh + one MD_REC_ATTN_PAGE per live page), other
 * (adapter minus capture-only minus those two: page declaration, md_seq_step,
 * command poll, noise).  The four medians need not add up exactly.  JSON out.
 *
 *   memdecay-bench-llama-overhead MODEL [--socket PATH] [--prefill N] [--steps N]
 *       [--rounds R] [--threads N] [--layer-stride K]
 * Without --socket the adapter runs detached (no records are sent).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <llama.h>

#include "md_kernels.h"
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

/* The capture-only observer: same tensors as the adapter, no work. */
struct probe_cb {
	unsigned stride;
	unsigned long long seen;
};

static bool capture_only_cb(struct ggml_tensor *t, bool ask, void *user)
{
	struct probe_cb *p = user;
	if (ask) {
		if (t->op == GGML_OP_SET_ROWS && !strncmp(t->name, "cache_k_l0", 10) &&
		    (t->name[10] == ' ' || t->name[10] == '\0'))
			return true;
		if (t->op == GGML_OP_SOFT_MAX && !strncmp(t->name, "kq_soft_max-", 12)) {
			long il = strtol(t->name + 12, NULL, 10);
			return il >= 0 && (unsigned long)il % p->stride == 0;
		}
		return false;
	}
	p->seen++;
	return true;
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

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
	double *c = malloc(sizeof(double) * (size_t)n);
	memcpy(c, v, sizeof(double) * (size_t)n);
	qsort(c, (size_t)n, sizeof(double), cmp_d);
	double m = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
	free(c);
	return m;
}

static void minmax(const double *v, int n, double *lo, double *hi)
{
	*lo = *hi = v[0];
	for (int i = 1; i < n; i++) {
		if (v[i] < *lo)
			*lo = v[i];
		if (v[i] > *hi)
			*hi = v[i];
	}
}

enum { C_PLAIN, C_CAPTURE, C_ADAPTER, C_DEFAULT, N_CTX_KINDS };
static const char *kind_name[N_CTX_KINDS] = {"plain_same_config", "capture_only", "adapter",
					     "plain_default_config"};

static void print_stat(const char *key, const double *v, int n, const char *sep)
{
	double lo, hi;
	minmax(v, n, &lo, &hi);
	printf("    \"%s\": {\"median\": %.4f, \"min\": %.4f, \"max\": %.4f}%s\n", key,
	       median(v, n), lo, hi, sep);
}

int main(int argc, char **argv)
{
	const char *model_path = NULL, *sock = NULL;
	int prefill = 512, steps = 256, rounds = 8, threads = 1, stride = 1;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--socket") && i + 1 < argc)
			sock = argv[++i];
		else if (!strcmp(argv[i], "--prefill") && i + 1 < argc)
			prefill = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
			steps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--layer-stride") && i + 1 < argc)
			stride = atoi(argv[++i]);
		else if (argv[i][0] != '-')
			model_path = argv[i];
		else {
			model_path = NULL;
			break;
		}
	}
	if (!model_path || prefill < 1 || steps < 1 || rounds < 1 || rounds > steps ||
	    threads < 1 || stride < 1) {
		fprintf(stderr, "usage: memdecay-bench-llama-overhead MODEL [--socket PATH] [--prefill N]"
				" [--steps N] [--rounds R] [--threads N] [--layer-stride K]\n");
		return 2;
	}
	llama_log_set(log_quiet, NULL);
	llama_backend_init();
	struct llama_model_params mp = llama_model_default_params();
	mp.n_gpu_layers = 0;
	struct llama_model *model = llama_model_load_from_file(model_path, mp);
	if (!model) {
		fprintf(stderr, "cannot load %s\n", model_path);
		return 1;
	}
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
	cfg.budget_sequence_tokens = 0; /* no evictions: pure overhead */
	cfg.layer_stride = (uint32_t)stride;
	cfg.quiet = 1;
	md_llama *ad;
	if (md_llama_create(&cfg, model, &ad))
		return 1;
	struct llama_context_params with = same;
	md_llama_context_params(ad, &with);
	struct probe_cb pcb = {(unsigned)stride, 0};
	struct llama_context_params capt = same;
	capt.cb_eval = capture_only_cb;
	capt.cb_eval_user_data = &pcb;
	capt.n_seq_max = with.n_seq_max; /* identical to the adapter's but for the callback */

	struct llama_context *ctx[N_CTX_KINDS];
	ctx[C_PLAIN] = llama_init_from_model(model, same);
	ctx[C_CAPTURE] = llama_init_from_model(model, capt);
	ctx[C_ADAPTER] = llama_init_from_model(model, with);
	ctx[C_DEFAULT] = llama_init_from_model(model, deflt);
	for (int k = 0; k < N_CTX_KINDS; k++)
		if (!ctx[k])
			return 1;
	if (md_llama_bind(ad, ctx[C_ADAPTER]))
		return 1;

	llama_token *t = malloc(sizeof(llama_token) * (size_t)(prefill + steps));
	for (int i = 0; i < prefill + steps; i++)
		t[i] = 1000 + (i * 7919) % 20000; /* deterministic, non-repeating text */
	uint8_t *reg = malloc((size_t)(prefill + steps));
	for (int i = 0; i < prefill + steps; i++)
		reg[i] = i < 64 ? MD_REGION_SYSTEM : MD_REGION_USER;
	struct llama_batch b = llama_batch_init(256, 0, 1);
	if (plain_decode(ctx[C_PLAIN], &b, t, prefill, 0) ||
	    plain_decode(ctx[C_CAPTURE], &b, t, prefill, 0) ||
	    plain_decode(ctx[C_DEFAULT], &b, t, prefill, 0) ||
	    md_llama_decode(ad, 0, t, reg, (uint32_t)prefill, 1))
		return 1;

	double *dt[N_CTX_KINDS];
	for (int k = 0; k < N_CTX_KINDS; k++)
		dt[k] = calloc((size_t)steps, sizeof(double));
	double *obs = calloc((size_t)steps, sizeof(double));
	double *pub = calloc((size_t)steps, sizeof(double));
	double *dec = calloc((size_t)steps, sizeof(double));
	struct md_llama_stats s0, s1, sa;
	md_llama_get_stats(ad, &sa);
	for (int k = 0; k < steps; k++) {
		int pos = prefill + k;
		for (int j = 0; j < N_CTX_KINDS; j++) {
			int c = (k + j) % N_CTX_KINDS; /* rotate the order */
			double t0 = now_s();
			if (c == C_ADAPTER) {
				md_llama_get_stats(ad, &s0);
				t0 = now_s();
				if (md_llama_decode(ad, 0, &t[pos], &reg[pos], 1, 1))
					return 1;
				dt[c][k] = now_s() - t0;
				md_llama_get_stats(ad, &s1);
				obs[k] = 1e-9 * (double)(s1.observe_ns - s0.observe_ns);
				pub[k] = 1e-9 * (double)(s1.publish_ns - s0.publish_ns);
				dec[k] = 1e-9 * (double)(s1.decode_ns - s0.decode_ns);
			} else {
				if (plain_decode(ctx[c], &b, &t[pos], 1, pos))
					return 1;
				dt[c][k] = now_s() - t0;
			}
		}
	}
	struct md_llama_stats st;
	md_llama_get_stats(ad, &st);

	/* The reduction kernel alone on this step's shape (n_kv x n_head rows, one
	 * query), as many calls as layers observed per step: a cross-check of the
	 * adapter's cb_eval figure. */
	int n_layer = llama_model_n_layer(model);
	int n_head = llama_model_n_head(model);
	int layers = (n_layer + stride - 1) / stride;
	uint32_t n_kv = n_ctx, n_pages = (n_kv + 15) / 16;
	float *probs = malloc(sizeof(float) * (size_t)n_kv * (size_t)n_head);
	for (size_t i = 0; i < (size_t)n_kv * (size_t)n_head; i++)
		probs[i] = 1.0f / (float)n_kv;
	int32_t *cpage = malloc(sizeof(int32_t) * n_kv);
	uint8_t *ctok = malloc(n_kv);
	for (uint32_t c = 0; c < n_kv; c++) {
		cpage[c] = (int32_t)(c / 16);
		ctok[c] = (uint8_t)(c % 16);
	}
	float *tm = calloc((size_t)n_pages * 16, sizeof(float));
	float *pm = calloc(n_pages, sizeof(float));
	uint16_t *rf = calloc(n_pages, sizeof(uint16_t));
	struct mdk_probs pr = {probs, (uint32_t)n_head, 1, n_kv, n_kv};
	struct mdk_cell_map map = {cpage, ctok, n_kv, n_pages, 16};
	struct mdk_page_out out = {tm, pm, rf};
	int reps = 200;
	double k0 = now_s();
	for (int r = 0; r < reps; r++) {
		mdk_page_mass_zero(&map, &out);
		for (int l = 0; l < layers; l++)
			mdk_page_mass_accumulate(&pr, &map, 1.0f / (float)layers, &out, MDK_IMPL_AUTO);
		mdk_page_refresh(&map, 0.01f, 1.0f, &out);
	}
	double kernel_ms = 1e3 * (now_s() - k0) / reps;

	/* Rounds: tokens/s per context and the ratios, then median and spread. */
	double *tps[N_CTX_KINDS], *r_same = calloc((size_t)rounds, sizeof(double)),
				   *r_def = calloc((size_t)rounds, sizeof(double)),
				   *r_capt = calloc((size_t)rounds, sizeof(double));
	for (int c = 0; c < N_CTX_KINDS; c++)
		tps[c] = calloc((size_t)rounds, sizeof(double));
	for (int r = 0; r < rounds; r++) {
		int a = r * steps / rounds, e = (r + 1) * steps / rounds;
		for (int c = 0; c < N_CTX_KINDS; c++) {
			double s = 0;
			for (int k = a; k < e; k++)
				s += dt[c][k];
			tps[c][r] = (e - a) / s;
		}
		r_same[r] = tps[C_ADAPTER][r] / tps[C_PLAIN][r];
		r_def[r] = tps[C_ADAPTER][r] / tps[C_DEFAULT][r];
		r_capt[r] = tps[C_CAPTURE][r] / tps[C_PLAIN][r];
	}
	double med_ms[N_CTX_KINDS], tot[N_CTX_KINDS];
	for (int c = 0; c < N_CTX_KINDS; c++) {
		med_ms[c] = 1e3 * median(dt[c], steps);
		tot[c] = 0;
		for (int k = 0; k < steps; k++)
			tot[c] += dt[c][k];
	}
	double m_obs = 1e3 * median(obs, steps), m_pub = 1e3 * median(pub, steps);
	/* Differences are paired step by step (the contexts of one step ran
	 * within milliseconds of each other), then the median is taken. */
	double *diff = calloc((size_t)steps, sizeof(double));
	for (int k = 0; k < steps; k++)
		diff[k] = dt[C_CAPTURE][k] - dt[C_PLAIN][k];
	double m_capture = 1e3 * median(diff, steps);
	for (int k = 0; k < steps; k++)
		diff[k] = dt[C_ADAPTER][k] - dt[C_PLAIN][k];
	double m_over = 1e3 * median(diff, steps);
	for (int k = 0; k < steps; k++)
		diff[k] = dt[C_ADAPTER][k] - dt[C_CAPTURE][k] - obs[k] - pub[k];
	double m_other = 1e3 * median(diff, steps);
	free(diff);
	/* Means over all steps: they add up (overhead = capture + reduction +
	 * records + other) and match the whole-run ratio, but carry the load's
	 * outliers. */
	double a_over = 0, a_capt = 0, a_obs = 0, a_pub = 0;
	for (int k = 0; k < steps; k++) {
		a_over += dt[C_ADAPTER][k] - dt[C_PLAIN][k];
		a_capt += dt[C_CAPTURE][k] - dt[C_PLAIN][k];
		a_obs += obs[k];
		a_pub += pub[k];
	}
	a_over *= 1e3 / steps;
	a_capt *= 1e3 / steps;
	a_obs *= 1e3 / steps;
	a_pub *= 1e3 / steps;

	printf("{\n  \"bench\": \"llama_overhead\",\n");
	printf("  \"llama_cpp_system_info\": \"");
	for (const char *q = llama_print_system_info(); *q; q++)
		if (*q >= 0x20 && *q != '"' && *q != '\\')
			putchar(*q);
	printf("\",\n");
	printf("  \"model_layers\": %d, \"model_heads\": %d, \"layers_observed_per_step\": %d,\n",
	       n_layer, n_head, layers);
	printf("  \"prefill_tokens\": %d, \"steps\": %d, \"rounds\": %d, \"threads\": %d, "
	       "\"n_ctx\": %u, \"layer_stride\": %d,\n",
	       prefill, steps, rounds, threads, n_ctx, stride);
	printf("  \"daemon_attached\": %s, \"attn_records\": %llu, \"attn_dropped\": %llu, "
	       "\"capture_callbacks\": %llu,\n",
	       st.attached ? "true" : "false",
	       (unsigned long long)(st.attn_records - sa.attn_records),
	       (unsigned long long)(st.attn_dropped - sa.attn_dropped), pcb.seen);
	printf("  \"tokens_per_s\": {\n");
	for (int c = 0; c < N_CTX_KINDS; c++)
		print_stat(kind_name[c], tps[c], rounds, c + 1 < N_CTX_KINDS ? "," : "");
	printf("  },\n  \"tokens_per_s_whole_run\": {");
	for (int c = 0; c < N_CTX_KINDS; c++)
		printf("\"%s\": %.2f%s", kind_name[c], steps / tot[c], c + 1 < N_CTX_KINDS ? ", " : "");
	printf("},\n  \"ratio\": {\n");
	print_stat("adapter_vs_same_config", r_same, rounds, ",");
	print_stat("adapter_vs_default_config", r_def, rounds, ",");
	print_stat("capture_only_vs_same_config", r_capt, rounds, "");
	printf("  },\n  \"ratio_whole_run\": {\"adapter_vs_same_config\": %.4f, "
	       "\"adapter_vs_default_config\": %.4f},\n",
	       tot[C_PLAIN] / tot[C_ADAPTER], tot[C_DEFAULT] / tot[C_ADAPTER]);
	printf("  \"target_ratio_vs_same_config\": 0.90, \"target_met\": %s,\n",
	       median(r_same, rounds) >= 0.90 ? "true" : "false");
	printf("  \"ms_per_step_median\": {");
	for (int c = 0; c < N_CTX_KINDS; c++)
		printf("\"%s\": %.3f%s", kind_name[c], med_ms[c], c + 1 < N_CTX_KINDS ? ", " : "");
	printf("},\n  \"breakdown_ms_per_step\": {\"overhead\": %.3f, \"capture\": %.3f, "
	       "\"reduction\": %.3f, \"records\": %.3f, \"other\": %.3f, "
	       "\"reduction_kernel_alone\": %.3f, \"adapter_llama_decode\": %.3f},\n",
	       m_over, m_capture, m_obs, m_pub, m_other, kernel_ms,
	       1e3 * median(dec, steps));
	printf("  \"breakdown_ms_per_step_mean\": {\"overhead\": %.3f, \"capture\": %.3f, "
	       "\"reduction\": %.3f, \"records\": %.3f, \"other\": %.3f},\n",
	       a_over, a_capt, a_obs, a_pub, a_over - a_capt - a_obs - a_pub);
	printf("  \"breakdown_note\": \"medians over decode steps of per-step (paired) differences; overhead = adapter - "
	       "plain_same_config; capture = capture_only - plain_same_config (graph split at each observed tensor + "
	       "callbacks); reduction = adapter cb_eval work (cell map + per-layer "
	       "mdk_page_mass_accumulate); records = mdk_page_refresh + MD_REC_ATTN_PAGE per live page; "
	       "other = adapter - capture_only - reduction - records (page declaration, md_seq_step, "
	       "command poll, noise); medians need not add up, the means (breakdown_ms_per_step_mean) "
	       "do; reduction_kernel_alone = the kernel on a synthetic tensor of "
	       "n_ctx cells, same number of layers, incl. refresh\"\n}\n");

	llama_batch_free(b);
	md_llama_destroy(ad);
	for (int c = 0; c < N_CTX_KINDS; c++)
		llama_free(ctx[c]);
	llama_model_free(model);
	return 0;
}
