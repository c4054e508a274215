/* SPDX-License-Identifier: MIT */
/*
 * Writes the seed corpora of the fuzz harnesses (tests/fuzz/corpus/NAME/)
 * from real inputs: control messages as libclient frames them, with the
 * address and region blobs a running mover hands out (through libmvc, from
 * the mover at SOCKET); ring segments made by shmring_create(); WRITE,
 * LIST and END descriptors with lists laid out as libclient lays them in
 * its arena; traces the importer makes of the slices in tests/data/ and
 * slices of those inputs. tests/fuzz/make_seeds.sh starts the mover and
 * runs it; the output is committed, so this runs only when a format
 * changes:  seeds SOCKET CORPUS_DIR DATA_DIR
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cases.h"
#include "mv_wire.h"
#include "mvc.h"
#include "shmring.h"
#include "trace_format.h"
#include "trace_import.h"

static const char *dir;

static void put(const char *harness, const char *name, const void *a, size_t alen, const void *b,
                size_t blen)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, harness);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%s/%s", dir, harness, name);
	f = fopen(path, "wb");
	if (!f || fwrite(a, 1, alen, f) != alen || (blen && fwrite(b, 1, blen, f) != blen) ||
	    fclose(f)) {
		fprintf(stderr, "seeds: writing %s: %s\n", path, strerror(errno));
		exit(1);
	}
}

/* fuzz_ctlmsg: [nfds][shards | pad][header][payload], as libclient's call() frames it. */
static void msg(const char *name, uint8_t nfds, uint8_t shards, uint16_t type, const void *p,
                size_t len)
{
	uint8_t buf[2 + sizeof(struct mv_msg_hdr) + 8192];
	struct mv_msg_hdr h = {.magic = MV_WIRE_MAGIC,
	                       .version = MV_WIRE_VERSION,
	                       .type = type,
	                       .len = (uint32_t)len,
	                       .seq = 1};

	buf[0] = nfds;
	buf[1] = (uint8_t)(shards - 1);
	memcpy(buf + 2, &h, sizeof(h));
	memcpy(buf + 2 + sizeof(h), p, len);
	put("fuzz_ctlmsg", name, buf, 2 + sizeof(h) + len, NULL, 0);
}

static void ctl_seeds(const void *addr, size_t alen, const void *rblob, size_t rlen)
{
	struct mv_attach_req at = {.nshards = 2};
	struct mv_reg_req reg = {.offset = 0, .len = 1 << 20};
	struct mv_reg_gpu_req gpu = {.gpu = {.kind = MV_GPU_IPC, .alloc_size = 1 << 20},
	                             .len = 1 << 20};
	struct mv_id_req id = {.id = 0x10001};
	struct mv_trace_req tr = {.on = 1, .flags = MV_TRACE_HOPS};
	struct mv_import_req imp = {.peer = 0, .blob_len = (uint32_t)rlen};
	uint8_t ib[offsetof(struct mv_import_req, blob) + sizeof(struct mv_region_blob)];

	msg("hello", 0, 2, MV_MSG_HELLO, NULL, 0);
	msg("attach_2_shards", 6, 2, MV_MSG_ATTACH, &at, sizeof(at));
	at.nshards = 64;
	msg("attach_64_shards", 130, 64, MV_MSG_ATTACH, &at, sizeof(at));
	msg("reg", 1, 2, MV_MSG_REG, &reg, sizeof(reg));
	msg("reg_gpu_ipc", 0, 2, MV_MSG_REG_GPU, &gpu, sizeof(gpu));
	gpu.gpu.kind = MV_GPU_VMM;
	msg("reg_gpu_vmm", 1, 2, MV_MSG_REG_GPU, &gpu, sizeof(gpu));
	msg("dereg", 0, 2, MV_MSG_DEREG, &id, sizeof(id));
	msg("blob", 0, 2, MV_MSG_BLOB, &id, sizeof(id));
	msg("gpu_fd", 0, 2, MV_MSG_GPU_FD, &id, sizeof(id));
	struct mv_host_fd_req hfd = {.id = 0x10001, .nshards = 2, .mover_id = 1};
	msg("host_fd", 0, 2, MV_MSG_HOST_FD, &hfd, sizeof(hfd));
	msg("addr", 0, 2, MV_MSG_ADDR, NULL, 0);
	msg("stats", 0, 2, MV_MSG_STATS, NULL, 0);
	id.id = 0;
	msg("peer_del", 0, 2, MV_MSG_PEER_DEL, &id, sizeof(id));
	msg("unimport", 0, 2, MV_MSG_UNIMPORT, &id, sizeof(id));
	snprintf(tr.path, sizeof(tr.path), "/tmp/mover.trace");
	msg("trace_start", 0, 2, MV_MSG_TRACE, &tr, sizeof(tr));
	tr.on = 0;
	msg("trace_stop", 0, 2, MV_MSG_TRACE, &tr, sizeof(tr));
	msg("peer_add", 0, 2, MV_MSG_PEER_ADD, addr, alen);
	struct mv_publish_req pub = {.region = 0x10001, .name = "kv/prefill-0"};
	struct mv_lookup_req look = {.timeout_ms = 1000, .name = "kv/prefill-0"};
	msg("publish", 0, 2, MV_MSG_PUBLISH, &pub, sizeof(pub));
	msg("unpublish", 0, 2, MV_MSG_UNPUBLISH, &pub, sizeof(pub));
	msg("lookup", 0, 2, MV_MSG_LOOKUP, &look, sizeof(look));
	msg("cluster", 0, 2, MV_MSG_CLUSTER, NULL, 0);
	memcpy(ib, &imp, offsetof(struct mv_import_req, blob));
	memcpy(ib + offsetof(struct mv_import_req, blob), rblob, rlen);
	msg("import", 0, 2, MV_MSG_IMPORT, ib, offsetof(struct mv_import_req, blob) + rlen);
}

