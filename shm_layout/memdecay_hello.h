/*
 * memdecay_hello.h — the HELLO line (memdecay_abi.h, "control socket
 * protocol") as one table of fields: each field's key, how its value is
 * written and checked, its bounds, whether it is required, and where it lands
 * in struct md__hello.  libmemdecay writes HELLO from the table
 * (md__hello_format) and memdecayd parses it with the same table
 * (sidecar/ctl/ctl_parse.c), so a field is added here, once: a row, an enum
 * value and a member.  Not installed: both users are built in this tree.
 */
#ifndef MEMDECAY_HELLO_H
#define MEMDECAY_HELLO_H

#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "memdecay_abi.h"

#define MD__TP_SIZE_MAX 64u

/* How a field's value is spelled. */
enum md__hello_type {
	MD__HELLO_ABI,        /* MAJOR.MINOR into abi_major, abi_minor */
	MD__HELLO_NAME,       /* lo..hi printable characters, no blank */
	MD__HELLO_U32,        /* an integer in lo..hi */
	MD__HELLO_WORD,       /* lo..hi characters, checked by the receiver (a policy name) */
	MD__HELLO_I64_OR_NONE,/* -1 (none) or an integer >= 0 */
	MD__HELLO_WEIGHT,     /* a number in (0, 1e6] */
	MD__HELLO_TRANSPORT,  /* host (0) or cuda (1) */
};

/* The fields, in the order they are written. */
enum md__hello_field_id {
	MD__HF_ABI,
	MD__HF_NAME,
	MD__HF_PAGE_TOKENS,
	MD__HF_PAGE_CAPACITY,
	MD__HF_MAX_SEQS,
	MD__HF_TP_RANK,
	MD__HF_TP_SIZE,
	MD__HF_POLICY,
	MD__HF_BUDGET_PAGES,
	MD__HF_BUDGET_SEQUENCE_TOKENS,
	MD__HF_WEIGHT,
	MD__HF_STATS_TRANSPORT,
	MD__HF_TIER_PAGES,        /* 1.4 */
	MD__HF_PAGE_BYTES,        /* 1.4 */
	MD__HF_COUNT,
};

struct md__hello {
	uint32_t given;           /* bit MD__HF_*: the field is in the line */
	uint32_t abi_major, abi_minor;
	char name[64];
	uint32_t page_tokens, page_capacity, max_seqs;
	uint32_t tp_rank, tp_size;
	char policy[64];          /* "" = daemon default */
	int64_t budget_pages;     /* -1 = config */
	int64_t budget_sequence_tokens;
	double weight;            /* 1.0 default */
	int stats_transport;      /* 0 host shared memory (default), 1 cuda (ABI 1.1) */
	uint32_t tier_pages;      /* 1.4: host tier capacity, pages (0: none; at most
				     page_capacity: a tier page keeps its slot) */
	uint32_t page_bytes;      /* 1.4: one page's K/V bytes over all layers (0: unknown) */
};

struct md__hello_field {
	const char *key;
	uint8_t type;             /* enum md__hello_type */
	uint8_t required;
	uint32_t lo, hi;          /* MD__HELLO_U32: the value; NAME and WORD: the length */
	size_t at;                /* offsetof in struct md__hello */
};

#define MD__HELLO_ROW(id, key, member, type, req, lo, hi) \
	[id] = { key, type, req, lo, hi, offsetof(struct md__hello, member) }

