/*
 * agent.c — memdecay-agent: runs an agent trace (docs/design.md §5) on llama.cpp
 * with the MemDecay adapter, asks each probe on a copy of the sequence, and
 * reports per probe the greedy answer, pass/fail and the gold answer's
 * log-probability, plus evictions by region, KV occupancy and tokens/s.
 * With no daemon at --socket it starts memdecayd (next to its own executable)
 * on a private socket and stops it on exit; the kernel ends that daemon too
 * when the agent dies without an exit (PR_SET_PDEATHSIG).
 */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <llama.h>

#include "md_llama.h"
#include "md_llama_chat.h"
#include "memdecay.h"
#include "memdecay_clock.h"
#include "sbuf.h"
#include "trace.h"

#define SEQ_MAIN 0
#define SEQ_PROBE 1

struct opts {
	const char *model, *trace, *policy, *socket, *daemon, *dump_tokens, *chat_format;
	long budget_tokens;
	int json, plain, no_daemon, quiet, threads, max_new, n_ctx, layer_stride, page_tokens;
	int tier_mb;
};

struct probe_result {
	const char *region, *question, *answer;
	char *output;
	int passed;
	double gold_logprob;
	uint32_t at_token;
};

struct run {
	struct opts o;
	struct llama_model *model;
	const struct llama_vocab *vocab;
	struct llama_context *ctx;
	md_llama *ad;
	llama_pos pos_plain[2];
	int32_t n_vocab;
	float *logits_buf;
	FILE *dump;
};

static double now_s(void)
{
	return 1e-9 * (double)md_now_ns();
}

static void log_quiet(enum ggml_log_level level, const char *text, void *user)
{
	(void)user;
	if (level == GGML_LOG_LEVEL_ERROR)
		fputs(text, stderr);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: memdecay-agent --model PATH --trace FILE.jsonl --policy P --budget-tokens N\n"
		"                      [--socket PATH] [--json]\n"
		"  --policy       a policy of docs/policies.md, or full (budget 0)\n"
		"  --budget-tokens N   per-sequence KV budget; 0 = no budget (full cache)\n"
		"  --socket PATH  memdecayd control socket; none there: start a private daemon\n"
		"  --json         one JSON object on stdout\n"
		"  --threads N (1) --ctx N (auto) --max-new N (24) --layer-stride K (1)\n"
		"  --page-tokens P (16) --daemon PATH (memdecayd next to this program)\n"
		"  --tier-mb N    keep evicted pages' K/V in a host tier of N MiB (docs/llama.md)\n"
		"  --no-daemon    adapter attached to no daemon (fail-open path)\n"
		"  --plain        plain llama.cpp, no adapter (same settings)\n"
		"  --dump-tokens FILE  write each probe's greedy token ids\n"
		"  --chat-format F     auto (the model's: Gemma turns for gemma models, else its\n"
		"                 template, else chatml), gemma, or a llama.cpp template name\n"
		"  --quiet        no progress on stderr\n");
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	memset(o, 0, sizeof(*o));
	o->budget_tokens = -1;
	o->threads = 1;  /* 2 threads on 2 shared cores spin at ggml's barriers */
	o->max_new = 24;
	o->layer_stride = 1;
	o->page_tokens = 16;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && v && (i++, 1))
		if (ARG("--model"))
			o->model = v;
		else if (ARG("--trace"))
			o->trace = v;
		else if (ARG("--policy"))
			o->policy = v;
		else if (ARG("--budget-tokens"))
			o->budget_tokens = strtol(v, NULL, 10);
		else if (ARG("--socket"))
			o->socket = v;
		else if (ARG("--daemon"))
			o->daemon = v;
		else if (ARG("--threads"))
			o->threads = atoi(v);
		else if (ARG("--ctx"))
			o->n_ctx = atoi(v);
		else if (ARG("--max-new"))
			o->max_new = atoi(v);
		else if (ARG("--layer-stride"))
			o->layer_stride = atoi(v);
		else if (ARG("--page-tokens"))
			o->page_tokens = atoi(v);
		else if (ARG("--tier-mb"))
			o->tier_mb = atoi(v);
		else if (ARG("--dump-tokens"))
			o->dump_tokens = v;
		else if (ARG("--chat-format"))
			o->chat_format = strcmp(v, "auto") ? v : NULL;
		else if (!strcmp(a, "--json"))
			o->json = 1;
		else if (!strcmp(a, "--plain"))
			o->plain = 1;
		else if (!strcmp(a, "--no-daemon"))
			o->no_daemon = 1;
		else if (!strcmp(a, "--quiet"))
			o->quiet = 1;
		else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			exit(0);
		} else {
			fprintf(stderr, "memdecay-agent: unknown or incomplete argument '%s'\n", a);
			return -1;
		}