/* fuzz_ring: [role][seals][size lo][size hi][script length] then the
 * segment's first 1024 bytes, then the script (see fuzz_ring.c). */
static void ring_seed(const char *name, uint32_t cap, uint32_t slot, uint8_t role,
                      const uint8_t *script, size_t slen)
{
	struct shmring r;
	struct shmring_opts o = {.capacity = cap, .slot_size = slot};
	uint8_t head[5];

	if (shmring_create(&r, &o, SHMRING_PRODUCER)) {
		fprintf(stderr, "seeds: shmring_create: %s\n", shmring_error(&r));
		exit(1);
	}
	uint64_t extra = (uint64_t)cap * slot;
	head[0] = role;
	head[1] = 0; /* sealed as shmring_create seals */
	head[2] = (uint8_t)extra;
	head[3] = (uint8_t)(extra >> 8);
	head[4] = (uint8_t)slen;
	uint8_t seg[SHMRING_SLOTS_OFF + 64];
	memcpy(seg, r.lay, SHMRING_SLOTS_OFF);
	memcpy(seg + SHMRING_SLOTS_OFF, script, slen);
	put("fuzz_ring", name, head, sizeof(head), seg, SHMRING_SLOTS_OFF + slen);
	shmring_close(&r);
}

static void ring_seeds(void)
{
	/* Script ops (fuzz_ring.c): peek/release, reserve/commit, the peer's index. */
	const uint8_t consume[] = {0x00, 3, 0, 0, 0, 0x09, 0x02, 0x00, 16, 0, 0, 0, 0x39, 0x0b};
	const uint8_t produce[] = {0x01, 0x00, 1, 0, 0, 0, 0x19, 0x00, 8, 0, 0, 0, 0xf9};

	ring_seed("sub_ring_consumer", 64, sizeof(struct mv_desc), 0, consume, sizeof(consume));
	ring_seed("comp_ring_producer", 64, sizeof(struct mv_cqe), 1, produce, sizeof(produce));
	ring_seed("small_ring", 4, 16, 0, consume, sizeof(consume));
}

