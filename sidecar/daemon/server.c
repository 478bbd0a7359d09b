/*
 * server.c — the control socket, its connections, signals, and memdecayd's
 * main loop with the sleep protocol.
 *
 * Main loop: service every engine (ingest a bounded batch, decide, push
 * commands) and poll the event loop without blocking while there is work.
 * When an iteration finds none within daemon.nap_ms of the last one that did,
 * the daemon naps: it blocks for at most MD__NAP_TICK_NS (1 ms) with its
 * `sleeping` flags still 0, so an engine stepping every few ms rings no
 * doorbell.  After that grace it sets `sleeping` in every daemon segment,
 * fences, re-checks every ring (an engine that published just before seeing
 * the flag would not ring), and only then blocks on doorbells, sockets,
 * signals and the 100 ms tick.  The daemon never busy-spins: a nap is a
 * blocking wait, and an idle daemon (no record for nap_ms) sleeps.
 *
 * Connections are non-blocking with per-connection buffers: a line longer than
 * MD_CTL_LINE_MAX, binary bytes, or more than MD__CONN_MAX connections get an
 * ERR and are closed; a reply the peer does not read stays queued (never
 * blocks the loop) and is retried at every wake-up.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "daemon.h"
#include "log.h"
#include "notify.h"
#include "server.h"
#include "memdecay_clock.h"

static void conn_recv_cb(struct md__loop *l, struct md__watch *w, int res, const void *buf,
			 void *ud);

static int conn_process(struct md__daemon *d, struct md__conn *c);

/* Sends what is queued; returns 0, or -1 if the connection was closed. */
static int conn_flush(struct md__daemon *d, struct md__conn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
				 MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return 0;
			md__conn_close(d, c);
			return -1;
		}
		if (n > 0)
			c->out_progress_ns = md_now_ns();
		c->out_off += (size_t)n;
	}
	c->out_len = c->out_off = 0;
	if (c->out_cap > 65536) { /* keep a small buffer, give back a large one */
		free(c->out);
		c->out = NULL;
		c->out_cap = 0;
	}
	if (c->close_after_reply) {
		md__conn_close(d, c);
		return -1;
	}
	return 0;
}

/* One complete line from a connection.  Returns -1 if the conn is gone. */
static int conn_line(struct md__daemon *d, struct md__conn *c, char *line)
{
	if (c->engine)
		return 0; /* an attached engine has nothing more to say; ignore */
	if (!strncmp(line, "HELLO", 5) && (line[5] == ' ' || line[5] == 0 || line[5] == '\t')) {
		md__peer_attach(d, c, line);
		return conn_flush(d, c);
	}
	struct md__sbuf reply = { 0 };
	md__control_exec(d, c, line, &reply);
	if (reply.oom || !reply.len) {
		static const char oom[] = "ERR out of memory\n";
		md__conn_send(d, c, oom, sizeof(oom) - 1);
	} else {
		md__conn_send(d, c, reply.p, reply.len);
	}
	md__sbuf_free(&reply);
	c->opened_ns = md_now_ns();
	return conn_flush(d, c);
}

static void conn_reject(struct md__daemon *d, struct md__conn *c, const char *msg)
{
	char line[256];
	int n = snprintf(line, sizeof(line), "ERR %s\n", msg);
	c->in_len = 0;
	md__conn_send(d, c, line, (size_t)n);
	c->close_after_reply = 1;
	conn_flush(d, c);
}

/* Runs the complete lines buffered in c->in.  While the connection's queued
 * output is over MD__CONN_OUT_CAP it stops reading requests (its recv watch
 * is removed, so the kernel's socket buffer pushes back on the client); the
 * lines wait here and run once the client has read its replies.  Returns -1
 * if the connection is gone. */
static int conn_process(struct md__daemon *d, struct md__conn *c)
{
	for (;;) {
		if (c->close_after_reply)
			return 0;
		if (!c->engine && md__conn_queued(c) > MD__CONN_OUT_CAP) {
			if (!c->paused) {
				c->paused = 1;
				if (c->w) {
					md__loop_unwatch(d->loop, c->w);
					c->w = NULL;
				}
				md__debug("connection from pid %d: %zu reply bytes unread, requests wait",
					  (int)c->pid, md__conn_queued(c));
			}
			return 0;
		}
		char *nl = memchr(c->in, '\n', c->in_len);
		if (!nl)
			break;
		*nl = 0;
		size_t used = (size_t)(nl - c->in) + 1;
		if (memchr(c->in, 0, used - 1)) {
			conn_reject(d, c, "request holds NUL bytes");
			return 0;
		}
		if (used - 1 > MD_CTL_LINE_MAX)
			break; /* refused below */
		char line[MD_CTL_LINE_MAX + 1];
		memcpy(line, c->in, used);
		memmove(c->in, c->in + used, c->in_len - used);
		c->in_len -= used;
		if (conn_line(d, c, line) < 0)
			return -1;
	}
	if (c->in_len > MD_CTL_LINE_MAX) {
		if (c->engine) {
			c->in_len = 0; /* attached engines' chatter is ignored */
			return 0;
		}
		char msg[96];
		snprintf(msg, sizeof(msg), "request line longer than %u bytes", MD_CTL_LINE_MAX);
		conn_reject(d, c, msg);
	}
	return 0;
}

