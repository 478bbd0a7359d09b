/*
 * ipc_sock.c — the peers engines use today: a Unix stream socket (socketpair)
 * and ZeroMQ ipc:// (PAIR, the libzmq transport vLLM publishes KV events on).
 * Each message is 64 bytes in both directions, one send call per message.
 */
#define _GNU_SOURCE
#include "bench_ipc.h"
#include "memdecay_clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

/* ------------------------------------------------------------ unix socket */

struct unix_state {
	int sv[2];  /* [0] parent, [1] child */
};

static int unix_setup(void **state)
{
	struct unix_state *u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, u->sv) < 0) {
		int e = -errno;
		free(u);
		return e;
	}
	*state = u;
	return 0;
}

static void unix_teardown(void *state)
{
	struct unix_state *u = state;
	close(u->sv[0]);
	close(u->sv[1]);
	free(u);
}

static int write_full(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len) {
		ssize_t w = write(fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

static int read_full(int fd, void *buf, size_t len)
{
	char *p = buf;
	while (len) {
		ssize_t r = read(fd, p, len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		p += r;
		len -= (size_t)r;
	}
	return 0;
}

static int unix_peer(void *state, struct bench_shared *sh, enum bench_mode mode, uint64_t n)
{
	struct unix_state *u = state;
	int fd = u->sv[1];
	char msg[BENCH_MSG_BYTES];

	close(u->sv[0]);
	__atomic_store_n(&sh->peer_ready, 1, __ATOMIC_RELEASE);
	if (mode == BENCH_RTT) {
		for (uint64_t i = 0; i < n; i++) {
			if (read_full(fd, msg, sizeof(msg)) < 0)
				return -1;
			msg[0]++;
			if (write_full(fd, msg, sizeof(msg)) < 0)
				return -1;
		}
		return 0;
	}
	/* The receiver takes whatever has arrived: the socket's best case. */
	static char buf[1 << 16];
	uint64_t want = n * BENCH_MSG_BYTES, got = 0;
	while (got < want) {
		ssize_t r = read(fd, buf, sizeof(buf));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		got += (uint64_t)r;
	}
	sh->tput_end_ns = md_now_ns();
	return 0;
}

static int unix_self(void *state, struct bench_shared *sh, enum bench_mode mode, uint64_t n,
		     uint64_t *samples)
{
	struct unix_state *u = state;
	int fd = u->sv[0];
	char msg[BENCH_MSG_BYTES];

	memset(msg, 0x5a, sizeof(msg));
	if (mode == BENCH_RTT) {
		for (uint64_t i = 0; i < n; i++) {
			uint64_t t0 = bench_ticks();
			if (write_full(fd, msg, sizeof(msg)) < 0 || read_full(fd, msg, sizeof(msg)) < 0)
				return -1;
			samples[i] = bench_ticks() - t0;
		}
		return 0;
	}
	sh->tput_start_ns = md_now_ns();
	for (uint64_t i = 0; i < n; i++)
		if (write_full(fd, msg, sizeof(msg)) < 0)
			return -1;
	return 0;
}

/* ---------------------------------------------------------------- zeromq */

struct zmq_state {
	char dir[64];
	char path[96];
	char endpoint[128];
};

static int zmq_setup(void **state)
{
	struct zmq_state *z = calloc(1, sizeof(*z));
	if (!z)
		return -ENOMEM;
	const char *tmp = getenv("TMPDIR");
	snprintf(z->dir, sizeof(z->dir), "%s/mdbench-zmq-XXXXXX", tmp && strlen(tmp) < 32 ? tmp : "/tmp");
	if (!mkdtemp(z->dir)) {
		int e = -errno;
		free(z);
		return e;
	}
	snprintf(z->path, sizeof(z->path), "%s/s", z->dir);
	snprintf(z->endpoint, sizeof(z->endpoint), "ipc://%s", z->path);
	*state = z;
	return 0;
}

static void zmq_teardown(void *state)
{
	struct zmq_state *z = state;
	unlink(z->path);
	rmdir(z->dir);
	free(z);
}

/* Contexts are made after fork, one per process: libzmq is not fork-safe. */
static void *zmq_open(void **ctx, const char *endpoint, int bind)
{
	*ctx = zmq_ctx_new();
	if (!*ctx)
		return NULL;
	void *s = zmq_socket(*ctx, ZMQ_PAIR);
	int linger = 2000;  /* ms: the last message must still be delivered */
	if (!s)
		return NULL;
	zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
	if ((bind ? zmq_bind(s, endpoint) : zmq_connect(s, endpoint)) != 0) {
		zmq_close(s);
		return NULL;
	}
	return s;
}

static void zmq_shut(void *ctx, void *s)
{
	if (s)
		zmq_close(s);
	if (ctx)
		zmq_ctx_term(ctx);
}

static int zmq_peer(void *state, struct bench_shared *sh, enum bench_mode mode, uint64_t n)
{
	struct zmq_state *z = state;
	void *ctx;
	void *s = zmq_open(&ctx, z->endpoint, 1);
	char msg[BENCH_MSG_BYTES];
	int rc = 0;

	if (!s) {
		zmq_shut(ctx, s);
		return -1;
	}
	__atomic_store_n(&sh->peer_ready, 1, __ATOMIC_RELEASE);
	/* Handshake so neither side measures the connection being made. */
	if (zmq_recv(s, msg, sizeof(msg), 0) < 0 || zmq_send(s, msg, 1, 0) < 0)
		rc = -1;
	for (uint64_t i = 0; i < n && rc == 0; i++) {
		if (zmq_recv(s, msg, sizeof(msg), 0) != (int)sizeof(msg)) {
			rc = -1;
			break;
		}
		if (mode == BENCH_RTT) {
			msg[0]++;
			if (zmq_send(s, msg, sizeof(msg), 0) != (int)sizeof(msg))
				rc = -1;
		}
	}
	if (mode == BENCH_TPUT)
		sh->tput_end_ns = md_now_ns();
	zmq_shut(ctx, s);
	return rc;
}

static int zmq_self(void *state, struct bench_shared *sh, enum bench_mode mode, uint64_t n,
		    uint64_t *samples)
{
	struct zmq_state *z = state;
	void *ctx;
	void *s = zmq_open(&ctx, z->endpoint, 0);
	char msg[BENCH_MSG_BYTES];
	int rc = 0;

	if (!s) {
		zmq_shut(ctx, s);
		return -1;
	}
	memset(msg, 0x5a, sizeof(msg));
	if (zmq_send(s, msg, 1, 0) < 0 || zmq_recv(s, msg, sizeof(msg), 0) < 0)
		rc = -1;
	if (mode == BENCH_TPUT)
		sh->tput_start_ns = md_now_ns();
	for (uint64_t i = 0; i < n && rc == 0; i++) {
		uint64_t t0 = bench_ticks();
		if (zmq_send(s, msg, sizeof(msg), 0) != (int)sizeof(msg)) {
			rc = -1;
			break;
		}
		if (mode == BENCH_RTT) {
			if (zmq_recv(s, msg, sizeof(msg), 0) != (int)sizeof(msg))
				rc = -1;
			samples[i] = bench_ticks() - t0;
		}
	}
	zmq_shut(ctx, s);
	return rc;
}

const struct bench_transport bench_unix_socket = {
	.name = "unix_socket",
	.setup = unix_setup,
	.peer = unix_peer,
	.self = unix_self,
	.teardown = unix_teardown,
	.bytes_out = BENCH_MSG_BYTES,
	.bytes_back = BENCH_MSG_BYTES,
};

const struct bench_transport bench_zeromq = {
	.name = "zeromq",
	.setup = zmq_setup,
	.peer = zmq_peer,
	.self = zmq_self,
	.teardown = zmq_teardown,
	.bytes_out = BENCH_MSG_BYTES,
	.bytes_back = BENCH_MSG_BYTES,
};