/* fuzz_desc: [struct desc_case] then the arena's bytes (tests/fuzz/cases.h). */
static void desc_seeds(void)
{
	struct desc_case c = {.src_len = 1 << 20, .dst_len = 1 << 20, .owner = 7};
	uint8_t arena[2048] = {0};

	c.d = (struct mv_desc){.op = MV_OP_WRITE, .src = 0x10001, .len = 4096, .dst_off = 8192};
	put("fuzz_desc", "write", &c, sizeof(c), NULL, 0);
	/* A page list of 32 pages (as mvc_write_paged lays it), its second half. */
	struct mv_list_hdr h = {.magic = MV_LIST_MAGIC,
	                        .kind = MV_LIST_PAGES,
	                        .count = 32,
	                        .src_stride = 16384,
	                        .dst_stride = 16384,
	                        .page_size = 16384};
	uint32_t idx[64];
	for (uint32_t i = 0; i < 32; i++) {
		idx[i] = (i * 7) % 64;
		idx[32 + i] = (i * 5) % 64;
	}
	memcpy(arena + 64, &h, sizeof(h));
	memcpy(arena + 128, idx, sizeof(idx));
	c.arena_size = sizeof(arena);
	c.d = (struct mv_desc){.op = MV_OP_LIST, .src_off = 64, .dst_off = 16, .len = 16};
	put("fuzz_desc", "page_list", &c, sizeof(c), arena, sizeof(arena));
	/* A segment list of 3 segments, all of it. */
	memset(arena, 0, sizeof(arena));
	struct mv_list_hdr sh = {.magic = MV_LIST_MAGIC, .kind = MV_LIST_SEGS, .count = 3};
	struct mv_seg sg[3] = {{0, 4096, 100}, {200, 0, 4000}, {65536, 65536, 1 << 16}};
	memcpy(arena, &sh, sizeof(sh));
	memcpy(arena + 64, sg, sizeof(sg));
	c.arena_size = 512;
	c.d = (struct mv_desc){.op = MV_OP_LIST, .src_off = 0, .dst_off = 0, .len = 3};
	put("fuzz_desc", "seg_list", &c, sizeof(c), arena, 512);
	c.d = (struct mv_desc){.op = MV_OP_END, .nparts = 1, .ndesc = 1, .flags = MV_END_IMM};
	put("fuzz_desc", "end", &c, sizeof(c), NULL, 0);
}

/* fuzz_trace and fuzz_import from the public trace slices. */
static void trace_seeds(const char *data)
{
	static const char *in[] = {"azure_conv_50.csv", "mooncake_conv_50.jsonl"};
	struct mvt_model m = {.layers = 32, .heads = 8, .dim = 128, .dtype = 2, .tpp = 16};

	m.page_size = 2 * m.heads * m.dim * m.dtype * m.tpp;
	for (int k = 0; k < 2; k++) {
		char path[512], *buf = NULL, *tbuf = NULL;
		size_t len = 0, tlen = 0;
		snprintf(path, sizeof(path), "%s/%s", data, in[k]);
		FILE *f = fopen(path, "r");
		if (!f) {
			fprintf(stderr, "seeds: %s: %s\n", path, strerror(errno));
			exit(1);
		}
		FILE *mem = open_memstream(&buf, &len);
		int c;
		while ((c = fgetc(f)) != EOF)
			fputc(c, mem);
		fclose(mem);
		rewind(f);
		/* The importer's input: format byte (0 azure, 1 mooncake), then text. */
		uint8_t fmt = (uint8_t)k;
		size_t cut = len;
		while (cut > 4000)
			cut = (size_t)(memrchr(buf, '\n', cut - 1) - (void *)buf) + 1;
		put("fuzz_import", k ? "mooncake_head" : "azure_head", &fmt, 1, buf, cut);
		FILE *out = tmpfile();
		struct mvt_import_totals t;
		char err[512];
		if (mvt_import_stream(!k, in[k], f, "trace", out, &m, 40, &t, err, sizeof(err))) {
			fprintf(stderr, "seeds: %s\n", err);
			exit(1);
		}
		fseek(out, 0, SEEK_END);
		tlen = (size_t)ftell(out);
		tbuf = malloc(tlen);
		rewind(out);
		if (fread(tbuf, 1, tlen, out) != tlen)
			exit(1);
		fclose(out);
		put("fuzz_trace", k ? "mooncake_import" : "azure_import", tbuf, tlen, NULL, 0);
		/* A captured-style trace: the same records with hops after each. */
		struct mv_trace_hdr hdr;
		memcpy(&hdr, tbuf, sizeof(hdr));
		hdr.nshards = 2;
		hdr.mover_id = 0x1234;
		snprintf(hdr.provider, sizeof(hdr.provider), "tcp;ofi_rxm");
		uint8_t cap[128 + 2 * 10 * 64];
		size_t n = 0;
		memcpy(cap, &hdr, sizeof(hdr));
		n = sizeof(hdr);
		for (int i = 0; i < 10; i++) {
			struct mv_trace_rec r;
			memcpy(&r, tbuf + sizeof(hdr) + (size_t)i * 64, 64);
			r.complete_ns = r.submit_ns + 50000;
			r.nparts = 2;
			r.shard_mask = 3;
			memcpy(cap + n, &r, 64);
			n += 64;
			struct mv_trace_hops hp = {.type = MV_TR_HOPS,
			                           .submit_ns = r.submit_ns,
			                           .taken_ns = r.submit_ns + 1000,
			                           .posted_ns = r.submit_ns + 2000,
			                           .data_ns = r.submit_ns + 40000,
			                           .complete_ns = r.complete_ns};
			memcpy(cap + n, &hp, 64);
			n += 64;
		}
		put("fuzz_trace", k ? "mooncake_hops" : "azure_hops", cap, n, NULL, 0);
		fclose(f);
		free(buf);
		free(tbuf);
	}
}

