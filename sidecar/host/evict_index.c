/*
 * evict_index.c — exact eviction decisions without sorting every page.
 *
 * Each sequence keeps two views of its evictable pages (live, not pinned, not
 * a recency sink, not among its k_protect newest pages):
 *  - the key heap, ordered by (key, first_pos, slot), key = a lower bound of
 *    the score valid at every later clock:
 *      memdecay(-norm): (sum of b_r over tokens with lambda_r == 0 + alpha A)/n,
 *                       shaved by 1e-9 relative (exp terms only decay);
 *      h2o: the cumulative mass (only grows); recency: first_pos; random: hash.
 *    Keys may be stale-low: ingest lowers a key when the bound drops below it
 *    (to 0.9 x the bound, so the next small drops cost nothing; a float copy
 *    in the page, key_hint, answers "still above?" without touching the heap)
 *    and leaves rises lazy; a decision that meets a stale key recomputes it.
 *  - step_decay and turn_decay policies (memdecay, memdecay-norm;
 *    memdecay-turn): one decay heap per lambda class (distinct lambda_r > 0,
 *    times the policy's decay_scale), keyed by g with decaying part
 *    >= exp(g - lambda_c t): the decaying sum now, rolled forward at the
 *    page's largest lambda.  t is the sequence's clock (step_decay), or its
 *    turn count (turn_decay: a token's age in turns grows by at most one per
 *    turn begun).  Time-invariant within a class; refreshes only make it
 *    looser (still valid).  Under turn_decay the key is G, a bound of the
 *    whole score with the page's key folded in (comb_key), g kept in e->dg.
 * A decision for a scope (one sequence, or all sequences of an engine) is a
 * threshold algorithm (Fagin) over the two views: pop pages in key order (and,
 * once 8 pops did not settle it, alternately in decay-bound order), compute
 * each exact score into a buffer ordered by (score, first_pos, slot), and
 * evict the buffer's best once it is below min key + min decay bound of the
 * unseen pages (every unseen page scores at least that).  Under turn_decay
 * the decay heads alone bound every unseen page's score: pop in their order,
 * stop below their minimum.  A score of exactly
 * 0 forces a key of 0, so the key order settles ties at 0.  Buffered pages go
 * back to their heaps when the scope ends.  Result == the oracle's full sort.
 * The heaps, by what they order:
 *   keyheap (md__seq.keyheap)         a sequence's pages by (key, first_pos, slot)
 *   decayheap (md__seq.decayheap[c])  a sequence's class-c pages by g
 *   key_heads (scope)                 the sequences' keyheap heads
 *   decay_heads (scope)               the sequences' decayheap heads, by g - lambda_c t
 *                                     (G - lambda_c t under turn_decay)
 *   cands (scope)                     popped pages by exact score: the eviction order
 * Cost: O(sequences) to gather heads, plus (pages whose bounds sit below the
 * chosen score) x log n.  Parameter changes bump an epoch; an engine's index
 * is rebuilt at its next decision (O(n log n)), ingest skips upkeep till then.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "host_internal.h"

/* ---- per-sequence heaps ---- */

/* list order: key, then the tie rule (first_pos, slot) */
static inline int ent_less(const struct md__engine *e, const struct md__heap_ent *a,
			   const struct md__heap_ent *b)
{
	if (a->key != b->key)
		return a->key < b->key;
	uint64_t fa = e->pages[a->slot].first_pos, fb = e->pages[b->slot].first_pos;
	if (fa != fb)
		return fa < fb;
	return a->slot < b->slot;
}

static inline void set_hint(struct md__engine *e, uint32_t slot, double key)
{
	float f = (float)key;
	if ((double)f < key)
		f = nextafterf(f, INFINITY);
	e->pages[slot].key_hint = f;
}

static inline void heap_place(struct md__engine *e, struct md__seq *s, uint32_t i,
			      struct md__heap_ent ent)
{
	s->keyheap[i] = ent;
	e->keyheap_pos[ent.slot] = i;
}

