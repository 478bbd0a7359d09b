/*
 * bench_ipc.c — memdecay-bench-ipc: the driver.  For every transport and every
 * repetition it forks a peer on another core, times round trips of one message
 * (p50/p99/max) and one-way streaming throughput, then reports the median over
 * repetitions with its spread, and the ratios docs/design.md §7 sets targets on.
 * Transports run interleaved, rotating order each repetition, so background
 * load on a shared machine falls on all of them alike.
 */
#define _GNU_SOURCE
#include "bench_ipc.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "memdecay_abi.h"
#include "memdecay_clock.h"

static const struct bench_transport *const transports[] = {
	&bench_floor, &bench_ring_spin, &bench_ring_doorbell, &bench_unix_socket, &bench_zeromq,
};
#define N_TRANSPORTS (sizeof(transports) / sizeof(transports[0]))
#define MAX_REPS 64

struct options {
	int json;
	uint64_t iters;      /* timed round trips per repetition */
	uint64_t warmup;     /* untimed round trips before them */
	uint64_t tput_msgs;  /* messages per throughput repetition */
	int reps;
	int cpu_self, cpu_peer;
	const char *only;
};

struct rep_result {
	double p50_ns, p99_ns, max_ns, msgs_per_s;
	uint64_t doorbells, wakeups;
};

struct summary {
	const char *name;
	int ok;
	double p50_ns, p99_ns, max_ns, msgs_per_s;
	double p50_min, p50_max, mps_min, mps_max;
	double doorbells_per_rtt, wakeups_per_rtt;
	unsigned bytes_out, bytes_back;
};

static double ticks_per_ns = 1.0;

int bench_spin_expired(uint64_t *spins, uint64_t *deadline_ns)
{
	if ((++*spins & ((1u << 20) - 1)) != 0)
		return 0;
	uint64_t now = md_now_ns();
	if (*deadline_ns == 0) {
		*deadline_ns = now + BENCH_SPIN_DEADLINE_NS;
		return 0;
	}
	return now > *deadline_ns;
}

int bench_wait_peer_ready(struct bench_shared *sh)
{
	uint64_t deadline = md_now_ns() + BENCH_SPIN_DEADLINE_NS;
	while (!__atomic_load_n(&sh->peer_ready, __ATOMIC_ACQUIRE)) {
		if (md_now_ns() > deadline)
			return -1;
		sched_yield();
	}
	return 0;
}

static int pin_to(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set);
}

