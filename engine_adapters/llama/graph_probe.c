/*
 * graph_probe.c — prints what llama.cpp's graph shows the adapter on this
 * build (docs/design.md §6): the layer-0 K write's cell indices and the
 * kq_soft_max shapes, across seq_rm holes and refills.  A diagnostic, run by
 * hand or by tests/llama/graph_probe.sh:  md_llama_graph_probe MODEL.gguf
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ggml.h>
#include <ggml-backend.h>
#include <llama.h>

static bool cb(struct ggml_tensor *t, bool ask, void *ud)
{
	(void)ud;
	int kw = t->op == GGML_OP_SET_ROWS && !strncmp(t->name, "cache_k_l0", 10);
	int sm = t->op == GGML_OP_SOFT_MAX && !strcmp(t->name, "kq_soft_max-0");
	if (ask)
		return kw || sm;
	if (kw) {
		const struct ggml_tensor *idx = t->src[1];
		printf("  SET_ROWS '%s' idx '%s' type %s n %lld host %d:", t->name, idx->name,
		       ggml_type_name(idx->type), (long long)ggml_nelements(idx),
		       !idx->buffer || ggml_backend_buffer_is_host(idx->buffer));
		for (int64_t j = 0; j < ggml_nelements(idx); j++)
			printf(" %lld", (long long)((const int64_t *)idx->data)[j]);
		printf("\n");
	} else if (sm) {
		const float *p = t->data;
		double maxerr = 0;
		long zeros = 0;
		for (int64_t r = 0; r < t->ne[1] * t->ne[2]; r++) {
			double s = 0;
			for (int64_t c = 0; c < t->ne[0]; c++) {
				s += p[r * t->ne[0] + c];
				zeros += p[r * t->ne[0] + c] == 0.0f;
			}
			if (fabs(s - 1) > maxerr)
				maxerr = fabs(s - 1);
		}
		printf("  %s ne=[%lld,%lld,%lld,%lld] type %s src1 '%s' max|rowsum-1|=%.2e zeros=%ld\n",
		       t->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
		       (long long)t->ne[3], ggml_type_name(t->type), t->src[1] ? t->src[1]->name : "-",
		       maxerr, zeros);
	}
	return true;
}

static void decode(struct llama_context *ctx, int n, int pos0)
{
	struct llama_batch b = llama_batch_init(n, 0, 1);
	for (int i = 0; i < n; i++) {
		b.token[i] = 100 + i;
		b.pos[i] = pos0 + i;
		b.n_seq_id[i] = 1;
		b.seq_id[i][0] = 0;
		b.logits[i] = i == n - 1;
	}
	b.n_tokens = n;
	printf("decode %d tokens at pos %d..%d -> %d\n", n, pos0, pos0 + n - 1, llama_decode(ctx, b));
	llama_batch_free(b);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s MODEL.gguf\n", argv[0]);
		return 2;
	}
	llama_backend_init();
	struct llama_model_params mp = llama_model_default_params();
	struct llama_model *model = llama_model_load_from_file(argv[1], mp);
	if (!model)
		return 1;
	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = 256;
	cp.n_batch = cp.n_ubatch = 256;
	cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
	cp.cb_eval = cb;
	cp.n_threads = cp.n_threads_batch = 2;
	struct llama_context *ctx = llama_init_from_model(model, cp);
	printf("n_layer %d n_head %d template %s kv_unified(default) %d\n", llama_model_n_layer(model),
	       llama_model_n_head(model), llama_model_chat_template(model, NULL) ? "yes" : "no",
	       (int)llama_context_default_params().kv_unified);
	llama_memory_t mem = llama_get_memory(ctx);
	decode(ctx, 44, 0);
	printf("seq_rm(0, 16, 32) -> %d\n", llama_memory_seq_rm(mem, 0, 16, 32));
	decode(ctx, 1, 44);
	decode(ctx, 20, 45);
	printf("pos_min %d pos_max %d\n", llama_memory_seq_pos_min(mem, 0), llama_memory_seq_pos_max(mem, 0));
	llama_free(ctx);
	llama_model_free(model);
	return 0;
}
