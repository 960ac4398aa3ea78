# ngx_http_idem_module: build against Debian's nginx-dev, run, test.
#
#   make          build build/ngx_http_idem_module.so
#   make run      start the quickstart gateway on 127.0.0.1:8080 (Ctrl-C
#                 stops); PORT, BACKEND_PORT, REDIS_PORT move it, EXAMPLE=
#                 dedupe (any file of conf-examples/) runs that example
#   make test     run the whole Test::Nginx suite with prove
#   make test NGINX=1.30.4   the same against nginx.org's nginx 1.30.4, built
#                 once with both modules from ../shared/nginx-src into
#                 build/nginx-1.30.4/ (NGINX=stable, NGINX=mainline: the
#                 newest there); skipped with a message without that folder
#   make bench    wrk: plain proxy_pass vs idem, records, dedupe (ratios);
#                 dedupe on one Redis vs a 3-master Redis Cluster
#   make bench-wait  a duplicate that waits (idem_dedupe_wait): latency
#                 after its owner's answer, Redis commands per duplicate
#   make storm    a retry storm: attempts with no budget, a budget, a breaker
#   make resend-storm  one client resending 50 ids in a loop beside 20
#                 well-behaved ones, without and with idem_resend_limit
#   make chaos    Redis failovers under load on a dedupe and a durable route
#                 (CHAOS_REDIS=cluster: on a Redis Cluster, not Sentinel):
#                 executions per call id (CHAOS_SECONDS, 90 by default)
#   make nginx-tests NGINX_TESTS=/path/to/nginx-tests
#                 nginx's own suite, without and with "idem on"
#   make asan     the suite with an ASan/UBSan build of the module
#   make valgrind a few files that cover a whole call, under valgrind
#   make fuzz     the libFuzzer targets (fuzz/), FUZZ_SECONDS each, on
#                 nginx's own objects built once from ../shared/nginx-src
#                 (skipped with a message without that folder)
#   make deps     install what is missing (Debian packages) for all targets
#   make deps-run only what make and make run need
#   make deb      build/deb/libnginx-mod-http-idem_<version>_<arch>.deb
#   make install  the module, mod-http-idem.conf, docs (DESTDIR, as the .deb)
#   make test-deb build the package, lintian, autopkgtest, purge

