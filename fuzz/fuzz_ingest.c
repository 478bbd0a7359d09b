/*
 * fuzz_ingest.c — libFuzzer harness for the daemon's record validation:
 * md__host_ingest() over arbitrary 64-byte stats records, interleaved with
 * resyncs from arbitrary page-table entries, decisions and `top`.  Whatever an
 * engine writes, the host must neither crash nor break an internal invariant
 * (ASan/UBSan report, abort), nor hand out a decision outside the engine.
 *
 * Input: 2 bytes of setup (policy, budget), then steps of 1 op byte + 64 bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "host.h"
#include "params.h"

#define CAP 64u
#define SEQS 8u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	struct md__params p;
	md__params_defaults(&p);
	p.policy = data[0] % MD_POLICY_COUNT;
	p.norm = (data[0] >> 4) & 1;
	p.budget_engine_pages = data[1] % 48;
	p.budget_sequence_tokens = (data[1] & 0x80) ? 64 : 0;
	struct md__host *h = md__host_new(&p);
	if (!h)
		return 0;
	struct md__engine_opts o;
	md__engine_opts_defaults(&o);
	if (md__host_engine_add(h, 7, 16, CAP, SEQS, &o) < 0) {
		md__host_free(h);
		return 0;
	}
	data += 2;
	size -= 2;
	int in_resync = 0;
	while (size >= 65) {
		uint8_t op = data[0];
		struct md_stats_rec rec;
		memcpy(&rec, data + 1, sizeof(rec));
		data += 65;
		size -= 65;
		switch (op % 16) {
		case 12: { /* resync: this record's bytes as one page-table entry */
			struct md_page_entry e;
			memcpy(&e, &rec, sizeof(e));
			if (!in_resync) {
				md__host_resync_begin(h, 7);
				in_resync = 1;
				if (op & 0x10) {
					/* a whole table from this entry: slots step its position,
					 * some keep and some change the generation */
					struct md_page_entry t[CAP];
					for (uint32_t i = 0; i < CAP; i++) {
						t[i] = e;
						t[i].first_pos = e.first_pos + (uint64_t)i * e.n_tokens;
						if ((op >> 5) & (i & 7))
							t[i].generation ^= 1;
					}
					md__host_resync_prune(h, 7, t);
				}
			}
			md__host_resync_seq_clock(h, 7, e.seq % (SEQS + 1), e.open_clock);
			md__host_resync_page(h, 7, rec.slot % (CAP + 2), &e);
			break;
		}
		case 13:
			if (in_resync) {
				md__host_resync_end(h, 7);
				in_resync = 0;
			}
			break;
		case 14: {
			struct md__decision out[32];
			size_t n = md__host_decide(h, out, 32);
			for (size_t i = 0; i < n; i++)
				if (out[i].engine_id != 7 || out[i].slot >= CAP || out[i].seq >= SEQS)
					abort(); /* a decision for a page that cannot exist */
			break;
		}
		case 15: {
			struct md__top_entry t[16];
			md__host_top(h, UINT32_MAX, t, 16);
			struct md__engine_stats st;
			md__host_engine_stats(h, 7, &st);
			break;
		}
		default:
			if (!in_resync) {
				/* bias toward small slots/seqs so records hit real pages */
				if (op & 0x10)
					rec.slot %= CAP;
				if (op & 0x20)
					rec.seq %= SEQS;
				if (op & 0x40)
					rec.type = (uint16_t)(rec.type % MD_REC_TYPE_COUNT);
				md__host_ingest(h, 7, &rec);
			}
			break;
		}
	}
	if (in_resync)
		md__host_resync_end(h, 7);
	struct md__decision out[64];
	while (md__host_decide(h, out, 64) == 64)
		;
	md__host_engine_remove(h, 7);
	md__host_free(h);
	return 0;
}