static const struct md__hello_field md__hello_fields[MD__HF_COUNT] = {
	MD__HELLO_ROW(MD__HF_ABI, "abi", abi_major, MD__HELLO_ABI, 1, 0, 0),
	MD__HELLO_ROW(MD__HF_NAME, "name", name, MD__HELLO_NAME, 1, 1, 63),
	MD__HELLO_ROW(MD__HF_PAGE_TOKENS, "page_tokens", page_tokens, MD__HELLO_U32, 1,
		      1, MD_PAGE_TOKENS_MAX),
	MD__HELLO_ROW(MD__HF_PAGE_CAPACITY, "page_capacity", page_capacity, MD__HELLO_U32, 1,
		      1, MD_PAGE_CAPACITY_MAX),
	MD__HELLO_ROW(MD__HF_MAX_SEQS, "max_seqs", max_seqs, MD__HELLO_U32, 1,
		      1, MD_MAX_SEQS_MAX),
	MD__HELLO_ROW(MD__HF_TP_RANK, "tp_rank", tp_rank, MD__HELLO_U32, 0,
		      0, MD__TP_SIZE_MAX - 1),
	MD__HELLO_ROW(MD__HF_TP_SIZE, "tp_size", tp_size, MD__HELLO_U32, 0, 1, MD__TP_SIZE_MAX),
	MD__HELLO_ROW(MD__HF_POLICY, "policy", policy, MD__HELLO_WORD, 0, 1, 31),
	MD__HELLO_ROW(MD__HF_BUDGET_PAGES, "budget_pages", budget_pages,
		      MD__HELLO_I64_OR_NONE, 0, 0, 0),
	MD__HELLO_ROW(MD__HF_BUDGET_SEQUENCE_TOKENS, "budget_sequence_tokens",
		      budget_sequence_tokens, MD__HELLO_I64_OR_NONE, 0, 0, 0),
	MD__HELLO_ROW(MD__HF_WEIGHT, "weight", weight, MD__HELLO_WEIGHT, 0, 0, 0),
	MD__HELLO_ROW(MD__HF_STATS_TRANSPORT, "stats_transport", stats_transport,
		      MD__HELLO_TRANSPORT, 0, 0, 0),
	MD__HELLO_ROW(MD__HF_TIER_PAGES, "tier_pages", tier_pages, MD__HELLO_U32, 0,
		      0, MD_PAGE_CAPACITY_MAX),
	MD__HELLO_ROW(MD__HF_PAGE_BYTES, "page_bytes", page_bytes, MD__HELLO_U32, 0,
		      0, UINT32_MAX),
};
#undef MD__HELLO_ROW

/* The field's member in h, for the type the row names. */
static inline void *md__hello_at(struct md__hello *h, unsigned id)
{
	return (char *)h + md__hello_fields[id].at;
}

static inline const void *md__hello_at_c(const struct md__hello *h, unsigned id)
{
	return (const char *)h + md__hello_fields[id].at;
}

/* " key=value" of one given field into buf[0..len); its length, or -1 if it
 * does not fit. */
static inline int md__hello_format_field(const struct md__hello *h, unsigned id, char *buf,
					 size_t len)
{
	const char *k = md__hello_fields[id].key;
	const void *v = md__hello_at_c(h, id);
	switch (md__hello_fields[id].type) {
	case MD__HELLO_ABI:
		return snprintf(buf, len, " %s=%u.%u", k, h->abi_major, h->abi_minor);
	case MD__HELLO_NAME:
	case MD__HELLO_WORD:
		return snprintf(buf, len, " %s=%s", k, (const char *)v);
	case MD__HELLO_U32:
		return snprintf(buf, len, " %s=%u", k, *(const uint32_t *)v);
	case MD__HELLO_I64_OR_NONE:
		return snprintf(buf, len, " %s=%" PRId64, k, *(const int64_t *)v);
	case MD__HELLO_WEIGHT:
		return snprintf(buf, len, " %s=%g", k, *(const double *)v);
	case MD__HELLO_TRANSPORT:
		return snprintf(buf, len, " %s=%s", k, *(const int *)v ? "cuda" : "host");
	}
	return -1;
}

/* "HELLO" and every given field in table order, then "\n".  The length, or
 * -1 if buf is too small. */
static inline int md__hello_format(const struct md__hello *h, char *buf, size_t len)
{
	int n = snprintf(buf, len, "HELLO");
	size_t o;
	if (n < 0 || (size_t)n >= len)
		return -1;
	o = (size_t)n;
	for (unsigned id = 0; id <= MD__HF_COUNT; id++) {
		if (id < MD__HF_COUNT && !(h->given & (1u << id)))
			continue;
		n = id < MD__HF_COUNT ? md__hello_format_field(h, id, buf + o, len - o)
				      : snprintf(buf + o, len - o, "\n");
		if (n < 0 || (size_t)n >= len - o)
			return -1;
		o += (size_t)n;
	}
	return (int)o;
}

#endif /* MEMDECAY_HELLO_H */
