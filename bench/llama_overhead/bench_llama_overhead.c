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

#include <llama.h>

#include "md_kernels.h"
#include "md_llama.h"
#include "memdecay_abi.h"
#include "memdecay_clock.h"

static double now_s(void)
{
	return 1e-9 * (double)md_now_ns();
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

struct bench_opts {
	const char *model_path, *sock;
	int prefill, steps, rounds, threads, stride;
};

/* The four contexts on one model, their shared token stream and the
 * per-step times of the timed decode steps. */
struct bench {
	struct bench_opts o;
	struct llama_model *model;
	md_llama *ad;
	struct probe_cb pcb;
	struct llama_context *ctx[N_CTX_KINDS];
	uint32_t n_ctx;
	llama_token *t;
	uint8_t *reg;
	struct llama_batch b;
	double *dt[N_CTX_KINDS], *obs, *pub, *dec;
	struct md_llama_stats sa, st;
};

/* What the report prints, derived from the per-step times. */
struct results {
	int n_layer, n_head, layers;
	double kernel_ms;
	double *tps[N_CTX_KINDS], *r_same, *r_def, *r_capt;
	double med_ms[N_CTX_KINDS], tot[N_CTX_KINDS];
	double m_obs, m_pub, m_dec, m_capture, m_over, m_other;
	double a_over, a_capt, a_obs, a_pub;
};

static int parse_args(int argc, char **argv, struct bench_opts *o)
{
	o->model_path = o->sock = NULL;
	o->prefill = 512;
	o->steps = 256;
	o->rounds = 8;
	o->threads = 1;
	o->stride = 1;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--socket") && i + 1 < argc)
			o->sock = argv[++i];
		else if (!strcmp(argv[i], "--prefill") && i + 1 < argc)
			o->prefill = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
			o->steps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			o->rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			o->threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--layer-stride") && i + 1 < argc)
			o->stride = atoi(argv[++i]);
		else if (argv[i][0] != '-')
			o->model_path = argv[i];
		else {
			o->model_path = NULL;
			break;
		}
	}
	if (!o->model_path || o->prefill < 1 || o->steps < 1 || o->rounds < 1 ||
	    o->rounds > o->steps || o->threads < 1 || o->stride < 1) {
		fprintf(stderr, "usage: memdecay-bench-llama-overhead MODEL [--socket PATH] [--prefill N]"
				" [--steps N] [--rounds R] [--threads N] [--layer-stride K]\n");
		return -1;
	}
	return 0;
}

/* The model, the adapter and the four contexts: plain same-config,
 * capture-only, adapter and plain default-config. */
static int setup_contexts(struct bench *B)
{
	const struct bench_opts *o = &B->o;
	llama_log_set(log_quiet, NULL);
	llama_backend_init();
	struct llama_model_params mp = llama_model_default_params();
	mp.n_gpu_layers = 0;
	B->model = llama_model_load_from_file(o->model_path, mp);
	if (!B->model) {
		fprintf(stderr, "cannot load %s\n", o->model_path);
		return -1;
	}
	B->n_ctx = (uint32_t)((o->prefill + o->steps + 255) / 256 * 256);

	struct llama_context_params same = llama_context_default_params();
	same.n_ctx = B->n_ctx;
	same.n_batch = same.n_ubatch = 256;
	same.n_threads = same.n_threads_batch = o->threads;
	same.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
	same.kv_unified = true;
	same.no_perf = true;
	struct llama_context_params deflt = llama_context_default_params();
	deflt.n_ctx = B->n_ctx;
	deflt.n_batch = deflt.n_ubatch = 256;
	deflt.n_threads = deflt.n_threads_batch = o->threads;
	deflt.no_perf = true;

	struct md_llama_config cfg;
	md_llama_config_init(&cfg);
	cfg.socket_path = o->sock;
	cfg.attach = o->sock != NULL;
	cfg.policy = "memdecay";
	cfg.budget_sequence_tokens = 0; /* no evictions: pure overhead */
	cfg.layer_stride = (uint32_t)o->stride;
	cfg.quiet = 1;
	if (md_llama_create(&cfg, B->model, &B->ad))
		return -1;
	struct llama_context_params with = same;
	md_llama_context_params(B->ad, &with);
	B->pcb.stride = (unsigned)o->stride;
	B->pcb.seen = 0;
	struct llama_context_params capt = same;
	capt.cb_eval = capture_only_cb;
	capt.cb_eval_user_data = &B->pcb;
	capt.n_seq_max = with.n_seq_max; /* identical to the adapter's but for the callback */

	B->ctx[C_PLAIN] = llama_init_from_model(B->model, same);
	B->ctx[C_CAPTURE] = llama_init_from_model(B->model, capt);
	B->ctx[C_ADAPTER] = llama_init_from_model(B->model, with);
	B->ctx[C_DEFAULT] = llama_init_from_model(B->model, deflt);
	for (int k = 0; k < N_CTX_KINDS; k++)
		if (!B->ctx[k])
			return -1;
	if (md_llama_bind(B->ad, B->ctx[C_ADAPTER]))
		return -1;
	return 0;
}