static void keyheap_sift_up(struct md__engine *e, struct md__seq *s, uint32_t i)
{
	struct md__heap_ent ent = s->keyheap[i];
	while (i > 0) {
		uint32_t parent = (i - 1) / 2;
		if (!ent_less(e, &ent, &s->keyheap[parent]))
			break;
		heap_place(e, s, i, s->keyheap[parent]);
		i = parent;
	}
	heap_place(e, s, i, ent);
}

static void keyheap_sift_down(struct md__engine *e, struct md__seq *s, uint32_t i)
{
	uint32_t n = s->keyheap_n;
	struct md__heap_ent ent = s->keyheap[i];
	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && ent_less(e, &s->keyheap[c + 1], &s->keyheap[c]))
			c++;
		if (!ent_less(e, &s->keyheap[c], &ent))
			break;
		heap_place(e, s, i, s->keyheap[c]);
		i = c;
	}
	heap_place(e, s, i, ent);
}

/* decay heaps: plain min-heaps on g, positions in e->decayheap_pos */
static void decayheap_sift_up(struct md__engine *e, struct md__heap_ent *hp, uint32_t i)
{
	struct md__heap_ent ent = hp[i];
	while (i > 0) {
		uint32_t parent = (i - 1) / 2;
		if (!(ent.key < hp[parent].key))
			break;
		hp[i] = hp[parent];
		e->decayheap_pos[hp[i].slot] = i;
		i = parent;
	}
	hp[i] = ent;
	e->decayheap_pos[ent.slot] = i;
}

static void decayheap_sift_down(struct md__engine *e, struct md__heap_ent *hp, uint32_t n, uint32_t i)
{
	struct md__heap_ent ent = hp[i];
	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && hp[c + 1].key < hp[c].key)
			c++;
		if (!(hp[c].key < ent.key))
			break;
		hp[i] = hp[c];
		e->decayheap_pos[hp[i].slot] = i;
		i = c;
	}
	hp[i] = ent;
	e->decayheap_pos[ent.slot] = i;
}

/* The time the decay heaps' bound runs on, for sequence s: its clock
 * (step_decay) or its turn count (turn_decay).  Turns begin at the sequence's
 * clock, which never goes back, so every turn start is at or before it and
 * turn_n is the score's current turn (md__turn_at of the clock). */
static inline double decay_time(const struct md__engine *e, const struct md__seq *s)
{
	return e->turn_decay ? (double)s->turn_n : (double)s->clock;
}

/* a token's age in decay_time units: steps, or turns begun since its refresh
 * (memdecay-turn's score, policy_memdecay_turn.c) */
static inline double token_age(const struct md__engine *e, const struct md__seq *s,
			       uint64_t t_refresh)
{
	if (!e->turn_decay)
		return (double)(s->clock - t_refresh);
	return (double)(s->turn_n - md__turn_at(s->turn_clk, s->turn_n, t_refresh));
}

/* log of a bound on the page's decaying part: Dpos(t) >= exp(g - lambda_c t).
 * Each term decays at most at lambda_max, so the value now, rolled forward at
 * lambda_max, stays below it.  Returns 0 with *cls, or -1: no usable bound. */
