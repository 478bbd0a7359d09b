/*
 * calibrate.c — attention lifetimes and the half-life estimator (calibrate.h,
 * docs/calibration.md).
 *
 * The model behind λ_r is exponential decay per step, so the estimator is the
 * discrete exponential (geometric) MLE: every step a still-attended token has
 * probability p of having had its last refresh.  An event with lifetime L
 * contributes L survived steps and one "death", a token censored at L only L
 * survived steps: p̂ = d / (Σ L + d), λ = −ln(1 − p̂), h = ln 2 / λ.  The
 * interval treats d as Poisson with mean p·E (χ² bounds with 2d and 2d + 2
 * degrees of freedom, conservative under censoring).  Kaplan–Meier on the
 * same samples is reported beside it to show when the exponential model fits
 * badly.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate.h"

void md__calib_add(struct md__calib_region *r, uint64_t life, int event)
{
	size_t bin = life < MD__CALIB_HIST_BINS - 1 ? (size_t)life : MD__CALIB_HIST_BINS - 1;
	r->sum_life += (double)life;
	if (event) {
		r->events++;
		r->ev_hist[bin]++;
	} else {
		r->censored++;
		r->cen_hist[bin]++;
	}
}

void md__calib_merge(struct md__calib_stats *dst, const struct md__calib_stats *src)
{
	for (unsigned k = 0; k < MD_REGIONS_MAX; k++) {
		struct md__calib_region *d = &dst->r[k];
		const struct md__calib_region *s = &src->r[k];
		d->events += s->events;
		d->censored += s->censored;
		d->sum_life += s->sum_life;
		for (unsigned b = 0; b < MD__CALIB_HIST_BINS; b++) {
			d->ev_hist[b] += s->ev_hist[b];
			d->cen_hist[b] += s->cen_hist[b];
		}
	}
}

static const char *status_names[] = { "ok", "too few events", "no samples",
				       "never refreshed after birth" };

const char *md__calib_status_name(int s)
{
	return s >= 0 && s <= MD__CALIB_ZERO ? status_names[s] : "?";
}

/* Inverse of the standard normal CDF (Acklam's rational approximation,
 * relative error < 1.2e-9). */
