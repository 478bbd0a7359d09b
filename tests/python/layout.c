/*
 * layout.c — prints the size and field offsets of the structures the Python
 * binding mirrors (engine_adapters/python/memdecay/_lib.py), with each field's
 * [offset, size], as JSON, so that test_binding.py compares them with ctypes'.
 */
#include <stddef.h>
#include <stdio.h>

#include "memdecay.h"

#define F(s, f)                                                                    \
	printf("%s\"%s\": [%zu, %zu]", first++ ? ", " : "", #f, offsetof(struct s, f), \
	       sizeof(((struct s *)0)->f))
#define S(s, body)                                                                 \
	do {                                                                       \
		int first = 0;                                                     \
		printf("%s\"%s\": {\"size\": %zu, \"fields\": {", n++ ? ", " : "", #s, \
		       sizeof(struct s));                                          \
		body;                                                              \
		printf("}}");                                                      \
	} while (0)

int main(void)
{
	int n = 0;
	printf("{");
	S(md_client_config, (F(md_client_config, socket_path), F(md_client_config, engine_name),
			     F(md_client_config, page_tokens), F(md_client_config, page_capacity),
			     F(md_client_config, max_seqs), F(md_client_config, tp_rank),
			     F(md_client_config, tp_size), F(md_client_config, policy),
			     F(md_client_config, budget_engine_pages),
			     F(md_client_config, budget_sequence_tokens),
			     F(md_client_config, weight), F(md_client_config, tier_pages),
			     F(md_client_config, page_bytes)));
	S(md_params_view, (F(md_params_view, policy), F(md_params_view, norm_mode),
			   F(md_params_view, tau), F(md_params_view, budget_sequence_tokens),
			   F(md_params_view, budget_engine_pages), F(md_params_view, protect_recent),
			   F(md_params_view, pinned_mask), F(md_params_view, seqlock),
			   F(md_params_view, alpha), F(md_params_view, beta),
			   F(md_params_view, low_watermark), F(md_params_view, base),
			   F(md_params_view, lambda)));
	S(md_evict, (F(md_evict, seq), F(md_evict, slot), F(md_evict, gen), F(md_evict, reason),
		     F(md_evict, decided_ns), F(md_evict, type), F(md_evict, resv)));
	S(md_client_counters, (F(md_client_counters, attn_dropped),
			       F(md_client_counters, lifecycle_dropped),
			       F(md_client_counters, resyncs), F(md_client_counters, cmds_applied),
			       F(md_client_counters, cmds_stale), F(md_client_counters, reattaches)));
	S(md_batch_result, (F(md_batch_result, steps), F(md_batch_result, published),
			    F(md_batch_result, skipped), F(md_batch_result, dropped)));
	S(md_page_entry, (F(md_page_entry, version), F(md_page_entry, generation),
			  F(md_page_entry, seq), F(md_page_entry, n_tokens), F(md_page_entry, state),
			  F(md_page_entry, resv0), F(md_page_entry, first_pos),
			  F(md_page_entry, labels), F(md_page_entry, open_clock),
			  F(md_page_entry, resv1)));
	S(md_seq_options, (F(md_seq_options, size), F(md_seq_options, policy),
			   F(md_seq_options, budget_sequence_tokens), F(md_seq_options, state),
			   F(md_seq_options, session)));
	S(md_settle_result, (F(md_settle_result, outcome), F(md_settle_result, applied),
			     F(md_settle_result, waited), F(md_settle_result, resv),
			     F(md_settle_result, wait_ns)));
	printf("}\n");
	return 0;
}