#define D_LAMBDA_T_MAX 1e6   /* beyond it lambda*t loses the precision we shave */
static int decay_bound(const struct md__engine *e, uint32_t slot, uint32_t *cls, double *g)
{
	const struct md__params *p = e->params;
	const struct md__page *pg = &e->pages[slot];
	const struct md__seq *s = &e->seqs[pg->seq];
	const uint64_t *tr = &e->t_refresh[(size_t)slot * e->page_tokens];
	double t0 = decay_time(e, s), lmax = 0.0, lg[MD_PAGE_TOKENS_MAX], top = -INFINITY;
	double age = 0.0;
	uint64_t aged = 0;        /* the t_refresh age is for (turns: tokens mostly share it) */
	unsigned nt = 0;
	for (unsigned k = 0; k < pg->n_tokens; k++) {
		unsigned r = md_label_get(pg->labels, k);
		if (!(p->lambda[r] > 0.0) || !(p->base[r] > 0.0))
			continue;
		double lam = p->lambda[r] * e->decay_scale;
		if (lam > lmax)
			lmax = lam;
		if (nt == 0 || tr[k] != aged || !e->turn_decay) {
			aged = tr[k];
			age = token_age(e, s, aged);
		}
		lg[nt] = log(p->base[r] / (double)pg->n_tokens) - lam * age;
		if (lg[nt] > top)
			top = lg[nt];
		nt++;
	}
	if (!nt || !(lmax * t0 <= D_LAMBDA_T_MAX) || !isfinite(top))
		return -1;
	double sum = 0.0;
	for (unsigned i = 0; i < nt; i++)
		sum += exp(lg[i] - top);
	uint32_t c = 0;
	while (c < e->n_cls && e->cls_lambda[c] != lmax)
		c++;
	if (c == e->n_cls)
		return -1;
	*cls = c;
	*g = top + log(sum) + lmax * t0;
	return 0;
}

/*
 * turn_decay: the decay heap orders a page by a bound of its whole score, not
 * only of its decaying part.  memdecay-turn decays slowly per turn, so the
 * decaying and the attention parts are of one size over a sequence's life; a
 * threshold over two separate views (min key + min decay bound) then stays
 * far below the scores near the lowest one, and a decision pops nearly every
 * page.  The bound, with K the page's key-heap key, g its decay bound and
 * lambda_c its class rate: K <= the attention part (static + attention) at
 * every later turn count until ingest lowers K, and the decaying part is
 * >= exp(g - lambda_c T), so at turn count T >= T0 (T0: when it was computed)
 *   score(T) >= K + exp(g - lambda_c T)
 *            >= K exp(-lambda_c (T - T0)) + exp(g - lambda_c T)
 *             = exp(G - lambda_c T),  G = log(K exp(lambda_c T0) + exp(g))
 * (K >= 0: bases, alpha and attention masses are; the turn count T never
 * falls while the page lives).  G is time-invariant like g, so heads still compare by G - lambda_c T.  It gets
 * looser as turns pass (the attention part is counted as decaying); a
 * decision re-keys a head that surfaces (turn_rekey).  When ingest lowers K,
 * md__heap_lower_key recomputes G from the new K (and g, kept in e->dg).
 */
static inline double comb_key(double k, double lt, double g)
{
	if (!(k > 0.0))
		return g;
	double a = log(k) + lt; /* log of K exp(lambda_c T0) */
	return a > g ? a + log1p(exp(g - a)) : g + log1p(exp(a - g));
}

/* cls/g: a bound kept from earlier (still valid: it only gets looser; under
 * turn_decay the combined key G, its g in e->dg), or MD__NO_CLASS with g = NAN
 * to compute it now, from key (turn_decay) */
static void decayheap_insert(struct md__engine *e, struct md__seq *s, uint32_t slot, uint32_t c,
			     double g, double key)
{
	e->dcls[slot] = MD__NO_CLASS;
	if (!e->step_decay && !e->turn_decay) {
		s->nodecay++;
		return;
	}
	if (isnan(g)) {
		if (decay_bound(e, slot, &c, &g))
			c = MD__NO_CLASS;
		else if (e->turn_decay) {
			e->dg[slot] = g;
			g = comb_key(key, e->cls_lambda[c] * (double)s->turn_n, g);
		}
	}
	if (c == MD__NO_CLASS) {
		s->nodecay++;
		return;
	}
	if (s->decayheap_n[c] == s->decayheap_cap[c]) {
		uint32_t nc = s->decayheap_cap[c] ? s->decayheap_cap[c] * 2 : 8;
		struct md__heap_ent *na = realloc(s->decayheap[c], (size_t)nc * sizeof(*na));
		if (!na) { /* no decay bound: correct, only slower */
			s->nodecay++;
			return;
		}
		s->decayheap[c] = na;
		s->decayheap_cap[c] = nc;
	}
	e->dcls[slot] = (uint8_t)c;
	uint32_t i = s->decayheap_n[c]++;
	s->decayheap[c][i] = (struct md__heap_ent){.key = g, .slot = slot, .pad = 0};
	decayheap_sift_up(e, s->decayheap[c], i);
}