/* The token stream and its region labels, and its first prefill tokens
 * decoded in every context. */
static int prefill_all(struct bench *B)
{
	int prefill = B->o.prefill, n = B->o.prefill + B->o.steps;
	B->t = malloc(sizeof(llama_token) * (size_t)n);
	for (int i = 0; i < n; i++)
		B->t[i] = 1000 + (i * 7919) % 20000; /* deterministic, non-repeating text */
	B->reg = malloc((size_t)n);
	for (int i = 0; i < n; i++)
		B->reg[i] = i < 64 ? MD_REGION_SYSTEM : MD_REGION_USER;
	B->b = llama_batch_init(256, 0, 1);
	if (plain_decode(B->ctx[C_PLAIN], &B->b, B->t, prefill, 0) ||
	    plain_decode(B->ctx[C_CAPTURE], &B->b, B->t, prefill, 0) ||
	    plain_decode(B->ctx[C_DEFAULT], &B->b, B->t, prefill, 0) ||
	    md_llama_decode(B->ad, 0, B->t, B->reg, (uint32_t)prefill, 1))
		return -1;
	return 0;
}

/* One token per step in each context, in an order that rotates step by step. */
static int time_steps(struct bench *B)
{
	int steps = B->o.steps;
	for (int k = 0; k < N_CTX_KINDS; k++)
		B->dt[k] = calloc((size_t)steps, sizeof(double));
	B->obs = calloc((size_t)steps, sizeof(double));
	B->pub = calloc((size_t)steps, sizeof(double));
	B->dec = calloc((size_t)steps, sizeof(double));
	struct md_llama_stats s0, s1;
	md_llama_get_stats(B->ad, &B->sa);
	for (int k = 0; k < steps; k++) {
		int pos = B->o.prefill + k;
		for (int j = 0; j < N_CTX_KINDS; j++) {
			int c = (k + j) % N_CTX_KINDS; /* rotate the order */
			double t0 = now_s();
			if (c == C_ADAPTER) {
				md_llama_get_stats(B->ad, &s0);
				t0 = now_s();
				if (md_llama_decode(B->ad, 0, &B->t[pos], &B->reg[pos], 1, 1))
					return -1;
				B->dt[c][k] = now_s() - t0;
				md_llama_get_stats(B->ad, &s1);
				B->obs[k] = 1e-9 * (double)(s1.observe_ns - s0.observe_ns);
				B->pub[k] = 1e-9 * (double)(s1.publish_ns - s0.publish_ns);
				B->dec[k] = 1e-9 * (double)(s1.decode_ns - s0.decode_ns);
			} else {
				if (plain_decode(B->ctx[c], &B->b, &B->t[pos], 1, pos))
					return -1;
				B->dt[c][k] = now_s() - t0;
			}
		}
	}
	md_llama_get_stats(B->ad, &B->st);
	return 0;
}

/* The reduction kernel alone on this step's shape (n_kv x n_head rows, one
 * query), as many calls as layers observed per step: a cross-check of the
 * adapter's cb_eval figure.  Milliseconds per step. */
static double kernel_alone_ms(uint32_t n_kv, int n_head, int layers)
{
	uint32_t n_pages = (n_kv + 15) / 16;
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
	double ms = 1e3 * (now_s() - k0) / reps;
	free(probs);
	free(cpage);
	free(ctok);
	free(tm);
	free(pm);
	free(rf);
	return ms;
}