static void conn_recv_cb(struct md__loop *l, struct md__watch *w, int res, const void *buf,
			 void *ud)
{
	struct md__conn *c = ud;
	struct md__daemon *d = c->d;
	d->idle_wake = 1;
	if (res <= 0) {
		if (res == -EAGAIN || res == -EINTR)
			return;
		if (c->engine)
			md__peer_detach(d, c->engine, MD__DETACH_EOF,
					res == 0 ? "control socket closed" : strerror(-res));
		md__conn_close(d, c);
		return;
	}
	if (c->close_after_reply || c->paused)
		return; /* already refused: drain (paused: a completion already in flight) */
	size_t take = (size_t)res;
	if (take > sizeof(c->in) - c->in_len)
		take = sizeof(c->in) - c->in_len; /* cannot happen: in_len <= LINE_MAX here */
	memcpy(c->in + c->in_len, buf, take);
	c->in_len += take;
	conn_process(d, c);
}

/* A paused connection whose client read enough of its replies: run its
 * waiting lines, then read from it again. */
static void conn_resume(struct md__daemon *d, struct md__conn *c)
{
	if (!c->paused || md__conn_queued(c) > MD__CONN_OUT_CAP / 2)
		return;
	c->paused = 0;
	if (conn_process(d, c) < 0 || c->paused || c->close_after_reply)
		return;
	c->w = md__loop_watch(d->loop, c->fd, MD__WATCH_RECV, 4096, conn_recv_cb, c);
	if (!c->w)
		md__conn_close(d, c);
}

int md__uid_in_group(uid_t uid, gid_t gid, gid_t group)
{
	if (gid == group)
		return 1;
	struct passwd pw, *pwp = NULL;
	char pwbuf[4096];
	if (getpwuid_r(uid, &pw, pwbuf, sizeof(pwbuf), &pwp) != 0 || !pwp)
		return 0;
	gid_t groups[256];
	int ng = 256;
	if (getgrouplist(pw.pw_name, pw.pw_gid, groups, &ng) < 0)
		return 0;
	for (int i = 0; i < ng; i++)
		if (groups[i] == group)
			return 1;
	return 0;
}

static int peer_allowed(struct md__daemon *d, uid_t uid, gid_t gid)
{
	if (uid == geteuid())
		return 1;
	if (d->have_op_group && md__uid_in_group(uid, gid, d->op_group))
		return 1;
	return d->have_group && md__uid_in_group(uid, gid, d->group);
}