static void decayheap_remove(struct md__engine *e, struct md__seq *s, uint32_t slot)
{
	uint32_t c = e->dcls[slot];
	if (c == MD__NO_CLASS) {
		s->nodecay--;
		return;
	}
	e->dcls[slot] = MD__NO_CLASS;
	struct md__heap_ent *hp = s->decayheap[c];
	uint32_t i = e->decayheap_pos[slot], last = --s->decayheap_n[c];
	if (i == last)
		return;
	double old = hp[i].key;
	hp[i] = hp[last];
	e->decayheap_pos[hp[i].slot] = i;
	if (hp[i].key < old)
		decayheap_sift_up(e, hp, i);
	else
		decayheap_sift_down(e, hp, last, i);
}

static void heap_insert_bound(struct md__engine *e, struct md__seq *s, uint32_t slot, double key,
			      uint32_t cls, double g)
{
	/* capacity is reserved at page open: keyheap_cap >= n_pages */
	if (s->keyheap_n >= s->keyheap_cap)
		abort();
	struct md__heap_ent ent = {.key = key, .slot = slot, .pad = 0};
	set_hint(e, slot, key);
	s->keyheap[s->keyheap_n] = ent;
	e->keyheap_pos[slot] = s->keyheap_n;
	s->keyheap_n++;
	keyheap_sift_up(e, s, s->keyheap_n - 1);
	decayheap_insert(e, s, slot, cls, g, key);
}

void md__heap_insert(struct md__engine *e, struct md__seq *s, uint32_t slot, double key)
{
	heap_insert_bound(e, s, slot, key, MD__NO_CLASS, NAN);
}

void md__heap_remove(struct md__engine *e, struct md__seq *s, uint32_t slot)
{
	uint32_t i = e->keyheap_pos[slot];
	if (i >= s->keyheap_n || s->keyheap[i].slot != slot)
		abort(); /* broken invariant */
	decayheap_remove(e, s, slot);
	e->keyheap_pos[slot] = MD__NO_HEAP;
	uint32_t last = --s->keyheap_n;
	if (i == last)
		return;
	struct md__heap_ent old = s->keyheap[i];
	heap_place(e, s, i, s->keyheap[last]);
	if (ent_less(e, &s->keyheap[i], &old))
		keyheap_sift_up(e, s, i);
	else
		keyheap_sift_down(e, s, i);
}

/* Empties the sequence's heaps at once (every page leaves them). */
void md__heap_clear(struct md__engine *e, struct md__seq *s)
{
	for (uint32_t i = 0; i < s->keyheap_n; i++) {
		e->keyheap_pos[s->keyheap[i].slot] = MD__NO_HEAP;
		e->dcls[s->keyheap[i].slot] = MD__NO_CLASS;
	}
	s->keyheap_n = 0;
	s->nodecay = 0;
	for (unsigned c = 0; c < MD_REGIONS_MAX; c++)
		s->decayheap_n[c] = 0;
}

/* a decay-heap entry's key moved either way */
static void decayheap_rekey(struct md__engine *e, struct md__seq *s, uint32_t c, uint32_t i,
			    double key)
{
	struct md__heap_ent *hp = s->decayheap[c];
	double old = hp[i].key;
	hp[i].key = key;
	if (key < old)
		decayheap_sift_up(e, hp, i);
	else if (key > old)
		decayheap_sift_down(e, hp, s->decayheap_n[c], i);
}