/* fuzz_take: [struct take_case][descriptors][arena] (tests/fuzz/cases.h),
 * batches as libclient writes them on a one-shard mover. */

static void take_seed(const char *name, struct take_case c, const struct mv_desc *d, size_t nd,
                      const void *arena, size_t alen)
{
	uint8_t buf[sizeof(c) + 16 * sizeof(*d) + 4096];
	size_t n = 0;

	c.ndesc = (uint8_t)nd;
	memcpy(buf, &c, sizeof(c));
	n = sizeof(c);
	memcpy(buf + n, d, nd * sizeof(*d));
	n += nd * sizeof(*d);
	memcpy(buf + n, arena, alen);
	put("fuzz_take", name, buf, n + alen, NULL, 0);
}

static void take_seeds(void)
{
	struct take_case c = {.src_size = 2, .dst_size = 2, .virt = 1, .arena_kb = 64, .iov = 3};
	const uint32_t src = (1u << 16) | 1u;
	/* mvc_write x2 then mvc_write_imm: two WRITEs and an END with IMM. */
	struct mv_desc w[3] = {
	    {.op = MV_OP_WRITE, .batch = 3, .src = src, .dst = 0, .len = 4096},
	    {.op = MV_OP_WRITE,
	     .batch = 3,
	     .src = src,
	     .dst = 0,
	     .src_off = 4096,
	     .dst_off = 4096,
	     .len = 8192},
	    {.op = MV_OP_END,
	     .flags = MV_END_IMM,
	     .nparts = 1,
	     .batch = 3,
	     .src = MV_TK_WRITE | MV_TK_IMM,
	     .dst = 0,
	     .src_off = 2,
	     .len = 12288,
	     .cookie = 77,
	     .imm = 5,
	     .ndesc = 2},
	};
	take_seed("writes_imm", c, w, 3, NULL, 0);
	/* mvc_write_paged of 32 pages by reference: a LIST and its END. */
	uint8_t arena[4096] = {0};
	struct mv_list_hdr h = {.magic = MV_LIST_MAGIC,
	                        .kind = MV_LIST_PAGES,
	                        .count = 32,
	                        .src_stride = 16384,
	                        .dst_stride = 16384,
	                        .page_size = 16384};
	uint32_t idx[64];
	for (uint32_t i = 0; i < 32; i++) {
		idx[i] = i < 16 ? i : (i * 7) % 64;
		idx[32 + i] = i < 16 ? i : (i * 5) % 64;
	}
	memcpy(arena, &h, sizeof(h));
	memcpy(arena + 64, idx, sizeof(idx));
	struct mv_desc l[2] = {
	    {.op = MV_OP_LIST,
	     .batch = 9,
	     .src = src,
	     .dst = 0,
	     .src_off = 0,
	     .dst_off = 0,
	     .len = 32},
	    {.op = MV_OP_END,
	     .nparts = 1,
	     .batch = 9,
	     .src = MV_TK_PAGED,
	     .src_off = 32,
	     .dst_off = 16384,
	     .len = 32 * 16384,
	     .cookie = 78,
	     .ndesc = 1},
	};
	take_seed("page_list", c, l, 2, arena, 64 + sizeof(idx));
	/* mvc_writev by reference: a segment list, one write failing. */
	memset(arena, 0, sizeof(arena));
	struct mv_list_hdr sh = {.magic = MV_LIST_MAGIC, .kind = MV_LIST_SEGS, .count = 20};
	struct mv_seg sg[20];
	for (int i = 0; i < 20; i++)
		sg[i] = (struct mv_seg){(uint64_t)i * 5000, (uint64_t)i * 4096, 3000 + (uint64_t)i};
	memcpy(arena, &sh, sizeof(sh));
	memcpy(arena + 64, sg, sizeof(sg));
	l[0] = (struct mv_desc){
	    .op = MV_OP_LIST, .batch = 1, .src = src, .dst = 0, .src_off = 0, .len = 20};
	l[1] = (struct mv_desc){.op = MV_OP_END,
	                        .nparts = 1,
	                        .batch = 1,
	                        .src = MV_TK_WRITEV,
	                        .src_off = 20,
	                        .cookie = 79,
	                        .ndesc = 1};
	c.fail = 2;
	take_seed("seg_list_one_fails", c, l, 2, arena, 64 + sizeof(sg));
	/* A batch striped over two shards, its other part never coming. */
	c.fail = 0;
	w[2].nparts = 2;
	w[2].flags = 0;
	take_seed("two_parts", c, w, 3, NULL, 0);
	/* Two shards: a write striped over both, each part with its END. */
	uint8_t buf[sizeof(c) + 32 + 4 * sizeof(struct mv_desc)] = {0};
	struct mv_desc st[4] = {
	    {.op = MV_OP_WRITE, .batch = 5, .src = src, .len = 65536},
	    {.op = MV_OP_END,
	     .nparts = 2,
	     .batch = 5,
	     .src = MV_TK_WRITE,
	     .src_off = 1,
	     .len = 131072,
	     .cookie = 80,
	     .ndesc = 1},
	    {.op = MV_OP_WRITE,
	     .batch = 5,
	     .src = src,
	     .src_off = 65536,
	     .dst_off = 65536,
	     .len = 65536},
	    {.op = MV_OP_END,
	     .flags = MV_END_IMM,
	     .nparts = 2,
	     .batch = 5,
	     .src = MV_TK_WRITE,
	     .src_off = 1,
	     .len = 131072,
	     .cookie = 80,
	     .imm = 9,
	     .ndesc = 1},
	};
	c.virt = 3;
	c.ndesc = 4;
	memcpy(buf, &c, sizeof(c));
	buf[sizeof(c)] = 0x0c; /* descriptors 2 and 3 to shard 1 */
	memcpy(buf + sizeof(c) + 32, st, sizeof(st));
	put("fuzz_take", "two_shards_striped", buf, sizeof(buf), NULL, 0);
}