#undef ARG
	}
	if (!o->model || !o->trace || !o->policy || o->budget_tokens < 0) {
		fprintf(stderr, "memdecay-agent: --model, --trace, --policy and --budget-tokens are required\n");
		return -1;
	}
	if (!strcmp(o->policy, "full"))
		o->budget_tokens = 0;
	if (o->page_tokens < 1 || o->page_tokens > 16 || o->threads < 1 || o->layer_stride < 1) {
		fprintf(stderr, "memdecay-agent: bad --page-tokens, --threads or --layer-stride\n");
		return -1;
	}
	return 0;
}

/* ---- the daemon ---- */

static int socket_answers(const char *path)
{
	struct sockaddr_un sa;
	if (strlen(path) >= sizeof(sa.sun_path))
		return 0;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	strcpy(sa.sun_path, path);
	int ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

static void default_socket(char *buf, size_t len)
{
	const char *e = getenv("MEMDECAY_SOCKET");
	const char *x = getenv("XDG_RUNTIME_DIR");
	if (e && *e)
		snprintf(buf, len, "%s", e);
	else if (x && *x)
		snprintf(buf, len, "%s/memdecay/memdecayd.sock", x);
	else
		snprintf(buf, len, "/run/memdecay/memdecayd.sock");
}

struct daemon {
	pid_t pid;
	char dir[PATH_MAX];
	char sock[PATH_MAX + 32];
};

static int daemon_start(const struct opts *o, struct daemon *d)
{
	char exe[PATH_MAX], path[PATH_MAX + 16];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (o->daemon) {
		snprintf(path, sizeof(path), "%s", o->daemon);
	} else {
		if (n <= 0)
			return -errno;
		exe[n] = '\0';
		char *slash = strrchr(exe, '/');
		if (slash)
			*slash = '\0';
		snprintf(path, sizeof(path), "%s/memdecayd", exe);
	}
	if (access(path, X_OK) != 0) {
		fprintf(stderr, "memdecay-agent: no memdecayd at %s\n", path);
		return -ENOENT;
	}
	const char *tmp = getenv("XDG_RUNTIME_DIR");
	snprintf(d->dir, sizeof(d->dir), "%s/memdecay-agent-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(d->dir))
		return -errno;
	snprintf(d->sock, sizeof(d->sock), "%s/memdecayd.sock", d->dir);
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		/* The private daemon must not outlive us, however we end (SIGKILL, a
		 * crash): the kernel sends it SIGTERM when this thread dies.  A parent
		 * that died before the prctl took effect is caught by getppid(). */
		if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent)
			_exit(127);
		if (o->quiet) {
			FILE *f = freopen("/dev/null", "w", stderr);
			(void)f;
		}
		execl(path, path, "--socket", d->sock, "--foreground", "--log-level", "warn", (char *)NULL);
		_exit(127);
	}
	d->pid = pid;
	for (int i = 0; i < 500; i++) {
		if (socket_answers(d->sock))
			return 0;
		int st;
		if (waitpid(pid, &st, WNOHANG) == pid) {
			d->pid = 0;
			fprintf(stderr, "memdecay-agent: memdecayd exited at start\n");
			return -ECHILD;
		}
		usleep(10000);
	}
	fprintf(stderr, "memdecay-agent: memdecayd did not open %s\n", d->sock);
	return -ETIMEDOUT;
}

