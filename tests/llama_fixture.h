/*
 * llama_fixture.h — the model fixture the llama.cpp adapter's tests share: one
 * model per test process, loaded on the CPU from the GGUF an environment
 * variable names (tests/llama.cmake sets it from .deps/llama.env), with
 * llama.cpp's log silenced.  Include after <check.h> and <llama.h>.
 */
#ifndef MD_TESTS_LLAMA_FIXTURE_H
#define MD_TESTS_LLAMA_FIXTURE_H

#include <stdlib.h>

static struct llama_model *g_model;

static void log_quiet(enum ggml_log_level level, const char *text, void *user)
{
	(void)level;
	(void)text;
	(void)user;
}

static void fixture_load_model(const char *env)
{
	const char *path = getenv(env);
	ck_assert_msg(path && *path, "%s not set", env);
	llama_log_set(log_quiet, NULL);
	llama_backend_init();
	struct llama_model_params mp = llama_model_default_params();
	mp.n_gpu_layers = 0;
	g_model = llama_model_load_from_file(path, mp);
	ck_assert_msg(g_model != NULL, "cannot load %s", path);
}

static void teardown_model(void)
{
	llama_model_free(g_model);
	g_model = NULL;
}

#endif
