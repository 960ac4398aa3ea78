# ngx_http_idem_module: build against Debian's nginx-dev, run, test.
#
#   make          build build/ngx_http_idem_module.so
#   make run      start the quickstart gateway on 127.0.0.1:8080 (Ctrl-C stops)
#   make test     run the whole Test::Nginx suite with prove
#   make bench    wrk: plain proxy_pass vs idem, records, dedupe (ratios);
#                 dedupe on one Redis vs a 3-master Redis Cluster
#   make asan     the suite with an ASan/UBSan build of the module
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

.PHONY: all deps run test asan bench clean

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
	@util/bench-cluster.sh

# the suite again, with the module built with AddressSanitizer and UBSan
asan: deps
	@util/asan.sh

clean:
	rm -rf $(BUILD) $(CURDIR)/build-asan t/servroot*