static void daemon_stop(struct daemon *d)
{
	if (d->pid > 0) {
		kill(d->pid, SIGTERM);
		int st;
		for (int i = 0; i < 200 && waitpid(d->pid, &st, WNOHANG) == 0; i++)
			usleep(10000);
		if (waitpid(d->pid, &st, WNOHANG) == 0) {
			kill(d->pid, SIGKILL);
			waitpid(d->pid, &st, 0);
		}
		d->pid = 0;
	}
	if (d->sock[0])
		unlink(d->sock);
	if (d->dir[0])
		rmdir(d->dir);
}

/* ---- feeding ---- */

static int feed(struct run *r, llama_seq_id seq, const llama_token *tok, const uint8_t *regions,
		uint32_t n, int logits)
{
	if (!r->o.plain)
		return md_llama_decode(r->ad, seq, tok, seq == SEQ_MAIN ? regions : NULL, n, logits);
	uint32_t cap = llama_n_ubatch(r->ctx);
	struct llama_batch b = llama_batch_init((int32_t)cap, 0, 1);
	int rc = 0;
	for (uint32_t done = 0; done < n && !rc;) {
		uint32_t k = n - done < cap ? n - done : cap;
		for (uint32_t i = 0; i < k; i++) {
			b.token[i] = tok[done + i];
			b.pos[i] = r->pos_plain[seq] + (llama_pos)i;
			b.n_seq_id[i] = 1;
			b.seq_id[i][0] = seq;
			b.logits[i] = logits == 2 || (logits == 1 && done + k == n && i == k - 1);
		}
		b.n_tokens = (int32_t)k;
		rc = llama_decode(r->ctx, b);
		if (!rc)
			r->pos_plain[seq] += (llama_pos)k;
		done += k;
	}
	llama_batch_free(b);
	return rc;
}

static void seq_copy(struct run *r, llama_seq_id src, llama_seq_id dst)
{
	if (!r->o.plain) {
		md_llama_seq_copy(r->ad, src, dst);
		return;
	}
	llama_memory_seq_rm(llama_get_memory(r->ctx), dst, -1, -1);
	llama_memory_seq_cp(llama_get_memory(r->ctx), src, dst, -1, -1);
	r->pos_plain[dst] = r->pos_plain[src];
}

static void seq_truncate(struct run *r, llama_seq_id seq, llama_pos p0)
{
	if (!r->o.plain) {
		md_llama_seq_truncate(r->ad, seq, p0);
		return;
	}
	llama_memory_seq_rm(llama_get_memory(r->ctx), seq, p0, -1);
	r->pos_plain[seq] = p0;
}

static llama_pos pos_next(struct run *r, llama_seq_id seq)
{
	return r->o.plain ? r->pos_plain[seq] : md_llama_pos_next(r->ad, seq);
}

static double log_softmax_at(const float *logits, int32_t n, llama_token t)
{
	float mx = -FLT_MAX;
	for (int32_t i = 0; i < n; i++)
		if (logits[i] > mx)
			mx = logits[i];
	double s = 0;
	for (int32_t i = 0; i < n; i++)
		s += exp((double)(logits[i] - mx));
	return (double)(logits[t] - mx) - log(s);
}

static llama_token argmax(const float *logits, int32_t n)
{
	int32_t best = 0;
	for (int32_t i = 1; i < n; i++)
		if (logits[i] > logits[best])
			best = i;
	return best;
}

static char *detokenize(const struct llama_vocab *v, const llama_token *t, int32_t n)
{
	int32_t cap = 64 + n * 16;
	char *buf = malloc((size_t)cap + 1);
	if (!buf)
		return NULL;
	int32_t len = llama_detokenize(v, t, n, buf, cap, false, false);
	if (len < 0) {
		cap = -len;
		char *b2 = realloc(buf, (size_t)cap + 1);
		if (!b2) {
			free(buf);
			return NULL;
		}
		buf = b2;
		len = llama_detokenize(v, t, n, buf, cap, false, false);
	}
	buf[len < 0 ? 0 : len] = '\0';
	return buf;
}

