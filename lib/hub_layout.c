/* hub_layout.c - where each tensor's data lies in a version: what a client needs to fetch a selection. */
#include "hub_int.h"

int
hub_op_layout(wsync_hub_t *h, struct hub_req *r, wsync_err_t *err)
{
	char model[WSYNC_MAX_MODEL + 1];
	const wsync_version_t *v;
	wsync_file_t *f;
	wsync_enc_t e;

	if ((v = hub_read_version(h, r, model, err)) == NULL)
		return -1;
	/* Listing a mapped version reads the pages of its headers only, not its data. */
	if ((f = wsync_file_open_fd(v->fd, model, err)) == NULL)
		return -1;
	hub_ok(&e, r->id, 1);
	wsync_enc_str(&e, "tensors");
	msgpack_pack_array(&e.pk, wsync_file_count(f));
	for (size_t i = 0; i < wsync_file_count(f); i++) {
		const wsync_tensor_t *t = wsync_file_tensor(f, i);
		msgpack_pack_array(&e.pk, 3);
		wsync_enc_str(&e, t->path);
		msgpack_pack_uint64(&e.pk, t->offset);
		msgpack_pack_uint64(&e.pk, t->nbytes);
	}
	wsync_file_close(&f);
	hub_reply(h, r, &e);
	return 0;
}
