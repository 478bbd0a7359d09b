/*
 * gpu_e2e.c — memdecay-gpu-e2e: libmemdecay's GPU publisher against a real
 * memdecayd in another process (docs/kernels.md §4, docs/abi.md §7).
 *
 * Two runs of one scenario, each a fresh engine on the same daemon:
 *   cuda  the engine's synthetic attention lives on the GPU; md_gpu_publish_probs
 *         reduces it and writes ATTN_PAGE records into the CUDA IPC ring, the
 *         lifecycle records go through the same ring; memdecayd opens the export
 *         and drains it;
 *   host  the same attention reduced on the CPU (mdk_page_mass) and published
 *         with md_attn_page through the host ring.
 * Scenario: 32 pages of one sequence, 6 steps of attention whose page masses
 * are distinct by construction, then (every record ingested, counted by
 * `memdecayctl stats`) an engine budget of 20 pages; the engine applies the
 * eviction commands that come back.  Passes when both runs evict the same
 * pages (by position), at least one, with no torn record, violation or
 * rejection on the device ring.  --ingest N then measures the daemon's ingest
 * rate from the device ring (and from the host ring, for comparison).
 * --host-only runs the host scenario twice and needs no device: it checks the
 * harness and that the baseline evicts, the same pages both times.
 *
 * Exit 0 pass, 1 fail, 77 no CUDA build or no device (ctest SKIP; with
 * MEMDECAY_EXPECT_GPU=1 that is a failure), 2 usage.  RESULT lines for
 * bench/gpu/run.sh.
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "md_kernels.h"
#include "md_kernels_cuda.h"
#include "memdecay.h"
#include "memdecay_clock.h"

#define P 16u
#define NP 32u
#define NH 8u
#define NKV (NP * P)
#define STEPS 6u
#define BUDGET 20u
#define SKIP 77

static const char *g_daemon, *g_ctl;
static char g_dir[64], g_sock[128];
static pid_t g_pid = -1;

static double now_s(void)
{
	return 1e-9 * (double)md_now_ns();
}

static int start_daemon(void)
{
	snprintf(g_dir, sizeof(g_dir), "/tmp/md-gpue2e.XXXXXX");
	if (!mkdtemp(g_dir))
		return -1;
	snprintf(g_sock, sizeof(g_sock), "%s/memdecayd.sock", g_dir);
	g_pid = fork();
	if (g_pid < 0)
		return -1;
	if (g_pid == 0) {
		execl(g_daemon, g_daemon, "--socket", g_sock, "--foreground", "--log-level", "warn",
		      (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 400; i++) {
		struct stat st;
		if (stat(g_sock, &st) == 0)
			return 0;
		if (waitpid(g_pid, NULL, WNOHANG) != 0)
			return -1;
		usleep(25000);
	}
	return -1;
}

static void stop_daemon(void)
{
	if (g_pid > 0) {
		kill(g_pid, SIGTERM);
		waitpid(g_pid, NULL, 0);
	}
	g_pid = -1;
	unlink(g_sock);
	rmdir(g_dir);
}

/* Runs memdecayctl; the first line of its output in out. */
static int ctl(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int ctl(char *out, size_t len, const char *fmt, ...)
{
	char args[256], cmd[640];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "'%s' --socket '%s' %s 2>&1", g_ctl, g_sock, args);
	FILE *f = popen(cmd, "r");
	if (!f)
		return -1;
	size_t n = fread(out, 1, len - 1, f);
	out[n] = '\0';
	return pclose(f) == 0 ? 0 : -1;
}

/* A number after "key": in memdecayctl's JSON (the first occurrence), -1 if
 * absent. */
static long long json_num(const char *js, const char *key)
{
	char k[64];
	snprintf(k, sizeof(k), "\"%s\":", key);
	const char *p = strstr(js, k);
	return p ? strtoll(p + strlen(k), NULL, 10) : -1;
}

/* Sum of the "rejected":{...} counters. */
static long long json_rejected(const char *js)
{
	const char *p = strstr(js, "\"rejected\":{");
	if (!p)
		return -1;
	long long sum = 0;
	for (p += 12; *p && *p != '}'; p++)
		if (*p == ':')
			sum += strtoll(p + 1, NULL, 10);
	return sum;
}

static int engine_stats(uint32_t id, char *js, size_t len)
{
	return ctl(js, len, "--json stats --engine %u", id);
}

