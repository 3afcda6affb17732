/* wsync-convert - converts weights between safetensors files, checkpoint directories and .wsync files. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "wsync.h"

static const char s_usage[] =
    "usage: wsync-convert [-l tree|flat] [-m MODEL] [-t wsync|safetensors|dir] "
    "[--shard-size BYTES]\n"
    "                     [--cast PATTERN=DTYPE[:SCALING]]... IN OUT\n";

static const char s_options[] =
    "\n"
    "Converts IN, a safetensors or .wsync file (told apart by content) or a checkpoint\n"
    "directory (shards, an index, small files), to OUT. IN and OUT may be - for stdin\n"
    "and stdout.\n"
    "\n"
    "  -l, --layout tree|flat   .wsync output: nest keys at each '.' and '/' (tree,\n"
    "                           the default) or keep each name as one key\n"
    "  -m, --model MODEL        model id of a .wsync output (default: IN's model,\n"
    "                           else IN's file name without its extension)\n"
    "  -t, --to wsync|safetensors|dir\n"
    "                           output kind (default: dir when OUT ends in '/',\n"
    "                           else OUT's extension, else the kind IN is not); dir\n"
    "                           writes a new checkpoint directory OUT\n"
    "      --shard-size BYTES   dir output: tensor bytes per shard at most (default\n"
    "                           2 GiB)\n"
    CLI_CAST_HELP
    "  -h, --help               show this help\n"
    "  -V, --version            show the version\n"
    "\n"
    "Exit status: 0 ok, 64 usage, 65 bad weight file, 66 no input, 70 internal\n"
    "error, 74 I/O error. See wsync-convert(1).\n";

enum layout { LAYOUT_TREE, LAYOUT_FLAT };

struct args {
	enum layout layout;
	const char *model;           /* NULL: from the input */
	int to;                      /* a wsync_kind_t, or -1: from OUT or IN */
	uint64_t shard_size;         /* 0: the default */
	const char *in, *out;
};

/* The output kind beside wsync_kind_t's: a checkpoint directory. */
#define S_KIND_DIR 2

static int
s_kind(const char *name, int *kind)
{
	if (strcmp(name, "wsync") == 0)
		*kind = WSYNC_KIND_WSYNC;
	else if (strcmp(name, "safetensors") == 0)
		*kind = WSYNC_KIND_SAFETENSORS;
	else if (strcmp(name, "dir") == 0)
		*kind = S_KIND_DIR;
	else
		return -1;
	return 0;
}

static void
s_parse_args(int argc, char **argv, struct args *a)
{
	static const struct option longopts[] = {
		{ "cast", required_argument, NULL, 'C' },
		{ "help", no_argument, NULL, 'h' },
		{ "layout", required_argument, NULL, 'l' },
		{ "model", required_argument, NULL, 'm' },
		{ "shard-size", required_argument, NULL, 'S' },
		{ "to", required_argument, NULL, 't' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 }
	};
	int c;

	*a = (struct args){ .layout = LAYOUT_TREE, .to = -1 };
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hl:m:t:V", longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			fputs(s_usage, stdout);
			fputs(s_options, stdout);
			exit(0);
		case 'l':
			if (strcmp(optarg, "tree") == 0)
				a->layout = LAYOUT_TREE;
			else if (strcmp(optarg, "flat") == 0)
				a->layout = LAYOUT_FLAT;
			else
				cli_usage_error("unknown layout \"%s\" (tree or flat)", optarg);
			break;
		case 'm':
			if (wsync_model_id_check(optarg) < 0)
				cli_usage_error("bad model id \"%s\": use 1 to %d of A-Z a-z 0-9 "
				    ". _ - (not starting with '.')", optarg, WSYNC_MAX_MODEL);
			a->model = optarg;
			break;
		case 't':
			if (s_kind(optarg, &a->to) < 0)
				cli_usage_error("unknown output kind \"%s\" (wsync, safetensors "
				    "or dir)", optarg);
			break;
		case 'C':
			cli_cast(optarg);
			break;
		case 'S':
			if ((a->shard_size = cli_number("--shard-size", optarg)) == 0)
				cli_usage_error("--shard-size wants 1 byte or more");
			break;
		case 'V':
			cli_version();
		default:
			cli_bad_option(argv, c);
		}
	}
	if (argc - optind != 2)
		cli_usage_error(argc - optind < 2 ? "needs IN and OUT" :
		    "too many arguments: needs IN and OUT");
	a->in = argv[optind];
	a->out = argv[optind + 1];
	cli_cast_rules();            /* the rules checked as a whole: a usage error first */
}