static int ci_contains(const char *hay, const char *needle)
{
	size_t n = strlen(needle);
	if (!n)
		return 1;
	for (const char *h = hay; *h; h++)
		if (!strncasecmp(h, needle, n))
			return 1;
	return 0;
}

static int run_probe(struct run *r, struct md_llama_chat *chat, const struct md_trace_item *it,
		     struct probe_result *pr)
{
	char *delta = NULL;
	llama_token *q = NULL, *ans = NULL;
	uint32_t nq = 0, nans = 0;
	int rc = md_llama_chat_peek(chat, "user", it->question, 1, &delta);
	if (!rc)
		rc = md_llama_tokenize(r->model, delta, 0, &q, &nq);
	free(delta);
	if (!rc)
		rc = md_llama_tokenize(r->model, it->answer, 0, &ans, &nans);
	if (rc)
		goto out;
	seq_copy(r, SEQ_MAIN, SEQ_PROBE);
	rc = feed(r, SEQ_PROBE, q, NULL, nq, 1);
	if (rc)
		goto out;
	memcpy(r->logits_buf, llama_get_logits_ith(r->ctx, -1), sizeof(float) * (size_t)r->n_vocab);
	llama_pos prompt_end = pos_next(r, SEQ_PROBE);

	/* log p(gold | prompt), teacher-forced */
	double lp = nans ? log_softmax_at(r->logits_buf, r->n_vocab, ans[0]) : 0;
	if (nans > 1) {
		rc = feed(r, SEQ_PROBE, ans, NULL, nans - 1, 2);
		if (rc)
			goto out;
		for (uint32_t i = 0; i + 1 < nans; i++)
			lp += log_softmax_at(llama_get_logits_ith(r->ctx, (int32_t)i), r->n_vocab,
					     ans[i + 1]);
		seq_truncate(r, SEQ_PROBE, prompt_end);
	}
	pr->gold_logprob = lp;

	/* greedy answer */
	llama_token *gen = malloc(sizeof(llama_token) * (size_t)(r->o.max_new + 1));
	int32_t ng = 0;
	llama_token t = argmax(r->logits_buf, r->n_vocab);
	while (gen && ng < r->o.max_new && !llama_vocab_is_eog(r->vocab, t)) {
		gen[ng++] = t;
		if (ng == r->o.max_new)
			break;
		rc = feed(r, SEQ_PROBE, &t, NULL, 1, 1);
		if (rc)
			break;
		t = argmax(llama_get_logits_ith(r->ctx, -1), r->n_vocab);
	}
	pr->output = gen ? detokenize(r->vocab, gen, ng) : NULL;
	if (r->dump && gen) {
		for (int32_t i = 0; i < ng; i++)
			fprintf(r->dump, "%s%d", i ? " " : "", gen[i]);
		fputc('\n', r->dump);
	}
	free(gen);
	pr->passed = pr->output && ci_contains(pr->output, it->answer);
	seq_truncate(r, SEQ_PROBE, 0);
out:
	free(q);
	free(ans);
	return rc;
}

/* ---- output ---- */

/* Model output can hold any bytes (a token may end mid-character): the
 * daemon's JSON string writer (sidecar/common/sbuf.h) keeps the file valid. */
static void json_str(FILE *f, const char *s)
{
	struct md__sbuf b = { 0 };
	md__sbuf_json_str(&b, s ? s : "");
	if (b.oom)
		fputs("\"\"", f);
	else
		fwrite(b.p, 1, b.len, f);
	md__sbuf_free(&b);
}

static void json_num(FILE *f, double v)
{
	if (isfinite(v))
		fprintf(f, "%.6g", v);
	else
		fputs("null", f);
}