static void calibrate_ticks(void)
{
	uint64_t n0 = md_now_ns(), t0 = bench_ticks();
	while (md_now_ns() - n0 < 100000000ull)
		;
	uint64_t n1 = md_now_ns(), t1 = bench_ticks();
	ticks_per_ns = (double)(t1 - t0) / (double)(n1 - n0);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

/* One fork: the child plays the peer on cpu_peer, we play self. */
static int run_once(const struct bench_transport *t, const struct options *o, enum bench_mode mode,
		    uint64_t n, uint64_t *samples, struct bench_shared *out)
{
	struct bench_shared *sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
				       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return -errno;
	void *state = NULL;
	int rc = t->setup(&state);
	if (rc < 0) {
		munmap(sh, 4096);
		return rc;
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		rc = -errno;
		t->teardown(state);
		munmap(sh, 4096);
		return rc;
	}
	if (pid == 0) {
		if (pin_to(o->cpu_peer) < 0)
			_exit(3);
		_exit(t->peer(state, sh, mode, n) == 0 ? 0 : 1);
	}
	rc = bench_wait_peer_ready(sh);
	if (rc == 0)
		rc = t->self(state, sh, mode, n, samples);
	if (rc != 0)
		kill(pid, SIGKILL);
	int status = 0;
	waitpid(pid, &status, 0);
	if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
		rc = -EPROTO;
	*out = *sh;
	t->teardown(state);
	munmap(sh, 4096);
	return rc;
}

static void rtt_stats(uint64_t *timed, uint64_t n, struct rep_result *res)
{
	qsort(timed, n, sizeof(*timed), cmp_u64);
	res->p50_ns = (double)timed[n / 2] / ticks_per_ns;
	res->p99_ns = (double)timed[(n * 99) / 100] / ticks_per_ns;
	res->max_ns = (double)timed[n - 1] / ticks_per_ns;
}

/* Round trips of the floor and ring_spin, alternating in one process pair. */
static int run_pair_rep(const struct options *o, uint64_t *samples, struct rep_result *floor_res,
			struct rep_result *ring_res)
{
	struct bench_shared sh;
	uint64_t n = o->warmup + o->iters;
	int rc = run_once(&bench_floor_ring_pair, o, BENCH_RTT, n, samples, &sh);
	if (rc != 0)
		return rc;
	rtt_stats(samples + o->warmup, o->iters, floor_res);
	rtt_stats(samples + n + o->warmup, o->iters, ring_res);
	return 0;
}

static int run_rep(const struct bench_transport *t, const struct options *o, uint64_t *samples,
		   struct rep_result *res, int skip_rtt)
{
	struct bench_shared sh;
	uint64_t n = o->warmup + o->iters;
	int rc;
	if (!skip_rtt) {
		rc = run_once(t, o, BENCH_RTT, n, samples, &sh);
		if (rc != 0)
			return rc;
		rtt_stats(samples + o->warmup, o->iters, res);
		res->doorbells = sh.doorbells;
		res->wakeups = sh.wakeups;
	}
	rc = run_once(t, o, BENCH_TPUT, o->tput_msgs, NULL, &sh);
	if (rc != 0)
		return rc;
	double secs = (double)(sh.tput_end_ns - sh.tput_start_ns) / 1e9;
	res->msgs_per_s = secs > 0 ? (double)o->tput_msgs / secs : 0;
	return 0;
}

static void summarize(const struct bench_transport *t, const struct rep_result *r, int reps,
		      const struct options *o, struct summary *s)
{
	double p50[MAX_REPS], p99[MAX_REPS], mps[MAX_REPS];
	s->name = t->name;
	s->ok = 1;
	s->max_ns = 0;
	s->bytes_out = t->bytes_out;
	s->bytes_back = t->bytes_back;
	uint64_t bells = 0, wakes = 0;
	for (int i = 0; i < reps; i++) {
		p50[i] = r[i].p50_ns;
		p99[i] = r[i].p99_ns;
		mps[i] = r[i].msgs_per_s;
		if (r[i].max_ns > s->max_ns)
			s->max_ns = r[i].max_ns;
		bells += r[i].doorbells;
		wakes += r[i].wakeups;
	}
	s->p50_ns = median(p50, reps);
	s->p50_min = p50[0];
	s->p50_max = p50[reps - 1];
	s->p99_ns = median(p99, reps);
	s->msgs_per_s = median(mps, reps);
	s->mps_min = mps[0];
	s->mps_max = mps[reps - 1];
	double rtts = (double)reps * (double)(o->warmup + o->iters);
	s->doorbells_per_rtt = (double)bells / rtts;
	s->wakeups_per_rtt = (double)wakes / rtts;
}

static const struct summary *find(const struct summary *s, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (s[i].ok && strcmp(s[i].name, name) == 0)
			return &s[i];
	return NULL;
}

static void read_cpu_model(char *buf, size_t len)
{
	snprintf(buf, len, "unknown");
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return;
	char line[512];
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "model name", 10) == 0) {
			char *c = strchr(line, ':');
			if (c) {
				c++;
				while (*c == ' ' || *c == '\t')
					c++;
				c[strcspn(c, "\n")] = 0;
				snprintf(buf, len, "%s", c);
			}
			break;
		}
	}
	fclose(f);
}

static void read_loadavg(char *buf, size_t len)
{
	snprintf(buf, len, "unknown");
	FILE *f = fopen("/proc/loadavg", "r");
	if (!f)
		return;
	if (fgets(buf, (int)len, f))
		buf[strcspn(buf, "\n")] = 0;
	fclose(f);
}

static void json_ratio(const char *key, const struct summary *num, const struct summary *den,
		       int last)
{
	if (num && den && den->p50_ns > 0)
		printf("    \"%s\": %.3f%s\n", key, num->p50_ns / den->p50_ns, last ? "" : ",");
	else
		printf("    \"%s\": null%s\n", key, last ? "" : ",");
}