static double norm_quantile(double p)
{
	static const double a[] = { -3.969683028665376e+01, 2.209460984245205e+02,
				    -2.759285104469687e+02, 1.383577518672690e+02,
				    -3.066479806614716e+01, 2.506628277459239e+00 };
	static const double b[] = { -5.447609879822406e+01, 1.615858368580409e+02,
				    -1.556989798598866e+02, 6.680131188771972e+01,
				    -1.328068155288572e+01 };
	static const double c[] = { -7.784894002430293e-03, -3.223964580411365e-01,
				    -2.400758277161838e+00, -2.549732539343734e+00,
				    4.374664141464968e+00, 2.938163982698783e+00 };
	static const double d[] = { 7.784695709041462e-03, 3.224671290700398e-01,
				    2.445134137142996e+00, 3.754408661907416e+00 };
	double q, r;
	if (p < 0.02425) {
		q = sqrt(-2 * log(p));
		return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
		       ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
	}
	if (p > 1 - 0.02425) {
		q = sqrt(-2 * log(1 - p));
		return -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
		       ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
	}
	q = p - 0.5;
	r = q * q;
	return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
	       (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

/* χ² quantile with k degrees of freedom (Wilson–Hilferty; k = 2 exactly). */
static double chi2_quantile(double p, double k)
{
	if (k <= 0)
		return 0;
	if (k == 2)
		return -2 * log1p(-p);
	double z = norm_quantile(p), v = 2.0 / (9.0 * k);
	double x = 1 - v + z * sqrt(v);
	return x > 0 ? k * x * x * x : 0;
}

/* per-step probability p of the last refresh → half-life in steps */
static double half_life_of(double p)
{
	if (p <= 0)
		return INFINITY;
	if (p >= 1)
		return 0;
	return M_LN2 / -log1p(-p);
}

int md__calib_estimate(const struct md__calib_region *r, double conf, uint64_t min_events,
		       struct md__calib_estimate *o)
{
	if (!(conf > 0 && conf < 1))
		return -EINVAL;
	memset(o, 0, sizeof(*o));
	o->events = r->events;
	o->censored = r->censored;
	o->samples = r->events + r->censored;
	o->km_half_life = -1;
	o->half_life = o->half_life_hi = INFINITY;
	if (!o->samples) {
		o->status = MD__CALIB_NONE;
		return 0;
	}
	double d = (double)r->events, E = r->sum_life + d;
	o->exposure_steps = E;
	double alpha = 1 - conf;
	double p = E > 0 ? d / E : 0;
	double p_lo = E > 0 ? chi2_quantile(alpha / 2, 2 * d) / (2 * E) : 0;
	double p_hi = E > 0 ? chi2_quantile(1 - alpha / 2, 2 * d + 2) / (2 * E) : 1;
	if (p_hi > 1)
		p_hi = 1;
	o->half_life = half_life_of(p);
	o->half_life_lo = half_life_of(p_hi);
	o->half_life_hi = half_life_of(p_lo);
	o->lambda = o->half_life > 0 ? M_LN2 / o->half_life : INFINITY;
	o->lambda_lo = o->half_life_hi > 0 ? M_LN2 / o->half_life_hi : INFINITY;
	o->lambda_hi = o->half_life_lo > 0 ? M_LN2 / o->half_life_lo : INFINITY;

	/* Kaplan–Meier: S(t) = P(L > t); the half-life is the first s with
	 * P(L ≥ s) = S(s − 1) ≤ 1/2.  Censored at c means L ≥ c: at risk at c. */
	double at_risk = (double)o->samples, S = 1.0;
	for (unsigned t = 0; t + 1 < MD__CALIB_HIST_BINS && at_risk > 0; t++) {
		if (r->ev_hist[t])
			S *= 1.0 - (double)r->ev_hist[t] / at_risk;
		at_risk -= (double)(r->ev_hist[t] + r->cen_hist[t]);
		if (S <= 0.5) {
			o->km_half_life = t + 1;
			break;
		}
	}

	if (r->sum_life == 0 && r->events)
		o->status = MD__CALIB_ZERO;
	else if (r->events < min_events || !(o->half_life > 0) || isinf(o->half_life))
		o->status = MD__CALIB_FEW;
	else
		o->status = MD__CALIB_OK;
	return 0;
}

/* ---- tracker ---- */

struct calib_page {
	uint32_t gen, seq;
	uint64_t first_pos;
	uint64_t labels;
	uint16_t n_tokens;
	uint8_t live;
};

struct md__calib_tracker {
	uint32_t page_tokens, page_capacity, max_seqs, grace;
	struct calib_page *pages;
	uint32_t *birth;      /* [slot·P + k], low 32 bits of the clock: differences only */
	uint32_t *last;       /* last refresh, same */
	uint64_t *seq_clock;
	uint64_t *seq_tokens;
};

struct md__calib_tracker *md__calib_tracker_new(uint32_t P, uint32_t cap, uint32_t max_seqs,
						uint32_t grace)
{
	if (!P || P > MD_PAGE_TOKENS_MAX || !cap || !max_seqs)
		return NULL;
	struct md__calib_tracker *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->page_tokens = P;
	t->page_capacity = cap;
	t->max_seqs = max_seqs;
	t->grace = grace;
	/* calloc of large sizes maps zero pages: untouched slots cost nothing */
	t->pages = calloc(cap, sizeof(*t->pages));
	t->birth = calloc((size_t)cap * P, sizeof(uint32_t));
	t->last = calloc((size_t)cap * P, sizeof(uint32_t));
	t->seq_clock = calloc(max_seqs, sizeof(uint64_t));
	t->seq_tokens = calloc(max_seqs, sizeof(uint64_t));
	if (!t->pages || !t->birth || !t->last || !t->seq_clock || !t->seq_tokens) {
		md__calib_tracker_free(t);
		return NULL;
	}
	return t;
}

void md__calib_tracker_free(struct md__calib_tracker *t)
{
	if (!t)
		return;
	free(t->pages);
	free(t->birth);
	free(t->last);
	free(t->seq_clock);
	free(t->seq_tokens);
	free(t);
}

void md__calib_prefetch(const struct md__calib_tracker *t, uint32_t slot)
{
	if (slot >= t->page_capacity)
		return;
	__builtin_prefetch(&t->pages[slot], 1);
	__builtin_prefetch(&t->last[(size_t)slot * t->page_tokens], 1);
}

static struct calib_page *live_page(struct md__calib_tracker *t, uint32_t slot, uint32_t gen)
{
	if (slot >= t->page_capacity)
		return NULL;
	struct calib_page *pg = &t->pages[slot];
	return pg->live && pg->gen == gen ? pg : NULL;
}

static uint64_t clock_at(struct md__calib_tracker *t, uint32_t seq, uint64_t clock)
{
	if (seq < t->max_seqs && t->seq_clock[seq] > clock)
		return t->seq_clock[seq];
	if (seq < t->max_seqs)
		t->seq_clock[seq] = clock;
	return clock;
}

static void page_samples(const struct md__calib_tracker *t, struct md__calib_stats *st,
			 uint32_t slot, uint64_t end_clock)
{
	const struct calib_page *pg = &t->pages[slot];
	size_t base = (size_t)slot * t->page_tokens;
	uint32_t now = (uint32_t)end_clock;
	for (unsigned k = 0; k < pg->n_tokens; k++) {
		uint32_t life = t->last[base + k] - t->birth[base + k];
		uint32_t quiet = now - t->last[base + k];
		if (life > INT32_MAX)
			life = 0; /* a clock restart inside the page: treat as unrefreshed */
		if (quiet > INT32_MAX)
			quiet = 0;
		md__calib_add(&st->r[md_label_get(pg->labels, k)], life, quiet >= t->grace);
	}
}

static void page_end(struct md__calib_tracker *t, struct md__calib_stats *st, uint32_t slot,
		     uint64_t clock)
{
	struct calib_page *pg = &t->pages[slot];
	page_samples(t, st, slot, clock);
	if (pg->seq < t->max_seqs)
		t->seq_tokens[pg->seq] -= pg->n_tokens <= t->seq_tokens[pg->seq]
						  ? pg->n_tokens
						  : t->seq_tokens[pg->seq];
	pg->live = 0;
}

int md__calib_page_open(struct md__calib_tracker *t, struct md__calib_stats *st, uint32_t slot,
			uint32_t gen, uint32_t seq, uint64_t first_pos, uint32_t n, uint64_t labels,
			uint64_t clock)
{
	if (slot >= t->page_capacity || seq >= t->max_seqs || n < 1 || n > t->page_tokens)
		return -EINVAL;
	struct calib_page *pg = &t->pages[slot];
	if (pg->live)
		page_end(t, st, slot, clock_at(t, pg->seq, clock)); /* reopened: the old one ended */
	clock = clock_at(t, seq, clock);
	pg->gen = gen;
	pg->seq = seq;
	pg->first_pos = first_pos;
	pg->labels = labels;
	pg->n_tokens = (uint16_t)n;
	pg->live = 1;
	size_t base = (size_t)slot * t->page_tokens;
	for (unsigned k = 0; k < t->page_tokens; k++)
		t->birth[base + k] = t->last[base + k] = (uint32_t)clock;
	t->seq_tokens[seq] += n;
	return 0;
}

int md__calib_page_grow(struct md__calib_tracker *t, uint32_t slot, uint32_t gen, uint32_t n,
			uint64_t labels, uint64_t clock)
{
	struct calib_page *pg = live_page(t, slot, gen);
	if (!pg || n < pg->n_tokens || n > t->page_tokens)
		return -EINVAL;
	clock = clock_at(t, pg->seq, clock);
	size_t base = (size_t)slot * t->page_tokens;
	for (unsigned k = pg->n_tokens; k < n; k++)
		t->birth[base + k] = t->last[base + k] = (uint32_t)clock;
	t->seq_tokens[pg->seq] += n - pg->n_tokens;
	pg->n_tokens = (uint16_t)n;
	pg->labels = labels;
	return 0;
}

int md__calib_page_labels(struct md__calib_tracker *t, uint32_t slot, uint32_t gen,
			  uint64_t labels)
{
	struct calib_page *pg = live_page(t, slot, gen);
	if (!pg)
		return -EINVAL;
	pg->labels = labels;
	return 0;
}

int md__calib_attn(struct md__calib_tracker *t, uint32_t slot, uint32_t gen, uint32_t refresh,
		   uint64_t clock)
{
	struct calib_page *pg = live_page(t, slot, gen);
	if (!pg)
		return -EINVAL;
	clock = clock_at(t, pg->seq, clock);
	unsigned bits = refresh & ((1u << pg->n_tokens) - 1u);
	size_t base = (size_t)slot * t->page_tokens;
	while (bits) {
		unsigned k = (unsigned)__builtin_ctz(bits);
		t->last[base + k] = (uint32_t)clock;
		bits &= bits - 1;
	}
	return 0;
}

int md__calib_page_free(struct md__calib_tracker *t, struct md__calib_stats *st, uint32_t slot,
			uint32_t gen, uint64_t clock)
{
	struct calib_page *pg = live_page(t, slot, gen);
	if (!pg)
		return -EINVAL;
	page_end(t, st, slot, clock_at(t, pg->seq, clock));
	return 0;
}

int md__calib_seq_clock(struct md__calib_tracker *t, uint32_t seq, uint64_t clock)
{
	if (seq >= t->max_seqs)
		return -EINVAL;
	if (clock > t->seq_clock[seq])
		t->seq_clock[seq] = clock;
	return 0;
}

int md__calib_seq_end(struct md__calib_tracker *t, struct md__calib_stats *st, uint32_t seq,
		      uint64_t clock)
{
	if (seq >= t->max_seqs)
		return -EINVAL;
	clock = clock_at(t, seq, clock);
	/* the engine frees every page first; any left over ends here */
	if (t->seq_tokens[seq])
		for (uint32_t s = 0; s < t->page_capacity; s++)
			if (t->pages[s].live && t->pages[s].seq == seq)
				page_end(t, st, s, clock);
	t->seq_clock[seq] = 0;
	t->seq_tokens[seq] = 0;
	return 0;
}

int md__calib_relabel(struct md__calib_tracker *t, uint32_t seq, uint64_t pos0, uint64_t pos1,
		      uint32_t region, md__calib_labels_fn fn, void *ud)
{
	if (seq >= t->max_seqs || pos0 >= pos1 || region >= MD_REGIONS_MAX)
		return -EINVAL;
	int changed = 0;
	for (uint32_t s = 0; s < t->page_capacity; s++) {
		struct calib_page *pg = &t->pages[s];
		if (!pg->live || pg->seq != seq || pg->first_pos >= pos1 ||
		    pg->first_pos + pg->n_tokens <= pos0)
			continue;
		uint64_t labels = pg->labels;
		for (unsigned k = 0; k < pg->n_tokens; k++) {
			uint64_t pos = pg->first_pos + k;
			if (pos >= pos0 && pos < pos1)
				labels = md_label_set(labels, k, region);
		}
		if (labels != pg->labels) {
			pg->labels = labels;
			changed++;
			if (fn)
				fn(s, pg->gen, pg->seq, labels, ud);
		}
	}
	return changed;
}

void md__calib_tracker_flush(struct md__calib_tracker *t, struct md__calib_stats *st)
{
	for (uint32_t s = 0; s < t->page_capacity; s++)
		if (t->pages[s].live)
			page_end(t, st, s, t->pages[s].seq < t->max_seqs ? t->seq_clock[t->pages[s].seq] : 0);
	memset(t->seq_tokens, 0, (size_t)t->max_seqs * sizeof(uint64_t));
}

void md__calib_tracker_peek(const struct md__calib_tracker *t, struct md__calib_stats *st)
{
	for (uint32_t s = 0; s < t->page_capacity; s++)
		if (t->pages[s].live)
			page_samples(t, st, s,
				     t->pages[s].seq < t->max_seqs ? t->seq_clock[t->pages[s].seq] : 0);
}

uint32_t md__calib_page_seq(const struct md__calib_tracker *t, uint32_t slot, uint32_t gen)
{
	if (slot >= t->page_capacity || !t->pages[slot].live || t->pages[slot].gen != gen)
		return UINT32_MAX;
	return t->pages[slot].seq;
}

uint64_t md__calib_seq_clock_of(const struct md__calib_tracker *t, uint32_t seq)
{
	return seq < t->max_seqs ? t->seq_clock[seq] : 0;
}

uint64_t md__calib_seq_tokens(const struct md__calib_tracker *t, uint32_t seq)
{
	return seq < t->max_seqs ? t->seq_tokens[seq] : 0;
}