/* Waits until the daemon counts `want` records from the engine, keeping the
 * engine's heartbeat alive. */
static int wait_records(md_client *c, uint32_t id, long long want, double timeout_s)
{
	char js[8192];
	double t0 = now_s();
	while (now_s() - t0 < timeout_s) {
		md_client_check(c, 0);
		if (engine_stats(id, js, sizeof(js)) == 0 && json_num(js, "records") >= want)
			return 0;
		usleep(10000);
	}
	fprintf(stderr, "gpu_e2e: the daemon counted %lld of %lld records\n",
		json_num(js, "records"), want);
	return -1;
}

static md_client *attach(const char *name, uint32_t capacity)
{
	struct md_client_config cfg;
	md_client_config_init(&cfg);
	cfg.socket_path = g_sock;
	cfg.engine_name = name;
	cfg.page_tokens = P;
	cfg.page_capacity = capacity;
	cfg.max_seqs = 1;
	md_client *c = NULL;
	for (int i = 0; i < 100; i++) {
		if (md_client_create_attached(&cfg, &c) == 0)
			return c;
		usleep(20000);
	}
	return NULL;
}

/* Step s's attention: one query, NH heads over NKV cells; page p's share
 * follows a permutation of 1..NP that changes with s, tokens within a page
 * and heads differ mildly, and a fifth of the pages hold one heavy token.
 * Rows sum to 1. */
static void synth(float *probs, uint32_t s)
{
	for (uint32_t h = 0; h < NH; h++) {
		float *row = probs + (size_t)h * NKV;
		double sum = 0;
		for (uint32_t c = 0; c < NKV; c++) {
			uint32_t p = c / P, k = c % P;
			double w = (double)((p * 7 + s * 3) % NP + 1);
			/* a heavy token in every fifth page, well above the default τ
			 * (0.01), so refresh bits are exercised too */
			double heavy = p % 5 == (s % 5) && k == 3 ? 60.0 : 1.0;
			row[c] = (float)(w * heavy * (1.0 + 0.05 * (double)(k % 4)) * (1.0 + 0.01 * h));
			sum += row[c];
		}
		for (uint32_t c = 0; c < NKV; c++)
			row[c] = (float)(row[c] / sum);
	}
}