SHELL       := /bin/bash
NGINX_SRC   ?= /usr/share/nginx/src
NGINX_BIN   ?= /usr/sbin/nginx
BUILD       := $(CURDIR)/build
MODULE      := $(BUILD)/ngx_http_idem_module.so
ECHO_MODULE ?= /usr/lib/nginx/modules/ngx_http_echo_module.so
SOURCES     := $(shell find ngx_idem_module -name '*.[ch]')
# the store's scripts: config makes a header of them, so configure again
LUA         := $(wildcard ngx_idem_module/store/redis/lua/*.lua)

# Debian's own flags for nginx (nginx -V); configure adds -Werror
DEB_CFLAGS  := -g -O2 -fstack-protector-strong -Wformat \
               -Werror=format-security -fPIC -Wdate-time -D_FORTIFY_SOURCE=2
# extra compiler flags, e.g. IDEM_CFLAGS=-fsanitize=address (see make asan)
IDEM_CFLAGS ?=
# an nginx.org version to test against instead of Debian's (util/test.sh)
NGINX       ?=

# libFuzzer targets (fuzz/): clang with ASan and UBSan, seeds in fuzz/corpus,
# linked with nginx's own objects, built once by fuzz/nginx.sh from
# ../shared/nginx-src into build/fuzz-nginx-<version>/ (FUZZ_NGINX)
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 6
FUZZ_TARGETS ?= call_id call_id_json deadline retry_after answer record status \
                resolution redis_reply redis_cluster otel_response
FUZZ_BUILD   := $(BUILD)/fuzz
FUZZ_NGINX   ?=
FUZZ_COMMON  := fuzz/ngx_http_idem_fuzz.c
FUZZ_SOURCES := $(shell find ngx_idem_module -name '*.[ch]' -o -name '*.lua')
FUZZ_CFLAGS  := -g -O1 -fno-omit-frame-pointer \
                -fsanitize=fuzzer,address,undefined \
                -fno-sanitize-recover=all -Wall -Wno-unused-function -Werror
# the module's folders (the store's and Redis's, where they exist), then the
# Lua scripts' header, made by config (copied alone: build/ has Debian's
# ngx_auto_config.h too)
FUZZ_INCS    := -I $(FUZZ_NGINX)/objs \
                $(addprefix -I $(FUZZ_NGINX)/src/src/,core event \
                    event/modules os/unix http http/modules http/v2) \
                -I ngx_idem_module -I ngx_idem_module/store \
                -I ngx_idem_module/store/redis -I fuzz -I $(FUZZ_BUILD)/include
# what needs a running event loop or a configured server (fuzz/*.c says)
FUZZ_WRAP    := -Wl,--wrap=ngx_http_finalize_request \
                -Wl,--wrap=ngx_http_core_run_phases
FUZZ_LIBS    := -lhiredis -luuid -ljson-c
# fuzz/nginx.sh prints the folder of nginx's objects; exit 2: skipped
FUZZ_NGINX_SH = rc=0; nginx=$$(fuzz/nginx.sh) || rc=$$?; \
                case $$rc in 0) ;; 2) exit 0 ;; *) exit 1 ;; esac

# make install: the paths of Debian's nginx modules (dh_nginx), as the
# package has them; IDEM_ENABLE=no leaves modules-enabled/ alone (the
# package's postinst makes that link itself)
DESTDIR     ?=
IDEM_ENABLE ?= yes
MODULES_DIR := /usr/lib/nginx/modules
MODCONF_DIR := /usr/share/nginx/modules-available
ENABLED_DIR := /etc/nginx/modules-enabled
DOC_DIR     := /usr/share/doc/libnginx-mod-http-idem

.PHONY: all deps deps-run run test asan valgrind bench bench-wait redis-cost fuzz fuzz-build clean deb \
        install test-deb storm resend-storm chaos

all: $(MODULE)

deps:
	@util/deps.sh

# make run needs no test tools (chromium, grpcio, ...)
deps-run:
	@util/deps.sh run

# configure is slow (~20 s): re-run it only when config changes
$(BUILD)/Makefile: config $(LUA)
	@test -d $(NGINX_SRC) || { echo "no $(NGINX_SRC): run 'make deps'"; exit 1; }
	mkdir -p $(BUILD)
	cd $(NGINX_SRC) && . ./conf_flags && \
	    ./configure "$${NGX_CONF_FLAGS[@]}" \
	        --with-cc-opt="$(DEB_CFLAGS) $(IDEM_CFLAGS)" --with-ld-opt="$(IDEM_CFLAGS)" \
	        --add-dynamic-module=$(CURDIR) --builddir=$(BUILD) \
	        > $(BUILD)/configure.log 2>&1 \
	    || { tail -20 $(BUILD)/configure.log; exit 1; }

$(MODULE): $(BUILD)/Makefile $(SOURCES)
	$(MAKE) -f $(BUILD)/Makefile -C $(NGINX_SRC) modules

# make run PORT=8080 BACKEND_PORT=8081 REDIS_PORT=6380 EXAMPLE=quickstart
run: deps-run $(MODULE)
	@PORT=$(PORT) BACKEND_PORT=$(BACKEND_PORT) REDIS_PORT=$(REDIS_PORT) \
	    EXAMPLE=$(EXAMPLE) util/run.sh

# nginx's own tests (a checkout of nginx/nginx-tests outside this tree):
# the ones that fail only with "idem on"
.PHONY: nginx-tests
nginx-tests: deps $(MODULE)
	@util/nginx-tests.sh

ifeq ($(NGINX),)
test: deps $(MODULE)
	@util/test.sh
else
test: deps
	@NGINX=$(NGINX) util/test.sh
endif

# wrk, side by side: plain, plain with the same headers, idem, records,
# dedupe and an OpenResty peer (bench/bench.sh says how)
bench: deps $(MODULE)
	@bench/bench.sh
	@bench/redis-cost.sh
	@bench/bench-cluster.sh
	@bench/bench-wait.pl

# idem_dedupe_wait: a waiting duplicate's answer after its owner's, on the
# same gateway and another one, and its Redis commands
bench-wait: deps $(MODULE)
	@bench/bench-wait.pl

# what a recorded and a dedupe call cost an idle Redis: their commands,
# taken with MONITOR, replayed for new call ids
redis-cost: deps $(MODULE)
	@bench/redis-cost.sh

# an upstream that answers 503 to all: what the budget and the breaker save
storm: deps $(MODULE)
	@bench/storm.sh

# one client's resend storm on a dedupe route that waits, with and without
# idem_resend_limit: the others' p99 and 409s (bench/resend-storm.pl)
resend-storm: deps $(MODULE)
	@bench/resend-storm.pl

# Sentinel failovers, paused and restarted Redis, a killed worker, under
# load: no call id of a durable route may run twice (bench/chaos.pl)
chaos: deps $(MODULE)
	@bench/chaos.pl

# the suite again, with the module built with AddressSanitizer and UBSan
asan: deps
	@util/asan.sh

# the files that cover each part of a call, under valgrind (memcheck);
# any report fails them (TEST_NGINX_USE_VALGRIND=1 make test: all of t/)
VALGRIND_TESTS ?= t/010-call-id.t t/060-records.t t/100-dedupe.t \
                  t/119-resend-limit.t t/122-dedupe-paths.t \
                  t/170-unknown-stream.t t/175-timeline.t
valgrind: deps $(MODULE)
	@TEST_NGINX_USE_VALGRIND=1 util/deps.sh
	@TEST_NGINX_USE_VALGRIND=1 util/test.sh $(VALGRIND_TESTS)

# each target FUZZ_SECONDS over its seeds; any crash, leak or report fails;
# skipped with a message without ../shared/nginx-src
fuzz:
	@IDEM_FUZZ=1 util/deps.sh
	@$(FUZZ_NGINX_SH); \
	$(MAKE) --no-print-directory FUZZ_NGINX=$$nginx \
	    $(addprefix $(FUZZ_BUILD)/,$(FUZZ_TARGETS)) && \
	FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) \
	    util/fuzz.sh $(FUZZ_TARGETS)

fuzz-build:
	@IDEM_FUZZ=1 util/deps.sh
	@$(FUZZ_NGINX_SH); \
	$(MAKE) --no-print-directory FUZZ_NGINX=$$nginx \
	    $(addprefix $(FUZZ_BUILD)/,$(FUZZ_TARGETS))

$(FUZZ_BUILD)/include/ngx_http_idem_redis_lua.h: $(BUILD)/Makefile
	@mkdir -p $(FUZZ_BUILD)/include
	cp $(BUILD)/ngx_http_idem_redis_lua.h $@

$(FUZZ_BUILD)/%: fuzz/ngx_http_idem_fuzz_%.c $(FUZZ_COMMON) fuzz/*.h \
                 $(FUZZ_SOURCES) $(FUZZ_NGINX)/libnginx.a \
                 $(FUZZ_BUILD)/include/ngx_http_idem_redis_lua.h
	@test -n "$(FUZZ_NGINX)" || { echo "run make fuzz-build"; exit 1; }
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_INCS) -o $@ $< $(FUZZ_COMMON) \
	    $(FUZZ_WRAP) $(FUZZ_NGINX)/libnginx.a $(FUZZ_LIBS) \
	    $$(cat $(FUZZ_NGINX)/libs)

# the Debian package, from a copy of this tree in build/deb/; installs its
# build dependencies (debian/control) when they are missing
deb:
	@util/deb.sh

install: $(MODULE)
	install -d $(DESTDIR)$(MODULES_DIR) $(DESTDIR)$(MODCONF_DIR) \
	    $(DESTDIR)$(DOC_DIR)/examples
	install -m 644 $(MODULE) $(DESTDIR)$(MODULES_DIR)/
	echo 'load_module modules/ngx_http_idem_module.so;' \
	    > $(DESTDIR)$(MODCONF_DIR)/mod-http-idem.conf
	chmod 644 $(DESTDIR)$(MODCONF_DIR)/mod-http-idem.conf
	install -m 644 README.md $(DESTDIR)$(DOC_DIR)/
	install -d $(DESTDIR)$(DOC_DIR)/docs
	install -m 644 docs/*.md $(DESTDIR)$(DOC_DIR)/docs/
	install -m 644 conf-examples/*.conf $(DESTDIR)$(DOC_DIR)/examples/
	install -m 644 conf-examples/prometheus/idem-rules.yml \
	    $(DESTDIR)$(DOC_DIR)/examples/
ifeq ($(IDEM_ENABLE),yes)
	install -d $(DESTDIR)$(ENABLED_DIR)
	ln -sfn $(MODCONF_DIR)/mod-http-idem.conf \
	    $(DESTDIR)$(ENABLED_DIR)/50-mod-http-idem.conf
endif

# make deb, lintian, autopkgtest (debian/tests: a call through this
# machine's nginx on 127.0.0.1:6090, recorded in Redis on 6091), dpkg -i
# again, dpkg --purge
test-deb:
	@IDEM_DEB=1 util/deps.sh
	@util/test-deb.sh

clean:
	rm -rf $(BUILD) $(CURDIR)/build-asan t/servroot* t/tmp