void md__heap_lower_key(struct md__engine *e, struct md__seq *s, uint32_t slot, double key)
{
	uint32_t i = e->keyheap_pos[slot];
	s->keyheap[i].key = key;
	set_hint(e, slot, key);
	keyheap_sift_up(e, s, i);
	/* turn_decay: the combined key was computed from the old K, larger
	 * (about 1 attention record in 100 lowers a key in the policy bench) */
	if (!e->turn_decay)
		return;
	uint32_t c = e->dcls[slot];
	if (c != MD__NO_CLASS)
		decayheap_rekey(e, s, c, e->decayheap_pos[slot],
				comb_key(key, e->cls_lambda[c] * (double)s->turn_n, e->dg[slot]));
}

/* ---- one decision ---- */

struct md__cand {
	double score;
	uint64_t first_pos;
	uint32_t slot;
	uint32_t seq;
	double lb;
	double g;     /* its decay bound, kept for reinsertion (NAN: none) */
	uint32_t cls;
	uint32_t pad;
};

struct md__key_head {             /* a sequence's list head: (key, first_pos, slot) */
	double key;
	uint64_t first_pos;
	uint32_t slot;
	uint32_t seq;
};

struct md__decay_head {            /* a decay heap's head: v = g - lambda_c t_seq */
	double v;
	uint32_t seq;
	uint32_t cls;
};

static inline int cand_less(const struct md__cand *a, const struct md__cand *b)
{
	return md__evict_order(a->score, a->first_pos, a->slot, b->score, b->first_pos,
			       b->slot) < 0;
}

static inline int key_head_less(const struct md__key_head *a, const struct md__key_head *b)
{
	return md__evict_order(a->key, a->first_pos, a->slot, b->key, b->first_pos, b->slot) < 0;
}

static void key_heads_sift_down(struct md__scope *sc, size_t i)
{
	struct md__key_head x = sc->key_heads[i];
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= sc->n_key_heads)
			break;
		if (c + 1 < sc->n_key_heads && key_head_less(&sc->key_heads[c + 1], &sc->key_heads[c]))
			c++;
		if (!key_head_less(&sc->key_heads[c], &x))
			break;
		sc->key_heads[i] = sc->key_heads[c];
		i = c;
	}
	sc->key_heads[i] = x;
}

static void decay_heads_sift_down(struct md__scope *sc, size_t i)
{
	struct md__decay_head x = sc->decay_heads[i];
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= sc->n_decay_heads)
			break;
		if (c + 1 < sc->n_decay_heads && sc->decay_heads[c + 1].v < sc->decay_heads[c].v)
			c++;
		if (!(sc->decay_heads[c].v < x.v))
			break;
		sc->decay_heads[i] = sc->decay_heads[c];
		i = c;
	}
	sc->decay_heads[i] = x;
}

static inline struct md__key_head seq_head(const struct md__engine *e, uint32_t q)
{
	const struct md__seq *s = &e->seqs[q];
	uint32_t slot = s->keyheap[0].slot;
	return (struct md__key_head){s->keyheap[0].key, e->pages[slot].first_pos, slot, q};
}

/* heads only move up during a scope (pages leave, keys rise): fix lazily */
static void key_heads_fix(struct md__scope *sc)
{
	while (sc->n_key_heads) {
		uint32_t q = sc->key_heads[0].seq;
		if (sc->e->seqs[q].keyheap_n == 0) {
			sc->key_heads[0] = sc->key_heads[--sc->n_key_heads];
		} else {
			struct md__key_head cur = seq_head(sc->e, q);
			if (cur.key == sc->key_heads[0].key && cur.slot == sc->key_heads[0].slot)
				return;
			sc->key_heads[0] = cur;
		}
		if (sc->n_key_heads)
			key_heads_sift_down(sc, 0);
	}
}