/* ---- the run ---- */

/* The trace's messages as tokens, with each message's region label. */
struct trace_tokens {
	llama_token **tok;
	uint32_t *n;
	int *region;
	uint32_t total, n_probes;
};

/* What the feed loop measured, and the adapter's counters at its end. */
struct summary {
	struct probe_result *probes;
	uint32_t np, fed, assistant_tokens, passed;
	double feed_s, assist_s, tps, dtps, mean;
	uint64_t peak;
	struct md_llama_stats st;
};

static int load_trace(const struct opts *o, struct md_trace *tr)
{
	size_t bad_line = 0;
	int rc = md_trace_load(o->trace, tr, &bad_line);
	if (rc) {
		if (rc == -EINVAL)
			fprintf(stderr, "memdecay-agent: %s\n", md_trace_error());
		else
			fprintf(stderr, "memdecay-agent: %s: %s (line %zu)\n", o->trace, strerror(-rc), bad_line);
		return -1;
	}
	return 0;
}

static int load_model(struct run *r)
{
	llama_backend_init();
	if (r->o.quiet || r->o.json)
		llama_log_set(log_quiet, NULL);
	struct llama_model_params mp = llama_model_default_params();
	mp.n_gpu_layers = 0;
	r->model = llama_model_load_from_file(r->o.model, mp);
	if (!r->model) {
		fprintf(stderr, "memdecay-agent: cannot load %s\n", r->o.model);
		return -1;
	}
	r->vocab = llama_model_get_vocab(r->model);
	r->n_vocab = llama_vocab_n_tokens(r->vocab);
	r->logits_buf = malloc(sizeof(float) * (size_t)r->n_vocab);
	return 0;
}

/* Labels: each message's span through the model's chat template. */
static int tokenize_trace(struct run *r, const struct md_trace *tr, struct trace_tokens *tt)
{
	struct md_llama_chat chat;
	md_llama_chat_init(&chat, r->model, r->o.chat_format);
	tt->tok = calloc(tr->n, sizeof(*tt->tok));
	tt->n = calloc(tr->n, sizeof(*tt->n));
	tt->region = calloc(tr->n, sizeof(*tt->region));
	tt->total = tt->n_probes = 0;
	for (size_t i = 0; i < tr->n; i++) {
		const struct md_trace_item *it = &tr->items[i];
		if (it->is_probe) {
			tt->n_probes++;
			continue;
		}
		char *delta;
		tt->region[i] = md_llama_region_of(it->role, it->region);
		if (tt->region[i] < 0) {
			fprintf(stderr, "memdecay-agent: unknown region '%s'\n", it->region);
			return -1;
		}
		int rc = md_llama_chat_push(&chat, it->role, it->content, &delta);
		if (!rc)
			rc = md_llama_tokenize(r->model, delta, tt->total == 0, &tt->tok[i], &tt->n[i]);
		free(delta);
		if (rc) {
			fprintf(stderr, "memdecay-agent: chat template: %s\n", strerror(-rc));
			return -1;
		}
		tt->total += tt->n[i];
	}
	md_llama_chat_free(&chat);
	return 0;
}

static void trace_tokens_free(struct trace_tokens *tt, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(tt->tok[i]);
	free(tt->tok);
	free(tt->n);
	free(tt->region);
}

static struct llama_context_params context_params(const struct opts *o, uint32_t n_ctx)
{
	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = n_ctx;
	cp.n_batch = cp.n_ubatch = 512;
	cp.n_seq_max = 2;
	cp.n_threads = cp.n_threads_batch = o->threads;
	cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
	cp.kv_unified = true;
	cp.no_perf = true;
	return cp;
}

/* The adapter, attached to the daemon at --socket or the default socket, or
 * to a private daemon started when none answers there; it adjusts cp. */