struct run_out {
	uint64_t evicted_pos[NP];
	int n_evicted;
	long long torn, violations, rejected, records;
	struct md_gpu_counters gc;
};

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int run_scenario(int cuda, struct run_out *o)
{
	memset(o, 0, sizeof(*o));
	md_client *c = attach(cuda ? "e2e-cuda" : "e2e-host", 128);
	if (!c) {
		fprintf(stderr, "gpu_e2e: cannot attach to %s\n", g_sock);
		return -1;
	}
	md_gpu *g = NULL;
	float *d_probs = NULL;
	int32_t *d_page = NULL;
	uint8_t *d_tok = NULL;
	int rc;
	if (cuda) {
		struct md_gpu_config gcfg;
		md_gpu_config_init(&gcfg);
		gcfg.ring_capacity = 4096;
		gcfg.max_pages = NP;
		if ((rc = md_gpu_create(c, &gcfg, &g)) != 0) {
			fprintf(stderr, "gpu_e2e: md_gpu_create: %s (%s)\n", md_strerror(rc),
				md_client_last_error(c));
			md_client_destroy(c);
			return -1;
		}
	}
	uint32_t id = md_client_engine_id(c);
	uint64_t labels = 0;
	for (unsigned k = 0; k < P; k++)
		labels = md_label_set(labels, k, MD_REGION_TOOL_OUT);
	uint32_t slots[NP];
	for (uint32_t i = 0; i < NP; i++) {
		uint32_t gen;
		if (md_page_open(c, 0, (uint64_t)i * P, P, labels, &slots[i], &gen) ||
		    md_seq_step(c, 0, P)) {
			fprintf(stderr, "gpu_e2e: page open failed\n");
			goto fail;
		}
	}
	int32_t cell_page[NKV];
	uint8_t cell_tok[NKV];
	for (uint32_t cidx = 0; cidx < NKV; cidx++) {
		cell_page[cidx] = (int32_t)(cidx / P);
		cell_tok[cidx] = (uint8_t)(cidx % P);
	}
	static float probs[STEPS][NH * NKV];
	for (uint32_t s = 0; s < STEPS; s++)
		synth(probs[s], s);
	if (cuda) {
		/* Test data onto the device once; the publish path copies nothing. */
		if (cudaMalloc((void **)&d_probs, sizeof(probs)) != cudaSuccess ||
		    cudaMalloc((void **)&d_page, sizeof(cell_page)) != cudaSuccess ||
		    cudaMalloc((void **)&d_tok, sizeof(cell_tok)) != cudaSuccess ||
		    cudaMemcpy(d_probs, probs, sizeof(probs), cudaMemcpyHostToDevice) != cudaSuccess ||
		    cudaMemcpy(d_page, cell_page, sizeof(cell_page), cudaMemcpyHostToDevice) !=
			    cudaSuccess ||
		    cudaMemcpy(d_tok, cell_tok, sizeof(cell_tok), cudaMemcpyHostToDevice) !=
			    cudaSuccess) {
			fprintf(stderr, "gpu_e2e: test data: %s\n", cudaGetErrorString(cudaGetLastError()));
			goto fail;
		}
	}
	struct md_params_view pv;
	md_client_params(c, &pv);
	for (uint32_t s = 0; s < STEPS; s++) {
		md_seq_step(c, 0, 1);
		if (cuda) {
			struct md_gpu_probs in = {
				.probs = d_probs + (size_t)s * NH * NKV, .n_query = 1, .n_head = NH,
				.n_kv = NKV, .row_stride = NKV, .cell_page = d_page, .cell_token = d_tok,
				.n_pages = NP, .slots = slots,
			};
			rc = md_gpu_publish_probs(g, &in, NULL);
			if (rc != (int)NP) {
				fprintf(stderr, "gpu_e2e: md_gpu_publish_probs: %d (%s)\n", rc,
					md_client_last_error(c));
				goto fail;
			}
		} else {
			float tm[NP * P], pm[NP];
			uint16_t rf[NP];
			struct mdk_probs pr = { probs[s], 1, NH, NKV, NKV };
			struct mdk_cell_map map = { cell_page, cell_tok, NKV, NP, P };
			struct mdk_page_out out = { tm, pm, rf };
			float norm = pv.norm_mode == MD_NORM_RELATIVE ? (float)(NP * P) : 1.0f;
			if (mdk_page_mass(&pr, &map, (float)pv.tau, norm, &out, MDK_IMPL_AUTO))
				goto fail;
			for (uint32_t p = 0; p < NP; p++)
				if (md_attn_page(c, slots[p], pm[p], rf[p])) {
					fprintf(stderr, "gpu_e2e: md_attn_page failed\n");
					goto fail;
				}
		}
	}
	if (cuda && md_gpu_flush(g, NULL))
		goto fail;
	long long want = NP + NP + STEPS + (long long)STEPS * NP;
	if (wait_records(c, id, want, 30.0))
		goto fail;
	char js[8192];
	if (ctl(js, sizeof(js), "budget engine_pages %u --engine %u", BUDGET, id)) {
		fprintf(stderr, "gpu_e2e: memdecayctl budget: %s\n", js);
		goto fail;
	}
	double t0 = now_s(), last = t0;
	while (now_s() - t0 < 15.0 && now_s() - last < 0.5) {
		md_wait_commands(c, 50);
		struct md_evict ev[NP];
		int n = md_poll_commands(c, ev, NP);
		if (n < 0)
			goto fail;
		for (int i = 0; i < n && o->n_evicted < (int)NP; i++) {
			struct md_page_entry pe;
			md_page_info(c, ev[i].slot, &pe);
			o->evicted_pos[o->n_evicted++] = pe.first_pos;
			md_page_free(c, ev[i].slot, MD_FREE_EVICTED);
		}
		if (n > 0) {
			last = now_s();
			if (cuda)
				md_gpu_flush(g, NULL);
		}
		if (md_client_live_pages(c) <= BUDGET && n == 0 && now_s() - last > 0.2)
			break;
	}
	qsort(o->evicted_pos, (size_t)o->n_evicted, sizeof(uint64_t), cmp_u64);
	if (cuda)
		md_gpu_flush(g, NULL);
	if (engine_stats(id, js, sizeof(js)) == 0) {
		o->torn = json_num(js, "torn");
		o->violations = json_num(js, "violations");
		o->rejected = json_rejected(js);
		o->records = json_num(js, "records");
	}
	if (g)
		md_gpu_counters(g, &o->gc);
	rc = 0;
	goto done;
fail:
	rc = -1;
done:
	md_gpu_destroy(g);
	md_client_destroy(c);
	if (d_probs)
		cudaFree(d_probs);
	if (d_page)
		cudaFree(d_page);
	if (d_tok)
		cudaFree(d_tok);
	return rc;
}

