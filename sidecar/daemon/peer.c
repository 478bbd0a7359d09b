/*
 * peer.c — the end of a peer: looking an attached engine up, an operator or
 * engine connection's output queue, closing a connection and detaching an
 * engine.  The two ends call each other (an engine's connection closing
 * detaches it; detaching for any other reason closes its connection), so
 * they live here together, below attach.c, engine.c, control.c and
 * server.c, which all end peers and none of which this file calls.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include "ctl_parse.h"
#include "cuda_transport.h"
#include "daemon.h"
#include "log.h"
#include "memdecay_clock.h"

static const char *detach_names[] = { "eof", "heartbeat", "violations", "shutdown", "error" };

const char *md__detach_reason_name(int r)
{
	return r >= 0 && r < MD__DETACH_COUNT ? detach_names[r] : "?";
}

struct md__peer *md__peer_find(struct md__daemon *d, uint32_t id)
{
	for (struct md__peer *e = d->engines; e; e = e->next)
		if (e->id == id)
			return e;
	return NULL;
}

struct md__peer *md__peer_lookup(struct md__daemon *d, const char *s)
{
	uint64_t id;
	if (md__parse_u64(s, &id) == 0 && id <= UINT32_MAX) {
		struct md__peer *e = md__peer_find(d, (uint32_t)id);
		if (e)
			return e;
	}
	struct md__peer *hit = NULL;
	for (struct md__peer *e = d->engines; e; e = e->next) {
		if (!strcmp(e->name, s)) {
			if (hit)
				return NULL; /* ambiguous: ask for the id */
			hit = e;
		}
	}
	return hit;
}

void md__peer_free(struct md__peer *e)
{
	if (e->eseg)
		munmap((void *)e->eseg, e->eseg_size);
	if (e->dseg)
		munmap(e->dseg, e->dseg_size);
	int fds[] = { e->eseg_fd, e->dseg_fd, e->bell_to_daemon_fd, e->bell_to_engine_fd };
	for (int i = 0; i < 4; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	md__cuda_transport_close(e);
	md__calib_tracker_free(e->calib.tracker);
	free(e->pending);
	free(e->resync_buf);
	free(e->resync_clocks);
	free(e->resync_order);
	free(e);
}

void md__peer_detach(struct md__daemon *d, struct md__peer *e, int reason, const char *why)
{
	struct md__peer **pp = &d->engines;
	while (*pp && *pp != e)
		pp = &(*pp)->next;
	if (!*pp)
		return;
	*pp = e->next;
	d->n_engines--;
	d->detaches[reason]++;
	d->dirty = 1;
	md__info("engine %u (%s) detached: %s%s%s (records %llu, evictions sent %llu, "
		 "violations %llu)",
		 e->id, e->name, md__detach_reason_name(reason), why ? ": " : "", why ? why : "",
		 (unsigned long long)e->records, (unsigned long long)e->cmds_sent,
		 (unsigned long long)e->violations);
	md__host_engine_remove(d->host, e->id);
	if (d->calib)
		md__calib_live_detach(d->calib, &e->calib);
	md__loop_unwatch(d->loop, e->bell_w);
	if (e->conn) {
		struct md__conn *c = e->conn;
		c->engine = NULL;
		e->conn = NULL;
		if (reason != MD__DETACH_EOF)
			md__conn_close(d, c);
	}
	md__peer_free(e);
}

static void conn_free(struct md__conn *c)
{
	free(c->out);
	free(c);
}

void md__conn_close(struct md__daemon *d, struct md__conn *c)
{
	if (c->dead)
		return;
	if (c->engine)
		md__peer_detach(d, c->engine, MD__DETACH_EOF, "connection closed");
	c->dead = 1;
	if (c->w)
		md__loop_unwatch(d->loop, c->w);
	close(c->fd);
	if (c->prev)
		c->prev->next = c->next;
	else
		d->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	d->n_conns--;
	conn_free(c);
}

/* Appends to the queued output: the sent prefix is dropped only when room is
 * needed and the buffer doubles, so queueing costs amortized O(len), not a
 * copy of the whole backlog per reply. */
void md__conn_send(struct md__daemon *d, struct md__conn *c, const char *buf, size_t len)
{
	(void)d;
	if (!md__conn_queued(c)) {
		c->out_len = c->out_off = 0;
		c->out_progress_ns = md_now_ns();
	}
	if (c->out_len + len > c->out_cap && c->out_off) {
		memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
		c->out_len -= c->out_off;
		c->out_off = 0;
	}
	if (c->out_len + len > c->out_cap) {
		size_t nc = c->out_cap ? c->out_cap : 4096;
		while (nc < c->out_len + len)
			nc *= 2;
		char *np = realloc(c->out, nc);
		if (!np) {
			c->close_after_reply = 1;
			return;
		}
		c->out = np;
		c->out_cap = nc;
	}
	memcpy(c->out + c->out_len, buf, len);
	c->out_len += len;
}