/* Rounds: tokens/s per context and the ratios, then median and spread. */
static void compute_rounds(const struct bench *B, struct results *R)
{
	int steps = B->o.steps, rounds = B->o.rounds;
	R->r_same = calloc((size_t)rounds, sizeof(double));
	R->r_def = calloc((size_t)rounds, sizeof(double));
	R->r_capt = calloc((size_t)rounds, sizeof(double));
	for (int c = 0; c < N_CTX_KINDS; c++)
		R->tps[c] = calloc((size_t)rounds, sizeof(double));
	for (int r = 0; r < rounds; r++) {
		int a = r * steps / rounds, e = (r + 1) * steps / rounds;
		for (int c = 0; c < N_CTX_KINDS; c++) {
			double s = 0;
			for (int k = a; k < e; k++)
				s += B->dt[c][k];
			R->tps[c][r] = (e - a) / s;
		}
		R->r_same[r] = R->tps[C_ADAPTER][r] / R->tps[C_PLAIN][r];
		R->r_def[r] = R->tps[C_ADAPTER][r] / R->tps[C_DEFAULT][r];
		R->r_capt[r] = R->tps[C_CAPTURE][r] / R->tps[C_PLAIN][r];
	}
	for (int c = 0; c < N_CTX_KINDS; c++) {
		R->med_ms[c] = 1e3 * median(B->dt[c], steps);
		R->tot[c] = 0;
		for (int k = 0; k < steps; k++)
			R->tot[c] += B->dt[c][k];
	}
}

/* Where the time goes per step: medians of paired differences, and means. */
static void compute_breakdown(const struct bench *B, struct results *R)
{
	int steps = B->o.steps;
	double *const *dt = B->dt;
	R->m_obs = 1e3 * median(B->obs, steps);
	R->m_pub = 1e3 * median(B->pub, steps);
	R->m_dec = 1e3 * median(B->dec, steps);
	/* Differences are paired step by step (the contexts of one step ran
	 * within milliseconds of each other), then the median is taken. */
	double *diff = calloc((size_t)steps, sizeof(double));
	for (int k = 0; k < steps; k++)
		diff[k] = dt[C_CAPTURE][k] - dt[C_PLAIN][k];
	R->m_capture = 1e3 * median(diff, steps);
	for (int k = 0; k < steps; k++)
		diff[k] = dt[C_ADAPTER][k] - dt[C_PLAIN][k];
	R->m_over = 1e3 * median(diff, steps);
	for (int k = 0; k < steps; k++)
		diff[k] = dt[C_ADAPTER][k] - dt[C_CAPTURE][k] - B->obs[k] - B->pub[k];
	R->m_other = 1e3 * median(diff, steps);
	free(diff);
	/* Means over all steps: they add up (overhead = capture + reduction +
	 * records + other) and match the whole-run ratio, but carry the load's
	 * outliers. */
	R->a_over = R->a_capt = R->a_obs = R->a_pub = 0;
	for (int k = 0; k < steps; k++) {
		R->a_over += dt[C_ADAPTER][k] - dt[C_PLAIN][k];
		R->a_capt += dt[C_CAPTURE][k] - dt[C_PLAIN][k];
		R->a_obs += B->obs[k];
		R->a_pub += B->pub[k];
	}
	R->a_over *= 1e3 / steps;
	R->a_capt *= 1e3 / steps;
	R->a_obs *= 1e3 / steps;
	R->a_pub *= 1e3 / steps;
}

static void print_setup(const struct bench *B, const struct results *R)
{
	const struct bench_opts *o = &B->o;
	printf("{\n  \"bench\": \"llama_overhead\",\n");
	printf("  \"llama_cpp_system_info\": \"");
	for (const char *q = llama_print_system_info(); *q; q++)
		if (*q >= 0x20 && *q != '"' && *q != '\\')
			putchar(*q);
	printf("\",\n");
	printf("  \"model_layers\": %d, \"model_heads\": %d, \"layers_observed_per_step\": %d,\n",
	       R->n_layer, R->n_head, R->layers);
	printf("  \"prefill_tokens\": %d, \"steps\": %d, \"rounds\": %d, \"threads\": %d, "
	       "\"n_ctx\": %u, \"layer_stride\": %d,\n",
	       o->prefill, o->steps, o->rounds, o->threads, B->n_ctx, o->stride);
	printf("  \"daemon_attached\": %s, \"attn_records\": %llu, \"attn_dropped\": %llu, "
	       "\"capture_callbacks\": %llu,\n",
	       B->st.attached ? "true" : "false",
	       (unsigned long long)(B->st.attn_records - B->sa.attn_records),
	       (unsigned long long)(B->st.attn_dropped - B->sa.attn_dropped), B->pcb.seen);
}