static void accept_cb(struct md__loop *l, struct md__watch *w, int res, const void *buf,
		      void *ud)
{
	struct md__daemon *d = ud;
	d->idle_wake = 1;
	if (res < 0) {
		if (res != -EAGAIN && res != -EINTR && res != -ECONNABORTED)
			md__warn("accept on %s failed: %s", d->socket_path, strerror(-res));
		return;
	}
	int fd = res;
	struct ucred cred = { 0 };
	socklen_t cl = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0) {
		close(fd);
		return;
	}
	if (!peer_allowed(d, cred.uid, cred.gid)) {
		static const char msg[] = "ERR permission denied: peer is not the daemon's user or group\n";
		d->conns_refused++;
		ssize_t ignored = send(fd, msg, sizeof(msg) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
		(void)ignored;
		close(fd);
		uint64_t held;
		if (md__ratelimit_ok(&d->refuse_rl, md_now_ns(), &held))
			md__warn("connection from pid %d uid %u gid %u refused: not our user or group"
				 " (%llu refusal lines suppressed before this one)",
				 (int)cred.pid, (unsigned)cred.uid, (unsigned)cred.gid,
				 (unsigned long long)held);
		return;
	}
	/* Operators and engines have separate limits: attached engines are
	 * bounded by daemon.max_engines (and per uid), so they never take the
	 * operator's slots. */
	int n_ops = d->n_conns - (int)d->n_engines;
	if (n_ops >= MD__CONN_MAX) {
		/* Full: make room by closing the oldest operator connection, so a
		 * flood of idle or half-open connections cannot lock the operator
		 * out.  One still sending a reply is passed over while another
		 * remains.  The goodbye line goes only where no reply is queued,
		 * so a client that reads it first knows its request was not run
		 * and may send it again (memdecayctl does).  Engine connections
		 * are never closed for this. */
		struct md__conn *old = NULL;
		for (struct md__conn *k = d->conns; k; k = k->next) {
			if (k->engine)
				continue;
			int busy = md__conn_queued(k) > 0, old_busy = old && md__conn_queued(old) > 0;
			if (!old || busy < old_busy ||
			    (busy == old_busy && k->opened_ns <= old->opened_ns))
				old = k;
		}
		if (old) {
			static const char bye[] = MD_CTL_EVICTED_LINE "\n";
			if (!md__conn_queued(old)) {
				ssize_t ignored = send(old->fd, bye, sizeof(bye) - 1,
						       MSG_DONTWAIT | MSG_NOSIGNAL);
				(void)ignored;
			}
			d->conns_evicted++;
			md__debug("connection limit: closed the oldest control connection (pid %d)",
				  (int)old->pid);
			md__conn_close(d, old);
		}
	}
	n_ops = d->n_conns - (int)d->n_engines;
	if (n_ops >= MD__CONN_MAX) {
		static const char msg[] = "ERR too many connections to memdecayd\n";
		d->conns_refused++;
		ssize_t ignored = send(fd, msg, sizeof(msg) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
		(void)ignored;
		close(fd);
		uint64_t held;
		if (md__ratelimit_ok(&d->refuse_rl, md_now_ns(), &held))
			md__warn("connection from pid %d refused: %d connections open"
				 " (%llu refusal lines suppressed before this one)",
				 (int)cred.pid, n_ops, (unsigned long long)held);
		return;
	}
	struct md__conn *c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return;
	}
	c->d = d;
	c->fd = fd;
	c->pid = cred.pid;
	c->uid = cred.uid;
	c->gid = cred.gid;
	c->admin = cred.uid == geteuid() ||
		   (d->have_op_group && md__uid_in_group(cred.uid, cred.gid, d->op_group));
	c->opened_ns = md_now_ns();
	c->w = md__loop_watch(d->loop, fd, MD__WATCH_RECV, 4096, conn_recv_cb, c);
	if (!c->w) {
		close(fd);
		free(c);
		return;
	}
	c->next = d->conns;
	if (d->conns)
		d->conns->prev = c;
	d->conns = c;
	d->n_conns++;
}

static void reload(struct md__daemon *d)
{
	if (!d->have_config) {
		md__info("SIGHUP: no --config file; nothing to reload");
		return;
	}
	struct md__params p;
	md__params_defaults(&p);
	char err[512];
	if (md__params_load_file(&p, d->config_path, err, sizeof(err)) < 0) {
		d->reload_failures++;
		md__err("SIGHUP: config not reloaded, keeping the old one: %s", err);
		return;
	}
	md__daemon_apply_params(d, &p);
	d->reloads++;
	md__info("SIGHUP: reloaded %s", d->config_path);
}

static void signal_cb(struct md__loop *l, struct md__watch *w, int res, const void *buf,
		      void *ud)
{
	struct md__daemon *d = ud;
	d->idle_wake = 1;
	if (res != (int)sizeof(struct signalfd_siginfo))
		return;
	const struct signalfd_siginfo *si = buf;
	switch (si->ssi_signo) {
	case SIGHUP:
		md__notify_reload_begin(); /* systemctl reload waits for the READY=1 */
		reload(d);
		md__notify_send("READY=1");
		break;
	case SIGTERM:
	case SIGINT:
		md__info("%s received: shutting down", si->ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
		d->stop = 1;
		break;
	}
}

static void tick_cb(struct md__loop *l, void *ud)
{
	struct md__daemon *d = ud;
	uint64_t now = md_now_ns();
	md__notify_watchdog(now); /* from the loop: a wedged loop starves the watchdog */
	md__peers_tick(d, now);
	struct md__conn *c = d->conns, *next;
	for (; c; c = next) {
		next = c->next;
		if (!c->engine && !md__conn_queued(c) && now - c->opened_ns > MD__OPERATOR_IDLE_NS) {
			md__debug("closing idle control connection from pid %d", (int)c->pid);
			md__conn_close(d, c);
		} else if (md__conn_queued(c) && now - c->out_progress_ns > MD__CONN_OUT_STALL_NS) {
			/* a client that stopped reading its replies */
			md__info("closing connection from pid %d uid %u: %zu reply bytes unread for %llu ms",
				 (int)c->pid, (unsigned)c->uid, md__conn_queued(c),
				 (unsigned long long)((now - c->out_progress_ns) / 1000000ull));
			md__conn_close(d, c);
		}
	}
	d->dirty = 1; /* pending commands and budgets are retried at least every tick */
}

static int mkdir_p(const char *dir, mode_t mode, int *created)
{
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof(tmp), "%s", dir);
	size_t n = strlen(tmp);
	for (size_t i = 1; i <= n; i++) {
		if (tmp[i] == '/' || tmp[i] == 0) {
			char save = tmp[i];
			tmp[i] = 0;
			if (mkdir(tmp, mode) == 0) {
				if (save == 0)
					*created = 1;
			} else if (errno != EEXIST) {
				return -errno;
			}
			tmp[i] = save;
		}
	}
	return 0;
}