static const char *target_json(const struct summary *a, const struct summary *b, double limit,
			       int want_below)
{
	if (!a || !b || b->p50_ns <= 0)
		return "null";
	double r = a->p50_ns / b->p50_ns;
	return (want_below ? r <= limit : r >= limit) ? "true" : "false";
}

static void print_json(const struct summary *s, int n, const struct options *o,
		       const char *loadavg_start, int paired, double pr_med, double pr_min,
		       double pr_max)
{
	char model[256], loadavg_end[128], date[64];
	struct utsname u;
	time_t now = time(NULL);
	read_cpu_model(model, sizeof(model));
	read_loadavg(loadavg_end, sizeof(loadavg_end));
	strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
	uname(&u);

	printf("{\n  \"transports\": [\n");
	for (int i = 0, first = 1; i < n; i++) {
		if (!s[i].ok)
			continue;
		printf("%s    {\"name\": \"%s\", \"rtt_ns_p50\": %.0f, \"rtt_ns_p99\": %.0f, "
		       "\"rtt_ns_max\": %.0f, \"msgs_per_s\": %.0f,\n"
		       "     \"rtt_ns_p50_min\": %.0f, \"rtt_ns_p50_max\": %.0f, "
		       "\"msgs_per_s_min\": %.0f, \"msgs_per_s_max\": %.0f,\n"
		       "     \"bytes_out\": %u, \"bytes_back\": %u",
		       first ? "" : ",\n", s[i].name, s[i].p50_ns, s[i].p99_ns, s[i].max_ns,
		       s[i].msgs_per_s, s[i].p50_min, s[i].p50_max, s[i].mps_min, s[i].mps_max,
		       s[i].bytes_out, s[i].bytes_back);
		if (strcmp(s[i].name, "ring_doorbell") == 0)
			printf(", \"doorbells_per_rtt\": %.3f, \"wakeups_per_rtt\": %.3f",
			       s[i].doorbells_per_rtt, s[i].wakeups_per_rtt);
		printf("}");
		first = 0;
	}
	const struct summary *fl = find(s, n, "floor"), *rs = find(s, n, "ring_spin");
	const struct summary *rd = find(s, n, "ring_doorbell"), *us = find(s, n, "unix_socket");
	const struct summary *zq = find(s, n, "zeromq");
	printf("\n  ],\n  \"ratios\": {\n");
	/* With the pair, the floor ratio is the median of per-repetition ratios,
	 * each from samples taken under the same conditions. */
	if (paired)
		printf("    \"ring_spin_over_floor_p50\": %.3f,\n", pr_med);
	else
		json_ratio("ring_spin_over_floor_p50", rs, fl, 0);
	json_ratio("ring_spin_over_floor_p50_of_medians", rs, fl, 0);
	json_ratio("unix_socket_over_ring_spin_p50", us, rs, 0);
	json_ratio("zeromq_over_ring_spin_p50", zq, rs, 0);
	json_ratio("ring_doorbell_over_ring_spin_p50", rd, rs, 0);
	if (paired)
		printf("    \"ring_spin_over_floor_p50_per_rep\": {\"median\": %.3f, \"min\": %.3f, "
		       "\"max\": %.3f},\n",
		       pr_med, pr_min, pr_max);
	printf("    \"floor_and_ring_spin_paired\": %s\n", paired ? "true" : "false");
	printf("  },\n  \"targets\": {\n");
	if (paired)
		printf("    \"ring_spin_p50_within_2x_floor\": %s,\n", pr_med <= 2.0 ? "true" : "false");
	else
		printf("    \"ring_spin_p50_within_2x_floor\": %s,\n", target_json(rs, fl, 2.0, 1));
	printf("    \"ring_spin_10x_faster_than_unix_socket\": %s,\n", target_json(us, rs, 10.0, 0));
	printf("    \"ring_spin_30x_faster_than_zeromq\": %s\n", target_json(zq, rs, 30.0, 0));
	printf("  },\n  \"config\": {\"iters\": %llu, \"warmup\": %llu, \"reps\": %d, "
	       "\"tput_msgs\": %llu, \"stats_rec_bytes\": 64, \"cmd_bytes\": 32, "
	       "\"page_capacity\": %u, \"stats_capacity\": %u, \"cmd_capacity\": %u, "
	       "\"statistic\": \"median over reps of per-rep p50/p99/msgs_per_s; max over all reps\"},\n",
	       (unsigned long long)o->iters, (unsigned long long)o->warmup, o->reps,
	       (unsigned long long)o->tput_msgs, bench_ring_page_capacity,
	       bench_ring_stats_capacity(), bench_ring_cmd_capacity());
	printf("  \"machine\": {\"cpu_model\": \"%s\", \"cpus_online\": %ld, \"kernel\": \"%s %s\", "
	       "\"pinned_cpus\": [%d, %d], \"tsc_ticks_per_ns\": %.4f, \"date_utc\": \"%s\", "
	       "\"loadavg_start\": \"%s\", \"loadavg_end\": \"%s\"}\n}\n",
	       model, sysconf(_SC_NPROCESSORS_ONLN), u.sysname, u.release, o->cpu_self, o->cpu_peer,
	       ticks_per_ns, date, loadavg_start, loadavg_end);
}