/* The daemon's ingest rate: n attention records from one engine, first
 * publish to the daemon having consumed the last one. */
static int ingest_rate(int cuda, uint64_t n, double *rate)
{
	const uint32_t pages = 512, nkv = pages * P, nh = 8;
	md_client *c = attach(cuda ? "ingest-cuda" : "ingest-host", pages);
	if (!c)
		return -1;
	md_gpu *g = NULL;
	int rc = -1;
	if (cuda) {
		struct md_gpu_config gcfg;
		md_gpu_config_init(&gcfg);
		gcfg.ring_capacity = 1u << 16;
		if (md_gpu_create(c, &gcfg, &g)) {
			md_client_destroy(c);
			return -1;
		}
	}
	uint32_t id = md_client_engine_id(c);
	uint32_t *slots = malloc(pages * sizeof(uint32_t));
	float *probs = malloc((size_t)nh * nkv * sizeof(float));
	int32_t *cp = malloc(nkv * sizeof(int32_t));
	uint8_t *ct = malloc(nkv);
	float *d_probs = NULL;
	int32_t *d_page = NULL;
	uint8_t *d_tok = NULL;
	if (!slots || !probs || !cp || !ct)
		goto out;
	for (uint32_t i = 0; i < pages; i++) {
		uint32_t gen;
		if (md_page_open(c, 0, (uint64_t)i * P, P, 0, &slots[i], &gen))
			goto out;
	}
	for (uint32_t i = 0; i < nkv; i++) {
		cp[i] = (int32_t)(i / P);
		ct[i] = (uint8_t)(i % P);
	}
	for (size_t i = 0; i < (size_t)nh * nkv; i++)
		probs[i] = 1.0f / (float)nkv;
	if (cuda &&
	    (cudaMalloc((void **)&d_probs, (size_t)nh * nkv * sizeof(float)) != cudaSuccess ||
	     cudaMalloc((void **)&d_page, nkv * sizeof(int32_t)) != cudaSuccess ||
	     cudaMalloc((void **)&d_tok, nkv) != cudaSuccess ||
	     cudaMemcpy(d_probs, probs, (size_t)nh * nkv * sizeof(float), cudaMemcpyHostToDevice) ||
	     cudaMemcpy(d_page, cp, nkv * sizeof(int32_t), cudaMemcpyHostToDevice) ||
	     cudaMemcpy(d_tok, ct, nkv, cudaMemcpyHostToDevice)))
		goto out;
	if (cuda)
		md_gpu_flush(g, NULL);
	if (wait_records(c, id, pages, 30.0))
		goto out;
	uint64_t sent = 0;
	double t0 = now_s();
	while (sent < n) {
		if (cuda) {
			struct md_gpu_probs in = {
				.probs = d_probs, .n_query = 1, .n_head = nh, .n_kv = nkv,
				.row_stride = nkv, .cell_page = d_page, .cell_token = d_tok,
				.n_pages = pages, .slots = slots,
			};
			int k = md_gpu_publish_probs(g, &in, NULL);
			if (k > 0)
				sent += (uint64_t)k;
			else if (k == MD_EFULL)
				md_gpu_pending(g, NULL);
			else
				goto out;
		} else {
			for (uint32_t p = 0; p < pages && sent < n; p++) {
				int k = md_attn_page(c, slots[p], 0.01f, 0);
				if (k == 0)
					sent++;
				else if (k != MD_EFULL)
					goto out;
			}
		}
		md_client_check(c, 0);
	}
	if (cuda) {
		while (md_gpu_pending(g, NULL) > 0 && now_s() - t0 < 120)
			md_client_check(c, 0);
	} else if (wait_records(c, id, (long long)pages + (long long)n, 120.0)) {
		goto out;
	}
	*rate = (double)sent / (now_s() - t0);
	rc = 0;
out:
	if (d_probs)
		cudaFree(d_probs);
	if (d_page)
		cudaFree(d_page);
	if (d_tok)
		cudaFree(d_tok);
	free(slots);
	free(probs);
	free(cp);
	free(ct);
	md_gpu_destroy(g);
	md_client_destroy(c);
	return rc;
}