/* 1 if the peer on fd answers "ping" with OK within a second. */
static int probe_answers(int fd)
{
	static const char ping[] = "ping\n";
	if (send(fd, ping, sizeof(ping) - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof(ping) - 1))
		return 0;
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	char buf[8];
	if (poll(&pfd, 1, 1000) != 1)
		return 0;
	return recv(fd, buf, 2, 0) == 2 && buf[0] == 'O' && buf[1] == 'K';
}

int md__server_listen(struct md__daemon *d, char *err, size_t errlen)
{
	const char *path = d->socket_path;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "socket path %s is longer than %zu bytes", path,
			 sizeof(sa.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);

	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = 0;
		int created = 0;
		int rc = mkdir_p(dir, d->have_group ? 0750 : 0700, &created);
		if (rc < 0) {
			snprintf(err, errlen, "cannot create socket directory %s: %s", dir,
				 strerror(-rc));
			return rc;
		}
		if (created) {
			if (d->have_group && (chown(dir, (uid_t)-1, d->group) < 0 ||
					      chmod(dir, 0750) < 0)) {
				snprintf(err, errlen, "cannot give %s to group %u: %s", dir,
					 (unsigned)d->group, strerror(errno));
				return -errno;
			}
			if (!d->have_group && chmod(dir, 0700) < 0) {
				snprintf(err, errlen, "cannot chmod %s: %s", dir, strerror(errno));
				return -errno;
			}
		}
	}

	/* Another daemon on this path?  A stale file (nobody listening) is removed.
	 * A connect that succeeds is not proof of a live daemon: right after a
	 * kill -9 the dead one's listening socket can accept for a moment (its
	 * io_uring is torn down asynchronously), then resets what it queued.  So
	 * the probe asks for a pong, retries a socket that does not answer, and
	 * replaces it if it still does not answer after ~1 s of retries. */
	int cerr = 0;
	for (int attempt = 0;; attempt++) {
		int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (probe < 0) {
			snprintf(err, errlen, "socket: %s", strerror(errno));
			return -errno;
		}
		if (connect(probe, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			cerr = errno;
			close(probe);
			break;
		}
		int answers = probe_answers(probe);
		close(probe);
		if (answers) {
			snprintf(err, errlen, "another memdecayd is already answering on %s", path);
			return -EADDRINUSE;
		}
		if (attempt >= 20) {
			/* accepts but never answers: not a working daemon */
			md__warn("%s accepts connections but does not answer ping: replacing it", path);
			cerr = ECONNREFUSED;
			break;
		}
		/* EOF or reset: a dying listener; wait for it to go */
		struct timespec ts = { 0, 50 * 1000000L };
		nanosleep(&ts, NULL);
	}
	if (cerr == ECONNREFUSED) {
		md__info("removing stale socket %s", path);
		if (unlink(path) < 0 && errno != ENOENT) {
			snprintf(err, errlen, "cannot remove stale socket %s: %s", path,
				 strerror(errno));
			return -errno;
		}
	} else if (cerr != ENOENT) {
		snprintf(err, errlen, "cannot probe %s: %s", path, strerror(cerr));
		return -cerr;
	}

	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		snprintf(err, errlen, "socket: %s", strerror(errno));
		return -errno;
	}
	mode_t old = umask(0177);
	int rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	int berr = errno;
	umask(old);
	if (rc < 0) {
		close(fd);
		snprintf(err, errlen, "cannot bind %s: %s", path, strerror(berr));
		return -berr;
	}
	if (d->have_group && (chown(path, (uid_t)-1, d->group) < 0 || chmod(path, 0660) < 0)) {
		int e2 = errno;
		close(fd);
		unlink(path);
		snprintf(err, errlen, "cannot give %s to group %u: %s", path, (unsigned)d->group,
			 strerror(e2));
		return -e2;
	}
	if (listen(fd, 128) < 0) {
		int e2 = errno;
		close(fd);
		unlink(path);
		snprintf(err, errlen, "listen on %s: %s", path, strerror(e2));
		return -e2;
	}
	d->listen_fd = fd;
	return 0;
}

