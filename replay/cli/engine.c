/* engine.c: `agentreplay engine info [engine flags] [--json]`: the
 * deployment, each GPU's memory budget and the capacity that follows
 * (KV tokens, sequences, recurrent-state slots, checkpoints), as a table
 * or as the JSON engine_describe_json() writes into run.json. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"
#include "replay/cli/cli.h"
#include "engine/clock/loop.h"
#include "traces/base/err.h"

struct info_opts {
    struct engine_config ec;
    bool json;
};

static void info_init(void *opts) { engine_config_defaults(&((struct info_opts *)opts)->ec); }

static const struct flag info_flags[] = {
    {"--json", 0, FLAG_BOOL, FLAG_AT(struct info_opts, json), NULL,
     "the description as JSON (run.json's \"engine\")", .value = true},
    FLAG_END,
};

const struct flag_spec engine_info_spec = {
    .usage = "agentreplay engine [info] [flags] [--json]",
    .about = "Prints the deployment's memory budget per GPU and its capacity.",
    .operands = "info",
    .max_operands = 1,
    .size = sizeof(struct info_opts),
    .init = info_init,
    .groups = {{"info", info_flags, 0}, {"engine", engine_flags, offsetof(struct info_opts, ec)}},
};

static double num(json_t *o, const char *a, const char *b)
{
    return json_number_value(json_object_get(json_object_get(o, a), b));
}

static long long inum(json_t *o, const char *a, const char *b)
{
    return (long long)json_integer_value(json_object_get(json_object_get(o, a), b));
}

static const char *str(json_t *o, const char *a, const char *b)
{
    const char *s = json_string_value(json_object_get(json_object_get(o, a), b));
    return s ? s : "";
}

static void print_table(json_t *d)
{
    const double GB = 1e9, MB = 1e6;
    printf("deployment: %s on %lld x %s, TP%lld -> %lld replica%s; backend %s; router %s\n",
           str(d, "model", "name"), inum(d, "layout", "gpus"), str(d, "gpu", "name"),
           inum(d, "layout", "tp"), inum(d, "layout", "replicas"),
           inum(d, "layout", "replicas") == 1 ? "" : "s", str(d, "layout", "backend"),
           str(d, "layout", "router"));
    printf("scheduler: block %lld tokens, %lld batched tokens/step, %lld sequences, "
           "max model len %lld, prefix caching %s\n",
           inum(d, "scheduler", "block_size"), inum(d, "scheduler", "max_num_batched_tokens"),
           inum(d, "scheduler", "max_num_seqs"), inum(d, "scheduler", "max_model_len"),
           json_is_true(json_object_get(json_object_get(d, "scheduler"), "prefix_caching"))
               ? "on" : "off");
    printf("\n%-44s %12s\n", "memory per GPU", "GB");
    printf("%-44s %12.2f\n", "HBM", num(d, "memory_per_gpu", "hbm_bytes") / GB);
    char label[96];
    snprintf(label, sizeof label, "usable (x %.2f gpu_memory_utilization)",
             num(d, "memory_per_gpu", "gpu_memory_utilization"));
    printf("%-44s %12.2f\n", label, num(d, "memory_per_gpu", "usable_bytes") / GB);
    printf("%-44s %12.2f\n", "  weights (TP shard)", num(d, "memory_per_gpu", "weights_bytes") / GB);
    printf("%-44s %12.2f\n", "  activations reserve",
           num(d, "memory_per_gpu", "activations_bytes") / GB);
    if (inum(d, "memory_per_gpu", "state_slots")) {
        snprintf(label, sizeof label, "  recurrent-state slots (%lld x %.2f MB)",
                 inum(d, "memory_per_gpu", "state_slots"),
                 num(d, "memory_per_gpu", "state_slot_bytes") / MB);
        printf("%-44s %12.2f\n", label, num(d, "memory_per_gpu", "states_bytes") / GB);
    }
    printf("%-44s %12.2f\n", "  KV pool (blocks + state checkpoints)",
           num(d, "memory_per_gpu", "kv_pool_bytes") / GB);
    printf("\n%-44s %12s\n", "capacity per replica", "");
    snprintf(label, sizeof label, "KV blocks (%.1f KB per GPU each)",
             num(d, "memory_per_gpu", "kv_block_bytes") / 1e3);
    printf("%-44s %12lld\n", label, inum(d, "capacity", "kv_blocks_per_replica"));
    printf("%-44s %12lld\n", "KV tokens", inum(d, "capacity", "kv_tokens_per_replica"));
    printf("%-44s %12lld\n", "sequences (max_num_seqs)", inum(d, "capacity", "sequences_per_replica"));
    if (inum(d, "capacity", "state_slots_per_replica"))
        printf("%-44s %12lld\n", "recurrent-state slots",
               inum(d, "capacity", "state_slots_per_replica"));
    if (inum(d, "capacity", "checkpoint_blocks")) {
        printf("%-44s %12lld\n", "state checkpoint size (KV blocks)",
               inum(d, "capacity", "checkpoint_blocks"));
        printf("%-44s %12lld\n", "checkpoints if the pool held only them",
               inum(d, "capacity", "checkpoints_max_per_replica"));
        printf("%-44s %12lld\n", "checkpoint interval along prompts (tokens)",
               inum(d, "capacity", "checkpoint_interval_tokens"));
    }
    printf("%-44s %12lld\n", "KV tokens, whole deployment", inum(d, "capacity", "kv_tokens_total"));
    printf("\nspeculative decoding: %s", str(d, "speculative", "method"));
    if (strcmp(str(d, "speculative", "method"), "none"))
        printf(", draft %lld, %s; expected %.2f tokens per step",
               inum(d, "speculative", "draft"), str(d, "speculative", "model"),
               num(d, "speculative", "expected_tokens_per_step"));
    printf("\nsources: model %s\n         gpu %s\n", str(d, "model", "source"),
           str(d, "gpu", "source"));
}

int engine_cmd_info(int argc, char **argv)
{
    struct info_opts o;
    const char *sub[1];
    int n_sub = 0;
    char err[ERR_LEN] = "";
    int rc = cli_parse("engine", &engine_info_spec, &o, argc, argv, sub, &n_sub);
    if (rc >= 0)
        return rc;
    if (n_sub && strcmp(sub[0], "info")) {
        snprintf(err, sizeof err, "unknown subcommand '%s' (expected info)", sub[0]);
        return cli_bad("engine", err);
    }
    struct engine_config c = o.ec;
    bool json = o.json;
    struct loop *l = loop_virtual_create();
    struct engine *e = engine_create(&c, l, err);
    if (!e) {
        fprintf(stderr, "agentreplay engine info: %s\n", err);
        loop_destroy(l);
        return EXIT_BADINPUT;
    }
    json_t *d = engine_describe_json(e);
    if (json) {
        json_dumpf(d, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
        printf("\n");
    } else {
        print_table(d);
    }
    json_decref(d);
    engine_destroy(e);
    loop_destroy(l);
    return EXIT_OK;
}