int main(int argc, char **argv)
{
	uint64_t ingest = 0;
	int host_only = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--daemon") && i + 1 < argc)
			g_daemon = argv[++i];
		else if (!strcmp(argv[i], "--ctl") && i + 1 < argc)
			g_ctl = argv[++i];
		else if (!strcmp(argv[i], "--ingest") && i + 1 < argc)
			ingest = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--host-only"))
			host_only = 1;
		else {
			fprintf(stderr, "usage: memdecay-gpu-e2e --daemon MEMDECAYD --ctl MEMDECAYCTL "
					"[--ingest N]\n");
			return 2;
		}
	}
	if (!g_daemon || !g_ctl) {
		fprintf(stderr, "usage: memdecay-gpu-e2e --daemon MEMDECAYD --ctl MEMDECAYCTL "
				"[--ingest N]\n");
		return 2;
	}
	if (host_only) {
		/* The harness and the host-ring baseline alone, for machines without
		 * a device: the scenario must evict, deterministically. */
		signal(SIGPIPE, SIG_IGN);
		if (start_daemon())
			return 1;
		struct run_out a, b;
		int ok = run_scenario(0, &a) == 0 && run_scenario(0, &b) == 0 && a.n_evicted > 0 &&
			 a.n_evicted == b.n_evicted &&
			 !memcmp(a.evicted_pos, b.evicted_pos, (size_t)a.n_evicted * 8) &&
			 a.torn == 0 && a.violations == 0 && a.rejected == 0;
		printf("evicted (host):");
		for (int i = 0; i < a.n_evicted; i++)
			printf(" %llu", (unsigned long long)a.evicted_pos[i]);
		printf("\n");
		printf("RESULT kernel=gpu_e2e_host_baseline ok=%d evicted=%d records=%lld\n", ok,
		       a.n_evicted, a.records);
		stop_daemon();
		return ok ? 0 : 1;
	}
	const char *expect = getenv("MEMDECAY_EXPECT_GPU");
	int required = expect && !strcmp(expect, "1");
	if (!mdk_cuda_built() || mdk_cuda_probe(NULL) < 0) {
		printf("%s: memdecay-gpu-e2e needs a CUDA device: %s\n", required ? "FAIL" : "SKIP",
		       mdk_cuda_last_error());
		printf("RESULT kernel=gpu_e2e ok=0 skipped=1\n");
		return required ? 1 : SKIP;
	}
	signal(SIGPIPE, SIG_IGN);
	if (start_daemon()) {
		fprintf(stderr, "gpu_e2e: memdecayd did not start\n");
		return 1;
	}
	struct run_out a, b;
	int ok = run_scenario(1, &a) == 0 && run_scenario(0, &b) == 0;
	int same = ok && a.n_evicted == b.n_evicted &&
		   !memcmp(a.evicted_pos, b.evicted_pos, (size_t)a.n_evicted * sizeof(uint64_t));
	ok = ok && same && a.n_evicted > 0 && a.torn == 0 && a.violations == 0 && a.rejected == 0;
	if (a.n_evicted) {
		printf("evicted (cuda):");
		for (int i = 0; i < a.n_evicted; i++)
			printf(" %llu", (unsigned long long)a.evicted_pos[i]);
		printf("\nevicted (host):");
		for (int i = 0; i < b.n_evicted; i++)
			printf(" %llu", (unsigned long long)b.evicted_pos[i]);
		printf("\n");
	}
	printf("RESULT kernel=gpu_e2e ok=%d evicted=%d same_as_host=%d torn=%lld violations=%lld "
	       "rejected=%lld records=%lld attn_records=%llu lifecycle_records=%llu\n",
	       ok, a.n_evicted, same, a.torn, a.violations, a.rejected, a.records,
	       (unsigned long long)a.gc.attn_records, (unsigned long long)a.gc.lifecycle_records);
	if (ok && ingest) {
		double rc_dev = 0, rc_host = 0;
		int d = ingest_rate(1, ingest, &rc_dev), h = ingest_rate(0, ingest, &rc_host);
		printf("RESULT kernel=ingest ok=%d records=%llu device_ring_recs_per_s=%.4g "
		       "host_ring_recs_per_s=%.4g\n",
		       d == 0 && h == 0, (unsigned long long)ingest, rc_dev, rc_host);
		ok = d == 0 && h == 0;
	}
	stop_daemon();
	return ok ? 0 : 1;
}