static void print_rates(const struct bench *B, const struct results *R)
{
	int steps = B->o.steps, rounds = B->o.rounds;
	printf("  \"tokens_per_s\": {\n");
	for (int c = 0; c < N_CTX_KINDS; c++)
		print_stat(kind_name[c], R->tps[c], rounds, c + 1 < N_CTX_KINDS ? "," : "");
	printf("  },\n  \"tokens_per_s_whole_run\": {");
	for (int c = 0; c < N_CTX_KINDS; c++)
		printf("\"%s\": %.2f%s", kind_name[c], steps / R->tot[c], c + 1 < N_CTX_KINDS ? ", " : "");
	printf("},\n  \"ratio\": {\n");
	print_stat("adapter_vs_same_config", R->r_same, rounds, ",");
	print_stat("adapter_vs_default_config", R->r_def, rounds, ",");
	print_stat("capture_only_vs_same_config", R->r_capt, rounds, "");
	printf("  },\n  \"ratio_whole_run\": {\"adapter_vs_same_config\": %.4f, "
	       "\"adapter_vs_default_config\": %.4f},\n",
	       R->tot[C_PLAIN] / R->tot[C_ADAPTER], R->tot[C_DEFAULT] / R->tot[C_ADAPTER]);
	printf("  \"target_ratio_vs_same_config\": 0.90, \"target_met\": %s,\n",
	       median(R->r_same, rounds) >= 0.90 ? "true" : "false");
}

static void print_breakdown(const struct results *R)
{
	printf("  \"ms_per_step_median\": {");
	for (int c = 0; c < N_CTX_KINDS; c++)
		printf("\"%s\": %.3f%s", kind_name[c], R->med_ms[c], c + 1 < N_CTX_KINDS ? ", " : "");
	printf("},\n  \"breakdown_ms_per_step\": {\"overhead\": %.3f, \"capture\": %.3f, "
	       "\"reduction\": %.3f, \"records\": %.3f, \"other\": %.3f, "
	       "\"reduction_kernel_alone\": %.3f, \"adapter_llama_decode\": %.3f},\n",
	       R->m_over, R->m_capture, R->m_obs, R->m_pub, R->m_other, R->kernel_ms, R->m_dec);
	printf("  \"breakdown_ms_per_step_mean\": {\"overhead\": %.3f, \"capture\": %.3f, "
	       "\"reduction\": %.3f, \"records\": %.3f, \"other\": %.3f},\n",
	       R->a_over, R->a_capt, R->a_obs, R->a_pub, R->a_over - R->a_capt - R->a_obs - R->a_pub);
	printf("  \"breakdown_note\": \"medians over decode steps of per-step (paired) differences; overhead = adapter - "
	       "plain_same_config; capture = capture_only - plain_same_config (graph split at each observed tensor + "
	       "callbacks); reduction = adapter cb_eval work (cell map + per-layer "
	       "mdk_page_mass_accumulate); records = mdk_page_refresh + MD_REC_ATTN_PAGE per live page; "
	       "other = adapter - capture_only - reduction - records (page declaration, md_seq_step, "
	       "command poll, noise); medians need not add up, the means (breakdown_ms_per_step_mean) "
	       "do; reduction_kernel_alone = the kernel on a synthetic tensor of "
	       "n_ctx cells, same number of layers, incl. refresh\"\n}\n");
}

static void bench_free(struct bench *B, struct results *R)
{
	for (int c = 0; c < N_CTX_KINDS; c++) {
		free(R->tps[c]);
		free(B->dt[c]);
	}
	free(R->r_same);
	free(R->r_def);
	free(R->r_capt);
	free(B->obs);
	free(B->pub);
	free(B->dec);
	free(B->t);
	free(B->reg);
	llama_batch_free(B->b);
	md_llama_destroy(B->ad);
	for (int c = 0; c < N_CTX_KINDS; c++)
		llama_free(B->ctx[c]);
	llama_model_free(B->model);
}

int main(int argc, char **argv)
{
	static struct bench B;
	struct results R;
	if (parse_args(argc, argv, &B.o))
		return 2;
	if (setup_contexts(&B) || prefill_all(&B) || time_steps(&B))
		return 1;

	R.n_layer = llama_model_n_layer(B.model);
	R.n_head = llama_model_n_head(B.model);
	R.layers = (R.n_layer + B.o.stride - 1) / B.o.stride;
	R.kernel_ms = kernel_alone_ms(B.n_ctx, R.n_head, R.layers);
	compute_rounds(&B, &R);
	compute_breakdown(&B, &R);
	print_setup(&B, &R);
	print_rates(&B, &R);
	print_breakdown(&R);

	bench_free(&B, &R);
	return 0;
}
