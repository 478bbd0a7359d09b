/*
 * ring_roundtrip.c — memdecay-ring-roundtrip: the CUDA IPC stats ring between
 * two processes.  The parent plays the engine (creates the ring, pushes), the
 * child plays memdecayd (opens the exported handles, drains).  Both fork before
 * touching CUDA, as CUDA requires.  The export record goes through a pipe;
 * acknowledgements come back through a shared anonymous mapping, so the round
 * trip measured is push → device → drain → host ack.  Every record carries a
 * sequence number and a checksum the child verifies.  Prints RESULT lines for
 * bench/gpu/run.sh; exit 0 only when every record arrived intact and in order.
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "md_cuda_ring.h"
#include "memdecay_abi.h"
#include "memdecay_clock.h"

#define CAPACITY 4096u
#define PINGS 2000
#define BULK_RECS 400000u
#define BATCH 64u
#define END_FLAG 0xffffu

struct shared {
	volatile uint64_t ready;     /* child opened the ring (1) or failed (2) */
	volatile uint64_t acked;     /* highest sequence number drained */
	volatile uint64_t errors;    /* bad records seen by the child */
	volatile uint64_t received;
};

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void make_rec(struct md_stats_rec *r, uint64_t seq, uint16_t flags)
{
	memset(r, 0, sizeof(*r));
	r->type = MD_REC_ATTN_PAGE;
	r->flags = flags;
	r->clock = seq;
	r->slot = (uint32_t)(seq * 2654435761u);
	r->gen = (uint32_t)(seq ^ 0x5a5a5a5au);
	r->u.attn_page.mass = (float)(seq % 1000) / 1000.0f;
}

static int rec_ok(const struct md_stats_rec *r, uint64_t want)
{
	return r->clock == want && r->slot == (uint32_t)(want * 2654435761u) &&
	       r->gen == (uint32_t)(want ^ 0x5a5a5a5au) && r->type == MD_REC_ATTN_PAGE;
}

static int daemon_side(int rfd, struct shared *sh)
{
	struct mdk_cuda_ring_export ex;
	if (read(rfd, &ex, sizeof(ex)) != (ssize_t)sizeof(ex)) {
		fprintf(stderr, "daemon: short read of the export record\n");
		sh->ready = 2;
		return 1;
	}
	struct mdk_cuda_ring_reader *rd = NULL;
	int rc = mdk_cuda_ring_open(&rd, &ex, 0);
	if (rc) {
		fprintf(stderr, "daemon: mdk_cuda_ring_open: %d %s\n", rc, mdk_cuda_last_error());
		sh->ready = 2;
		return 1;
	}
	sh->ready = 1;
	struct md_stats_rec *buf = malloc(CAPACITY * sizeof(*buf));
	uint64_t next = 1;
	for (;;) {
		int n = mdk_cuda_ring_drain(rd, buf, CAPACITY);
		if (n < 0) {
			fprintf(stderr, "daemon: drain: %d %s\n", n, mdk_cuda_last_error());
			sh->errors++;
			break;
		}
		int end = 0;
		for (int i = 0; i < n; i++) {
			if (buf[i].flags == END_FLAG) {
				end = 1;
				break;
			}
			if (!rec_ok(&buf[i], next))
				sh->errors++;
			next = buf[i].clock + 1;
		}
		if (n > 0) {
			sh->received += (uint64_t)n - (uint64_t)end;
			__atomic_store_n(&sh->acked, next - 1, __ATOMIC_RELEASE);
		}
		if (end)
			break;
	}
	free(buf);
	mdk_cuda_ring_close(rd);
	return 0;
}

static int wait_ack(struct shared *sh, uint64_t seq, double deadline_ns)
{
	while (__atomic_load_n(&sh->acked, __ATOMIC_ACQUIRE) < seq)
		if ((double)md_now_ns() > deadline_ns)
			return -1;
	return 0;
}