static void print_table(const struct summary *s, int n)
{
	printf("%-14s %10s %10s %12s %14s %18s\n", "transport", "p50 ns", "p99 ns", "max ns",
	       "msgs/s", "p50 spread ns");
	for (int i = 0; i < n; i++) {
		if (!s[i].ok) {
			printf("%-14s failed\n", s[i].name);
			continue;
		}
		printf("%-14s %10.0f %10.0f %12.0f %14.0f %8.0f..%-8.0f\n", s[i].name, s[i].p50_ns,
		       s[i].p99_ns, s[i].max_ns, s[i].msgs_per_s, s[i].p50_min, s[i].p50_max);
	}
	const struct summary *fl = find(s, n, "floor"), *rs = find(s, n, "ring_spin");
	const struct summary *us = find(s, n, "unix_socket"), *zq = find(s, n, "zeromq");
	if (rs && fl)
		printf("ring_spin / floor p50     %.2f  (target <= 2)\n", rs->p50_ns / fl->p50_ns);
	if (rs && us)
		printf("unix_socket / ring_spin   %.1f  (target >= 10)\n", us->p50_ns / rs->p50_ns);
	if (rs && zq)
		printf("zeromq / ring_spin        %.1f  (target >= 30)\n", zq->p50_ns / rs->p50_ns);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: memdecay-bench-ipc [--json] [--quick] [--iters N] [--reps R]\n"
		"                          [--tput-msgs N] [--cpus A,B] [--only NAME]\n"
		"Round trip (p50/p99/max ns) and one-way throughput (msgs/s) of a 64-byte\n"
		"message between two processes pinned to CPUs A (self) and B (peer):\n"
		"  floor          raw cache-line ping-pong in shared memory\n"
		"  ring_spin      stats ring -> command ring (memdecay_ring.h, memfd), both spin\n"
		"  ring_doorbell  same, the daemon side asleep on its eventfd doorbell\n"
		"  unix_socket    SOCK_STREAM socketpair\n"
		"  zeromq         libzmq PAIR over ipc://\n"
		"Reported figures are medians over R repetitions (default 7; --quick: 3).\n"
		"  --iters N      timed round trips per repetition (default 20000; --quick 2000)\n"
		"  --tput-msgs N  messages per throughput repetition (default 200000)\n"
		"  --cpus A,B     cores to pin to (default 0,1)\n"
		"  --page-capacity N  engine pages; rings sized by the daemon's rule\n"
		"                 (stats 4N, commands N; default 16384)\n"
		"  --only NAME    run one transport\n");
}