/* The kind named by OUT's extension; -1 for "-" or another extension. */
static int
s_kind_of_name(const char *path)
{
	const char *dot = strrchr(path, '.');
	size_t n = strlen(path);
	int kind;

	if (n > 0 && path[n - 1] == '/')
		return S_KIND_DIR;
	if (dot == NULL || strchr(dot, '/') != NULL || s_kind(dot + 1, &kind) < 0)
		return -1;
	return kind;
}

/* A tree borrowing f's tensor data, with f's meta and (for .wsync) version. */
static wsync_tree_t *
s_tree(const wsync_file_t *f, const struct args *a, int to)
{
	char model[WSYNC_MAX_MODEL + 1];
	wsync_tree_t *tree;
	wsync_err_t err;

	if (a->model != NULL)
		snprintf(model, sizeof(model), "%s", a->model);
	else if (wsync_file_kind(f) == WSYNC_KIND_WSYNC)
		snprintf(model, sizeof(model), "%s", wsync_file_model(f));
	else
		cli_model_from_name(a->in, model);
	if ((tree = wsync_tree_new(model, &err)) == NULL)
		cli_die_err(&err);
	if (wsync_file_kind(f) == WSYNC_KIND_WSYNC)
		wsync_tree_set_version(tree, wsync_file_version(f));
	for (size_t i = 0; i < wsync_file_meta_count(f); i++) {
		const wsync_meta_t *m = wsync_file_meta(f, i);
		if (wsync_tree_set_meta(tree, m->key, m->value, &err) < 0)
			cli_die(err.code, "%s: %s", wsync_file_name(f), err.msg);
	}
	for (size_t i = 0; i < wsync_file_count(f); i++) {
		const wsync_tensor_t *t = wsync_file_tensor(f, i);
		int rc;

		/* A safetensors name stays whole whatever the layout. */
		if (a->layout == LAYOUT_FLAT || to == WSYNC_KIND_SAFETENSORS)
			rc = wsync_tree_add_keys(tree, &t->path, 1, t->dtype, t->ndim,
			    t->shape, t->data, t->nbytes, &err);
		else
			rc = wsync_tree_add(tree, t->path, t->dtype, t->ndim, t->shape,
			    t->data, t->nbytes, &err);
		if (rc < 0)
			cli_die(err.code, "%s: %s%s", wsync_file_name(f), err.msg,
			    a->layout == LAYOUT_TREE && err.code == EX_DATAERR &&
			    t->nbytes <= UINT32_MAX ?
			    " (use --layout flat)" : "");
	}
	return tree;
}

/* IN as a checkpoint directory: to a .wsync or one safetensors file. */
static int
s_from_dir(const struct args *a, int to)
{
	char model[WSYNC_MAX_MODEL + 1];
	wsync_ckpt_t *ck;
	wsync_tree_t *tree;
	wsync_err_t err;
	int rc;

	if (to == S_KIND_DIR)
		cli_usage_error("%s: a directory converts to a .wsync or a safetensors file", a->in);
	if (a->model != NULL)
		snprintf(model, sizeof(model), "%s", a->model);
	else
		cli_model_from_name(a->in, model);
	if ((ck = wsync_ckpt_open(a->in, &err)) == NULL)
		cli_die_err(&err);
	tree = wsync_ckpt_tree(ck, model, a->layout == LAYOUT_FLAT || to ==
	    WSYNC_KIND_SAFETENSORS, &err);
	if (tree == NULL)
		cli_die_err(&err);
	if (cli_cast_rules()->n > 0) {
		/* Cast as a file: the directory as a .wsync image, then its cast, then the tree again. */
		wsync_file_t *image = wsync_tree_image(tree, a->in, &err), *cast;
		if (image == NULL || (cast = wsync_cast_file(image, cli_cast_rules(), NULL,
		    &err)) == NULL)
			cli_die_err(&err);
		wsync_file_close(&image);
		wsync_tree_destroy(&tree);
		tree = s_tree(cast, a, to);
		rc = to == WSYNC_KIND_SAFETENSORS ?
		    wsync_tree_write_safetensors_file(tree, a->out, &err) :
		    wsync_tree_write_file(tree, a->out, &err);
		if (rc < 0)
			cli_die_err(&err);
		wsync_tree_destroy(&tree);
		wsync_file_close(&cast);
		wsync_ckpt_close(&ck);
		return 0;
	}
	if (to == WSYNC_KIND_SAFETENSORS)
		rc = wsync_tree_write_safetensors_file(tree, a->out, &err);
	else
		rc = wsync_tree_write_file(tree, a->out, &err);
	if (rc < 0)
		cli_die_err(&err);
	wsync_tree_destroy(&tree);
	wsync_ckpt_close(&ck);
	return 0;
}