static void decay_heads_fix(struct md__scope *sc)
{
	while (sc->n_decay_heads) {
		const struct md__seq *s = &sc->e->seqs[sc->decay_heads[0].seq];
		uint32_t c = sc->decay_heads[0].cls;
		if (s->decayheap_n[c] == 0) {
			sc->decay_heads[0] = sc->decay_heads[--sc->n_decay_heads];
		} else {
			double v = s->decayheap[c][0].key - sc->e->cls_lambda[c] * decay_time(sc->e, s);
			if (v == sc->decay_heads[0].v)
				return;
			sc->decay_heads[0].v = v;
		}
		if (sc->n_decay_heads)
			decay_heads_sift_down(sc, 0);
	}
}

static int cands_push(struct md__scope *sc, struct md__cand c)
{
	if (sc->n_cands == sc->cap_cands) {
		size_t nc = sc->cap_cands ? sc->cap_cands * 2 : 64;
		struct md__cand *nb = realloc(sc->cands, nc * sizeof(*nb));
		if (!nb)
			return -1;
		sc->cands = nb;
		sc->cap_cands = nc;
	}
	size_t i = sc->n_cands++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!cand_less(&c, &sc->cands[p]))
			break;
		sc->cands[i] = sc->cands[p];
		i = p;
	}
	sc->cands[i] = c;
	return 0;
}

static struct md__cand cands_pop(struct md__scope *sc)
{
	struct md__cand top = sc->cands[0];
	struct md__cand x = sc->cands[--sc->n_cands];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= sc->n_cands)
			break;
		if (c + 1 < sc->n_cands && cand_less(&sc->cands[c + 1], &sc->cands[c]))
			c++;
		if (!cand_less(&sc->cands[c], &x))
			break;
		sc->cands[i] = sc->cands[c];
		i = c;
	}
	if (sc->n_cands)
		sc->cands[i] = x;
	return top;
}

/* turn_decay: the head of class c of sequence s (slot) re-keyed to its
 * combined bound now, when that is higher (returns 1: the head moved, pop
 * again).  Its key G loses the attention part as turns pass, and its g goes
 * stale-low when a token is refreshed (its age restarts at 0 while g keeps
 * the old one); both are taken afresh: g from the tokens, K raised to the
 * page's lower bound in the key heap too, so that ingest's lowering keeps
 * guarding the K that G was computed from.  A page whose key still holds is
 * scored as usual. */
static int turn_rekey(struct md__scope *sc, struct md__seq *s, uint32_t c, uint32_t slot,
		      const struct md__score_in *in)
{
	struct md__engine *e = sc->e;
	uint32_t i = e->keyheap_pos[slot];
	double k = s->keyheap[i].key, lb = sc->pol->lower_bound(&e->pages[slot], in), g;
	if (lb > k) {
		k = lb;
		s->keyheap[i].key = lb;
		set_hint(e, slot, lb);
		keyheap_sift_down(e, s, i);
	}
	uint32_t cls;
	if (!decay_bound(e, slot, &cls, &g) && cls == c && g > e->dg[slot])
		e->dg[slot] = g;
	struct md__heap_ent *hp = s->decayheap[c];
	double key = comb_key(k, e->cls_lambda[c] * (double)s->turn_n, e->dg[slot]);
	if (!(key > hp[0].key))
		return 0;
	hp[0].key = key;
	decayheap_sift_down(e, hp, s->decayheap_n[c], 0);
	return 1;
}

#define DECAY_HEADS_AFTER_POPS 8  /* key-list pops before the decay heads are gathered */
static void decay_heads_build(struct md__scope *sc);
#define D_SHAVE (1.0 - 1e-7)  /* covers the rounding of g - lambda t */

/* The scope's next eviction (its slot) into *out; 0 when nothing is evictable.
 * Threshold-algorithm style over two sorted views of the unseen pages:
 * score >= key (static + attention part) + decaying part, and the decaying
 * part >= exp(min head v).  Stop when the best seen score is below the sum of
 * the two heads' bounds, or (score 0) when nothing unseen can come first.
 * turn_decay: the decay heads bound the whole score (comb_key), so the
 * threshold is their minimum alone, or the key heads' when some unseen page
 * has no decay bound (its score >= its key) and that is lower; pages come in
 * the order of the view that sets it. */