static int create_adapter(struct run *r, struct daemon *d, struct llama_context_params *cp)
{
	const char *sock = NULL;
	char defsock[PATH_MAX + 32];
	struct md_llama_config ac;
	md_llama_config_init(&ac);
	ac.policy = r->o.policy && strcmp(r->o.policy, "full") ? r->o.policy : NULL;
	ac.budget_sequence_tokens = r->o.budget_tokens;
	ac.page_tokens = (uint32_t)r->o.page_tokens;
	ac.max_seqs = 1;
	ac.layer_stride = (uint32_t)r->o.layer_stride;
	ac.tier_mb = r->o.tier_mb > 0 ? (uint32_t)r->o.tier_mb : 0;
	ac.attach = !r->o.no_daemon;
	ac.quiet = 0;
	if (ac.attach) {
		if (r->o.socket)
			sock = r->o.socket;
		else {
			default_socket(defsock, sizeof(defsock));
			sock = defsock;
		}
		if (!socket_answers(sock)) {
			if (daemon_start(&r->o, d) == 0)
				sock = d->sock;
			else
				fprintf(stderr, "memdecay-agent: no daemon; running fail-open\n");
		}
		ac.socket_path = sock;
	}
	if (md_llama_create(&ac, r->model, &r->ad)) {
		fprintf(stderr, "memdecay-agent: adapter config rejected\n");
		return -1;
	}
	md_llama_context_params(r->ad, cp);
	return 0;
}

static int create_context(struct run *r, struct daemon *d, struct llama_context_params cp)
{
	r->ctx = llama_init_from_model(r->model, cp);
	if (!r->ctx) {
		fprintf(stderr, "memdecay-agent: cannot create a context of %u cells\n", cp.n_ctx);
		daemon_stop(d);
		return -1;
	}
	if (r->ad && md_llama_bind(r->ad, r->ctx)) {
		fprintf(stderr, "memdecay-agent: adapter bind failed\n");
		daemon_stop(d);
		return -1;
	}
	if (r->o.dump_tokens)
		r->dump = fopen(r->o.dump_tokens, "w");
	return 0;
}

static int ask_probe(struct run *r, struct md_llama_chat *chat, const struct md_trace_item *it,
		     struct summary *sm)
{
	struct probe_result *pr = &sm->probes[sm->np++];
	pr->region = it->probe_region ? it->probe_region : "?";
	pr->question = it->question;
	pr->answer = it->answer;
	pr->at_token = sm->fed;
	int rc = run_probe(r, chat, it, pr);
	if (!r->o.quiet && !r->o.json)
		fprintf(stderr, "probe %u [%s] %s -> %s\n", sm->np, pr->region,
			pr->passed ? "pass" : "FAIL", pr->output ? pr->output : "");
	return rc;
}

/* One message into the main sequence: an assistant turn as teacher-forced
 * decode steps of one token each, any other message as one prefill. */
static int feed_message(struct run *r, struct md_llama_chat *chat, const struct md_trace_item *it,
			const llama_token *tok, uint32_t n, int region, struct summary *sm)
{
	int rc = 0;
	char *delta;
	md_llama_chat_push(chat, it->role, it->content, &delta);
	free(delta);
	uint8_t *reg = malloc(n ? n : 1);
	memset(reg, region, n);
	double t0 = now_s();
	if (!strcmp(it->role, "assistant")) {
		for (uint32_t k = 0; k < n && !rc; k++)
			rc = feed(r, SEQ_MAIN, &tok[k], &reg[k], 1, 0);
		double dt = now_s() - t0;
		sm->assist_s += dt;
		sm->assistant_tokens += n;
	} else {
		rc = feed(r, SEQ_MAIN, tok, reg, n, 0);
	}
	sm->feed_s += now_s() - t0;
	sm->fed += n;
	free(reg);
	return rc;
}

