/* SPDX-License-Identifier: MIT */
/*
 * families.h -- the configs the driver (bench.c) runs: one entry point per
 * config file, each depending only on harness.h.
 */
#ifndef SEDA_BENCH_FAMILIES_H
#define SEDA_BENCH_FAMILIES_H

#include <stdbool.h>


void bench_floors(void);
void bench_capacity(const char *config, bool lua);   /* cap1, cap8,
                                          cap1_smooth, cap1_table */
void bench_firehose(const char *config, bool lua);   /* seq, par, chan */
void bench_reload(void);
void bench_overload(bool lua);                       /* cap1 at 1.5, shed */
void bench_overload_slow(bool lua, double tick);     /* ... 100 us handler */
void bench_admit(void);                              /* admit rule cost */
void bench_codec(void);
void bench_pipeline(void);
void bench_memory(void);
void bench_count(void);       /* count: the C runtime's hand-off rate */
void bench_fanout(void);      /* fanout: handlers publishing (loans) */
/* durable1, durable_batch, durable_pipeline */
void bench_durable(const char *config);
void bench_durable_group(void);
/* remote (and remote_raw rows): remote stages over a private nats-server;
 * and the consumer process it starts (seda-bench --remote-consumer). */
void bench_remote(void);
int bench_remote_consumer(int argc, char **argv);
int bench_raw_consumer(int argc, char **argv);
/* io: a Lua handler's HTTP GET to a 5 ms upstream (nginx + echo), against
 * LuaSocket and OpenResty (nginx + ngx_http_lua, driven by wrk). */
void bench_io(void);

#endif /* SEDA_BENCH_FAMILIES_H */