/*
 * f cast by --cast (f closed), named as f was: a safetensors input's model
 * from IN's name. f itself when there is no cast.
 */
static wsync_file_t *
s_cast(wsync_file_t *f, struct args *a)
{
	static char model[WSYNC_MAX_MODEL + 1];
	wsync_file_t *cast;
	wsync_err_t err;

	if (cli_cast_rules()->n == 0)
		return f;
	if (a->model == NULL && wsync_file_kind(f) != WSYNC_KIND_WSYNC) {
		cli_model_from_name(a->in, model);
		a->model = model;
	}
	if (wsync_file_kind(f) == WSYNC_KIND_WSYNC && wsync_file_verify(f, NULL, NULL, &err) < 0)
		cli_die_err(&err);
	if ((cast = wsync_cast_file(f, cli_cast_rules(), NULL, &err)) == NULL)
		cli_die_err(&err);
	wsync_file_close(&f);
	return cast;
}

int
main(int argc, char **argv)
{
	struct args a;
	wsync_file_t *f;
	wsync_tree_t *tree;
	wsync_err_t err;
	int to, rc;

	cli_init("wsync-convert");
	s_parse_args(argc, argv, &a);
	if ((to = a.to) < 0)
		to = s_kind_of_name(a.out);
	if (wsync_is_dir(a.in))
		return s_from_dir(&a, to < 0 ? WSYNC_KIND_WSYNC : to);
	if ((f = wsync_input_open(a.in, &err)) == NULL)
		cli_die_err(&err);
	if (to < 0)
		to = wsync_file_kind(f) == WSYNC_KIND_WSYNC ?
		    WSYNC_KIND_SAFETENSORS : WSYNC_KIND_WSYNC;
	if (to == S_KIND_DIR && strcmp(a.out, "-") == 0)
		cli_usage_error("a directory cannot go to stdout");
	f = s_cast(f, &a);
	if (to == S_KIND_DIR) {
		if (wsync_file_kind(f) == WSYNC_KIND_WSYNC && wsync_file_verify(f, NULL, NULL,
		    &err) < 0)
			cli_die_err(&err);
		if (wsync_ckpt_write(f, a.out, &(wsync_ckpt_out_t){ .shard_size = a.shard_size },
		    &err) < 0)
			cli_die_err(&err);
		wsync_file_close(&f);
		return 0;
	}
	tree = s_tree(f, &a, to);
	if (to == WSYNC_KIND_WSYNC)
		rc = wsync_tree_write_file(tree, a.out, &err);
	else
		rc = wsync_tree_write_safetensors_file(tree, a.out, &err);
	/* Two tensors whose names split the same way are a layout problem. */
	if (rc < 0 && err.code == EX_DATAERR && to == WSYNC_KIND_WSYNC &&
	    a.layout == LAYOUT_TREE)
		cli_die(err.code, "%s: %s (use --layout flat)", wsync_file_name(f), err.msg);
	if (rc < 0)
		cli_die_err(&err);
	wsync_tree_destroy(&tree);
	wsync_file_close(&f);
	return 0;
}