int md__server_start(struct md__daemon *d, char *err, size_t errlen)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &set, NULL) < 0) {
		snprintf(err, errlen, "sigprocmask: %s", strerror(errno));
		return -errno;
	}
	signal(SIGPIPE, SIG_IGN);
	d->signal_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (d->signal_fd < 0) {
		snprintf(err, errlen, "signalfd: %s", strerror(errno));
		return -errno;
	}
	d->signal_w = md__loop_watch(d->loop, d->signal_fd, MD__WATCH_READ,
				     sizeof(struct signalfd_siginfo), signal_cb, d);
	d->listen_w = md__loop_watch(d->loop, d->listen_fd, MD__WATCH_ACCEPT, 0, accept_cb, d);
	if (!d->signal_w || !d->listen_w) {
		snprintf(err, errlen, "event loop: %s", strerror(errno));
		return -errno;
	}
	md__loop_set_timer(d->loop, MD__TICK_MS, tick_cb, d);
	return 0;
}

static void flush_all(struct md__daemon *d)
{
	struct md__conn *c = d->conns, *next;
	for (; c; c = next) {
		next = c->next;
		if (md__conn_queued(c) && conn_flush(d, c) < 0)
			continue;
		if (c->paused)
			conn_resume(d, c);
	}
}

/* 1 while the daemon should nap rather than sleep: daemon.nap_ms not yet
 * over since the last iteration that found engine work. */
static int nap_due(struct md__daemon *d)
{
	uint64_t nap_ns = (uint64_t)md__daemon_params(d)->nap_ms * 1000000ull;
	return nap_ns && d->n_engines && md_now_ns() - d->last_work_ns < nap_ns;
}

void md__server_run(struct md__daemon *d)
{
	while (!d->stop) {
		d->iterations++;
		int work = md__peers_service(d);
		if (work)
			d->last_work_ns = md_now_ns();
		flush_all(d);
		int rc = md__loop_poll(d->loop, 0);
		if (rc < 0) {
			md__err("event loop failed: %s", strerror(-rc));
			break;
		}
		if (work || d->stop)
			continue;
		if (nap_due(d)) {
			/* Nap: `sleeping` stays 0, so an engine that keeps stepping
			 * rings no doorbell; its next records are found by the
			 * iteration after this wait (at most MD__NAP_TICK_NS). */
			d->naps++;
			rc = md__loop_poll_max(d->loop, MD__NAP_TICK_NS);
			if (rc < 0) {
				md__err("event loop failed: %s", strerror(-rc));
				break;
			}
			continue;
		}
		md__peers_set_sleeping(d, 1); /* includes the full fence */
		if (md__peers_any_work(d)) {
			md__peers_set_sleeping(d, 0);
			continue;
		}
		d->sleeps++;
		rc = md__loop_poll(d->loop, 1);
		md__peers_set_sleeping(d, 0);
		if (rc < 0) {
			md__err("event loop failed: %s", strerror(-rc));
			break;
		}
	}
}

void md__server_shutdown(struct md__daemon *d)
{
	for (struct md__peer *e = d->engines; e; e = e->next) {
		md_store_relaxed(&e->dctrl->shutting_down, 1);
		md_fence_full();
		uint64_t one = 1;
		ssize_t ignored = write(e->bell_to_engine_fd, &one, sizeof(one));
		(void)ignored;
	}
	while (d->engines)
		md__peer_detach(d, d->engines, MD__DETACH_SHUTDOWN, "daemon stopping");
	while (d->conns)
		md__conn_close(d, d->conns);
	if (d->listen_fd >= 0) {
		md__loop_unwatch(d->loop, d->listen_w);
		close(d->listen_fd);
		d->listen_fd = -1;
		if (!d->socket_inherited)
			unlink(d->socket_path);
	}
	if (d->signal_fd >= 0) {
		md__loop_unwatch(d->loop, d->signal_w);
		close(d->signal_fd);
		d->signal_fd = -1;
	}
}
