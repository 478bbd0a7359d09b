/*
 * fuzz_client_cmds.c — libFuzzer harness for what libmemdecay reads from the
 * daemon: the command ring (records and tail), the parameter block and the
 * daemon control words.  The engine must survive a buggy daemon: whatever is
 * there, md_poll_commands() hands out only commands for slots the engine
 * holds live with that generation and sequence, never one twice, and every
 * call returns.
 *
 * The client is created detached (no daemon), then given a hand-built
 * attachment: anonymous mappings for both segments (laid out by the ABI's own
 * layout functions), a socketpair as the control connection and eventfds as
 * doorbells, so detach paths close and unmap real objects.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client_internal.h"
#include "memdecay_clock.h"

#define CAP 32u
#define SEQS 4u
#define STATS_CAP 4096u
#define CMD_CAP 64u

static int fake_attach(md_client *c, int *peer)
{
	struct md__attach *a = &c->a;
	memset(a, 0, sizeof(*a));
	a->sock_fd = a->eseg_fd = a->dseg_fd = a->db_daemon_fd = a->db_engine_fd = -1;
	struct md_engine_offsets eo;
	struct md_daemon_offsets dof;
	uint64_t es = md_engine_layout(CAP, SEQS, STATS_CAP, &eo);
	uint64_t ds = md_daemon_layout(CMD_CAP, &dof);
	void *e = mmap(NULL, es, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	void *d = mmap(NULL, ds, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int sv[2];
	if (e == MAP_FAILED || d == MAP_FAILED || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		abort();
	a->eseg = e;
	a->dseg = d;
	a->g = (struct md__geometry){ .page_tokens = 16, .page_capacity = CAP, .max_seqs = SEQS,
				      .stats_capacity = STATS_CAP, .cmd_capacity = CMD_CAP,
				      .engine_id = 1, .instance_id = 9, .eoff = eo, .doff = dof,
				      .eseg_size = es, .dseg_size = ds };
	a->sock_fd = sv[0];
	*peer = sv[1];
	a->db_daemon_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	a->db_engine_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	a->ectrl = (struct md_engine_ctrl *)((char *)e + eo.ctrl);
	a->ptab = (struct md_page_entry *)((char *)e + eo.page_table);
	a->seq_clock = (uint64_t *)((char *)e + eo.seq_clock);
	a->dctrl = (const struct md_daemon_ctrl *)((char *)d + dof.ctrl);
	a->params = (const struct md_param_block *)((char *)d + dof.params);
	if (md_ring_prod_init(&a->stats, (char *)e + eo.stats_ring, STATS_CAP,
			      sizeof(struct md_stats_rec), &a->ectrl->stats_tail,
			      &a->dctrl->stats_head, 0) < 0 ||
	    md_ring_cons_init(&a->cmds, (char *)d + dof.cmd_ring, CMD_CAP, sizeof(struct md_cmd),
			      &a->dctrl->cmd_tail, &a->ectrl->cmd_head, 0) < 0)
		abort(); /* the harness's own geometry */
	c->attached = 1;
	c->attach_error = 0;
	c->attach_ns = md_now_ns();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct md_client_config cfg;
	md_client_config_init(&cfg);
	cfg.socket_path = "/nonexistent/memdecay-fuzz.sock";
	cfg.page_capacity = CAP;
	cfg.max_seqs = SEQS;
	md_client *c = NULL;
	if (md_client_create(&cfg, &c) != 0 || !c)
		return 0;
	int peer = -1;
	fake_attach(c, &peer);
	/* some live pages to aim at */
	uint32_t slot, gen;
	for (uint32_t q = 0; q < SEQS; q++)
		for (uint32_t k = 0; k < 3; k++)
			md_page_open(c, q, k * 16, 16, 0x3333333333333333ULL, &slot, &gen);

	char *dseg = (char *)c->a.dseg;
	struct md_daemon_ctrl *dc = (struct md_daemon_ctrl *)(dseg + c->a.g.doff.ctrl);
	struct md_param_block *pb = (struct md_param_block *)(dseg + c->a.g.doff.params);
	struct md_cmd *ring = (struct md_cmd *)(dseg + c->a.g.doff.cmd_ring);
	uint8_t handed[CAP] = { 0 };
	size_t off = 0;
	while (off + 1 <= size && c->attached) {
		uint8_t op = data[off++];
		switch (op % 8) {
		case 0: case 1: case 2: { /* one command record, then a tail bump */
			if (off + sizeof(struct md_cmd) > size)
				goto done;
			uint64_t t = dc->cmd_tail;
			struct md_cmd *r = &ring[t & (CMD_CAP - 1)];
			memcpy(r, data + off, sizeof(*r));
			off += sizeof(*r);
			if (op & 0x10) {                  /* well-framed most of the time */
				r->pos = (uint32_t)t;
				r->type = MD_CMD_EVICT;
				r->slot %= CAP + 1;
			}
			dc->cmd_tail = t + 1;
			break;
		}
		case 3: /* a raw tail */
			if (off + 8 > size)
				goto done;
			memcpy(&dc->cmd_tail, data + off, 8);
			off += 8;
			break;
		case 4: /* parameter block bytes */
			if (off + sizeof(*pb) > size)
				goto done;
			memcpy(pb, data + off, sizeof(*pb));
			off += sizeof(*pb);
			if (op & 0x10)
				pb->seq &= ~1ull;
			break;
		case 5: /* daemon control words */
			if (off + 16 > size)
				goto done;
			memcpy(&dc->heartbeat_ns, data + off, 8);
			memcpy(&dc->sleeping, data + off + 8, 4);
			memcpy(&dc->shutting_down, data + off + 12, 4);
			if (op & 0x10)
				dc->shutting_down = 0;
			off += 16;
			break;
		case 6: {
			struct md_params_view v;
			md_client_params(c, &v);
			md_client_check(c, op & 0x10 ? 0 : 100000);
			md_attn_page(c, op % CAP, 0.5f, 0xffff);
			break;
		}
		default: {
			struct md_evict ev[16];
			int n = md_poll_commands(c, ev, 16);
			for (int i = 0; i < n; i++) {
				struct md_page_entry e;
				if (ev[i].slot >= CAP || handed[ev[i].slot])
					abort(); /* out of range or handed out twice */
				if (md_page_info(c, ev[i].slot, &e) < 0 || e.state != MD_PAGE_LIVE ||
				    e.generation != ev[i].gen || e.seq != ev[i].seq)
					abort(); /* a stale command got through */
				handed[ev[i].slot] = 1;
				if (op & 0x10) {
					md_page_free(c, ev[i].slot, MD_FREE_EVICTED);
					handed[ev[i].slot] = 0;
				}
			}
			break;
		}
		}
	}
done:
	md_client_destroy(c);
	if (peer >= 0)
		close(peer);
	return 0;
}