int main(int argc, char **argv)
{
	struct options o = {
		.iters = 20000, .tput_msgs = 200000, .reps = 7, .cpu_self = 0, .cpu_peer = 1,
	};
	int quick = 0, iters_set = 0, reps_set = 0, tput_set = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--json")) {
			o.json = 1;
		} else if (!strcmp(a, "--quick")) {
			quick = 1;
		} else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--iters") && v) {
			o.iters = strtoull(v, NULL, 10);
			iters_set = 1;
			i++;
		} else if (!strcmp(a, "--reps") && v) {
			o.reps = atoi(v);
			reps_set = 1;
			i++;
		} else if (!strcmp(a, "--tput-msgs") && v) {
			o.tput_msgs = strtoull(v, NULL, 10);
			tput_set = 1;
			i++;
		} else if (!strcmp(a, "--cpus") && v) {
			if (sscanf(v, "%d,%d", &o.cpu_self, &o.cpu_peer) != 2) {
				usage(stderr);
				return 2;
			}
			i++;
		} else if (!strcmp(a, "--page-capacity") && v) {
			bench_ring_page_capacity = (uint32_t)strtoul(v, NULL, 10);
			i++;
		} else if (!strcmp(a, "--only") && v) {
			o.only = v;
			i++;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (quick) {
		if (!iters_set)
			o.iters = 2000;
		if (!reps_set)
			o.reps = 3;
		if (!tput_set)
			o.tput_msgs = 20000;
	}
	if (bench_ring_page_capacity < 1 || bench_ring_page_capacity > MD_PAGE_CAPACITY_MAX) {
		fprintf(stderr, "memdecay-bench-ipc: --page-capacity out of range\n");
		return 2;
	}
	if (o.iters < 100 || o.reps < 1 || o.reps > MAX_REPS || o.tput_msgs < 1) {
		fprintf(stderr, "memdecay-bench-ipc: need --iters >= 100, 1 <= --reps <= %d\n",
			MAX_REPS);
		return 2;
	}
	o.warmup = o.iters / 10 < 1000 ? 1000 : o.iters / 10;

	char loadavg_start[128];
	read_loadavg(loadavg_start, sizeof(loadavg_start));
	if (pin_to(o.cpu_self) < 0) {
		fprintf(stderr, "memdecay-bench-ipc: cannot pin to cpu %d: %s\n", o.cpu_self,
			strerror(errno));
		return 1;
	}
	calibrate_ticks();

	uint64_t *samples = malloc(2 * (o.warmup + o.iters) * sizeof(*samples));
	static struct rep_result res[N_TRANSPORTS][MAX_REPS];
	int ok[N_TRANSPORTS];
	double pair_ratio[MAX_REPS];
	if (!samples)
		return 1;
	for (size_t t = 0; t < N_TRANSPORTS; t++)
		ok[t] = !o.only || !strcmp(o.only, transports[t]->name);

	/* transports[0] is the floor, [1] ring_spin: measured as a pair. */
	int paired = ok[0] && ok[1];
	for (int rep = 0; rep < o.reps; rep++) {
		if (paired) {
			int rc = run_pair_rep(&o, samples, &res[0][rep], &res[1][rep]);
			if (rc != 0) {
				fprintf(stderr, "memdecay-bench-ipc: floor+ring_spin failed: %s\n",
					strerror(rc < 0 ? -rc : EPROTO));
				ok[0] = ok[1] = 0;
				paired = 0;
			} else {
				pair_ratio[rep] = res[1][rep].p50_ns / res[0][rep].p50_ns;
			}
		}
		for (size_t k = 0; k < N_TRANSPORTS; k++) {
			size_t t = (k + (size_t)rep) % N_TRANSPORTS;
			if (!ok[t])
				continue;
			int rc = run_rep(transports[t], &o, samples, &res[t][rep], paired && t < 2);
			if (rc != 0) {
				fprintf(stderr, "memdecay-bench-ipc: %s failed (rep %d): %s\n",
					transports[t]->name, rep, strerror(rc < 0 ? -rc : EPROTO));
				ok[t] = 0;
			}
		}
	}

	struct summary sum[N_TRANSPORTS];
	int n = 0;
	for (size_t t = 0; t < N_TRANSPORTS; t++) {
		if (o.only && strcmp(o.only, transports[t]->name))
			continue;
		memset(&sum[n], 0, sizeof(sum[n]));
		sum[n].name = transports[t]->name;
		if (ok[t])
			summarize(transports[t], res[t], o.reps, &o, &sum[n]);
		n++;
	}
	double pr_med = 0, pr_min = 0, pr_max = 0;
	if (paired) {
		pr_med = median(pair_ratio, o.reps);
		pr_min = pair_ratio[0];
		pr_max = pair_ratio[o.reps - 1];
	}
	if (o.json)
		print_json(sum, n, &o, loadavg_start, paired, pr_med, pr_min, pr_max);
	else
		print_table(sum, n);
	free(samples);
	for (int i = 0; i < n; i++)
		if (!sum[i].ok)
			return 1;
	return 0;
}
