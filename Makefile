# ngx_http_idem_module: build against Debian's nginx-dev, run, test.
#
#   make          build build/ngx_http_idem_module.so
#   make run      start the quickstart gateway on 127.0.0.1:8080 (Ctrl-C stops)
#   make test     run the whole Test::Nginx suite with prove
#   make bench    wrk: plain proxy_pass vs idem, records, dedupe (ratios)
#   make asan     the suite with an ASan/UBSan build of the module
#   make fuzz     the libFuzzer targets (fuzz/), FUZZ_SECONDS each
#   make deps     install what is missing (Debian packages)

SHELL       := /bin/bash
NGINX_SRC   ?= /usr/share/nginx/src
NGINX_BIN   ?= /usr/sbin/nginx
BUILD       := $(CURDIR)/build
MODULE      := $(BUILD)/ngx_http_idem_module.so
ECHO_MODULE ?= /usr/lib/nginx/modules/ngx_http_echo_module.so
SOURCES     := $(wildcard ngx_idem_module/*.c ngx_idem_module/*.h)

# Debian's own flags for nginx (nginx -V); configure adds -Werror
DEB_CFLAGS  := -g -O2 -fstack-protector-strong -Wformat \
               -Werror=format-security -fPIC -Wdate-time -D_FORTIFY_SOURCE=2
# extra compiler flags, e.g. IDEM_CFLAGS=-fsanitize=address (see make asan)
IDEM_CFLAGS ?=

# libFuzzer targets (fuzz/): clang with ASan and UBSan, seeds in fuzz/corpus
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 8
FUZZ_TARGETS ?= call_id deadline retry_after answer status redis_reply
FUZZ_BUILD   := $(BUILD)/fuzz
FUZZ_COMMON  := fuzz/ngx_http_idem_fuzz.c fuzz/ngx_http_idem_fuzz_core.c
FUZZ_CFLAGS  := -g -O1 -fno-omit-frame-pointer \
                -fsanitize=fuzzer,address,undefined \
                -fno-sanitize-recover=all -Wall -Wno-unused-function -Werror
FUZZ_INCS    := $(addprefix -I $(NGINX_SRC)/src/,core event event/modules \
                    os/unix http http/modules http/v2) \
                -I ngx_idem_module -I fuzz -I $(BUILD)
FUZZ_LIBS    := -lhiredis -luuid -lcrypto -lpcre2-8

.PHONY: all deps run test asan bench fuzz fuzz-build clean

all: $(MODULE)

deps:
	@util/deps.sh

# configure is slow (~20 s): re-run it only when config changes
$(BUILD)/Makefile: config
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

run: deps $(MODULE)
	@util/run.sh

test: deps $(MODULE)
	@util/test.sh

# wrk, side by side: plain proxy_pass, idem on, + idem_record, + idem_dedupe
bench: deps $(MODULE)
	@util/bench.sh

# the suite again, with the module built with AddressSanitizer and UBSan
asan: deps
	@util/asan.sh

# each target FUZZ_SECONDS over its seeds; any crash, leak or report fails
fuzz: fuzz-build
	@FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) \
	    util/fuzz.sh $(FUZZ_TARGETS)

fuzz-build:
	@IDEM_FUZZ=1 util/deps.sh
	@$(MAKE) --no-print-directory $(addprefix $(FUZZ_BUILD)/,$(FUZZ_TARGETS))

$(FUZZ_BUILD)/%: fuzz/ngx_http_idem_fuzz_%.c $(FUZZ_COMMON) fuzz/*.h \
                 $(SOURCES) $(BUILD)/Makefile
	@mkdir -p $(FUZZ_BUILD)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_INCS) -o $@ $< $(FUZZ_COMMON) $(FUZZ_LIBS)

clean:
	rm -rf $(BUILD) $(CURDIR)/build-asan t/servroot*