static int feed_trace(struct run *r, const struct md_trace *tr, const struct trace_tokens *tt,
		      struct summary *sm)
{
	struct md_llama_chat chat;
	md_llama_chat_init(&chat, r->model, r->o.chat_format);
	sm->probes = calloc(tt->n_probes ? tt->n_probes : 1, sizeof(*sm->probes));
	int rc = 0;
	for (size_t i = 0; i < tr->n && !rc; i++) {
		const struct md_trace_item *it = &tr->items[i];
		if (it->is_probe)
			rc = ask_probe(r, &chat, it, sm);
		else
			rc = feed_message(r, &chat, it, tt->tok[i], tt->n[i], tt->region[i], sm);
	}
	if (rc)
		fprintf(stderr, "memdecay-agent: decode failed (%d)\n", rc);
	md_llama_chat_free(&chat);
	return rc;
}

static void summarize(const struct run *r, struct summary *sm)
{
	memset(&sm->st, 0, sizeof(sm->st));
	if (r->ad)
		md_llama_get_stats(r->ad, &sm->st);
	sm->passed = 0;
	for (uint32_t i = 0; i < sm->np; i++)
		sm->passed += (uint32_t)sm->probes[i].passed;
	sm->tps = sm->feed_s > 0 ? sm->fed / sm->feed_s : 0;
	sm->dtps = sm->assist_s > 0 ? sm->assistant_tokens / sm->assist_s : 0;
	sm->peak = r->o.plain ? sm->fed : sm->st.peak_live_tokens;
	sm->mean = r->o.plain ? 0 : sm->st.mean_live_tokens;
}

static void print_json_probes(FILE *f, const struct summary *sm)
{
	fprintf(f, ", \"probes_passed\": %u, \"probes\": [", sm->passed);
	for (uint32_t i = 0; i < sm->np; i++) {
		const struct probe_result *p = &sm->probes[i];
		fprintf(f, "%s{\"region\": ", i ? ", " : "");
		json_str(f, p->region);
		fprintf(f, ", \"question\": ");
		json_str(f, p->question);
		fprintf(f, ", \"answer\": ");
		json_str(f, p->answer);
		fprintf(f, ", \"output\": ");
		json_str(f, p->output);
		fprintf(f, ", \"passed\": %s, \"gold_logprob\": ", p->passed ? "true" : "false");
		json_num(f, p->gold_logprob);
		fprintf(f, ", \"at_token\": %u}", p->at_token);
	}
	fprintf(f, "]}\n");
}

static void print_json(const struct opts *o, uint32_t trace_tokens, uint32_t n_ctx,
		       const struct summary *sm)
{
	FILE *f = stdout;
	const struct md_llama_stats *st = &sm->st;
	fprintf(f, "{\"policy\": ");
	json_str(f, o->plain ? "plain" : (o->budget_tokens ? o->policy : "full"));
	fprintf(f, ", \"trace_tokens\": %u, \"budget_tokens\": %ld, \"page_tokens\": %d",
		trace_tokens, o->budget_tokens, o->page_tokens);
	fprintf(f, ", \"n_ctx\": %u, \"peak_occupancy_tokens\": %llu, \"mean_occupancy_tokens\": ",
		n_ctx, (unsigned long long)sm->peak);
	json_num(f, sm->mean);
	fprintf(f, ", \"evictions\": %llu, \"evictions_by_region\": {",
		(unsigned long long)st->evictions);
	for (int k = 0; k < 8; k++)
		fprintf(f, "%s\"%s\": %llu", k ? ", " : "", md_llama_region_name(k),
			(unsigned long long)st->evictions_by_region[k]);
	fprintf(f, "}, \"tokens_per_s\": ");
	json_num(f, sm->tps);
	fprintf(f, ", \"decode_tokens_per_s\": ");
	json_num(f, sm->dtps);
	fprintf(f, ", \"daemon_attached\": %s, \"detaches\": %llu, \"reattaches\": %llu",
		st->attached ? "true" : "false", (unsigned long long)st->detaches,
		(unsigned long long)st->reattaches);
	fprintf(f, ", \"budget_wait_timeouts\": %llu, \"budget_unreachable\": %llu",
		(unsigned long long)st->budget_wait_timeouts,
		(unsigned long long)st->budget_unreachable);
	fprintf(f, ", \"cmds_stale\": %llu, \"cmds_refused\": %llu",
		(unsigned long long)st->cmds_stale,
		(unsigned long long)st->cmds_refused);
	fprintf(f, ", \"attn_records\": %llu, \"attn_dropped\": %llu, \"local_evictions\": %llu",
		(unsigned long long)st->attn_records, (unsigned long long)st->attn_dropped,
		(unsigned long long)st->local_evictions);
	fprintf(f, ", \"tier_on\": %s, \"tier_kept\": %llu, \"tier_restored\": %llu"
		", \"tier_dropped\": %llu, \"tier_peak_pages\": %llu",
		st->tier_on ? "true" : "false", (unsigned long long)st->tier_kept,
		(unsigned long long)st->tier_restored, (unsigned long long)st->tier_dropped,
		(unsigned long long)st->tier_peak_pages);
	print_json_probes(f, sm);
}