int md__scope_next(struct md__scope *sc, uint32_t *out)
{
	struct md__engine *e = sc->e;
	/* without the heads' buffer (out of memory) turn_decay runs on the keys
	 * alone: the decay heads are never gathered, their bound is never used */
	int comb = e->turn_decay && sc->decay_heads;
	for (;;) {
		key_heads_fix(sc);
		decay_heads_fix(sc);
		if (sc->n_key_heads == 0)
			break;
		double thr;
		int from_decay;
		if (comb) {
			if (!sc->decay_heads_built)
				decay_heads_build(sc);
			double cmin = sc->n_decay_heads ? exp(sc->decay_heads[0].v) * D_SHAVE : 0.0;
			from_decay = sc->n_decay_heads &&
				     !(sc->nodecay && sc->key_heads[0].key < cmin);
			thr = from_decay ? cmin : sc->key_heads[0].key;
		} else {
			if (!sc->decay_heads_built && sc->pops >= DECAY_HEADS_AFTER_POPS &&
			    sc->decay_heads && !sc->nodecay)
				decay_heads_build(sc);
			double dmin = (sc->nodecay || !sc->decay_heads_built || sc->n_decay_heads == 0)
					      ? 0.0 : exp(sc->decay_heads[0].v) * D_SHAVE;
			thr = sc->key_heads[0].key + dmin;
			from_decay = -1; /* the views alternately, once a pop is due */
		}
		if (sc->n_cands) {
			const struct md__cand *b = &sc->cands[0];
			if (b->score < thr)
				break;
			/* a score of 0 needs a key of 0: the key list's order decides */
			if (b->score == 0.0 && sc->key_heads[0].key == 0.0 &&
			    (b->first_pos < sc->key_heads[0].first_pos ||
			     (b->first_pos == sc->key_heads[0].first_pos && b->slot < sc->key_heads[0].slot)))
				break;
		}
		if (from_decay < 0) {
			sc->turn ^= 1;
			from_decay = sc->turn && sc->decay_heads_built && sc->n_decay_heads;
		}
		sc->pops++;
		uint32_t q, slot;
		struct md__seq *s;
		struct md__score_in in;
		if (from_decay) {
			q = sc->decay_heads[0].seq;
			s = &e->seqs[q];
			slot = s->decayheap[sc->decay_heads[0].cls][0].slot;
			md__score_in_init(sc->h, e, slot, &in);
			if (comb && turn_rekey(sc, s, sc->decay_heads[0].cls, slot, &in))
				continue;
		} else {
			q = sc->key_heads[0].seq;
			s = &e->seqs[q];
			slot = s->keyheap[0].slot;
			md__score_in_init(sc->h, e, slot, &in);
			double lb = sc->pol->lower_bound(&e->pages[slot], &in);
			if (lb > s->keyheap[0].key) { /* stale-low key: push it down, retry */
				s->keyheap[0].key = lb;
				set_hint(e, slot, lb);
				keyheap_sift_down(e, s, 0);
				continue;
			}
		}
		struct md__page *pg = &e->pages[slot];
		const uint64_t *tr = &e->t_refresh[(size_t)slot * e->page_tokens];
		struct md__cand c = {.score = sc->pol->score(pg, tr, &in, NULL),
				 .first_pos = pg->first_pos, .slot = slot, .seq = q,
				 .lb = sc->pol->lower_bound(pg, &in), .g = NAN,
				 .cls = e->dcls[slot]};
		if (c.cls != MD__NO_CLASS)
			c.g = s->decayheap[c.cls][e->decayheap_pos[slot]].key;
		if (cands_push(sc, c))
			break; /* out of memory: decide from what was seen */
		if (e->dcls[slot] == MD__NO_CLASS)
			sc->nodecay--;
		md__heap_remove(e, s, slot);
	}
	if (sc->n_cands == 0)
		return 0;
	*out = cands_pop(sc).slot;
	return 1;
}