int main(int argc, char **argv)
{
	struct mvc *c;
	struct mvc_mem mem;
	uint8_t addr[8192], blob[8192];
	size_t alen = sizeof(addr), blen = sizeof(blob);
	int ret;

	if (argc != 4) {
		fprintf(stderr, "usage: seeds SOCKET CORPUS_DIR DATA_DIR\n");
		return 2;
	}
	dir = argv[2];
	setenv("MOVER_SOCKET", argv[1], 1);
	if ((ret = mvc_connect(&c, NULL)) || (ret = mvc_alloc(c, 1 << 20, &mem)) ||
	    (ret = mvc_address(c, addr, &alen)) ||
	    (ret = mvc_region_blob(c, mem.region, blob, &blen))) {
		fprintf(stderr, "seeds: the mover at %s: %s\n", argv[1], mvc_connect_error());
		return 1;
	}
	ctl_seeds(addr, alen, blob, blen);
	uint8_t sel = 0;
	put("fuzz_blob", "addr_blob", &sel, 1, addr, alen);
	sel = 1;
	put("fuzz_blob", "region_blob", &sel, 1, blob, blen);
	mvc_free(c, &mem);
	mvc_disconnect(c);
	ring_seeds();
	desc_seeds();
	take_seeds();
	trace_seeds(argv[3]);
	return 0;
}
