/*
 * md_llama_pages.c — the llama.cpp adapter's page mirror: P consecutive
 * positions of one sequence a page, declared to the daemon before the ubatch
 * is decoded, freed in llama.cpp and everywhere else on eviction.
 */
#include "md_llama_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int md__page_register(md_llama *a, uint32_t p)
{
	struct mdl_page *pg = &a->pages[p];
	uint32_t slot, gen;
	/* Detached, libmemdecay still takes the page into its mirror (and hands
	 * it to the next daemon on reattach): MD_EDETACHED comes with a slot. */
	int rc = md_page_open(a->client, (uint32_t)pg->seq, (uint64_t)pg->first_pos,
			      pg->n_tokens, pg->labels, &slot, &gen);
	if (rc < 0 && rc != MD_EDETACHED)
		return rc;
	if (slot >= a->page_cap) {
		/* The client's slot space is sized by us; anything else is a bug there. */
		md_page_free(a->client, slot, MD_FREE_FINISHED);
		return -ERANGE;
	}
	pg->slot = slot;
	pg->gen = gen;
	pg->registered = 1;
	pg->dirty = 0;
	a->slot_to_page[slot] = (int32_t)p;
	return 0;
}

/* After an attach to a daemon that has never heard of some pages (they were
 * opened while detached), declare them. */
void mdl_register_missing(md_llama *a)
{
	for (uint32_t p = 0; p < a->page_cap; p++) {
		struct mdl_page *pg = &a->pages[p];
		if (pg->live && !pg->registered && md__page_register(a, p) < 0)
			break;
	}
}

/* ---- pages ---- */

static int32_t md__page_alloc(md_llama *a)
{
	if (!a->n_free_pages)
		return -1;
	return (int32_t)a->free_pages[--a->n_free_pages];
}

static int md__seq_page_slot(md_llama *a, struct mdl_seq *s, uint64_t idx)
{
	if (idx < s->page_of_cap)
		return 0;
	uint32_t cap = s->page_of_cap ? s->page_of_cap : 64;
	while (cap <= idx)
		cap *= 2;
	int32_t *n = realloc(s->page_of, sizeof(int32_t) * cap);
	if (!n)
		return -ENOMEM;
	for (uint32_t i = s->page_of_cap; i < cap; i++)
		n[i] = -1;
	s->page_of = n;
	s->page_of_cap = cap;
	return 0;
}

int32_t mdl_page_at(const md_llama *a, llama_seq_id seq, llama_pos pos)
{
	if (seq < 0 || (uint32_t)seq >= a->n_seq_all || pos < 0)
		return -1;
	const struct mdl_seq *s = &a->seqs[seq];
	uint64_t idx = (uint64_t)pos / a->P;
	return idx < s->page_of_cap ? s->page_of[idx] : -1;
}

static int md__region_majority(uint64_t labels, uint32_t n)
{
	unsigned cnt[16] = {0}, best = 0;
	for (uint32_t k = 0; k < n; k++)
		cnt[md_label_get(labels, k)]++;
	for (unsigned r = 1; r < 16; r++)
		if (cnt[r] > cnt[best])
			best = r;
	return (int)best;
}

/* Drops a page's cells from the map and the page from the sequence. */
void mdl_page_release(md_llama *a, uint32_t p)
{
	struct mdl_page *pg = &a->pages[p];
	struct mdl_seq *s = &a->seqs[pg->seq];
	mdl_cells_clear(a, pg->seq, -1, (int32_t)p);
	s->page_of[(uint64_t)pg->first_pos / a->P] = -1;
	s->live_tokens -= pg->n_tokens;
	if (pg->registered && a->slot_to_page[pg->slot] == (int32_t)p)
		a->slot_to_page[pg->slot] = -1;
	pg->live = 0;
	pg->registered = 0;
	a->free_pages[a->n_free_pages++] = p;
}

int mdl_page_is_tail(const md_llama *a, const struct mdl_page *pg)
{
	llama_pos last = a->seqs[pg->seq].pos_next - 1;
	return last >= pg->first_pos && last < pg->first_pos + (llama_pos)a->P;
}

int mdl_page_pinned(const md_llama *a, const struct mdl_page *pg)
{
	uint32_t mask = a->have_params ? a->params.pinned_mask : (1u << MD_REGION_SYSTEM);
	for (uint32_t k = 0; k < pg->n_tokens; k++)
		if (mask & (1u << md_label_get(pg->labels, k)))
			return 1;
	return 0;
}

/* Frees page p in llama.cpp (positions kept, a hole) and everywhere else.
 * keep: save its cells in the host tier first when there is room; the page
 * then keeps its record and slot (returns 1) and the caller tells the daemon
 * (apply returns 2) — no PAGE_FREE. */