void md__scope_end(struct md__scope *sc)
{
	for (size_t i = 0; i < sc->n_cands; i++) {
		struct md__seq *s = &sc->e->seqs[sc->cands[i].seq];
		heap_insert_bound(sc->e, s, sc->cands[i].slot, sc->cands[i].lb, sc->cands[i].cls,
				  sc->cands[i].cls == MD__NO_CLASS ? 0.0 : sc->cands[i].g);
	}
	sc->n_cands = 0;
	free(sc->decay_heads);
	sc->decay_heads = NULL;
	/* the candidate buffer goes back to the host's scratch */
	sc->h->scratch_b = sc->cands;
	sc->h->scratch_b_cap = sc->cap_cands * sizeof(struct md__cand);
}

static void decay_heads_build(struct md__scope *sc)
{
	struct md__engine *e = sc->e;
	sc->decay_heads_built = 1;
	sc->n_decay_heads = 0;
	if (!sc->decay_heads)
		return;
	for (size_t i = 0; i < sc->nseqs; i++) {
		if (i + 8 < sc->nseqs) { /* thousands of cold heads: keep misses in flight */
			const struct md__seq *f = &e->seqs[sc->seqs[i + 8]];
			for (uint32_t c = 0; c < e->n_cls; c++)
				if (f->decayheap_n[c])
					__builtin_prefetch(f->decayheap[c]);
		}
		const struct md__seq *s = &e->seqs[sc->seqs[i]];
		for (uint32_t c = 0; c < e->n_cls; c++)
			if (s->decayheap_n[c])
				sc->decay_heads[sc->n_decay_heads++] = (struct md__decay_head){
					s->decayheap[c][0].key -
						e->cls_lambda[c] * decay_time(e, s),
					sc->seqs[i], c};
	}
	for (size_t i = sc->n_decay_heads / 2; i-- > 0;)
		decay_heads_sift_down(sc, i);
}

int md__scope_begin(struct md__scope *sc, struct md__host *h, struct md__engine *e,
		       const uint32_t *seqs, size_t nseqs)
{
	sc->h = h;
	sc->e = e;
	sc->pol = md__policy_get(e->policy);
	sc->cands = h->scratch_b;
	sc->cap_cands = h->scratch_b_cap / sizeof(struct md__cand);
	sc->n_cands = 0;
	sc->turn = 0;
	sc->nodecay = 0;
	sc->decay_heads_built = 0;
	sc->pops = 0;
	sc->seqs = seqs;
	sc->nseqs = nseqs;
	size_t need = nseqs * sizeof(struct md__key_head);
	if (need > h->scratch_a_cap) {
		void *na = realloc(h->scratch_a, need);
		if (!na)
			return -1;
		h->scratch_a = na;
		h->scratch_a_cap = need;
	}
	sc->key_heads = h->scratch_a;
	sc->n_key_heads = 0;
	sc->n_decay_heads = 0;
	sc->decay_heads = NULL;
	for (size_t i = 0; i < nseqs; i++) {
		if (i + 8 < nseqs) {
			const struct md__seq *f = &e->seqs[seqs[i + 8]];
			if (f->keyheap_n)
				__builtin_prefetch(f->keyheap);
		}
		if (i + 4 < nseqs) {
			const struct md__seq *f = &e->seqs[seqs[i + 4]];
			if (f->keyheap_n)
				__builtin_prefetch(&e->pages[f->keyheap[0].slot]);
		}
		struct md__seq *s = &e->seqs[seqs[i]];
		if (!s->keyheap_n)
			continue;
		sc->key_heads[sc->n_key_heads++] = seq_head(e, seqs[i]);
		sc->nodecay += s->nodecay;
	}
	for (size_t i = sc->n_key_heads / 2; i-- > 0;)
		key_heads_sift_down(sc, i);
	if ((e->step_decay || e->turn_decay) && e->n_cls)
		sc->decay_heads = malloc(nseqs * e->n_cls * sizeof(struct md__decay_head));
	return 0;
}