static void print_text(const struct opts *o, uint32_t trace_tokens, uint32_t n_ctx,
		       const struct summary *sm)
{
	printf("trace %s: %u tokens, policy %s, budget %ld tokens, n_ctx %u\n", o->trace,
	       trace_tokens, o->budget_tokens ? o->policy : "full", o->budget_tokens, n_ctx);
	printf("%-4s %-11s %-6s %9s  %s\n", "#", "region", "result", "logp", "question -> answer");
	for (uint32_t i = 0; i < sm->np; i++) {
		const struct probe_result *p = &sm->probes[i];
		printf("%-4u %-11s %-6s %9.3f  %s -> %s\n", i + 1, p->region,
		       p->passed ? "pass" : "FAIL", p->gold_logprob, p->question,
		       p->output ? p->output : "");
	}
	printf("probes passed %u/%u; evictions %llu (", sm->passed, sm->np,
	       (unsigned long long)sm->st.evictions);
	for (int k = 0; k < 8; k++)
		printf("%s%s %llu", k ? ", " : "", md_llama_region_name(k),
		       (unsigned long long)sm->st.evictions_by_region[k]);
	printf(")\nKV occupancy peak %llu mean %.1f tokens; %.1f tokens/s (decode %.1f)\n",
	       (unsigned long long)sm->peak, sm->mean, sm->tps, sm->dtps);
}

static void run_free(struct run *r)
{
	if (r->dump)
		fclose(r->dump);
	md_llama_destroy(r->ad);
	llama_free(r->ctx);
	llama_model_free(r->model);
	free(r->logits_buf);
}

int main(int argc, char **argv)
{
	struct run r;
	memset(&r, 0, sizeof(r));
	if (parse_opts(argc, argv, &r.o)) {
		usage(stderr);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	struct md_trace tr;
	if (load_trace(&r.o, &tr) || load_model(&r))
		return 1;
	struct trace_tokens tt;
	if (tokenize_trace(&r, &tr, &tt))
		return 1;

	uint32_t n_ctx = r.o.n_ctx ? (uint32_t)r.o.n_ctx : ((tt.total + 256 + 255) / 256) * 256;
	struct llama_context_params cp = context_params(&r.o, n_ctx);
	struct daemon d;
	memset(&d, 0, sizeof(d));
	if (!r.o.plain && create_adapter(&r, &d, &cp))
		return 1;
	if (create_context(&r, &d, cp))
		return 1;

	struct summary sm;
	memset(&sm, 0, sizeof(sm));
	int rc = feed_trace(&r, &tr, &tt, &sm);
	summarize(&r, &sm);
	if (r.o.json)
		print_json(&r.o, tt.total, n_ctx, &sm);
	else
		print_text(&r.o, tt.total, n_ctx, &sm);

	for (uint32_t i = 0; i < sm.np; i++)
		free(sm.probes[i].output);
	free(sm.probes);
	trace_tokens_free(&tt, tr.n);
	run_free(&r);
	md_trace_free(&tr);
	daemon_stop(&d);
	return rc ? 1 : 0;
}