int mdl_evict(md_llama *a, uint32_t p, int by_daemon, int keep)
{
	struct mdl_page *pg = &a->pages[p];
	if (mdl_page_is_tail(a, pg) || mdl_page_pinned(a, pg)) {
		a->st.cmds_refused++;
		return -EPERM;
	}
	int kept = 0;
	if (keep) {
		kept = mdl_tier_save(a, p) == 0;
		a->st.tier_full += !kept;
	}
	if (!llama_memory_seq_rm(a->mem, pg->seq, (llama_pos)pg->first_pos,
				 (llama_pos)(pg->first_pos + a->P))) {
		a->st.seq_rm_failed++;
		if (kept) {
			free(pg->blob);
			pg->blob = NULL;
		}
		return -EIO;
	}
	a->st.evictions++;
	a->st.evicted_tokens += pg->n_tokens;
	a->st.evictions_by_region[md__region_majority(pg->labels, pg->n_tokens)]++;
	if (kept) {
		mdl_tier_stash(a, p);
		return 1;
	}
	if (pg->registered && a->client)
		md_page_free(a->client, pg->slot, by_daemon ? MD_FREE_EVICTED : MD_FREE_FINISHED);
	mdl_page_release(a, p);
	return 0;
}

/* Declares the pages the tokens [pos0, pos0+n) of seq go into. */
int mdl_pages_append(md_llama *a, llama_seq_id seq, llama_pos pos0,
			    const uint8_t *regions, uint32_t n)
{
	struct mdl_seq *s = &a->seqs[seq];
	int32_t touched[MD_PAGE_TOKENS_MAX + 2];
	uint32_t n_touched = 0;
	for (uint32_t i = 0; i < n; i++) {
		llama_pos pos = pos0 + (llama_pos)i;
		uint64_t idx = (uint64_t)pos / a->P;
		int rc = md__seq_page_slot(a, s, idx);
		if (rc < 0)
			return rc;
		int32_t p = s->page_of[idx];
		if (p < 0) {
			p = md__page_alloc(a);
			if (p < 0)
				return MD_ENOSLOT;
			struct mdl_page *pg = &a->pages[p];
			memset(pg, 0, sizeof(*pg));
			pg->seq = seq;
			pg->first_pos = (int64_t)idx * a->P;
			pg->live = 1;
			s->page_of[idx] = p;
		}
		struct mdl_page *pg = &a->pages[p];
		uint32_t k = (uint32_t)(pos - pg->first_pos);
		pg->labels = md_label_set(pg->labels, k, regions[i]);
		if (k + 1 > pg->n_tokens) {
			s->live_tokens += k + 1 - pg->n_tokens;
			pg->n_tokens = (uint16_t)(k + 1);
		}
		pg->dirty = 1;
		if (!n_touched || touched[n_touched - 1] != p) {
			if (n_touched == MD_PAGE_TOKENS_MAX + 2) {
				/* long prefill: flush what we have so far */
				for (uint32_t j = 0; j < n_touched; j++) {
					struct mdl_page *q = &a->pages[touched[j]];
					if (a->client && q->registered && q->dirty) {
						md_page_grow(a->client, q->slot, q->n_tokens, q->labels);
						q->dirty = 0;
					} else if (a->client && !q->registered) {
						md__page_register(a, (uint32_t)touched[j]);
					}
				}
				n_touched = 0;
			}
			touched[n_touched++] = p;
		}
	}
	if (!a->client)
		return 0;
	for (uint32_t j = 0; j < n_touched; j++) {
		struct mdl_page *q = &a->pages[touched[j]];
		if (!q->registered)
			md__page_register(a, (uint32_t)touched[j]);
		else if (q->dirty) {
			md_page_grow(a->client, q->slot, q->n_tokens, q->labels);
			q->dirty = 0;
		}
	}
	return 0;
}

int md_llama_evict_page(md_llama *a, llama_seq_id seq, llama_pos pos)
{
	int32_t p = mdl_page_at(a, seq, pos);
	if (p < 0 || (uint32_t)seq >= a->max_seqs)
		return -ENOENT;
	/* the local tier: only where no daemon client keeps a mirror of it */
	int rc = mdl_evict(a, (uint32_t)p, 0, a->tier_on && !a->client);
	return rc < 0 ? rc : 0;
}

int md_llama_token_region(const md_llama *a, llama_seq_id seq, llama_pos pos)
{
	int32_t p = mdl_page_at(a, seq, pos);
	if (p < 0)
		return -1;
	const struct mdl_page *pg = &a->pages[p];
	uint32_t k = (uint32_t)(pos - pg->first_pos);
	if (k >= pg->n_tokens)
		return -1;
	return (int)md_label_get(pg->labels, k);
}