int main(void)
{
	struct shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return 1;
	memset((void *)sh, 0, sizeof(*sh));
	int pfd[2];
	if (pipe(pfd))
		return 1;
	pid_t pid = fork(); /* before any CUDA call */
	if (pid < 0)
		return 1;
	if (pid == 0) {
		close(pfd[1]);
		alarm(300);
		_exit(daemon_side(pfd[0], sh));
	}
	close(pfd[0]);
	alarm(300);

	struct mdk_cuda_ring *ring = NULL;
	int rc = mdk_cuda_ring_create(&ring, CAPACITY, 0);
	if (rc) {
		fprintf(stderr, "engine: mdk_cuda_ring_create: %d %s\n", rc, mdk_cuda_last_error());
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return rc == -ENODEV ? 2 : 1;
	}
	struct mdk_cuda_ring_export ex;
	mdk_cuda_ring_get_export(ring, &ex);
	if (write(pfd[1], &ex, sizeof(ex)) != (ssize_t)sizeof(ex))
		return 1;
	double t_open = (double)md_now_ns();
	while (sh->ready == 0 && (double)md_now_ns() - t_open < 60e9)
		;
	if (sh->ready != 1) {
		fprintf(stderr, "engine: the daemon side could not open the ring\n");
		waitpid(pid, NULL, 0);
		return 1;
	}
	printf("RESULT kernel=ring_open ms=%.1f\n", ((double)md_now_ns() - t_open) / 1e6);

	/* Ping: one record, wait for the ack. */
	cudaStream_t st;
	cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
	double *rtt = malloc(PINGS * sizeof(double));
	uint64_t seq = 0;
	int failed = 0;
	for (int i = 0; i < PINGS && !failed; i++) {
		struct md_stats_rec r;
		make_rec(&r, ++seq, 0);
		double t0 = (double)md_now_ns();
		if (mdk_cuda_ring_push(ring, &r, 1, st) != 1) {
			fprintf(stderr, "engine: push failed: %s\n", mdk_cuda_last_error());
			failed = 1;
			break;
		}
		if (wait_ack(sh, seq, t0 + 5e9)) {
			fprintf(stderr, "engine: no ack for record %llu within 5 s\n",
				(unsigned long long)seq);
			failed = 1;
			break;
		}
		rtt[i] = (double)md_now_ns() - t0;
	}
	if (!failed) {
		qsort(rtt, PINGS, sizeof(double), cmp_d);
		printf("RESULT kernel=ring_roundtrip pings=%d median_us=%.2f p99_us=%.2f min_us=%.2f\n",
		       PINGS, rtt[PINGS / 2] / 1e3, rtt[(PINGS * 99) / 100] / 1e3, rtt[0] / 1e3);
	}

	/* Bulk: batches as fast as the ring takes them; drops are retried. */
	struct md_stats_rec batch[BATCH];
	uint64_t sent = 0;
	double t0 = (double)md_now_ns();
	while (!failed && sent < BULK_RECS) {
		uint32_t n = BULK_RECS - sent < BATCH ? (uint32_t)(BULK_RECS - sent) : BATCH;
		for (uint32_t i = 0; i < n; i++)
			make_rec(&batch[i], seq + 1 + i, 0);
		int got = mdk_cuda_ring_push(ring, batch, n, st);
		if (got < 0) {
			fprintf(stderr, "engine: bulk push: %s\n", mdk_cuda_last_error());
			failed = 1;
			break;
		}
		seq += (uint64_t)got;
		sent += (uint64_t)got;
		if ((double)md_now_ns() - t0 > 120e9) {
			fprintf(stderr, "engine: bulk phase timed out\n");
			failed = 1;
		}
	}
	if (!failed && wait_ack(sh, seq, (double)md_now_ns() + 10e9) == 0) {
		double s = ((double)md_now_ns() - t0) / 1e9;
		printf("RESULT kernel=ring_bulk records=%u batch=%u recs_per_s=%.3g gbps=%.2f "
		       "dropped_retried=%llu\n",
		       BULK_RECS, BATCH, BULK_RECS / s, BULK_RECS * 64.0 / s / 1e9,
		       (unsigned long long)mdk_cuda_ring_dropped(ring));
	} else if (!failed) {
		fprintf(stderr, "engine: bulk records not all acknowledged\n");
		failed = 1;
	}

	struct md_stats_rec end;
	make_rec(&end, seq + 1, END_FLAG);
	while (mdk_cuda_ring_push(ring, &end, 1, st) == 0)
		;
	int status = 0;
	waitpid(pid, &status, 0);
	uint64_t errors = sh->errors;
	printf("RESULT kernel=ring_integrity received=%llu expected=%llu bad=%llu ok=%d\n",
	       (unsigned long long)sh->received, (unsigned long long)seq,
	       (unsigned long long)errors,
	       !failed && errors == 0 && sh->received == seq && WIFEXITED(status) &&
		       WEXITSTATUS(status) == 0);
	cudaStreamDestroy(st);
	mdk_cuda_ring_destroy(ring);
	free(rtt);
	return failed || errors || sh->received != seq ? 1 : 0;
}
